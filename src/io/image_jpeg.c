/* JPEG through the libjpeg API (libjpeg-turbo on Debian): 8-bit grey or
 * RGB out. Errors leave through an error_exit that longjmps back, and no
 * message is printed. */
#include "io/image.h"

#include <stdio.h> /* jpeglib.h needs FILE */

#include <jpeglib.h>
/* After jpeglib.h: which messages exist depends on its configuration. */
#include <jerror.h>
#include <limits.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

/* A progressive JPEG may hold any number of scans, each a full pass over
 * the coefficients; hostile files use that to take minutes. Real encoders
 * write at most a few dozen (libjpeg-turbo's own tools suggest 500). */
#define JPEG_MAX_SCANS 500

/* A Huffman-coded JPEG spends at least one bit on each 8x8 block of each
 * component: its DC coefficient's code (JPEG's Huffman codes are 1 to 16
 * bits), in the first scan of a progressive file as in a baseline one. So
 * a file of n bytes holds at most 8n blocks; one that claims more is
 * refused before the pixels are allocated (libjpeg would allocate them and
 * then fill a lie with grey). An arithmetic-coded file has no such bound
 * (its coder spends a small fraction of a bit on a likely decision), so it
 * gets the fixed ratio SG_IMAGE_UNBOUNDED_RATIO of pixel bytes to file
 * bytes; real ones compress a tenth better than Huffman ones. */
#define JPEG_BLOCKS_PER_BYTE 8

typedef struct jpeg_job {
    struct jpeg_error_mgr err; /* first: libjpeg hands back cinfo->err */
    struct jpeg_progress_mgr progress;
    jmp_buf jump;
    int code; /* libjpeg's message code of the failure; 0 for segrt's own */
    char msg[JMSG_LENGTH_MAX];
} jpeg_job;

static void fail(j_common_ptr cinfo, int code, const char *msg)
{
    jpeg_job *job = (jpeg_job *)cinfo->err;
    job->code = code;
    sg_image_one_line(job->msg, sizeof job->msg, msg);
    longjmp(job->jump, 1);
}

static void on_error_exit(j_common_ptr cinfo)
{
    char msg[JMSG_LENGTH_MAX];
    cinfo->err->format_message(cinfo, msg);
    fail(cinfo, cinfo->err->msg_code, msg);
}

/* Warnings where data is missing or corrupt end the read: libjpeg would
 * go on and fill the rest of the image with grey, and a network would
 * then segment that grey. Other warnings, and trace messages, are
 * ignored. */
static void on_emit_message(j_common_ptr cinfo, int level)
{
    if (level >= 0)
        return;
    switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
#if JPEG_LIB_VERSION >= 70 || defined(C_ARITH_CODING_SUPPORTED) || defined(D_ARITH_CODING_SUPPORTED)
    case JWRN_ARITH_BAD_CODE:
#endif
    case JWRN_MUST_RESYNC:
        on_error_exit(cinfo);
        break;
    default:
        break;
    }
}

static void on_progress(j_common_ptr cinfo)
{
    if (cinfo->is_decompressor && ((j_decompress_ptr)cinfo)->input_scan_number > JPEG_MAX_SCANS)
        fail(cinfo, 0, "more than 500 scans (a hostile progressive file?)");
}

static sg_status unsupported(const char *name, const char *what)
{
    return sg_error(SEGRT_ERROR_UNSUPPORTED, "%s: %s JPEG files are not supported", name, what);
}

/* The 8x8 blocks the file codes: each component's, at its sampling, as
 * libjpeg counts them once it has read the header. */
static uint64_t coded_blocks(const struct jpeg_decompress_struct *cinfo)
{
    uint64_t blocks = 0;
    for (int c = 0; c < cinfo->num_components; c++)
        blocks += (uint64_t)cinfo->comp_info[c].width_in_blocks * cinfo->comp_info[c].height_in_blocks;
    return blocks;
}

/* The checks made after the header and before the pixels are allocated:
 * the pixel cap, then what the file's bytes can decode to. */
