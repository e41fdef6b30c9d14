/* Shape inference for matrix products: MatMul, Gemm and Einsum. */
#include "graph/infer_util.h"

#include <string.h>

/* Two dims that must be equal (a contraction): SHAPE error when both are
 * known and differ. */
static bool dims_clash(sg_dim a, sg_dim b)
{
    return a.size >= 0 && b.size >= 0 && a.size != b.size;
}

/* Input i's dtype, or input j's when i's is not known. */
static sg_dtype either_dtype(const sg_graph *g, const sg_node *n, int32_t i, int32_t j)
{
    sg_dtype t = sg_iu_dtype(g, n, i);
    return t != SEGRT_DTYPE_UNDEFINED ? t : sg_iu_dtype(g, n, j);
}

sg_status sg_infer_MAT_MUL(sg_graph *g, sg_node *n)
{
    sg_shape a, b;
    SG_TRY(sg_iu_shape(g, n, 0, &a));
    SG_TRY(sg_iu_shape(g, n, 1, &b));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 1));
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    sg_dtype t = either_dtype(g, n, 0, 1);
    char sa[SG_IU_SHAPE_BUF], sb[SG_IU_SHAPE_BUF];
    const char *an = sg_iu_name(g, n, 0), *bn = sg_iu_name(g, n, 1);
    if (a.rank == 0 || b.rank == 0)
        return sg_node_error(
            n, SEGRT_ERROR_SHAPE, "inputs `%s` (%s) and `%s` (%s): MatMul needs rank 1 or more", an,
            sg_shape_format(g, &a, sa, sizeof sa), bn, sg_shape_format(g, &b, sb, sizeof sb));
    sg_shape out = sg_shape_unknown();
    if (a.rank < 0 || b.rank < 0)
        return sg_infer_set_output(g, n, 0, t, &out);

    /* numpy: a 1-D left operand is a row [1, K], a 1-D right one a column
     * [K, 1]; the added dim is dropped from the result. */
    sg_shape a2 = a, b2 = b;
    if (a.rank == 1) {
        a2.rank = 2;
        a2.d[0] = sg_dim_of(1);
        a2.d[1] = a.d[0];
    }
    if (b.rank == 1) {
        b2.rank = 2;
        b2.d[0] = b.d[0];
        b2.d[1] = sg_dim_of(1);
    }
    sg_dim k1 = a2.d[a2.rank - 1], k2 = b2.d[b2.rank - 2];
    if (dims_clash(k1, k2))
        return sg_node_error(n, SEGRT_ERROR_SHAPE,
                             "input `%s` (%s) has %lld columns but input `%s` (%s) has %lld rows",
                             an, sg_shape_format(g, &a, sa, sizeof sa), (long long)k1.size, bn,
                             sg_shape_format(g, &b, sb, sizeof sb), (long long)k2.size);
    sg_shape ba = a2, bb = b2, batch;
    ba.rank -= 2;
    bb.rank -= 2;
    if (sg_infer_broadcast(g, n, &ba, &bb, &batch) != SEGRT_OK)
        return sg_node_error(
            n, SEGRT_ERROR_SHAPE,
            "the batch dims of `%s` (%s) and `%s` (%s) cannot be broadcast together", an,
            sg_shape_format(g, &a, sa, sizeof sa), bn, sg_shape_format(g, &b, sb, sizeof sb));
    out = batch;
    if (a.rank > 1)
        out.d[out.rank++] = a2.d[a2.rank - 2];
    if (b.rank > 1)
        out.d[out.rank++] = b2.d[b2.rank - 1];
    return sg_infer_set_output(g, n, 0, t, &out);
}

