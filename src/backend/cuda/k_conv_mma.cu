// The 3x3(x3) tensor-core convolution's planning and dispatch (see
// k_conv_mma.h): cm_plan checks a layer against the kernels and fills
// cmgeom, and the C entry points launch the instance of conv_mma
// (k_conv_mma_sync.cu) or conv_wgmma (k_conv_wgmma.cu) the layer needs,
// among those k_conv_mma_instances.cuh lists.
#include "backend/cuda/k_conv_mma_common.cuh"

// Warpgroups a block for a 2-D layer of C input channels (launch_ks: KS 4 at 64).
static int cm_wg_cap(int C) { return cm_wg_max(C == 64 ? 4 : 0); }

static bool cm_float(segrt_dtype t)
{
    return t == SEGRT_DTYPE_FLOAT32 || t == SEGRT_DTYPE_FLOAT16 || t == SEGRT_DTYPE_BFLOAT16;
}

// A tile's output positions along D, H, W (cm_shape's, at run time).
static void cm_tile_shape(bool d3, int t[3])
{
    t[0] = d3 ? cm_shape<true>::t0 : cm_shape<false>::t0;
    t[1] = d3 ? cm_shape<true>::t1 : cm_shape<false>::t1;
    t[2] = d3 ? cm_shape<true>::t2 : cm_shape<false>::t2;
}

static bool cm_act_slope(sgk_act act, float alpha)
{
    return act == SGK_ACT_NONE || act == SGK_ACT_RELU || (act == SGK_ACT_LEAKY_RELU && alpha >= 0.0f && alpha <= 1.0f);
}

// p->up: the upsampling's input u and what the kernel takes (see
// sgk_conv_mma_up), given the rest of g planned.
static bool cm_plan_up(const sgk_conv_mma_params *p, const sgk_view *x, const sgk_view *u, cmgeom *g)
{
    if (!g->wg || !g->pro || !g->stats || g->stage_own || p->C != 64 || p->K != 32 || g->pro_c != 32 ||
        (p->up_c != 32 && p->up_c != 64) || !u || u->rank != 4 || u->dtype != x->dtype ||
        u->dims[0] != x->dims[0] || u->dims[1] != p->up_c || u->dims[2] * 2 != x->dims[2] || u->dims[3] * 2 != x->dims[3] ||
        !vec16_positions(u) || !sample_offsets_fit(u) || !cm_act_slope(p->up_act, p->up_alpha) ||
        (p->up_pro && !cm_act_slope(p->up_pro_act, p->up_pro_alpha)))
        return false;
    g->up = true;
    g->up_c = p->up_c;
    g->un = u->strides[0];
    for (int a = 0; a < 2; a++) {
        g->us[a] = (int)u->strides[2 + a];
        g->usp[a] = (int)u->dims[2 + a];
    }
    g->up_act = p->up_act;
    g->up_alpha = p->up_act == SGK_ACT_LEAKY_RELU ? p->up_alpha : 0.0f;
    g->up_pro = p->up_pro;
    g->up_pro_act = p->up_pro_act;
    g->up_pro_alpha = p->up_pro_act == SGK_ACT_LEAKY_RELU ? p->up_pro_alpha : 0.0f;
    return true;
}

