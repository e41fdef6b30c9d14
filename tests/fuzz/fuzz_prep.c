/* libFuzzer target: where a volume's preprocessing comes from. The input
 * is an nnU-Net folder's two files, plans.json and dataset.json, split at
 * the first byte 0x1e (the ASCII record separator; no separator: the whole
 * input is plans.json beside a small valid dataset.json), read by
 * segrt_preprocess_from_nnunet; and the same bytes as "KEY=VALUE" settings
 * for segrt_preprocess_set. Each must succeed or fail with a message,
 * never crash; a failure must leave the settings as they were, and a
 * success must give values the plan can take. */
#include "segrt.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char dataset[] = "{\"channel_names\": {\"0\": \"CT\"}, \"labels\": {\"background\": 0, \"a\": 1}}";

static void put(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0)
        abort();
}

/* A folder made once, its two files rewritten per input. */
static const char *folder(void)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/segrt-fuzz-prep-XXXXXX");
        if (!mkdtemp(dir))
            abort();
    }
    return dir;
}

static void check(const segrt_preprocess *p)
{
    bool perm = true;
    for (int a = 0; a < 3; a++)
        perm &= p->transpose[a] >= 0 && p->transpose[a] < 3 && p->spacing[a] >= 0.0 && p->crop_margin[a] >= 0;
    if (!perm || p->n_intensity < 0 || p->n_intensity > SEGRT_PREPROCESS_MAX_CHANNELS || p->anisotropy < 0.0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = folder();
    char plans[128], ds[128];
    snprintf(plans, sizeof plans, "%s/plans.json", dir);
    snprintf(ds, sizeof ds, "%s/dataset.json", dir);
    const uint8_t *sep = memchr(data, 0x1e, size);
    size_t np = sep ? (size_t)(sep - data) : size;
    put(plans, data, np);
    if (sep)
        put(ds, sep + 1, size - np - 1);
    else
        put(ds, dataset, sizeof dataset - 1);
    segrt_preprocess p;
    segrt_window_job_options o;
    memset(&p, 0x5a, sizeof p);
    if (segrt_preprocess_from_nnunet(dir, "3d_fullres", &p, &o) == SEGRT_OK)
        check(&p);
    else if (!segrt_last_error()[0])
        abort();

    /* KEY=VALUE, NUL-terminated copies. */
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *eq = strchr(text, '=');
    if (eq) {
        *eq = '\0';
        segrt_preprocess_init(&p);
        segrt_preprocess before = p;
        if (segrt_preprocess_set(&p, text, eq + 1) == SEGRT_OK)
            check(&p);
        else if (memcmp(&before, &p, sizeof p) != 0)
            abort();
    }
    free(text);
    return 0;
}
