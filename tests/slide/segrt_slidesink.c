/* The pyramidal TIFF sink's driver for test_slide_sink.py: writes an image
 * through sg_sink (io/sink.h) with the pyramid option, slab by slab.
 *
 *   segrt_slidesink OUT CHANNELS BITS HEIGHT WIDTH SLAB TILE_H TILE_W MPP_Y MPP_X SOURCE [discard]
 *
 * CHANNELS with a trailing c ("7c") are classes (sink.h's desc.classes).
 * SOURCE is a raw file of planar samples (channels, height, width; native
 * byte order), read one slab of rows at a time, or gen:K for the labels
 * (x / 61 + 3 * (y / 47) + ((7 x + 13 y) % 29 == 0)) % K, made slab by
 * slab, so that an image larger than memory needs no input file. With
 * discard the last row is not written and the sink is discarded. Prints
 * "maxrss_kib N" (the peak resident memory) on success; the error and exit
 * 1 otherwise. */
#include "io/sink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

int main(int argc, char **argv)
{
    if (argc != 12 && argc != 13) {
        fprintf(stderr, "usage: %s OUT C BITS H W SLAB TILE_H TILE_W MPP_Y MPP_X SOURCE [discard]\n", argv[0]);
        return 2;
    }
    sg_sink_desc d;
    memset(&d, 0, sizeof d);
    d.channels = atoi(argv[2]);
    d.classes = strchr(argv[2], 'c') != NULL;
    d.dtype = atoi(argv[3]) == 16 ? SEGRT_DTYPE_UINT16 : SEGRT_DTYPE_UINT8;
    d.n_dims = 2;
    d.dims[0] = 1;
    d.dims[1] = atoll(argv[4]);
    d.dims[2] = atoll(argv[5]);
    int64_t slab = atoll(argv[6]);
    d.pyramid = true;
    d.tile[0] = atoll(argv[7]);
    d.tile[1] = atoll(argv[8]);
    d.mpp[0] = atof(argv[9]);
    d.mpp[1] = atof(argv[10]);
    const char *source = argv[11];
    bool discard = argc == 13 && strcmp(argv[12], "discard") == 0;
    if (slab < 1 || d.dims[1] < 1 || d.dims[2] < 1)
        return 2;
    size_t es = segrt_dtype_size(d.dtype), W = (size_t)d.dims[2], H = (size_t)d.dims[1], C = (size_t)d.channels;
    unsigned K = 0;
    FILE *in = NULL;
    if (strncmp(source, "gen:", 4) == 0) {
        K = (unsigned)atoi(source + 4);
    } else if (!(in = fopen(source, "rb"))) {
        perror(source);
        return 2;
    }
    uint8_t *buf = malloc((size_t)slab * W * C * es);
    sg_sink *s;
    sg_status st = sg_sink_open(argv[1], &d, &s);
    for (size_t y0 = 0; st == SEGRT_OK && y0 < H; y0 += (size_t)slab) {
        size_t n = H - y0 < (size_t)slab ? H - y0 : (size_t)slab;
        if (discard && y0 + n == H && --n == 0)
            break;
        for (size_t c = 0; c < C; c++) {
            uint8_t *plane = buf + c * n * W * es;
            if (in) {
                if (fseeko(in, (off_t)((c * H + y0) * W * es), SEEK_SET) != 0 || fread(plane, es, n * W, in) != n * W)
                    return 2;
                continue;
            }
            for (size_t y = y0; y < y0 + n; y++)
                for (size_t x = 0; x < W; x++) {
                    unsigned v = (unsigned)((x / 61 + 3 * (y / 47) + ((7 * x + 13 * y) % 29 == 0)) % K);
                    if (es == 1) {
                        plane[(y - y0) * W + x] = (uint8_t)v;
                    } else {
                        uint16_t u = (uint16_t)v;
                        memcpy(plane + ((y - y0) * W + x) * 2, &u, 2);
                    }
                }
        }
        sg_box box = {{0, (int64_t)y0, 0}, {1, (int64_t)n, (int64_t)W}};
        st = sg_sink_write(s, &box, buf);
        if (st != SEGRT_OK) {
            sg_sink_discard(s); /* a failed write leaves the sink to its caller to discard */
            s = NULL;
        }
    }
    if (st == SEGRT_OK && discard) {
        sg_sink_discard(s);
        s = NULL;
    } else if (st == SEGRT_OK) {
        st = sg_sink_commit(s);
        s = NULL;
    }
    free(buf);
    if (in)
        fclose(in);
    if (st != SEGRT_OK) {
        fprintf(stderr, "%s\n", segrt_last_error());
        return 1;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("maxrss_kib %ld\n", ru.ru_maxrss);
    return 0;
}
