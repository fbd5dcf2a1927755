"""flashattn: exact fused attention (FlashAttention) from the flashattn C library.

The functions have FlashAttention-2's signatures, positional order included (after the arrays:
dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
return_attn_probs), so code switches with one import; what flashattn adds (seed=, offset=,
backend=, check_on_device=, and FlashAttention-4's learnable_sink=) is keyword-only. Layouts as
FlashAttention's: q [batch, seqlen_q, heads, d], k [batch, seqlen_k, heads_kv, d] and v [batch,
seqlen_k, heads_kv, d_v] (heads a multiple of heads_kv: GQA/MQA; d_v = d usually, v's last dim
sets it and out's), varlen q [total_q, heads, d] with int32 cu_seqlens of batch + 1 offsets.

Arrays (float32, float16, bfloat16): torch tensors run where they live (CPU tensors on the CPU
backend, CUDA tensors on the CUDA backend, on the current stream, no copies). NumPy arrays (and
other host arrays through DLPack) run on the backend that backend= names ("opencl", "cuda:1"),
else FLASHATTN_BACKEND, else the CPU backend: on a device backend they are copied there and the
results back. Other libraries' GPU arrays (CuPy, JAX, ... through __dlpack__ or
__cuda_array_interface__) run in place on the CUDA backend; their results are DeviceArrays, memory
the library allocated that exposes __cuda_array_interface__ (and .numpy()) and is freed when the
object is deleted. With torch, every function goes through torch.library custom operators
(flashattn::fwd, flashattn::bwd): gradients flow through autograd and torch.compile traces them
without graph breaks; otherwise flash_attn_backward gives dQ, dK, dV (FLASHATTN_NO_TORCH=1 keeps
torch out: torch tensors then run forward only, without autograd).

Differences from FlashAttention-2, all documented here: dropout needs an explicit seed= outside
torch (torch draws it from torch's default generator, so torch.manual_seed reproduces a run);
return_attn_probs=True returns (out, softmax_lse, S_dmask): the probabilities, recomputed on the
host from softmax_lse after the call (for tests, as in FA2; [batch, heads, seqlen_q, seqlen_k],
unrounded; None for block-sparse and paged calls); alibi_slopes are fp32 [heads] or [batch, heads] in the arrays' memory (or host
values, copied); flash_attn_varlen_func's block_table (paged keys and values) runs the forward
only (no backward, as in FlashAttention-2) and takes any page size; varlen rows after cu_seqlens[-1] (padding) get out =
0, softmax_lse = -inf and zero gradients instead of undefined values. Bad input raises
FlashAttnError (a RuntimeError) with the library's status and message, or ValueError / TypeError
(an input that is not an array, an option of the wrong type) for what Python checks first; no
output is written then."""
import importlib
import os

from . import _capi, _core
from ._capi import FlashAttnError, backend_availability, backends
from ._core import synchronize
from ._warmup import warmup

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
           "flash_attn_backward", "flash_attn_with_kvcache", "FlashAttnError", "backends", "backend_availability",
           "library_version", "synchronize", "warmup"]


def _package_version():
    """VERSION is the one place the version is written (meson.build reads it, meson-python puts it
    in the metadata, and meson checks the C header against it): run from the source tree, that
    file; installed, the distribution's metadata; installed by meson alone (no metadata), the
    loaded library's fa_version()."""
    tree_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "VERSION")
    if os.path.isfile(tree_file) and os.path.isfile(os.path.join(os.path.dirname(tree_file), "meson.build")):
        with open(tree_file, encoding="ascii") as f:
            return f.read().strip()
    import importlib.metadata
    try:
        return importlib.metadata.version(__name__)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return _capi.lib().fa_version().decode()
    except ImportError:  # no library found: the import still works, as it does without a version
        return "unknown"


__version__ = _package_version()


def library_version():
    """The version of the C library actually loaded."""
    return _capi.lib().fa_version().decode()


def _torch_seed(dropout_p, seed, q):
    if dropout_p > 0.0 and seed is None and _core._is_torch(q):
        import torch
        return int(torch.randint(0, 2 ** 62, (1,)).item())
    return seed


def _check_arrays(**arrays):
    for name, a in arrays.items():
        _core.check_array(a, name)


