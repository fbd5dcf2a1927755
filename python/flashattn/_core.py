"""_core.py: one forward and one backward over the C library for every kind of array the package
takes, with FlashAttention-2's layouts: dense [batch, seqlen, heads, d], LSE [batch, heads,
seqlen]; packed (varlen) [total, heads, d], LSE [heads, total]. Where the arrays live decides where
they run:
- torch tensors in place (views with a contiguous last dimension, no copies): CPU tensors on the
  CPU backend, CUDA tensors on the CUDA backend on the tensor's device and the current stream;
- NumPy arrays and other host arrays (DLPack kDLCPU) on the backend that backend= or
  FLASHATTN_BACKEND names (the CPU backend when neither does): on the CPU backend in place, on a
  device backend through copies (fa_malloc, fa_memcpy in, the call, the outputs copied back, every
  copy freed, also when the call fails);
- other libraries' GPU arrays (DLPack kDLCUDA, __cuda_array_interface__: CuPy, JAX, Numba) in
  place on the CUDA backend, their results in memory the library allocates (DeviceArray, which
  exposes __cuda_array_interface__ and frees it when deleted)."""
import ctypes as C
import math
import numbers
import os
import sys

from . import _capi, _sink
# Argument checks and conversions (_convert.py); __init__.py and _torch.py reach them, check_options
# included, as _core.<name>.
from ._convert import (_flag, _is_torch, _pair, _real, c_integer, check_options, check_scale, check_softcap,
                       dtype_refused, int32_array, maybe_contiguous,
                       parse_backend, symbolic)


_TORCH = None
_TORCH_CODES = None


def _torch_module():
    global _TORCH
    if _TORCH is None:
        import torch
        _TORCH = torch
    return _TORCH


def _torch_codes():
    """torch dtype -> the library's dtype code (built once)."""
    global _TORCH_CODES
    if _TORCH_CODES is None:
        torch = _torch_module()
        _TORCH_CODES = {torch.float32: _capi.DTYPE_F32, torch.float16: _capi.DTYPE_F16,
                        torch.bfloat16: _capi.DTYPE_BF16}
    return _TORCH_CODES


_HOST = ("host", 0)  # the device of arrays in host memory (NumPy, CPU tensors, DLPack kDLCPU)
_CODES = {"float32": _capi.DTYPE_F32, "float16": _capi.DTYPE_F16, "bfloat16": _capi.DTYPE_BF16}
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4}
ACCEPTED = "a NumPy array, a torch tensor, or an array exposing __dlpack__ or __cuda_array_interface__"


# DLPack (dlpack.h): the unversioned capsule "dltensor" that __dlpack__() returns when no
# max_version is asked for; every producer supports it.
class _DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int32), ("device_id", C.c_int32)]


class _DLDataType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class _DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device", _DLDevice), ("ndim", C.c_int32), ("dtype", _DLDataType),
                ("shape", C.POINTER(C.c_int64)), ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


