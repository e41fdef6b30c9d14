/* The preprocessing tests' driver: a plan (src/pipeline/vol_prep.h) on the
 * host over a volume from a .npy file, with its parameters from argv, so
 * that tests/volume/test_prep.py can check it against scipy, skimage and
 * nibabel (and tests/gpu/test_gpu_prep_monai.py against MONAI).
 *
 *   segrt_prep IN.npy OUTDIR [options]
 * IN.npy: float32 C x D x H x W, or D x H x W for one channel. Writes
 * OUTDIR/image.npy (float32 C x D' x H' x W', the networks' image) and
 * OUTDIR/grid.json (the networks' grid: dims, spacing, origin, direction,
 * and whether the plan is the identity); with --scores S.npy (float32
 * K x D' x H' x W'), also OUTDIR/labels.npy (D x H x W) from sg_prep_back.
 * Options (segrt_preprocess's fields; absent ones as segrt_preprocess_init):
 *   --geometry SD SH SW OX OY OZ D00 D01 D02 D10 D11 D12 D20 D21 D22
 *                              the volume's (none: unknown)
 *   --transpose A B C  --orientation CODE  --crop none|nonzero|threshold
 *   --crop-threshold T  --margin MD MH MW
 *   --intensity SPEC (once for all channels, or once per channel):
 *       none | ct:LO:HI:MEAN:STD | zscore | zscore-masked |
 *       range:AMIN:AMAX:BMIN:BMAX[:clip] | rescale01
 *   --intensity-first  --spacing SD SH SW  --grid nnunet|monai
 *   --interp, --interp-z, --result-interp, --result-interp-z  nearest|linear|cubic
 *   --anisotropy X  --axes dhw|whd  --source TEXT
 *   --device N: the plan on CUDA device N (default -1, the host); the image
 *               comes down and the scores go up through segrt_device_copy
 * Exit 0 on success, 2 with segrt's one-line message on stderr. */
#include "pipeline/vol_prep.h"

#include "segrt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(void)
{
    fprintf(stderr, "segrt_prep: %s\n", segrt_last_error());
    return 2;
}

static int usage(const char *why)
{
    fprintf(stderr, "segrt_prep: %s\n", why);
    return 2;
}

static int interp_of(const char *s, segrt_interp *out)
{
    if (strcmp(s, "nearest") == 0)
        *out = SEGRT_INTERP_NEAREST;
    else if (strcmp(s, "linear") == 0)
        *out = SEGRT_INTERP_LINEAR;
    else if (strcmp(s, "cubic") == 0)
        *out = SEGRT_INTERP_CUBIC;
    else
        *out = (segrt_interp)atoi(s); /* a number, for the bad-value tests */
    return 0;
}

static int intensity_of(const char *s, segrt_intensity *in)
{
    memset(in, 0, sizeof *in);
    double v[5] = {0, 0, 0, 0, 0};
    char extra[16] = "";
    if (strcmp(s, "none") == 0) {
        in->kind = SEGRT_INTENSITY_NONE;
    } else if (strcmp(s, "zscore") == 0) {
        in->kind = SEGRT_INTENSITY_ZSCORE;
    } else if (strcmp(s, "zscore-masked") == 0) {
        in->kind = SEGRT_INTENSITY_ZSCORE;
        in->masked = 1;
    } else if (strcmp(s, "rescale01") == 0) {
        in->kind = SEGRT_INTENSITY_RESCALE01;
    } else if (sscanf(s, "ct:%lf:%lf:%lf:%lf", &v[0], &v[1], &v[2], &v[3]) == 4) {
        in->kind = SEGRT_INTENSITY_CT;
        in->lo = v[0];
        in->hi = v[1];
        in->mean = v[2];
        in->std = v[3];
    } else if (sscanf(s, "range:%lf:%lf:%lf:%lf:%15s", &v[0], &v[1], &v[2], &v[3], extra) >= 4) {
        in->kind = SEGRT_INTENSITY_RANGE;
        in->a_min = v[0];
        in->a_max = v[1];
        in->b_min = v[2];
        in->b_max = v[3];
        in->clip = strcmp(extra, "clip") == 0;
    } else if (sscanf(s, "kind:%lf", &v[0]) == 1) {
        in->kind = (segrt_intensity_kind)(int)v[0]; /* a raw kind, for the bad-value tests */
    } else {
        return -1;
    }
    return 0;
}

static void print_geometry(FILE *f, const segrt_geometry *g)
{
    fprintf(f, "\"known\": %d, \"spacing\": [%.17g, %.17g, %.17g], \"origin\": [%.17g, %.17g, %.17g], \"direction\": [",
            g->known, g->spacing[0], g->spacing[1], g->spacing[2], g->origin[0], g->origin[1], g->origin[2]);
    for (int r = 0; r < 3; r++)
        fprintf(f, "%s[%.17g, %.17g, %.17g]", r ? ", " : "", g->direction[r][0], g->direction[r][1],
                g->direction[r][2]);
    fprintf(f, "]");
}

