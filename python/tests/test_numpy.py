"""The Python package on NumPy arrays (the CPU backend): outputs and gradients against float64
with the C suite's pass rule (reference.py), the packed and varlen variants, block masks,
dropout's determinism and its gradients, and bad input."""
import ctypes
import os

import numpy as np
import pytest

import flashattn as fa
import reference as ref
from flashattn import _capi

# bfloat16 arrays need ml_dtypes (pip install ".[test]" brings it). Without it the bf16 cases are
# reported as skipped, with the reason; where FA_TEST_REQUIRE_ML_DTYPES=1 (.ci/run's pip
# environment) a missing ml_dtypes is an error instead.
try:
    import ml_dtypes

    BF16 = ml_dtypes.bfloat16
except ImportError:
    if os.environ.get("FA_TEST_REQUIRE_ML_DTYPES") == "1":
        raise
    BF16 = None
DTYPES = [np.float32, np.float16,
          pytest.param(BF16, id="bfloat16",
                       marks=pytest.mark.skipif(BF16 is None, reason="ml_dtypes is not installed: no bfloat16 arrays"))]


def inputs(rng, b, sq, sk, h, hk, d, dtype):
    q = rng.standard_normal((b, sq, h, d)).astype(dtype)
    k = rng.standard_normal((b, sk, hk, d)).astype(dtype)
    v = rng.standard_normal((b, sk, hk, d)).astype(dtype)
    do = rng.standard_normal((b, sq, h, d)).astype(dtype)
    return q, k, v, do


def f64(x):
    return np.asarray(x).astype(np.float64)


def check_forward(o, lse, q, k, v, scale, vis_of, dtype, z_of=lambda bi: None):
    """o [b, sq, h, d], lse [b, h, sq] against float64, per sequence; z_of(bi): the dropout
    factors of sequence bi (reference.dropout_factors) or None"""
    for bi in range(q.shape[0]):
        vis = vis_of(bi)
        ro, rl = ref.attention(f64(q[bi]), f64(k[bi]), f64(v[bi]), scale, vis, z=z_of(bi))
        no, nl = ref.attention(q[bi].astype(np.float32), k[bi].astype(np.float32), v[bi].astype(np.float32), scale,
                               vis, dtype, z=z_of(bi))
        err, ok = ref.error(o[bi], ro)
        assert ok, "O not finite where the reference is"
        assert err <= ref.bound(2.0, ref.error(no, ro)[0], ro), f"O error {err}"
        rl_masked = rl == -np.inf
        assert np.array_equal(lse[bi] == -np.inf, rl_masked), "LSE -inf exactly on fully masked rows"
        err, _ = ref.error(lse[bi], rl)
        assert err <= ref.bound(2.0, ref.error(nl, rl)[0], rl), f"LSE error {err}"


def check_backward(grads, q, k, v, do, scale, vis_of, dtype, z_of=lambda bi: None):
    for bi in range(q.shape[0]):
        vis = vis_of(bi)
        rg = ref.gradients(f64(q[bi]), f64(k[bi]), f64(v[bi]), f64(do[bi]), scale, vis, z=z_of(bi))
        ng = ref.gradients(*(x[bi].astype(np.float32) for x in (q, k, v, do)), scale, vis, dtype, z=z_of(bi))
        for name, g, r, n in zip(("dQ", "dK", "dV"), grads, rg, ng):
            err, ok = ref.error(g[bi], r)
            assert ok, f"{name} not finite"
            assert err <= ref.bound(3.0, ref.error(n, r)[0], r), f"{name} error {err}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("d", [32, 64, 100])
@pytest.mark.parametrize("causal", [False, True])
def test_dense(dtype, d, causal):
    rng = np.random.default_rng(d + 7 * causal)
    b, sq, sk, h, hk = 2, 77, 96, 4, 2
    q, k, v, do = inputs(rng, b, sq, sk, h, hk, d, dtype)
    scale = 1.0 / np.sqrt(d)
    o, lse, probs = fa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    assert probs.shape == (b, h, sq, sk) and probs.dtype == q.dtype
    assert o.dtype == q.dtype and o.shape == q.shape and lse.shape == (b, h, sq)
    vis = ref.visible(sq, sk, causal, (-1, -1))
    check_forward(o, lse, q, k, v, scale, lambda bi: vis, dtype)
    grads = fa.flash_attn_backward(do, q, k, v, o, lse, causal=causal)
    check_backward(grads, q, k, v, do, scale, lambda bi: vis, dtype)


