"""_convert.py: the Python values of the package's arguments checked and converted into what the C
fields take, refusing what ctypes or a cast would change silently: integers for int32 / int64 /
uint64 fields, int32 arrays, float32 values, flags, pairs (windows, block sizes), backend names,
and the type checks of the options that run before any work."""
import math
import numbers
import sys


def _is_torch(x):
    return type(x).__module__.startswith("torch")


_C_INTEGERS = {"int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1), "uint64": (0, 2 ** 64 - 1)}


def c_integer(value, name, ctype):
    """value as a Python int for a C field of type ctype ("int32", "int64", "uint64"): an integer
    (not a bool) that fits, else TypeError / OverflowError; ctypes would truncate it silently."""
    v = _integer(value, name)
    lo, hi = _C_INTEGERS[ctype]
    if not lo <= v <= hi:
        raise OverflowError(f"{name} = {v} does not fit {ctype} ({lo} .. {hi})")
    return v


def int32_array(values, name):
    """values (a NumPy array, a sequence of integers, a torch tensor in host memory) as a
    contiguous NumPy int32 array, refusing what a cast would change: floats and bools (TypeError),
    integers outside int32 (OverflowError)."""
    import numpy as np
    if _is_torch(values):
        values = values.detach().cpu().numpy()
    try:
        a = np.asarray(values)
    except (TypeError, ValueError, OverflowError) as e:
        raise TypeError(f"{name}: expected int32 values, got {type(values).__name__} ({e})") from None
    if a.size == 0:  # no value to change (an empty list is float64 to NumPy)
        return np.zeros(a.shape, dtype=np.int32)
    if a.dtype.kind == "O":  # Python integers beyond int64, or mixed objects
        flat = [c_integer(x, name, "int32") for x in a.ravel()]
        return np.ascontiguousarray(np.array(flat, dtype=np.int32).reshape(a.shape))
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integers (int32), got dtype {a.dtype}: a cast would change the values")
    if a.dtype.itemsize >= 4 and a.dtype != np.int32:
        lo, hi = int(a.min()), int(a.max())
        if lo < -2 ** 31 or hi > 2 ** 31 - 1:
            bad = lo if lo < -2 ** 31 else hi
            raise OverflowError(f"{name}: value {bad} does not fit int32")
    return np.ascontiguousarray(a, dtype=np.int32)


def dtype_refused(name, dtype):
    """The message for an array of a dtype the library has not; float64 says why and what to do
    (torch.autograd.gradcheck's default dtype is what brings most users here)."""
    text = f"{name}: dtype {dtype} is not float32, float16 or bfloat16"
    if str(dtype).rsplit(".", 1)[-1] in ("float64", "double"):
        text += (": fp64 is not a dtype of this library (its dtypes are FlashAttention's: fp32, fp16, bf16). "
                 "Convert with .float() / .astype(np.float32); for gradcheck use fp32 inputs with "
                 "torch.autograd.gradcheck(..., eps=1e-3, atol=1e-2, rtol=1e-2), or compare the gradients "
                 "against a float64 reference implementation (docs/python.md, 'Gradients and fp64')")
    return text


def maybe_contiguous(a):
    """a with a contiguous last dimension, as FlashAttention-2's maybe_contiguous: a copy (torch's
    .contiguous(), NumPy's ascontiguousarray) only where the last stride is not 1 element; other
    strides pass through as they are (the library takes them)."""
    if _is_torch(a):
        return a if a.dim() == 0 or a.stride(-1) == 1 else a.contiguous()
    import numpy as np
    if isinstance(a, np.ndarray) and a.ndim and a.strides[-1] != a.itemsize:
        return np.ascontiguousarray(a)
    return a


def parse_backend(backend, name="backend"):
    """(backend name, device index) from "name" or "name:index"."""
    if not isinstance(backend, str):
        raise TypeError(f"{name} must be a string such as 'cpu', 'opencl' or 'cuda:1', got {type(backend).__name__}")
    base, sep, index = backend.partition(":")
    if not base or (sep and not index.isdigit()):
        raise ValueError(f"{name} must be 'name' or 'name:index', got {backend!r}")
    return base, int(index) if sep else 0


def symbolic(value):
    """Whether value may have no concrete value here: one of torch's symbolic numbers (SymInt,
    SymFloat, SymBool: make_fx, AOT tracing), or any number while torch.compile traces (dynamic=True
    turns an unspecialised float into a graph input that math.isfinite or float() would have to
    force). The checks that need a concrete value are then left to the operator's eager body
    (_core.Call), which runs them on the real value when the compiled code runs."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)) or torch.compiler.is_compiling()


def check_softcap(softcap):
    if symbolic(softcap):  # checked when the operator runs (Call)
        return softcap
    c = float(softcap)
    if not math.isfinite(c) or c < 0.0:
        raise ValueError(f"softcap must be finite and >= 0 (0 = off), got {softcap}")
    return c


def check_scale(softmax_scale):
    """softmax_scale as the float32 the library receives; its value is the library's to judge
    (finite and >= 0, 0 selecting 1 / sqrt(d))."""
    return float32_value(softmax_scale, "softmax_scale")


def float32_value(value, name):
    """A real number for a float32 field: OverflowError where a finite value would become inf.
    A symbolic value (tracing) is returned as it is, checked when the operator runs."""
    if symbolic(value):
        return value
    v = _real(value, name)
    if math.isfinite(v) and abs(v) > 3.4028234663852886e38 * (1 + 2 ** -25):
        raise OverflowError(f"{name} = {value} does not fit float32")
    return v


def _real(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def _integer(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    return int(value)


def _flag(value, name):
    """bool, NumPy bool or an integer 0 / 1 (as FlashAttention-2's callers pass them)."""
    if type(value).__name__ == "bool_" or isinstance(value, bool):
        return bool(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def _pair(value, name):
    """A pair of integers for two int64 fields (a window, a block size)."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be a pair of integers (left, right), got {value!r}")
    return c_integer(value[0], f"{name}[0]", "int64"), c_integer(value[1], f"{name}[1]", "int64")


def check_options(dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                  alibi_slopes=None, deterministic=False, return_attn_probs=False, seed=None, offset=0,
                  backend=None):
    """TypeError for an option of the wrong type (what a positional argument in the wrong place
    gives), before any work; the values themselves are checked by Call and the library."""
    _real(dropout_p, "dropout_p")
    if softmax_scale is not None:
        _real(softmax_scale, "softmax_scale")
    _flag(causal, "causal")
    _pair(window_size, "window_size")
    _real(softcap, "softcap")
    if alibi_slopes is not None and (isinstance(alibi_slopes, (numbers.Number, str, bytes)) or
                                     type(alibi_slopes).__name__ == "bool_"):
        raise TypeError(f"alibi_slopes must be an array of float32 slopes [heads] or [batch, heads], got "
                        f"{type(alibi_slopes).__name__}")
    _flag(deterministic, "deterministic")
    _flag(return_attn_probs, "return_attn_probs")
    if seed is not None:
        _integer(seed, "seed")
    _integer(offset, "offset")
    if backend is not None:
        parse_backend(backend)