static int save(const char *dir, const char *name, const segrt_tensor *t)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return segrt_array_save(path, t) == SEGRT_OK ? 0 : fail();
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage("usage: segrt_prep IN.npy OUTDIR [options]");
    const char *in_path = argv[1], *out_dir = argv[2], *scores_path = NULL;
    segrt_preprocess p;
    segrt_preprocess_init(&p);
    segrt_geometry g;
    memset(&g, 0, sizeof g);
    int32_t device = -1;
    for (int i = 3; i < argc; i++) {
        const char *o = argv[i];
        int left = argc - i - 1;
#define NEED(n)                                                                                                        \
    do {                                                                                                               \
        if (left < (n))                                                                                                \
            return usage("missing values of an option");                                                               \
    } while (0)
        if (strcmp(o, "--geometry") == 0) {
            NEED(15);
            g.known = 1;
            for (int a = 0; a < 3; a++)
                g.spacing[a] = atof(argv[++i]);
            for (int a = 0; a < 3; a++)
                g.origin[a] = atof(argv[++i]);
            for (int r = 0; r < 3; r++)
                for (int c = 0; c < 3; c++)
                    g.direction[r][c] = atof(argv[++i]);
        } else if (strcmp(o, "--transpose") == 0) {
            NEED(3);
            for (int a = 0; a < 3; a++)
                p.transpose[a] = atoi(argv[++i]);
        } else if (strcmp(o, "--orientation") == 0) {
            NEED(1);
            snprintf(p.orientation, sizeof p.orientation, "%s", argv[++i]);
        } else if (strcmp(o, "--crop") == 0) {
            NEED(1);
            const char *c = argv[++i];
            p.crop = strcmp(c, "nonzero") == 0     ? SEGRT_CROP_NONZERO
                     : strcmp(c, "threshold") == 0 ? SEGRT_CROP_THRESHOLD
                     : strcmp(c, "none") == 0      ? SEGRT_CROP_NONE
                                                   : (segrt_crop_kind)atoi(c);
        } else if (strcmp(o, "--crop-threshold") == 0) {
            NEED(1);
            p.crop_threshold = atof(argv[++i]);
        } else if (strcmp(o, "--margin") == 0) {
            NEED(3);
            for (int a = 0; a < 3; a++)
                p.crop_margin[a] = atoll(argv[++i]);
        } else if (strcmp(o, "--intensity") == 0) {
            NEED(1);
            if (p.n_intensity >= SEGRT_PREPROCESS_MAX_CHANNELS || intensity_of(argv[++i], &p.intensity[p.n_intensity]))
                return usage("bad --intensity");
            p.n_intensity++;
        } else if (strcmp(o, "--intensity-first") == 0) {
            p.intensity_first = 1;
        } else if (strcmp(o, "--spacing") == 0) {
            NEED(3);
            for (int a = 0; a < 3; a++)
                p.spacing[a] = atof(argv[++i]);
        } else if (strcmp(o, "--grid") == 0) {
            NEED(1);
            const char *c = argv[++i];
            p.grid = strcmp(c, "monai") == 0    ? SEGRT_RESAMPLE_MONAI
                     : strcmp(c, "nnunet") == 0 ? SEGRT_RESAMPLE_NNUNET
                                                : (segrt_resample_grid)atoi(c);
        } else if (strcmp(o, "--interp") == 0) {
            NEED(1);
            interp_of(argv[++i], &p.image_interp);
        } else if (strcmp(o, "--interp-z") == 0) {
            NEED(1);
            interp_of(argv[++i], &p.image_interp_z);
        } else if (strcmp(o, "--result-interp") == 0) {
            NEED(1);
            interp_of(argv[++i], &p.result_interp);
        } else if (strcmp(o, "--result-interp-z") == 0) {
            NEED(1);
            interp_of(argv[++i], &p.result_interp_z);
        } else if (strcmp(o, "--anisotropy") == 0) {
            NEED(1);
            p.anisotropy = atof(argv[++i]);
        } else if (strcmp(o, "--axes") == 0) {
            NEED(1);
            if (segrt_preprocess_set(&p, "axes", argv[++i]) != SEGRT_OK)
                return fail();
        } else if (strcmp(o, "--source") == 0) {
            NEED(1);
            p.source = argv[++i];
        } else if (strcmp(o, "--scores") == 0) {
            NEED(1);
            scores_path = argv[++i];
        } else if (strcmp(o, "--device") == 0) {
            NEED(1);
            device = atoi(argv[++i]);
        } else {
            return usage("unknown option");
        }
#undef NEED
    }

    segrt_tensor vol;
    if (segrt_array_load(in_path, &vol) != SEGRT_OK)
        return fail();
    int rc = 0;
    if (vol.dtype != SEGRT_DTYPE_FLOAT32 || (vol.rank != 3 && vol.rank != 4)) {
        segrt_tensor_free(&vol);
        return usage("IN.npy must be float32 C x D x H x W or D x H x W");
    }
    int64_t C = vol.rank == 4 ? vol.dims[0] : 1, dims[3];
    for (int a = 0; a < 3; a++)
        dims[a] = vol.dims[vol.rank - 3 + a];
    sg_prep *pp = NULL;
    segrt_tensor image, labels;
    void *host_image = NULL;
    memset(&image, 0, sizeof image);
    memset(&labels, 0, sizeof labels);
    if (sg_prep_plan(&p, C, dims, g.known ? &g : NULL, device, &pp) != SEGRT_OK) {
        rc = fail();
    } else if (sg_prep_forward(pp, vol.data, &image) != SEGRT_OK) {
        rc = fail();
    } else {
        int64_t m[3];
        segrt_geometry gm;
        sg_prep_model_grid(pp, m, &gm);
        char path[4096];
        snprintf(path, sizeof path, "%s/grid.json", out_dir);
        FILE *f = fopen(path, "w");
        if (!f) {
            rc = usage("cannot write grid.json");
        } else {
            fprintf(f, "{\"dims\": [%lld, %lld, %lld], \"identity\": %s, \"scratch_bytes\": %llu, ", (long long)m[0],
                    (long long)m[1], (long long)m[2], sg_prep_is_identity(pp) ? "true" : "false",
                    (unsigned long long)sg_prep_scratch_bytes(pp, 2));
            print_geometry(f, &gm);
            fprintf(f, "}\n");
            fclose(f);
        }
        segrt_tensor img4 = image;
        size_t img_bytes = sizeof(float) * (size_t)(image.dims[1] * image.dims[2] * image.dims[3] * image.dims[4]);
        if (image.memory == SEGRT_MEMORY_DEVICE) { /* --device: the image comes down for the file */
            img4.data = malloc(img_bytes ? img_bytes : 1);
            img4.memory = SEGRT_MEMORY_HOST;
            if (!img4.data || segrt_device_copy(img4.data, SEGRT_MEMORY_HOST, image.data, SEGRT_MEMORY_DEVICE,
                                                img_bytes, device) != SEGRT_OK)
                rc = img4.data ? fail() : usage("no memory");
            host_image = img4.data;
        }
        img4.rank = 4;
        for (int a = 0; a < 4; a++)
            img4.dims[a] = image.dims[a + 1];
        if (rc == 0)
            rc = save(out_dir, "image.npy", &img4);
        if (rc == 0 && scores_path) {
            segrt_tensor sc;
            if (segrt_array_load(scores_path, &sc) != SEGRT_OK) {
                rc = fail();
            } else {
                segrt_tensor sc5 = sc;
                if (sc.rank == 4) {
                    sc5.rank = 5;
                    sc5.dims[0] = 1;
                    for (int a = 0; a < 4; a++)
                        sc5.dims[a + 1] = sc.dims[a];
                }
                void *d_scores = NULL;
                if (device >= 0) { /* --device: the scores go up, as the networks leave them */
                    size_t bytes = sizeof(float) * (size_t)(sc.dims[0] * sc.dims[1] * sc.dims[2] * sc.dims[3]);
                    if (sc.rank != 4 || segrt_device_alloc(device, bytes, &d_scores) != SEGRT_OK ||
                        segrt_device_copy(d_scores, SEGRT_MEMORY_DEVICE, sc.data, SEGRT_MEMORY_HOST, bytes, device) !=
                            SEGRT_OK)
                        rc = fail();
                    sc5.data = d_scores;
                    sc5.memory = SEGRT_MEMORY_DEVICE;
                    sc5.device = device;
                }
                if (rc == 0 && sg_prep_back(pp, &sc5, &labels) != SEGRT_OK) {
                    rc = fail();
                } else if (rc == 0) {
                    segrt_tensor l3 = labels;
                    l3.rank = 3;
                    for (int a = 0; a < 3; a++)
                        l3.dims[a] = labels.dims[a + 2];
                    rc = save(out_dir, "labels.npy", &l3);
                }
                segrt_device_free(d_scores);
                segrt_tensor_free(&sc);
            }
        }
    }
    if (image.memory == SEGRT_MEMORY_DEVICE)
        segrt_device_free(image.data);
    else
        free(image.data);
    free(host_image);
    free(labels.data);
    sg_prep_free(pp);
    segrt_tensor_free(&vol);
    return rc;
}
