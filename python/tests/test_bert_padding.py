"""flashattn.bert_padding (FlashAttention-2's helpers) on NumPy arrays and torch tensors: the
round trip, gradients through the index operations, and flash_attn_varlen_func on unpadded rows
against float64 attention over each sequence's tokens alone (the padding masked), with the pass
rule of the rest of the suite (2x the error of a plain fp32 NumPy implementation)."""
import numpy as np
import pytest

import flashattn as fa
import reference as ref
from flashattn.bert_padding import index_first_axis, index_put_first_axis, pad_input, unpad_input

try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed: the tensor cases are not run")


def padded_batch(seed, batch=3, seqlen=20, heads=2, d=16):
    """q, k, v [batch, seqlen, heads, d] float32 and a mask with tokens at scattered positions
    (so that the indices, not only the lengths, matter), one sequence empty"""
    rng = np.random.default_rng(seed)
    mask = rng.random((batch, seqlen)) < 0.6
    mask[0, :] = True
    mask[-1, :] = False
    q, k, v = (rng.standard_normal((batch, seqlen, heads, d)).astype(np.float32) for _ in range(3))
    return q, k, v, mask


def test_round_trip_numpy():
    q, _, _, mask = padded_batch(1)
    extra = np.zeros_like(mask)
    extra[1, ~mask[1]] = True  # every padding slot of sequence 1 kept as unused
    x_unpad, indices, cu, max_seqlen, seqused = unpad_input(q, mask)
    assert x_unpad.shape == (mask.sum(),) + q.shape[2:] and cu.dtype == np.int32 and seqused.dtype == np.int32
    np.testing.assert_array_equal(cu, np.concatenate([[0], np.cumsum(mask.sum(1))]))
    assert max_seqlen == mask.sum(1).max() and isinstance(max_seqlen, int)
    np.testing.assert_array_equal(pad_input(x_unpad, indices, *mask.shape), q * mask[:, :, None, None])
    x2, _, cu2, max2, used2 = unpad_input(q, mask, extra)
    np.testing.assert_array_equal(used2, mask.sum(1))
    np.testing.assert_array_equal(np.diff(cu2), (mask | extra).sum(1))
    assert max2 == q.shape[1] and len(x2) == (mask | extra).sum()


@needs_torch
def test_round_trip_and_gradients_torch():
    q, _, _, mask = padded_batch(2)
    x = torch.from_numpy(q).double().requires_grad_()
    m = torch.from_numpy(mask)
    x_unpad, indices, cu, max_seqlen, seqused = unpad_input(x, m)
    np.testing.assert_array_equal(cu.numpy(), unpad_input(q, mask)[2])
    assert cu.dtype == torch.int32 and seqused.dtype == torch.int32 and isinstance(max_seqlen, int)
    back = pad_input(x_unpad, indices, *mask.shape)
    torch.testing.assert_close(back, x * m[:, :, None, None], rtol=0, atol=0)
    flat = x.reshape(-1, *x.shape[2:])
    assert torch.autograd.gradcheck(lambda t: index_first_axis(t, indices), (flat,))
    vals = x_unpad.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: index_put_first_axis(t, indices, flat.shape[0]), (vals,))


def check_against_float64(out_padded, q, k, v, mask, causal):
    """each sequence's tokens against float64 attention over those tokens alone; padding slots 0"""
    out_padded = np.asarray(out_padded, dtype=np.float64)
    assert np.all(out_padded[~mask] == 0)
    scale = q.shape[-1] ** -0.5
    for b in range(mask.shape[0]):
        n = int(mask[b].sum())
        if n == 0:
            continue
        qb, kb, vb = (x[b, mask[b]] for x in (q, k, v))
        vis = ref.visible(n, n, causal, (-1, -1))
        ro, _ = ref.attention(*(x.astype(np.float64) for x in (qb, kb, vb)), scale, vis)
        no, _ = ref.attention(qb, kb, vb, scale, vis, np.float32)
        err, ok = ref.error(out_padded[b, mask[b]], ro)
        assert ok and err <= ref.bound(2.0, ref.error(no, ro)[0], ro), f"sequence {b}: error {err}"


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_on_unpadded_numpy(causal):
    q, k, v, mask = padded_batch(3 + causal)
    (q_u, indices, cu, max_seqlen, _), k_u, v_u = unpad_input(q, mask), unpad_input(k, mask)[0], \
        unpad_input(v, mask)[0]
    out = fa.flash_attn_varlen_func(q_u, k_u, v_u, cu, cu, max_seqlen, max_seqlen, causal=causal)
    check_against_float64(pad_input(out, indices, *mask.shape), q, k, v, mask, causal)


@needs_torch
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_on_unpadded_torch(causal):
    q, k, v, mask = padded_batch(5 + causal)
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    m = torch.from_numpy(mask)
    q_u, indices, cu, max_seqlen, _ = unpad_input(tq, m)
    out = fa.flash_attn_varlen_func(q_u, unpad_input(tk, m)[0], unpad_input(tv, m)[0], cu, cu, max_seqlen,
                                    max_seqlen, causal=causal)
    padded = pad_input(out, indices, *mask.shape)
    check_against_float64(padded.detach().numpy(), q, k, v, mask, causal)
    padded.square().sum().backward()  # gradients reach the padded inputs through the index operations
    assert torch.all(tq.grad[~m] == 0) and torch.all(torch.isfinite(tq.grad))
    assert tq.grad[m].abs().sum() > 0 and tk.grad[m].abs().sum() > 0 and tv.grad[m].abs().sum() > 0
