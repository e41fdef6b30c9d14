/* The folder job (segrt.h, "A folder of cases"): the window job over
 * every case of a folder, its engines built once (job_window.h), the next
 * case read by a thread while this one runs, each result written whole,
 * a failing case recorded and the others run, summary.json kept.
 *
 * The channels of an nnU-Net case (CASE_0000.nii.gz, CASE_0001.nii.gz...)
 * are stacked here, in the job, rather than by a multi-file source in
 * src/io: the window job reads a volume whole anyway, so a source over
 * several files would only add a second path to the same float32 tensor;
 * the job also owns the rule that makes them one case (names, gaps,
 * agreement of dims and geometry), which is nnU-Net's convention, not a
 * file format's.
 *
 * A whole slide (any file the slide job takes: an OpenSlide vendor's, or a
 * tiled pyramidal TIFF) is a case of its own, named by its file without
 * the extension, its result NAME.tif: the window job reads it itself, row
 * by row (nothing read ahead: a slide is never held whole), and the
 * engines stay from slide to slide as the window does not change. */
#include "core/api_file.h"
#include "core/clock.h"
#include "core/file.h"
#include "core/mem.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/source.h"
#include "pipeline/job_slide.h"
#include "pipeline/job_window.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define CASE_ERROR_CAP 1024
#define DICOM_SCAN_DEPTH 16

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* dir/name, malloc'd. */
static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (k == 0 || p[k - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

/* --- the cases of a folder ------------------------------------------------ */

typedef enum claim_kind { CLAIM_PLAIN, CLAIM_CHANNEL, CLAIM_DICOM, CLAIM_SLIDE } claim_kind;

/* A file or folder that names a case. */
typedef struct claim {
    char *name; /* the case's */
    char *path;
    char *file; /* the entry's own name, for messages */
    claim_kind kind;
    int32_t channel;
} claim;

typedef struct one_case {
    char *name;
    char **inputs; /* channel files in order, or the DICOM folder */
    size_t n_inputs;
    bool dicom;
    bool slide; /* a whole slide: read by the window job itself */
    char *output;
    char error[CASE_ERROR_CAP]; /* found when the folder was listed (a gap, a clash) */
    segrt_case_state state;
    int32_t channels;
    int64_t dims[3];
    double spacing[3];
    double seconds_read, seconds_wait, seconds_run, seconds_windows, seconds_write, seconds_total;
    bool listed; /* in summary.json: its turn came */
} one_case;

/* Whether name ends in suffix, ignoring case; *stem_len its part before. */
static bool ends_with(const char *name, const char *suffix, size_t *stem_len)
{
    size_t n = strlen(name), k = strlen(suffix);
    if (n <= k || strcasecmp(name + n - k, suffix) != 0)
        return false;
    *stem_len = n - k;
    return true;
}

/* Whether name has a slide vendor's extension: such a file is a case even
 * where OpenSlide does not take it (a truncated .svs fails as a case
 * rather than being passed over). Plain .tif files are cases only where
 * the slide job takes them: a folder may hold other images. */
static bool slide_extension(const char *name)
{
    static const char *ext[] = {".svs", ".ndpi", ".mrxs", ".vms", ".vmu", ".scn", ".bif", ".svslide"};
    size_t stem;
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
        if (ends_with(name, ext[i], &stem))
            return true;
    return false;
}

/* Whether a folder holds a DICOM file (its preamble), looking depth
 * levels down; the series themselves are the reader's to check. */
static bool holds_dicom(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char *p = join(dir, e->d_name);
        struct stat st;
        if (p && stat(p, &st) == 0) {
            if (S_ISDIR(st.st_mode) && depth > 0) {
                found = holds_dicom(p, depth - 1);
            } else if (S_ISREG(st.st_mode)) {
                FILE *f = fopen(p, "rb");
                uint8_t head[132];
                size_t n = f ? fread(head, 1, sizeof head, f) : 0;
                if (f)
                    fclose(f);
                found = sg_dicom_head(head, n);
            }
        }
        free(p);
    }
    closedir(d);
    return found;
}

static int cmp_claim(const void *a, const void *b)
{
    const claim *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->channel < y->channel ? -1 : x->channel > y->channel;
}

static int cmp_entry(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct case_list {
    one_case *c;
    size_t n;
} case_list;

static void case_list_free(case_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        one_case *c = &l->c[i];
        for (size_t k = 0; k < c->n_inputs; k++)
            free(c->inputs[k]);
        free(c->inputs);
        free(c->name);
        free(c->output);
    }
    free(l->c);
    memset(l, 0, sizeof *l);
}

static void claims_free(claim *cl, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(cl[i].name);
        free(cl[i].path);
        free(cl[i].file);
    }
    free(cl);
}

/* What entry `name` of the folder claims, if anything: *kept false for
 * an entry that names no case. */
