"""Arrays of other libraries: what the package reads from __cuda_array_interface__ and from a
DLPack capsule (pointer, shape, strides in elements, dtype, device; parsed from fake objects, never
run), NumPy's own __dlpack__ behind a wrapper that is not an ndarray (run on the CPU backend, the
same bytes as the ndarray), and, where a CUDA device exists, arrays in GPU memory in place with
DeviceArray results (skipped by name elsewhere)."""
import ctypes

import numpy as np
import pytest

import flashattn as fa
from flashattn import _capi, _core
from test_backends import has_device
from test_numpy import inputs


class FakeCai:
    """An object that only exposes __cuda_array_interface__ (the pointer is host memory: parsed,
    never handed to the library)."""

    def __init__(self, shape, typestr, strides=None, ptr=0x7F0000001000, stream=None, device_id=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3, "stream": stream}
        if device_id is not None:
            self.device = type("Device", (), {"id": device_id})()


def test_cuda_array_interface_parsing():
    v = _core._View(FakeCai((2, 5, 3, 8), "<f2"), "q")
    assert (v.kind, v.device, v.ptr, v.dtype) == ("foreign", ("cuda", 0), 0x7F0000001000, _capi.DTYPE_F16)
    assert v.shape == (2, 5, 3, 8) and v.strides == (120, 24, 8, 1)  # None: C-contiguous, in elements
    # byte strides become element strides (a [b, s, h, d] view of a [b, s, 2h, d] float32 buffer)
    v = _core._View(FakeCai((2, 5, 3, 8), "<f4", strides=(960, 192, 64, 4), device_id=1, stream=7), "k")
    assert v.strides == (240, 48, 16, 1) and v.device == ("cuda", 1) and v.stream == 7
    assert v.dtype == _capi.DTYPE_F32
    with pytest.raises(TypeError, match="typestr '<f8'"):
        _core._View(FakeCai((2, 5, 3, 8), "<f8"), "q")
    with pytest.raises(ValueError, match="whole 4-byte elements"):
        _core._View(FakeCai((2, 5, 3, 8), "<f4", strides=(960, 192, 64, 2)), "q")
    with pytest.raises(ValueError, match="negative strides"):
        _core._View(FakeCai((2, 5, 3, 8), "<f4", strides=(-960, 192, 32, 4)), "q")
    with pytest.raises(TypeError, match="int32"):  # int32 arrays are for cu_seqlens, not q
        _core._View(FakeCai((2, 5, 3, 8), "<i4"), "q")
    # an int32 array in GPU memory as cu_seqlens: taken as it is when contiguous
    cu = _core._int32_on(None, FakeCai((3,), "<i4"), "cu_seqlens_q")
    assert isinstance(cu, _core.Foreign) and cu.ptr == 0x7F0000001000 and cu.shape == (3,)
    with pytest.raises(TypeError, match="contiguous int32"):
        _core._int32_on(None, FakeCai((3,), "<f4"), "cu_seqlens_q")


def test_gpu_and_host_arrays_do_not_mix():
    q = np.ones((1, 4, 1, 8), np.float32)
    with pytest.raises(ValueError, match="one device"):
        fa.flash_attn_func(q, FakeCai(q.shape, "<f4"), q)


class DLPackCapsuleMaker:
    """A DLPack producer for tests: a DLManagedTensor built here over any address, device and
    dtype, in an unconsumed "dltensor" capsule (no deleter: this object owns the memory)."""
    _new = ctypes.pythonapi.PyCapsule_New
    _new.restype = ctypes.py_object
    _new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    NAME = ctypes.c_char_p(b"dltensor")  # the capsule keeps this pointer: it must outlive it

    def __init__(self, ptr, device, code, bits, shape, strides=None, byte_offset=0):
        self.device = device
        self.shape_arr = (ctypes.c_int64 * len(shape))(*shape)
        self.strides_arr = (ctypes.c_int64 * len(shape))(*strides) if strides is not None else None
        m = _core._DLManagedTensor()
        t = m.dl_tensor
        t.data, t.ndim, t.byte_offset = ptr, len(shape), byte_offset
        t.device.device_type, t.device.device_id = device
        t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
        t.shape = self.shape_arr
        t.strides = self.strides_arr
        self.managed = m
        self.streams = []

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return self._new(ctypes.addressof(self.managed), self.NAME, None)

    def __dlpack_device__(self):
        return self.device


def test_dlpack_parsing():
    a = DLPackCapsuleMaker(0x7F0000002000, (2, 1), 4, 16, (2, 6, 4, 16), strides=(768, 128, 16, 1), byte_offset=64)
    v = _core._View(a, "q")
    assert (v.kind, v.device, v.ptr, v.dtype) == ("foreign", ("cuda", 1), 0x7F0000002000 + 64, _capi.DTYPE_BF16)
    assert v.shape == (2, 6, 4, 16) and v.strides == (768, 128, 16, 1)
    assert a.streams == [1]  # asked for the data on the legacy default stream, where the call runs
    v = _core._View(DLPackCapsuleMaker(0x7F0000002000, (2, 0), 2, 16, (3, 4, 8)), "k")  # strides NULL: contiguous
    assert v.strides == (32, 8, 1) and v.dtype == _capi.DTYPE_F16
    with pytest.raises(TypeError, match="code 2, bits 64"):
        _core._View(DLPackCapsuleMaker(0x7F0000002000, (2, 0), 2, 64, (3, 4, 8)), "q")
    with pytest.raises(TypeError, match="device type 4"):
        _core._View(DLPackCapsuleMaker(0x7F0000002000, (4, 0), 2, 32, (3, 4, 8)), "q")


