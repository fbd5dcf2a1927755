"""flashattn: exact fused attention (FlashAttention) from the flashattn C library.

The functions have the signatures of FlashAttention-2's public interface, so code switches with
one import; layouts as FlashAttention's: q [batch, seqlen_q, heads, d], k and v [batch, seqlen_k,
heads_kv, d] (heads a multiple of heads_kv: GQA/MQA), varlen q [total_q, heads, d] with int32
cu_seqlens of batch + 1 offsets. They take NumPy arrays (the CPU backend; float32, float16, and
bfloat16 from ml_dtypes) and torch tensors (CPU tensors on the CPU backend, CUDA tensors on the
CUDA backend, on the current stream, no copies). With torch, every function goes through
torch.library custom operators (flashattn::fwd, flashattn::bwd): gradients flow through autograd
and torch.compile traces them without graph breaks; with NumPy, flash_attn_backward gives dQ, dK,
dV (FLASHATTN_NO_TORCH=1 keeps torch out: torch tensors then run forward only, without autograd).

Differences from FlashAttention-2, all documented here: dropout needs an explicit seed= with
NumPy (torch draws it from torch's default generator, so torch.manual_seed reproduces a run);
return_attn_probs=True returns (out, softmax_lse, None): the attention probabilities are never
materialised; softcap= and alibi_slopes= (fp32 [heads] or [batch, heads], on the tensors' device) are
keyword-only here; varlen rows after cu_seqlens[-1]
(padding) get out = 0, softmax_lse = -inf and zero gradients instead of undefined values. Bad
input raises FlashAttnError (a RuntimeError) with the library's status and message, or
ValueError / TypeError for what Python checks first."""
import importlib
import os

from . import _capi, _core
from ._capi import FlashAttnError, backends
from ._core import synchronize

# The torch custom operators (torch.compile traces through them) where torch is installed;
# FLASHATTN_NO_TORCH=1 keeps torch out of the import (NumPy only).
try:
    if os.environ.get("FLASHATTN_NO_TORCH"):
        raise ImportError("FLASHATTN_NO_TORCH")
    import torch as _torch_module  # noqa: F401 (only whether it is there)
except ImportError:
    _torch_module = None
# (no name _torch may exist in this module before this line: `from . import` would return it
# instead of importing the submodule)
_torch = importlib.import_module("._torch", __name__) if _torch_module is not None else None

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "block_sparse_attn_func",
           "flash_attn_backward", "flash_attn_with_kvcache", "FlashAttnError", "backends", "library_version",
           "synchronize"]
__version__ = "0.1.0"


def library_version():
    """The version of the C library actually loaded."""
    return _capi.lib().fa_version().decode()


def _torch_seed(dropout_p, seed, q):
    if dropout_p > 0.0 and seed is None and _core._is_torch(q):
        import torch
        return int(torch.randint(0, 2 ** 62, (1,)).item())
    return seed


def _attention(q, k, v, return_attn_probs, **options):
    if _torch is not None and _core._is_torch(q):  # the custom operator: autograd and torch.compile
        options["seed"] = _torch_seed(options.get("dropout_p", 0.0), options.get("seed"), q)
        out, lse = _torch.attention(q, k, v, **options)
    else:  # NumPy arrays (or torch tensors under FLASHATTN_NO_TORCH: no autograd)
        out, lse = _core.forward(_core.Call(q, **options), q, k, v)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    deterministic=False, return_attn_probs=False, *, seed=None, offset=0, softcap=0.0,
                    alibi_slopes=None):
    """Attention of q [batch, seqlen_q, heads, d] over k, v [batch, seqlen_k, heads_kv, d].
    softmax_scale None: 1 / sqrt(d). causal: bottom-right aligned when seqlen_q != seqlen_k.
    window_size (left, right), -1 unbounded. softcap c > 0: scores become c tanh(s / c);
    alibi_slopes [heads] or [batch, heads] float32: scores minus slope * |i + seqlen_k - seqlen_q - j|.
    Returns out, or (out, softmax_lse [batch, heads, seqlen_q] float32, None) with return_attn_probs."""
    return _attention(q, k, v, return_attn_probs, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, deterministic=deterministic, seed=seed, offset=offset,
                      softcap=softcap, alibi_slopes=alibi_slopes)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             deterministic=False, return_attn_probs=False, *, seed=None, offset=0, softcap=0.0,
                             alibi_slopes=None):
    """flash_attn_func with kv [batch, seqlen_k, 2, heads_kv, d]."""
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size, deterministic,
                           return_attn_probs, seed=seed, offset=offset, softcap=softcap, alibi_slopes=alibi_slopes)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              deterministic=False, return_attn_probs=False, *, seed=None, offset=0, softcap=0.0,
                              alibi_slopes=None):
    """flash_attn_func with qkv [batch, seqlen, 3, heads, d]."""
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal, window_size,
                           deterministic, return_attn_probs, seed=seed, offset=offset, softcap=softcap,
                           alibi_slopes=alibi_slopes)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), deterministic=False,
                           return_attn_probs=False, *, seed=None, offset=0, softcap=0.0, alibi_slopes=None):
    """Packed variable-length batches: q [total_q, heads, d], k, v [total_k, heads_kv, d],
    cu_seqlens int32 [batch + 1]; softmax_lse [heads, total_q]. cu_seqlens[-1] may be below the
    packed rows (padding at the end): those rows get out = 0 and softmax_lse = -inf (and zero
    gradients), where FlashAttention-2 leaves them undefined. ALiBi's distance is within each
    sequence."""
    return _attention(q, k, v, return_attn_probs, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, deterministic=deterministic, seed=seed, offset=offset,
                      cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                      max_seqlen_k=max_seqlen_k, softcap=softcap, alibi_slopes=alibi_slopes)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), deterministic=False,
                                    return_attn_probs=False, *, seed=None, offset=0, softcap=0.0,
                                    alibi_slopes=None):
    """flash_attn_varlen_func with kv [total_k, 2, heads_kv, d]."""
    return flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  dropout_p, softmax_scale, causal, window_size, deterministic, return_attn_probs,
                                  seed=seed, offset=offset, softcap=softcap, alibi_slopes=alibi_slopes)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), deterministic=False, return_attn_probs=False, *, seed=None,
                                     offset=0, softcap=0.0, alibi_slopes=None):
    """flash_attn_varlen_func with qkv [total, 3, heads, d] and one cu_seqlens."""
    return flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                  dropout_p, softmax_scale, causal, window_size, deterministic, return_attn_probs,
                                  seed=seed, offset=offset, softcap=softcap, alibi_slopes=alibi_slopes)