sg_status sg_infer_GEMM(sg_graph *g, sg_node *n)
{
    sg_shape a, b;
    SG_TRY(sg_iu_shape(g, n, 0, &a));
    SG_TRY(sg_iu_shape(g, n, 1, &b));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 1));
    if (sg_iu_has_input(n, 2))
        SG_TRY(sg_iu_same_dtype(g, n, 0, 2));
    SG_TRY(sg_iu_want_numeric(g, n, 0));
    char sa[SG_IU_SHAPE_BUF], sb[SG_IU_SHAPE_BUF];
    for (int32_t i = 0; i < 2; i++) {
        const sg_shape *s = i ? &b : &a;
        if (s->rank >= 0 && s->rank != 2)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "input `%s` is %s; Gemm needs a matrix",
                                 sg_iu_name(g, n, i), sg_shape_format(g, s, sa, sizeof sa));
    }
    int64_t ta = sg_attr_int(n, "transA", 0), tb = sg_attr_int(n, "transB", 0);
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "transA and transB must be 0 or 1");
    sg_dim m = a.rank == 2 ? a.d[ta ? 1 : 0] : sg_dim_unknown();
    sg_dim k1 = a.rank == 2 ? a.d[ta ? 0 : 1] : sg_dim_unknown();
    sg_dim k2 = b.rank == 2 ? b.d[tb ? 1 : 0] : sg_dim_unknown();
    sg_dim nn = b.rank == 2 ? b.d[tb ? 0 : 1] : sg_dim_unknown();
    if (dims_clash(k1, k2))
        return sg_node_error(
            n, SEGRT_ERROR_SHAPE,
            "input `%s` (%s%s) gives K = %lld but input `%s` (%s%s) gives K = %lld",
            sg_iu_name(g, n, 0), sg_shape_format(g, &a, sa, sizeof sa), ta ? ", transposed" : "",
            (long long)k1.size, sg_iu_name(g, n, 1), sg_shape_format(g, &b, sb, sizeof sb),
            tb ? ", transposed" : "", (long long)k2.size);
    sg_shape out = sg_shape_unknown();
    out.rank = 2;
    out.d[0] = m;
    out.d[1] = nn;
    if (sg_iu_has_input(n, 2)) {
        /* C broadcasts one way to [M, N]. */
        sg_shape c;
        SG_TRY(sg_iu_shape(g, n, 2, &c));
        bool ok = c.rank <= 2;
        for (int32_t k = 0; ok && k < c.rank; k++) {
            sg_dim cd = c.d[c.rank - 1 - k], od = out.d[1 - k];
            ok = cd.size < 0 || cd.size == 1 || od.size < 0 || cd.size == od.size;
            /* Where C fixes a dim Gemm left unknown, it must be that size. */
            if (ok && cd.size > 1 && od.size < 0)
                out.d[1 - k] = cd;
        }
        if (!ok) {
            char so[SG_IU_SHAPE_BUF];
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "C `%s` (%s) does not broadcast to the product's %s",
                                 sg_iu_name(g, n, 2), sg_shape_format(g, &c, sa, sizeof sa),
                                 sg_shape_format(g, &out, so, sizeof so));
        }
    }
    return sg_infer_set_output(g, n, 0, either_dtype(g, n, 0, 1), &out);
}

/* Einsum ----------------------------------------------------------------- */

/* Labels in ASCII order, as numpy orders the implicit output:
 * 'A'..'Z' then 'a'..'z'. */
#define N_LABELS 52

static int32_t label_index(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return 26 + (c - 'a');
    return -1;
}

static char label_char(int32_t i) { return (char)(i < 26 ? 'A' + i : 'a' + (i - 26)); }

/* One operand's term: its labels in order and where "..." sits. */
typedef struct ein_term {
    int32_t labels[SEGRT_MAX_RANK];
    int32_t n_labels;
    int32_t ellipsis; /* index into labels[] where the ellipsis dims go, or -1 */
} ein_term;

/* Parses [p, end) into t. Spaces are skipped. */
static sg_status parse_term(const sg_node *n, const char *p, const char *end, bool output,
                            ein_term *t)
{
    memset(t, 0, sizeof *t);
    t->ellipsis = -1;
    bool seen[N_LABELS] = {false};
    while (p < end) {
        if (*p == ' ') {
            p++;
        } else if (*p == '.') {
            if (end - p < 3 || p[1] != '.' || p[2] != '.' || t->ellipsis >= 0)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "the equation has a stray `.` or a second `...` in a term");
            t->ellipsis = t->n_labels;
            p += 3;
        } else {
            int32_t l = label_index(*p);
            if (l < 0)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "the equation has `%c`; labels are letters", *p);
            /* A label repeated in an operand takes its diagonal; the sizes
             * must agree, which the caller's merge checks. */
            if (seen[l] && output)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "the output of the equation repeats `%c`", *p);
            if (t->n_labels == SEGRT_MAX_RANK)
                return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                                     "a term of the equation has more than %d labels",
                                     SEGRT_MAX_RANK);
            seen[l] = true;
            t->labels[t->n_labels++] = l;
            p++;
        }
    }
    return SEGRT_OK;
}

/* Merges dim d into a label's size: sizes must agree, or one be 1 (numpy
 * broadcasting, which onnxruntime allows too). */
