"""FlashAttention-2's positional order for every public function (inspect.signature against FA2's
parameter lists as flash_attn/flash_attn_interface.py declares them), positional softcap and
alibi_slopes meaning what they mean in FA2, and TypeError for inputs that are not arrays and for
options of the wrong type (nothing written then)."""
import inspect

import numpy as np
import pytest

import flashattn as fa

# after the arrays, in FlashAttention-2's order, with FA2's defaults
OPTIONS = [("dropout_p", 0.0), ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
           ("softcap", 0.0), ("alibi_slopes", None), ("deterministic", False), ("return_attn_probs", False)]
REQUIRED = {
    "flash_attn_func": ["q", "k", "v"],
    "flash_attn_kvpacked_func": ["q", "kv"],
    "flash_attn_qkvpacked_func": ["qkv"],
    "flash_attn_varlen_func": ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"],
    "flash_attn_varlen_kvpacked_func": ["q", "kv", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"],
    "flash_attn_varlen_qkvpacked_func": ["qkv", "cu_seqlens", "max_seqlen"],
    # flashattn's own: block_mask and block_size, then flash_attn_func's options
    "block_sparse_attn_func": ["q", "k", "v", "block_mask", "block_size"],
}
TRAILING = {"flash_attn_varlen_func": [("block_table", None)]}  # FA2 >= 2.6 ends the varlen call with it
KVCACHE = [("q", inspect.Parameter.empty), ("k_cache", inspect.Parameter.empty), ("v_cache", inspect.Parameter.empty),
           ("k", None), ("v", None), ("rotary_cos", None), ("rotary_sin", None), ("cache_seqlens", None),
           ("cache_batch_idx", None), ("cache_leftpad", None), ("block_table", None), ("softmax_scale", None),
           ("causal", False), ("window_size", (-1, -1)), ("softcap", 0.0), ("rotary_interleaved", True),
           ("alibi_slopes", None), ("num_splits", 0), ("return_softmax_lse", False)]
BACKWARD = [(n, inspect.Parameter.empty) for n in ("dout", "q", "k", "v", "out", "softmax_lse")] + OPTIONS[:-1]


def positional(fn):
    """(name, default) of the parameters that may be passed by position, and the keyword-only names."""
    params = inspect.signature(fn).parameters.values()
    pos = [(p.name, p.default) for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    kw = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert all(p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY) for p in params)
    return pos, kw


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_positional_order_is_flash_attention_2s(name):
    pos, kw = positional(getattr(fa, name))
    expected = [(n, inspect.Parameter.empty) for n in REQUIRED[name]] + OPTIONS + TRAILING.get(name, [])
    assert pos == expected
    assert {"seed", "offset", "backend", "learnable_sink"} <= set(kw)  # flashattn's extras, keyword-only


def test_kvcache_positional_order_is_flash_attention_2s():
    pos, kw = positional(fa.flash_attn_with_kvcache)
    assert pos == KVCACHE
    assert set(kw) == {"check_on_device", "backend", "learnable_sink"}


def test_backward_takes_the_forwards_order():
    pos, kw = positional(fa.flash_attn_backward)
    assert pos == BACKWARD
    assert {"seed", "offset", "cu_seqlens_q", "block_mask", "backend"} <= set(kw)


def arrays(seed, b=2, s=24, h=4, hk=2, d=32, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((b, s, h, d)).astype(dtype), rng.standard_normal((b, s, hk, d)).astype(dtype),
            rng.standard_normal((b, s, hk, d)).astype(dtype), rng.standard_normal((b, s, h, d)).astype(dtype))


SLOPES = (2.0 ** (-8.0 * np.arange(1, 5) / 4)).astype(np.float32)


def test_positional_softcap_and_alibi():
    """The issue's call: position 8 is softcap, position 9 alibi_slopes, as in FA2."""
    q, k, v, _ = arrays(1)
    qq = np.ascontiguousarray(np.repeat(k, 2, axis=2))  # MHA for the packed variants below
    by_position = fa.flash_attn_func(q, q, q, 0.0, None, True, (-1, -1), 30.0)
    np.testing.assert_array_equal(by_position, fa.flash_attn_func(q, q, q, causal=True, softcap=30.0))
    assert not np.array_equal(by_position, fa.flash_attn_func(q, q, q, causal=True))
    o = fa.flash_attn_func(q, k, v, 0.0, None, False, (-1, -1), 1.5, SLOPES)
    np.testing.assert_array_equal(o, fa.flash_attn_func(q, k, v, softcap=1.5, alibi_slopes=SLOPES))
    assert not np.array_equal(o, fa.flash_attn_func(q, k, v, softcap=1.5))
    assert not np.array_equal(o, fa.flash_attn_func(q, k, v, alibi_slopes=SLOPES))
    # positions 10 and 11: deterministic (a no-op on the forward) and return_attn_probs
    out, lse, probs = fa.flash_attn_func(q, k, v, 0.0, None, False, (-1, -1), 1.5, SLOPES, True, True)
    np.testing.assert_array_equal(out, o)
    assert lse.shape == (2, 4, 24) and probs.shape == (2, 4, 24, q.shape[1])
    kv = np.ascontiguousarray(np.stack([qq, qq], axis=2))
    qkv = np.ascontiguousarray(np.stack([qq, qq, qq], axis=2))
    want = fa.flash_attn_func(qq, qq, qq, softcap=1.5, alibi_slopes=SLOPES, causal=True)
    np.testing.assert_array_equal(fa.flash_attn_kvpacked_func(qq, kv, 0.0, None, True, (-1, -1), 1.5, SLOPES), want)
    np.testing.assert_array_equal(fa.flash_attn_qkvpacked_func(qkv, 0.0, None, True, (-1, -1), 1.5, SLOPES), want)
    bits = np.ones((1, 1), np.uint8)
    np.testing.assert_array_equal(
        fa.block_sparse_attn_func(q, k, v, bits, (32, 32), 0.0, None, False, (-1, -1), 1.5, SLOPES), o)


def test_positional_softcap_and_alibi_varlen_and_backward():
    q, k, v, do = arrays(2)
    cu = np.array([0, 10, 24], np.int32)
    flat = [np.ascontiguousarray(x[0]) for x in (q, k, v, do)]
    o, lse, _ = fa.flash_attn_varlen_func(*flat[:3], cu, cu, 14, 14, 0.0, None, True, (-1, -1), 1.5, SLOPES, False,
                                          True)
    want, want_lse, _ = fa.flash_attn_varlen_func(*flat[:3], cu, cu, 14, 14, causal=True, softcap=1.5,
                                                  alibi_slopes=SLOPES, return_attn_probs=True)
    np.testing.assert_array_equal(o, want)
    np.testing.assert_array_equal(lse, want_lse)
    assert not np.array_equal(o, fa.flash_attn_varlen_func(*flat[:3], cu, cu, 14, 14, causal=True))
    qkv = np.ascontiguousarray(np.stack([flat[1]] * 3, axis=1))
    np.testing.assert_array_equal(
        fa.flash_attn_varlen_qkvpacked_func(qkv, cu, 14, 0.0, None, True, (-1, -1), 1.5, SLOPES[:2]),
        fa.flash_attn_varlen_func(flat[1], flat[1], flat[1], cu, cu, 14, 14, causal=True, softcap=1.5,
                                  alibi_slopes=SLOPES[:2]))
    kv = np.ascontiguousarray(np.stack([flat[1], flat[2]], axis=1))
    np.testing.assert_array_equal(
        fa.flash_attn_varlen_kvpacked_func(flat[0], kv, cu, cu, 14, 14, 0.0, None, True, (-1, -1), 1.5, SLOPES), o)
    # block_table, the last positional: pages of one row, key j of sequence b in page cu[b] + j
    pages = [np.ascontiguousarray(x[:, None]) for x in flat[1:3]]
    table = np.array([list(range(0, 10)) + [0] * 4, list(range(10, 24))], np.int32)
    np.testing.assert_array_equal(
        fa.flash_attn_varlen_func(flat[0], *pages, cu, cu, 14, 14, 0.0, None, True, (-1, -1), 1.5, SLOPES, False,
                                  False, table), o)
    o4, lse4, _ = fa.flash_attn_func(q, k, v, causal=True, softcap=1.5, alibi_slopes=SLOPES, return_attn_probs=True)
    by_position = fa.flash_attn_backward(do, q, k, v, o4, lse4, 0.0, None, True, (-1, -1), 1.5, SLOPES, True)
    by_keyword = fa.flash_attn_backward(do, q, k, v, o4, lse4, causal=True, softcap=1.5, alibi_slopes=SLOPES,
                                        deterministic=True)
    without = fa.flash_attn_backward(do, q, k, v, o4, lse4, causal=True, deterministic=True)
    for a, b, c in zip(by_position, by_keyword, without):
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)