def _unpack(a, dim, name, layout):
    """The arrays packed along dimension dim of a (qkv: q, k, v; kv: k, v), views of it without a
    copy (torch: unbind, whose gradient is one stack rather than a zero tensor of a's shape per
    slice); a's shape must be layout."""
    n, shape = len(name), _core._shape_of(a)
    if len(shape) != dim + 3 or shape[dim] != n:
        raise ValueError(f"{name} must be {layout}, got shape {shape}")
    if _core._is_torch(a):
        return a.unbind(dim)
    return tuple(a[(slice(None),) * dim + (i,)] for i in range(n))


def _attention(q, k, v, return_attn_probs, packed=None, **options):
    """out (with return_attn_probs: out, softmax_lse, S_dmask) of every function but the KV cache's.
    packed: (the packed array, its packing dimension) when q, k, v or k, v are its _unpack views;
    with torch autograd their gradients then go into one gradient of the packed tensor."""
    _core.check_options(return_attn_probs=return_attn_probs,
                        **{n: options[n] for n in ("dropout_p", "softmax_scale", "causal", "window_size", "softcap",
                                                   "alibi_slopes", "deterministic", "seed", "offset", "backend")})
    if _torch is not None and _core._is_torch(q):  # the custom operator: autograd and torch.compile
        _core.check_torch_backend(q, options.pop("backend"))
        options["seed"] = _torch_seed(options.get("dropout_p", 0.0), options.get("seed"), q)
        out, lse = _torch.attention(q, k, v, packed=packed, **options)
    else:  # NumPy and other arrays (or torch tensors under FLASHATTN_NO_TORCH: no autograd)
        out, lse = _core.forward(_core.Call(q, **options), q, k, v)
    if not return_attn_probs:
        return out
    # FlashAttention-2's S_dmask (for tests): recomputed on the host from the LSE (_probs.py); not
    # for paged keys (block_table), whose k is a page pool
    if options.get("block_table") is not None:
        return out, lse, None
    return out, lse, importlib.import_module("._probs", __name__).attn_probs(q, k, lse, **options)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, seed=None, offset=0,
                    backend=None, learnable_sink=None):
    """Attention of q [batch, seqlen_q, heads, d] over k, v [batch, seqlen_k, heads_kv, d].
    softmax_scale None: 1 / sqrt(d). causal: bottom-right aligned when seqlen_q != seqlen_k.
    window_size (left, right), -1 unbounded. softcap c > 0: scores become c tanh(s / c);
    alibi_slopes [heads] or [batch, heads] float32: scores minus slope * |i + seqlen_k - seqlen_q - j|.
    Keyword-only: seed, offset (dropout's Philox stream), backend (where NumPy arrays run),
    learnable_sink (FlashAttention-4's name; gpt-oss): [heads] logits, one per query head, that join
    every row's softmax and carry no value (out = sum_j P_ij v_j with P_ij = exp(S_ij - LSE_i),
    LSE_i = log(sum_j exp(S_ij) + exp(sink_h)), the sink in the units of the modified scores: no
    scale, softcap or ALiBi applied to it); float32, or any float dtype / Python numbers, converted
    to float32 in q's memory; with torch autograd its gradient flows back to it (in its dtype).
    v's last dim d_v may differ from d (DeepSeek's MLA: 192 / 128): out is [batch, seqlen_q,
    heads, d_v]. Returns out, or (out, softmax_lse [batch, heads, seqlen_q] float32, S_dmask
    [batch, heads, seqlen_q, seqlen_k]: the probabilities, dropped entries negated, computed on the
    host) with return_attn_probs."""
    _check_arrays(q=q, k=k, v=v)
    return _attention(q, k, v, return_attn_probs, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, seed=seed, offset=offset, backend=backend,
                      learnable_sink=learnable_sink)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             seed=None, offset=0, backend=None, learnable_sink=None):
    """flash_attn_func with kv [batch, seqlen_k, 2, heads_kv, d] (packing makes d_v = d)."""
    _check_arrays(q=q, kv=kv)
    k, v = _unpack(kv, 2, "kv", "[batch, seqlen_k, 2, heads_kv, d]")
    return _attention(q, k, v, return_attn_probs, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, seed=seed, offset=offset, backend=backend,
                      learnable_sink=learnable_sink, packed=(kv, 2))


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                              seed=None, offset=0, backend=None, learnable_sink=None):
    """flash_attn_func with qkv [batch, seqlen, 3, heads, d] (packing makes d_v = d)."""
    _check_arrays(qkv=qkv)
    q, k, v = _unpack(qkv, 2, "qkv", "[batch, seqlen, 3, heads, d]")
    return _attention(q, k, v, return_attn_probs, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, seed=seed, offset=offset, backend=backend,
                      learnable_sink=learnable_sink, packed=(qkv, 2))


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *, seed=None, offset=0,
                           backend=None, learnable_sink=None):
    """Packed variable-length batches: q [total_q, heads, d], k, v [total_k, heads_kv, d],
    cu_seqlens int32 [batch + 1]; softmax_lse [heads, total_q]. cu_seqlens[-1] may be below the
    packed rows (padding at the end): those rows get out = 0 and softmax_lse = -inf (and zero
    gradients), where FlashAttention-2 leaves them undefined. ALiBi's distance is within each
    sequence. block_table int32 [batch, max_pages] (FlashAttention-2's paged keys and values, as
    vLLM's chunked prefill uses them): k, v are then caches [num_pages, page_size, heads_kv, d]
    (any page_size >= 1) and cu_seqlens_k counts each sequence's keys; key j of sequence b is row
    j % page_size of page block_table[b, j // page_size]. Forward only: a backward through it
    raises (torch), as FlashAttention-2 offers none. learnable_sink and v's d_v as in
    flash_attn_func (out [total_q, heads, d_v])."""
    _check_arrays(q=q, k=k, v=v)
    options = {} if block_table is None else {"block_table": block_table}
    return _attention(q, k, v, return_attn_probs, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, seed=seed, offset=offset, backend=backend,
                      learnable_sink=learnable_sink,
                      cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                      max_seqlen_k=max_seqlen_k, **options)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, seed=None,
                                    offset=0, backend=None, learnable_sink=None):
    """flash_attn_varlen_func with kv [total_k, 2, heads_kv, d] (packing makes d_v = d)."""
    _check_arrays(q=q, kv=kv)
    k, v = _unpack(kv, 1, "kv", "[total_k, 2, heads_kv, d]")
    return _attention(q, k, v, return_attn_probs, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, seed=seed, offset=offset, backend=backend,
                      learnable_sink=learnable_sink, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                      max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, packed=(kv, 1))


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False, *, seed=None, offset=0, backend=None,
                                     learnable_sink=None):
    """flash_attn_varlen_func with qkv [total, 3, heads, d] and one cu_seqlens (packing makes d_v = d)."""
    _check_arrays(qkv=qkv)
    q, k, v = _unpack(qkv, 1, "qkv", "[total, 3, heads, d]")
    return _attention(q, k, v, return_attn_probs, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, seed=seed, offset=offset, backend=backend,
                      learnable_sink=learnable_sink, cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens,
                      max_seqlen_q=max_seqlen, max_seqlen_k=max_seqlen, packed=(qkv, 1))