static bool merge_dim(sg_dim *acc, bool *seen, sg_dim d)
{
    if (!*seen) {
        *acc = d;
        *seen = true;
        return true;
    }
    if (acc->size == 1 || (acc->size < 0 && d.size > 1))
        *acc = d;
    else if (d.size != 1 && d.size >= 0 && acc->size >= 0 && d.size != acc->size)
        return false;
    else if (acc->size < 0 && d.size < 0 && acc->sym != d.sym)
        *acc = sg_dim_unknown();
    return true;
}

sg_status sg_infer_EINSUM(sg_graph *g, sg_node *n)
{
    const char *eq = sg_attr_string(n, "equation", NULL);
    if (!eq)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "needs the string attribute `equation`");
    for (int32_t i = 0; i < n->n_inputs; i++) {
        if (!sg_iu_has_input(n, i))
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "input %d is missing", i);
        SG_TRY(sg_iu_same_dtype(g, n, 0, i));
    }
    const char *arrow = strstr(eq, "->");
    const char *lhs_end = arrow ? arrow : eq + strlen(eq);
    if (arrow && strstr(arrow + 2, "->"))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "the equation has two `->`");

    sg_dim size[N_LABELS];
    bool seen[N_LABELS] = {false};
    int32_t uses[N_LABELS] = {0};
    sg_shape ell = sg_shape_unknown(); /* broadcast of every operand's "..." dims */
    ell.rank = 0;
    bool any_ellipsis = false;
    int32_t operand = 0;
    for (const char *p = eq; p <= lhs_end; operand++) {
        const char *comma = memchr(p, ',', (size_t)(lhs_end - p));
        const char *term_end = comma ? comma : lhs_end;
        if (operand >= n->n_inputs)
            return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                 "the equation names more operands than the node's %d inputs",
                                 n->n_inputs);
        ein_term t;
        SG_TRY(parse_term(n, p, term_end, false, &t));
        sg_shape s;
        SG_TRY(sg_iu_shape(g, n, operand, &s));
        if (t.ellipsis >= 0)
            any_ellipsis = true;
        if (s.rank >= 0 && (t.ellipsis < 0 ? s.rank != t.n_labels : s.rank < t.n_labels)) {
            char buf[SG_IU_SHAPE_BUF];
            return sg_node_error(n, SEGRT_ERROR_SHAPE,
                                 "operand %d `%s` is %s but its term has %d labels%s", operand,
                                 sg_iu_name(g, n, operand), sg_shape_format(g, &s, buf, sizeof buf),
                                 t.n_labels, t.ellipsis >= 0 ? " and `...`" : "");
        }
        int32_t n_ell = s.rank >= 0 && t.ellipsis >= 0 ? s.rank - t.n_labels : 0;
        for (int32_t k = 0; k < t.n_labels; k++) {
            int32_t l = t.labels[k];
            uses[l]++;
            sg_dim d = sg_dim_unknown();
            if (s.rank >= 0)
                d = s.d[t.ellipsis >= 0 && k >= t.ellipsis ? k + n_ell : k];
            if (!merge_dim(&size[l], &seen[l], d))
                return sg_node_error(
                    n, SEGRT_ERROR_SHAPE,
                    "label `%c` is %lld in operand %d `%s` but %lld in an earlier one",
                    label_char(l), (long long)d.size, operand, sg_iu_name(g, n, operand),
                    (long long)size[l].size);
        }
        if (t.ellipsis >= 0 && ell.rank >= 0) {
            if (s.rank < 0) {
                ell = sg_shape_unknown();
            } else {
                sg_shape part = sg_shape_unknown(), merged;
                part.rank = n_ell;
                for (int32_t k = 0; k < n_ell; k++)
                    part.d[k] = s.d[t.ellipsis + k];
                if (sg_infer_broadcast(g, n, &ell, &part, &merged) != SEGRT_OK)
                    return sg_node_error(
                        n, SEGRT_ERROR_SHAPE,
                        "the `...` dims of operand %d `%s` do not broadcast with the others",
                        operand, sg_iu_name(g, n, operand));
                ell = merged;
            }
        }
        p = term_end + 1;
    }
    if (operand != n->n_inputs)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                             "the equation names %d operands but the node has %d inputs", operand,
                             n->n_inputs);

    ein_term o;
    if (arrow) {
        SG_TRY(parse_term(n, arrow + 2, arrow + strlen(arrow), true, &o));
        for (int32_t k = 0; k < o.n_labels; k++)
            if (!seen[o.labels[k]])
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL,
                                     "the output label `%c` is in no operand",
                                     label_char(o.labels[k]));
    } else {
        /* Implicit output: "..." first, then the labels used once, sorted. */
        memset(&o, 0, sizeof o);
        o.ellipsis = any_ellipsis ? 0 : -1;
        for (int32_t l = 0; l < N_LABELS; l++) {
            if (uses[l] != 1)
                continue;
            if (o.n_labels == SEGRT_MAX_RANK)
                return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                                     "the output would have more than %d dims", SEGRT_MAX_RANK);
            o.labels[o.n_labels++] = l;
        }
    }
    sg_shape out = sg_shape_unknown();
    if (o.ellipsis >= 0 && ell.rank < 0)
        return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &out);
    int32_t n_ell = o.ellipsis >= 0 ? ell.rank : 0;
    if (o.n_labels + n_ell > SEGRT_MAX_RANK)
        return sg_node_error(n, SEGRT_ERROR_UNSUPPORTED,
                             "the output would have rank %d; segrt supports up to %d",
                             o.n_labels + n_ell, SEGRT_MAX_RANK);
    out.rank = 0;
    for (int32_t k = 0; k <= o.n_labels; k++) {
        if (k == o.ellipsis)
            for (int32_t e = 0; e < n_ell; e++)
                out.d[out.rank++] = ell.d[e];
        if (k < o.n_labels)
            out.d[out.rank++] = size[o.labels[k]];
    }
    return sg_infer_set_output(g, n, 0, sg_iu_dtype(g, n, 0), &out);
}