def test_dlpack_host_parsing():
    """kDLCPU memory: a NumPy view over it with the described strides (what is copied to a device)."""
    base = np.arange(2 * 6 * 8 * 16, dtype=np.float32).reshape(2, 6, 8, 16)
    view = base[:, :, ::2]
    a = DLPackCapsuleMaker(base.ctypes.data, (1, 0), 2, 32, view.shape, strides=(768, 128, 32, 1))
    v = _core._View(a, "q")
    assert v.device == _core._HOST and a.streams == [None]
    np.testing.assert_array_equal(v.array, view)


class NumpyThroughDLPack:
    """Only NumPy's own __dlpack__ / __dlpack_device__ (NumPy >= 1.22), not an ndarray."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@pytest.mark.skipif(not hasattr(np.ndarray, "__dlpack__"), reason="NumPy < 1.22 has no __dlpack__")
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_numpy_dlpack_runs_on_the_cpu_backend(dtype):
    rng = np.random.default_rng(41)
    q, k, v, do = inputs(rng, 2, 33, 40, 4, 2, 32, dtype)
    q = np.concatenate([q, q], axis=2)[:, :, ::2]  # strided
    wrap = NumpyThroughDLPack
    o, lse, _ = fa.flash_attn_func(wrap(q), wrap(k), wrap(v), causal=True, return_attn_probs=True)
    want, want_lse, _ = fa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert type(o) is np.ndarray and o.dtype == dtype
    np.testing.assert_array_equal(o, want)
    np.testing.assert_array_equal(lse, want_lse)
    grads = fa.flash_attn_backward(wrap(do), wrap(q), wrap(k), wrap(v), wrap(o), wrap(lse), causal=True)
    for g, w in zip(grads, fa.flash_attn_backward(do, q, k, v, want, want_lse, causal=True)):
        np.testing.assert_array_equal(g, w)
    cu = np.array([0, 13, 33], np.int32)
    np.testing.assert_array_equal(
        fa.flash_attn_varlen_func(wrap(q[0]), wrap(q[0]), wrap(q[0]), wrap(cu), cu, 20, 20),
        fa.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 20, 20))


cuda = pytest.mark.skipif(not has_device("cuda"), reason="no CUDA device (the CUDA backend is not compiled in or "
                                                          "has no device)")


def on_cuda(host):
    """A DeviceArray holding host's values (the package's own __cuda_array_interface__ producer)."""
    ctx = _capi.context("cuda", 0)
    d = _core.DeviceArray(ctx, host.shape, host.dtype.name)
    d.copy_from_host(np.ascontiguousarray(host))
    return d


@cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_cuda_array_interface_in_place(dtype):
    rng = np.random.default_rng(42)
    q, k, v, do = inputs(rng, 2, 50, 64, 4, 2, 64, dtype)
    o, lse, _ = fa.flash_attn_func(on_cuda(q), on_cuda(k), on_cuda(v), causal=True, return_attn_probs=True)
    assert isinstance(o, _core.DeviceArray) and o.shape == q.shape and o.dtype == np.dtype(dtype).name
    assert o.__cuda_array_interface__["typestr"] == np.dtype(dtype).str
    want, want_lse, _ = fa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    np.testing.assert_allclose(o.numpy().astype(np.float32), want.astype(np.float32), rtol=0,
                               atol=2e-5 if dtype == np.float32 else 2e-3)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=0, atol=1e-4)
    grads = fa.flash_attn_backward(on_cuda(do), on_cuda(q), on_cuda(k), on_cuda(v), o, lse, causal=True)
    for g, w in zip(grads, fa.flash_attn_backward(do, q, k, v, want, want_lse, causal=True)):
        scale = max(1.0, float(np.abs(w.astype(np.float32)).max()))
        np.testing.assert_allclose(g.numpy().astype(np.float32), w.astype(np.float32), rtol=0,
                                   atol=(1e-4 if dtype == np.float32 else 1e-2) * scale)


@cuda
def test_cupy_arrays():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    rng = np.random.default_rng(43)
    q, k, v, _ = inputs(rng, 1, 40, 40, 2, 2, 64, np.float16)
    o = fa.flash_attn_func(cupy.asarray(q), cupy.asarray(k), cupy.asarray(v), causal=True)
    np.testing.assert_allclose(cupy.asnumpy(cupy.asarray(o)).astype(np.float32),
                               fa.flash_attn_func(q, k, v, causal=True).astype(np.float32), rtol=0, atol=2e-3)
