"""Bad input through the package, NumPy arrays and torch tensors alike: a clear error naming the
argument, nothing written before the refusal, no value cast silently. The rules that are the
library's (overlapping appends, ALiBi slopes, softmax_scale, empty arrays) come back from C as
FlashAttnError; what only Python sees (its integers, read-only buffers) raises TypeError,
OverflowError or ValueError before the call. Also the NaN rule: NaN in a query or in a visible
key makes the row NaN on every entry point."""
import re
import numpy as np
import pytest

import flashattn as fa

try:
    import torch
except ImportError:
    torch = None


def kv_case(batch=2, pages=None, rows=None, page=16):
    """q [batch, 1, 4, 16], new k / v [batch, 1, 2, 16]; a paged cache of `pages` pages, or a
    contiguous one of `rows` rows (batch by default)."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((batch, 1, 4, 16)).astype(np.float32)
    kn = rng.standard_normal((batch, 1, 2, 16)).astype(np.float32)
    shape = (pages, page, 2, 16) if pages else (rows or batch, 32, 2, 16)
    kc = rng.standard_normal(shape).astype(np.float32)
    return q, kc, kc + 1, kn, kn + 1


def refused(error, fn, *caches, match=None):
    """fn() raises error (FlashAttnError: status FA_ERR_INVALID_ARG), the caches unchanged."""
    before = [c.copy() for c in caches]
    with pytest.raises(error, match=match) as e:
        fn()
    if error is fa.FlashAttnError:
        assert e.value.status == "FA_ERR_INVALID_ARG", e.value
    for c, b in zip(caches, before):
        np.testing.assert_array_equal(c, b)


# ---------------------------------------------------------------- appends that would lose a key

def test_two_sequences_appending_into_one_page_are_refused():
    q, kc, vc, kn, vn = kv_case(pages=4)
    table = np.array([[1], [1]], dtype=np.int32)
    refused(fa.FlashAttnError, lambda: fa.flash_attn_with_kvcache(
        q, kc, vc, k=kn, v=vn, cache_seqlens=np.array([3, 3], dtype=np.int32), block_table=table), kc, vc,
        match="page 1")


def test_one_page_twice_in_a_row_appended_into_is_refused():
    q, kc, vc, kn, vn = kv_case(pages=4)
    table = np.array([[0, 0], [2, 3]], dtype=np.int32)  # sequence 0's token 16 overwrites its key 0
    refused(fa.FlashAttnError, lambda: fa.flash_attn_with_kvcache(
        q, kc, vc, k=kn, v=vn, cache_seqlens=np.array([16, 3], dtype=np.int32), block_table=table), kc, vc,
        match="block_table")


def test_repeated_cache_batch_idx_with_appends_is_refused():
    q, kc, vc, kn, vn = kv_case(rows=3)
    refused(fa.FlashAttnError, lambda: fa.flash_attn_with_kvcache(
        q, kc, vc, k=kn, v=vn, cache_seqlens=np.array([3, 3], dtype=np.int32),
        cache_batch_idx=np.array([1, 1], dtype=np.int32)), kc, vc, match="cache_batch_idx")


def test_pages_and_rows_shared_for_reading_stay_legal():
    """A common prefix page read whole by both sequences, each appending into a page of its own;
    a cache row shared by two sequences that append nothing: the same result as unshared copies."""
    q, kc, vc, kn, vn = kv_case(pages=5)
    lens = np.array([16, 20], dtype=np.int32)
    shared = np.array([[0, 1], [0, 2]], dtype=np.int32)
    own_k, own_v = kc.copy(), vc.copy()
    own_k[3], own_v[3] = kc[0], vc[0]
    out = fa.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=lens, block_table=shared)
    want = fa.flash_attn_with_kvcache(q, own_k, own_v, k=kn, v=vn, cache_seqlens=lens,
                                      block_table=np.array([[0, 1], [3, 2]], dtype=np.int32))
    np.testing.assert_array_equal(out, want)
    q, kc, vc, _, _ = kv_case(rows=3)
    out = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array([7, 7], dtype=np.int32),
                                     cache_batch_idx=np.array([2, 2], dtype=np.int32))
    np.testing.assert_array_equal(out[0], fa.flash_attn_with_kvcache(
        q[:1], kc[2:3], vc[2:3], cache_seqlens=np.array([7], dtype=np.int32))[0])


# ---------------------------------------------------------------- integers: refused, never cast

INT_ARRAYS = {
    "int64 beyond int32": np.array([2 ** 32 + 5, 1], dtype=np.int64),
    "Python int beyond int64": [2 ** 64 + 1, 1],
    "negative beyond int32": np.array([-2 ** 31 - 1, 1], dtype=np.int64),
    "floats": np.array([10.9, 1.0]),
    "float list": [3, 2.5],
    "bools": np.array([True, True]),
}
INT_ERRORS = {"floats": TypeError, "float list": TypeError, "bools": TypeError}


@pytest.mark.parametrize("kind", list(INT_ARRAYS))
@pytest.mark.parametrize("name", ["cache_seqlens", "cache_batch_idx", "block_table"])
def test_int32_arrays_are_not_cast(name, kind):
    q, kc, vc, kn, vn = kv_case(pages=4) if name == "block_table" else kv_case(rows=2)
    values = INT_ARRAYS[kind]
    args = dict(k=kn, v=vn, cache_seqlens=np.array([1, 1], dtype=np.int32))
    args[name] = np.asarray(values, dtype=object).reshape(2, 1).tolist() if name == "block_table" and \
        isinstance(values, list) else (values.reshape(2, 1) if name == "block_table" else values)
    refused(INT_ERRORS.get(kind, OverflowError), lambda: fa.flash_attn_with_kvcache(q, kc, vc, **args), kc, vc,
            match=name)


@pytest.mark.parametrize("kind", ["int64 beyond int32", "floats", "bools"])
def test_cu_seqlens_are_not_cast(kind):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((6, 2, 16)).astype(np.float32)
    bad = {"int64 beyond int32": np.array([0, 2 ** 32 + 3, 6], dtype=np.int64), "floats": np.array([0.0, 3.5, 6.0]),
           "bools": np.array([False, True, True])}[kind]
    ok = np.array([0, 3, 6], dtype=np.int32)
    with pytest.raises(INT_ERRORS.get(kind, OverflowError), match="cu_seqlens_q"):
        fa.flash_attn_varlen_func(q, q, q, bad, ok, 3, 3)


@pytest.mark.parametrize("option,value,error", [
    ("window_size", (2 ** 64, 0), OverflowError), ("window_size", (-2 ** 63 - 1, 0), OverflowError),
    ("window_size", (1.5, 0), TypeError), ("num_splits", 2 ** 32 + 3, OverflowError),
    ("num_splits", 2 ** 31, OverflowError), ("num_splits", 2.0, TypeError), ("num_splits", True, TypeError),
    ("cache_seqlens", 2 ** 32 + 1, OverflowError), ("cache_seqlens", True, TypeError),
    ("softmax_scale", 1e39, OverflowError)])
def test_scalar_options_are_not_cast(option, value, error):
    q, kc, vc, kn, vn = kv_case()
    refused(error, lambda: fa.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, **{option: value}), kc, vc,
            match=option)


@pytest.mark.parametrize("option,value,error", [
    ("block_size", (2 ** 64 + 16, 16), OverflowError), ("seed", -1, OverflowError), ("seed", 2 ** 64, OverflowError),
    ("offset", 2 ** 64, OverflowError), ("window_size", (2 ** 63, -1), OverflowError)])
def test_dense_scalar_options_are_not_cast(option, value, error):
    q = np.random.default_rng(2).standard_normal((1, 8, 2, 16)).astype(np.float32)
    args = {option: value}
    if option in ("seed", "offset"):
        args.update(dropout_p=0.1, seed=args.get("seed", 1))
    with pytest.raises(error, match=option):
        if option == "block_size":
            fa.block_sparse_attn_func(q, q, q, np.ones((1, 1), dtype=bool), value)
        else:
            fa.flash_attn_func(q, q, q, **args)


# ---------------------------------------------------------------- read-only memory is not written

def test_read_only_cache_is_not_written():
    q, kc, vc, kn, vn = kv_case()
    kc.flags.writeable = False
    refused(ValueError, lambda: fa.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=1), kc, vc,
            match="k_cache is read-only")
    from_bytes = np.frombuffer(vc.tobytes(), dtype=np.float32).reshape(vc.shape)
    refused(ValueError, lambda: fa.flash_attn_with_kvcache(q, vc.copy(), from_bytes, k=kn, v=vn, cache_seqlens=1),
            from_bytes, match="v_cache is read-only")
    # reading a read-only cache is fine
    fa.flash_attn_with_kvcache(q, kc, from_bytes, cache_seqlens=5)


# ---------------------------------------------------------------- empty arrays, scale, slopes, rotary

@pytest.mark.parametrize("batch,sn", [(0, 1), (2, 0)])
def test_empty_arrays_give_empty_results(batch, sn):
    q = np.zeros((batch, sn, 4, 16), dtype=np.float32)
    kc = np.zeros((batch, 32, 2, 16), dtype=np.float32)
    out, lse = fa.flash_attn_with_kvcache(q, kc, kc.copy(), return_softmax_lse=True)
    assert out.shape == q.shape and lse.shape == (batch, 4, sn)
    k = np.zeros((batch, 5, 2, 16), dtype=np.float32)
    assert fa.flash_attn_func(q, k, k).shape == q.shape


def test_negative_scale_is_the_librarys_refusal():
    q, kc, vc, kn, vn = kv_case()
    refused(fa.FlashAttnError, lambda: fa.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, softmax_scale=-1.0), kc, vc,
            match="softmax_scale")
    with pytest.raises(fa.FlashAttnError, match="softmax_scale"):
        fa.flash_attn_func(q, kc, vc, softmax_scale=-0.5)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_alibi_slopes_are_refused(bad):
    q, kc, vc, kn, vn = kv_case()
    slopes = np.array([0.5, bad, 0.25, 0.125], dtype=np.float32)
    refused(fa.FlashAttnError, lambda: fa.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=1,
                                                                   alibi_slopes=slopes), kc, vc, match="alibi_slopes")
    with pytest.raises(fa.FlashAttnError, match="alibi_slopes"):
        fa.flash_attn_func(q, kc, vc, alibi_slopes=slopes)


def test_empty_rotary_table_is_a_table_too_short():
    q, kc, vc, kn, vn = kv_case()
    empty = np.zeros((0, 4), dtype=np.float32)
    refused(fa.FlashAttnError, lambda: fa.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=1,
                                                                   rotary_cos=empty, rotary_sin=empty), kc, vc,
            match="rotary")


# ---------------------------------------------------------------- the NaN rule

@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("paged", [False, True])
def test_nan_reaches_the_rows_that_see_it(paged, splits):
    q, kc, vc, _, _ = kv_case(pages=4 if paged else None)
    table = np.array([[0, 1], [2, 3]], dtype=np.int32) if paged else None
    lens = np.array([30, 25], dtype=np.int32)
    q[0, 0, 1] = np.nan  # sequence 0, query head 1
    if paged:
        kc[2, 7, 0, 3] = np.nan  # sequence 1's key 7, kv head 0: query heads 0 and 1
    else:
        kc[1, 7, 0, 3] = np.nan
    out, lse = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table, num_splits=splits,
                                         return_softmax_lse=True)
    nan_rows = {(0, 1), (1, 0), (1, 1)}
    for b in range(2):
        for h in range(4):
            if (b, h) in nan_rows:
                assert np.isnan(out[b, 0, h]).all() and np.isnan(lse[b, h, 0]), (b, h)
            else:
                assert np.isfinite(out[b, 0, h]).all() and np.isfinite(lse[b, h, 0]), (b, h)
    dense = fa.flash_attn_func(q, kc[:2], vc[:2])
    assert np.isnan(dense[0, 0, 1]).all() and np.isfinite(dense[0, 0, 0]).all()


# ---------------------------------------------------------------- torch tensors: the same rules

@pytest.mark.skipif(torch is None, reason="torch is not installed")
@pytest.mark.parametrize("kind,error", [("int64", OverflowError), ("float", TypeError), ("bool", TypeError)])
def test_torch_int_tensors_are_not_cast(kind, error):
    q, kc, vc, kn, vn = (torch.from_numpy(x) for x in kv_case(rows=2))
    bad = {"int64": torch.tensor([2 ** 32 + 5, 1]), "float": torch.tensor([10.9, 1.0]),
           "bool": torch.tensor([True, True])}[kind]
    before = kc.clone()
    with torch.no_grad(), pytest.raises(error, match="cache_seqlens"):
        fa.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=bad)
    assert torch.equal(kc, before)
    with torch.no_grad(), pytest.raises(OverflowError, match="num_splits"):
        fa.flash_attn_with_kvcache(q, kc, vc, num_splits=2 ** 32 + 3)
    with torch.no_grad(), pytest.raises(OverflowError, match="window_size"):
        fa.flash_attn_with_kvcache(q, kc, vc, window_size=(2 ** 64, 0))


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_follows_the_librarys_rules():
    q, kc, vc, kn, vn = (torch.from_numpy(x) for x in kv_case(pages=4))
    before = kc.clone()
    with torch.no_grad():
        with pytest.raises(fa.FlashAttnError, match="page 1"):
            fa.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=torch.tensor([3, 3], dtype=torch.int32),
                                       block_table=torch.tensor([[1], [1]], dtype=torch.int32))
        assert torch.equal(kc, before)
        with pytest.raises(fa.FlashAttnError, match="softmax_scale"):
            fa.flash_attn_func(q, q, q, softmax_scale=-1.0)
        with pytest.raises(fa.FlashAttnError, match="alibi_slopes"):
            fa.flash_attn_func(q, q, q, alibi_slopes=torch.tensor([0.5, float("nan"), 0.5, 0.5]))
        empty = torch.zeros((0, 1, 4, 16))
        assert fa.flash_attn_with_kvcache(empty, torch.zeros((0, 16, 2, 16)), torch.zeros((0, 16, 2, 16))).shape == \
            empty.shape


def test_error_message_has_no_c_location_but_the_exception_keeps_it():
    q, kc, vc, kn, vn = kv_case()
    with pytest.raises(fa.FlashAttnError) as e:
        fa.flash_attn_func(q, kc, vc, window_size=(-2, 0))
    assert not re.search(r"\w+\.c:\d+", str(e.value)), str(e.value)
    assert e.value.location is not None and re.fullmatch(r"\w+\.c:\d+", e.value.location), e.value.location
