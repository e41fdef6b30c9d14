/* Accuracy metrics between a result under test (A) and a reference (B):
 * what `segrt compare` prints and what tests check a backend against.
 *
 * Both tensors may have any supported dtype; elements are read as double
 * (bool as 0 or 1) and every sum is accumulated in double. The functions
 * stream over the elements in fixed-size chunks: nothing they allocate
 * grows with the tensors, except one counter per class for Dice. */
#ifndef SG_CORE_COMPARE_H
#define SG_CORE_COMPARE_H

#include "core/tensor.h"

#include <stdint.h>

/* Elementwise error of A against B.
 *
 * A position NaN in both counts as an exact match (error 0), as do equal
 * infinities. A position NaN in only one is a NaN mismatch; any mismatch
 * makes max_abs, mae, rel_l2 and psnr_db NaN, so that every threshold on
 * them fails. */
typedef segrt_compare_stats sg_compare_stats; /* the fields: segrt.h */

/* Errors: SHAPE (dims differ: the message gives both), INVALID_ARGUMENT
 * (NULL, or a dtype segrt lacks). */
sg_status sg_compare(const sg_tensor *a, const sg_tensor *b, sg_compare_stats *out);

/* Agreement of the label maps argmax(A) and argmax(B) over a class axis,
 * for logits or probabilities. The argmax is numpy's: the first maximum
 * wins, and a NaN counts as the maximum (the first NaN wins). */
typedef segrt_class_stats sg_class_stats; /* the fields: segrt.h; the arrays are malloc'd */

/* axis may be negative (counting from the end). On success the arrays of
 * *out are owned by the caller: release them with sg_class_stats_free.
 * Errors: SHAPE (dims differ), INVALID_ARGUMENT (NULL, axis outside
 * -rank..rank-1, a class axis of size 0, a dtype segrt lacks),
 * OUT_OF_MEMORY. */
sg_status sg_compare_classes(const sg_tensor *a, const sg_tensor *b, int32_t axis, sg_class_stats *out);

/* Frees the arrays of s and clears them; accepts a zeroed or NULL s. */
void sg_class_stats_free(sg_class_stats *s);

#endif
