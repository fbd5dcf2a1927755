"""The learnable sink (learnable_sink=, FlashAttention-4's name) and a value head dim d_v other
than d on NumPy arrays (the CPU backend): O, LSE, dQ, dK, dV and dsink against float64
(reference.py) with the C suite's pass rule, rows that see no key (O = 0, LSE = sink, dQ = 0),
varlen, the packed variants (d_v = d by construction), the KV cache, and bad input."""
import numpy as np
import pytest

import flashattn as fa
import reference as ref

SINK = np.array([-1.0, 0.5, 2.0, 6.0], dtype=np.float32)  # the last one takes most of each row


def f64(x):
    return np.asarray(x).astype(np.float64)


def inputs(rng, b, sq, sk, h, hk, d, d_v, dtype):
    mk = lambda *s: rng.standard_normal(s).astype(dtype)
    return mk(b, sq, h, d), mk(b, sk, hk, d), mk(b, sk, hk, d_v), mk(b, sq, h, d_v)


def check(o, lse, grads, q, k, v, do, scale, vis, dtype, sink):
    """Per sequence O, LSE (2x the plain implementation's error), dQ, dK, dV (3x); dsink, summed
    over the sequences, 3x the plain sum's error."""
    ref_dsink, naive_dsink = 0.0, 0.0
    for bi in range(q.shape[0]):
        args64 = [f64(x[bi]) for x in (q, k, v)]
        args32 = [x[bi].astype(np.float32) for x in (q, k, v)]
        ro, rl = ref.attention(*args64, scale, vis, sink=sink)
        no, nl = ref.attention(*args32, scale, vis, dtype, sink=sink)
        err, ok = ref.error(o[bi], ro)
        assert ok and err <= ref.bound(2.0, ref.error(no, ro)[0], ro), f"O error {err}"
        err, ok = ref.error(lse[bi], rl)
        assert ok and err <= ref.bound(2.0, ref.error(nl, rl)[0], rl), f"LSE error {err}"
        if grads is None:
            continue
        rg = ref.gradients(*args64, f64(do[bi]), scale, vis, sink=sink)
        ng = ref.gradients(*args32, do[bi].astype(np.float32), scale, vis, dtype, sink=sink)
        for name, g, r, n in zip(("dQ", "dK", "dV"), grads, rg, ng):
            err, ok = ref.error(g[bi], r)
            assert ok and err <= ref.bound(3.0, ref.error(n, r)[0], r), f"{name} error {err}"
        ref_dsink, naive_dsink = ref_dsink + rg[3], naive_dsink + ng[3]
    if grads is not None:
        err, ok = ref.error(grads[3], ref_dsink)
        assert grads[3].dtype == np.float32 and grads[3].shape == sink.shape
        assert ok and err <= ref.bound(3.0, ref.error(naive_dsink, ref_dsink)[0], ref_dsink), f"dsink error {err}"


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("d,d_v", [(32, 32), (48, 24), (24, 64)])
@pytest.mark.parametrize("causal", [False, True])
def test_sink_and_head_dim_v(dtype, d, d_v, causal):
    """Dense, GQA, seqlen_q > seqlen_k: under causal the first rows see no key."""
    rng = np.random.default_rng(d + d_v + causal)
    b, sq, sk, h, hk = 2, 70, 52, 4, 2
    q, k, v, do = inputs(rng, b, sq, sk, h, hk, d, d_v, dtype)
    scale = d ** -0.5
    o, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True, learnable_sink=SINK)
    assert o.shape == (b, sq, h, d_v) and o.dtype == q.dtype and lse.shape == (b, h, sq)
    grads = fa.flash_attn_backward(do, q, k, v, o, lse, causal=causal, learnable_sink=SINK)
    assert len(grads) == 4 and [g.shape for g in grads[:3]] == [q.shape, k.shape, v.shape]
    vis = ref.visible(sq, sk, causal, (-1, -1))
    check(o, lse, grads, q, k, v, do, scale, vis, dtype, SINK)
    if causal:  # rows 0 .. sq - sk - 1 see no key
        blind = sq - sk
        assert np.all(o[:, :blind] == 0) and np.all(grads[0][:, :blind] == 0)
        np.testing.assert_array_equal(lse[:, :, :blind], np.broadcast_to(SINK[None, :, None], (b, h, blind)))