static bool cm_plan(const sgk_conv_mma_params *p, const sgk_view *y, const sgk_view *x, const sgk_view *z,
                    const sgk_view *u, cmgeom *g, size_t *smem)
{
    memset(g, 0, sizeof *g);
    int nsp = p->n_spatial;
    // The products' 16-bit dtype: x's, or with small_input y's.
    const segrt_dtype et = p->small_input ? y->dtype : x->dtype;
    if (p->small_input && (!p->wgmma || nsp != 2 || p->C != 16 || p->x_channels < 1 || p->x_channels > 8 ||
                           p->prologue || !cm_float(x->dtype)))
        return false;
    if ((nsp != 2 && nsp != 3) || x->rank != nsp + 2 || y->rank != nsp + 2 ||
        (et != SEGRT_DTYPE_FLOAT16 && et != SEGRT_DTYPE_BFLOAT16) || !cm_float(y->dtype) ||
        p->C < 16 || p->C % 16 != 0 || (p->K != 8 && p->K != 16 && p->K != 32) ||
        p->K > (nsp == 3 ? CM_MAX_K_3D : CM_MAX_K) || x->dims[1] != (p->small_input ? p->x_channels : p->C) ||
        y->dims[1] != p->K || x->dims[0] != y->dims[0] || x->dims[0] < 1 || x->dims[0] > INT32_MAX ||
        (p->act != SGK_ACT_NONE && p->act != SGK_ACT_RELU && p->act != SGK_ACT_LEAKY_RELU))
        return false;
    if (z && (z->rank != y->rank || !cm_float(z->dtype)))
        return false;
    for (int i = 0; i < y->rank; i++)
        if ((i != 1 && x->dims[i] != y->dims[i]) || (z && z->dims[i] != y->dims[i]))
            return false;
    // 16-byte loads of 8 channels (small_input: element by element).
    if (!p->small_input && !vec16_positions(x))
        return false;
    // Offsets within a sample in 32 bits (see cmgeom).
    if (!sample_offsets_fit(x) || !sample_offsets_fit(y) || (z && !sample_offsets_fit(z)))
        return false;
    ll tiles = x->dims[0];
    for (int a = 0; a < 3; a++) {
        int s = a - (3 - nsp);
        ll d = s >= 0 ? x->dims[2 + s] : 1;
        if (d < 1 || d > INT32_MAX / 2)
            return false;
        g->sp[a] = (int)d;
        g->xs[a] = s >= 0 ? (int)x->strides[2 + s] : 0;
        g->ys[a] = s >= 0 ? (int)y->strides[2 + s] : 0;
        g->zs[a] = z && s >= 0 ? (int)z->strides[2 + s] : 0;
    }
    g->d3 = nsp == 3;
    int t[3];
    cm_tile_shape(g->d3, t);
    const int taps = g->d3 ? cm_shape<true>::taps : cm_shape<false>::taps;
    const int halo = g->d3 ? cm_shape<true>::halo : cm_shape<false>::halo;
    for (int a = 0; a < 3; a++) {
        g->ntile[a] = (int)ceil_div(g->sp[a], t[a]);
        g->fnt[a] = fastdiv_make((uint32_t)g->ntile[a]);
        tiles *= g->ntile[a];
    }
    if (tiles > INT32_MAX)
        return false;
    g->ntiles = (int)tiles;
    g->tps = g->ntile[0] * g->ntile[1] * g->ntile[2];
    g->C = p->C;
    g->K = p->K;
    // Staged stores need whole 16-byte positions of the products' dtype in y.
    g->staged = !z && y->dtype == et && y->strides[1] == 1 && (!y->data || aligned16(y->data));
    for (int i = 0; i < y->rank; i++)
        if (i != 1 && y->strides[i] % 8 != 0)
            g->staged = false;
    // The statistics are of the accumulators: no activation. (Also
    // staged: small_input, whose kernel is instantiated only so.)
    if ((p->stats || p->small_input) && !g->staged)
        return false;
    if (p->stats && p->act != SGK_ACT_NONE)
        return false;
    g->stats = p->stats;
    // The pool: from the staged tile, beside the statistics, in 2-D.
    if (p->pool && (!p->stats || nsp != 2))
        return false;
    g->wg = p->wgmma && !g->d3;
    g->late = g->wg && p->issue_late;
    // The normalising prologue: conv_wgmma, C 16, 32 or 64 (compile-time
    // chunks), staged results, and an activation max(v, alpha v) is.
    if (p->prologue && (!g->wg || !g->staged || (p->C != 16 && p->C != 32 && p->C != 64) ||
                        (p->pro_act != SGK_ACT_NONE && p->pro_act != SGK_ACT_RELU &&
                         p->pro_act != SGK_ACT_LEAKY_RELU) ||
                        (p->pro_act == SGK_ACT_LEAKY_RELU && !(p->pro_alpha >= 0.0f && p->pro_alpha <= 1.0f))))
        return false;
    g->pro = p->prologue;
    g->pro_c = p->pro_c > 0 ? p->pro_c : p->C;
    if (g->pro && (g->pro_c % 8 != 0 || g->pro_c > p->C))
        return false;
    g->pro_act = p->pro_act;
    g->pro_alpha = p->pro_act == SGK_ACT_LEAKY_RELU ? p->pro_alpha : 0.0f;
    const size_t stage = (size_t)CM_TP * (g->K + 8);
    const size_t ssh_bytes = 4 * (size_t)cm_ssh_floats(g->K);
    // Shared-memory rows: padded for ldmatrix, unpadded for wgmma.
    const size_t ld = g->wg ? (size_t)p->C : (size_t)cm_ld(p->C);
    // (small_input: the halo buffers' channels 8-15 stay zero, so the
    // staging tile never goes there.)
    g->stage_own = g->staged && (stage > (size_t)halo * ld || p->small_input);
    // (UP: the statistics' sums after the staging tile, in the halo buffer.)
    if (p->up && (!cm_plan_up(p, x, u, g) || stage + ssh_bytes / 2 > (size_t)halo * ld))
        return false;
    g->xsmall = p->small_input;
    g->xcn = p->x_channels;
    g->xc = p->small_input ? (int)x->strides[1] : 0;
    g->xt = x->dtype;
    const size_t wbytes = 2 * (size_t)taps * g->K * ld + (g->up ? 2 * 4 * 32 * (size_t)g->up_c : 0);
    size_t group = 2 * (2 * (size_t)halo * ld + (g->stage_own ? stage : 0)) +
                   (g->pro ? 2 * 3 * (size_t)p->C * 2 : 0); // two tiles' (mean, s, b), 16-bit
    // (Whether a layer runs here is decided at one tile group without the
    // statistics' sums, as before conv_wgmma took several groups.)
    if (wbytes + group > smem_cap(CM_SMEM_MAX, p->smem_limit, (size_t)cm_static_smem(g->K, p->stats)))
        return false;
    size_t need = wbytes + group;
    if (g->wg) {
        group += p->stats && !g->up ? ssh_bytes : 0;
        group += p->small_input ? 4 * (size_t)CM_XS_RING * (size_t)p->x_channels * (size_t)halo : 0;
        group = (group + 127) / 128 * 128;
        size_t n = (CM_WG_SMEM_MAX - wbytes) / group;
        const size_t cap = (size_t)cm_wg_cap(p->C);
        const size_t most = p->wg_groups > 0 && (size_t)p->wg_groups < cap ? (size_t)p->wg_groups : cap;
        g->wgs = n < 1 ? 1 : n > most ? (int)most : (int)n;
        g->wg_w_bytes = (int)((wbytes + 127) / 128 * 128);
        g->wg_bytes = (int)group;
        need = (size_t)g->wg_w_bytes + (size_t)g->wgs * group;
    }
    g->xn = x->strides[0];
    g->yn = y->strides[0];
    g->yc = (int)y->strides[1];
    g->yt = y->dtype;
    g->zn = z ? z->strides[0] : 0;
    g->zc = z ? (int)z->strides[1] : 0;
    g->zt = z ? z->dtype : SEGRT_DTYPE_FLOAT32;
    g->act = p->act;
    g->alpha = p->act_alpha;
    g->ypair = pair_positions(y);
    g->zpair = z && z->dtype == x->dtype && pair_positions(z);
    *smem = need;
    return true;
}