def cpu_forward_key_tiles(q, k):
    """How many key tiles the CPU backend's forward walks for q, k (fa_plan)."""
    L = _capi.lib()
    L.fa_plan.argtypes = [ctypes.c_void_p, ctypes.POINTER(_capi.FwdArgs), ctypes.POINTER(_capi.PlanInfo)]
    code = {"float32": _capi.DTYPE_F32, "float16": _capi.DTYPE_F16, "bfloat16": _capi.DTYPE_BF16}[q.dtype.name]
    o = np.empty_like(q)
    t = lambda a: _capi.tensor(a.ctypes.data, code, a.shape, [s // a.itemsize for s in a.strides])
    args = _capi.FwdArgs()
    args.q, args.k, args.v, args.o = t(q), t(k), t(k), t(o)
    args.opts = L.fa_options_default()
    info = _capi.PlanInfo()
    assert L.fa_plan(_capi.context("cpu").ptr, ctypes.byref(args), ctypes.byref(info)) == 0
    return info.num_k_blocks


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("d", [32, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_several_key_tiles(dtype, d, causal):
    """Sequences longer than the CPU backend's key tile (backends/cpu/backend.c: forward 256 keys
    at d 32 and 128 at d 128, backward 256 and 64): the online softmax's rescaling across tiles
    and the backward's accumulation over key tiles, causal with a diagonal crossing tiles."""
    rng = np.random.default_rng(d + causal)
    b, sq, sk, h, hk = 1, 200 if d == 128 else 230, 300 if d == 128 else 600, 2, 1
    q, k, v, do = inputs(rng, b, sq, sk, h, hk, d, dtype)
    assert cpu_forward_key_tiles(q, k) >= 3
    o, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    vis = ref.visible(sq, sk, causal, (-1, -1))
    check_forward(o, lse, q, k, v, d ** -0.5, lambda bi: vis, dtype)
    grads = fa.flash_attn_backward(do, q, k, v, o, lse, causal=causal)
    check_backward(grads, q, k, v, do, d ** -0.5, lambda bi: vis, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mods", ["softcap", "alibi-heads", "both-batch"])
def test_softcap_and_alibi(dtype, causal, mods):
    """softcap= and alibi_slopes= ([heads] and [batch, heads]) against the float64 reference,
    forward and backward, GQA and unequal lengths (ALiBi's distance is bottom-right aligned)."""
    rng = np.random.default_rng(11 + causal)
    b, sq, sk, h, hk, d = 2, 70, 150, 4, 2, 64
    q, k, v, do = inputs(rng, b, sq, sk, h, hk, d, dtype)
    softcap = 0.0 if mods == "alibi-heads" else 1.5
    slopes = None
    if mods != "softcap":
        base = 2.0 ** (-8.0 * np.arange(1, h + 1) / h)
        slopes = (base if mods == "alibi-heads" else np.stack([base, 1.5 * base])).astype(np.float32)
    slopes_of = (lambda bi: None) if slopes is None else (lambda bi: slopes if slopes.ndim == 1 else slopes[bi])
    o, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True, softcap=softcap,
                                   alibi_slopes=slopes)
    scale = d ** -0.5
    vis = ref.visible(sq, sk, causal, (-1, -1))
    for bi in range(b):
        kw = dict(softcap=softcap, slopes=slopes_of(bi))
        ro, rl = ref.attention(f64(q[bi]), f64(k[bi]), f64(v[bi]), scale, vis, **kw)
        no, nl = ref.attention(*(x[bi].astype(np.float32) for x in (q, k, v)), scale, vis, dtype, **kw)
        err, ok = ref.error(o[bi], ro)
        assert ok and err <= ref.bound(2.0, ref.error(no, ro)[0], ro), f"O error {err}"
        err, _ = ref.error(lse[bi], rl)
        assert err <= ref.bound(2.0, ref.error(nl, rl)[0], rl), f"LSE error {err}"
    grads = fa.flash_attn_backward(do, q, k, v, o, lse, causal=causal, softcap=softcap, alibi_slopes=slopes)
    for bi in range(b):
        kw = dict(softcap=softcap, slopes=slopes_of(bi))
        rg = ref.gradients(f64(q[bi]), f64(k[bi]), f64(v[bi]), f64(do[bi]), scale, vis, **kw)
        ng = ref.gradients(*(x[bi].astype(np.float32) for x in (q, k, v, do)), scale, vis, dtype, **kw)
        for name, g, r, n in zip(("dQ", "dK", "dV"), grads, rg, ng):
            err, ok = ref.error(g[bi], r)
            assert ok and err <= ref.bound(3.0, ref.error(n, r)[0], r), f"{name} error {err}"


def test_softcap_and_alibi_bad_input():
    rng = np.random.default_rng(5)
    q, k, v, _ = inputs(rng, 2, 8, 8, 4, 2, 16, np.float32)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="softcap"):
            fa.flash_attn_func(q, k, v, softcap=bad)
    for shape in ((3,), (2, 3), (3, 4), (2, 4, 1)):
        with pytest.raises(ValueError, match="alibi_slopes"):
            fa.flash_attn_func(q, k, v, alibi_slopes=np.ones(shape, np.float32))


@pytest.mark.parametrize("window", [(16, 0), (8, 8), (-1, 5)])
def test_window_scale_mqa(window):
    rng = np.random.default_rng(3)
    q, k, v, do = inputs(rng, 1, 64, 64, 4, 1, 64, np.float32)
    scale = 0.3
    o, lse, _ = fa.flash_attn_func(q, k, v, softmax_scale=scale, window_size=window, return_attn_probs=True)
    vis = ref.visible(64, 64, False, window)
    check_forward(o, lse, q, k, v, scale, lambda bi: vis, np.float32)
    grads = fa.flash_attn_backward(do, q, k, v, o, lse, softmax_scale=scale, window_size=window, deterministic=True)
    check_backward(grads, q, k, v, do, scale, lambda bi: vis, np.float32)


def test_fully_masked_rows():
    """seqlen_q > seqlen_k with causal: the first rows see no key: O = 0, LSE = -inf, no NaN"""
    rng = np.random.default_rng(4)
    q, k, v, do = inputs(rng, 1, 40, 24, 2, 2, 32, np.float32)
    o, lse, _ = fa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert np.all(o[0, :16] == 0) and np.all(lse[0, :, :16] == -np.inf)
    grads = fa.flash_attn_backward(do, q, k, v, o, lse, causal=True)
    assert all(np.all(np.isfinite(g)) for g in grads)
    check_forward(o, lse, q, k, v, 32 ** -0.5, lambda bi: ref.visible(40, 24, True, (-1, -1)), np.float32)


def test_packed_variants_match():
    rng = np.random.default_rng(5)
    q, k, v, _ = inputs(rng, 2, 50, 50, 4, 4, 64, np.float16)
    o = fa.flash_attn_func(q, k, v, causal=True)
    kv = np.ascontiguousarray(np.stack([k, v], axis=2))
    qkv = np.ascontiguousarray(np.stack([q, k, v], axis=2))
    np.testing.assert_array_equal(fa.flash_attn_kvpacked_func(q, kv, causal=True), o)
    np.testing.assert_array_equal(fa.flash_attn_qkvpacked_func(qkv, causal=True), o)


def test_varlen():
    rng = np.random.default_rng(6)
    lens_q, lens_k = [5, 33, 0, 70], [9, 33, 12, 64]
    h, hk, d = 4, 2, 64
    cu_q, cu_k = np.cumsum([0] + lens_q).astype(np.int32), np.cumsum([0] + lens_k).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], h, d)).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], hk, d)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], hk, d)).astype(np.float32)
    do = rng.standard_normal(q.shape).astype(np.float32)
    o, lse, _ = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True,
                                          return_attn_probs=True)
    assert lse.shape == (h, cu_q[-1])
    dq, dk, dv = fa.flash_attn_backward(do, q, k, v, o, lse, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                        max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k))
    for s in range(len(lens_q)):
        a, e, c, f = cu_q[s], cu_q[s + 1], cu_k[s], cu_k[s + 1]
        if e == a:
            continue
        seq = lambda x, lo, hi: x[None, lo:hi]
        vis = ref.visible(e - a, f - c, True, (-1, -1))
        check_forward(seq(o, a, e), lse[None, :, a:e], seq(q, a, e), seq(k, c, f), seq(v, c, f), d ** -0.5,
                      lambda bi: vis, np.float32)
        check_backward((seq(dq, a, e), seq(dk, c, f), seq(dv, c, f)), seq(q, a, e), seq(k, c, f), seq(v, c, f),
                       seq(do, a, e), d ** -0.5, lambda bi: vis, np.float32)
    qkv = np.ascontiguousarray(np.stack([q, q, q], axis=1))
    o2 = fa.flash_attn_varlen_qkvpacked_func(qkv, cu_q, max(lens_q))
    np.testing.assert_array_equal(o2, fa.flash_attn_varlen_func(q, q, q, cu_q, cu_q, max(lens_q), max(lens_q)))