def test_head_dim_v_without_sink():
    """d_v != d alone: out [.., d_v], three gradients, as the reference."""
    rng = np.random.default_rng(5)
    q, k, v, do = inputs(rng, 2, 33, 47, 2, 1, 40, 16, np.float32)
    o, lse, _ = fa.flash_attn_func(q, k, v, return_attn_probs=True)
    assert o.shape == (2, 33, 2, 16)
    grads = fa.flash_attn_backward(do, q, k, v, o, lse)
    assert len(grads) == 3
    vis = ref.visible(33, 47, False, (-1, -1))
    for bi in range(2):
        args64 = [f64(x[bi]) for x in (q, k, v)]
        args32 = [x[bi] for x in (q, k, v)]
        ro, _ = ref.attention(*args64, 40 ** -0.5, vis)
        no, _ = ref.attention(*args32, 40 ** -0.5, vis, np.float32)
        assert ref.error(o[bi], ro)[0] <= ref.bound(2.0, ref.error(no, ro)[0], ro)
        rg = ref.gradients(*args64, f64(do[bi]), 40 ** -0.5, vis)
        ng = ref.gradients(*args32, do[bi], 40 ** -0.5, vis, np.float32)
        for g, r, n in zip(grads, rg, ng):
            assert ref.error(g[bi], r)[0] <= ref.bound(3.0, ref.error(n, r)[0], r)


def test_varlen_sink():
    """Packed sequences with a sink and d_v != d; an empty sequence and padding rows after the
    last one get no share of dsink (their D is 0)."""
    rng = np.random.default_rng(11)
    lens_q, lens_k = [9, 0, 30], [25, 6, 14]
    cu_q = np.cumsum([0] + lens_q).astype(np.int32)
    cu_k = np.cumsum([0] + lens_k).astype(np.int32)
    h, hk, d, d_v = 4, 4, 32, 48
    q, k, v, do = (x[0] for x in inputs(rng, 1, sum(lens_q) + 3, sum(lens_k), h, hk, d, d_v, np.float32))
    o, lse, _ = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True,
                                          return_attn_probs=True, learnable_sink=SINK)
    assert o.shape == (q.shape[0], h, d_v) and np.all(o[-3:] == 0)
    grads = fa.flash_attn_backward(do, q, k, v, o, lse, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                   max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k), learnable_sink=SINK)
    ref_dsink, naive_dsink = 0.0, 0.0
    for s in range(len(lens_q)):
        a, e, ka, ke = cu_q[s], cu_q[s + 1], cu_k[s], cu_k[s + 1]
        sq, sk = e - a, ke - ka
        if sq == 0:
            continue
        vis = ref.visible(sq, sk, True, (-1, -1))
        ro, rl = ref.attention(f64(q[a:e]), f64(k[ka:ke]), f64(v[ka:ke]), d ** -0.5, vis, sink=SINK)
        no, _ = ref.attention(q[a:e], k[ka:ke], v[ka:ke], d ** -0.5, vis, np.float32, sink=SINK)
        assert ref.error(o[a:e], ro)[0] <= ref.bound(2.0, ref.error(no, ro)[0], ro)
        assert ref.error(lse[:, a:e], rl)[0] <= 1e-5 * max(1.0, np.abs(rl).max())
        rg = ref.gradients(f64(q[a:e]), f64(k[ka:ke]), f64(v[ka:ke]), f64(do[a:e]), d ** -0.5, vis, sink=SINK)
        ng = ref.gradients(q[a:e], k[ka:ke], v[ka:ke], do[a:e], d ** -0.5, vis, np.float32, sink=SINK)
        for g, r, n, (lo, hi) in zip(grads, rg, ng, ((a, e), (ka, ke), (ka, ke))):
            assert ref.error(g[lo:hi], r)[0] <= ref.bound(3.0, ref.error(n, r)[0], r)
        ref_dsink, naive_dsink = ref_dsink + rg[3], naive_dsink + ng[3]
    err = ref.error(grads[3], ref_dsink)[0]
    assert err <= ref.bound(3.0, ref.error(naive_dsink, ref_dsink)[0], ref_dsink), f"dsink error {err}"