static sg_status claim_of(const char *dir, const char *name, claim *out, bool *kept)
{
    *kept = false;
    memset(out, 0, sizeof *out);
    if (name[0] == '.') /* hidden files, and outputs being written (".NAME.segrt-...") */
        return SEGRT_OK;
    char *path = join(dir, name);
    if (!path)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory to list the folder", dir);
    struct stat st;
    size_t stem = 0;
    bool nifti = ends_with(name, ".nii.gz", &stem) || ends_with(name, ".nii", &stem);
    bool slide = false;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && !nifti)
        slide = slide_extension(name) || sg_slide_job_takes(path);
    if (stat(path, &st) != 0 || !(S_ISDIR(st.st_mode) || (S_ISREG(st.st_mode) && (nifti || slide))) ||
        (S_ISDIR(st.st_mode) && !holds_dicom(path, DICOM_SCAN_DEPTH))) {
        free(path);
        return SEGRT_OK;
    }
    out->path = path;
    out->file = dup_str(name);
    out->channel = -1;
    if (slide) {
        const char *dot = strrchr(name, '.');
        size_t len = dot && dot != name ? (size_t)(dot - name) : strlen(name);
        out->kind = CLAIM_SLIDE;
        if ((out->name = malloc(len + 1))) {
            memcpy(out->name, name, len);
            out->name[len] = '\0';
        }
    } else if (S_ISDIR(st.st_mode)) {
        out->kind = CLAIM_DICOM;
        out->name = dup_str(name);
    } else {
        /* nnU-Net's CASE_XXXX: four digits after the last underscore. */
        bool channel = stem > 5 && name[stem - 5] == '_';
        for (size_t k = stem - 4; channel && k < stem; k++)
            channel = name[k] >= '0' && name[k] <= '9';
        out->kind = channel ? CLAIM_CHANNEL : CLAIM_PLAIN;
        size_t len = channel ? stem - 5 : stem;
        out->name = malloc(len + 1);
        if (out->name) {
            memcpy(out->name, name, len);
            out->name[len] = '\0';
        }
        if (channel)
            out->channel = (int32_t)strtol(name + stem - 4, NULL, 10);
    }
    if (!out->name || !out->file) {
        free(out->name);
        free(out->path);
        free(out->file);
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory to list the folder", dir);
    }
    *kept = true;
    return SEGRT_OK;
}

/* One case from claims [a, b) of one name: its inputs, or why not. */
static sg_status case_of(claim *cl, size_t a, size_t b, const char *out_dir, const char *ext, one_case *c)
{
    memset(c, 0, sizeof *c);
    c->name = dup_str(cl[a].name);
    c->slide = cl[a].kind == CLAIM_SLIDE;
    ext = c->slide ? ".tif" : ext; /* a slide's labels: a pyramidal TIFF */
    size_t nlen = strlen(cl[a].name), elen = strlen(ext);
    char *file = malloc(nlen + elen + 1);
    if (file) {
        memcpy(file, cl[a].name, nlen);
        memcpy(file + nlen, ext, elen + 1);
        c->output = join(out_dir, file);
        free(file);
    }
    c->inputs = calloc(b - a, sizeof *c->inputs);
    if (!c->name || !c->output || !c->inputs)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for the cases");
    c->dicom = cl[a].kind == CLAIM_DICOM;
    bool mixed = false;
    for (size_t k = a; k < b; k++)
        mixed |= cl[k].kind != cl[a].kind;
    if (mixed || (b - a > 1 && cl[a].kind != CLAIM_CHANNEL)) {
        snprintf(c->error, sizeof c->error, "%s: case `%s` is claimed by both %s and %s", c->output, c->name,
                 cl[a].file, cl[a + 1].file);
    } else if (cl[a].kind == CLAIM_CHANNEL) {
        for (size_t k = a; k < b && !c->error[0]; k++) {
            int32_t want = (int32_t)(k - a);
            if (cl[k].channel != want)
                snprintf(c->error, sizeof c->error,
                         "%s: case `%s` has channel file %s but not %s_%04d (channels run from 0000 without a gap)",
                         cl[k].path, c->name, cl[k].file, c->name, cl[k].channel > want ? want : cl[k].channel);
        }
    }
    for (size_t k = a; k < b; k++) {
        if (!(c->inputs[k - a] = dup_str(cl[k].path)))
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for the cases");
        c->n_inputs++;
    }
    c->state = c->error[0] ? SEGRT_CASE_FAILED : SEGRT_CASE_STARTED;
    return SEGRT_OK;
}