def test_varlen_rows_after_the_last_sequence(monkeypatch):
    """cu_seqlens[-1] below the packed rows (padding at the end, as FlashAttention-2 users pass):
    those rows belong to no sequence, and the package defines them as O = 0, LSE = -inf and zero
    gradients. np.empty is poisoned with NaN, so an output row the package leaves unwritten shows."""
    real_empty = np.empty

    def poisoned_empty(shape, dtype=float, *args, **kwargs):
        a = real_empty(shape, dtype, *args, **kwargs)
        if np.issubdtype(a.dtype, np.floating):
            a.fill(np.nan)
        return a

    monkeypatch.setattr(np, "empty", poisoned_empty)
    rng = np.random.default_rng(12)
    h, d, total_q, total_k = 2, 16, 64, 40
    cu_q, cu_k = np.array([0, 1, 5], np.int32), np.array([0, 7, 30], np.int32)
    q = rng.standard_normal((total_q, h, d)).astype(np.float32)
    k = rng.standard_normal((total_k, h, d)).astype(np.float32)
    v = rng.standard_normal((total_k, h, d)).astype(np.float32)
    do = rng.standard_normal(q.shape).astype(np.float32)
    o, lse, _ = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 23, return_attn_probs=True)
    assert np.all(o[5:] == 0) and np.all(lse[:, 5:] == -np.inf)
    assert np.all(np.isfinite(o[:5])) and np.all(np.isfinite(lse[:, :5]))
    dq, dk, dv = fa.flash_attn_backward(do, q, k, v, o, lse, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=4,
                                        max_seqlen_k=23)
    assert np.all(dq[5:] == 0) and np.all(dk[30:] == 0) and np.all(dv[30:] == 0)
    assert all(np.all(np.isfinite(g)) for g in (dq, dk, dv))
    # the rows inside the sequences are those of the unpadded call
    o_exact = fa.flash_attn_varlen_func(q[:5], k[:30], v[:30], cu_q, cu_k, 4, 23)
    np.testing.assert_array_equal(o[:5], o_exact)