template <int XT, int NT, bool D3, int KS, int EPI>
static segrt_status launch(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    if constexpr (!D3)
        if (g.wg)
            return cm_launch_wgmma<XT, NT, KS, EPI>(stream, grid, smem, a, g);
    return cm_launch_mma<XT, NT, D3, KS, EPI>(stream, grid, smem, a, g);
}

template <int XT, int NT, bool D3, int EPI>
static segrt_status launch_ks(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    switch (g.C) {
    case 16: return launch<XT, NT, D3, 1, EPI>(stream, grid, smem, a, g);
    case 32: return launch<XT, NT, D3, 2, EPI>(stream, grid, smem, a, g);
    case 64:
        // (A 3-D layer of 64 input channels does not fit in shared memory.)
        if constexpr (!D3)
            return launch<XT, NT, D3, 4, EPI>(stream, grid, smem, a, g);
        [[fallthrough]];
    default: return launch<XT, NT, D3, 0, EPI>(stream, grid, smem, a, g);
    }
}

template <int XT, int NT>
static segrt_status launch_shape(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    if (g.d3) {
        // (cm_plan keeps 3-D layers at CM_MAX_K_3D channels.)
        if constexpr (NT * 8 <= CM_MAX_K_3D) {
            if (g.stats)
                return launch_ks<XT, NT, true, EPI_STATS>(stream, grid, smem, a, g);
            return g.staged ? launch_ks<XT, NT, true, EPI_STAGED>(stream, grid, smem, a, g)
                            : launch_ks<XT, NT, true, EPI_DIRECT>(stream, grid, smem, a, g);
        }
        return sg_error(SEGRT_ERROR_INTERNAL, "3x3x3 tensor-core convolution: %d output channels", g.K);
    }
    if (g.stats)
        return launch_ks<XT, NT, false, EPI_STATS>(stream, grid, smem, a, g);
    return g.staged ? launch_ks<XT, NT, false, EPI_STAGED>(stream, grid, smem, a, g)
                    : launch_ks<XT, NT, false, EPI_DIRECT>(stream, grid, smem, a, g);
}

template <int XT>
static segrt_status launch_k(cudaStream_t stream, unsigned grid, size_t smem, const cmargs &a, const cmgeom &g)
{
    switch (g.K) {
    case 8: return launch_shape<XT, 1>(stream, grid, smem, a, g);
    case 16: return launch_shape<XT, 2>(stream, grid, smem, a, g);
    default: return launch_shape<XT, 4>(stream, grid, smem, a, g);
    }
}

extern "C" bool sgk_conv_mma_fits(const sgk_conv_mma_params *p, const sgk_view *y, const sgk_view *x,
                                  const sgk_view *z, const sgk_view *up_x)
{
    cmgeom g;
    size_t smem;
    return cm_plan(p, y, x, z, up_x, &g, &smem);
}

