/* libFuzzer target: the PNG, JPEG and TIFF readers (single pages and
 * multi-page volumes), then the conversions a read image goes through
 * (tensor, overlay). Images are capped at 16 MiB of pixels so that a small
 * file declaring a large image stays quick.
 *
 * Each input is also probed, from memory and through a file, and the
 * answers must agree with the read: a probe that passes a file the read
 * then refuses before decoding, or that disagrees about the dims, would
 * mislead a job's memory estimate. A disagreement aborts (a crash to
 * libFuzzer, with the input kept). */
#include "io/image.h"
#include "pipeline/overlay.h"
#include "fuzz_file.h"

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
        sg_image_free(&img);
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
    return 0;
}
