/* Einsum: explicit ("ij,jk->ik") and implicit ("ij,jk") forms, repeated
 * labels (diagonals), "..." broadcasting, any number of operands.
 *
 * The evaluation is the definition: one loop over every output label and
 * every summed label, adding the product of the operands. That is slow for
 * big contractions but Einsum in segmentation networks is small (attention
 * heads, channel mixing) and this backend is the oracle. Floats sum in
 * double, integers in int64 with wrap-around. */
#include "backend/ref/ref_internal.h"

#include <string.h>

#define EIN_LETTERS 52
#define EIN_LABELS (EIN_LETTERS + SEGRT_MAX_RANK)
#define EIN_MAX_OPS 16

static int32_t letter_id(char c)
{
    if (c >= 'a' && c <= 'z')
        return c - 'a';
    if (c >= 'A' && c <= 'Z')
        return 26 + (c - 'A');
    return -1;
}

/* One term: label ids per dim, where the ellipsis expands to the ids
 * EIN_LETTERS + k of the trailing-aligned broadcast dims. */
typedef struct ein_term {
    int32_t n_letters;
    int32_t letters[EIN_LABELS]; /* in order; -1 marks the ellipsis position */
    bool has_ellipsis;
} ein_term;

static sg_status parse_term(const sg_node *n, const char *s, size_t len, ein_term *t)
{
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ')
            continue;
        if (s[i] == '.') {
            if (t->has_ellipsis || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "malformed ellipsis in equation");
            t->has_ellipsis = true;
            t->letters[t->n_letters++] = -1;
            i += 2;
            continue;
        }
        int32_t id = letter_id(s[i]);
        if (id < 0 || t->n_letters >= EIN_LETTERS)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "bad character '%c' in equation",
                                 s[i]);
        t->letters[t->n_letters++] = id;
    }
    return SEGRT_OK;
}

/* Expands a term against a rank into per-dim label ids. */
static sg_status expand_term(const sg_node *n, const ein_term *t, int32_t rank, int32_t ell_rank,
                             int32_t *labels)
{
    int32_t fixed = t->n_letters - (t->has_ellipsis ? 1 : 0);
    int32_t ell = rank - fixed;
    if (ell < 0 || (!t->has_ellipsis && ell != 0) || ell > ell_rank)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "equation term does not match rank %d", rank);
    int32_t k = 0;
    for (int32_t i = 0; i < t->n_letters; i++) {
        if (t->letters[i] >= 0) {
            labels[k++] = t->letters[i];
            continue;
        }
        for (int32_t e = 0; e < ell; e++)
            labels[k++] = EIN_LETTERS + (ell_rank - ell) + e;
    }
    return SEGRT_OK;
}

