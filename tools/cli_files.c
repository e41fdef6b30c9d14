/* A command's inputs and outputs, checked before any work (cli_files.h). */
#include "cli_files.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int cli_files_input(cli_files *f, const char *path, const char *what)
{
    if (f->n_in == CLI_MAX_FILES) {
        f->n_in++; /* reported by cli_files_check */
        return -1;
    }
    if (f->n_in > CLI_MAX_FILES)
        return -1;
    f->in[f->n_in].path = path;
    f->in[f->n_in].what = what;
    return f->n_in++;
}

int cli_files_output(cli_files *f, const char *path, const char *what, unsigned formats)
{
    if (f->n_out == CLI_MAX_FILES) {
        f->n_out++;
        return -1;
    }
    if (f->n_out > CLI_MAX_FILES)
        return -1;
    f->out[f->n_out].path = path;
    f->out[f->n_out].what = what;
    f->out[f->n_out].formats = formats;
    f->out[f->n_out].out = NULL;
    return f->n_out++;
}

static const struct {
    const char *ext;
    unsigned format;
} extensions[] = {{".npy", CLI_NPY},   {".png", CLI_PNG},   {".tif", CLI_TIFF},
                  {".tiff", CLI_TIFF}, {".plan", CLI_PLAN}, {".nii", CLI_NIFTI}, {".dcm", CLI_DICOM}};

unsigned cli_files_format(const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash + 1 : path, '.');
    size_t n = strlen(path);
    if (n > 7 && strcasecmp(path + n - 7, ".nii.gz") == 0)
        return CLI_NIFTI;
    for (size_t i = 0; dot && i < sizeof extensions / sizeof extensions[0]; i++)
        if (strcasecmp(dot, extensions[i].ext) == 0)
            return extensions[i].format;
    return 0;
}

/* "a .npy, .png or .tif file" for a set of formats. */
static const char *formats_text(unsigned formats, char *buf, size_t cap)
{
    static const char *const names[] = {".npy", ".png", ".tif", ".plan", ".nii(.gz)", ".dcm"};
    const char *pick[6];
    int n = 0;
    for (int b = 0; b < 6; b++)
        if (formats & (1u << b))
            pick[n++] = names[b];
    /* "a .npy file", "a .npy or .png file", "a .npy, .png or .tif file" */
    size_t at = (size_t)snprintf(buf, cap, "a %s", pick[0]);
    for (int i = 1; i < n && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i == n - 1 ? " or " : ", ", pick[i]);
    if (at < cap)
        snprintf(buf + at, cap - at, " file");
    return buf;
}

static int check_extension(const char *path, const char *what, unsigned formats)
{
    if (cli_files_format(path) & formats)
        return CLI_OK;
    char want[96];
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash + 1 : path, '.');
    if (!dot)
        return cli_usage_error("%s: %s wants %s; the name has no extension", path, what,
                               formats_text(formats, want, sizeof want));
    return cli_usage_error("%s: %s wants %s; segrt does not write %s files there", path, what,
                           formats_text(formats, want, sizeof want), dot);
}

int cli_files_check(cli_files *f, bool open_outputs)
{
    if (f->n_in > CLI_MAX_FILES || f->n_out > CLI_MAX_FILES)
        return cli_usage_error("more than %d input or output files", CLI_MAX_FILES);
    segrt_status s;
    segrt_file_id in_ids[CLI_MAX_FILES], out_ids[CLI_MAX_FILES];
    bool in_known[CLI_MAX_FILES];
    for (int i = 0; i < f->n_in; i++) /* one that does not exist fails when it is read */
        in_known[i] = segrt_file_identity(f->in[i].path, &in_ids[i]) == SEGRT_OK && in_ids[i].exists;
    for (int j = 0; j < f->n_out; j++) {
        const char *path = f->out[j].path, *what = f->out[j].what;
        if ((s = segrt_output_check(path)) != SEGRT_OK || (s = segrt_file_identity(path, &out_ids[j])) != SEGRT_OK)
            return cli_fail(s);
        int rc = check_extension(path, what, f->out[j].formats);
        if (rc != CLI_OK)
            return rc;
        for (int i = 0; i < f->n_in; i++)
            if (in_known[i] && segrt_file_id_equal(&in_ids[i], &out_ids[j]))
                return cli_usage_error("%s: %s is the same file as %s %s; segrt does not overwrite its inputs", path,
                                       what, f->in[i].what, f->in[i].path);
        for (int k = 0; k < j; k++)
            if (segrt_file_id_equal(&out_ids[k], &out_ids[j]))
                return cli_usage_error("%s: %s and %s (%s) name the same file", path, what, f->out[k].what,
                                       f->out[k].path);
    }
    for (int j = 0; open_outputs && j < f->n_out; j++)
        if ((s = segrt_output_open(f->out[j].path, &f->out[j].out)) != SEGRT_OK) {
            cli_files_close(f);
            return cli_fail(s);
        }
    return CLI_OK;
}

int cli_files_commit(cli_files *f, int i)
{
    segrt_output *o = f->out[i].out;
    f->out[i].out = NULL;
    if (segrt_output_commit(o) == SEGRT_OK)
        return CLI_OK;
    fprintf(stderr, "segrt: %s\n", segrt_last_error());
    return CLI_RUNTIME;
}

void cli_files_close(cli_files *f)
{
    for (int j = 0; j < f->n_out && j < CLI_MAX_FILES; j++) {
        segrt_output_discard(f->out[j].out);
        f->out[j].out = NULL;
    }
}

static void on_signal(int sig)
{
    segrt_abandon_outputs();
    /* SA_RESETHAND restored the default action: raised again, the signal
     * ends the process as it would have without this handler once the
     * handler returns. */
    raise(sig);
}

void cli_files_on_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = (int)SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        /* A signal the caller chose to ignore (nohup, a background job)
         * stays ignored. */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        sigaction(sigs[i], &sa, NULL);
    }
}
