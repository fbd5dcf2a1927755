"""_torch.py: attention on torch tensors as torch.library custom operators (flashattn::fwd and
flashattn::bwd, with fake implementations for tracing and autograd registered between them, and
flashattn::fwd_kvcache, which writes the new keys and values into the caches it is given), so
torch.compile traces through every function of the package (dense, varlen, block-sparse, KV cache)
without graph breaks. The learnable sink is the operators' last input (float32 [heads] or None);
flashattn::bwd returns its gradient as a fourth output, an empty [0] tensor when there is no sink
(an operator cannot return None). Loaded by the package when torch is importable."""
from typing import Optional, Tuple

import torch

from . import _core

Tensor = torch.Tensor


def _call(q, cu_q, cu_k, max_q, max_k, block_mask, block_q, block_k, dropout_p, softmax_scale, causal, window_left,
          window_right, deterministic, seed, offset, softcap, alibi_slopes, block_table=None, learnable_sink=None):
    return _core.Call(q, dropout_p=dropout_p, softmax_scale=softmax_scale if softmax_scale != 0.0 else None,
                      causal=causal, window_size=(window_left, window_right), deterministic=deterministic,
                      seed=_from_int64(seed) if dropout_p > 0.0 else None, offset=_from_int64(offset),
                      block_mask=block_mask,
                      block_size=(block_q, block_k) if block_mask is not None else None, cu_seqlens_q=cu_q,
                      cu_seqlens_k=cu_k, max_seqlen_q=max_q if cu_q is not None else None,
                      max_seqlen_k=max_k if cu_k is not None else None, softcap=softcap, alibi_slopes=alibi_slopes,
                      block_table=block_table, learnable_sink=learnable_sink)


def _forward(q, k, v, cu_q, cu_k, max_q, max_k, block_mask, block_q, block_k, dropout_p, softmax_scale, causal,
             window_left, window_right, deterministic, seed, offset, softcap, alibi_slopes, block_table,
             learnable_sink):
    """out, lse: the body of flashattn::fwd and of the eager path (_EagerAttention)."""
    call = _call(q, cu_q, cu_k, max_q, max_k, block_mask, block_q, block_k, dropout_p, softmax_scale, causal,
                 window_left, window_right, deterministic, seed, offset, softcap, alibi_slopes, block_table,
                 learnable_sink)
    return _core.forward(call, q, k, v)


def _backward_grads(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, block_mask, block_q, block_k, dropout_p,
                    softmax_scale, causal, window_left, window_right, deterministic, seed, offset, softcap,
                    alibi_slopes, learnable_sink, into=None):
    """dq, dk, dv, dsink (empty [0] without a sink): the body of flashattn::bwd and of the eager
    paths' backward; into: dq, dk, dv to write (views of a packed gradient), else new tensors."""
    call = _call(q, cu_q, cu_k, max_q, max_k, block_mask, block_q, block_k, dropout_p, softmax_scale, causal,
                 window_left, window_right, deterministic, seed, offset, softcap, alibi_slopes,
                 learnable_sink=learnable_sink)
    dout = _core.maybe_contiguous(dout)
    grads = _core.backward(call, dout, q, k, v, out, lse, into=into)
    return grads if learnable_sink is not None else grads + (q.new_empty((0,), dtype=torch.float32),)


@torch.library.custom_op("flashattn::fwd", mutates_args=())
def fwd(q: Tensor, k: Tensor, v: Tensor, cu_q: Optional[Tensor], cu_k: Optional[Tensor], max_q: int, max_k: int,
        block_mask: Optional[Tensor], block_q: int, block_k: int, dropout_p: float, softmax_scale: float, causal: bool,
        window_left: int, window_right: int, deterministic: bool, seed: int, offset: int, softcap: float,
        alibi_slopes: Optional[Tensor], block_table: Optional[Tensor],
        learnable_sink: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    return _forward(q, k, v, cu_q, cu_k, max_q, max_k, block_mask, block_q, block_k, dropout_p, softmax_scale,
                    causal, window_left, window_right, deterministic, seed, offset, softcap, alibi_slopes, block_table,
                    learnable_sink)


@fwd.register_fake
def _(q, k, v, cu_q, cu_k, max_q, max_k, *options):
    # O: q's shape with V's head dim d_v; LSE dense [batch, heads, seqlen_q], varlen [heads, total_q]
    lse = (q.shape[1], q.shape[0]) if cu_q is not None else (q.shape[0], q.shape[2], q.shape[1])
    return q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],)), q.new_empty(lse, dtype=torch.float32)


