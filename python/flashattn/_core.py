"""_core.py: one forward and one backward over the C library for NumPy arrays and torch tensors
(views with a contiguous last dimension, no copies), with FlashAttention-2's layouts: dense
[batch, seqlen, heads, d], LSE [batch, heads, seqlen]; packed (varlen) [total, heads, d], LSE
[heads, total]. The caller's arrays are passed to the library as they are: NumPy arrays and CPU
tensors to the CPU backend, CUDA tensors to the CUDA backend on the tensor's device and on the
current stream."""
import ctypes as C
import math

from . import _capi


def _is_torch(x):
    return type(x).__module__.startswith("torch")


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


class _View:
    """What the library needs of one array: address, dtype code, shape, strides (elements)."""

    def __init__(self, a, name):
        if _is_torch(a):
            codes = _torch_codes()
            if a.dtype not in codes:
                raise TypeError(f"{name}: dtype {a.dtype} is not float32, float16 or bfloat16")
            self.ptr, self.dtype = a.data_ptr(), codes[a.dtype]
            self.shape, self.strides = tuple(a.shape), a.stride()
            dev = a.device
            if dev.type == "cuda":
                self.device = ("cuda", dev.index if dev.index is not None else _torch_module().cuda.current_device())
            elif dev.type == "cpu":
                self.device = ("cpu", 0)
            else:
                raise TypeError(f"{name}: tensors on {dev.type} are not supported (cpu or cuda)")
        else:
            import numpy as np
            a = a if isinstance(a, np.ndarray) else np.asarray(a)
            name_of = a.dtype.name
            codes = {"float32": _capi.DTYPE_F32, "float16": _capi.DTYPE_F16, "bfloat16": _capi.DTYPE_BF16}
            if name_of not in codes:
                raise TypeError(f"{name}: dtype {name_of} is not float32, float16 or bfloat16 (ml_dtypes)")
            if any(s % a.itemsize for s in a.strides):
                raise ValueError(f"{name}: strides {a.strides} are not whole elements")
            self.ptr, self.dtype = a.ctypes.data, codes[name_of]
            self.shape, self.strides = a.shape, tuple(s // a.itemsize for s in a.strides)
            self.device = ("cpu", 0)
            self.array = a  # keeps a converted array alive for the call
        if len(self.shape) == 0 or len(self.shape) > _capi.FA_MAX_DIMS:
            raise ValueError(f"{name}: {len(self.shape)} dimensions")
        self.name = name

    def tensor(self):
        return _capi.tensor(self.ptr, self.dtype, self.shape, self.strides)


def _empty_like(a, shape=None, dtype=None):
    """An uninitialised array of a's kind on a's device."""
    shape = tuple(a.shape) if shape is None else shape
    if _is_torch(a):
        import torch
        return torch.empty(shape, dtype=a.dtype if dtype is None else getattr(torch, dtype), device=a.device)
    import numpy as np
    return np.empty(shape, dtype=a.dtype if dtype is None else dtype)


def _filled_like(a, value, shape=None, dtype=None):
    """An array of a's kind on a's device, every element value."""
    shape = tuple(a.shape) if shape is None else shape
    if _is_torch(a):
        import torch
        return torch.full(shape, value, dtype=a.dtype if dtype is None else getattr(torch, dtype), device=a.device)
    import numpy as np
    return np.full(shape, value, dtype=a.dtype if dtype is None else dtype)


def _outputs_like(varlen, a, shape=None, dtype=None, fill=0.0):
    """Output buffers. Packed (varlen) rows after cu_seqlens[-1] belong to no sequence and the
    library writes nothing there (FlashAttention-2 leaves them undefined); here they are defined:
    O, dQ, dK, dV = 0 and LSE = -inf, like a row that sees no key. Dense outputs are written
    whole by the library, so they start uninitialised."""
    return _filled_like(a, fill, shape, dtype) if varlen else _empty_like(a, shape, dtype)


def _int32_on(ref, values):
    """cu_seqlens as int32 in ref's memory (the library reads them where the tensors live)."""
    if _is_torch(values) or _is_torch(ref):
        import torch
        t = values if _is_torch(values) else torch.as_tensor(values)
        return t.to(device=ref.device, dtype=torch.int32).contiguous()
    import numpy as np
    return np.ascontiguousarray(values, dtype=np.int32)


def _float32_on(ref, values):
    """values as contiguous float32 in ref's memory."""
    if _is_torch(values) or _is_torch(ref):
        import torch
        t = values if _is_torch(values) else torch.as_tensor(values)
        return t.to(device=ref.device, dtype=torch.float32).contiguous()
    import numpy as np
    return np.ascontiguousarray(values, dtype=np.float32)


def check_softcap(softcap):
    c = float(softcap)
    if not math.isfinite(c) or c < 0.0:
        raise ValueError(f"softcap must be finite and >= 0 (0 = off), got {softcap}")
    return c


def check_scale(softmax_scale):
    s = float(softmax_scale)
    if not (math.isfinite(s) and s > 0.0):
        raise ValueError(f"softmax_scale must be finite and > 0, got {softmax_scale}")
    return s


class Call:
    """The options of one attention call, shared by its forward and its backward."""

    def __init__(self, q, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                 deterministic=False, seed=None, offset=0, block_mask=None, block_size=None,
                 cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, softcap=0.0,
                 alibi_slopes=None):
        if not 0.0 <= dropout_p < 1.0:
            raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
        if dropout_p > 0.0 and seed is None:
            raise ValueError("dropout_p > 0 needs seed= (the backward regenerates the same mask from it)")
        left, right = window_size
        self.dropout_p = float(dropout_p)
        self.softmax_scale = 0.0 if softmax_scale is None else check_scale(softmax_scale)
        self.causal, self.window = bool(causal), (int(left), int(right))
        self.deterministic = bool(deterministic)
        self.seed, self.offset = (int(seed) if seed is not None else 0), int(offset)
        self.varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
        if self.varlen:
            if cu_seqlens_q is None or cu_seqlens_k is None or max_seqlen_q is None or max_seqlen_k is None:
                raise ValueError("varlen needs cu_seqlens_q, cu_seqlens_k, max_seqlen_q and max_seqlen_k")
            self.cu_q, self.cu_k = _int32_on(q, cu_seqlens_q), _int32_on(q, cu_seqlens_k)
            if len(self.cu_q.shape) != 1 or tuple(self.cu_q.shape) != tuple(self.cu_k.shape) or self.cu_q.shape[0] < 1:
                raise ValueError("cu_seqlens_q and cu_seqlens_k must be 1-D of the same length batch + 1")
            self.vl = _capi.Varlen()
            self.vl.cu_seqlens_q = self.cu_q.data_ptr() if _is_torch(self.cu_q) else self.cu_q.ctypes.data
            self.vl.cu_seqlens_k = self.cu_k.data_ptr() if _is_torch(self.cu_k) else self.cu_k.ctypes.data
            self.vl.batch = self.cu_q.shape[0] - 1
            self.vl.max_seqlen_q, self.vl.max_seqlen_k = int(max_seqlen_q), int(max_seqlen_k)
        self.mask = None
        if block_mask is not None:
            self._make_mask(block_mask, block_size)
        self.softcap = check_softcap(softcap)
        self.slopes, self.slopes_stride = None, 0
        if alibi_slopes is not None:
            self._take_slopes(q, alibi_slopes)

    def _take_slopes(self, q, alibi_slopes):
        """ALiBi slopes [heads] or [batch, heads] as float32 in q's memory."""
        heads = q.shape[-2]
        batch = self.vl.batch if self.varlen else q.shape[0]
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
        self.bits = np.ascontiguousarray(bits != 0, dtype=np.uint8)
        m = _capi.BlockMask()
        st = _capi.lib().fa_block_mask_from_bitmap(C.byref(m), self.bits.ctypes.data, self.bits.shape[0],
                                                   self.bits.shape[1], self.bits.shape[2], int(block_size[0]),
                                                   int(block_size[1]))
        if st != 0:
            raise _capi.FlashAttnError(st, f"block_mask: {_capi.contextless_error(st)}")
        self.mask = m

    def __del__(self):
        if getattr(self, "mask", None) is not None and _capi._lib is not None:
            _capi._lib.fa_block_mask_destroy(C.byref(self.mask))
            self.mask = None

    def options(self):
        o = _capi.lib().fa_options_default()
        o.softmax_scale = self.softmax_scale
        o.causal = int(self.causal)
        o.window_left, o.window_right = self.window
        o.dropout_p = self.dropout_p
        o.dropout_seed, o.dropout_offset = self.seed & (2 ** 64 - 1), self.offset & (2 ** 64 - 1)
        o.block_mask = C.pointer(self.mask) if self.mask is not None else None
        o.deterministic = int(self.deterministic)
        o.softcap = self.softcap
        if self.slopes is not None:
            o.alibi_slopes = self.slopes.data_ptr() if _is_torch(self.slopes) else self.slopes.ctypes.data
            o.alibi_batch_stride = self.slopes_stride
        return o


def _context_of(views):
    devices = {v.device for v in views}
    if len(devices) != 1:
        raise ValueError("all arrays must be on one device: " + ", ".join(f"{v.name} on {v.device}" for v in views))
    backend, device = devices.pop()
    ctx = _capi.context(backend, device)
    return ctx, backend


_CUDA_STREAM_LEGACY = 1  # cudaStreamLegacy ((cudaStream_t)0x1)


def _bind_stream(ctx, backend, ref):
    if backend == "cuda" and _is_torch(ref):
        import torch
        stream = torch.cuda.current_stream(ref.device).cuda_stream
        # torch names its default stream 0, the library's NULL (its own non-blocking stream, not
        # ordered with torch's work): pass cudaStreamLegacy, the legacy default stream's handle
        stream = stream or _CUDA_STREAM_LEGACY
        ctx.check(_capi.lib().fa_context_set_stream(ctx.ptr, C.c_void_p(stream)), "set_stream")


def forward(call, q, k, v):
    """O and LSE of attention(q, k, v) under call's options."""
    if call.varlen:
        lse_shape = (q.shape[1], q.shape[0])
    else:
        if len(q.shape) != 4:
            raise ValueError(f"q must be [batch, seqlen, heads, d], got shape {tuple(q.shape)}")
        lse_shape = (q.shape[0], q.shape[2], q.shape[1])
    out = _outputs_like(call.varlen, q)
    lse = _outputs_like(call.varlen, q, lse_shape, "float32", fill=-math.inf)
    views = [_View(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v"), (out, "out"), (lse, "lse"))]
    ctx, backend = _context_of(views)
    a = _capi.FwdArgs()
    a.q, a.k, a.v, a.o, a.lse = (x.tensor() for x in views)
    a.varlen = C.pointer(call.vl) if call.varlen else None
    a.opts = call.options()
    with ctx.lock:
        _bind_stream(ctx, backend, q)
        ctx.check(_capi.lib().fa_forward(ctx.ptr, C.byref(a)), "fa_forward")
    return out, lse


def backward(call, dout, q, k, v, out, lse):
    """dQ, dK, dV of attention(q, k, v) for the output gradient dout."""
    dq, dk, dv = (_outputs_like(call.varlen, x) for x in (q, k, v))
    names = (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse), ("dout", dout), ("dq", dq), ("dk", dk),
             ("dv", dv))
    views = [_View(x, n) for n, x in names]
    ctx, backend = _context_of(views)
    a = _capi.BwdArgs()
    a.q, a.k, a.v, a.o, a.lse, a.dout, a.dq, a.dk, a.dv = (x.tensor() for x in views)
    a.varlen = C.pointer(call.vl) if call.varlen else None
    a.opts = call.options()
    with ctx.lock:
        _bind_stream(ctx, backend, q)
        ctx.check(_capi.lib().fa_backward(ctx.ptr, C.byref(a)), "fa_backward")
    return dq, dk, dv


def _address(a):
    return a.data_ptr() if _is_torch(a) else a.ctypes.data


def kvcache_forward(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                    cache_batch_idx=None, block_table=None, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0, check_on_device=False):
    """O and LSE of q attending over the cache (fa_forward_kvcache); k / v appended in place."""
    if len(q.shape) != 4:
        raise ValueError(f"q must be [batch, seqlen_new, heads, d], got shape {tuple(q.shape)}")
    if (k is None) != (v is None):
        raise ValueError("k and v (the new keys and values) go together")
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("rotary_cos and rotary_sin go together")
    batch = q.shape[0]
    call = Call(q, softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                alibi_slopes=alibi_slopes)
    ints = {}
    if cache_seqlens is not None:
        if isinstance(cache_seqlens, int):
            cache_seqlens = [cache_seqlens] * batch
        ints["cache_seqlens"] = _int32_on(q, cache_seqlens)
    if cache_batch_idx is not None:
        ints["cache_batch_idx"] = _int32_on(q, cache_batch_idx)
    if block_table is not None:
        bt = _int32_on(q, block_table)
        if len(bt.shape) != 2 or bt.shape[0] != batch:
            raise ValueError(f"block_table must be [batch, max_pages] = ({batch}, ...), got shape {tuple(bt.shape)}")
        ints["block_table"] = bt
    for name, a in ints.items():
        if len(a.shape) not in (1, 2) or a.shape[0] != batch:
            raise ValueError(f"{name} must have batch = {batch} rows, got shape {tuple(a.shape)}")
    out = _empty_like(q)
    lse = _empty_like(q, (q.shape[0], q.shape[2], q.shape[1]), "float32")
    named = [("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("out", out), ("lse", lse)]
    if k is not None:
        named += [("k", k), ("v", v)]
    if rotary_cos is not None:
        named += [("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)]
    views = {n: _View(x, n) for n, x in named}
    ctx, backend = _context_of(list(views.values()))
    a = _capi.KvcacheArgs()
    a.q, a.k_cache, a.v_cache = views["q"].tensor(), views["k_cache"].tensor(), views["v_cache"].tensor()
    a.o, a.lse = views["out"].tensor(), views["lse"].tensor()
    if k is not None:
        a.k_new, a.v_new = views["k"].tensor(), views["v"].tensor()
    if rotary_cos is not None:
        a.rotary_cos, a.rotary_sin = views["rotary_cos"].tensor(), views["rotary_sin"].tensor()
        a.rotary_interleaved = int(bool(rotary_interleaved))
    if "cache_seqlens" in ints:
        a.cache_seqlens = _address(ints["cache_seqlens"])
    if "cache_batch_idx" in ints:
        a.cache_batch_idx = _address(ints["cache_batch_idx"])
    if "block_table" in ints:
        a.block_table = _address(ints["block_table"])
        a.block_table_stride = ints["block_table"].shape[1]
    a.opts = call.options()
    a.num_splits = int(num_splits)
    a.check_on_device = int(bool(check_on_device))
    with ctx.lock:
        _bind_stream(ctx, backend, q)
        ctx.check(_capi.lib().fa_forward_kvcache(ctx.ptr, C.byref(a)), "fa_forward_kvcache")
    return out, lse


def synchronize(ref):
    """Waits for the library's work on ref's device (the current torch stream for CUDA tensors) and
    raises FlashAttnError for a bad cache_seqlens / block_table / cache_batch_idx value that a
    check_on_device call found there since the last synchronize (fa_synchronize)."""
    view = _View(ref, "ref")
    ctx, backend = _context_of([view])
    with ctx.lock:
        _bind_stream(ctx, backend, ref)
        ctx.check(_capi.lib().fa_synchronize(ctx.ptr), "fa_synchronize")
