"""NumPy arrays on the backend that backend= or FLASHATTN_BACKEND names: copied to the device
(fa_malloc, fa_memcpy), run there, the results copied back, every copy freed, also when the call
fails. Run on OpenCL (PoCL in CI) where it is compiled in and has a device, against the float64
reference with the pass rule of test_numpy.py, and against the CPU backend's caches."""
import ctypes

import numpy as np
import pytest

import flashattn as fa
import reference as ref
from flashattn import _capi, _core
from test_kvcache import attention as kvcache_reference
from test_numpy import check_backward, check_forward, inputs


def has_device(backend):
    if backend not in fa.backends():
        return False
    n = ctypes.c_int()
    return _capi.lib().fa_device_count(backend.encode(), ctypes.byref(n)) == 0 and n.value > 0


opencl = pytest.mark.skipif(not has_device("opencl"), reason="the OpenCL backend is not compiled in or has no device")


@pytest.fixture
def contexts_used(monkeypatch):
    """The (backend, device) of every context the package asks for during the test."""
    used = []
    real = _capi.context

    def recording(backend, device=0):
        used.append((backend, device))
        return real(backend, device)

    monkeypatch.setattr(_capi, "context", recording)
    return used


@pytest.fixture
def allocations(monkeypatch):
    """Counts of fa_malloc and fa_free calls the package makes."""
    L = _capi.lib()
    counts = {"malloc": 0, "free": 0}
    real_malloc, real_free = L.fa_malloc, L.fa_free

    def malloc(*args):
        counts["malloc"] += 1
        return real_malloc(*args)

    def free(*args):
        counts["free"] += 1
        return real_free(*args)

    monkeypatch.setattr(L, "fa_malloc", malloc)
    monkeypatch.setattr(L, "fa_free", free)
    return counts


@opencl
@pytest.mark.parametrize("causal", [False, True])
def test_dense_on_opencl(causal, contexts_used, allocations):
    rng = np.random.default_rng(31 + causal)
    b, sq, sk, h, hk, d = 2, 37, 50, 4, 2, 32
    q, k, v, do = inputs(rng, b, sq, sk, h, hk, d, np.float32)
    o, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True, backend="opencl")
    assert contexts_used == [("opencl", 0)]
    assert allocations["malloc"] == 5 and allocations["free"] == 5  # q, k, v, o, lse
    vis = ref.visible(sq, sk, causal, (-1, -1))
    check_forward(o, lse, q, k, v, d ** -0.5, lambda bi: vis, np.float32)
    grads = fa.flash_attn_backward(do, q, k, v, o, lse, causal=causal, backend="opencl")
    assert contexts_used == [("opencl", 0)] * 2 and allocations["free"] == allocations["malloc"]
    check_backward(grads, q, k, v, do, d ** -0.5, lambda bi: vis, np.float32)
    # the CPU backend's results meet the same rule; the two differ only by rounding
    o_cpu = fa.flash_attn_func(q, k, v, causal=causal, backend="cpu")
    assert contexts_used[-1] == ("cpu", 0)
    np.testing.assert_allclose(o, o_cpu, rtol=0, atol=1e-5)


@opencl
def test_varlen_softcap_alibi_strided_on_opencl(allocations):
    """Packed rows after cu_seqlens[-1] keep their defined values (the outputs are copied in
    too), ALiBi slopes and cu_seqlens copied to the device, a strided (non-contiguous) q."""
    rng = np.random.default_rng(33)
    h, d = 2, 16
    cu = np.array([0, 7, 20], np.int32)
    q_full = rng.standard_normal((24, 2 * h, d)).astype(np.float32)
    q = q_full[:, ::2]  # every other head: strided
    k = rng.standard_normal((24, h, d)).astype(np.float32)
    v = rng.standard_normal((24, h, d)).astype(np.float32)
    slopes = np.array([0.5, 0.25], np.float32)
    kw = dict(causal=True, softcap=2.0, alibi_slopes=slopes, return_attn_probs=True)
    o, lse, _ = fa.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, backend="opencl", **kw)
    o_cpu, lse_cpu, _ = fa.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, backend="cpu", **kw)
    assert np.all(o[20:] == 0) and np.all(lse[:, 20:] == -np.inf)
    for s in range(2):
        a, e = cu[s], cu[s + 1]
        vis = ref.visible(e - a, e - a, True, (-1, -1))
        ro, rl = ref.attention(*(x[a:e].astype(np.float64) for x in (q, k, v)), d ** -0.5, vis, softcap=2.0,
                               slopes=slopes)
        no, nl = ref.attention(*(x[a:e].astype(np.float32) for x in (q, k, v)), d ** -0.5, vis, np.float32,
                               softcap=2.0, slopes=slopes)
        for got, got_lse in ((o, lse), (o_cpu, lse_cpu)):
            err, ok = ref.error(got[a:e], ro)
            assert ok and err <= ref.bound(2.0, ref.error(no, ro)[0], ro), f"O error {err}"
            err, _ = ref.error(got_lse[:, a:e], rl)
            assert err <= ref.bound(2.0, ref.error(nl, rl)[0], rl), f"LSE error {err}"
    assert allocations["free"] == allocations["malloc"] == 8  # q, k, v, o, lse, cu_q, cu_k, slopes