/* The cases of in_dir, sorted by name. */
static sg_status list_cases(const char *in_dir, const char *out_dir, const char *ext, case_list *out)
{
    memset(out, 0, sizeof *out);
    DIR *d = opendir(in_dir);
    if (!d)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: cannot list the folder of cases: %s", in_dir,
                        strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    sg_status s = SEGRT_OK;
    struct dirent *e;
    while (s == SEGRT_OK && (e = readdir(d))) {
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            char **p = realloc(names, nc * sizeof *p);
            if (!p) {
                s = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory to list the folder", in_dir);
                break;
            }
            names = p;
            cap = nc;
        }
        if (!(names[n] = dup_str(e->d_name)))
            s = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory to list the folder", in_dir);
        else
            n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_entry); /* readdir's order is the file system's */
    claim *cl = s == SEGRT_OK ? calloc(n ? n : 1, sizeof *cl) : NULL;
    size_t ncl = 0;
    if (s == SEGRT_OK && !cl)
        s = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory to list the folder", in_dir);
    for (size_t i = 0; i < n && s == SEGRT_OK; i++) {
        bool kept;
        s = claim_of(in_dir, names[i], &cl[ncl], &kept);
        ncl += kept;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (s == SEGRT_OK && ncl)
        qsort(cl, ncl, sizeof *cl, cmp_claim);
    if (s == SEGRT_OK && !(out->c = calloc(ncl ? ncl : 1, sizeof *out->c)))
        s = sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for the cases", in_dir);
    for (size_t a = 0; a < ncl && s == SEGRT_OK;) {
        size_t b = a + 1;
        while (b < ncl && strcmp(cl[b].name, cl[a].name) == 0)
            b++;
        s = case_of(cl, a, b, out_dir, ext, &out->c[out->n]);
        out->n++;
        a = b;
    }
    if (cl)
        claims_free(cl, ncl);
    if (s != SEGRT_OK)
        case_list_free(out);
    return s;
}

/* --- reading a case ------------------------------------------------------ */

/* A case read, or why not. */
typedef struct case_read {
    sg_tensor image; /* float32 1 x C x [D x] H x W */
    sg_source_info where;
    sg_status status;
    char error[CASE_ERROR_CAP];
    uint64_t bytes; /* what the read holds, from the headers */
    char notice[CASE_ERROR_CAP]; /* what the reader said besides (a series resampled), for the calling thread */
    double seconds;
} case_read;

static bool near(double a, double b) { return fabs(a - b) <= 1e-4 * (fabs(a) > 1.0 ? fabs(a) : 1.0); }

/* Whether two channel files lie on the same grid. */
static bool same_grid(const sg_source_info *a, const sg_source_info *b)
{
    if (a->n_dims != b->n_dims)
        return false;
    for (int k = 0; k < 3; k++) {
        if (a->dims[0][k] != b->dims[0][k] || !near(a->spacing[k], b->spacing[k]) ||
            !near(a->geometry.origin[k], b->geometry.origin[k]))
            return false;
        for (int r = 0; r < 3; r++)
            if (!near(a->geometry.direction[r][k], b->geometry.direction[r][k]))
                return false;
    }
    return a->geometry.known == b->geometry.known;
}

/* The headers of a case's files: the stacked volume's info (channels
 * summed) and the bytes its read holds at its peak (the float32 volume,
 * and a channel's samples as stored while it is converted). */
static sg_status case_header(const one_case *c, const segrt_window_job_options *jo, sg_source_info *info,
                             uint64_t *bytes)
{
    if (c->error[0])
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s", c->error);
    uint64_t stored = 0;
    int32_t channels = 0;
    for (size_t k = 0; k < c->n_inputs; k++) {
        sg_source *src;
        sg_source_options so = {0, jo->series_uid, jo->allow_uneven != 0};
        SG_TRY(sg_source_open_with(c->inputs[k], &so, &src));
        sg_source_info in = src->info;
        in.format = NULL;
        sg_source_close(src);
        if (k == 0)
            *info = in;
        else if (!same_grid(info, &in))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: channel %zu of case `%s` lies on another grid than %s (dims, spacing, origin or "
                            "direction differ)",
                            c->inputs[k], k, c->name, c->inputs[0]);
        uint64_t voxels = (uint64_t)in.dims[0][0] * (uint64_t)in.dims[0][1] * (uint64_t)in.dims[0][2];
        uint64_t mine = voxels * (uint64_t)in.channels * segrt_dtype_size(in.dtype);
        stored = mine > stored ? mine : stored;
        channels += in.channels;
    }
    info->channels = channels;
    uint64_t voxels = (uint64_t)info->dims[0][0] * (uint64_t)info->dims[0][1] * (uint64_t)info->dims[0][2];
    *bytes = voxels * (uint64_t)channels * sizeof(float) + stored;
    uint64_t max_host = jo->max_host_memory;
    const char *limit_name = jo->max_host_memory_name ? jo->max_host_memory_name : "max_host_memory";
    if (max_host && *bytes > max_host)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: reading case `%s` holds %llu bytes (the volume as float32, a file's samples as stored); "
                        "the limit (%s) is %llu bytes",
                        c->inputs[0], c->name, (unsigned long long)*bytes, limit_name, (unsigned long long)max_host);
    return SEGRT_OK;
}

