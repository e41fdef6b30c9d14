/* libFuzzer target: the NIfTI reader (.nii and .nii.gz) and the DICOM
 * reader (one file as a series: the structural walk, GDCM's header read
 * and decode through the shim, the slice rules), opened as region sources
 * through a file under a 16 MiB cap; every level's corners, a middle box
 * and (where small) the whole volume are read, then the same boxes again
 * from the top, which restarts a .nii.gz's streams. A box of a source that
 * opened must read or fail with a message; nothing may crash, leak or
 * read out of bounds. */
#include "fuzz_file.h"
#include "io/source.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_BYTES ((uint64_t)16 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* False when the read failed: the callers of a source stop at its first
 * error, and so does this target (a file whose decoder runs into its CPU
 * time limit would otherwise pay that limit on every read). */
static bool read_box(sg_source *s, sg_box b)
{
    const sg_source_info *in = &s->info;
    for (int a = 0; a < 3; a++) {
        int64_t d = in->dims[0][a];
        b.start[a] = b.start[a] < 0 ? 0 : b.start[a] >= d ? d - 1 : b.start[a];
        b.size[a] = b.size[a] < 1 ? 1 : b.size[a] > d - b.start[a] ? d - b.start[a] : b.size[a];
    }
    uint64_t n = (uint64_t)in->channels * (uint64_t)b.size[0] * (uint64_t)b.size[1] * (uint64_t)b.size[2] *
                 segrt_dtype_size(in->dtype);
    if (n > FUZZ_MAX_BYTES)
        return true;
    uint8_t *buf = malloc(n ? (size_t)n : 1);
    if (!buf)
        return true;
    bool ok = sg_source_read_region(s, 0, &b, buf) == SEGRT_OK;
    if (!ok && sg_last_error()[0] == '\0') {
        fprintf(stderr, "fuzz_volume: a failed read without a message\n");
        abort();
    }
    free(buf);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_as_file(data, size);
    sg_source_options o = {FUZZ_MAX_BYTES, NULL, false};
    sg_source *s;
    if (size < 132 || !(sg_dicom_head(data, size) || sg_nifti_head(data, size)))
        return 0; /* the other formats have their own targets */
    o.allow_uneven = (data[size - 1] & 1) != 0; /* a DICOM series resampled, or refused, by the last byte */
    if (sg_source_open_with(path, &o, &s) != SEGRT_OK)
        return 0;
    const int64_t *d = s->info.dims[0];
    for (int pass = 0; pass < 2; pass++)
        if (!read_box(s, (sg_box){{0, 0, 0}, {1, 3, 5}}) ||
            !read_box(s, (sg_box){{d[0] / 3, d[1] / 3, d[2] / 4}, {d[0] / 2 + 1, d[1] / 2 + 1, d[2] / 2 + 1}}) ||
            !read_box(s, (sg_box){{d[0] - 1, d[1] - 2, d[2] - 7}, {1, 2, 7}}) ||
            !read_box(s, (sg_box){{0, 0, 0}, {d[0], d[1], d[2]}}))
            break;
    sg_source_close(s);
    return 0;
}