/* A product of two dims, unknown where either is. */
static sg_dim dim_mul(sg_dim a, sg_dim b)
{
    return a.size >= 0 && b.size >= 0 ? sg_dim_of(a.size * b.size) : sg_dim_unknown();
}

static sg_dim dim_add(sg_dim a, sg_dim b)
{
    return a.size >= 0 && b.size >= 0 ? sg_dim_of(a.size + b.size) : sg_dim_unknown();
}

/* Attention (opset 23): Y, present_key, present_value, qk_matmul_output. */
sg_status sg_infer_ATTENTION(sg_graph *g, sg_node *n)
{
    sg_shape q, k, v, pk;
    SG_TRY(sg_iu_shape(g, n, 0, &q));
    SG_TRY(sg_iu_shape(g, n, 1, &k));
    SG_TRY(sg_iu_shape(g, n, 2, &v));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 1));
    SG_TRY(sg_iu_same_dtype(g, n, 0, 2));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    if (sg_iu_has_input(n, 4) != sg_iu_has_input(n, 5))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "past_key and past_value come together");
    sg_shape y = sg_shape_unknown(), present_k = sg_shape_unknown(), present_v = sg_shape_unknown(),
             qk = sg_shape_unknown();
    if (q.rank >= 0 && q.rank != 3 && q.rank != 4)
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "Q `%s` has rank %d; Attention takes 3-D or 4-D inputs",
                             sg_iu_name(g, n, 0), q.rank);
    if (q.rank >= 0 && ((k.rank >= 0 && k.rank != q.rank) || (v.rank >= 0 && v.rank != q.rank)))
        return sg_node_error(n, SEGRT_ERROR_SHAPE, "Q, K and V must have one rank");
    if (q.rank >= 0 && k.rank >= 0 && v.rank >= 0) {
        int64_t hq = sg_attr_int(n, "q_num_heads", 0), hkv = sg_attr_int(n, "kv_num_heads", 0);
        sg_dim B = q.d[0], Hq, Hkv, Sq, Skv, D, Dv;
        if (q.rank == 3) {
            if (hq < 1 || hkv < 1)
                return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "3-D inputs need q_num_heads and kv_num_heads");
            Hq = sg_dim_of(hq);
            Hkv = sg_dim_of(hkv);
            Sq = q.d[1];
            Skv = k.d[1];
            D = q.d[2].size >= 0 ? sg_dim_of(q.d[2].size / hq) : sg_dim_unknown();
            Dv = v.d[2].size >= 0 ? sg_dim_of(v.d[2].size / hkv) : sg_dim_unknown();
        } else {
            Hq = q.d[1];
            Hkv = k.d[1];
            Sq = q.d[2];
            Skv = k.d[2];
            D = q.d[3];
            Dv = v.d[3];
        }
        sg_dim T = Skv;
        if (sg_iu_has_input(n, 4)) {
            SG_TRY(sg_iu_shape(g, n, 4, &pk));
            T = pk.rank == 4 ? dim_add(pk.d[2], Skv) : sg_dim_unknown();
        }
        y = sg_iu_unknown_dims(q.rank);
        y.d[0] = B;
        if (q.rank == 3) {
            y.d[1] = Sq;
            y.d[2] = dim_mul(Hq, Dv);
        } else {
            y.d[1] = Hq;
            y.d[2] = Sq;
            y.d[3] = Dv;
        }
        present_k = sg_iu_unknown_dims(4);
        present_k.d[0] = B;
        present_k.d[1] = Hkv;
        present_k.d[2] = T;
        present_k.d[3] = D;
        present_v = present_k;
        present_v.d[3] = Dv;
        qk = sg_iu_unknown_dims(4);
        qk.d[0] = B;
        qk.d[1] = Hq;
        qk.d[2] = Sq;
        qk.d[3] = T;
    }
    SG_TRY(sg_infer_set_output(g, n, 0, t, &y));
    SG_TRY(sg_infer_set_output(g, n, 1, t, &present_k));
    SG_TRY(sg_infer_set_output(g, n, 2, t, &present_v));
    return sg_infer_set_output(g, n, 3, t, &qk);
}

