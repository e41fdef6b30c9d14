/* Reading a whole file into memory, with the checks every reader needs. */
#ifndef SG_CORE_FILE_H
#define SG_CORE_FILE_H

#include "core/status.h"

#include <stddef.h>
#include <stdint.h>

/* Reads the regular file at path into a new buffer (*out, freed by the
 * caller; never NULL on success, even for an empty file). A file over
 * max_bytes fails with INVALID_MODEL, "PATH: N bytes, more than LIMIT"
 * where limit says what the cap is. Other failures are IO errors naming
 * the file. */
sg_status sg_read_file(const char *path, uint64_t max_bytes, const char *limit, uint8_t **out, size_t *size);

/* Writing a file whole or not at all: write to the name sg_tmp_path gives
 * (PATH.tmp.PID.SEQ, unique to the call, in path's directory so that the
 * rename stays on one file system), then sg_tmp_commit renames it onto path, or sg_tmp_discard
 * removes it after a failure. sg_tmp_path fails with IO when the name does
 * not fit cap; sg_tmp_commit with IO naming path (tmp removed). */
sg_status sg_tmp_path(const char *path, char *tmp, size_t cap);
sg_status sg_tmp_commit(const char *tmp, const char *path);
void sg_tmp_discard(const char *tmp);

#endif
