// The instance list of the 3x3(x3) tensor-core convolution: every
// template instance of the two launchers (k_conv_mma_common.cuh) that the
// dispatch in k_conv_mma.cu can reach. k_conv_mma_sync.cu and
// k_conv_wgmma.cu instantiate exactly these; a combination the dispatch
// reaches and this list lacks is an undefined symbol at link time.
//
// XT: the 16-bit dtype (float16, bfloat16). NT: K / 8 (8, 16, 32 output
// channels). D3: 3-D (at most 16 output channels there, NT 1 or 2). KS:
// C / 16 where 1, 2 or 4 (4: 2-D only), else 0 (a loop over C). EPI: the
// epilogue (direct stores, staged stores, staged with statistics).
#ifndef SG_BACKEND_CUDA_K_CONV_MMA_INSTANCES_CUH
#define SG_BACKEND_CUDA_K_CONV_MMA_INSTANCES_CUH

#define CM_EACH_EPI(X, XT, NT, D3, KS)                                                                                 \
    X(XT, NT, D3, KS, EPI_DIRECT) X(XT, NT, D3, KS, EPI_STAGED) X(XT, NT, D3, KS, EPI_STATS)
#define CM_EACH_KS_2D(X, XT, NT)                                                                                       \
    CM_EACH_EPI(X, XT, NT, false, 0)                                                                                   \
    CM_EACH_EPI(X, XT, NT, false, 1) CM_EACH_EPI(X, XT, NT, false, 2) CM_EACH_EPI(X, XT, NT, false, 4)
#define CM_EACH_KS_3D(X, XT, NT)                                                                                       \
    CM_EACH_EPI(X, XT, NT, true, 0) CM_EACH_EPI(X, XT, NT, true, 1) CM_EACH_EPI(X, XT, NT, true, 2)
#define CM_EACH_SHAPE(X, XT)                                                                                           \
    CM_EACH_KS_2D(X, XT, 1)                                                                                            \
    CM_EACH_KS_2D(X, XT, 2) CM_EACH_KS_2D(X, XT, 4) CM_EACH_KS_3D(X, XT, 1) CM_EACH_KS_3D(X, XT, 2)

// X(XT, NT, D3, KS, EPI) for each conv_mma instance: 2-D at 8, 16 and 32
// output channels, 3-D at 8 and 16, each 16-bit dtype.
#define CM_MMA_INSTANCES(X) CM_EACH_SHAPE(X, SEGRT_DTYPE_FLOAT16) CM_EACH_SHAPE(X, SEGRT_DTYPE_BFLOAT16)

// X(XT, NT, KS, EPI) for each conv_wgmma instance: the 2-D ones above.
#define CM_WG_EACH_EPI(X, XT, NT, KS) X(XT, NT, KS, EPI_DIRECT) X(XT, NT, KS, EPI_STAGED) X(XT, NT, KS, EPI_STATS)
#define CM_WG_EACH_KS(X, XT, NT)                                                                                       \
    CM_WG_EACH_EPI(X, XT, NT, 0) CM_WG_EACH_EPI(X, XT, NT, 1) CM_WG_EACH_EPI(X, XT, NT, 2) CM_WG_EACH_EPI(X, XT, NT, 4)
#define CM_WG_EACH_NT(X, XT) CM_WG_EACH_KS(X, XT, 1) CM_WG_EACH_KS(X, XT, 2) CM_WG_EACH_KS(X, XT, 4)
#define CM_WGMMA_INSTANCES(X) CM_WG_EACH_NT(X, SEGRT_DTYPE_FLOAT16) CM_WG_EACH_NT(X, SEGRT_DTYPE_BFLOAT16)

#endif