REF_KERNEL(sg_ref_einsum)
{
    sg_tensor *y;
    SG_TRY(sg_ref_need_out(n, out, n_out, 0, &y));
    const char *eq = sg_attr_string(n, "equation", NULL);
    if (!eq)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "attribute equation is required");
    if (n_in < 1 || n_in > EIN_MAX_OPS)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%d operands; at most %d are supported",
                             n_in, EIN_MAX_OPS);
    const sg_tensor *ops[EIN_MAX_OPS];
    for (int32_t i = 0; i < n_in; i++) {
        SG_TRY(sg_ref_need_in(n, in, n_in, i, &ops[i]));
        SG_TRY(sg_ref_check_dtype(n, ops[i], y->dtype, "input"));
    }
    bool fl = sg_dtype_is_float(y->dtype);
    if (!fl && !sg_dtype_is_integer(y->dtype))
        return sg_ref_unsupported_dtype(n, y->dtype);

    /* Parse the terms. */
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    ein_term terms[EIN_MAX_OPS], out_term;
    int32_t nt = 0;
    size_t start = 0;
    for (size_t i = 0; i <= lhs_len; i++) {
        if (i == lhs_len || eq[i] == ',') {
            if (nt >= n_in)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "equation has more terms than inputs");
            SG_TRY(parse_term(n, eq + start, i - start, &terms[nt++]));
            start = i + 1;
        }
    }
    if (nt != n_in)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "equation has %d terms for %d inputs",
                             nt, n_in);
    int32_t ell_rank = 0;
    for (int32_t i = 0; i < n_in; i++) {
        int32_t fixed = terms[i].n_letters - (terms[i].has_ellipsis ? 1 : 0);
        int32_t ell = ops[i]->rank - fixed;
        if (terms[i].has_ellipsis && ell > ell_rank)
            ell_rank = ell;
    }
    /* Sizes of labels; 1 broadcasts. */
    int64_t size[EIN_LABELS];
    int32_t uses[EIN_LABELS] = {0};
    int64_t strides[EIN_MAX_OPS][EIN_LABELS];
    for (int32_t l = 0; l < EIN_LABELS; l++)
        size[l] = 1;
    memset(strides, 0, sizeof strides);
    bool present[EIN_LABELS] = {false};
    for (int32_t i = 0; i < n_in; i++) {
        int32_t labels[SEGRT_MAX_RANK];
        SG_TRY(expand_term(n, &terms[i], ops[i]->rank, ell_rank, labels));
        int64_t st[SEGRT_MAX_RANK];
        sg_ref_strides(ops[i]->dims, ops[i]->rank, st);
        for (int32_t d = 0; d < ops[i]->rank; d++) {
            int32_t l = labels[d];
            int64_t dim = ops[i]->dims[d];
            if (!present[l] || size[l] == 1)
                size[l] = dim;
            else if (dim != size[l] && dim != 1)
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "label sizes %lld and %lld disagree",
                                     (long long)size[l], (long long)dim);
            present[l] = true;
            uses[l]++;
            /* A size-1 dim broadcasts; a repeated label walks the diagonal. */
            if (dim != 1)
                strides[i][l] += st[d];
        }
    }
    /* A label repeated in one term must be the same size in both places. */
    for (int32_t i = 0; i < n_in; i++) {
        int32_t labels[SEGRT_MAX_RANK];
        expand_term(n, &terms[i], ops[i]->rank, ell_rank, labels);
        for (int32_t d = 0; d < ops[i]->rank; d++)
            if (ops[i]->dims[d] != 1 && ops[i]->dims[d] != size[labels[d]])
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "label sizes disagree");
    }
    /* Output labels. */
    int32_t out_labels[EIN_LABELS], n_out_labels = 0;
    bool in_out[EIN_LABELS] = {false};
    if (arrow) {
        SG_TRY(parse_term(n, arrow + 2, strlen(arrow + 2), &out_term));
        for (int32_t i = 0; i < out_term.n_letters; i++) {
            int32_t l = out_term.letters[i];
            if (l < 0) {
                for (int32_t e = 0; e < ell_rank; e++) {
                    out_labels[n_out_labels++] = EIN_LETTERS + e;
                    in_out[EIN_LETTERS + e] = true;
                }
                continue;
            }
            if (!present[l] || in_out[l])
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "output label '%c' is repeated or not in any input",
                                     l < 26 ? 'a' + l : 'A' + l - 26);
            out_labels[n_out_labels++] = l;
            in_out[l] = true;
        }
    } else {
        for (int32_t e = 0; e < ell_rank; e++) {
            out_labels[n_out_labels++] = EIN_LETTERS + e;
            in_out[EIN_LETTERS + e] = true;
        }
        /* Letters used once, in ASCII order (uppercase first), as numpy. */
        for (int32_t k = 0; k < EIN_LETTERS; k++) {
            int32_t l = k < 26 ? 26 + k : k - 26;
            if (present[l] && uses[l] == 1) {
                out_labels[n_out_labels++] = l;
                in_out[l] = true;
            }
        }
    }
    int64_t want[EIN_LABELS];
    for (int32_t i = 0; i < n_out_labels; i++)
        want[i] = size[out_labels[i]];
    if (n_out_labels > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "output rank is too large");
    SG_TRY(sg_ref_check_out_dims(n, y, want, n_out_labels));
    int32_t sum_labels[EIN_LABELS], n_sum = 0;
    int64_t sum_count = 1;
    for (int32_t l = 0; l < EIN_LABELS; l++)
        if (present[l] && !in_out[l]) {
            sum_labels[n_sum++] = l;
            if (!sg_mul_i64(sum_count, size[l], &sum_count))
                return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "the contraction is too large");
        }
    int64_t numel = sg_ref_numel(y);
    int64_t oidx[EIN_LABELS] = {0};
    for (int64_t o = 0; o < numel; o++) {
        int64_t base[EIN_MAX_OPS] = {0};
        for (int32_t i = 0; i < n_in; i++)
            for (int32_t k = 0; k < n_out_labels; k++)
                base[i] += oidx[k] * strides[i][out_labels[k]];
        double accf = 0;
        int64_t acci = 0;
        int64_t sidx[EIN_LABELS] = {0};
        for (int64_t s = 0; s < sum_count; s++) {
            double pf = 1;
            int64_t pi = 1;
            for (int32_t i = 0; i < n_in; i++) {
                int64_t off = base[i];
                for (int32_t k = 0; k < n_sum; k++)
                    off += sidx[k] * strides[i][sum_labels[k]];
                if (fl)
                    pf *= sg_dtype_load_f64(ops[i]->dtype, ops[i]->data, off);
                else
                    pi = ref_mul_wrap(pi, sg_dtype_load_i64(ops[i]->dtype, ops[i]->data, off));
            }
            accf += pf;
            acci = ref_add_wrap(acci, pi);
            for (int32_t k = n_sum - 1; k >= 0; k--) {
                if (++sidx[k] < size[sum_labels[k]])
                    break;
                sidx[k] = 0;
            }
        }
        if (fl)
            sg_dtype_store_f64(y->dtype, y->data, o, accf);
        else
            sg_dtype_store_i64(y->dtype, y->data, o, acci);
        for (int32_t k = n_out_labels - 1; k >= 0; k--) {
            if (++oidx[k] < size[out_labels[k]])
                break;
            oidx[k] = 0;
        }
    }
    return SEGRT_OK;
}
