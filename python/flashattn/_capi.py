"""_capi.py: the C library (include/flashattn.h) through ctypes: the structures field for field
(each names its C type in _c_name_; python/tests/test_abi.py holds them to the library's own
fa_abi_layout table), the library found and loaded once, contexts cached per (backend, device), and every status turned
into a FlashAttnError carrying the library's status and message."""
import ctypes as C
import glob
import os
import sys
import sysconfig
import threading

from . import _nvrtc

FA_MAX_DIMS = 4
DTYPE_F32, DTYPE_F16, DTYPE_BF16 = 0, 1, 2
COPY_HOST_TO_DEVICE, COPY_DEVICE_TO_HOST = 0, 1  # fa_copy_kind
STATUS_NAMES = ["FA_SUCCESS", "FA_ERR_INVALID_ARG", "FA_ERR_UNSUPPORTED", "FA_ERR_OUT_OF_MEMORY",
                "FA_ERR_NO_BACKEND", "FA_ERR_NO_DEVICE", "FA_ERR_BACKEND", "FA_ERR_OVERFLOW", "FA_ERR_INTERNAL"]


class Tensor(C.Structure):
    _c_name_ = "fa_tensor"
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int), ("ndim", C.c_int),
                ("shape", C.c_int64 * FA_MAX_DIMS), ("stride", C.c_int64 * FA_MAX_DIMS)]


class BlockMask(C.Structure):
    _c_name_ = "fa_block_mask"
    _fields_ = [("heads", C.c_int64), ("rows", C.c_int64), ("cols", C.c_int64),
                ("block_q", C.c_int64), ("block_k", C.c_int64), ("bits", C.POINTER(C.c_uint8))]


class Options(C.Structure):
    _c_name_ = "fa_options"
    _fields_ = [("softmax_scale", C.c_float), ("causal", C.c_int), ("window_left", C.c_int64),
                ("window_right", C.c_int64), ("dropout_p", C.c_float), ("dropout_seed", C.c_uint64),
                ("dropout_offset", C.c_uint64), ("block_mask", C.POINTER(BlockMask)), ("deterministic", C.c_int),
                ("softcap", C.c_float), ("alibi_slopes", C.c_void_p), ("alibi_batch_stride", C.c_int64),
                ("learnable_sink", C.c_void_p)]


class Varlen(C.Structure):
    _c_name_ = "fa_varlen"
    _fields_ = [("cu_seqlens_q", C.c_void_p), ("cu_seqlens_k", C.c_void_p), ("batch", C.c_int64),
                ("max_seqlen_q", C.c_int64), ("max_seqlen_k", C.c_int64), ("block_table", C.c_void_p),
                ("block_table_stride", C.c_int64)]


class FwdArgs(C.Structure):
    _c_name_ = "fa_fwd_args"
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor), ("lse", Tensor),
                ("varlen", C.POINTER(Varlen)), ("opts", Options)]


class BwdArgs(C.Structure):
    _c_name_ = "fa_bwd_args"
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor), ("lse", Tensor), ("dout", Tensor),
                ("dq", Tensor), ("dk", Tensor), ("dv", Tensor), ("varlen", C.POINTER(Varlen)), ("opts", Options),
                ("dsink", Tensor)]


class Capabilities(C.Structure):
    _c_name_ = "fa_capabilities"
    _fields_ = [("dtypes", C.c_uint), ("max_head_dim", C.c_int), ("head_dims", C.c_int * 16),
                ("features", C.c_uint), ("notes", C.c_char * 256)]


class PlanInfo(C.Structure):
    _c_name_ = "fa_plan_info"
    _fields_ = [(n, C.c_int64) for n in ("block_q", "block_k", "onchip_bytes", "paper_block_q", "paper_block_k",
                                          "num_q_blocks", "num_k_blocks", "workspace_fwd", "workspace_bwd")]


class IoModel(C.Structure):
    _c_name_ = "fa_io_model"
    _fields_ = [(n, C.c_int64) for n in ("block_q", "block_k", "standard_read", "standard_write", "flash_read",
                                          "flash_write", "flash_qouter_read", "flash_qouter_write")]


class KvcacheArgs(C.Structure):
    _c_name_ = "fa_kvcache_args"
    _fields_ = [("q", Tensor), ("k_cache", Tensor), ("v_cache", Tensor), ("cache_seqlens", C.c_void_p),
                ("block_table", C.c_void_p), ("block_table_stride", C.c_int64), ("cache_batch_idx", C.c_void_p),
                ("k_new", Tensor), ("v_new", Tensor), ("rotary_cos", Tensor), ("rotary_sin", Tensor),
                ("rotary_interleaved", C.c_int), ("o", Tensor), ("lse", Tensor), ("opts", Options),
                ("num_splits", C.c_int), ("check_on_device", C.c_int), ("cache_leftpad", C.c_void_p)]