def block_sparse_attn_func(q, k, v, block_mask, block_size, dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), deterministic=False, return_attn_probs=False, *, seed=None, offset=0,
                           softcap=0.0, alibi_slopes=None):
    """flash_attn_func restricted to a block mask: block_mask [rows, cols] or [heads, rows, cols]
    (nonzero: query block r may attend key block c; one mask for every head or one per query
    head), block_size (block_q, block_k). Empty blocks are skipped, so the cost follows the
    density. Intersects causal and window masks."""
    return _attention(q, k, v, return_attn_probs, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, deterministic=deterministic, seed=seed, offset=offset,
                      block_mask=block_mask, block_size=block_size, softcap=softcap, alibi_slopes=alibi_slopes)


def flash_attn_backward(dout, q, k, v, out, softmax_lse, dropout_p=0.0, softmax_scale=None, causal=False,
                        window_size=(-1, -1), deterministic=False, *, seed=None, offset=0, cu_seqlens_q=None,
                        cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, block_mask=None, block_size=None,
                        softcap=0.0, alibi_slopes=None):
    """dQ, dK, dV for the output gradient dout, from the forward's out and softmax_lse and the same
    options (dropout: the same seed and offset). For NumPy arrays, and for torch without autograd."""
    call = _core.Call(q, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                      deterministic=deterministic, seed=seed, offset=offset, cu_seqlens_q=cu_seqlens_q,
                      cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                      block_mask=block_mask, block_size=block_size, softcap=softcap, alibi_slopes=alibi_slopes)
    return _core.backward(call, dout, q, k, v, out, softmax_lse)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False,
                            check_on_device=False):
    """Attention of q [batch, seqlen_new, heads, d] over a KV cache, FlashAttention-2's signature:
    k_cache / v_cache [batch_cache, seqlen_cache, heads_kv, d], or [num_pages, page_size, heads_kv, d]
    with block_table [batch, max_pages] (int32); cache_seqlens (int or [batch]) tokens in each
    sequence's cache; k / v [batch, seqlen_knew, heads_kv, d] written into the cache at
    cache_seqlens in place before the attention; rotary_cos / rotary_sin [seqlen_ro, rotary_dim / 2]
    rotate q and k (interleaved or halves); causal / window_size aligned bottom-right against the
    cache after appending. Forward only (inference): no autograd. cache_leftpad is not supported
    (ValueError). Returns out, or (out, softmax_lse [batch, heads, seqlen_new]) with
    return_softmax_lse. The library: fa_forward_kvcache (NumPy arrays and CPU tensors on the CPU
    backend, CUDA tensors on the CUDA backend). On torch tensors it is the custom operator
    flashattn::fwd_kvcache, which torch.compile traces. check_on_device=True (beyond FA2's
    signature): on CUDA the int32 arrays' values are checked by the GPU instead of copied to the
    host, so the call does not wait for the GPU (and can be captured in a CUDA graph); a bad value
    makes that call and the ones after it write nothing until flashattn.synchronize(tensor) raises
    it. Elsewhere it is checked at once, as without the flag."""
    if cache_leftpad is not None:
        raise ValueError("cache_leftpad is not supported")
    # torch tensors through the custom operator (torch.compile traces it; the caches are declared mutated)
    forward = _torch.kvcache if _torch is not None and _core._is_torch(q) else _core.kvcache_forward
    out, lse = forward(q, k_cache, v_cache, k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                                     cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                                     block_table=block_table, softmax_scale=softmax_scale, causal=causal,
                                     window_size=window_size, softcap=softcap, rotary_interleaved=rotary_interleaved,
                                     alibi_slopes=alibi_slopes, num_splits=num_splits,
                                     check_on_device=check_on_device)
    return (out, lse) if return_softmax_lse else out
