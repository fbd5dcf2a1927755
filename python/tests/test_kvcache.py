"""flash_attn_with_kvcache on NumPy arrays (the CPU backend): outputs against a float64 reference
written here from FlashAttention-2's definition (new keys appended at cache_seqlens, rotary at
FlashAttention-2's positions, causal aligned bottom-right against the cache after appending), the
pass rule of the C suite (2x the error of the same attention in the input's precision, plus
1e-5 x max(1, |reference|)), the cache updated in place, and bad input."""
import numpy as np
import pytest

import flashattn as fa


def rotate(x, cos, sin, pos, interleaved):
    """x [..., d] (float64) rotated at positions pos (broadcast over x's leading axes)."""
    x = x.copy()
    rd = 2 * cos.shape[1]
    c, s = cos[pos], sin[pos]
    if interleaved:
        a, b = x[..., 0:rd:2].copy(), x[..., 1:rd:2].copy()
        x[..., 0:rd:2], x[..., 1:rd:2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., : rd // 2].copy(), x[..., rd // 2: rd].copy()
        x[..., : rd // 2], x[..., rd // 2: rd] = a * c - b * s, a * s + b * c
    return x


def attention(q, keys, values, lens_after, sn, causal, dtype):
    """q [b, sn, h, d], keys / values per sequence [sk, hk, d] (float64 or dtype); O, LSE."""
    b, _, h, d = q.shape
    out = np.zeros(q.shape, dtype=np.float64)
    lse = np.full((b, h, sn), -np.inf)
    for i in range(b):
        k, v = keys[i].astype(dtype), values[i].astype(dtype)
        sk = lens_after[i]
        group = h // k.shape[1]
        for hh in range(h):
            s = (q[i, :, hh, :].astype(dtype) @ k[:sk, hh // group, :].T.astype(dtype)) * dtype(1.0 / np.sqrt(d))
            if causal:
                ok = np.arange(sk)[None, :] <= np.arange(sn)[:, None] + sk - sn
                s = np.where(ok, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            p = np.exp(s - m)
            l = p.sum(axis=1, keepdims=True)
            out[i, :, hh, :] = (p @ v[:sk, hh // group, :]) / l
            lse[i, hh, :] = (m + np.log(l))[:, 0]
    return out, lse


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_with_kvcache(paged, dtype):
    rng = np.random.default_rng(7)
    b, sn, h, hk, d, knew, cap = 3, 2, 4, 2, 64, 2, 96
    lens = np.array([0, 17, cap - knew], dtype=np.int32)
    q = rng.standard_normal((b, sn, h, d)).astype(dtype)
    kn = rng.standard_normal((b, knew, hk, d)).astype(dtype)
    vn = rng.standard_normal((b, knew, hk, d)).astype(dtype)
    rd = 32
    theta = np.arange(cap + sn)[:, None] * 10000.0 ** (-2.0 * np.arange(rd // 2)[None, :] / rd)
    cos, sin = np.cos(theta).astype(dtype), np.sin(theta).astype(dtype)
    page = 16
    if paged:
        pages = b * cap // page
        kc = rng.standard_normal((pages + 2, page, hk, d)).astype(dtype)
        vc = rng.standard_normal((pages + 2, page, hk, d)).astype(dtype)
        table = rng.permutation(pages + 2)[:pages].reshape(b, cap // page).astype(np.int32)
        seq_k = [kc[table[i]].reshape(cap, hk, d) for i in range(b)]
        seq_v = [vc[table[i]].reshape(cap, hk, d) for i in range(b)]
    else:
        kc = rng.standard_normal((b, cap, hk, d)).astype(dtype)
        vc = rng.standard_normal((b, cap, hk, d)).astype(dtype)
        table = None
        seq_k, seq_v = [kc[i] for i in range(b)], [vc[i] for i in range(b)]
    # expected caches: the new rows rotated (float64, rounded to the dtype) and appended
    ek, ev = [x.copy() for x in seq_k], [x.copy() for x in seq_v]
    for i in range(b):
        pos = lens[i] + np.arange(knew)
        ek[i][pos] = rotate(kn[i].astype(np.float64), cos.astype(np.float64), sin.astype(np.float64),
                            pos[:, None], False).astype(dtype)
        ev[i][pos] = vn[i]
    out, lse = fa.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, rotary_cos=cos, rotary_sin=sin,
                                         cache_seqlens=lens, block_table=table, causal=True,
                                         rotary_interleaved=False, return_softmax_lse=True)
    got_k = [kc[table[i]].reshape(cap, hk, d) for i in range(b)] if paged else [kc[i] for i in range(b)]
    got_v = [vc[table[i]].reshape(cap, hk, d) for i in range(b)] if paged else [vc[i] for i in range(b)]
    for i in range(b):
        np.testing.assert_array_equal(got_v[i], ev[i])
        # rotated keys: within one unit in the last place of the float64 rotation
        np.testing.assert_allclose(got_k[i].astype(np.float64), ek[i].astype(np.float64),
                                   rtol=np.finfo(dtype).eps, atol=np.finfo(dtype).eps)
    # queries rotated at cache_seqlens + i (causal), rounded to the dtype, against the cache as left
    qpos = lens[:, None] + np.arange(sn)[None, :]
    qr = rotate(q.astype(np.float64), cos.astype(np.float64), sin.astype(np.float64), qpos[:, :, None], False)
    qr = qr.astype(dtype).astype(np.float64)
    after = lens + knew
    ref_o, ref_l = attention(qr, [x.astype(np.float64) for x in got_k], [x.astype(np.float64) for x in got_v], after,
                             sn, True, np.float64)
    low_o, low_l = attention(qr, got_k, got_v, after, sn, True, dtype)
    low_o = low_o.astype(dtype).astype(np.float64)
    err, naive = np.abs(out.astype(np.float64) - ref_o).max(), np.abs(low_o - ref_o).max()
    assert err <= 2 * naive + 1e-5 * max(1.0, np.abs(ref_o).max()), (err, naive)
    lerr, lnaive = np.abs(lse - ref_l).max(), np.abs(low_l - ref_l).max()
    assert lerr <= 2 * lnaive + 1e-5 * max(1.0, np.abs(ref_l).max()), (lerr, lnaive)


def test_with_kvcache_bad_input_leaves_cache():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 1, 4, 64)).astype(np.float32)
    kc = rng.standard_normal((2, 32, 2, 64)).astype(np.float32)
    vc = kc.copy()
    kn = rng.standard_normal((2, 1, 2, 64)).astype(np.float32)
    before = kc.copy()
    with pytest.raises(fa.FlashAttnError) as e:  # sequence 1 is full: no room for its new token
        fa.flash_attn_with_kvcache(q, kc, vc, k=kn, v=kn, cache_seqlens=np.array([3, 32], dtype=np.int32))
    assert e.value.status == "FA_ERR_INVALID_ARG"
    np.testing.assert_array_equal(kc, before)
    with pytest.raises(ValueError):
        fa.flash_attn_with_kvcache(q, kc, vc, k=kn)