static sg_status check_header(const struct jpeg_decompress_struct *cinfo, size_t n, const char *name,
                              int32_t channels, uint64_t max_bytes, sg_image_info *info)
{
    SG_TRY(sg_image_check_dims(cinfo->image_width, cinfo->image_height, 1, channels, 8, max_bytes, name, info));
    uint64_t blocks = coded_blocks(cinfo);
    char what[128], size[32], least[32];
    if (!cinfo->arith_code && blocks > (uint64_t)n * JPEG_BLOCKS_PER_BYTE)
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "%s: JPEG claims %s from %s: its %llu 8x8 blocks need at least %s, as Huffman coding "
                        "spends at least one bit on each",
                        name, sg_image_describe(info, what, sizeof what), sg_image_format_bytes(n, size, sizeof size),
                        (unsigned long long)blocks,
                        sg_image_format_bytes((blocks + 7) / JPEG_BLOCKS_PER_BYTE, least, sizeof least));
    if (cinfo->arith_code && info->pixel_bytes / SG_IMAGE_UNBOUNDED_RATIO > n)
        return sg_error(SEGRT_ERROR_INVALID_MODEL,
                        "%s: arithmetic-coded JPEG claims %s from %s, more than %d times its size (segrt's cap for "
                        "coders with no bound of their own)",
                        name, sg_image_describe(info, what, sizeof what), sg_image_format_bytes(n, size, sizeof size),
                        SG_IMAGE_UNBOUNDED_RATIO);
    /* A file of several scans (progressive, or components in scans of
     * their own) is decoded through a coefficient buffer for the whole
     * image, 2 bytes a coefficient; one scan through a few rows of blocks.
     * Either way libjpeg also keeps a couple of MCU rows of samples. */
    bool multi_scan = cinfo->progressive_mode || cinfo->comps_in_scan < cinfo->num_components;
    uint64_t row = (uint64_t)info->width * (uint64_t)channels;
    info->scratch_bytes = (multi_scan ? blocks * 64 * 2 : 0) + 4 * 16 * row + (1 << 20);
    return SEGRT_OK;
}

/* Everything that may longjmp back. State that must survive the jump lives
 * in job, info and out, outside this frame. */
static sg_status decode_body(struct jpeg_decompress_struct *cinfo, jpeg_job *job, const void *bytes, size_t n,
                             const char *name, uint64_t max_bytes, sg_image_info *info, sg_image *out)
{
    if (setjmp(job->jump)) {
        /* 12-bit and lossless files are valid JPEG this libjpeg build does
         * not decode. */
        bool valid = job->code == JERR_BAD_PRECISION || job->code == JERR_SOF_UNSUPPORTED;
        sg_status s = valid ? SEGRT_ERROR_UNSUPPORTED : SEGRT_ERROR_INVALID_MODEL;
        return sg_error(s, "%s: bad JPEG: %s", name, job->msg);
    }
    jpeg_create_decompress(cinfo);
    cinfo->progress = &job->progress;
    /* Caps what libjpeg allocates by itself (a progressive file's
     * coefficient buffer may exceed its pixels). */
    cinfo->mem->max_memory_to_use = max_bytes > (uint64_t)LONG_MAX ? LONG_MAX : (long)max_bytes;
    jpeg_mem_src(cinfo, bytes, (unsigned long)n);
    jpeg_read_header(cinfo, TRUE);
    if (cinfo->data_precision != 8)
        return unsupported(name, cinfo->data_precision == 12 ? "12-bit" : "non-8-bit");
    int32_t channels;
    switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
        cinfo->out_color_space = JCS_GRAYSCALE;
        channels = 1;
        break;
    case JCS_YCbCr:
    case JCS_RGB:
        cinfo->out_color_space = JCS_RGB;
        channels = 3;
        break;
    case JCS_CMYK:
    case JCS_YCCK:
        return unsupported(name, "CMYK");
    default:
        return unsupported(name, cinfo->num_components == 4 ? "4-component" : "unknown-colour-space");
    }
    SG_TRY(check_header(cinfo, n, name, channels, max_bytes, info));
    if (!out)
        return SEGRT_OK;
    SG_TRY(sg_image_alloc_info(info, name, out));
    jpeg_start_decompress(cinfo);
    if (cinfo->output_components != channels || cinfo->output_width != (JDIMENSION)out->width ||
        cinfo->output_height != (JDIMENSION)out->height)
        return sg_error(SEGRT_ERROR_INTERNAL, "%s: libjpeg's output is not the image's shape", name);
    size_t row = sg_image_row_bytes(out);
    while (cinfo->output_scanline < cinfo->output_height) {
        JSAMPROW dst = (JSAMPROW)out->pixels + (size_t)cinfo->output_scanline * row;
        if (jpeg_read_scanlines(cinfo, &dst, 1) != 1)
            return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad JPEG: the decoder stopped at row %u", name,
                            cinfo->output_scanline);
    }
    jpeg_finish_decompress(cinfo);
    return SEGRT_OK;
}