def test_block_sparse():
    rng = np.random.default_rng(8)
    q, k, v, do = inputs(rng, 1, 96, 96, 2, 2, 64, np.float32)
    bits = rng.random((3, 3)) < 0.5
    bits[np.arange(3), np.arange(3)] = True
    o, lse, _ = fa.block_sparse_attn_func(q, k, v, bits, (32, 32), return_attn_probs=True)
    vis = ref.visible(96, 96, False, (-1, -1), (bits, 32, 32))
    check_forward(o, lse, q, k, v, 64 ** -0.5, lambda bi: vis, np.float32)
    grads = fa.flash_attn_backward(do, q, k, v, o, lse, block_mask=bits, block_size=(32, 32))
    check_backward(grads, q, k, v, do, 64 ** -0.5, lambda bi: vis, np.float32)
    dense = fa.block_sparse_attn_func(q, k, v, np.ones((3, 3), dtype=bool), (32, 32))
    np.testing.assert_allclose(dense, fa.flash_attn_func(q, k, v), atol=1e-6)


def test_dropout_deterministic_and_gradients():
    rng = np.random.default_rng(9)
    q, k, v, do = inputs(rng, 1, 32, 32, 2, 2, 32, np.float32)
    o1, lse, _ = fa.flash_attn_func(q, k, v, dropout_p=0.3, seed=11, return_attn_probs=True)
    o2 = fa.flash_attn_func(q, k, v, dropout_p=0.3, seed=11)
    o3 = fa.flash_attn_func(q, k, v, dropout_p=0.3, seed=12)
    np.testing.assert_array_equal(o1, o2)
    assert not np.array_equal(o1, o3)
    assert not np.allclose(o1, fa.flash_attn_func(q, k, v), atol=1e-3)
    # the backward regenerates the same mask: d/dt of sum(O(x + t u) * dO) at t = 0, by central
    # differences of the forward in float64 terms, matches sum(dX * u)
    dq, dk, dv = fa.flash_attn_backward(do, q, k, v, o1, lse, dropout_p=0.3, seed=11)
    u = [rng.standard_normal(x.shape).astype(np.float32) for x in (q, k, v)]
    t = 1e-2
    f = lambda s: float(np.sum(f64(fa.flash_attn_func(*(x + s * du for x, du in zip((q, k, v), u)), dropout_p=0.3,
                                                       seed=11)) * f64(do)))
    numeric = (f(t) - f(-t)) / (2 * t)
    analytic = sum(float(np.sum(f64(g) * f64(du))) for g, du in zip((dq, dk, dv), u))
    assert abs(numeric - analytic) <= 2e-2 * max(1.0, abs(analytic)), (numeric, analytic)