extern "C" void sgk_conv_mma_stats_grid(const sgk_conv_mma_params *p, const sgk_view *y, sgk_tile_grid *grid)
{
    int t[3];
    cm_tile_shape(p->n_spatial == 3, t);
    for (int a = 0; a < 3; a++) {
        const int s = a - (3 - p->n_spatial);
        grid->dims[a] = s >= 0 ? (int32_t)y->dims[2 + s] : 1;
        grid->tile[a] = t[a];
    }
}

extern "C" segrt_status sgk_conv_mma(cudaStream_t stream, const sgk_conv_mma_params *p, const sgk_view *y,
                                     const sgk_view *x, const float *w, const float *bias, const sgk_view *z,
                                     float *stats, const float *ab, const sgk_view *pooled,
                                     const sgk_conv_mma_up *up)
{
    cmgeom g;
    size_t smem;
    if (!cm_plan(p, y, x, z, p->up && up ? &up->x : NULL, &g, &smem))
        return sg_error(SEGRT_ERROR_UNSUPPORTED, "3x3 tensor-core convolution: layer not supported by the kernel");
    if (p->up) {
        if (!aligned16(up->x.data) || ((uintptr_t)up->w & 15) != 0 || (p->up_pro && (!up->ab || !aligned16(up->ab))))
            return sg_error(SEGRT_ERROR_INTERNAL, "3x3 tensor-core convolution: the upsampling's input, weights "
                                                  "or normalisation are not 16-byte aligned");
        g.ux = up->x.data;
        g.uw = up->w;
        g.ub = up->bias;
        g.uab = (const float4 *)up->ab;
    }
    if (p->pool) {
        const sgk_view *q = pooled;
        bool ok = q && q->rank == 4 && q->dtype == y->dtype && q->dims[0] == y->dims[0] && q->dims[1] == p->K &&
                  q->dims[2] == y->dims[2] / 2 && q->dims[3] == y->dims[3] / 2 && q->strides[1] == 1 &&
                  aligned16(q->data) && sample_offsets_fit(q);
        for (int i = 0; ok && i < 4; i++)
            ok = i == 1 || q->strides[i] % 8 == 0;
        if (!ok)
            return sg_error(SEGRT_ERROR_INTERNAL, "3x3 tensor-core convolution: the pool's tensor does not fit");
        g.pool = q->data;
        g.pn = q->strides[0];
        g.ps[0] = (int)q->strides[2];
        g.ps[1] = (int)q->strides[3];
        g.pool_min = p->pool_min;
    }
    if (((uintptr_t)w & 15) != 0)
        return sg_error(SEGRT_ERROR_INTERNAL, "3x3 tensor-core convolution: weights at %p, not 16-byte aligned",
                        (const void *)w);
    // Blocks an SM: as many as fit (an SM's 228 KB, 1 KB reserved a
    // block), up to CM_BLOCKS_PER_SM, or cm_wg_cap's warpgroups.
    ll per_sm = (ll)(220 * 1024) / (ll)(smem + 1024);
    const ll most = g.wg ? cm_wg_cap(g.C) / g.wgs : CM_BLOCKS_PER_SM;
    per_sm = per_sm < 1 ? 1 : per_sm > most ? most : per_sm;
    ll cap = (ll)(p->sm_count > 0 ? p->sm_count : 132) * per_sm;
    unsigned grid = (unsigned)(g.ntiles < cap ? g.ntiles : cap);
    // Few tiles: fewer warpgroups a block, so that every block has work.
    if (g.wg && ceil_div(g.ntiles, (ll)grid) < g.wgs) {
        const int per = (int)ceil_div(g.ntiles, (ll)grid);
        smem -= (size_t)(g.wgs - per) * (size_t)g.wg_bytes;
        g.wgs = per;
    }
    if (p->stats && (!stats || ((uintptr_t)stats & 7) != 0))
        return sg_error(SEGRT_ERROR_INTERNAL, "3x3 tensor-core convolution: statistics at %p", (void *)stats);
    if (p->prologue && (!ab || ((uintptr_t)ab & 15) != 0))
        return sg_error(SEGRT_ERROR_INTERNAL, "3x3 tensor-core convolution: normalisation parameters at %p",
                        (const void *)ab);
    const cmargs a = {y, x, z, w, bias, (float2 *)stats, (const float4 *)ab};
    if ((p->small_input ? y->dtype : x->dtype) == SEGRT_DTYPE_BFLOAT16)
        return launch_k<SEGRT_DTYPE_BFLOAT16>(stream, grid, smem, a, g);
    return launch_k<SEGRT_DTYPE_FLOAT16>(stream, grid, smem, a, g);
}
