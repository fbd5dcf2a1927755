"""Bounds that once overflowed inside the library, through the Python API: a window
of 2**63 - 1 is the unbounded window, and a varlen max_seqlen that int32 cu_seqlens cannot reach
is a clear FlashAttnError (it used to return without writing, or never return); a block mask the
library refuses says why."""
import numpy as np
import pytest

import flashattn as fa


def test_window_of_int64_max_is_unbounded():
    rng = np.random.default_rng(21)
    q = rng.standard_normal((1, 8, 2, 16)).astype(np.float32)
    k = rng.standard_normal((1, 8, 2, 16)).astype(np.float32)
    v = rng.standard_normal((1, 8, 2, 16)).astype(np.float32)
    for huge, unbounded in [((0, 2**63 - 1), (0, -1)), ((2**63 - 1, 0), (-1, 0)),
                            ((2**63 - 1, 2**63 - 1), (-1, -1))]:
        got, lse, _ = fa.flash_attn_func(q, k, v, window_size=huge, return_attn_probs=True)
        want, want_lse, _ = fa.flash_attn_func(q, k, v, window_size=unbounded, return_attn_probs=True)
        assert np.isfinite(lse).all()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(lse, want_lse)


@pytest.mark.parametrize("max_q,max_k", [(2**63 - 1, 4), (2**40, 4), (4, 2**63 - 1)])
def test_varlen_absurd_max_seqlen_is_an_error(max_q, max_k):
    q = np.ones((8, 2, 16), np.float32)
    c = np.array([0, 4, 8], np.int32)
    with pytest.raises(fa.FlashAttnError, match="max_seqlen"):
        fa.flash_attn_varlen_func(q, q, q, c, c, max_q, max_k)


def test_varlen_loose_max_seqlen_gives_the_tight_result():
    rng = np.random.default_rng(6)
    q = rng.standard_normal((8, 2, 16)).astype(np.float32)
    c = np.array([0, 3, 8], np.int32)
    want = fa.flash_attn_varlen_func(q, q, q, c, c, 5, 5, causal=True)
    np.testing.assert_array_equal(fa.flash_attn_varlen_func(q, q, q, c, c, 1000, 2**31 - 1, causal=True), want)


@pytest.mark.parametrize("bits,block_size,reason", [
    (np.ones((2, 2), np.uint8), (0, 16), "block_q = 0 and block_k = 16 must be >= 1"),
    (np.ones((0, 2, 2), np.uint8), (16, 16), "heads = 0 must be >= 1"),
])
def test_block_mask_error_says_why(bits, block_size, reason):
    """A block mask the library refuses raises with the library's reason (fa_last_error), not
    only the status name."""
    q = np.ones((1, 32, 2, 16), np.float32)
    with pytest.raises(fa.FlashAttnError, match=reason) as e:
        fa.block_sparse_attn_func(q, q, q, bits, block_size)
    assert e.value.status == "FA_ERR_INVALID_ARG"
