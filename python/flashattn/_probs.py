"""_probs.py: the attention probabilities that return_attn_probs=True returns (FlashAttention-2's
S_dmask, which FA2 documents as for testing only): recomputed on the host after the call, in
float64, from q, k, the options and the LSE the library returned, as P = exp(S' - LSE) where S' is
the scaled score with the score modifiers the library applies (softcap, then ALiBi) and 0 where
the mask (causal, window) hides the key; entries that dropout dropped are negated, their bits from
the library's one Philox definition (fa_dropout_keep_mask). Not traced by torch.compile."""
import ctypes as C
import math

from . import _capi
from ._convert import _is_torch


def _host(a):
    """a as a float64 NumPy array (torch tensors detached and copied to the host)."""
    import numpy as np
    if _is_torch(a):
        a = a.detach().to("cpu").float().numpy()
    elif hasattr(a, "numpy") and not isinstance(a, np.ndarray):  # a DeviceArray
        a = a.numpy()
    elif not isinstance(a, np.ndarray) and hasattr(a, "__dlpack__"):  # another library's host array
        from ._core import Foreign
        a = Foreign(a, "array").host_array()
    return np.asarray(a, dtype=np.float64)


def dropout_keep_mask(seed, offset, p, batch, heads, rows, cols):
    """[batch, heads, rows, cols] bool: the elements dropout keeps (fa_dropout_keep_mask)."""
    import numpy as np
    L = _capi.lib()
    f = L.fa_dropout_keep_mask
    f.restype = C.c_int
    f.argtypes = [C.c_uint64, C.c_uint64, C.c_float, C.c_int64, C.c_int64, C.c_int64, C.c_int64, C.c_void_p]
    keep = np.zeros((batch, heads, rows, cols), dtype=np.uint8)
    st = f(seed, offset, p, batch, heads, rows, cols, keep.ctypes.data)
    if st != 0:
        raise _capi.FlashAttnError(st, f"fa_dropout_keep_mask: {_capi.contextless_error(st)}")
    return keep.astype(bool)


def _visible(sq, sk, causal, window):
    """[sq, sk] bool: bottom-right aligned causal and window masks (the library's rule)."""
    import numpy as np
    i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
    off = sk - sq
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    ok = np.ones((sq, sk), dtype=bool)
    if left >= 0:
        ok &= j >= i + off - left
    if right >= 0:
        ok &= j <= i + off + right
    return ok


def attn_probs(q, k, lse, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
               alibi_slopes=None, seed=None, offset=0, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
               max_seqlen_k=None, block_mask=None, **unused):
    """S_dmask [batch, heads, seqlen_q, seqlen_k] (varlen: [batch, heads, max_seqlen_q,
    max_seqlen_k], zero outside each sequence) in q's dtype and kind (a torch tensor on q's
    device, else NumPy); None for block-sparse calls."""
    import numpy as np
    if block_mask is not None:
        return None
    qh, kh, lh = _host(q), _host(k), _host(lse)
    varlen = cu_seqlens_q is not None
    if varlen:
        cq = _host(cu_seqlens_q).astype(np.int64)
        ck = _host(cu_seqlens_k).astype(np.int64)
        batch, rows, cols = len(cq) - 1, int(max_seqlen_q), int(max_seqlen_k)
        seqs = [(qh[cq[b]:cq[b + 1]], kh[ck[b]:ck[b + 1]], lh[:, cq[b]:cq[b + 1]]) for b in range(batch)]
    else:
        batch, rows, cols = qh.shape[0], qh.shape[1], kh.shape[1]
        seqs = [(qh[b], kh[b], lh[b]) for b in range(batch)]
    heads, d = qh.shape[-2], qh.shape[-1]
    group = heads // kh.shape[-2]
    # the float32 values the library computes with
    scale = float(np.float32(softmax_scale if softmax_scale else 1.0 / math.sqrt(d)))
    cap = float(np.float32(softcap))
    slopes = None if alibi_slopes is None else _host(alibi_slopes).astype(np.float32).astype(np.float64)
    p = float(np.float32(dropout_p))
    keep = dropout_keep_mask(seed or 0, offset, p, batch, heads, rows, cols) if p > 0 else None
    out = np.zeros((batch, heads, rows, cols))
    for b, (qb, kb, lb) in enumerate(seqs):
        sq, sk = qb.shape[0], kb.shape[0]
        s = np.einsum("ihd,jhd->hij", qb, np.repeat(kb, group, axis=1)) * scale
        if cap > 0:
            s = cap * np.tanh(s / cap)
        if slopes is not None:
            sl = slopes if slopes.ndim == 1 else slopes[b]
            i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
            s = s - sl[:, None, None] * np.abs(i + sk - sq - j)
        vis = _visible(sq, sk, causal, window_size)
        with np.errstate(invalid="ignore", over="ignore"):
            pb = np.where(vis & np.isfinite(lb)[:, :, None], np.exp(s - lb[:, :, None]), 0.0)
        if keep is not None:
            pb = np.where(keep[b, :, :sq, :sk], pb, -pb)
        out[b, :, :sq, :sk] = pb
    if _is_torch(q):
        import torch
        return torch.from_numpy(out).to(device=q.device, dtype=q.dtype)
    return out.astype(q.dtype if isinstance(q, np.ndarray) else np.float32)
