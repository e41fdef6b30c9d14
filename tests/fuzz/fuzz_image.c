/* libFuzzer target: the PNG, JPEG and TIFF readers, then the conversions
 * a read image goes through (tensor, overlay). Images are capped at 16 MiB
 * of pixels so that a small file declaring a large image stays quick. */
#include "io/image.h"
#include "pipeline/overlay.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void convert(const sg_image *img)
{
    sg_tensor t;
    if (sg_image_to_tensor(img, false, &t) == SEGRT_OK)
        free(t.data);
    /* Labels from the first byte of each pixel, in a few classes. */
    size_t n = (size_t)img->width * (size_t)img->height, pixel = sg_image_row_bytes(img) / (size_t)img->width;
    uint8_t *labels = malloc(n);
    if (!labels)
        return;
    for (size_t i = 0; i < n; i++)
        labels[i] = ((const uint8_t *)img->pixels)[i * pixel] % 5;
    sg_tensor map = {SEGRT_DTYPE_UINT8, 4, {1, 1, img->height, img->width}, labels};
    sg_image out;
    if (sg_overlay_render(img, &map, NULL, &out) == SEGRT_OK)
        sg_image_free(&out);
    free(labels);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sg_image img;
    if (sg_image_read_memory_max(data, size, "fuzz.img", (uint64_t)16 << 20, &img) == SEGRT_OK) {
        convert(&img);
        sg_image_free(&img);
    }
    return 0;
}