/* The case's files read and their channels stacked. */
static sg_status case_samples(const one_case *c, const segrt_window_job_options *jo, const sg_source_info *info,
                              sg_tensor *image, sg_source_info *where)
{
    memset(image, 0, sizeof *image);
    if (c->n_inputs == 1)
        return sg_window_job_read_volume(jo, c->inputs[0], image, where);
    int64_t plane = info->dims[0][0] * info->dims[0][1] * info->dims[0][2];
    int64_t numel = plane * info->channels;
    float *all = sg_malloc(sizeof(float) * (size_t)(numel > 0 ? numel : 1));
    if (!all)
        return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "%s: no memory for case `%s`", c->inputs[0], c->name);
    int64_t at = 0;
    for (size_t k = 0; k < c->n_inputs; k++) {
        sg_tensor one;
        sg_source_info w;
        sg_status s = sg_window_job_read_volume(jo, c->inputs[k], &one, &w);
        if (s == SEGRT_OK && (at + sg_tensor_numel(&one) > plane * info->channels || !same_grid(info, &w)))
            s = sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the file changed while segrt read it", c->inputs[k]);
        if (s != SEGRT_OK) {
            free(one.data);
            free(all);
            return s;
        }
        if (k == 0)
            *where = w;
        memcpy(all + at, one.data, sizeof(float) * (size_t)sg_tensor_numel(&one));
        at += sg_tensor_numel(&one);
        if (k + 1 == c->n_inputs) {
            *image = one;
            image->dims[1] = info->channels;
        }
        free(one.data);
    }
    if (at != plane * info->channels) {
        free(all);
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the file changed while segrt read it", c->inputs[0]);
    }
    image->data = all;
    where->channels = info->channels;
    return SEGRT_OK;
}

/* Records the calling thread's message into r. */
static void read_failed(case_read *r, sg_status s)
{
    r->status = s;
    snprintf(r->error, sizeof r->error, "%s", sg_last_error());
    sg_error_clear();
}

/* --- the reader thread ---------------------------------------------------- */

/* One case read ahead: the main thread asks for case `index`; the thread
 * reads its headers (bytes known), waits for `go` (the main thread's
 * host-memory check of the case that runs meanwhile counted it), then
 * reads its samples. */
typedef struct reader {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const case_list *cases;
    const segrt_window_job_options *jo;
    bool asked, header_known, go, done, quit;
    size_t index;
    uint64_t header_bytes; /* what the asked case's read will hold, once header_known */
    case_read r;
} reader;

/* A reader's notice kept for the calling thread (the job's callbacks are
 * called there alone). */
static void keep_notice(void *user, const char *line)
{
    case_read *r = user;
    size_t n = strlen(r->notice);
    snprintf(r->notice + n, sizeof r->notice - n, "%s%s", n ? "; " : "", line);
}

/* A case's read, headers then samples; wait_go between them (the thread). */
static void read_case(reader *rd, const one_case *c, case_read *r, bool wait_go)
{
    double t0 = sg_now_seconds();
    segrt_window_job_options jo = *rd->jo;
    jo.notice = keep_notice;
    jo.notice_user = r;
    sg_source_info info;
    sg_status s = case_header(c, &jo, &info, &r->bytes);
    if (s != SEGRT_OK)
        read_failed(r, s);
    if (wait_go) {
        pthread_mutex_lock(&rd->mu);
        rd->header_bytes = s == SEGRT_OK ? r->bytes : 0;
        rd->header_known = true;
        pthread_cond_broadcast(&rd->cv);
        while (s == SEGRT_OK && !rd->go && !rd->quit)
            pthread_cond_wait(&rd->cv, &rd->mu);
        bool quit = rd->quit;
        pthread_mutex_unlock(&rd->mu);
        if (quit)
            return;
        t0 = sg_now_seconds(); /* the wait is the main thread's, not the read's */
    }
    if (s == SEGRT_OK && (s = case_samples(c, &jo, &info, &r->image, &r->where)) != SEGRT_OK)
        read_failed(r, s);
    r->seconds += sg_now_seconds() - t0;
}

static void *reader_main(void *arg)
{
    reader *rd = arg;
    pthread_mutex_lock(&rd->mu);
    for (;;) {
        while (!rd->asked && !rd->quit)
            pthread_cond_wait(&rd->cv, &rd->mu);
        if (rd->quit)
            break;
        rd->asked = false;
        const one_case *c = &rd->cases->c[rd->index];
        pthread_mutex_unlock(&rd->mu);
        case_read r;
        memset(&r, 0, sizeof r);
        read_case(rd, c, &r, true);
        pthread_mutex_lock(&rd->mu);
        if (rd->quit) {
            free(r.image.data);
            break;
        }
        rd->r = r;
        rd->done = true;
        pthread_cond_broadcast(&rd->cv);
    }
    pthread_mutex_unlock(&rd->mu);
    return NULL;
}

/* Asks the thread for case i. */
static void reader_ask(reader *rd, size_t i)
{
    pthread_mutex_lock(&rd->mu);
    rd->index = i;
    rd->asked = true;
    rd->header_known = rd->go = rd->done = false;
    pthread_cond_broadcast(&rd->cv);
    pthread_mutex_unlock(&rd->mu);
}

/* Waits for the asked case's headers: the bytes its read will hold (0
 * when it already failed). */
static uint64_t reader_header(reader *rd)
{
    pthread_mutex_lock(&rd->mu);
    while (!rd->header_known && !rd->done)
        pthread_cond_wait(&rd->cv, &rd->mu);
    uint64_t b = rd->done ? 0 : rd->header_bytes;
    pthread_mutex_unlock(&rd->mu);
    return b;
}

