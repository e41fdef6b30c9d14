/* Shared pieces of the segrt command: argument helpers and exit codes. */
#ifndef SEGRT_CLI_H
#define SEGRT_CLI_H

#include "segrt.h"

#include <stdbool.h>
#include <stdint.h>

/* Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input. */
enum { CLI_OK = 0, CLI_RUNTIME = 1, CLI_BAD_INPUT = 2 };

/* Prints "segrt: <message>" on one line to stderr and returns the exit code
 * the status maps to. */
int cli_fail(segrt_status status);
/* Prints "segrt: <formatted>" and returns CLI_BAD_INPUT. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parses "NAME=1x3x512x512" into name (pointing into arg, NUL-terminated
 * by replacing '='), rank and dims. */
bool cli_parse_shape(char *arg, const char **name, int32_t *rank, int64_t *dims);
/* Parses "NAME=DIMS" where each dim is N or MIN:OPT:MAX (a profile). */
bool cli_parse_shape_range(char *arg, const char **name, int32_t *rank, int64_t *min, int64_t *opt, int64_t *max);

/* Parses a non-negative decimal integer. */
bool cli_parse_int(const char *s, int64_t *out);
/* A byte count: "1T", "4G", "512M", "1024K" (an optional B or iB after), or
 * bytes; false for a sign, other text or a count past SIZE_MAX. */
bool cli_parse_size(const char *s, size_t *out);

/* Whether the file's first bytes are a PNG, JPEG or TIFF image; and
 * whether its name's extension says it is one. */
bool cli_is_image_file(const char *path);
bool cli_is_image_name(const char *path);
/* Whether path is a folder (links followed). */
bool cli_is_folder(const char *path);

/* Formats dims as "1x3x256x256" ("scalar" for rank 0) into buf. */
const char *cli_dims(const int64_t *dims, int32_t rank, char *buf, size_t cap);
/* Formats a descriptor's dims: "s77x3xs53xs0", "?" for unknown dims. */
const char *cli_format_dims(const segrt_tensor_desc *d, char *buf, size_t cap);

int cmd_info(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_build(int argc, char **argv);

#endif
