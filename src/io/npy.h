/* NumPy .npy files (format versions 1 to 3, little-endian, C order). */
#ifndef SG_IO_NPY_H
#define SG_IO_NPY_H

#include "core/file.h"
#include "core/tensor.h"

/* Reads path into *out; out->data is malloc'd and owned by the caller.
 * The header is read and the file's size checked against it before the
 * data's buffer is allocated; the data is then read straight into it.
 * Errors name the file: IO (cannot read), INVALID_MODEL (malformed header,
 * size that does not match the header, an array over 64 GiB), UNSUPPORTED
 * (Fortran order, big-endian or a dtype segrt lacks). */
sg_status sg_npy_read(const char *path, sg_tensor *out);

/* What sg_npy_read(path) would give, from the header and the file's size
 * alone: out's dtype, rank and dims, out->data NULL. Errors as
 * sg_npy_read's, for the same files (only a read error of the data itself
 * is left to the read). */
sg_status sg_npy_probe(const char *path, sg_tensor *out);

/* Parses .npy bytes in memory; name is used in messages. out->data points
 * into a new malloc'd copy. */
sg_status sg_npy_parse(const void *bytes, size_t size, const char *name, sg_tensor *out);

/* The header of an NPY file of size bytes whose first have bytes are at
 * bytes (all of them, or at least the preamble and header): dtype and
 * dims into out (data NULL) and where the data starts, with every check
 * sg_npy_read makes before it allocates. For readers that map the file. */
sg_status sg_npy_parse_start(const void *bytes, size_t have, uint64_t size, const char *name, sg_tensor *out,
                             size_t *data_at);

/* Writes t into the output o (core/file.h), which the caller then commits
 * or discards. Errors name o's destination. */
sg_status sg_npy_write_to(sg_output *o, const sg_tensor *t);

/* Writes only the preamble and header sg_npy_write_to writes for t's
 * dtype and dims (t->data unused): the data is to follow, t's bytes in C
 * order (a sink writes them by parts). */
sg_status sg_npy_write_header_to(sg_output *o, const sg_tensor *t);

/* Writes t to path whole or not at all (an output opened, written and
 * committed). */
sg_status sg_npy_write(const char *path, const sg_tensor *t);

#endif