/* ScaledDotProductAttention (segrt's own, domain ai.segrt): Y = softmax(
 * scale Q K^T + mask0 + mask1, last axis) V over the batch dims Q, K and V
 * share (no broadcasting between them). Q is [..., S, D], K [..., L, D]
 * ([..., D, L] where k_transposed is 1), V [..., L, Dv]; each optional
 * additive mask, of Q's dtype, broadcasts (numpy's rule) to the scores'
 * [..., S, L] without widening them; scale defaults to 1/sqrt(D); Y is
 * [..., S, Dv]. */
sg_status sg_infer_SDPA(sg_graph *g, sg_node *n)
{
    sg_shape q, k, v;
    SG_TRY(sg_iu_shape(g, n, 0, &q));
    SG_TRY(sg_iu_shape(g, n, 1, &k));
    SG_TRY(sg_iu_shape(g, n, 2, &v));
    for (int32_t i = 1; i < n->n_inputs; i++)
        if (sg_iu_has_input(n, i))
            SG_TRY(sg_iu_same_dtype(g, n, 0, i));
    sg_dtype t = sg_iu_dtype(g, n, 0);
    if (t != SEGRT_DTYPE_UNDEFINED && !sg_dtype_is_float(t))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "Q `%s` must be of a float dtype", sg_iu_name(g, n, 0));
    int64_t kt = sg_attr_int(n, "k_transposed", 0);
    if (kt != 0 && kt != 1)
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "k_transposed must be 0 or 1");
    if (!sg_iu_has_input(n, 1) || !sg_iu_has_input(n, 2))
        return sg_node_error(n, SEGRT_ERROR_INVALID_MODEL, "Q, K and V are required");
    sg_shape y = sg_shape_unknown();
    if (q.rank >= 0 && k.rank >= 0 && v.rank >= 0) {
        int32_t r = q.rank;
        if (r < 2 || k.rank != r || v.rank != r)
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "Q, K and V must have one rank of at least 2");
        for (int32_t d = 0; d < r - 2; d++)
            if (dims_clash(q.d[d], k.d[d]) || dims_clash(q.d[d], v.d[d]))
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "Q, K and V must have the same batch dims");
        sg_dim L = k.d[r - 2 + kt], D = k.d[r - 1 - kt];
        if (dims_clash(q.d[r - 1], D) || dims_clash(v.d[r - 2], L))
            return sg_node_error(n, SEGRT_ERROR_SHAPE, "K and V do not fit Q");
        y = q;
        y.d[r - 1] = v.d[r - 1];
        for (int32_t m = 3; m < n->n_inputs; m++) {
            sg_shape ms;
            if (!sg_iu_has_input(n, m))
                continue;
            SG_TRY(sg_iu_shape(g, n, m, &ms));
            if (ms.rank > r)
                return sg_node_error(n, SEGRT_ERROR_SHAPE, "mask `%s` has more dims than the scores",
                                     sg_iu_name(g, n, m));
            for (int32_t d = 0; ms.rank > 0 && d < ms.rank; d++) {
                int32_t at = r - ms.rank + d;
                sg_dim want = at == r - 1 ? L : q.d[at];
                if (ms.d[d].size >= 0 && ms.d[d].size != 1 && dims_clash(ms.d[d], want))
                    return sg_node_error(n, SEGRT_ERROR_SHAPE, "mask `%s` does not broadcast to the scores",
                                         sg_iu_name(g, n, m));
            }
        }
    }
    return sg_infer_set_output(g, n, 0, t, &y);
}