def block_sparse_attn_func(q, k, v, block_mask, block_size, dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, *, seed=None, offset=0, backend=None, learnable_sink=None):
    """flash_attn_func restricted to a block mask: block_mask [rows, cols] or [heads, rows, cols]
    (nonzero: query block r may attend key block c; one mask for every head or one per query
    head), block_size (block_q, block_k). Empty blocks are skipped, so the cost follows the
    density. Intersects causal and window masks. The options after block_size in flash_attn_func's
    order."""
    _check_arrays(q=q, k=k, v=v)
    return _attention(q, k, v, return_attn_probs, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                      window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      deterministic=deterministic, seed=seed, offset=offset, backend=backend,
                      block_mask=block_mask, block_size=block_size, learnable_sink=learnable_sink)


def flash_attn_backward(dout, q, k, v, out, softmax_lse, dropout_p=0.0, softmax_scale=None, causal=False,
                        window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False, *, seed=None,
                        offset=0, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                        block_mask=None, block_size=None, backend=None, learnable_sink=None):
    """dQ, dK, dV for the output gradient dout, from the forward's out and softmax_lse and the same
    options, in flash_attn_func's order (dropout: the same seed and offset; varlen and block masks
    by keyword). For NumPy and other arrays, and for torch without autograd. With learnable_sink
    (the forward's): dQ, dK, dV, dsink, dsink float32 [heads] (summed over the batch and rows)."""
    _check_arrays(dout=dout, q=q, k=k, v=v, out=out, softmax_lse=softmax_lse)
    _core.check_options(dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                        seed=seed, offset=offset, backend=backend)
    call = _core.Call(q, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                      deterministic=deterministic, seed=seed, offset=offset, cu_seqlens_q=cu_seqlens_q,
                      cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                      block_mask=block_mask, block_size=block_size, softcap=softcap, alibi_slopes=alibi_slopes,
                      backend=backend, learnable_sink=learnable_sink)
    return _core.backward(call, dout, q, k, v, out, softmax_lse)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False, *,
                            check_on_device=False, backend=None, learnable_sink=None):
    """Attention of q [batch, seqlen_new, heads, d] over a KV cache, FlashAttention-2's signature:
    k_cache / v_cache [batch_cache, seqlen_cache, heads_kv, d], or [num_pages, page_size, heads_kv, d]
    with block_table [batch, max_pages] (int32); cache_seqlens (int or [batch]) tokens in each
    sequence's cache; k / v [batch, seqlen_knew, heads_kv, d] written into the cache at cache_seqlens in
    place before the attention; rotary_cos / rotary_sin [seqlen_ro, rotary_dim / 2] rotate q and k
    (interleaved or halves); causal / window_size aligned bottom-right against the cache after
    appending; cache_leftpad (int32 [batch], contiguous caches only) where each sequence's keys start in
    its cache row: it attends to positions cache_leftpad[b] .. cache_seqlens[b] + seqlen_knew - 1, masks
    aligned against that count, rotary positions unchanged (as FA2). Forward only (inference): no
    autograd. Returns out, or (out, softmax_lse [batch, heads, seqlen_new]) with return_softmax_lse. The
    library: fa_forward_kvcache (arrays placed as flash_attn_func's: NumPy caches on a device backend
    are copied there and, with k / v, back whole). On torch tensors it is the custom operator
    flashattn::fwd_kvcache, which torch.compile traces. Keyword-only, beyond FA2's signature: backend
    (NumPy arrays), check_on_device=True: on CUDA the int32 arrays' values are checked by the GPU
    instead of copied to the host, so the call does not wait for the GPU (and can be captured in a CUDA
    graph); a bad value makes that call and the ones after it write nothing until
    flashattn.synchronize(tensor) raises it. Elsewhere it is checked at once, as without the flag.
    learnable_sink: [heads] sink logits as in flash_attn_func. v_cache's last dim sets d_v (k_cache,
    q and k have d, v and out d_v: MLA's absorbed decode takes 576 / 512 where the backend can)."""
    arrays = dict(q=q, k_cache=k_cache, v_cache=v_cache)
    arrays.update({n: x for n, x in (("k", k), ("v", v), ("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin))
                   if x is not None})
    _check_arrays(**arrays)
    _core.check_options(softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                        alibi_slopes=alibi_slopes, backend=backend)
    _core._flag(return_softmax_lse, "return_softmax_lse")
    options = dict(k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin, cache_seqlens=cache_seqlens,
                   cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad, block_table=block_table,
                   softmax_scale=softmax_scale,
                   causal=causal, window_size=window_size, softcap=softcap, rotary_interleaved=rotary_interleaved,
                   alibi_slopes=alibi_slopes, num_splits=num_splits, check_on_device=check_on_device,
                   learnable_sink=learnable_sink)
    if _torch is not None and _core._is_torch(q):
        # torch tensors through the custom operator (torch.compile traces it; the caches are
        # declared mutated); they run on their device's backend
        _core.check_torch_backend(q, backend)
        out, lse = _torch.kvcache(q, k_cache, v_cache, **options)
    else:
        out, lse = _core.kvcache_forward(q, k_cache, v_cache, backend=backend, **options)
    return (out, lse) if return_softmax_lse else out