static void reader_go(reader *rd)
{
    pthread_mutex_lock(&rd->mu);
    rd->go = true;
    pthread_cond_broadcast(&rd->cv);
    pthread_mutex_unlock(&rd->mu);
}

/* Waits for the asked case's read and takes it. */
static void reader_take(reader *rd, case_read *out)
{
    pthread_mutex_lock(&rd->mu);
    rd->go = true; /* a case never checked against another is read now */
    pthread_cond_broadcast(&rd->cv);
    while (!rd->done)
        pthread_cond_wait(&rd->cv, &rd->mu);
    *out = rd->r;
    memset(&rd->r, 0, sizeof rd->r);
    rd->done = false;
    pthread_mutex_unlock(&rd->mu);
}

/* --- summary.json --------------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f); /* UTF-8 passes as it is; other bytes as they are */
    }
    fputc('"', f);
}

/* A number JSON can hold (NaN and infinities are not). */
static void json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.17g", v);
    else
        fputs("null", f);
}

static const char *state_name(const one_case *c)
{
    if (!c->listed)
        return "pending";
    switch (c->state) {
    case SEGRT_CASE_DONE:
        return "done";
    case SEGRT_CASE_SKIPPED:
        return "skipped";
    case SEGRT_CASE_FAILED:
        return "failed";
    default:
        return "running";
    }
}

typedef struct cases_job {
    const segrt_window_job_options *jo;
    const segrt_cases_options *co;
    const char *in_dir, *out_dir, *ext;
    char *summary; /* NULL: none */
    case_list cases;
    double t0;
} cases_job;

static void write_summary_to(FILE *f, const cases_job *cj, const segrt_cases_report *r)
{
    fputs("{\n  \"segrt_version\": ", f);
    json_str(f, segrt_version());
    fputs(",\n  \"in_dir\": ", f);
    json_str(f, cj->in_dir);
    fputs(",\n  \"out_dir\": ", f);
    json_str(f, cj->out_dir);
    fputs(",\n  \"cases\": [", f);
    for (size_t i = 0; i < cj->cases.n; i++) {
        const one_case *c = &cj->cases.c[i];
        fputs(i ? ",\n    {" : "\n    {", f);
        fputs("\"name\": ", f);
        json_str(f, c->name);
        fputs(", \"inputs\": [", f);
        for (size_t k = 0; k < c->n_inputs; k++) {
            if (k)
                fputs(", ", f);
            json_str(f, c->inputs[k]);
        }
        fputs("], \"kind\": ", f);
        json_str(f, c->slide ? "slide" : c->dicom ? "dicom" : "nifti");
        fputs(", \"output\": ", f);
        json_str(f, c->output);
        fputs(", \"status\": ", f);
        json_str(f, state_name(c));
        fputs(", \"error\": ", f);
        if (c->listed && c->state == SEGRT_CASE_FAILED)
            json_str(f, c->error);
        else
            fputs("null", f);
        fputs(",\n     \"shape\": ", f);
        if (c->channels > 0) {
            fprintf(f, "{\"dims\": [%lld, %lld, %lld], \"channels\": %d, \"spacing\": [", (long long)c->dims[0],
                    (long long)c->dims[1], (long long)c->dims[2], c->channels);
            for (int k = 0; k < 3; k++) {
                if (k)
                    fputs(", ", f);
                json_num(f, c->spacing[k]);
            }
            fputs("]}", f);
        } else {
            fputs("null", f);
        }
        fputs(",\n     \"seconds\": {\"read\": ", f);
        json_num(f, c->seconds_read);
        fputs(", \"wait\": ", f);
        json_num(f, c->seconds_wait);
        fputs(", \"run\": ", f);
        json_num(f, c->seconds_run);
        fputs(", \"windows\": ", f);
        json_num(f, c->seconds_windows);
        fputs(", \"write\": ", f);
        json_num(f, c->seconds_write);
        fputs(", \"total\": ", f);
        json_num(f, c->seconds_total);
        fputs("}}", f);
    }
    size_t pending = r->cases - r->done - r->skipped - r->failed;
    fprintf(f,
            "\n  ],\n  \"totals\": {\"cases\": %zu, \"done\": %zu, \"skipped\": %zu, \"failed\": %zu, "
            "\"pending\": %zu, \"seconds\": ",
            r->cases, r->done, r->skipped, r->failed, pending);
    json_num(f, sg_now_seconds() - cj->t0);
    fputs("}\n}\n", f);
}

/* summary.json rewritten whole (an output: temporary file, renamed). */
static sg_status write_summary(const cases_job *cj, const segrt_cases_report *r)
{
    if (!cj->summary)
        return SEGRT_OK;
    sg_output *o;
    SG_TRY(sg_output_open(cj->summary, &o));
    FILE *f = sg_output_stream(o);
    if (!f) {
        sg_output_discard(o);
        return sg_error(SEGRT_ERROR_IO, "%s: cannot write the summary", cj->summary);
    }
    write_summary_to(f, cj, r);
    if (ferror(f)) {
        sg_output_discard(o);
        return sg_error(SEGRT_ERROR_IO, "%s: cannot write the summary", cj->summary);
    }
    return sg_output_commit(o);
}