def test_last_dimension_strided_is_made_contiguous():
    """q, k, v and dout whose last stride is not 1 element (every other element of a wider array,
    a transposed view) are copied as FlashAttention-2's maybe_contiguous does: the same bytes as
    the contiguous arrays, forward and backward"""
    rng = np.random.default_rng(21)
    q, k, v, do = inputs(rng, 2, 24, 40, 4, 2, 32, np.float32)
    wide = [np.repeat(x, 2, axis=-1) for x in (q, k, v, do)]  # [..., 2d]: x[..., ::2] is x
    strided = [w[..., ::2] for w in wide]
    assert all(s.strides[-1] == 8 for s in strided)
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    out_s, lse_s, _ = fa.flash_attn_func(*strided[:3], causal=True, return_attn_probs=True)
    np.testing.assert_array_equal(out_s, out)
    np.testing.assert_array_equal(lse_s, lse)
    grads = fa.flash_attn_backward(do, q, k, v, out, lse, causal=True)
    grads_s = fa.flash_attn_backward(strided[3], *strided[:3], out, lse, causal=True)
    for g, gs in zip(grads, grads_s):
        np.testing.assert_array_equal(gs, g)
    # a view whose last axis is a transposed one (strides of whole rows)
    qt = np.ascontiguousarray(np.swapaxes(q, -1, -2)).swapaxes(-1, -2)
    assert qt.strides[-1] != 4
    np.testing.assert_array_equal(fa.flash_attn_func(qt, k, v, causal=True), out)


