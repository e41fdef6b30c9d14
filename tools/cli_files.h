/* The files one command reads and writes, checked together before any
 * work, so that a job of minutes cannot fail at its last step on a typo
 * or overwrite what it reads:
 *   - every output's extension names a format segrt writes there (no
 *     extension, or another, is an error: nothing is written as NPY by
 *     default);
 *   - its folder exists and is writable, and it is absent or a regular
 *     file (never a link, a folder, a device such as /dev/null, a FIFO or
 *     a socket);
 *   - it is not the same file as an input or as another output (device
 *     and inode compared, so other spellings and hard links count).
 * Then every output is opened (segrt_output_open: a temporary file beside
 * it, renamed into place on commit), so the check is the real thing, and an
 * interrupted run removes them (cli_files_on_signals). */
#ifndef SEGRT_CLI_FILES_H
#define SEGRT_CLI_FILES_H

#include "cli.h"

#define CLI_MAX_FILES 80

/* Formats an output may take, as a set. */
enum { CLI_NPY = 1, CLI_PNG = 2, CLI_TIFF = 4, CLI_PLAN = 8, CLI_NIFTI = 16, CLI_DICOM = 32 };

typedef struct cli_files {
    int n_in, n_out;
    struct {
        const char *path, *what;
    } in[CLI_MAX_FILES];
    struct {
        const char *path, *what;
        unsigned formats;
        segrt_output *out;
    } out[CLI_MAX_FILES];
} cli_files;

/* Records an input (what: "the model", "the image") or an output (what:
 * the option that named it, e.g. "-o" or "--overlay"); returns its index,
 * or -1 past CLI_MAX_FILES (reported by cli_files_open). */
int cli_files_input(cli_files *f, const char *path, const char *what);
int cli_files_output(cli_files *f, const char *path, const char *what, unsigned formats);

/* Checks every file as the header says, then opens every output. Returns
 * an exit code (2 with one line naming the file and the problem). */
int cli_files_check(cli_files *f, bool open_outputs);

/* The format output i's extension names (one of CLI_NPY...). */
unsigned cli_files_format(const char *path);

/* Commits output i (taken from f); returns an exit code (1 when the write
 * fails: a runtime failure, the checks having passed). */
int cli_files_commit(cli_files *f, int i);

/* Discards every output not committed. */
void cli_files_close(cli_files *f);

/* SIGINT, SIGTERM and SIGHUP remove the temporary files of outputs being
 * written (segrt_abandon_outputs), then end the process as the signal
 * would have. */
void cli_files_on_signals(void);

#endif
