#include "onnx/pb_check.h"

typedef struct walker {
    const uint8_t *base;
    int max_depth;
} walker;

static sg_status read_varint(const walker *w, const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end)
            return sg_error(SEGRT_ERROR_INVALID_MODEL,
                            "truncated or corrupt protobuf: a varint at byte %zu runs past its end",
                            (size_t)(*p - w->base));
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return SEGRT_OK;
        }
    }
    return sg_error(SEGRT_ERROR_INVALID_MODEL, "corrupt protobuf: varint longer than 10 bytes at byte %zu",
                    (size_t)(*p - w->base));
}

static sg_status walk(const walker *w, const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                      const uint8_t *end, int depth)
{
    if (depth > w->max_depth)
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "protobuf messages nest deeper than %d levels at byte %zu", w->max_depth,
                        (size_t)(p - w->base));
    while (p < end) {
        const uint8_t *field_start = p;
        uint64_t key = 0;
        SG_TRY(read_varint(w, &p, end, &key));
        uint32_t wire = (uint32_t)(key & 7);
        uint64_t number = key >> 3;
        if (number == 0)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "corrupt protobuf: field number 0 at byte %zu",
                            (size_t)(field_start - w->base));
        size_t left = (size_t)(end - p);
        switch (wire) {
        case 0: { /* varint */
            uint64_t ignored = 0;
            SG_TRY(read_varint(w, &p, end, &ignored));
            break;
        }
        case 1: /* 64-bit */
            if (left < 8)
                return sg_error(SEGRT_ERROR_INVALID_MODEL,
                                "truncated protobuf: a 64-bit field at byte %zu runs past the end",
                                (size_t)(field_start - w->base));
            p += 8;
            break;
        case 5: /* 32-bit */
            if (left < 4)
                return sg_error(SEGRT_ERROR_INVALID_MODEL,
                                "truncated protobuf: a 32-bit field at byte %zu runs past the end",
                                (size_t)(field_start - w->base));
            p += 4;
            break;
        case 2: { /* length-delimited: bytes, string, packed array or a message */
            uint64_t len = 0;
            SG_TRY(read_varint(w, &p, end, &len));
            if (len > (uint64_t)(end - p))
                return sg_error(SEGRT_ERROR_INVALID_MODEL,
                                "truncated protobuf: field %llu at byte %zu declares %llu bytes, "
                                "%zu remain",
                                (unsigned long long)number, (size_t)(field_start - w->base),
                                (unsigned long long)len, (size_t)(end - p));
            const ProtobufCFieldDescriptor *f =
                number <= UINT32_MAX && desc
                    ? protobuf_c_message_descriptor_get_field(desc, (unsigned)number)
                    : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE)
                SG_TRY(walk(w, (const ProtobufCMessageDescriptor *)f->descriptor, p, p + len,
                            depth + 1));
            p += len;
            break;
        }
        default:
            /* Groups (3, 4) are proto2 relics ONNX never uses; 6 and 7 do
             * not exist. */
            return sg_error(SEGRT_ERROR_INVALID_MODEL,
                            "corrupt protobuf: wire type %u at byte %zu", wire,
                            (size_t)(field_start - w->base));
        }
    }
    return SEGRT_OK;
}

sg_status sg_pb_check(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t size,
                      int max_depth)
{
    walker w = {data, max_depth};
    return walk(&w, desc, data, data + size, 0);
}
