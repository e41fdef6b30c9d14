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

#endif