def test_packed_variants_take_the_sink():
    """qkvpacked / kvpacked (d_v = d by construction) give flash_attn_func's bits with the sink."""
    rng = np.random.default_rng(3)
    qkv = rng.standard_normal((2, 40, 3, 4, 32)).astype(np.float32)
    q, k, v = (np.ascontiguousarray(qkv[:, :, i]) for i in range(3))
    want = fa.flash_attn_func(q, k, v, causal=True, learnable_sink=SINK)
    np.testing.assert_array_equal(fa.flash_attn_qkvpacked_func(qkv, causal=True, learnable_sink=SINK), want)
    kv = np.ascontiguousarray(qkv[:, :, 1:])
    np.testing.assert_array_equal(fa.flash_attn_kvpacked_func(q, kv, causal=True, learnable_sink=SINK), want)
    cu = np.array([0, 40, 80], dtype=np.int32)
    flat = qkv.reshape(80, 3, 4, 32)
    got = fa.flash_attn_varlen_qkvpacked_func(flat, cu, 40, causal=True, learnable_sink=SINK)
    np.testing.assert_array_equal(got.reshape(want.shape), want)
    assert not np.array_equal(fa.flash_attn_func(q, k, v, causal=True), want)  # the sink changed it


@pytest.mark.parametrize("d,d_v", [(64, 64), (96, 32)])
def test_kvcache_sink(d, d_v):
    """flash_attn_with_kvcache with a sink and a value cache of its own head dim: each sequence's
    cached keys, causal bottom-right; a sequence with an empty cache sees no key."""
    rng = np.random.default_rng(d_v)
    b, sn, h, hk, cap = 3, 2, 4, 2, 40
    lens = np.array([0, 17, cap], dtype=np.int32)
    q = rng.standard_normal((b, sn, h, d)).astype(np.float32)
    kc = rng.standard_normal((b, cap, hk, d)).astype(np.float32)
    vc = rng.standard_normal((b, cap, hk, d_v)).astype(np.float32)
    o, lse = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True, return_softmax_lse=True,
                                        learnable_sink=SINK)
    assert o.shape == (b, sn, h, d_v)
    for bi in range(b):
        sk = int(lens[bi])
        vis = ref.visible(sn, sk, True, (-1, -1))
        ro, rl = ref.attention(f64(q[bi]), f64(kc[bi, :sk]), f64(vc[bi, :sk]), d ** -0.5, vis, sink=SINK)
        no, _ = ref.attention(q[bi], kc[bi, :sk], vc[bi, :sk], d ** -0.5, vis, np.float32, sink=SINK)
        assert ref.error(o[bi], ro)[0] <= ref.bound(2.0, ref.error(no, ro)[0], ro)
        assert ref.error(lse[bi], rl)[0] <= 1e-5 * max(1.0, np.abs(rl).max())
    np.testing.assert_array_equal(lse[0], np.broadcast_to(SINK[:, None], (h, sn)))


def test_sink_bad_input():
    """A sink of the wrong length, rank or type is refused before the call, nothing returned;
    other float dtypes and lists are converted."""
    rng = np.random.default_rng(1)
    q, k, v, do = inputs(rng, 1, 8, 8, 4, 2, 16, 16, np.float32)
    for bad in (SINK[:3], SINK[None], np.zeros((4, 1), np.float32)):
        with pytest.raises(ValueError, match=r"learnable_sink must be \[heads\] = \(4,\)"):
            fa.flash_attn_func(q, k, v, learnable_sink=bad)
    for bad in (1.0, "sink", True):
        with pytest.raises(TypeError, match="learnable_sink"):
            fa.flash_attn_func(q, k, v, learnable_sink=bad)
    want = fa.flash_attn_func(q, k, v, learnable_sink=SINK)
    for same in (SINK.astype(np.float64), SINK.tolist(), SINK.astype(np.float16)):
        np.testing.assert_array_equal(fa.flash_attn_func(q, k, v, learnable_sink=same), want)
    with pytest.raises(fa.FlashAttnError, match="INVALID_ARG"):  # the library reads the values
        fa.flash_attn_func(q, k, v, learnable_sink=np.array([0, np.nan, 0, 0], np.float32))
    o, lse, _ = fa.flash_attn_func(q, k, v, return_attn_probs=True, learnable_sink=SINK)
    assert len(fa.flash_attn_backward(do, q, k, v, o, lse)) == 3  # no sink, no dsink