@torch.library.custom_op("flashattn::bwd", mutates_args=())
def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, cu_q: Optional[Tensor],
        cu_k: Optional[Tensor], max_q: int, max_k: int, block_mask: Optional[Tensor], block_q: int, block_k: int,
        dropout_p: float, softmax_scale: float, causal: bool, window_left: int, window_right: int,
        deterministic: bool, seed: int, offset: int, softcap: float, alibi_slopes: Optional[Tensor],
        learnable_sink: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    return _backward_grads(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, block_mask, block_q, block_k,
                           dropout_p, softmax_scale, causal, window_left, window_right, deterministic, seed, offset,
                           softcap, alibi_slopes, learnable_sink)


@bwd.register_fake
def _(dout, q, k, v, out, lse, *options):
    sink = options[-1]
    dsink = q.new_empty((0,) if sink is None else tuple(sink.shape), dtype=torch.float32)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dsink


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.options = inputs[3:]


def _no_paged_backward(options):
    """The options bwd takes (all but the block table, the one before the sink); a block table
    raises: the library has no backward over paged keys and values (FlashAttention-2 neither)."""
    if options[-2] is not None:
        raise RuntimeError("flash_attn_varlen_func: no backward with block_table (paged keys and values), as in "
                           "FlashAttention-2; run the forward under torch.no_grad() or on packed k / v")
    return options[:-2] + options[-1:]


def _input_grads(options, dq, dk, dv, dsink):
    """One gradient per input of fwd: q, k, v, then None for every option but the sink (the last)."""
    return (dq, dk, dv) + (None,) * (len(options) - 1) + (dsink if options[-1] is not None else None,)


def _backward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    return _input_grads(ctx.options, *bwd(dout, q, k, v, out, lse, *_no_paged_backward(ctx.options)))


