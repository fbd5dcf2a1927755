"""Property-based tests (Hypothesis, derandomized: the same examples on every run) of
flash_attn_with_kvcache and flash_attn_func on NumPy arrays (the CPU backend) against the float64
oracle of reference.py: random valid configurations (contiguous and paged caches with pages of
any multiple of 16, pages shared between sequences for reading, GQA and MQA, rotary in both
layouts with tables exactly as long as needed or longer, windows, softcap, ALiBi, splits, a batch
index, appended tokens) checked with the conformance rule (2x the error of the plain
same-precision implementation, plus 1e-5 max(1, |ref|)), and the caches: appended rows where
they belong, every other byte unchanged."""
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

import flashattn as fa  # noqa: E402
import reference as ref  # noqa: E402

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None, print_blob=True)
DTYPES = [np.float32, np.float16]


def rotate(x, cos, sin, pos, interleaved):
    """x [n, heads, d] float64 rotated at positions pos [n] (FlashAttention-2's rotary)."""
    x = x.copy()
    rd = 2 * cos.shape[1]
    c, s = cos[pos][:, None, :], sin[pos][:, None, :]
    if interleaved:
        a, b = x[..., 0:rd:2].copy(), x[..., 1:rd:2].copy()
        x[..., 0:rd:2], x[..., 1:rd:2] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., : rd // 2].copy(), x[..., rd // 2: rd].copy()
        x[..., : rd // 2], x[..., rd // 2: rd] = a * c - b * s, a * s + b * c
    return x


@st.composite
def kv_configs(draw):
    c = dict(dtype=draw(st.sampled_from(DTYPES)), batch=draw(st.integers(1, 3)), sn=draw(st.integers(1, 4)),
             hk=draw(st.sampled_from([1, 2])), group=draw(st.sampled_from([1, 2, 4])),
             d=draw(st.sampled_from([16, 40, 64])), knew=draw(st.integers(0, 3)),
             page=draw(st.sampled_from([0, 16, 32, 48, 80])), causal=draw(st.booleans()),
             splits=draw(st.integers(0, 4)), seed=draw(st.integers(0, 2 ** 32 - 1)))
    c["pages_per_seq"] = draw(st.integers(1, 3)) if c["page"] else 0
    c["capacity"] = c["page"] * c["pages_per_seq"] if c["page"] else draw(st.integers(max(c["knew"], 1), 130))
    c["lens"] = [draw(st.integers(0, c["capacity"] - c["knew"])) for _ in range(c["batch"])]
    c["window"] = draw(st.sampled_from([(-1, -1), (-1, -1), (0, 0), (7, -1), (20, 3), (3, 0)]))
    c["softcap"] = draw(st.sampled_from([0.0, 0.0, 5.0, 30.0]))
    c["alibi"] = draw(st.sampled_from([None, None, "heads", "batch"]))
    c["rotary"] = draw(st.sampled_from([None, None, "halves", "interleaved"]))
    c["rotary_dim"] = draw(st.sampled_from([8, 16])) if c["rotary"] else 0
    c["rotary_extra"] = draw(st.sampled_from([0, 0, 3]))  # 0: the table exactly as long as needed
    c["batch_idx"] = not c["page"] and draw(st.booleans())
    c["share_prefix"] = c["page"] > 0 and draw(st.booleans())
    return c


def make_case(c):
    rng = np.random.default_rng(c["seed"])
    dt, b, sn, hk, d = c["dtype"], c["batch"], c["sn"], c["hk"], c["d"]
    h, knew, lens = hk * c["group"], c["knew"], np.array(c["lens"], dtype=np.int32)
    q = rng.standard_normal((b, sn, h, d)).astype(dt)
    kn = rng.standard_normal((b, knew, hk, d)).astype(dt) if knew else None
    vn = rng.standard_normal((b, knew, hk, d)).astype(dt) if knew else None
    if c["page"]:
        pps, page = c["pages_per_seq"], c["page"]
        table = rng.permutation(b * pps + 2)[: b * pps].reshape(b, pps).astype(np.int32)
        if c["share_prefix"] and b > 1:
            # sequences whose first page every one of them reads whole and none appends into share it
            full = [i for i in range(b) if lens[i] >= page]
            for i in full[1:]:
                table[i, 0] = table[full[0], 0]
        shape = (b * pps + 2, page, hk, d)
        rows = [table[i] for i in range(b)]
    else:
        nb = b + 2 if c["batch_idx"] else b
        shape = (nb, c["capacity"], hk, d)
        idx = rng.permutation(nb)[:b].astype(np.int32) if c["batch_idx"] else None
        table = None
    kc, vc = rng.standard_normal(shape).astype(dt), rng.standard_normal(shape).astype(dt)
    args = dict(k=kn, v=vn, cache_seqlens=lens, block_table=table, causal=c["causal"], window_size=c["window"],
                softcap=c["softcap"], num_splits=c["splits"], return_softmax_lse=True)
    if not c["page"] and c["batch_idx"]:
        args["cache_batch_idx"] = idx
    slopes = None
    if c["alibi"]:
        slopes = rng.uniform(0.01, 0.5, (h,) if c["alibi"] == "heads" else (b, h)).astype(np.float32)
        args["alibi_slopes"] = slopes
    cos = sin = None
    if c["rotary"]:
        advance = c["causal"] or c["window"] != (-1, -1)
        need = max(int(lens.max()) + (knew if knew else 0), int(lens.max()) + (sn if advance else 1))
        n = need + c["rotary_extra"]
        theta = np.arange(n)[:, None] * 10000.0 ** (-2.0 * np.arange(c["rotary_dim"] // 2)[None, :] / c["rotary_dim"])
        cos, sin = np.cos(theta).astype(dt), np.sin(theta).astype(dt)
        args.update(rotary_cos=cos, rotary_sin=sin, rotary_interleaved=c["rotary"] == "interleaved")

    def slot(i, t):
        """(cache row, position in it) of token t of sequence i"""
        if c["page"]:
            return rows[i][t // c["page"]], t % c["page"]
        return (idx[i] if c["batch_idx"] else i), t

    return q, kc, vc, args, slopes, cos, sin, slot


@SETTINGS
@given(kv_configs())
def test_kvcache_matches_float64(c):
    q, kc, vc, args, slopes, cos, sin, slot = make_case(c)
    dt, b, sn, knew, lens = c["dtype"], c["batch"], c["sn"], c["knew"], args["cache_seqlens"]
    kc0, vc0 = kc.copy(), vc.copy()
    out, lse = fa.flash_attn_with_kvcache(q, kc, vc, **args)
    # the caches: the new rows where they belong (rotated keys within one unit in the last place of
    # the float64 rotation), every other element as it was
    ek, ev, written = kc0.copy(), vc0.copy(), np.zeros(kc.shape[:2], dtype=bool)
    for i in range(b):
        for j in range(knew):
            r, t = slot(i, lens[i] + j)
            written[r, t] = True
            kr = args["k"][i, j].astype(np.float64)
            if cos is not None:
                kr = rotate(kr[None], cos.astype(np.float64), sin.astype(np.float64), np.array([lens[i] + j]),
                            args["rotary_interleaved"])[0]
            ek[r, t], ev[r, t] = kr.astype(dt), args["v"][i, j]
    np.testing.assert_array_equal(vc, ev)
    np.testing.assert_array_equal(kc[~written], kc0[~written])
    np.testing.assert_allclose(kc[written].astype(np.float64), ek[written].astype(np.float64),
                               rtol=np.finfo(dt).eps, atol=np.finfo(dt).eps)
    # the attention, against the cache as the call left it
    advance = c["causal"] or c["window"] != (-1, -1)
    scale = 1.0 / np.sqrt(c["d"])
    for i in range(b):
        sk = int(lens[i]) + knew
        if sk == 0:  # no key: O = 0 and LSE = -inf
            assert not out[i].any() and np.isneginf(lse[i]).all(), i
            continue
        keys = np.array([kc[slot(i, t)] for t in range(sk)]).reshape(sk, c["hk"], c["d"])
        vals = np.array([vc[slot(i, t)] for t in range(sk)]).reshape(sk, c["hk"], c["d"])
        qi = q_lo = q[i].astype(np.float64)
        if cos is not None:
            # the oracle rotates in float64; the plain implementation in float32, rounding the
            # rotated q to its dtype as the library does
            pos = lens[i] + (np.arange(sn) if advance else np.zeros(sn, dtype=np.int64))
            qi = rotate(qi, cos.astype(np.float64), sin.astype(np.float64), pos, args["rotary_interleaved"])
            q_lo = rotate(q[i].astype(np.float32), cos.astype(np.float32), sin.astype(np.float32), pos,
                          args["rotary_interleaved"]).astype(dt)
        vis = ref.visible(sn, sk, c["causal"], c["window"])
        sl = None if slopes is None else (slopes if slopes.ndim == 1 else slopes[i])
        o64, l64 = ref.attention(qi, keys, vals, scale, vis, softcap=c["softcap"], slopes=sl)
        o_lo, l_lo = ref.attention(q_lo, keys, vals, scale, vis, dtype=dt, softcap=c["softcap"], slopes=sl)
        err, finite = ref.error(out[i], o64)
        assert finite and err <= ref.bound(2, ref.error(o_lo, o64)[0], o64), (i, err)
        lerr, lfinite = ref.error(lse[i].T, l64.T)
        assert lfinite and lerr <= ref.bound(2, ref.error(l_lo.T, l64.T)[0], l64.T), (i, lerr)
        assert np.array_equal(np.isneginf(lse[i]), np.isneginf(l64)), i  # rows that see no key


@st.composite
def dense_configs(draw):
    return dict(dtype=draw(st.sampled_from(DTYPES)), batch=draw(st.integers(1, 2)), sq=draw(st.integers(1, 70)),
                sk=draw(st.integers(1, 90)), hk=draw(st.sampled_from([1, 2])), group=draw(st.sampled_from([1, 3])),
                d=draw(st.sampled_from([16, 40, 64])), causal=draw(st.booleans()),
                window=draw(st.sampled_from([(-1, -1), (5, -1), (10, 2), (0, 0)])),
                softcap=draw(st.sampled_from([0.0, 10.0])), alibi=draw(st.booleans()),
                seed=draw(st.integers(0, 2 ** 32 - 1)))


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(dense_configs())
def test_dense_matches_float64(c):
    rng = np.random.default_rng(c["seed"])
    dt, b, sq, sk, hk, d = c["dtype"], c["batch"], c["sq"], c["sk"], c["hk"], c["d"]
    h = hk * c["group"]
    q = rng.standard_normal((b, sq, h, d)).astype(dt)
    k = rng.standard_normal((b, sk, hk, d)).astype(dt)
    v = rng.standard_normal((b, sk, hk, d)).astype(dt)
    slopes = rng.uniform(0.01, 0.5, h).astype(np.float32) if c["alibi"] else None
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=c["causal"], window_size=c["window"], softcap=c["softcap"],
                                     alibi_slopes=slopes, return_attn_probs=True)
    vis = ref.visible(sq, sk, c["causal"], c["window"])
    for i in range(b):
        o64, l64 = ref.attention(q[i], k[i], v[i], 1.0 / np.sqrt(d), vis, softcap=c["softcap"], slopes=slopes)
        o_lo, _ = ref.attention(q[i], k[i], v[i], 1.0 / np.sqrt(d), vis, dtype=dt, softcap=c["softcap"],
                                slopes=slopes)
        err, finite = ref.error(out[i], o64)
        assert finite and err <= ref.bound(2, ref.error(o_lo, o64)[0], o64), (i, err)
        assert np.array_equal(np.isneginf(lse[i]), np.isneginf(l64)), i
