/* libFuzzer target: the PNG, JPEG and TIFF readers (single pages and
 * multi-page volumes), then the conversions a read image goes through
 * (tensor, overlay). Images are capped at 16 MiB of pixels so that a small
 * file declaring a large image stays quick.
 *
 * Each input is also probed, from memory and through a file, and the
 * answers must agree with the read: a probe that passes a file the read
 * then refuses before decoding, or that disagrees about the dims, would
 * mislead a job's memory estimate. A disagreement aborts (a crash to
 * libFuzzer, with the input kept).
 *
 * Each input is then opened as a region source (io/source.h, through the
 * file, under the same cap) and a few boxes of every level are read:
 * corners, the middle, a slab over pages, and the whole level where it is
 * small, then the same slabs again from the top (a PNG or JPEG source
 * restarts its decoder). Where the whole read passed, the source must
 * open and its boxes must be the image's pixels. */
#include "fuzz_file.h"
#include "io/image.h"
#include "io/source.h"
#include "pipeline/overlay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_BYTES ((uint64_t)16 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void convert(const sg_image *img)
{
    sg_tensor t;
    if (sg_image_to_tensor(img, false, &t) == SEGRT_OK)
        free(t.data);
    /* Overlays are 2-D: over a volume's first page. */
    sg_image page = *img;
    page.depth = 1;
    /* Labels from the first byte of each pixel, in a few classes. */
    size_t n = (size_t)page.width * (size_t)page.height, pixel = sg_image_row_bytes(&page) / (size_t)page.width;
    uint8_t *labels = malloc(n);
    if (!labels)
        return;
    for (size_t i = 0; i < n; i++)
        labels[i] = ((const uint8_t *)page.pixels)[i * pixel] % 5;
    sg_tensor map = {SEGRT_DTYPE_UINT8, 4, {1, 1, page.height, page.width}, labels};
    sg_image out;
    if (sg_overlay_render(&page, &map, NULL, &out) == SEGRT_OK)
        sg_image_free(&out);
    free(labels);
}

static void disagree(const char *what, sg_status a, sg_status b, const char *msg)
{
    fprintf(stderr, "fuzz_image: %s disagree (%d, %d): %s\n", what, (int)a, (int)b, msg);
    abort();
}

/* Reads box of level into buf (capped); where img is the whole read,
 * compares. */
static void read_box(sg_source *s, int32_t level, sg_box b, const sg_image *img)
{
    const sg_source_info *in = &s->info;
    for (int a = 0; a < 3; a++) {
        int64_t d = in->dims[level][a];
        b.start[a] = b.start[a] < 0 ? 0 : b.start[a] >= d ? d - 1 : b.start[a];
        b.size[a] = b.size[a] < 1 ? 1 : b.size[a] > d - b.start[a] ? d - b.start[a] : b.size[a];
    }
    size_t es = segrt_dtype_size(in->dtype);
    uint64_t n = (uint64_t)in->channels * (uint64_t)b.size[0] * (uint64_t)b.size[1] * (uint64_t)b.size[2] * es;
    if (n > FUZZ_MAX_BYTES)
        return;
    uint8_t *buf = malloc((size_t)n);
    if (!buf)
        return;
    sg_status st = sg_source_read_region(s, level, &b, buf);
    if (st == SEGRT_OK && img && level == 0) {
        const uint8_t *o = buf;
        size_t C = (size_t)img->channels;
        for (size_t c = 0; c < C; c++)
            for (int64_t z = 0; z < b.size[0]; z++)
                for (int64_t y = 0; y < b.size[1]; y++)
                    for (int64_t x = 0; x < b.size[2]; x++, o += es) {
                        const uint8_t *want = (const uint8_t *)img->pixels +
                                              (size_t)(b.start[0] + z) * sg_image_page_bytes(img) +
                                              (size_t)(b.start[1] + y) * sg_image_row_bytes(img) +
                                              ((size_t)(b.start[2] + x) * C + c) * es;
                        if (memcmp(o, want, es) != 0)
                            disagree("a source's box and the whole read", st, st, "");
                    }
    } else if (st != SEGRT_OK && img) {
        /* The file read whole; its boxes read too. */
        disagree("a source's box and the whole read that passed", SEGRT_OK, st, sg_last_error());
    }
    free(buf);
}

