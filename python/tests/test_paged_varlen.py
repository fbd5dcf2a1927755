"""flash_attn_varlen_func with block_table (FlashAttention-2's paged keys and values): each
sequence's output against float64 with the C suite's pass rule (reference.py: within 2x the error
of a plain fp32 NumPy implementation), the same bits as the call on the packed keys and values,
bad tables refused with the library's message, and (torch) no backward through it."""
import os

import numpy as np
import pytest

import flashattn as fa
import reference as ref

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


def paged(rng, kv, lens, page_size, spare=3):
    """Each packed array of kv [total, hk, d] into a cache [num_pages, page_size, hk, d] of the
    same shuffled pages (the spare pages and unused rows hold noise), and their block table
    [batch, max_pages + 1] (entries past a sequence's pages hold -1: never read)."""
    need = [-(-n // page_size) for n in lens]
    num_pages = sum(need) + spare
    order = rng.permutation(num_pages)
    caches = [(100 * rng.standard_normal((num_pages, page_size) + x.shape[1:])).astype(x.dtype) for x in kv]
    table = np.full((len(lens), max(need) + 1), -1, np.int32)
    start, used = 0, 0
    for b, n in enumerate(lens):
        for i in range(need[b]):
            table[b, i] = order[used]
            used += 1
            for cache, x in zip(caches, kv):
                rows = x[start + i * page_size:start + min(n, (i + 1) * page_size)]
                cache[table[b, i], :len(rows)] = rows
        start += n
    return caches, table


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("page_size", [1, 5, 16, 128])
def test_paged_varlen_matches_float64_and_the_packed_call(dtype, page_size):
    rng = np.random.default_rng(page_size)
    lens_q, lens_k = [3, 17, 0, 9], [11, 40, 6, 9]
    h, hk, d = 4, 2, 32
    causal = page_size != 5
    softcap, slopes = (2.0, np.array([0.5, 0.25, 0.125, 0.0625], np.float32)) if page_size == 16 else (0.0, None)
    cu_q, cu_k = np.cumsum([0] + lens_q).astype(np.int32), np.cumsum([0] + lens_k).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], h, d)).astype(dtype)
    k = rng.standard_normal((cu_k[-1], hk, d)).astype(dtype)
    v = rng.standard_normal((cu_k[-1], hk, d)).astype(dtype)
    (k_cache, v_cache), table = paged(rng, (k, v), lens_k, page_size)
    options = dict(causal=causal, softcap=softcap, alibi_slopes=slopes, return_attn_probs=True)
    o, lse, _ = fa.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, max(lens_q), max(lens_k),
                                          block_table=table, **options)
    want, want_lse, _ = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **options)
    np.testing.assert_array_equal(o, want)
    np.testing.assert_array_equal(lse, want_lse)
    f64 = lambda x: np.asarray(x).astype(np.float64)
    f32 = lambda x: np.asarray(x).astype(np.float32)
    for s in range(len(lens_q)):
        a, e, c, f = cu_q[s], cu_q[s + 1], cu_k[s], cu_k[s + 1]
        if e == a:
            continue
        vis = ref.visible(e - a, f - c, causal, (-1, -1))
        args = dict(softcap=softcap, slopes=slopes)
        ro, rl = ref.attention(f64(q[a:e]), f64(k[c:f]), f64(v[c:f]), d ** -0.5, vis, **args)
        no, nl = ref.attention(f32(q[a:e]), f32(k[c:f]), f32(v[c:f]), d ** -0.5, vis, dtype, **args)
        err, ok = ref.error(o[a:e], ro)
        assert ok, f"sequence {s}: O not finite where the reference is"
        assert err <= ref.bound(2.0, ref.error(no, ro)[0], ro), f"sequence {s}: O error {err}"
        err, _ = ref.error(lse[:, a:e], rl)
        assert err <= ref.bound(2.0, ref.error(nl, rl)[0], rl), f"sequence {s}: LSE error {err}"


def test_paged_varlen_bad_tables():
    rng = np.random.default_rng(3)
    cu = np.array([0, 4, 9], np.int32)
    q = rng.standard_normal((9, 2, 16)).astype(np.float32)
    cache = rng.standard_normal((6, 4, 1, 16)).astype(np.float32)
    table = np.array([[0, 5, 1], [2, 3, 4]], np.int32)
    fa.flash_attn_varlen_func(q, cache, cache, cu, cu, 5, 5, block_table=table)  # the base is valid
    for b, i, value in ((1, 1, 6), (0, 0, -1)):
        bad = table.copy()
        bad[b, i] = value
        with pytest.raises(fa.FlashAttnError, match=rf"block_table\[{b}\]\[{i}\] = {value} \(sequence {b}\)"):
            fa.flash_attn_varlen_func(q, cache, cache, cu, cu, 5, 5, block_table=bad)
    with pytest.raises(fa.FlashAttnError, match="sequence 1 has 5 keys"):  # one page of 4 rows is too short
        fa.flash_attn_varlen_func(q, cache, cache, cu, cu, 5, 5, block_table=table[:, :1])
    with pytest.raises(fa.FlashAttnError, match="ndim"):  # packed k with a table
        fa.flash_attn_varlen_func(q, cache[:, 0], cache[:, 0], cu, cu, 5, 5, block_table=table)
    with pytest.raises(ValueError, match="block_table must be"):
        fa.flash_attn_varlen_func(q, cache, cache, cu, cu, 5, 5, block_table=table[0])


def test_paged_varlen_torch_has_no_backward():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    q = torch.from_numpy(rng.standard_normal((9, 2, 16)).astype(np.float32)).requires_grad_()
    cache = torch.from_numpy(rng.standard_normal((6, 4, 1, 16)).astype(np.float32))
    table = torch.tensor([[0, 5, 1], [2, 3, 4]], dtype=torch.int32)
    o = fa.flash_attn_varlen_func(q, cache, cache, cu, cu, 5, 5, causal=True, block_table=table)
    packed = torch.cat([cache[[0, 5]].reshape(8, 1, 16)[:4], cache[[2, 3]].reshape(8, 1, 16)[:5]])
    torch.testing.assert_close(o, fa.flash_attn_varlen_func(q, packed, packed, cu, cu, 5, 5, causal=True),
                               rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="block_table"):
        o.sum().backward()