fwd.register_autograd(_backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """flashattn::fwd with its autograd formula, for eager calls on plain tensors. The operator's
    first call goes through torch's Python dispatcher, which imports torch._dynamo, sympy and more
    (seconds of start-up, bench/cold_start.py measures it); this path calls the same bodies
    directly, so its results are the operator's."""

    @staticmethod
    def forward(ctx, q, k, v, *options):
        out, lse = _forward(q, k, v, *options)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = options
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        return _input_grads(ctx.options, *_backward_grads(dout, q, k, v, out, lse, *_no_paged_backward(ctx.options)))


class _EagerPackedAttention(torch.autograd.Function):
    """_EagerAttention on qkv or kv packed along one dimension (FlashAttention-2's
    FlashAttnQKVPackedFunc): the backward writes dQ, dK, dV (or dK, dV) into one gradient of the
    packed tensor, where autograd through the slices would build a tensor of the packed shape for
    each and sum them (several full-size writes per call in a training step). q: None when packed
    holds it (qkv), else the separate query (kv)."""

    @staticmethod
    def forward(ctx, q, packed, dim, *options):
        views = packed.unbind(dim)
        out, lse = _forward(*(views if q is None else (q,) + views), *options)
        ctx.save_for_backward(q, packed, out, lse)
        ctx.dim, ctx.options = dim, options
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, packed, out, lse = ctx.saved_tensors
        options = ctx.options
        # varlen rows after cu_seqlens[-1] get zero gradients (_core._outputs_like), dense ones are
        # all written by the library
        dpacked = torch.zeros_like(packed) if options[0] is not None else torch.empty_like(packed)
        into = dpacked.unbind(ctx.dim)
        if q is not None:
            into = (torch.zeros_like(q) if options[0] is not None else torch.empty_like(q),) + into
        views = packed.unbind(ctx.dim)
        inputs = views if q is None else (q,) + views
        grads = _backward_grads(dout, *inputs, out, lse, *_no_paged_backward(options), into=into)
        dsink = grads[3] if options[-1] is not None else None
        return (None if q is None else grads[0], dpacked, None) + (None,) * (len(options) - 1) + (dsink,)


def _eager(*tensors):
    """Whether a call may bypass the operator: plain tensors (not fake, functional or other
    subclasses that tracing uses) outside torch.compile."""
    return all(type(t) is Tensor for t in tensors) and not torch.compiler.is_compiling()


def _as_tensor(x, ref, dtype):
    """x as a tensor of dtype; int32 values go through _core's checks (no silent cast), on ref's device."""
    if x is None:
        return x
    if dtype == torch.int32:
        return _core._int32_on(ref, x, "int32 array")
    if isinstance(x, Tensor):
        return x
    return torch.as_tensor(x, dtype=dtype, device="cpu")


def _sink_tensor(learnable_sink, q):
    """The sink logits as the operators take them: float32 on q's device, [heads] (checked here,
    where an operator's fake cannot); a tensor of another dtype or device is converted by
    differentiable torch ops, so its gradient comes back in its own dtype."""
    if learnable_sink is None:
        return None
    if not isinstance(learnable_sink, Tensor):
        if isinstance(learnable_sink, (int, float, str, bytes)):
            raise TypeError(f"learnable_sink must be {_core._sink.ACCEPTS}, got {type(learnable_sink).__name__}")
        learnable_sink = torch.as_tensor(learnable_sink, dtype=torch.float32)
    if not learnable_sink.is_floating_point():
        raise TypeError(f"learnable_sink must be {_core._sink.ACCEPTS}, got dtype {learnable_sink.dtype}")
    if learnable_sink.dim() != 1 or learnable_sink.shape[0] != q.shape[-2]:
        raise ValueError(f"learnable_sink must be [heads] = ({q.shape[-2]},), one logit per query head, got shape "
                         f"{tuple(learnable_sink.shape)}")
    return learnable_sink.to(device=q.device, dtype=torch.float32).contiguous()


def _float(v):
    """v for a float argument of an operator: a SymFloat (torch.compile(dynamic=True)) stays
    symbolic, float() would force a concrete value out of it while tracing."""
    return v if _core.symbolic(v) else float(v)


def _to_int64(v):
    """A uint64 value in the operator's int64 (two's complement); _from_int64 restores it."""
    return v - 2 ** 64 if v >= 2 ** 63 else v


def _from_int64(v):
    return v + 2 ** 64 if v < 0 else v


def attention(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), deterministic=False,
              seed=None, offset=0, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
              block_mask=None, block_size=None, softcap=0.0, alibi_slopes=None, block_table=None,
              learnable_sink=None, packed=None):
    """out, lse through the custom operator (the options of _core.Call). packed: (tensor, dim) when
    q, k, v (qkv) or k, v (kv) are tensor.unbind(dim): eager calls then take the packed path."""
    # a copy only where the last stride is not 1 (FlashAttention-2's maybe_contiguous), before the
    # operator, so that autograd saves the copies and the backward does not make them again
    q, k, v = (_core.maybe_contiguous(x) for x in (q, k, v))
    if block_mask is not None and block_size is None:
        raise ValueError("block_mask needs block_size=(block_q, block_k)")
    if softmax_scale is not None:  # the operator takes 0 for None: check a given one here
        _core.check_scale(softmax_scale)
    if alibi_slopes is not None and not isinstance(alibi_slopes, Tensor):
        alibi_slopes = torch.as_tensor(alibi_slopes, dtype=torch.float32, device=q.device)
    bq, bk = _core._pair(block_size, "block_size") if block_mask is not None else (0, 0)
    window = _core._pair(window_size, "window_size")
    max_q = _core.c_integer(max_seqlen_q, "max_seqlen_q", "int64") if max_seqlen_q is not None else 0
    max_k = _core.c_integer(max_seqlen_k, "max_seqlen_k", "int64") if max_seqlen_k is not None else 0
    # the operator's int is int64: a seed above 2^63 travels as its two's complement, restored in _call
    seed = _core.c_integer(seed, "seed", "uint64") if seed is not None else 0
    offset = _core.c_integer(offset, "offset", "uint64")
    args = (q, k, v, _as_tensor(cu_seqlens_q, q, torch.int32), _as_tensor(cu_seqlens_k, q, torch.int32), max_q, max_k,
            _as_tensor(block_mask, q, torch.uint8), bq, bk, _float(dropout_p),
            _float(softmax_scale) if softmax_scale is not None else 0.0, bool(causal), window[0], window[1],
            bool(deterministic), _to_int64(seed), _to_int64(offset), _core.check_softcap(softcap), alibi_slopes,
            _as_tensor(block_table, q, torch.int32), _sink_tensor(learnable_sink, q))
    # a sink that is an nn.Parameter (what a model trains) is a plain tensor for this purpose
    if _eager(q, k, v) and (learnable_sink is None or type(args[-1]) in (Tensor, torch.nn.Parameter)):
        if packed is not None and _eager(packed[0]) and packed[0].stride(-1) == 1:
            # the views' last stride is the packed tensor's: maybe_contiguous left them as they are
            whole, dim = packed
            q_alone = None if whole.shape[dim] == 3 else q
            return _EagerPackedAttention.apply(q_alone, whole, dim, *args[3:])
        return _EagerAttention.apply(*args)
    return fwd(*args)


