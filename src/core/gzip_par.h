/* A gzip file deflated by several threads, as pigz does: ONE gzip member
 * whose deflate stream is cut into blocks, each deflated by a worker as a
 * raw stream primed with the previous block's last 32 KiB (so matches
 * still reach back across the cut) and ended with a sync flush (a byte
 * boundary, not a final block), the last block with Z_FINISH. The blocks
 * are written in order after one header; the CRC-32 is combined from the
 * blocks' CRCs. A reader sees one ordinary member (some NIfTI readers stop
 * after the first member, so concatenated members would not do).
 *
 * The block cuts depend on the block size only, so the bytes written do
 * not depend on the number of threads or on how the data was split among
 * sg_gzip_par_write calls.
 *
 * Memory is bounded: at most two blocks per worker are in flight; a write
 * that finds them all taken waits for the oldest and writes it out. With
 * 0 workers the caller deflates each block itself.
 *
 * Needs zlib (SEGRT_HAVE_ZLIB, which every build has); without it
 * sg_gzip_par_new fails with UNSUPPORTED. */
#ifndef SG_CORE_GZIP_PAR_H
#define SG_CORE_GZIP_PAR_H

#include "core/status.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct sg_gzip_par sg_gzip_par;

/* The bytes of one block, where a caller passes 0. */
#define SG_GZIP_PAR_BLOCK ((size_t)1 << 20)

/* The number of workers for `bytes` of input in blocks of `block`: the
 * machine's online cores (at most 16) and no more than there are blocks;
 * 0 (the caller deflates) on a one-core machine or for fewer than four
 * blocks, where threads would cost more than they save. */
int sg_gzip_par_workers(uint64_t bytes, size_t block);

/* A stream deflating at zlib level `level` into f (positioned where the
 * gzip file starts; the stream writes but never closes it), with
 * `workers` threads (0: the caller deflates) and blocks of `block` bytes
 * (0: SG_GZIP_PAR_BLOCK; at least 64 KiB, at most 1 GiB). name is the
 * file's name for messages (copied). Writes the gzip header. Errors name
 * the file: OUT_OF_MEMORY, IO when the header's write fails, INTERNAL
 * when a thread does not start. */
sg_status sg_gzip_par_new(FILE *f, const char *name, int level, int workers, size_t block, sg_gzip_par **out);

/* Appends n bytes. Errors name the file: IO when a write failed, INTERNAL
 * when deflate failed, OUT_OF_MEMORY; after one, every later call fails
 * too. */
sg_status sg_gzip_par_write(sg_gzip_par *g, const void *p, size_t n);

/* Deflates what is left, writes every block and the trailer (CRC-32 and
 * the length mod 2^32). The stream must still be freed. */
sg_status sg_gzip_par_finish(sg_gzip_par *g);

/* Stops and joins the workers and frees everything, finished or not;
 * NULL does nothing. */
void sg_gzip_par_free(sg_gzip_par *g);

#endif