/* --- the job ------------------------------------------------------------- */

void segrt_cases_options_init(segrt_cases_options *c)
{
    if (c)
        memset(c, 0, sizeof *c);
}

void segrt_cases_report_free(segrt_cases_report *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->failed; i++)
        free(r->failed_names ? r->failed_names[i] : NULL);
    free(r->failed_names);
    memset(r, 0, sizeof *r);
}

/* The callback of a case's change of state. */
static void tell(const cases_job *cj, size_t i)
{
    if (!cj->co->on_case)
        return;
    const one_case *c = &cj->cases.c[i];
    segrt_case_info info;
    memset(&info, 0, sizeof info);
    info.name = c->name;
    info.index = i;
    info.count = cj->cases.n;
    info.inputs = (const char *const *)c->inputs;
    info.n_inputs = c->n_inputs;
    info.output = c->output;
    info.state = c->state;
    info.error = c->state == SEGRT_CASE_FAILED ? c->error : "";
    info.channels = c->channels;
    memcpy(info.dims, c->dims, sizeof info.dims);
    memcpy(info.spacing, c->spacing, sizeof info.spacing);
    info.seconds_read = c->seconds_read;
    info.seconds_wait = c->seconds_wait;
    info.seconds_run = c->seconds_run;
    info.seconds_write = c->seconds_write;
    info.seconds_total = c->seconds_total;
    cj->co->on_case(cj->co->on_case_user, &info);
}

/* Counts case i's end in the report. */
static sg_status count_case(cases_job *cj, size_t i, segrt_cases_report *r)
{
    one_case *c = &cj->cases.c[i];
    c->listed = true;
    if (c->state == SEGRT_CASE_DONE) {
        r->done++;
    } else if (c->state == SEGRT_CASE_SKIPPED) {
        r->skipped++;
    } else {
        char **p = realloc(r->failed_names, (r->failed + 1) * sizeof *p);
        if (!p)
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for the report");
        r->failed_names = p;
        if (!(p[r->failed] = dup_str(c->name)))
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for the report");
        r->failed++;
    }
    tell(cj, i);
    return write_summary(cj, r);
}

static void case_failed(one_case *c, const char *msg)
{
    c->state = SEGRT_CASE_FAILED;
    snprintf(c->error, sizeof c->error, "%s", msg);
}

static void let_go(void *user) { reader_go(user); }

/* Whether a failure stops the job rather than its case: the device or
 * segrt itself broke, which no later case would escape. */
static bool stops_job(sg_status s) { return s == SEGRT_ERROR_DEVICE || s == SEGRT_ERROR_INTERNAL; }

/* A case's run ended with s (started at t0; `windows` and `write` the
 * job's times): its output committed or discarded, its times and state
 * set. */
static sg_status case_end(one_case *c, sg_output *out, sg_status s, double t0, double windows, double write)
{
    double t1 = sg_now_seconds();
    c->seconds_windows = windows;
    c->seconds_write = write;
    c->seconds_run = t1 - t0 - write;
    if (s == SEGRT_OK) {
        s = sg_output_commit(out);
        out = NULL;
    }
    sg_output_discard(out);
    c->seconds_write += sg_now_seconds() - t1;
    if (s == SEGRT_OK)
        c->state = SEGRT_CASE_DONE;
    else
        case_failed(c, sg_last_error());
    return s;
}

/* Runs case i over its volume read (r, taken). */
static sg_status run_case(cases_job *cj, sg_window_job *wj, size_t i, case_read *r, reader *rd, bool ahead_asked)
{
    one_case *c = &cj->cases.c[i];
    sg_output *out = NULL;
    sg_status s = sg_output_open(c->output, &out);
    uint64_t ahead = ahead_asked ? reader_header(rd) : 0;
    double t0 = sg_now_seconds();
    sg_window_run_more more;
    memset(&more, 0, sizeof more);
    more.held_elsewhere = ahead;
    more.checked = ahead_asked ? let_go : NULL;
    more.checked_user = rd;
    segrt_window_job_report wr;
    if (s == SEGRT_OK)
        s = sg_window_job_run_volume(wj, c->inputs[0], &r->image, &r->where, out, &wr, &more);
    if (s != SEGRT_OK && more.memory_refused && ahead > 0) {
        /* Not with the next case beside it: alone, the next read after. */
        sg_error_clear();
        if (cj->jo->notice) {
            char line[CASE_ERROR_CAP];
            snprintf(line, sizeof line,
                     "case %s runs alone: with the next case read ahead (%llu bytes) the host memory check "
                     "refused it; the next case is read after it",
                     c->name, (unsigned long long)ahead);
            cj->jo->notice(cj->jo->notice_user, line);
        }
        memset(&more, 0, sizeof more);
        s = sg_window_job_run_volume(wj, c->inputs[0], &r->image, &r->where, out, &wr, &more);
    }
    free(r->image.data);
    r->image.data = NULL;
    if (ahead_asked)
        reader_go(rd); /* whatever became of this case, the next one is read */
    return case_end(c, out, s, t0, wr.seconds, more.seconds_write);
}