sg_status sg_jpeg_decode(const void *bytes, size_t n, const char *name, uint64_t max_bytes, sg_image_info *info,
                         sg_image *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    struct jpeg_decompress_struct cinfo;
    jpeg_job job;
    memset(&cinfo, 0, sizeof cinfo);
    memset(&job, 0, sizeof job);
    cinfo.err = jpeg_std_error(&job.err);
    job.err.error_exit = on_error_exit;
    job.err.emit_message = on_emit_message;
    job.progress.progress_monitor = on_progress;
    sg_status s = decode_body(&cinfo, &job, bytes, n, name, max_bytes, info, out);
    jpeg_destroy_decompress(&cinfo);
    if (s != SEGRT_OK && out)
        sg_image_free(out);
    return s;
}

/* --- scanline by scanline, for the region source ------------------------- */

struct sg_jpeg_rows {
    struct jpeg_decompress_struct cinfo;
    jpeg_job job;
    const char *name;
    bool created;
};

static sg_status rows_fail(sg_jpeg_rows *r)
{
    bool valid = r->job.code == JERR_BAD_PRECISION || r->job.code == JERR_SOF_UNSUPPORTED;
    return sg_error(valid ? SEGRT_ERROR_UNSUPPORTED : SEGRT_ERROR_INVALID_MODEL, "%s: bad JPEG: %s", r->name,
                    r->job.msg);
}

static sg_status rows_start(sg_jpeg_rows *r, const void *bytes, size_t n, const sg_image_info *header)
{
    struct jpeg_decompress_struct *cinfo = &r->cinfo;
    if (setjmp(r->job.jump))
        return rows_fail(r);
    jpeg_create_decompress(cinfo);
    r->created = true;
    cinfo->progress = &r->job.progress;
    cinfo->mem->max_memory_to_use = SG_IMAGE_MAX_BYTES > (uint64_t)LONG_MAX ? LONG_MAX : (long)SG_IMAGE_MAX_BYTES;
    jpeg_mem_src(cinfo, bytes, (unsigned long)n);
    jpeg_read_header(cinfo, TRUE);
    /* The probe of the same bytes took the file: grey or RGB. */
    cinfo->out_color_space = header->channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(cinfo);
    if (cinfo->output_components != header->channels || cinfo->output_width != (JDIMENSION)header->width ||
        cinfo->output_height != (JDIMENSION)header->height)
        return sg_error(SEGRT_ERROR_IO, "%s: the file changed while it was open", r->name);
    return SEGRT_OK;
}

sg_status sg_jpeg_rows_open(const void *bytes, size_t n, const char *name, const sg_image_info *header,
                            sg_jpeg_rows **out)
{
    *out = NULL;
    sg_jpeg_rows *r = calloc(1, sizeof *r);
    if (!r)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: out of memory setting up libjpeg", name);
    r->name = name;
    r->cinfo.err = jpeg_std_error(&r->job.err);
    r->job.err.error_exit = on_error_exit;
    r->job.err.emit_message = on_emit_message;
    r->job.progress.progress_monitor = on_progress;
    sg_status s = rows_start(r, bytes, n, header);
    if (s != SEGRT_OK) {
        sg_jpeg_rows_close(r);
        return s;
    }
    *out = r;
    return SEGRT_OK;
}

sg_status sg_jpeg_rows_next(sg_jpeg_rows *r, void *row)
{
    if (setjmp(r->job.jump))
        return rows_fail(r);
    JSAMPROW dst = row;
    if (jpeg_read_scanlines(&r->cinfo, &dst, 1) != 1)
        return sg_error(SEGRT_ERROR_INVALID_MODEL, "%s: bad JPEG: the decoder stopped at row %u", r->name,
                        r->cinfo.output_scanline);
    return SEGRT_OK;
}

void sg_jpeg_rows_close(sg_jpeg_rows *r)
{
    if (!r)
        return;
    if (r->created)
        jpeg_destroy_decompress(&r->cinfo);
    free(r);
}