def test_kvcache_positional():
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 1, 4, 32)).astype(np.float32)
    kc = rng.standard_normal((2, 16, 2, 32)).astype(np.float32)
    vc = rng.standard_normal((2, 16, 2, 32)).astype(np.float32)
    lens = np.array([5, 9], np.int32)
    # positions 12 .. 19: softmax_scale, causal, window_size, softcap, rotary_interleaved, alibi_slopes,
    # num_splits, return_softmax_lse
    o, lse = fa.flash_attn_with_kvcache(q, kc, vc, None, None, None, None, lens, None, None, None, 0.3, True, (-1, -1),
                                        1.5, True, SLOPES, 0, True)
    want, want_lse = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, softmax_scale=0.3, causal=True,
                                                softcap=1.5, alibi_slopes=SLOPES, return_softmax_lse=True)
    np.testing.assert_array_equal(o, want)
    np.testing.assert_array_equal(lse, want_lse)
    assert not np.array_equal(o, fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, softmax_scale=0.3,
                                                            causal=True))


NOT_ARRAYS = [[[[[1.0]]]], None, 3.0, "q"]


@pytest.mark.parametrize("bad", NOT_ARRAYS, ids=lambda b: type(b).__name__)
def test_non_array_input_is_a_type_error(bad):
    q, k, v, do = arrays(5)
    cu = np.array([0, 24], np.int32)
    calls = [
        ("q", lambda: fa.flash_attn_func(bad, k, v)),
        ("v", lambda: fa.flash_attn_func(q, k, bad)),
        ("kv", lambda: fa.flash_attn_kvpacked_func(q, bad)),
        ("qkv", lambda: fa.flash_attn_qkvpacked_func(bad)),
        ("k", lambda: fa.flash_attn_varlen_func(q[0], bad, v[0], cu, cu, 24, 24)),
        ("kv", lambda: fa.flash_attn_varlen_kvpacked_func(q[0], bad, cu, cu, 24, 24)),
        ("qkv", lambda: fa.flash_attn_varlen_qkvpacked_func(bad, cu, 24)),
        ("q", lambda: fa.block_sparse_attn_func(bad, k, v, np.ones((1, 1)), (32, 32))),
        ("dout", lambda: fa.flash_attn_backward(bad, q, k, v, q, q)),
        ("softmax_lse", lambda: fa.flash_attn_backward(do, q, k, v, q, bad)),
        ("k_cache", lambda: fa.flash_attn_with_kvcache(q, bad, v)),
        ("rotary_cos", lambda: fa.flash_attn_with_kvcache(q, k, v, rotary_cos=bad, rotary_sin=bad)),
    ]
    for name, call in calls:
        if bad is None and name == "rotary_cos":
            continue  # None is "no rotary" there
        with pytest.raises(TypeError, match=f"^{name}: expected a NumPy array"):
            call()


