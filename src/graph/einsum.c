/* Einsum equations (see einsum.h). */
#include "graph/einsum.h"

#include <string.h>

#define EIN_LETTERS 52
#define EIN_LABELS SG_EINSUM_MAX_LETTERS

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
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "malformed ellipsis in equation");
            t->has_ellipsis = true;
            t->letters[t->n_letters++] = -1;
            i += 2;
            continue;
        }
        int32_t id = letter_id(s[i]);
        if (id < 0 || t->n_letters >= EIN_LETTERS)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "bad character '%c' in equation", s[i]);
        t->letters[t->n_letters++] = id;
    }
    return SEGRT_OK;
}

/* Expands a term against a rank into per-dim label ids. */
static sg_status expand_term(const sg_node *n, const ein_term *t, int32_t rank, int32_t ell_rank, int32_t *labels)
{
    int32_t fixed = t->n_letters - (t->has_ellipsis ? 1 : 0);
    int32_t ell = rank - fixed;
    if (ell < 0 || (!t->has_ellipsis && ell != 0) || ell > ell_rank || rank > SEGRT_MAX_RANK)
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

/* The output's labels: as written after "->", else the broadcast dims and
 * then the letters used once, in ASCII order (uppercase first), as numpy. */
static sg_status output_labels(const sg_node *n, const char *arrow, int32_t ell_rank, const bool *present,
                               const int32_t *uses, int32_t *out, int32_t *n_out, bool *in_out)
{
    *n_out = 0;
    if (arrow) {
        ein_term ot;
        SG_TRY(parse_term(n, arrow + 2, strlen(arrow + 2), &ot));
        for (int32_t i = 0; i < ot.n_letters; i++) {
            int32_t l = ot.letters[i];
            if (l < 0) {
                for (int32_t e = 0; e < ell_rank; e++) {
                    out[(*n_out)++] = EIN_LETTERS + e;
                    in_out[EIN_LETTERS + e] = true;
                }
                continue;
            }
            if (!present[l] || in_out[l])
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "output label '%c' is repeated or not in any input",
                                     l < 26 ? 'a' + l : 'A' + l - 26);
            out[(*n_out)++] = l;
            in_out[l] = true;
        }
        return SEGRT_OK;
    }
    for (int32_t e = 0; e < ell_rank; e++) {
        out[(*n_out)++] = EIN_LETTERS + e;
        in_out[EIN_LETTERS + e] = true;
    }
    for (int32_t k = 0; k < EIN_LETTERS; k++) {
        int32_t l = k < 26 ? 26 + k : k - 26;
        if (present[l] && uses[l] == 1) {
            out[(*n_out)++] = l;
            in_out[l] = true;
        }
    }
    return SEGRT_OK;
}

sg_status sg_einsum_resolve(const sg_node *n, int32_t n_in, const int32_t *rank,
                            const int64_t (*dims)[SEGRT_MAX_RANK], sg_einsum *out)
{
    const char *eq = sg_attr_string(n, "equation", NULL);
    if (!eq)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "attribute equation is required");
    if (n_in < 1 || n_in > SG_EINSUM_MAX_IN)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED, "%d operands; at most %d are supported", n_in,
                             SG_EINSUM_MAX_IN);
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq), start = 0;
    ein_term terms[SG_EINSUM_MAX_IN];
    int32_t nt = 0;
    for (size_t i = 0; i <= lhs_len; i++) {
        if (i == lhs_len || eq[i] == ',') {
            if (nt >= n_in)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "equation has more terms than inputs");
            SG_TRY(parse_term(n, eq + start, i - start, &terms[nt++]));
            start = i + 1;
        }
    }
    if (nt != n_in)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "equation has %d terms for %d inputs", nt, n_in);
    int32_t ell_rank = 0;
    for (int32_t i = 0; i < n_in; i++) {
        int32_t ell = rank[i] - (terms[i].n_letters - (terms[i].has_ellipsis ? 1 : 0));
        if (terms[i].has_ellipsis && ell > ell_rank)
            ell_rank = ell;
    }
    /* Each label's size; 1 broadcasts. */
    int64_t size[EIN_LABELS];
    int32_t uses[EIN_LABELS] = {0}, labels[SG_EINSUM_MAX_IN][SEGRT_MAX_RANK];
    bool present[EIN_LABELS] = {false};
    for (int32_t l = 0; l < EIN_LABELS; l++)
        size[l] = 1;
    for (int32_t i = 0; i < n_in; i++) {
        SG_TRY(expand_term(n, &terms[i], rank[i], ell_rank, labels[i]));
        for (int32_t d = 0; d < rank[i]; d++) {
            int32_t l = labels[i][d];
            if (!present[l] || size[l] == 1)
                size[l] = dims[i][d];
            else if (dims[i][d] != size[l] && dims[i][d] != 1)
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "label sizes %lld and %lld disagree",
                                     (long long)size[l], (long long)dims[i][d]);
            present[l] = true;
            uses[l]++;
        }
    }
    /* A label repeated in one term must be the same size in both places. */
    for (int32_t i = 0; i < n_in; i++)
        for (int32_t d = 0; d < rank[i]; d++)
            if (dims[i][d] != 1 && dims[i][d] != size[labels[i][d]])
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "label sizes disagree");
    int32_t out_labels[EIN_LABELS], n_out;
    bool in_out[EIN_LABELS] = {false};
    SG_TRY(output_labels(n, arrow, ell_rank, present, uses, out_labels, &n_out, in_out));
    /* Number the letters: the output's first, then the summed ones. */
    memset(out, 0, sizeof *out);
    int32_t number[EIN_LABELS], nl = 0;
    for (int32_t i = 0; i < n_out; i++) {
        number[out_labels[i]] = nl;
        out->size[nl++] = size[out_labels[i]];
    }
    for (int32_t l = 0; l < EIN_LABELS; l++)
        if (present[l] && !in_out[l]) {
            number[l] = nl;
            out->size[nl++] = size[l];
        }
    out->n_in = n_in;
    out->n_out = n_out;
    out->n_letters = nl;
    for (int32_t i = 0; i < n_in; i++) {
        out->rank[i] = rank[i];
        for (int32_t d = 0; d < rank[i]; d++)
            out->letter[i][d] = number[labels[i][d]];
    }
    return SEGRT_OK;
}