static void read_source(const uint8_t *data, size_t size, const sg_image *img)
{
    sg_source *s;
    sg_status st = sg_source_open_max(fuzz_as_file(data, size), FUZZ_MAX_BYTES, &s);
    if (st != SEGRT_OK) {
        if (img)
            disagree("a source and the whole read that passed", SEGRT_OK, st, sg_last_error());
        return;
    }
    const sg_source_info *in = &s->info;
    if (img && (in->dims[0][0] != img->depth || in->dims[0][1] != img->height || in->dims[0][2] != img->width ||
                in->channels != img->channels))
        disagree("a source's dims and the whole read's", SEGRT_OK, SEGRT_OK, "");
    for (int pass = 0; pass < 2; pass++)
        for (int32_t level = 0; level < in->n_levels; level++) {
            const int64_t *d = in->dims[level];
            const sg_image *whole = level == 0 ? img : NULL;
            read_box(s, level, (sg_box){{0, 0, 0}, {1, 3, 5}}, whole);
            read_box(s, level, (sg_box){{0, d[1] / 3, d[2] / 4}, {d[0], d[1] / 2 + 1, d[2] / 2 + 1}}, whole);
            read_box(s, level, (sg_box){{d[0] - 1, d[1] - 2, d[2] - 7}, {1, 2, 7}}, whole);
            read_box(s, level, (sg_box){{0, 0, 0}, {d[0], d[1], d[2]}}, whole);
        }
    sg_tensor all;
    if (sg_source_read_all(s, 0, &all) == SEGRT_OK)
        free(all.data);
    sg_source_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_image img;
    sg_image_info info;
    sg_status read = sg_image_read_memory_max(data, size, "fuzz.img", FUZZ_MAX_BYTES, &img);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", read == SEGRT_OK ? "" : sg_last_error());
    sg_status probe = sg_image_probe_memory_max(data, size, "fuzz.img", FUZZ_MAX_BYTES, &info);
    if (read == SEGRT_OK) {
        if (probe != SEGRT_OK)
            disagree("a read that passed and its probe", read, probe, sg_last_error());
        if (info.width != img.width || info.height != img.height || info.depth != img.depth ||
            info.channels != img.channels || info.bits != img.bits || info.pixel_bytes != sg_image_bytes(&img))
            disagree("the probe's dims and the read's", read, probe, "");
        convert(&img);
    } else if (probe != SEGRT_OK && (probe != read || strcmp(msg, sg_last_error()) != 0)) {
        disagree("the read's refusal and the probe's", read, probe, msg);
    }
    /* Through a file (mapped, or opened by libtiff) as from memory, under
     * the full pixel cap: probes only, which allocate nothing large. An
     * empty file has its own message. */
    if (size > 0) {
        sg_image_info mem, file;
        sg_status m = sg_image_probe_memory(data, size, "fuzz.img", &mem);
        snprintf(msg, sizeof msg, "%s", m == SEGRT_OK ? "" : sg_last_error());
        sg_status f = sg_image_probe(fuzz_as_file(data, size), &file);
        if (m != f || (m == SEGRT_OK && memcmp(&mem, &file, sizeof mem) != 0))
            disagree("probes from memory and from a file", m, f, f == SEGRT_OK ? msg : sg_last_error());
    }
    if (size > 0)
        read_source(data, size, read == SEGRT_OK ? &img : NULL);
    if (read == SEGRT_OK)
        sg_image_free(&img);
    return 0;
}