@pytest.mark.parametrize("causal", [False, True])
def test_return_attn_probs_with_dropout(causal):
    """S_dmask (return_attn_probs): the probabilities exp(S' - LSE), dropped entries negated, with
    the keep bits of the NumPy Philox reference; its kept entries times V / (1 - p) summed give the
    returned O, within 2x the error of a plain fp32 implementation of the same dropout attention"""
    rng = np.random.default_rng(40 + causal)
    b, sq, sk, h, hk, d, p, seed = 2, 20, 28, 4, 2, 16, 0.25, 77
    q, k, v, _ = inputs(rng, b, sq, sk, h, hk, d, np.float32)
    out, lse, s_dmask = fa.flash_attn_func(q, k, v, p, None, causal, (-1, -1), 2.0, None, False, True,
                                           seed=seed, offset=3)
    assert s_dmask.shape == (b, h, sq, sk) and s_dmask.dtype == np.float32
    scale = d ** -0.5
    vis = ref.visible(sq, sk, causal, (-1, -1))
    for bi in range(b):
        keep = np.stack([ref.dropout_keep(seed, 3, bi, h, hh, sq, sk, p) for hh in range(h)])
        probs, _ = ref._probs(f64(q[bi]), f64(k[bi]), scale, vis, np.float64, softcap=2.0)
        np.testing.assert_allclose(np.abs(s_dmask[bi]), probs, rtol=1e-5, atol=1e-7)
        assert np.all(s_dmask[bi][~keep & (probs > 0)] < 0) and np.all(s_dmask[bi][keep] >= 0)
        kept = np.maximum(f64(s_dmask[bi]), 0.0)
        vv = np.repeat(f64(v[bi]), h // hk, axis=1)
        o_probs = np.einsum("hij,jhd->ihd", kept, vv) / (1 - float(np.float32(p)))
        z = ref.dropout_factors(seed, 3, bi, h, sq, sk, p)
        ro, _ = ref.attention(f64(q[bi]), f64(k[bi]), f64(v[bi]), scale, vis, z=z, softcap=2.0)
        no, _ = ref.attention(q[bi], k[bi], v[bi], scale, vis, np.float32, z=z, softcap=2.0)
        err, ok = ref.error(o_probs, f64(out[bi]))
        assert ok and err <= ref.bound(2.0, ref.error(no, ro)[0], ro), f"sum of S_dmask V: error {err}"


def test_philox_reference_matches_random123_known_answers():
    """reference.philox4x32_10 against Random123's kat_vectors (as tests/core/test_philox.c)"""
    vectors = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
               ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
               ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
                (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, expected in vectors:
        got = ref.philox4x32_10([np.array([c], dtype=np.uint32) for c in ctr], key)
        assert [int(w[0]) for w in got] == list(expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("causal", [False, True])
def test_dropout_against_numpy_reference(dtype, causal):
    """Outputs and gradients with dropout against float64 attention whose mask comes from the
    NumPy Philox (reference.py) and whose kept elements are scaled by 1 / (1 - p): the mask, the
    scale and the gradients' use of both. A 64-bit seed, and an offset that carries the stream into
    its high word; several key tiles (d 64: 128 keys a tile)."""
    rng = np.random.default_rng(21 + causal)
    b, sq, sk, h, hk, d, p = 2, 130, 300, 4, 2, 64, 0.17
    seed, offset = 0x123456789ABCDEF0, 2 ** 32 - 5
    q, k, v, do = inputs(rng, b, sq, sk, h, hk, d, dtype)
    o, lse, _ = fa.flash_attn_func(q, k, v, dropout_p=p, causal=causal, return_attn_probs=True, seed=seed,
                                   offset=offset)
    vis = ref.visible(sq, sk, causal, (-1, -1))
    z = [ref.dropout_factors(seed, offset, bi, h, sq, sk, p) for bi in range(b)]
    assert any((offset + bi * h + hh) >> 32 for bi in range(b) for hh in range(h))  # the stream's high word
    kept = np.mean([np.mean(zz > 0) for zz in z])
    assert abs(kept - (1 - p)) < 0.01, kept
    check_forward(o, lse, q, k, v, d ** -0.5, lambda bi: vis, dtype, lambda bi: z[bi])
    grads = fa.flash_attn_backward(do, q, k, v, o, lse, dropout_p=p, causal=causal, seed=seed, offset=offset)
    check_backward(grads, q, k, v, do, d ** -0.5, lambda bi: vis, dtype, lambda bi: z[bi])


def test_bad_input():
    rng = np.random.default_rng(10)
    q, k, v, _ = inputs(rng, 1, 16, 16, 2, 2, 32, np.float32)
    with pytest.raises(fa.FlashAttnError) as e:
        fa.flash_attn_func(q, k[..., :16], v)
    assert e.value.status == "FA_ERR_INVALID_ARG" and "shape" in e.value.message
    with pytest.raises(fa.FlashAttnError) as e:
        fa.flash_attn_func(q, k[:, :, :1], v)  # heads_kv differ between k and v
    assert e.value.status == "FA_ERR_INVALID_ARG"
    with pytest.raises(fa.FlashAttnError) as e:
        big = rng.standard_normal((1, 4, 2, 300)).astype(np.float32)
        fa.flash_attn_func(big, big, big)
    assert e.value.status in ("FA_ERR_UNSUPPORTED", "FA_ERR_INVALID_ARG")
    with pytest.raises(TypeError):
        fa.flash_attn_func(q.astype(np.float64), k, v)
    with pytest.raises(ValueError):
        fa.flash_attn_func(q, k, v, dropout_p=0.1)  # NumPy dropout needs a seed
    with pytest.raises(ValueError):
        fa.flash_attn_func(q, k, v, dropout_p=1.0, seed=1)
    with pytest.raises(ValueError):
        fa.flash_attn_func(q[0], k[0], v[0])
    # a non-contiguous last dimension is copied, not refused (test_last_dimension_strided_is_made_contiguous)
    nan_q = q.copy()
    nan_q[0, 3, 1, 5] = np.nan
    o = fa.flash_attn_func(nan_q, k, v)
    assert np.all(np.isnan(o[0, 3, 1])) and np.all(np.isfinite(np.delete(o[0], 3, axis=0)))


def test_library_info():
    assert fa.library_version() == "0.1.0"
    assert "cpu" in fa.backends()
