"""_torch.py: the dense attention call as torch.library custom operators (flashattn::fwd and
flashattn::bwd, with fake implementations for tracing and autograd registered between them), so
torch.compile traces through flash_attn_func without graph breaks. Loaded by the package when
torch is importable; varlen and block-sparse calls use the autograd.Function in __init__.py
instead (a graph break under torch.compile)."""
from typing import Tuple

import torch

from . import _core

Tensor = torch.Tensor


def _call(q, dropout_p, softmax_scale, causal, window_left, window_right, deterministic, seed, offset):
    return _core.Call(q, dropout_p=dropout_p, softmax_scale=softmax_scale if softmax_scale > 0.0 else None,
                      causal=causal, window_size=(window_left, window_right), deterministic=deterministic,
                      seed=seed if dropout_p > 0.0 else None, offset=offset)


@torch.library.custom_op("flashattn::fwd", mutates_args=())
def fwd(q: Tensor, k: Tensor, v: Tensor, dropout_p: float, softmax_scale: float, causal: bool, window_left: int,
        window_right: int, deterministic: bool, seed: int, offset: int) -> Tuple[Tensor, Tensor]:
    call = _call(q, dropout_p, softmax_scale, causal, window_left, window_right, deterministic, seed, offset)
    return _core.forward(call, q, k, v)


@fwd.register_fake
def _(q, k, v, dropout_p, softmax_scale, causal, window_left, window_right, deterministic, seed, offset):
    return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
            torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device))


@torch.library.custom_op("flashattn::bwd", mutates_args=())
def bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, dropout_p: float,
        softmax_scale: float, causal: bool, window_left: int, window_right: int, deterministic: bool, seed: int,
        offset: int) -> Tuple[Tensor, Tensor, Tensor]:
    call = _call(q, dropout_p, softmax_scale, causal, window_left, window_right, deterministic, seed, offset)
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    return _core.backward(call, dout, q, k, v, out, lse)


@bwd.register_fake
def _(dout, q, k, v, out, lse, dropout_p, softmax_scale, causal, window_left, window_right, deterministic, seed,
      offset):
    return tuple(torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (q, k, v))


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.options = inputs[3:]


def _backward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = bwd(dout, q, k, v, out, lse, *ctx.options)
    return (dq, dk, dv) + (None,) * len(ctx.options)


fwd.register_autograd(_backward, setup_context=_setup_context)


def attention(q, k, v, dropout_p, softmax_scale, causal, window_size, deterministic, seed, offset):
    """out, lse of the dense call through the custom operator."""
    return fwd(q, k, v, float(dropout_p), float(softmax_scale) if softmax_scale is not None else 0.0, bool(causal),
               int(window_size[0]), int(window_size[1]), bool(deterministic), int(seed) if seed is not None else 0,
               int(offset))
