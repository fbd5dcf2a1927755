/* params.h: the layout of the 64-bit parameter block every OpenCL kernel receives as its first
 * argument. Shared text: the host includes it (opencl_backend.h), and the build prepends it to the
 * kernel source, so the host and the kernels can never disagree on an index. Plain enums: valid C
 * and OpenCL C. */
#ifndef FA_OCL_PARAMS_H
#define FA_OCL_PARAMS_H

/* The tensors, each described by four longs: element offset inside its cl_mem (the fa_malloc
 * pointer's byte offset / element size), then the batch, row and head strides in elements (the
 * form of fa_view in core/internal.h). */
enum fa_ocl_tensor { FA_T_Q, FA_T_K, FA_T_V, FA_T_O, FA_T_LSE, FA_T_DO, FA_T_DQ, FA_T_DK, FA_T_DV, FA_T_COUNT };

enum fa_ocl_param {
    FA_P_BATCH,
    FA_P_HEADS_Q,
    FA_P_HEADS_KV,
    FA_P_GROUP,
    FA_P_SEQLEN_Q,          /* dense lengths or varlen maxima */
    FA_P_SEQLEN_K,
    FA_P_TOTAL_Q,
    FA_P_VARLEN,            /* 1: cu_seqlens give each sequence's rows */
    FA_P_CU_Q_OFF,          /* element offsets of cu_seqlens_q / _k inside their cl_mem */
    FA_P_CU_K_OFF,
    FA_P_CAUSAL,
    FA_P_WINDOW_LEFT,
    FA_P_WINDOW_RIGHT,
    FA_P_DROPOUT_THRESHOLD, /* core/philox.h threshold; 0 = no dropout */
    FA_P_SEED,              /* uint64 bits */
    FA_P_OFFSET,
    FA_P_HAS_LSE,
    FA_P_BLOCK_MASK,        /* 1: block-sparse, the mask bits and the core's lists are bound */
    FA_P_BM_HEADS,
    FA_P_BM_ROWS,
    FA_P_BM_COLS,
    FA_P_BM_BQ,
    FA_P_BM_BK,
    FA_P_BL_HEADS,
    FA_P_BL_NQ,
    FA_P_MOD,               /* the call's fa_score_mod (core/score_mod.h, included before this file), its
                               bytes in as many longs as they need */
    FA_P_MOD_END = FA_P_MOD + (int)((sizeof(fa_score_mod) + 7) / 8),
    FA_P_ALIBI_OFF = FA_P_MOD_END, /* element offset of ALiBi's slopes inside their cl_mem */
    FA_P_SINK_OFF,          /* element offsets of the learnable sink and of dsink inside their cl_mem */
    FA_P_DSINK_OFF,
    FA_P_TENSORS,           /* 4 per tensor from here, in fa_ocl_tensor order */
    FA_P_COUNT = FA_P_TENSORS + 4 * FA_T_COUNT
};

/* fa_forward_kvcache's programs (decode.cl) take their own block: the sizes, then the element
 * offsets of the int32 arrays and the rotary tables inside their cl_mem, then 4 longs per tensor
 * (offset, batch / page, row, head strides) in fa_ocl_kv_tensor order. */
enum fa_ocl_kv_tensor { FA_KT_Q, FA_KT_O, FA_KT_LSE, FA_KT_KC, FA_KT_VC, FA_KT_KN, FA_KT_VN, FA_KT_COUNT };

enum fa_ocl_kv_param {
    FA_KV_BATCH,
    FA_KV_SEQLEN_NEW,
    FA_KV_SEQLEN_KNEW,
    FA_KV_HEADS_Q,
    FA_KV_HEADS_KV,
    FA_KV_GROUP,
    FA_KV_PAGED,            /* 1: block_table gives each sequence's pages */
    FA_KV_PAGE_SIZE,
    FA_KV_BT_STRIDE,
    FA_KV_SEQLEN_CACHE,     /* every sequence's length when there is no cache_seqlens */
    FA_KV_HAS_SEQLENS,
    FA_KV_HAS_BIDX,
    FA_KV_HAS_LEFTPAD,      /* 1: cache_leftpad gives where each sequence's keys start */
    FA_KV_CAUSAL,
    FA_KV_WINDOW_LEFT,
    FA_KV_WINDOW_RIGHT,
    FA_KV_HAS_LSE,
    FA_KV_ROTARY_DIM,       /* 0: no rotary */
    FA_KV_ROTARY_INTERLEAVED,
    FA_KV_COS_STRIDE,
    FA_KV_SIN_STRIDE,
    FA_KV_SPLITS,
    FA_KV_CS_OFF,           /* element offsets: cache_seqlens, block_table, cache_batch_idx, cos, sin, */
    FA_KV_BT_OFF,           /* cache_leftpad */
    FA_KV_BI_OFF,
    FA_KV_COS_OFF,
    FA_KV_SIN_OFF,
    FA_KV_LP_OFF,
    FA_KV_MOD,              /* the call's fa_score_mod, as in fa_ocl_param */
    FA_KV_MOD_END = FA_KV_MOD + (int)((sizeof(fa_score_mod) + 7) / 8),
    FA_KV_ALIBI_OFF = FA_KV_MOD_END,
    FA_KV_SINK_OFF,         /* element offset of the learnable sink inside its cl_mem */
    FA_KV_TENSORS,
    FA_KV_COUNT = FA_KV_TENSORS + 4 * FA_KT_COUNT
};

#endif
