"""_warmup.py: flashattn.warmup, fa_warmup (include/flashattn.h) for one shape: the kernels that
calls of the shape run made ready before the first real call. On a backend that compiles its
kernels at run time (OpenCL; CUDA built with -Dcuda-kernels=rtc) that compiles them, or loads
them from the disk cache; elsewhere it is one small call."""
import ctypes as C
import math
import os

from . import _capi
from ._convert import parse_backend

_DTYPES = {"fp32": _capi.DTYPE_F32, "float32": _capi.DTYPE_F32, "f32": _capi.DTYPE_F32,
           "fp16": _capi.DTYPE_F16, "float16": _capi.DTYPE_F16, "f16": _capi.DTYPE_F16, "half": _capi.DTYPE_F16,
           "bf16": _capi.DTYPE_BF16, "bfloat16": _capi.DTYPE_BF16}
_INT64_MAX = 2 ** 63 - 1


def _dtype_code(dtype):
    """The fa_dtype of a name ("bf16", "float16"), a NumPy dtype or scalar type, or a torch dtype."""
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type):
        name = dtype.__name__  # np.float16, ml_dtypes.bfloat16
    else:
        name = str(getattr(dtype, "name", None) or dtype)  # np.dtype("float16"), torch.bfloat16
    name = name.lower()
    if name.startswith("torch."):
        name = name[len("torch."):]
    if name not in _DTYPES:
        raise ValueError(f"warmup: dtype {dtype!r} is not float32, float16 or bfloat16")
    return _DTYPES[name]


def _integer(value, name, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"warmup: {name} must be an int, got {type(value).__name__}")
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise ValueError(f"warmup: {name} = {value} does not fit in 64 bits")
    return value


def _backend_and_device(backend, device):
    """backend=None: FLASHATTN_BACKEND, else the library's default (CUDA, HIP, then CPU), where
    torch's CUDA tensors run; "name:index" sets the device, which device= may then only repeat."""
    index = _integer(device, "device")
    if backend is None:
        backend = os.environ.get("FLASHATTN_BACKEND") or "default"
        name, env_index = parse_backend(backend, "FLASHATTN_BACKEND")
        return name, env_index if ":" in backend else index
    name, named_index = parse_backend(backend)
    if ":" in backend and index not in (0, named_index):
        raise ValueError(f"warmup: backend={backend!r} names device {named_index}, device={index} another")
    return name, named_index if ":" in backend else index


def warmup(dtype, head_dim, *, head_dim_v=None, heads_q=1, heads_kv=None, seqlen=128, causal=False,
           window_size=(-1, -1), softcap=0.0, learnable_sink=False, backward=False, backend=None, device=0):
    """Makes ready the kernels that calls of one shape run (fa_warmup): a forward (and with
    backward=True the backward) of batch 1, `seqlen` queries and keys, `heads_q` query and
    `heads_kv` (default heads_q) key / value heads of head dims head_dim and head_dim_v (default
    head_dim), in `dtype` ("bf16", "fp16", "fp32", a NumPy or torch dtype), with the options
    given, run once on zeros that the library allocates and frees. learnable_sink=True warms the
    kernels of calls with a sink. The kernels depend on the dtype, the head dims and the options,
    not on the lengths. backend: "cpu", "cuda", "cuda:1", "opencl", ...; None: FLASHATTN_BACKEND,
    else the library's default. A shape the backend refuses raises FlashAttnError with the
    library's status and message ("fa_warmup: ...")."""
    code = _dtype_code(dtype)
    d = _integer(head_dim, "head_dim")
    d_v = _integer(head_dim_v, "head_dim_v", allow_none=True)
    hq = _integer(heads_q, "heads_q")
    hk = _integer(heads_kv, "heads_kv", allow_none=True)
    n = _integer(seqlen, "seqlen")
    for flag, name in ((causal, "causal"), (learnable_sink, "learnable_sink"), (backward, "backward")):
        if not isinstance(flag, bool):
            raise TypeError(f"warmup: {name} must be a bool, got {type(flag).__name__}")
    try:
        left, right = (_integer(w, "window_size") for w in window_size)
    except (TypeError, ValueError) as e:
        raise type(e)(f"warmup: window_size must be a pair of ints (-1: unbounded), got {window_size!r}") from None
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not math.isfinite(softcap) or softcap < 0:
        raise ValueError(f"warmup: softcap must be a finite number >= 0 (0: off), got {softcap!r}")
    name, index = _backend_and_device(backend, device)

    ctx = _capi.context(name, index)
    L = _capi.lib()
    opts = L.fa_options_default()
    opts.causal = int(causal)
    opts.window_left, opts.window_right = left, right
    opts.softcap = float(softcap)
    with ctx.lock:
        sink = C.c_void_p()
        try:
            if learnable_sink and hq >= 1:  # (fa_warmup refuses heads_q < 1 itself)
                # zero logits: which kernels run depends on there being a sink, not on its values
                if hq > 2 ** 31 - 1:
                    raise ValueError(f"warmup: heads_q = {hq}: at most 2^31 - 1 heads")
                zeros = (C.c_float * hq)()
                ctx.check(L.fa_malloc(ctx.ptr, C.sizeof(zeros), C.byref(sink)), "fa_malloc")
                ctx.check(L.fa_memcpy(ctx.ptr, sink, zeros, C.sizeof(zeros), _capi.COPY_HOST_TO_DEVICE), "fa_memcpy")
                opts.learnable_sink = sink.value
            st = L.fa_warmup(ctx.ptr, code, n, hq, hq if hk is None else hk, d, 0 if d_v is None else d_v,
                             C.byref(opts), int(backward))
            if st != 0:  # the message already begins "fa_warmup: "
                msg, where = L.fa_context_last_error(ctx.ptr), L.fa_context_last_error_location(ctx.ptr)
                raise _capi.FlashAttnError(st, msg.decode() if msg else _capi.status_message(st),
                                           where.decode() if where else None)
        finally:
            if sink.value:
                L.fa_free(ctx.ptr, sink)
