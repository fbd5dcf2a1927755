"""_sink.py: the learnable attention sink (FlashAttention-4's learnable_sink, gpt-oss) for _core's
calls: the logits checked and placed where the call reads them, and the buffer the backward writes
their gradient into. One logit per query head joins every row's softmax and carries no value:
LSE_i = log(sum_j exp(S_ij) + exp(sink_h)) in the units of the modified scores (no scale,
softcap or ALiBi applied to it); dsink_h = -sum over batch and rows of exp(sink_h - LSE_i) D_i,
D_i = sum_c dO_ic O_ic (include/flashattn.h)."""
import numbers

ACCEPTS = ("an array of one float32 logit per query head, [heads] (float16, bfloat16, float64 and Python "
           "numbers are converted to float32)")


def take(q, heads, learnable_sink):
    """learnable_sink as a contiguous float32 array of `heads` values in q's memory: a torch
    tensor on q's device for torch, another library's GPU array as it is, else a NumPy array
    (copied to a device context at the call). The library reads it through a bare pointer, so
    its length is checked here."""
    from . import _core
    if isinstance(learnable_sink, (numbers.Number, str, bytes)) or type(learnable_sink).__name__ == "bool_":
        raise TypeError(f"learnable_sink must be {ACCEPTS}, got {type(learnable_sink).__name__}")
    sink = _core._float32_on(q, learnable_sink, "learnable_sink")
    if tuple(sink.shape) != (heads,):
        raise ValueError(f"learnable_sink must be [heads] = ({heads},), one logit per query head, got shape "
                         f"{tuple(sink.shape)}")
    return sink


def gradient_buffer(q, heads, ctx, view):
    """The float32 [heads] array of q's kind and device that fa_backward writes dsink into."""
    from . import _core
    return _core._empty_like(q, (heads,), "float32", ctx=ctx, view=view)
