/* libFuzzer target: the slide source (source_slide.c) through OpenSlide,
 * on TIFF-headed inputs (OpenSlide tells the other vendors' files by their
 * names' extensions, which a fuzzed file has not): opened with
 * sg_source_open_slide under a 16 MiB cap, so that Aperio, the other
 * TIFF-based vendors and generic tiled TIFF are all reached; every level's
 * corners, a middle box and (where under 1 MiB) the whole level are read,
 * then the associated images (where under 1 MiB) and a property. A read of a source
 * that opened must succeed or fail with a message; nothing may crash, leak
 * or read out of bounds. */
#include "fuzz_file.h"
#include "io/slide.h"
#include "io/source.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_BYTES ((uint64_t)16 << 20)
/* Boxes and associated images read: at most 1 MiB, so that a corrupt
 * header's huge level (OpenSlide paints what it cannot read) costs little. */
#define FUZZ_BOX_BYTES ((uint64_t)1 << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* GLib ends the process on a failed g_malloc with a breakpoint trap
 * (SIGTRAP), which libFuzzer does not catch: as an abort, the input that
 * caused it is kept. */
static void trap_as_abort(int sig)
{
    (void)sig;
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGTRAP, trap_as_abort);
    return 0;
}

static void must_say_why(sg_status st)
{
    if (st != SEGRT_OK && sg_last_error()[0] == '\0') {
        fprintf(stderr, "fuzz_slide: a failed read without a message\n");
        abort();
    }
}

static void read_box(sg_source *s, int32_t level, sg_box b)
{
    const int64_t *d = s->info.dims[level];
    for (int a = 1; a < 3; a++) {
        b.start[a] = b.start[a] < 0 ? 0 : b.start[a] >= d[a] ? d[a] - 1 : b.start[a];
        b.size[a] = b.size[a] < 1 ? 1 : b.size[a] > d[a] - b.start[a] ? d[a] - b.start[a] : b.size[a];
    }
    b.start[0] = 0;
    b.size[0] = 1;
    uint64_t n = 3 * (uint64_t)b.size[1] * (uint64_t)b.size[2];
    if (n > FUZZ_BOX_BYTES)
        return;
    uint8_t *buf = malloc((size_t)n);
    if (!buf)
        return;
    must_say_why(sg_source_read_region(s, level, &b, buf));
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8 || !(memcmp(data, "II", 2) == 0 || memcmp(data, "MM", 2) == 0))
        return 0; /* the other formats have their own targets */
    const char *path = fuzz_as_file(data, size);
    sg_source_options o = {FUZZ_MAX_BYTES, NULL, false};
    sg_source *s;
    if (sg_source_open_slide(path, &o, &s) != SEGRT_OK)
        return 0;
    for (int32_t l = 0; l < s->info.n_levels; l++) {
        const int64_t *d = s->info.dims[l];
        read_box(s, l, (sg_box){{0, 0, 0}, {1, 3, 5}});
        read_box(s, l, (sg_box){{0, d[1] / 3, d[2] / 4}, {1, d[1] / 2 + 1, d[2] / 2 + 1}});
        read_box(s, l, (sg_box){{0, d[1] - 2, d[2] - 7}, {1, 2, 7}});
        read_box(s, l, (sg_box){{0, 0, 0}, {1, d[1], d[2]}});
    }
    /* The level's JPEG tiles as the device's decoder takes them: where the
     * level is such, a few tiles' streams made and their frames checked. */
    for (int32_t l = 0; l < s->info.n_levels; l++) {
        sg_slide_tiles *t;
        if (sg_slide_tiles_open(s, l, &t) != SEGRT_OK) {
            must_say_why(SEGRT_ERROR_UNSUPPORTED);
            continue;
        }
        const sg_slide_tiles_info *ti = sg_slide_tiles_get_info(t);
        uint8_t *buf = ti->max_bytes <= FUZZ_BOX_BYTES ? malloc(ti->max_bytes) : NULL;
        int64_t at[3][2] = {{0, 0}, {ti->down - 1, ti->across - 1}, {ti->down / 2, ti->across / 2}};
        for (int k = 0; k < 3 && buf; k++) {
            size_t len;
            sg_status st = sg_slide_tiles_read(t, at[k][0], at[k][1], buf, &len);
            must_say_why(st);
            if (st == SEGRT_OK && (len > ti->max_bytes || len < 4 || buf[0] != 0xFF || buf[1] != 0xD8))
                abort();
        }
        free(buf);
        sg_slide_tiles_close(t);
    }
    for (size_t i = 0; i < sg_slide_associated_count(s); i++) {
        const char *name;
        int64_t h, w;
        if (sg_slide_associated_info(s, i, &name, &h, &w) != SEGRT_OK || h < 1 || w < 1 ||
            (uint64_t)h * (uint64_t)w * 3 > FUZZ_BOX_BYTES)
            continue;
        uint8_t *buf = malloc((size_t)(h * w * 3));
        if (!buf)
            continue;
        must_say_why(sg_slide_read_associated(s, name, buf));
        free(buf);
    }
    const char *v = sg_slide_property(s, "openslide.objective-power");
    if (v && strlen(v) > (size_t)1 << 30)
        abort();
    sg_source_close(s);
    return 0;
}