@opencl
def test_flashattn_backend_environment(monkeypatch, contexts_used):
    rng = np.random.default_rng(34)
    q, k, v, _ = inputs(rng, 1, 16, 16, 2, 2, 16, np.float32)
    monkeypatch.setenv("FLASHATTN_BACKEND", "opencl")
    o = fa.flash_attn_func(q, k, v)
    assert contexts_used == [("opencl", 0)]
    o_cpu = fa.flash_attn_func(q, k, v, backend="cpu")  # the keyword wins over the environment
    assert contexts_used[-1] == ("cpu", 0)
    np.testing.assert_allclose(o, o_cpu, rtol=0, atol=1e-5)
    monkeypatch.setenv("FLASHATTN_BACKEND", "opencl:7")
    with pytest.raises(fa.FlashAttnError) as e:
        fa.flash_attn_func(q, k, v)
    assert e.value.status == "FA_ERR_NO_DEVICE"


@opencl
@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_on_opencl(paged, contexts_used, allocations):
    """New keys and values appended on the device and the caches copied back: the same caches as
    the CPU backend's (bit for bit: a copy, no rotary), the output against float64."""
    rng = np.random.default_rng(35)
    b, sn, h, hk, d, cap, page = 2, 2, 4, 2, 32, 32, 16
    lens = np.array([3, 20], np.int32)
    q = rng.standard_normal((b, sn, h, d)).astype(np.float32)
    kn = rng.standard_normal((b, 2, hk, d)).astype(np.float32)
    vn = rng.standard_normal((b, 2, hk, d)).astype(np.float32)
    if paged:
        kc = rng.standard_normal((b * cap // page, page, hk, d)).astype(np.float32)
        table = np.arange(b * cap // page, dtype=np.int32)[::-1].reshape(b, cap // page).copy()
    else:
        kc = rng.standard_normal((b, cap, hk, d)).astype(np.float32)
        table = None
    vc = rng.standard_normal(kc.shape).astype(np.float32)
    caches = {}
    for backend in ("opencl", "cpu"):
        kcb, vcb = kc.copy(), vc.copy()
        out, lse = fa.flash_attn_with_kvcache(q, kcb, vcb, kn, vn, cache_seqlens=lens, block_table=table,
                                              causal=True, return_softmax_lse=True, backend=backend)
        caches[backend] = (kcb, vcb, out)
    assert contexts_used == [("opencl", 0), ("cpu", 0)]
    # q, the caches, o, lse, k, v, cache_seqlens (and the block table)
    assert allocations["free"] == allocations["malloc"] == (9 if paged else 8)
    np.testing.assert_array_equal(caches["opencl"][0], caches["cpu"][0])
    np.testing.assert_array_equal(caches["opencl"][1], caches["cpu"][1])
    assert not np.array_equal(caches["cpu"][0], kc)  # the new keys were written
    kcb, vcb, out = caches["opencl"]
    seq = (lambda x, i: x[table[i]].reshape(cap, hk, d)) if paged else (lambda x, i: x[i])
    keys, values = [seq(kcb, i) for i in range(b)], [seq(vcb, i) for i in range(b)]
    ref_o, _ = kvcache_reference(q.astype(np.float64), [x.astype(np.float64) for x in keys],
                                 [x.astype(np.float64) for x in values], lens + 2, sn, True, np.float64)
    low_o, _ = kvcache_reference(q, keys, values, lens + 2, sn, True, np.float32)
    err, naive = np.abs(out - ref_o).max(), np.abs(low_o - ref_o).max()
    assert err <= 2 * naive + 1e-5 * max(1.0, np.abs(ref_o).max()), (err, naive)


@opencl
def test_failed_call_on_opencl_frees_and_writes_nothing(allocations):
    rng = np.random.default_rng(36)
    q = rng.standard_normal((2, 1, 4, 32)).astype(np.float32)
    kc = rng.standard_normal((2, 8, 2, 32)).astype(np.float32)
    vc, kn = kc.copy(), rng.standard_normal((2, 1, 2, 32)).astype(np.float32)
    before = kc.copy()
    with pytest.raises(fa.FlashAttnError) as e:  # sequence 1 is full: no room for its new token
        fa.flash_attn_with_kvcache(q, kc, vc, kn, kn, cache_seqlens=np.array([3, 8], np.int32), backend="opencl")
    assert e.value.status == "FA_ERR_INVALID_ARG"
    np.testing.assert_array_equal(kc, before)
    np.testing.assert_array_equal(vc, before)
    assert allocations["malloc"] > 0 and allocations["free"] == allocations["malloc"]
    with pytest.raises(fa.FlashAttnError):  # head dims of q and k differ
        fa.flash_attn_func(q, kc[..., :16], vc, backend="opencl")
    assert allocations["free"] == allocations["malloc"]


def test_unknown_backend_is_an_error():
    q = np.ones((1, 4, 1, 8), np.float32)
    with pytest.raises(fa.FlashAttnError) as e:
        fa.flash_attn_func(q, q, q, backend="nosuch")
    assert e.value.status == "FA_ERR_NO_BACKEND" and "nosuch" in e.value.message
    for bad in ("", ":1", "opencl:x"):
        with pytest.raises(ValueError, match="backend"):
            fa.flash_attn_func(q, q, q, backend=bad)


def test_backend_of_gpu_arrays_cannot_be_changed():
    """backend= chooses where host arrays run; arrays in GPU memory run on their device (parsed
    here, never run: the fake array's pointer is host memory)."""
    host = np.ones((1, 4, 1, 8), np.float32)

    class FakeCuda:
        __cuda_array_interface__ = {"shape": host.shape, "typestr": "<f4", "data": (host.ctypes.data, False),
                                    "version": 3}

    views = [_core._View(FakeCuda(), "q")]
    with pytest.raises(ValueError, match="run there"):
        _core._context_for(views, "opencl")


def test_backend_availability_matches_device_count():
    """fa_backend_availability through Python: every backend compiled in answers (bool, reason), True
    exactly where it has a device; the CPU backend is always available; a name not compiled in says so."""
    for b in fa.backends():
        ok, why = fa.backend_availability(b)
        assert ok == has_device(b), (b, ok, why)
        assert why.startswith("available: ") if ok else why, (b, why)
    assert fa.backend_availability("cpu")[0]
    assert fa.backend_availability("no-such-backend") == (False, "not compiled in")
    with pytest.raises(TypeError):
        fa.backend_availability(None)


@pytest.mark.skipif("opencl" not in fa.backends(), reason="the OpenCL backend is not compiled in")
def test_backend_availability_library_not_found():
    """With the OpenCL library absent (FLASHATTN_OPENCL_LIBRARY naming a missing file, read at the
    library's first use, so in a fresh interpreter) the package imports, computes on the CPU, and
    says why OpenCL is unavailable."""
    import os
    import subprocess
    import sys
    code = ("import numpy as np, flashattn as fa\n"
            "ok, why = fa.backend_availability('opencl')\n"
            "q = np.ones((1, 8, 1, 32), np.float32)\n"
            "assert np.allclose(fa.flash_attn_func(q, q, q), q)\n"
            "print(ok, why)\n")
    env = dict(os.environ, FLASHATTN_OPENCL_LIBRARY="/nonexistent/libOpenCL.so.1")
    env.pop("FLASHATTN_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("False library not found: ") and "/nonexistent/libOpenCL.so.1" in out.stdout, out.stdout
