"""flash_attn_with_kvcache's cache_leftpad on NumPy arrays (the CPU backend) and torch tensors:
sequence b attends to its cache positions cache_leftpad[b] .. cache_seqlens[b] + seqlen_knew - 1,
causal aligned against that count, rotary positions absolute (FlashAttention-2's definition),
against the float64 reference of test_kvcache.py with the C suite's pass rule; NaN in every row
before a pad, which the call must not read; bad values."""
import numpy as np
import pytest

import flashattn as fa
from test_kvcache import attention, rotate


def leftpad_case(dtype, rng):
    b, sn, h, hk, d, knew, cap, rd = 3, 2, 4, 2, 64, 2, 96, 32
    lens = np.array([10, 40, cap - knew], dtype=np.int32)
    pads = np.array([3, 40, 0], dtype=np.int32)  # 40: the new keys only
    q = rng.standard_normal((b, sn, h, d)).astype(dtype)
    kn = rng.standard_normal((b, knew, hk, d)).astype(dtype)
    vn = rng.standard_normal((b, knew, hk, d)).astype(dtype)
    kc = rng.standard_normal((b, cap, hk, d)).astype(dtype)
    vc = rng.standard_normal((b, cap, hk, d)).astype(dtype)
    for i in range(b):
        kc[i, : pads[i]] = np.nan
        vc[i, : pads[i]] = np.nan
    theta = np.arange(cap + sn)[:, None] * 10000.0 ** (-2.0 * np.arange(rd // 2)[None, :] / rd)
    cos, sin = np.cos(theta).astype(dtype), np.sin(theta).astype(dtype)
    return dict(q=q, kc=kc, vc=vc, kn=kn, vn=vn, cos=cos, sin=sin, lens=lens, pads=pads, knew=knew)


def check_against_reference(c, out, kc, vc, dtype):
    q, lens, pads, knew, sn = c["q"], c["lens"], c["pads"], c["knew"], c["q"].shape[1]
    b = q.shape[0]
    # queries rotated at the absolute cache_seqlens + i (causal), rounded to the dtype
    qpos = lens[:, None] + np.arange(sn)[None, :]
    qr = rotate(q.astype(np.float64), c["cos"].astype(np.float64), c["sin"].astype(np.float64), qpos[:, :, None],
                False).astype(dtype).astype(np.float64)
    keys, values = [kc[i, pads[i]:] for i in range(b)], [vc[i, pads[i]:] for i in range(b)]
    count = lens + knew - pads
    ref_o, _ = attention(qr, [x.astype(np.float64) for x in keys], [x.astype(np.float64) for x in values], count, sn,
                         True, np.float64)
    low_o, _ = attention(qr, keys, values, count, sn, True, dtype)
    low_o = low_o.astype(dtype).astype(np.float64)
    err, naive = np.abs(out.astype(np.float64) - ref_o).max(), np.abs(low_o - ref_o).max()
    assert err <= 2 * naive + 1e-5 * max(1.0, np.abs(ref_o).max()), (err, naive)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_with_kvcache_leftpad(dtype):
    c = leftpad_case(dtype, np.random.default_rng(11))
    kc, vc = c["kc"].copy(), c["vc"].copy()
    out = fa.flash_attn_with_kvcache(c["q"], kc, vc, k=c["kn"], v=c["vn"], rotary_cos=c["cos"], rotary_sin=c["sin"],
                                     cache_seqlens=c["lens"], cache_leftpad=c["pads"].tolist(), causal=True,
                                     rotary_interleaved=False)
    assert not np.isnan(out).any()
    for i in range(kc.shape[0]):  # the new rows at cache_seqlens, absolute, whatever the pad
        np.testing.assert_array_equal(vc[i, c["lens"][i]: c["lens"][i] + c["knew"]], c["vn"][i])
    check_against_reference(c, out, kc, vc, dtype)


def test_with_kvcache_leftpad_torch():
    torch = pytest.importorskip("torch")
    c = leftpad_case(np.float32, np.random.default_rng(12))
    t = {n: torch.from_numpy(c[n].copy()) for n in ("q", "kc", "vc", "kn", "vn", "cos", "sin")}
    out = fa.flash_attn_with_kvcache(t["q"], t["kc"], t["vc"], k=t["kn"], v=t["vn"], rotary_cos=t["cos"],
                                     rotary_sin=t["sin"], cache_seqlens=torch.from_numpy(c["lens"]),
                                     cache_leftpad=torch.from_numpy(c["pads"]), causal=True,
                                     rotary_interleaved=False)
    check_against_reference(c, out.numpy(), t["kc"].numpy(), t["vc"].numpy(), np.float32)


def test_with_kvcache_leftpad_bad_values():
    c = leftpad_case(np.float32, np.random.default_rng(13))
    kc, vc = c["kc"].copy(), c["vc"].copy()
    for pads, says in (([-1, 0, 0], "cache_leftpad[0] = -1"), ([0, 41, 0], "cache_leftpad[1] = 41")):
        with pytest.raises(fa.FlashAttnError, match=says.replace("[", r"\[").replace("]", r"\]")) as e:
            fa.flash_attn_with_kvcache(c["q"], kc, vc, k=c["kn"], v=c["vn"], cache_seqlens=c["lens"],
                                       cache_leftpad=np.array(pads, dtype=np.int32))
        assert e.value.status == "FA_ERR_INVALID_ARG"
        np.testing.assert_array_equal(kc, c["kc"])  # nothing appended
    with pytest.raises(ValueError, match="cache_leftpad"):
        fa.flash_attn_with_kvcache(c["q"], kc, vc, cache_seqlens=c["lens"], cache_leftpad=np.zeros((3, 1), np.int32))
    # a paged cache: refused, as FlashAttention-2 does
    pages = np.zeros((6, 16, 2, 64), dtype=np.float32)
    with pytest.raises(fa.FlashAttnError, match="paged") as e:
        fa.flash_attn_with_kvcache(c["q"], pages, pages.copy(), cache_seqlens=np.array([1, 1, 1], np.int32),
                                   block_table=np.arange(6, dtype=np.int32).reshape(3, 2),
                                   cache_leftpad=np.zeros(3, np.int32))
    assert e.value.status == "FA_ERR_INVALID_ARG"