class RingComm(C.Structure):
    _c_name_ = "fa_ring_comm"
    _fields_ = [("rank", C.c_int), ("size", C.c_int),
                ("start", C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.c_void_p, C.c_void_p, C.c_size_t,
                                      C.c_void_p)),
                ("finish", C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.c_void_p)),
                ("agree", C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_int, C.POINTER(C.c_int))),
                ("user", C.c_void_p)]


class AbiField(C.Structure):
    _c_name_ = "fa_abi_field"
    _fields_ = [("struct_name", C.c_char_p), ("field_name", C.c_char_p), ("offset", C.c_size_t),
                ("size", C.c_size_t)]


class FlashAttnError(RuntimeError):
    """A call the library refused or failed: .status is the fa_status name (FA_ERR_...), .code its
    value, .message the library's explanation, .location where in the library's C source it was
    raised ("validate.c:288"; None when not known), for debugging: the message leaves it out."""

    def __init__(self, code, message, location=None):
        self.code = code
        self.status = STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else f"status {code}"
        self.message = message
        self.location = location
        super().__init__(f"{self.status}: {message}")


def _candidates():
    """Where libflashattn may be, in order: $FLASHATTN_LIBRARY; beside this package (an editable
    or in-tree layout); the wheel's library folder (meson-python puts the project's shared
    libraries in .flashattn.mesonpy.libs at the wheel's root, which installs into platlib, while
    this package, pure Python, installs into purelib: the same folder in a venv, not on every
    system); the system's loader path."""
    env = os.environ.get("FLASHATTN_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    folders = [here]
    for site in (os.path.dirname(here), sysconfig.get_path("platlib"), sysconfig.get_path("purelib")):
        folder = os.path.join(site, ".flashattn.mesonpy.libs")
        if site and folder not in folders:
            folders.append(folder)
    for folder in folders:
        for name in sorted(glob.glob(os.path.join(folder, "libflashattn.so*")) +
                           glob.glob(os.path.join(folder, "libflashattn*.dylib"))):
            yield name
    yield "libflashattn.so.0"


_lib = None
_lock = threading.Lock()


def lib():
    """The loaded library, its prototypes declared (once per process)."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        _nvrtc.point_library_at_wheel_nvrtc()
        errors = []
        for path in _candidates():
            try:
                L = C.CDLL(path)
                break
            except OSError as e:
                errors.append(f"{path}: {e}")
        else:
            raise ImportError("flashattn: cannot load libflashattn (set FLASHATTN_LIBRARY to its path): " +
                              "; ".join(errors))
        L.fa_version.restype = C.c_char_p
        L.fa_status_string.restype = C.c_char_p
        L.fa_status_string.argtypes = [C.c_int]
        L.fa_context_create.argtypes = [C.POINTER(C.c_void_p), C.c_char_p, C.c_int]
        L.fa_context_destroy.argtypes = [C.c_void_p]
        L.fa_context_destroy.restype = None
        L.fa_context_last_error.restype = C.c_char_p
        L.fa_context_last_error.argtypes = [C.c_void_p]
        L.fa_last_error.restype = C.c_char_p
        L.fa_last_error.argtypes = []
        L.fa_context_last_error_location.restype = C.c_char_p
        L.fa_context_last_error_location.argtypes = [C.c_void_p]
        L.fa_last_error_location.restype = C.c_char_p
        L.fa_last_error_location.argtypes = []
        L.fa_context_backend_name.restype = C.c_char_p
        L.fa_context_backend_name.argtypes = [C.c_void_p]
        L.fa_context_set_stream.argtypes = [C.c_void_p, C.c_void_p]
        L.fa_forward.argtypes = [C.c_void_p, C.POINTER(FwdArgs)]
        L.fa_backward.argtypes = [C.c_void_p, C.POINTER(BwdArgs)]
        L.fa_forward_kvcache.argtypes = [C.c_void_p, C.POINTER(KvcacheArgs)]
        L.fa_synchronize.argtypes = [C.c_void_p]
        L.fa_warmup.argtypes = [C.c_void_p, C.c_int, C.c_int64, C.c_int64, C.c_int64, C.c_int64, C.c_int64,
                                C.POINTER(Options), C.c_int]
        L.fa_options_default.restype = Options
        L.fa_options_default.argtypes = []
        L.fa_backend_count.restype = C.c_int
        L.fa_backend_name.restype = C.c_char_p
        L.fa_backend_name.argtypes = [C.c_int]
        L.fa_device_count.argtypes = [C.c_char_p, C.POINTER(C.c_int)]
        L.fa_backend_availability.argtypes = [C.c_char_p, C.c_char_p, C.c_size_t]
        L.fa_block_mask_from_bitmap.argtypes = [C.POINTER(BlockMask), C.c_void_p, C.c_int64, C.c_int64, C.c_int64,
                                                C.c_int64, C.c_int64]
        L.fa_block_mask_create.argtypes = [C.POINTER(BlockMask), C.c_int, C.c_int64, C.c_int64, C.c_int64,
                                           C.c_int64, C.c_int64, C.c_int64, C.c_double, C.c_uint64]
        L.fa_block_mask_destroy.argtypes = [C.POINTER(BlockMask)]
        L.fa_block_mask_destroy.restype = None
        L.fa_malloc.argtypes = [C.c_void_p, C.c_size_t, C.POINTER(C.c_void_p)]
        L.fa_free.argtypes = [C.c_void_p, C.c_void_p]
        L.fa_memcpy.argtypes = [C.c_void_p, C.c_void_p, C.c_void_p, C.c_size_t, C.c_int]
        L.fa_abi_layout.restype = C.POINTER(AbiField)
        L.fa_abi_layout.argtypes = [C.POINTER(C.c_size_t)]
        _lib = L
        return L


def status_message(code):
    return lib().fa_status_string(code).decode()


def contextless_error(code):
    """The reason the calling thread's last call without a context (fa_context_create, the block
    mask constructors) failed, from fa_last_error; the status string if it left none."""
    msg = lib().fa_last_error()
    return msg.decode() if msg else status_message(code)


class Context:
    """One fa_context (a backend and a device); calls on it are serialised by a lock."""

    def __init__(self, backend, device):
        L = lib()
        self.ptr = C.c_void_p()
        st = L.fa_context_create(C.byref(self.ptr), backend.encode(), device)
        if st != 0:
            where = L.fa_last_error_location()
            raise FlashAttnError(st, f"cannot open backend '{backend}' device {device} ({contextless_error(st)})",
                                 where.decode() if where else None)
        self.backend = L.fa_context_backend_name(self.ptr).decode()
        self.lock = threading.Lock()

    def check(self, st, what):
        if st != 0:
            msg, where = lib().fa_context_last_error(self.ptr), lib().fa_context_last_error_location(self.ptr)
            raise FlashAttnError(st, f"{what}: {msg.decode() if msg else status_message(st)}",
                                 where.decode() if where else None)

    def __del__(self):
        if getattr(self, "ptr", None) and _lib is not None and not sys.is_finalizing():
            _lib.fa_context_destroy(self.ptr)
            self.ptr = None


_contexts = {}


def context(backend, device=0):
    """The cached context for (backend, device)."""
    key = (backend, device)
    with _lock:
        ctx = _contexts.get(key)
    if ctx is None:
        ctx = Context(backend, device)
        with _lock:
            ctx = _contexts.setdefault(key, ctx)
    return ctx


def backends():
    """The backends compiled into the loaded library."""
    L = lib()
    return [L.fa_backend_name(i).decode() for i in range(L.fa_backend_count())]


def backend_availability(name):
    """Whether backend `name` can run on this machine: (True, "available: N device(s)") or (False,
    the reason: "not compiled in", "library not found: ...", "no driver: ...", "no device...")."""
    if not isinstance(name, str):
        raise TypeError(f"backend_availability: the backend name must be a str, not {type(name).__name__}")
    why = C.create_string_buffer(512)
    st = lib().fa_backend_availability(name.encode(), why, len(why))
    return st == 0, why.value.decode(errors="replace")


def abi_layout():
    """The library's fa_abi_layout table: (struct name, field name or None, offset, size) rows."""
    n = C.c_size_t()
    rows = lib().fa_abi_layout(C.byref(n))
    return [(rows[i].struct_name.decode(), rows[i].field_name.decode() if rows[i].field_name else None,
             rows[i].offset, rows[i].size) for i in range(n.value)]


def tensor(data_ptr, dtype, shape, strides):
    """An fa_tensor over memory at data_ptr; shape and strides in elements."""
    t = Tensor()
    t.data = data_ptr
    t.dtype = dtype
    t.ndim = len(shape)
    for i, (n, s) in enumerate(zip(shape, strides)):
        t.shape[i] = n
        t.stride[i] = s
    return t

