/* Offline placement of blocks with lifetimes in one arena: each block, in
 * an order the caller chooses (largest first, say), goes to the lowest
 * offset where it overlaps in memory no block placed before it that is
 * alive at the same time.
 *
 * The blocks placed so far that a block's lifetime overlaps are found in
 * two segment trees over the steps (those alive at its first step, and
 * those starting later within its lifetime), so a placement costs the
 * blocks it must avoid plus O(log steps), not a scan of every block placed
 * before it. Memory: O(blocks log steps). */
#ifndef SG_CORE_ARENA_PACK_H
#define SG_CORE_ARENA_PACK_H

#include "core/status.h"

#include <stddef.h>
#include <stdint.h>

/* Block i lives over steps first[i] .. last[i] (0 <= first <= last <
 * n_steps) and takes size[i] bytes. Places the n blocks in the order
 * order[0 .. n) (each block once) and sets offset[i] of each; *peak is the
 * highest offset + size. A block of size 0 goes to offset 0. */
sg_status sg_arena_pack(int32_t n, const int32_t *order, const int32_t *first, const int32_t *last,
                        const size_t *size, int32_t n_steps, size_t *offset, size_t *peak);

#endif