/* Runs slide case i: the window job reads the slide itself. */
static sg_status run_slide_case(cases_job *cj, sg_window_job *wj, size_t i)
{
    one_case *c = &cj->cases.c[i];
    sg_output *out = NULL;
    sg_status s = sg_output_open(c->output, &out);
    double t0 = sg_now_seconds(), write = 0;
    segrt_window_job_report wr;
    memset(&wr, 0, sizeof wr);
    if (s == SEGRT_OK)
        s = sg_window_job_run_file(wj, c->inputs[0], out, &wr, &write);
    if (wr.image.rank == 4) { /* 1 x 3 x H x W: the grid the windows ran over */
        c->channels = (int32_t)wr.image.dims[1];
        c->dims[0] = 1;
        c->dims[1] = wr.image.dims[2];
        c->dims[2] = wr.image.dims[3];
    }
    return case_end(c, out, s, t0, wr.seconds, write);
}

/* Options checked, outputs' folder too; the cases listed. */
static sg_status cases_setup(cases_job *cj, const segrt_cases_options *co)
{
    cj->co = co;
    cj->in_dir = co->in_dir;
    cj->out_dir = co->out_dir;
    cj->ext = co->extension ? co->extension : ".nii.gz";
    if (!cj->in_dir || !cj->out_dir)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_cases_run: in_dir and out_dir must not be NULL");
    if (strcmp(cj->ext, ".nii.gz") != 0 && strcmp(cj->ext, ".nii") != 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_cases_run: extension `%s` (.nii.gz or .nii)", cj->ext);
    struct stat st;
    if (stat(cj->in_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: not a folder of cases", cj->in_dir);
    if (stat(cj->out_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "%s: the results' folder does not exist", cj->out_dir);
    sg_file_id a, b;
    SG_TRY(sg_file_identity(cj->in_dir, &a));
    SG_TRY(sg_file_identity(cj->out_dir, &b));
    if (sg_file_id_equal(&a, &b))
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: the results would go into the folder of cases (and be taken for cases next time); "
                        "give another output folder",
                        cj->out_dir);
    const char *sp = co->summary_path;
    if (!sp || *sp) {
        cj->summary = sp ? dup_str(sp) : join(cj->out_dir, "summary.json");
        if (!cj->summary)
            return sg_error(SEGRT_ERROR_OUT_OF_MEMORY, "no memory for the job");
        SG_TRY(sg_output_check(cj->summary));
    }
    SG_TRY(list_cases(cj->in_dir, cj->out_dir, cj->ext, &cj->cases));
    if (cj->cases.n == 0)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                        "%s: no cases (NIfTI files, CASE_0000.nii.gz channel files, subfolders of DICOM files, or "
                        "whole slides)",
                        cj->in_dir);
    const segrt_window_job_options *jo = cj->jo;
    for (size_t i = 0; i < cj->cases.n; i++)
        if (cj->cases.c[i].slide && (jo->thumbnail_path || jo->tissue_mask_path || jo->geojson_path))
            return sg_error(SEGRT_ERROR_INVALID_ARGUMENT,
                            "%s: a folder of slides writes each slide's labels only: a thumbnail, tissue mask or "
                            "GeoJSON path would be one file for every slide (run the slides one by one for them)",
                            cj->cases.c[i].inputs[0]);
    for (size_t i = 0; i < cj->cases.n; i++) {
        one_case *c = &cj->cases.c[i];
        if (c->state == SEGRT_CASE_STARTED && co->skip_existing && lstat(c->output, &st) == 0 && S_ISREG(st.st_mode))
            c->state = SEGRT_CASE_SKIPPED;
    }
    return SEGRT_OK;
}

/* The next case after i that will be read, or n (a slide is not read:
 * the window job reads it as it runs). */
static size_t next_to_read(const case_list *l, size_t i)
{
    for (size_t j = i + 1; j < l->n; j++)
        if (l->c[j].state == SEGRT_CASE_STARTED)
            return l->c[j].slide ? l->n : j;
    return l->n;
}

static sg_status cases_loop(cases_job *cj, sg_window_job *wj, reader *rd, bool prefetch, segrt_cases_report *r)
{
    case_list *l = &cj->cases;
    size_t asked = l->n; /* the case the thread reads, if any */
    sg_status stop = SEGRT_OK;
    size_t stopped = 0;
    for (size_t i = 0; i < l->n && stop == SEGRT_OK; i++) {
        one_case *c = &l->c[i];
        if (c->state != SEGRT_CASE_STARTED) { /* skipped, or refused when listed */
            SG_TRY(count_case(cj, i, r));
            continue;
        }
        double t0 = sg_now_seconds();
        if (c->slide) {
            c->listed = true;
            tell(cj, i); /* STARTED */
            sg_status s = run_slide_case(cj, wj, i);
            if (stops_job(s)) {
                stop = s;
                stopped = i;
            }
            c->seconds_total = sg_now_seconds() - t0;
            SG_TRY(count_case(cj, i, r));
            continue;
        }
        case_read cr;
        memset(&cr, 0, sizeof cr);
        if (asked == i) {
            reader_take(rd, &cr);
            c->seconds_wait = sg_now_seconds() - t0;
        } else {
            read_case(rd, c, &cr, false);
        }
        asked = l->n;
        c->seconds_read = cr.seconds;
        if (cr.status == SEGRT_OK) {
            c->channels = (int32_t)cr.where.channels;
            for (int k = 0; k < 3; k++) {
                c->dims[k] = cr.where.dims[0][k];
                c->spacing[k] = cr.where.spacing[k];
            }
        }
        size_t j = next_to_read(l, i);
        if (prefetch && j < l->n) {
            reader_ask(rd, j);
            asked = j;
        }
        sg_status s = cr.status;
        if (s != SEGRT_OK) {
            case_failed(c, cr.error);
            if (asked < l->n)
                reader_go(rd);
        } else {
            c->listed = true;
            if (cr.notice[0] && cj->jo->notice)
                cj->jo->notice(cj->jo->notice_user, cr.notice);
            tell(cj, i); /* STARTED */
            s = run_case(cj, wj, i, &cr, rd, asked < l->n);
            if (stops_job(s)) {
                stop = s;
                stopped = i;
            }
        }
        free(cr.image.data);
        c->seconds_total = sg_now_seconds() - t0;
        SG_TRY(count_case(cj, i, r));
    }
    if (asked < l->n) { /* stopped with a read under way: drop it */
        case_read cr;
        reader_take(rd, &cr);
        free(cr.image.data);
    }
    if (stop != SEGRT_OK)
        return sg_error(stop, "%s (the job stopped there)", l->c[stopped].error);
    return SEGRT_OK;
}

segrt_status segrt_cases_run(const segrt_window_job_options *o, segrt_model *const *models,
                             const char *const *model_paths, size_t n_models, const segrt_cases_options *c,
                             segrt_cases_report *report)
{
    segrt_cases_report scratch;
    segrt_cases_report *r = report ? report : &scratch;
    memset(r, 0, sizeof *r);
    if (!o || !models || !c)
        return sg_error(SEGRT_ERROR_INVALID_ARGUMENT, "segrt_cases_run: options, models and cases must not be NULL");
    cases_job cj;
    memset(&cj, 0, sizeof cj);
    cj.t0 = sg_now_seconds();
    cj.jo = o;
    sg_window_job *wj = NULL;
    sg_status s = cases_setup(&cj, c);
    if (s == SEGRT_OK)
        s = sg_window_job_create(o, models, model_paths, n_models, &wj);
    reader rd;
    memset(&rd, 0, sizeof rd);
    rd.cases = &cj.cases;
    rd.jo = o;
    bool prefetch = false;
    if (s == SEGRT_OK && !c->no_prefetch) {
        pthread_mutex_init(&rd.mu, NULL);
        pthread_cond_init(&rd.cv, NULL);
        prefetch = pthread_create(&rd.thread, NULL, reader_main, &rd) == 0;
        if (!prefetch) { /* no thread to be had: each case read in its turn */
            pthread_cond_destroy(&rd.cv);
            pthread_mutex_destroy(&rd.mu);
        }
    }
    r->cases = cj.cases.n;
    if (s == SEGRT_OK)
        s = write_summary(&cj, r);
    if (s == SEGRT_OK)
        s = cases_loop(&cj, wj, &rd, prefetch, r);
    if (prefetch) {
        pthread_mutex_lock(&rd.mu);
        rd.quit = true;
        pthread_cond_broadcast(&rd.cv);
        pthread_mutex_unlock(&rd.mu);
        pthread_join(rd.thread, NULL);
        free(rd.r.image.data);
        pthread_cond_destroy(&rd.cv);
        pthread_mutex_destroy(&rd.mu);
    }
    sg_window_job_free(wj);
    r->seconds = sg_now_seconds() - cj.t0;
    if (s == SEGRT_OK) {
        sg_status w = write_summary(&cj, r);
        if (w != SEGRT_OK)
            s = w;
    }
    if (s == SEGRT_OK && r->failed) {
        char list[512];
        size_t at = 0;
        list[0] = '\0';
        for (size_t i = 0; i < r->failed && at + 1 < sizeof list; i++) {
            int k = snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", r->failed_names[i]);
            at += k > 0 ? (size_t)k : 0;
        }
        if (at >= sizeof list)
            memcpy(list + sizeof list - 4, "...", 4);
        s = sg_error(SEGRT_ERROR_CASES_FAILED, "%s: %zu of %zu cases failed: %s", cj.in_dir, r->failed, r->cases, list);
    }
    free(cj.summary);
    case_list_free(&cj.cases);
    return s;
}