@pytest.mark.parametrize("option,value", [
    ("dropout_p", "0.1"), ("dropout_p", True), ("softmax_scale", "0.5"), ("causal", "yes"), ("causal", 0.5),
    ("causal", None), ("window_size", 4), ("window_size", (1.5, 2)), ("window_size", (1, 2, 3)), ("softcap", "30"),
    ("softcap", True), ("alibi_slopes", 0.5), ("alibi_slopes", True), ("alibi_slopes", "slopes"),
    ("deterministic", "no"), ("return_attn_probs", 2), ("seed", 1.5), ("offset", "0"), ("backend", 3),
])
def test_option_of_the_wrong_type_is_a_type_error(option, value):
    q, k, v, do = arrays(6)
    with pytest.raises(TypeError, match=option):
        fa.flash_attn_func(q, k, v, **{option: value})
    if option != "return_attn_probs":
        o, lse, _ = fa.flash_attn_func(q, k, v, return_attn_probs=True)
        with pytest.raises(TypeError, match=option):
            fa.flash_attn_backward(do, q, k, v, o, lse, **{option: value})


def test_the_old_positional_order_is_refused():
    """A call written for the order before FA2's (deterministic, return_attn_probs at 8 and 9)
    now puts booleans into softcap and alibi_slopes: refused, not misread."""
    q, k, v, _ = arrays(7)
    with pytest.raises(TypeError, match="softcap"):
        fa.flash_attn_func(q, k, v, 0.0, None, False, (-1, -1), True)
    with pytest.raises(TypeError, match="alibi_slopes"):
        fa.flash_attn_func(q, k, v, 0.0, None, False, (-1, -1), 0.0, True)


def test_varlen_and_kvcache_options_of_the_wrong_type():
    q, k, v, _ = arrays(8)
    cu = np.array([0, 24], np.int32)
    with pytest.raises(TypeError, match="max_seqlen_q"):
        fa.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 24.0, 24)
    with pytest.raises(TypeError, match="cu_seqlens_q"):
        fa.flash_attn_varlen_func(q[0], k[0], v[0], "0,24", cu, 24, 24)
    with pytest.raises(TypeError, match="block_size"):
        fa.block_sparse_attn_func(q, k, v, np.ones((1, 1)), 32)
    kc, vc = k.copy(), v.copy()
    kn = np.ones((2, 1, 2, 32), np.float32)
    for kwargs, name in [(dict(causal="yes"), "causal"), (dict(num_splits=1.5), "num_splits"),
                         (dict(rotary_interleaved="no", rotary_cos=np.ones((30, 8), np.float32),
                               rotary_sin=np.ones((30, 8), np.float32)), "rotary_interleaved"),
                         (dict(return_softmax_lse="no"), "return_softmax_lse"),
                         (dict(cache_seqlens="5"), "cache_seqlens")]:
        with pytest.raises(TypeError, match=name):
            fa.flash_attn_with_kvcache(q[:, :1], kc, vc, k=kn, v=kn, **kwargs)
        np.testing.assert_array_equal(kc, k)  # the cache was not written
        np.testing.assert_array_equal(vc, v)
