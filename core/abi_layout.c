/* abi_layout.c: the byte layout of every public structure of flashattn.h, as the compiler that
 * built the library laid it out (sizeof / offsetof), so that bindings that restate the structures
 * (the Python package's ctypes declarations) can be checked against it instead of trusted. */
#include <stddef.h>

#include "flashattn.h"

#define FA_ABI_STRUCT(type) {#type, NULL, 0, sizeof(type)}
#define FA_ABI_FIELD(type, field) {#type, #field, offsetof(type, field), sizeof(((type *)0)->field)}

static const fa_abi_field abi_layout[] = {
    FA_ABI_STRUCT(fa_tensor),
    FA_ABI_FIELD(fa_tensor, data),
    FA_ABI_FIELD(fa_tensor, dtype),
    FA_ABI_FIELD(fa_tensor, ndim),
    FA_ABI_FIELD(fa_tensor, shape),
    FA_ABI_FIELD(fa_tensor, stride),

    FA_ABI_STRUCT(fa_block_mask),
    FA_ABI_FIELD(fa_block_mask, heads),
    FA_ABI_FIELD(fa_block_mask, rows),
    FA_ABI_FIELD(fa_block_mask, cols),
    FA_ABI_FIELD(fa_block_mask, block_q),
    FA_ABI_FIELD(fa_block_mask, block_k),
    FA_ABI_FIELD(fa_block_mask, bits),

    FA_ABI_STRUCT(fa_options),
    FA_ABI_FIELD(fa_options, softmax_scale),
    FA_ABI_FIELD(fa_options, causal),
    FA_ABI_FIELD(fa_options, window_left),
    FA_ABI_FIELD(fa_options, window_right),
    FA_ABI_FIELD(fa_options, dropout_p),
    FA_ABI_FIELD(fa_options, dropout_seed),
    FA_ABI_FIELD(fa_options, dropout_offset),
    FA_ABI_FIELD(fa_options, block_mask),
    FA_ABI_FIELD(fa_options, deterministic),
    FA_ABI_FIELD(fa_options, softcap),
    FA_ABI_FIELD(fa_options, alibi_slopes),
    FA_ABI_FIELD(fa_options, alibi_batch_stride),
    FA_ABI_FIELD(fa_options, learnable_sink),

    FA_ABI_STRUCT(fa_varlen),
    FA_ABI_FIELD(fa_varlen, cu_seqlens_q),
    FA_ABI_FIELD(fa_varlen, cu_seqlens_k),
    FA_ABI_FIELD(fa_varlen, batch),
    FA_ABI_FIELD(fa_varlen, max_seqlen_q),
    FA_ABI_FIELD(fa_varlen, max_seqlen_k),
    FA_ABI_FIELD(fa_varlen, block_table),
    FA_ABI_FIELD(fa_varlen, block_table_stride),

    FA_ABI_STRUCT(fa_fwd_args),
    FA_ABI_FIELD(fa_fwd_args, q),
    FA_ABI_FIELD(fa_fwd_args, k),
    FA_ABI_FIELD(fa_fwd_args, v),
    FA_ABI_FIELD(fa_fwd_args, o),
    FA_ABI_FIELD(fa_fwd_args, lse),
    FA_ABI_FIELD(fa_fwd_args, varlen),
    FA_ABI_FIELD(fa_fwd_args, opts),

    FA_ABI_STRUCT(fa_bwd_args),
    FA_ABI_FIELD(fa_bwd_args, q),
    FA_ABI_FIELD(fa_bwd_args, k),
    FA_ABI_FIELD(fa_bwd_args, v),
    FA_ABI_FIELD(fa_bwd_args, o),
    FA_ABI_FIELD(fa_bwd_args, lse),
    FA_ABI_FIELD(fa_bwd_args, dout),
    FA_ABI_FIELD(fa_bwd_args, dq),
    FA_ABI_FIELD(fa_bwd_args, dk),
    FA_ABI_FIELD(fa_bwd_args, dv),
    FA_ABI_FIELD(fa_bwd_args, varlen),
    FA_ABI_FIELD(fa_bwd_args, opts),
    FA_ABI_FIELD(fa_bwd_args, dsink),

    FA_ABI_STRUCT(fa_capabilities),
    FA_ABI_FIELD(fa_capabilities, dtypes),
    FA_ABI_FIELD(fa_capabilities, max_head_dim),
    FA_ABI_FIELD(fa_capabilities, head_dims),
    FA_ABI_FIELD(fa_capabilities, features),
    FA_ABI_FIELD(fa_capabilities, notes),

    FA_ABI_STRUCT(fa_plan_info),
    FA_ABI_FIELD(fa_plan_info, block_q),
    FA_ABI_FIELD(fa_plan_info, block_k),
    FA_ABI_FIELD(fa_plan_info, onchip_bytes),
    FA_ABI_FIELD(fa_plan_info, paper_block_q),
    FA_ABI_FIELD(fa_plan_info, paper_block_k),
    FA_ABI_FIELD(fa_plan_info, num_q_blocks),
    FA_ABI_FIELD(fa_plan_info, num_k_blocks),
    FA_ABI_FIELD(fa_plan_info, workspace_fwd),
    FA_ABI_FIELD(fa_plan_info, workspace_bwd),

    FA_ABI_STRUCT(fa_io_model),
    FA_ABI_FIELD(fa_io_model, block_q),
    FA_ABI_FIELD(fa_io_model, block_k),
    FA_ABI_FIELD(fa_io_model, standard_read),
    FA_ABI_FIELD(fa_io_model, standard_write),
    FA_ABI_FIELD(fa_io_model, flash_read),
    FA_ABI_FIELD(fa_io_model, flash_write),
    FA_ABI_FIELD(fa_io_model, flash_qouter_read),
    FA_ABI_FIELD(fa_io_model, flash_qouter_write),

    FA_ABI_STRUCT(fa_kvcache_args),
    FA_ABI_FIELD(fa_kvcache_args, q),
    FA_ABI_FIELD(fa_kvcache_args, k_cache),
    FA_ABI_FIELD(fa_kvcache_args, v_cache),
    FA_ABI_FIELD(fa_kvcache_args, cache_seqlens),
    FA_ABI_FIELD(fa_kvcache_args, block_table),
    FA_ABI_FIELD(fa_kvcache_args, block_table_stride),
    FA_ABI_FIELD(fa_kvcache_args, cache_batch_idx),
    FA_ABI_FIELD(fa_kvcache_args, k_new),
    FA_ABI_FIELD(fa_kvcache_args, v_new),
    FA_ABI_FIELD(fa_kvcache_args, rotary_cos),
    FA_ABI_FIELD(fa_kvcache_args, rotary_sin),
    FA_ABI_FIELD(fa_kvcache_args, rotary_interleaved),
    FA_ABI_FIELD(fa_kvcache_args, o),
    FA_ABI_FIELD(fa_kvcache_args, lse),
    FA_ABI_FIELD(fa_kvcache_args, opts),
    FA_ABI_FIELD(fa_kvcache_args, num_splits),
    FA_ABI_FIELD(fa_kvcache_args, check_on_device),
    FA_ABI_FIELD(fa_kvcache_args, cache_leftpad),

    FA_ABI_STRUCT(fa_ring_comm),
    FA_ABI_FIELD(fa_ring_comm, rank),
    FA_ABI_FIELD(fa_ring_comm, size),
    FA_ABI_FIELD(fa_ring_comm, start),
    FA_ABI_FIELD(fa_ring_comm, finish),
    FA_ABI_FIELD(fa_ring_comm, agree),
    FA_ABI_FIELD(fa_ring_comm, user),

    FA_ABI_STRUCT(fa_abi_field),
    FA_ABI_FIELD(fa_abi_field, struct_name),
    FA_ABI_FIELD(fa_abi_field, field_name),
    FA_ABI_FIELD(fa_abi_field, offset),
    FA_ABI_FIELD(fa_abi_field, size),
};

const fa_abi_field *fa_abi_layout(size_t *count)
{
    if (count)
        *count = sizeof abi_layout / sizeof abi_layout[0];
    return abi_layout;
}