class _DLManagedTensor(C.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", C.c_void_p), ("deleter", C.c_void_p)]


_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_DTYPES = {(2, 32): "float32", (2, 16): "float16", (4, 16): "bfloat16", (0, 32): "int32"}  # (code, bits)
_CAI_DTYPES = {"<f4": "float32", "<f2": "float16", "<i4": "int32"}  # no typestr names bfloat16
_CUDA_STREAM_LEGACY = 1  # cudaStreamLegacy ((cudaStream_t)0x1); also DLPack's and CAI's number for it



def _capsule_pointer(capsule, name):
    """The pointer a DLPack capsule holds. CPython's C API through ctypes.pythonapi, which PyPy
    does not have: there DLPack inputs are refused (NumPy arrays and __cuda_array_interface__
    objects still work)."""
    api = getattr(C, "pythonapi", None)
    if api is None:
        raise TypeError("DLPack inputs need CPython (ctypes.pythonapi); pass a NumPy array or an object "
                        "with __cuda_array_interface__")
    get = api.PyCapsule_GetPointer
    get.restype = C.c_void_p
    get.argtypes = [C.py_object, C.c_char_p]
    return get(capsule, name)


class Foreign:
    """What __dlpack__ or __cuda_array_interface__ says of an array of another library: address,
    dtype name, shape, strides in elements, device (_HOST or ("cuda", index)), the CUDA stream its
    data is ready on, and the object that keeps the memory alive (the capsule)."""

    def __init__(self, a, name):
        if hasattr(a, "__dlpack__"):
            self._from_dlpack(a, name)
        elif hasattr(a, "__cuda_array_interface__"):
            self._from_cai(a, name)
        else:
            raise TypeError(f"{name}: expected {ACCEPTED}, got {type(a).__name__}")
        if any(s < 0 for s in self.strides):
            raise ValueError(f"{name}: negative strides {self.strides} are not supported")

    def _from_dlpack(self, a, name):
        device_type, device_id = (int(x) for x in a.__dlpack_device__())
        if device_type in (_DL_CUDA, _DL_CUDA_MANAGED):
            # the producer makes the data ready on the legacy default stream, where the call runs
            try:
                capsule = a.__dlpack__(stream=_CUDA_STREAM_LEGACY)
            except TypeError:  # a producer without the stream argument: its data is ready now
                capsule = a.__dlpack__()
            self.device, self.stream = ("cuda", device_id), _CUDA_STREAM_LEGACY
        elif device_type in (_DL_CPU, _DL_CUDA_HOST):
            capsule = a.__dlpack__()
            self.device, self.stream = _HOST, None
        else:
            raise TypeError(f"{name}: DLPack device type {device_type} is not supported (CPU or CUDA memory)")
        # the capsule stays unconsumed (named "dltensor") and referenced here: its destructor calls
        # the producer's deleter when this object goes, after the call
        self.keep = capsule
        m = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
        t = m.dl_tensor
        key = (t.dtype.code, t.dtype.bits)
        if key not in _DL_DTYPES or t.dtype.lanes != 1:
            raise TypeError(f"{name}: DLPack dtype (code {t.dtype.code}, bits {t.dtype.bits}, lanes {t.dtype.lanes}) "
                            "is not float32, float16, bfloat16 or int32")
        self.dtype = _DL_DTYPES[key]
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        self.strides = (tuple(t.strides[i] for i in range(t.ndim)) if t.strides else _contiguous(self.shape))
        self.ptr = (t.data or 0) + t.byte_offset

    def _from_cai(self, a, name):
        cai = a.__cuda_array_interface__
        typestr = cai["typestr"]
        if typestr not in _CAI_DTYPES:
            raise TypeError(f"{name}: __cuda_array_interface__ typestr {typestr!r} is not '<f4', '<f2' or '<i4' "
                            "(bfloat16 arrays: pass them through __dlpack__)")
        self.dtype = _CAI_DTYPES[typestr]
        self.shape = tuple(int(n) for n in cai["shape"])
        itemsize = _ITEMSIZE[self.dtype]
        strides = cai.get("strides")
        if strides is None:  # C-contiguous
            self.strides = _contiguous(self.shape)
        else:  # bytes in the interface, elements in the library
            if any(int(b) % itemsize for b in strides):
                raise ValueError(f"{name}: strides {tuple(strides)} bytes are not whole {itemsize}-byte elements")
            self.strides = tuple(int(b) // itemsize for b in strides)
        self.ptr = int(cai["data"][0] or 0)
        # the interface names no device: the object's own CuPy-style device.id (a DeviceArray's
        # device), else CUDA device 0
        self.device = ("cuda", int(getattr(getattr(a, "device", None), "id", 0)))
        stream = cai.get("stream")
        self.stream = _CUDA_STREAM_LEGACY if stream is None else int(stream)
        self.keep = None

    def host_array(self):
        """A NumPy view of host memory (DLPack kDLCPU) with the shape and strides described."""
        import numpy as np
        dt = np.dtype(_bfloat16() if self.dtype == "bfloat16" else self.dtype)
        if 0 in self.shape:
            return np.empty(self.shape, dt)
        span = (sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + 1) * dt.itemsize
        base = np.frombuffer((C.c_char * span).from_address(self.ptr), dtype=dt)
        return np.lib.stride_tricks.as_strided(base, self.shape, tuple(s * dt.itemsize for s in self.strides))


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("bfloat16 arrays in host memory need ml_dtypes (pip install ml_dtypes)") from None
    return ml_dtypes.bfloat16


def _contiguous(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def is_array(a):
    """Whether a is an array the package takes (check_array's test)."""
    import numpy as np
    return (_is_torch(a) and hasattr(a, "data_ptr")) or isinstance(a, np.ndarray) or \
        hasattr(a, "__dlpack__") or hasattr(a, "__cuda_array_interface__")


def check_array(a, name):
    if not is_array(a):
        raise TypeError(f"{name}: expected {ACCEPTED}, got {type(a).__name__}")


class _View:
    """What the library needs of one array: address, dtype code, shape, strides (elements),
    device (_HOST or ("cuda", index)); kind "torch", "numpy" or "foreign"; for arrays in host
    memory other than torch tensors, .array is a NumPy array over it (what is copied to a device)."""

    def __init__(self, a, name):
        import numpy as np
        self.array, self.stream, self.keep = None, None, None
        if _is_torch(a):
            codes = _torch_codes()
            if a.dtype not in codes:
                raise TypeError(dtype_refused(name, a.dtype))
            self.kind, self.ptr, self.dtype = "torch", a.data_ptr(), codes[a.dtype]
            self.shape, self.strides = tuple(a.shape), a.stride()
            dev = a.device
            if dev.type == "cuda":
                self.device = ("cuda", dev.index if dev.index is not None else _torch_module().cuda.current_device())
            elif dev.type == "cpu":
                self.device = _HOST
            else:
                raise TypeError(f"{name}: tensors on {dev.type} are not supported (cpu or cuda)")
        elif isinstance(a, np.ndarray):
            name_of = a.dtype.name
            if name_of not in _CODES:
                raise TypeError(dtype_refused(name, name_of) + " (bfloat16: ml_dtypes)")
            if any(s % a.itemsize for s in a.strides):
                raise ValueError(f"{name}: strides {a.strides} are not whole elements")
            self.kind, self.ptr, self.dtype = "numpy", a.ctypes.data, _CODES[name_of]
            self.shape, self.strides = a.shape, tuple(s // a.itemsize for s in a.strides)
            self.device, self.array = _HOST, a
        else:
            f = Foreign(a, name)
            if f.dtype not in _CODES:
                raise TypeError(f"{name}: dtype {f.dtype} is not float32, float16 or bfloat16")
            self.kind, self.ptr, self.dtype, self.shape, self.strides = "foreign", f.ptr, _CODES[f.dtype], f.shape, \
                f.strides
            self.device, self.stream, self.keep, self.dtype_name = f.device, f.stream, f.keep, f.dtype
            if f.device == _HOST:
                self.array = f.host_array()
        if len(self.shape) == 0 or len(self.shape) > _capi.FA_MAX_DIMS:
            raise ValueError(f"{name}: {len(self.shape)} dimensions")
        self.name = name

    def tensor(self):
        return _capi.tensor(self.ptr, self.dtype, self.shape, self.strides)


class DeviceArray:
    """A result in device memory that the library allocated (fa_malloc) for arrays of another
    library on the CUDA backend: shape, dtype (a name), __cuda_array_interface__ (version 3; the
    data is ready on the legacy default stream, which "stream" names), so that CuPy, Numba or
    torch.as_tensor take it without a copy (keep this object alive while they use it), and
    numpy(), a copy in host memory. The memory is freed (fa_free) when the object is deleted. CAI
    has no typestr for bfloat16: a bfloat16 result says '<V2' (2-byte elements, raw bits)."""

    class _Device:
        def __init__(self, index):
            self.id = index

    def __init__(self, ctx, shape, dtype, device_index=0):
        self.ctx, self.shape, self.dtype = ctx, tuple(int(n) for n in shape), dtype
        self.device = DeviceArray._Device(device_index)
        self.nbytes = math.prod(self.shape) * _ITEMSIZE[dtype]
        ptr = C.c_void_p()
        with ctx.lock:
            ctx.check(_capi.lib().fa_malloc(ctx.ptr, max(self.nbytes, 16), C.byref(ptr)), "fa_malloc")
        self.ptr = ptr.value

    @property
    def __cuda_array_interface__(self):
        typestr = {"float32": "<f4", "float16": "<f2", "bfloat16": "<V2", "int32": "<i4"}[self.dtype]
        return {"shape": self.shape, "typestr": typestr, "data": (self.ptr, False), "strides": None, "version": 3,
                "stream": _CUDA_STREAM_LEGACY}

    def copy_from_host(self, host):
        with self.ctx.lock:
            self.ctx.check(_capi.lib().fa_memcpy(self.ctx.ptr, self.ptr, host.ctypes.data, self.nbytes,
                                                 _capi.COPY_HOST_TO_DEVICE), "fa_memcpy")

    def numpy(self):
        import numpy as np
        out = np.empty(self.shape, np.uint16 if self.dtype == "bfloat16" else self.dtype)
        with self.ctx.lock:
            self.ctx.check(_capi.lib().fa_memcpy(self.ctx.ptr, out.ctypes.data, self.ptr, self.nbytes,
                                                 _capi.COPY_DEVICE_TO_HOST), "fa_memcpy")
        return out.view(_bfloat16()) if self.dtype == "bfloat16" else out

    def __del__(self):
        if getattr(self, "ptr", None) and _capi._lib is not None and not sys.is_finalizing():
            with self.ctx.lock:
                _capi._lib.fa_free(self.ctx.ptr, self.ptr)
            self.ptr = None


def _dtype_name(view):
    return {v: k for k, v in _CODES.items()}[view.dtype]


def _empty_like(a, shape=None, dtype=None, ctx=None, view=None):
    """An uninitialised array of a's kind on a's device (view: a's _View; ctx: its context, for
    other libraries' GPU arrays, whose results are DeviceArrays)."""
    shape = tuple(a.shape) if shape is None and _is_torch(a) else (view.shape if shape is None else shape)
    if _is_torch(a):
        import torch
        return torch.empty(shape, dtype=a.dtype if dtype is None else getattr(torch, dtype), device=a.device)
    if view is not None and view.kind == "foreign" and view.device != _HOST:
        return DeviceArray(ctx, shape, _dtype_name(view) if dtype is None else dtype, view.device[1])
    import numpy as np
    return np.empty(shape, dtype=view.array.dtype if dtype is None else dtype)


def _filled_like(a, value, shape=None, dtype=None, ctx=None, view=None):
    """An array of a's kind on a's device, every element value."""
    shape = tuple(a.shape) if shape is None and _is_torch(a) else (view.shape if shape is None else shape)
    if _is_torch(a):
        import torch
        return torch.full(shape, value, dtype=a.dtype if dtype is None else getattr(torch, dtype), device=a.device)
    import numpy as np
    if view is not None and view.kind == "foreign" and view.device != _HOST:
        out = DeviceArray(ctx, shape, _dtype_name(view) if dtype is None else dtype, view.device[1])
        host = np.full(shape, value, dtype=np.float32 if out.dtype == "bfloat16" else out.dtype)
        if out.dtype == "bfloat16":  # the fill values (0, -inf) are exact in bfloat16: the high half
            host = (host.view(np.uint32) >> 16).astype(np.uint16)
        out.copy_from_host(host)
        return out
    return np.full(shape, value, dtype=view.array.dtype if dtype is None else dtype)


def _outputs_like(varlen, a, shape=None, dtype=None, fill=0.0, ctx=None, view=None):
    """Output buffers. Packed (varlen) rows after cu_seqlens[-1] belong to no sequence and the
    library writes nothing there (FlashAttention-2 leaves them undefined); here they are defined:
    O, dQ, dK, dV = 0 and LSE = -inf, like a row that sees no key. Dense outputs are written
    whole by the library, so they start uninitialised."""
    if varlen:
        return _filled_like(a, fill, shape, dtype, ctx, view)
    return _empty_like(a, shape, dtype, ctx, view)


def _shape_of(a):
    return tuple(a.shape) if hasattr(a, "shape") else Foreign(a, "array").shape


def _aux_on(ref, values, dtype, name):
    """cu_seqlens, cache_seqlens, block_table, cache_batch_idx (int32) or ALiBi slopes (float32)
    for a call on ref's arrays: a torch tensor on ref's device for torch; another library's GPU
    array as it is (a Foreign, checked: that dtype, contiguous); otherwise a contiguous NumPy
    array in host memory (copied to the device at the call where the context is not the CPU)."""
    if _is_torch(values) or _is_torch(ref):
        import torch
        if dtype == "int32":  # checked where a cast would change a value; int32 tensors stay where they are
            if not (_is_torch(values) and values.dtype == torch.int32):
                values = torch.from_numpy(int32_array(values, name))
            return values.to(device=ref.device).contiguous()
        t = values if _is_torch(values) else torch.as_tensor(values)
        return t.to(device=ref.device, dtype=getattr(torch, dtype)).contiguous()
    import numpy as np
    if not isinstance(values, np.ndarray) and (hasattr(values, "__dlpack__") or
                                                hasattr(values, "__cuda_array_interface__")):
        f = Foreign(values, name)
        if f.device == _HOST:
            values = f.host_array()
        else:
            if f.dtype != dtype or f.strides != _contiguous(f.shape):
                raise TypeError(f"{name}: a device array must be contiguous {dtype}, got {f.dtype} strides "
                                f"{f.strides}")
            return f
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name}: expected {dtype} values, got {type(values).__name__}")
    if dtype == "int32":
        return int32_array(values, name)
    try:
        return np.ascontiguousarray(values, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name}: expected {dtype} values, got {type(values).__name__} ({e})") from None


def _int32_on(ref, values, name="cu_seqlens"):
    return _aux_on(ref, values, "int32", name)


def _float32_on(ref, values, name="alibi_slopes"):
    return _aux_on(ref, values, "float32", name)


class _Marshal:
    """The addresses one call hands the library, resolved against its context: an array in the
    context's memory as it is; a host array on a device backend as a device copy (fa_malloc,
    fa_memcpy in), with outputs copied back into the host arrays by finish() once the call has
    succeeded; close() frees every copy, whatever happened (a failed call copies nothing back, so
    the caller's arrays are untouched)."""

    def __init__(self, ctx):
        self.ctx, self.copies, self.back = ctx, [], []
        self.device = ctx.backend != "cpu"

    def _upload(self, host, copy_in):
        ptr = C.c_void_p()
        L = _capi.lib()
        self.ctx.check(L.fa_malloc(self.ctx.ptr, max(host.nbytes, 16), C.byref(ptr)), "fa_malloc")
        self.copies.append(ptr.value)
        if copy_in:
            self.ctx.check(L.fa_memcpy(self.ctx.ptr, ptr.value, host.ctypes.data, host.nbytes,
                                       _capi.COPY_HOST_TO_DEVICE), "fa_memcpy")
        return ptr.value

    def tensor(self, view, copy_in=True, copy_back=False):
        """view's fa_tensor; on a device backend, over a copy of a host array (copy_in: with its
        contents; copy_back: written back into the array after the call)."""
        if view.device != _HOST or not self.device:
            return view.tensor()
        if view.array is None:
            raise ValueError(f"{view.name}: torch tensors run on the backend of their device, not on "
                             f"'{self.ctx.backend}'")
        import numpy as np
        host = np.ascontiguousarray(view.array)
        ptr = self._upload(host, copy_in)
        if copy_back:
            self.back.append((ptr, host, view.array))
        return _capi.tensor(ptr, view.dtype, host.shape, _contiguous(host.shape))

    def address(self, aux):
        """The address of an auxiliary array (_aux_on's result), copied to the device if need be."""
        if aux is None:
            return None
        if _is_torch(aux):
            return aux.data_ptr()
        if isinstance(aux, Foreign):
            return aux.ptr
        return self._upload(aux, True) if self.device else aux.ctypes.data

    def finish(self):
        L = _capi.lib()
        for ptr, host, target in self.back:
            self.ctx.check(L.fa_memcpy(self.ctx.ptr, host.ctypes.data, ptr, host.nbytes, _capi.COPY_DEVICE_TO_HOST),
                           "fa_memcpy")
            if host is not target:
                target[...] = host

    def close(self):
        L = _capi.lib()
        for ptr in self.copies:
            L.fa_free(self.ctx.ptr, ptr)
        self.copies = []


def check_torch_backend(t, backend):
    """backend= with torch tensors may only name the backend of their device."""
    if backend is not None:
        name = parse_backend(backend)[0]
        if name != ("cuda" if t.device.type == "cuda" else "cpu"):
            raise ValueError(f"backend={backend!r}: torch tensors on {t.device} run on the backend of their device; "
                             "backend= chooses the backend of NumPy and other host arrays")


def _context_for(views, backend=None):
    """The context a call on these arrays runs on. Host arrays other than torch tensors: backend=,
    else FLASHATTN_BACKEND, else the CPU backend; torch tensors and other GPU arrays: their device's
    backend (backend= may only repeat it)."""
    devices = {v.device for v in views}
    if len(devices) != 1:
        raise ValueError("all arrays must be on one device: " + ", ".join(f"{v.name} on {v.device}" for v in views))
    device = devices.pop()
    if device == _HOST and not any(v.kind == "torch" for v in views):
        chosen = backend if backend is not None else (os.environ.get("FLASHATTN_BACKEND") or "cpu")
        name, index = parse_backend(chosen, "backend" if backend is not None else "FLASHATTN_BACKEND")
    else:
        name, index = ("cpu", 0) if device == _HOST else device
        if backend is not None and parse_backend(backend)[0] != name:
            where = "CPU" if device == _HOST else f"{name} device {index}"
            raise ValueError(f"backend={backend!r}: these arrays are in {where} memory and run there; backend= "
                             "chooses the backend of NumPy and other host arrays")
    return _capi.context(name, index)


class Call:
    """The options of one attention call, shared by its forward and its backward; backend: where
    NumPy and other host arrays run (_context_for)."""

    def __init__(self, q, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                 deterministic=False, seed=None, offset=0, block_mask=None, block_size=None,
                 cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, softcap=0.0,
                 alibi_slopes=None, backend=None, block_table=None, learnable_sink=None):
        dropout_p = _real(dropout_p, "dropout_p")
        if not 0.0 <= dropout_p < 1.0:
            raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
        if dropout_p > 0.0 and seed is None:
            raise ValueError("dropout_p > 0 needs seed= (the backward regenerates the same mask from it)")
        self.dropout_p = dropout_p
        self.softmax_scale = 0.0 if softmax_scale is None else check_scale(softmax_scale)
        self.causal, self.window = _flag(causal, "causal"), _pair(window_size, "window_size")
        self.deterministic = _flag(deterministic, "deterministic")
        self.seed = c_integer(seed, "seed", "uint64") if seed is not None else 0
        self.offset = c_integer(offset, "offset", "uint64")
        self.backend = backend
        shape = _shape_of(q)
        self.varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
        if self.varlen:
            if cu_seqlens_q is None or cu_seqlens_k is None or max_seqlen_q is None or max_seqlen_k is None:
                raise ValueError("varlen needs cu_seqlens_q, cu_seqlens_k, max_seqlen_q and max_seqlen_k")
            self.cu_q = _int32_on(q, cu_seqlens_q, "cu_seqlens_q")
            self.cu_k = _int32_on(q, cu_seqlens_k, "cu_seqlens_k")
            if len(self.cu_q.shape) != 1 or tuple(self.cu_q.shape) != tuple(self.cu_k.shape) or self.cu_q.shape[0] < 1:
                raise ValueError("cu_seqlens_q and cu_seqlens_k must be 1-D of the same length batch + 1")
            self.batch = self.cu_q.shape[0] - 1
            self.max_seqlen = (c_integer(max_seqlen_q, "max_seqlen_q", "int64"),
                               c_integer(max_seqlen_k, "max_seqlen_k", "int64"))
        self.block_table = None
        if block_table is not None:  # paged k / v [num_pages, page_size, heads_kv, d]
            if not self.varlen:
                raise ValueError("block_table needs cu_seqlens_q / cu_seqlens_k (flash_attn_varlen_func)")
            bt = _int32_on(q, block_table, "block_table")
            if len(bt.shape) != 2 or bt.shape[0] != self.batch:
                raise ValueError(f"block_table must be [batch, max_pages] = ({self.batch}, ...), "
                                 f"got shape {tuple(bt.shape)}")
            self.block_table = bt
        self.mask = None
        if block_mask is not None:
            self._make_mask(block_mask, block_size)
        self.softcap = check_softcap(softcap)
        self.slopes, self.slopes_stride = None, 0
        if alibi_slopes is not None:
            self._take_slopes(q, shape, alibi_slopes)
        self.heads = shape[-2]
        self.sink = None if learnable_sink is None else _sink.take(q, self.heads, learnable_sink)

    def _take_slopes(self, q, q_shape, alibi_slopes):
        """ALiBi slopes [heads] or [batch, heads] as float32 in q's memory."""
        heads = q_shape[-2]
        batch = self.batch if self.varlen else q_shape[0]
        s = _float32_on(q, alibi_slopes)
        shape = tuple(s.shape)
        if shape not in ((heads,), (batch, heads)):
            raise ValueError(f"alibi_slopes must be [heads] = ({heads},) or [batch, heads] = ({batch}, {heads}), "
                             f"got shape {shape}")
        self.slopes, self.slopes_stride = s, (heads if len(shape) == 2 else 0)

    def _make_mask(self, block_mask, block_size):
        import numpy as np
        bits = block_mask.detach().cpu().numpy() if _is_torch(block_mask) else np.asarray(block_mask)
        if bits.ndim == 2:
            bits = bits[None]
        if bits.ndim != 3:
            raise ValueError(f"block_mask must be [rows, cols] or [heads, rows, cols], got shape {bits.shape}")
        if block_size is None:
            raise ValueError("block_mask needs block_size=(block_q, block_k)")
        block_q, block_k = _pair(block_size, "block_size")
        self.bits = np.ascontiguousarray(bits != 0, dtype=np.uint8)
        m = _capi.BlockMask()
        st = _capi.lib().fa_block_mask_from_bitmap(C.byref(m), self.bits.ctypes.data, self.bits.shape[0],
                                                   self.bits.shape[1], self.bits.shape[2], block_q, block_k)
        if st != 0:
            raise _capi.FlashAttnError(st, f"block_mask: {_capi.contextless_error(st)}")
        self.mask = m

    def __del__(self):
        if getattr(self, "mask", None) is not None and _capi._lib is not None:
            _capi._lib.fa_block_mask_destroy(C.byref(self.mask))
            self.mask = None

    def varlen_for(self, marshal):
        """The fa_varlen of the call (None when dense), its cu_seqlens where the context reads them;
        kept on self until the next call."""
        if not self.varlen:
            return None
        self.vl = _capi.Varlen()
        self.vl.cu_seqlens_q, self.vl.cu_seqlens_k = marshal.address(self.cu_q), marshal.address(self.cu_k)
        self.vl.batch = self.batch
        self.vl.max_seqlen_q, self.vl.max_seqlen_k = self.max_seqlen
        if self.block_table is not None:
            self.vl.block_table = marshal.address(self.block_table)
            self.vl.block_table_stride = self.block_table.shape[1]
        return C.pointer(self.vl)

    def options(self, marshal):
        # a structure ctypes owns, filled from the library's defaults: PyPy's ctypes cannot store
        # pointers into a structure returned by value from a foreign function
        o = _capi.Options()
        defaults = _capi.lib().fa_options_default()
        C.memmove(C.byref(o), C.byref(defaults), C.sizeof(o))
        o.softmax_scale = self.softmax_scale
        o.causal = int(self.causal)
        o.window_left, o.window_right = self.window
        o.dropout_p = self.dropout_p
        o.dropout_seed, o.dropout_offset = self.seed, self.offset
        if self.mask is not None:
            o.block_mask = C.pointer(self.mask)
        o.deterministic = int(self.deterministic)
        o.softcap = self.softcap
        if self.slopes is not None:
            o.alibi_slopes = marshal.address(self.slopes)
            o.alibi_batch_stride = self.slopes_stride
        o.learnable_sink = marshal.address(self.sink)
        return o


def _bind_stream(ctx, ref, view):
    """The stream a CUDA call runs on: torch's current stream for torch tensors, the stream other
    libraries' arrays are ready on (legacy default unless their interface names another)."""
    if ctx.backend != "cuda" or view.device == _HOST:
        return
    if _is_torch(ref):
        import torch
        stream = torch.cuda.current_stream(ref.device).cuda_stream
        # torch names its default stream 0, the library's NULL (its own non-blocking stream, not
        # ordered with torch's work): pass cudaStreamLegacy, the legacy default stream's handle
        stream = stream or _CUDA_STREAM_LEGACY
    else:
        stream = view.stream or _CUDA_STREAM_LEGACY
    ctx.check(_capi.lib().fa_context_set_stream(ctx.ptr, C.c_void_p(stream)), "set_stream")


def _run(ctx, ref, ref_view, fill, launch, what):
    """fill(marshal) builds the call's arguments, launch(args) calls the library: under the
    context's lock, with host arrays copied to a device context and back, every copy freed."""
    with ctx.lock:
        marshal = _Marshal(ctx)
        try:
            args = fill(marshal)
            _bind_stream(ctx, ref, ref_view)
            ctx.check(launch(C.byref(args)), what)
            marshal.finish()
        finally:
            marshal.close()


def forward(call, q, k, v):
    """O and LSE of attention(q, k, v) under call's options."""
    q, k, v = (maybe_contiguous(x) for x in (q, k, v))
    ins = [_View(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v"))]
    shape = ins[0].shape
    if call.varlen:
        lse_shape = (shape[1], shape[0])
    else:
        if len(shape) != 4:
            raise ValueError(f"q must be [batch, seqlen, heads, d], got shape {tuple(shape)}")
        lse_shape = (shape[0], shape[2], shape[1])
    ctx = _context_for(ins, call.backend)
    out = _outputs_like(call.varlen, q, shape[:-1] + ins[2].shape[-1:], ctx=ctx, view=ins[0])  # V's d_v
    lse = _outputs_like(call.varlen, q, lse_shape, "float32", fill=-math.inf, ctx=ctx, view=ins[0])
    views = ins + [_View(out, "out"), _View(lse, "lse")]

    def fill(m):
        a = _capi.FwdArgs()
        a.q, a.k, a.v = (m.tensor(x) for x in views[:3])
        # outputs: copied in only where they hold the defined padding rows (varlen)
        a.o, a.lse = (m.tensor(x, copy_in=call.varlen, copy_back=True) for x in views[3:])
        a.varlen = call.varlen_for(m)
        a.opts = call.options(m)
        return a

    _run(ctx, q, views[0], fill, lambda a: _capi.lib().fa_forward(ctx.ptr, a), "fa_forward")
    return out, lse


def backward(call, dout, q, k, v, out, lse, into=None):
    """dQ, dK, dV of attention(q, k, v) for the output gradient dout, and dsink when the call has a
    learnable sink. into: (dq, dk, dv) torch tensors to write, shaped as q, k, v (views of one
    packed gradient; varlen: zero-filled, as _outputs_like's), else new ones."""
    dout, q, k, v = (maybe_contiguous(x) for x in (dout, q, k, v))
    names = (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse), ("dout", dout))
    ins = [_View(x, n) for n, x in names]
    ctx = _context_for(ins, call.backend)
    if into is None:
        dq, dk, dv = (_outputs_like(call.varlen, x, ctx=ctx, view=xv) for x, xv in zip((q, k, v), ins))
    else:
        dq, dk, dv = into
    views = ins + [_View(x, n) for n, x in (("dq", dq), ("dk", dk), ("dv", dv))]
    dsink = None if call.sink is None else _sink.gradient_buffer(q, call.heads, ctx, ins[0])

    def fill(m):
        a = _capi.BwdArgs()
        a.q, a.k, a.v, a.o, a.lse, a.dout = (m.tensor(x) for x in views[:6])
        a.dq, a.dk, a.dv = (m.tensor(x, copy_in=call.varlen, copy_back=True) for x in views[6:])
        if dsink is not None:
            a.dsink = m.tensor(_View(dsink, "dsink"), copy_in=False, copy_back=True)
        a.varlen = call.varlen_for(m)
        a.opts = call.options(m)
        return a

    _run(ctx, q, views[0], fill, lambda a: _capi.lib().fa_backward(ctx.ptr, a), "fa_backward")
    return (dq, dk, dv) if dsink is None else (dq, dk, dv, dsink)


def kvcache_forward(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                    cache_batch_idx=None, block_table=None, cache_leftpad=None, softmax_scale=None, causal=False,
                    window_size=(-1, -1),
                    softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0, check_on_device=False,
                    backend=None, learnable_sink=None):
    """O and LSE of q attending over the cache (fa_forward_kvcache); k / v appended in place (on a
    device backend, host caches are copied there and back whole)."""
    named = [("q", q), ("k_cache", k_cache), ("v_cache", v_cache)]
    if (k is None) != (v is None):
        raise ValueError("k and v (the new keys and values) go together")
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("rotary_cos and rotary_sin go together")
    if k is not None:
        named += [("k", k), ("v", v)]
    if rotary_cos is not None:
        named += [("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)]
    views = {n: _View(x, n) for n, x in named}
    shape = views["q"].shape
    if len(shape) != 4:
        raise ValueError(f"q must be [batch, seqlen_new, heads, d], got shape {tuple(shape)}")
    batch = shape[0]
    call = Call(q, softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                alibi_slopes=alibi_slopes, backend=backend, learnable_sink=learnable_sink)
    # appending writes into the caches: memory the caller marked read-only is refused, not written
    for name in ("k_cache", "v_cache") if k is not None else ():
        array = views[name].array
        if array is not None and not array.flags.writeable:
            raise ValueError(f"{name} is read-only (writeable=False): appending k / v writes into it in place")
    num_splits = c_integer(num_splits, "num_splits", "int32")
    ints = {}
    if cache_seqlens is not None:
        if isinstance(cache_seqlens, numbers.Integral) and not isinstance(cache_seqlens, bool):
            cache_seqlens = [c_integer(cache_seqlens, "cache_seqlens", "int32")] * batch
        ints["cache_seqlens"] = _int32_on(q, cache_seqlens, "cache_seqlens")
    if cache_batch_idx is not None:
        ints["cache_batch_idx"] = _int32_on(q, cache_batch_idx, "cache_batch_idx")
    if cache_leftpad is not None:
        pads = _int32_on(q, cache_leftpad, "cache_leftpad")
        if len(pads.shape) != 1:
            raise ValueError(f"cache_leftpad must be [batch] = ({batch},), got shape {tuple(pads.shape)}")
        ints["cache_leftpad"] = pads
    if block_table is not None:
        bt = _int32_on(q, block_table, "block_table")
        if len(bt.shape) != 2 or bt.shape[0] != batch:
            raise ValueError(f"block_table must be [batch, max_pages] = ({batch}, ...), got shape {tuple(bt.shape)}")
        ints["block_table"] = bt
    for name, a in ints.items():
        if len(a.shape) not in (1, 2) or a.shape[0] != batch:
            raise ValueError(f"{name} must have batch = {batch} rows, got shape {tuple(a.shape)}")
    ctx = _context_for(list(views.values()), backend)
    out = _empty_like(q, shape[:-1] + views["v_cache"].shape[-1:], ctx=ctx, view=views["q"])  # d_v: v_cache's
    lse = _empty_like(q, (shape[0], shape[2], shape[1]), "float32", ctx=ctx, view=views["q"])
    views["out"], views["lse"] = _View(out, "out"), _View(lse, "lse")

    def fill(m):
        a = _capi.KvcacheArgs()
        a.q = m.tensor(views["q"])
        # the caches are read and written in place: copied in, and back after a call that succeeded
        a.k_cache = m.tensor(views["k_cache"], copy_back=k is not None)
        a.v_cache = m.tensor(views["v_cache"], copy_back=k is not None)
        a.o = m.tensor(views["out"], copy_in=False, copy_back=True)
        a.lse = m.tensor(views["lse"], copy_in=False, copy_back=True)
        if k is not None:
            a.k_new, a.v_new = m.tensor(views["k"]), m.tensor(views["v"])
        if rotary_cos is not None:
            a.rotary_cos, a.rotary_sin = m.tensor(views["rotary_cos"]), m.tensor(views["rotary_sin"])
            a.rotary_interleaved = int(_flag(rotary_interleaved, "rotary_interleaved"))
        if "cache_seqlens" in ints:
            a.cache_seqlens = m.address(ints["cache_seqlens"])
        if "cache_batch_idx" in ints:
            a.cache_batch_idx = m.address(ints["cache_batch_idx"])
        if "cache_leftpad" in ints:
            a.cache_leftpad = m.address(ints["cache_leftpad"])
        if "block_table" in ints:
            a.block_table = m.address(ints["block_table"])
            a.block_table_stride = ints["block_table"].shape[1]
        a.opts = call.options(m)
        a.num_splits = num_splits
        a.check_on_device = int(_flag(check_on_device, "check_on_device"))
        return a

    _run(ctx, q, views["q"], fill, lambda a: _capi.lib().fa_forward_kvcache(ctx.ptr, a), "fa_forward_kvcache")
    return out, lse


def synchronize(ref):
    """Waits for the library's work on ref's device (the current torch stream for CUDA tensors) and
    raises FlashAttnError for a bad cache_seqlens / block_table / cache_batch_idx value that a
    check_on_device call found there since the last synchronize (fa_synchronize)."""
    view = _View(ref, "ref")
    ctx = _context_for([view], "cpu" if view.device == _HOST else None)
    with ctx.lock:
        _bind_stream(ctx, ref, view)
        ctx.check(_capi.lib().fa_synchronize(ctx.ptr), "fa_synchronize")