@torch.library.custom_op("flashattn::fwd_kvcache", mutates_args=("k_cache", "v_cache"))
def fwd_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor], v: Optional[Tensor],
                rotary_cos: Optional[Tensor], rotary_sin: Optional[Tensor], cache_seqlens: Optional[Tensor],
                cache_batch_idx: Optional[Tensor], cache_leftpad: Optional[Tensor], block_table: Optional[Tensor],
                softmax_scale: float, causal: bool, window_left: int, window_right: int, softcap: float,
                rotary_interleaved: bool, alibi_slopes: Optional[Tensor], num_splits: int,
                check_on_device: bool, learnable_sink: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """out, lse of q over the caches; k / v (when given) written into k_cache / v_cache in place at
    cache_seqlens first, which is why both caches are declared mutated even when k is None."""
    return _core.kvcache_forward(q, k_cache, v_cache, k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                                 cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                                 cache_leftpad=cache_leftpad, block_table=block_table,
                                 softmax_scale=softmax_scale if softmax_scale != 0.0 else None, causal=causal,
                                 window_size=(window_left, window_right), softcap=softcap,
                                 rotary_interleaved=rotary_interleaved, alibi_slopes=alibi_slopes,
                                 num_splits=num_splits, check_on_device=check_on_device,
                                 learnable_sink=learnable_sink)


@fwd_kvcache.register_fake
def _(q, k_cache, v_cache, *options):
    # O: q's shape with the value cache's head dim d_v
    return (q.new_empty(tuple(q.shape[:-1]) + (v_cache.shape[-1],)),
            q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32))


def kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
            cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None, causal=False,
            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0,
            check_on_device=False, learnable_sink=None):
    """out, lse through the custom operator (the arguments of _core.kvcache_forward); an int
    cache_seqlens becomes one int32 entry per sequence, int arrays become int32 tensors on q's device."""
    if softmax_scale is not None:  # the operator takes 0 for None: check a given one here
        _core.check_scale(softmax_scale)
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        cache_seqlens = torch.full((q.shape[0],), _core.c_integer(cache_seqlens, "cache_seqlens", "int32"),
                                   dtype=torch.int32, device=q.device)
    if alibi_slopes is not None and not isinstance(alibi_slopes, Tensor):
        alibi_slopes = torch.as_tensor(alibi_slopes, dtype=torch.float32, device=q.device)
    learnable_sink = _sink_tensor(learnable_sink, q)
    if type(q) is Tensor and type(k_cache) is Tensor and not torch.compiler.is_compiling():
        # eager, plain tensors: the library directly, without the operator's Python dispatch (some
        # 75 us per call, more than a decode step's GPU work at small batches); the operator does
        # exactly this, so the results are the same. Tracing (torch.compile, fake or functional
        # tensors) goes through the operator.
        return _core.kvcache_forward(q, k_cache, v_cache, k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                                     cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                                     cache_leftpad=cache_leftpad, block_table=block_table,
                                     softmax_scale=softmax_scale, causal=causal,
                                     window_size=window_size, softcap=_core.check_softcap(softcap),
                                     rotary_interleaved=rotary_interleaved, alibi_slopes=alibi_slopes,
                                     num_splits=num_splits, check_on_device=check_on_device,
                                     learnable_sink=learnable_sink)
    window = _core._pair(window_size, "window_size")
    return fwd_kvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, _as_tensor(cache_seqlens, q, torch.int32),
                       _as_tensor(cache_batch_idx, q, torch.int32), _as_tensor(cache_leftpad, q, torch.int32),
                       _as_tensor(block_table, q, torch.int32),
                       _float(softmax_scale) if softmax_scale is not None else 0.0, bool(causal), window[0], window[1],
                       _core.check_softcap(softcap), bool(rotary_interleaved), alibi_slopes,
                       _core.c_integer(num_splits, "num_splits", "int32"), bool(check_on_device), learnable_sink)
