#!/usr/bin/env python3
"""gpu_bench.py: flashattn's CUDA backend beside PyTorch's SDPA backends (flash = FlashAttention-2,
cuDNN, math = standard attention that materialises N x N) on identical bf16/fp16 inputs, in one run.

Shapes follow the FlashAttention-2 benchmark: hidden 2048 (heads = 2048 / d), batch = 16384 / seqlen.
FLOPs: forward 4 b h s^2 d (halved when causal), backward 2.5x forward. Times are medians of
triton.testing.do_bench (CUDA events). Our library is called through ctypes on the tensors' device
memory (no copies) on PyTorch's current stream.

The output's first line is its provenance (date, commit, device, command; bench/provenance.py).

Modes (one per run):
  default        the side-by-side table (TFLOP/s of ours, FA2, cuDNN, math; --sm80 adds a column for
                 our sm80 path, FLASHATTN_KERNELS=sm80, on the same inputs). Cases our library reports
                 unsupported (e.g. fp32 inputs) print "not supported by flashattn: <message>"
                 in the variant column and "n/s" in place of the number.
  --blocksparse  our forward and backward with RANDOM block masks (fa_block_mask_create) at densities
                 1, 0.5, 0.25, 0.125 against our dense (no mask) time: d 128, non-causal, seqlens
                 4096 and 16384 unless --seqlens / --dims say otherwise.
  --memory       extra device memory of our forward + backward (batch 1, heads 16, d 128) at seqlens
                 1k, 4k, 16k, 64k beside standard attention's N x N.
  --modifiers    the cost of the score modifiers: our forward and backward plain, with softcap 50
                 (Gemma 2's), with ALiBi (slopes 2^(-8 h / H)) and with both, on the same inputs; the
                 plain call is timed first and again last (its spread is the run's noise); d 128,
                 seqlens 4096 and 16384 unless --seqlens / --dims say otherwise.

  --dropout      the cost of dropout (p = 0.1): our forward and backward without and with it, and
                 PyTorch's FA2 without and with it, on the same inputs (--sm80: our sm80 path instead of
                 the default chooser); d 64, 128, seqlens 1024, 4096, 16384 unless told otherwise.

usage: python3 bench/gpu_bench.py --lib build/libflashattn.so [--seqlens 1024,4096,16384] [--dims 64,128]
       [--dtype bf16|fp16|bf16,fp16] [--causal both|yes|no] [--no-math] [--sm80]
       python3 bench/gpu_bench.py --lib build/libflashattn.so --blocksparse [--mask-block 128] [--densities ...]
       python3 bench/gpu_bench.py --lib build/libflashattn.so --memory [--seqlens 1024,4096,16384,65536]
       python3 bench/gpu_bench.py --lib build/libflashattn.so --modifiers [--seqlens 4096,16384] [--dims 128]
       python3 bench/gpu_bench.py --lib build/libflashattn.so --dropout [--sm80] [--seqlens ...] [--dims ...]
"""
import argparse
import ctypes as C
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import triton.testing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance as prov  # noqa: E402


# ---------------------------------------------------------------- include/flashattn.h, field for field

FA_SUCCESS = 0
FA_ERR_UNSUPPORTED = 2
FA_BLOCK_RANDOM = 4  # fa_block_pattern: DENSE, BUTTERFLY, LOCAL, STRIDED, RANDOM


# the structures of include/flashattn.h, from the Python package (python/flashattn/_capi.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from flashattn._capi import BlockMask, BwdArgs, FwdArgs, Options, Tensor  # noqa: E402


class PlanInfo(C.Structure):  # fa_plan_info
    _fields_ = [("block_q", C.c_int64), ("block_k", C.c_int64), ("onchip_bytes", C.c_int64),
                ("paper_block_q", C.c_int64), ("paper_block_k", C.c_int64),
                ("num_q_blocks", C.c_int64), ("num_k_blocks", C.c_int64),
                ("workspace_fwd", C.c_int64), ("workspace_bwd", C.c_int64)]


DTYPE_CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
MiB = float(1 << 20)


def as_tensor(t):
    x = Tensor()
    x.data = t.data_ptr()
    x.dtype = DTYPE_CODE[t.dtype]
    x.ndim = t.dim()
    for i in range(t.dim()):
        x.shape[i] = t.shape[i]
        x.stride[i] = t.stride(i)
    return x


class Unsupported(Exception):
    """Our library returned FA_ERR_UNSUPPORTED; str() is "<status string>: <context message>"."""


class Library:
    def __init__(self, path, kernels=None):
        """kernels: a FLASHATTN_KERNELS list for this context only (read when the context is
        created), e.g. "sm80" for the sm80 path beside the default chooser's context"""
        self.lib = C.CDLL(path)
        L = self.lib
        L.fa_status_string.restype = C.c_char_p
        L.fa_status_string.argtypes = [C.c_int]
        L.fa_context_create.argtypes = [C.POINTER(C.c_void_p), C.c_char_p, C.c_int]
        L.fa_context_last_error.restype = C.c_char_p
        L.fa_context_last_error.argtypes = [C.c_void_p]
        L.fa_forward.argtypes = [C.c_void_p, C.POINTER(FwdArgs)]
        L.fa_backward.argtypes = [C.c_void_p, C.POINTER(BwdArgs)]
        L.fa_context_set_stream.argtypes = [C.c_void_p, C.c_void_p]
        L.fa_query_support.argtypes = [C.c_void_p, C.POINTER(FwdArgs), C.c_int, C.c_char_p, C.c_size_t]
        L.fa_plan.argtypes = [C.c_void_p, C.POINTER(FwdArgs), C.POINTER(PlanInfo)]
        L.fa_options_default.restype = Options
        L.fa_options_default.argtypes = []
        L.fa_block_mask_create.argtypes = [C.POINTER(BlockMask), C.c_int, C.c_int64, C.c_int64, C.c_int64,
                                           C.c_int64, C.c_int64, C.c_int64, C.c_double, C.c_uint64]
        L.fa_block_mask_destroy.restype = None
        L.fa_block_mask_destroy.argtypes = [C.POINTER(BlockMask)]
        L.fa_block_mask_density.restype = C.c_double
        L.fa_block_mask_density.argtypes = [C.POINTER(BlockMask)]
        self.ctx = C.c_void_p()
        saved = os.environ.get("FLASHATTN_KERNELS")
        if kernels is not None:
            os.environ["FLASHATTN_KERNELS"] = kernels
        try:
            self.check(L.fa_context_create(C.byref(self.ctx), b"cuda", 0), "fa_context_create")
        finally:
            if kernels is not None:
                if saved is None:
                    del os.environ["FLASHATTN_KERNELS"]
                else:
                    os.environ["FLASHATTN_KERNELS"] = saved

    def message(self, st):
        msg = self.lib.fa_context_last_error(self.ctx).decode() if self.ctx else ""
        return f"{self.lib.fa_status_string(st).decode()}: {msg}"

    def check(self, st, what):
        if st == FA_ERR_UNSUPPORTED:
            raise Unsupported(self.message(st))
        if st != FA_SUCCESS:
            raise RuntimeError(f"{what}: {self.message(st)}")

    def bind_stream(self):
        self.check(self.lib.fa_context_set_stream(self.ctx, C.c_void_p(torch.cuda.current_stream().cuda_stream)),
                   "set_stream")

    def fwd_args(self, q, k, v, o, lse, causal, mask=None):
        a = FwdArgs()
        a.q, a.k, a.v, a.o, a.lse = as_tensor(q), as_tensor(k), as_tensor(v), as_tensor(o), as_tensor(lse)
        a.opts = self.lib.fa_options_default()
        a.opts.causal = int(causal)
        if mask is not None:
            a.opts.block_mask = C.pointer(mask)  # the caller keeps mask alive
        return a

    def bwd_args(self, q, k, v, o, lse, do, dq, dk, dv, causal, mask=None):
        a = BwdArgs()
        for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse), ("dout", do), ("dq", dq),
                        ("dk", dk), ("dv", dv)):
            setattr(a, name, as_tensor(t))
        a.opts = self.lib.fa_options_default()
        a.opts.causal = int(causal)
        if mask is not None:
            a.opts.block_mask = C.pointer(mask)
        return a

    def variant(self, args, backward):
        """The kernel variant's name; raises Unsupported when the backend has no kernel for args."""
        buf = C.create_string_buffer(64)
        self.check(self.lib.fa_query_support(self.ctx, C.byref(args), int(backward), buf, 64), "fa_query_support")
        return buf.value.decode()

    def plan(self, args):
        info = PlanInfo()
        self.check(self.lib.fa_plan(self.ctx, C.byref(args), C.byref(info)), "fa_plan")
        return info

    def forward(self, args):
        self.check(self.lib.fa_forward(self.ctx, C.byref(args)), "fa_forward")

    def backward(self, args):
        self.check(self.lib.fa_backward(self.ctx, C.byref(args)), "fa_backward")

    def random_mask(self, heads, seqlen_q, seqlen_k, block_q, block_k, density, seed):
        m = BlockMask()
        st = self.lib.fa_block_mask_create(C.byref(m), FA_BLOCK_RANDOM, heads, seqlen_q, seqlen_k, block_q,
                                           block_k, 0, float(density), seed)
        if st != FA_SUCCESS:
            raise RuntimeError(f"fa_block_mask_create: {self.lib.fa_status_string(st).decode()}")
        return m

    def mask_density(self, m):
        return self.lib.fa_block_mask_density(C.byref(m))

    def free_mask(self, m):
        self.lib.fa_block_mask_destroy(C.byref(m))


class DevicePool:
    """High-water mark of the device's current stream-ordered memory pool (the driver API through
    libcuda): the CUDA backend allocates its workspace with cudaMallocAsync from that pool, outside
    PyTorch's caching allocator, so torch.cuda.max_memory_allocated does not see it. None where the
    driver library or the calls are not available."""
    USED_MEM_CURRENT = 7  # CU_MEMPOOL_ATTR_USED_MEM_CURRENT (cuda.h), value type cuuint64_t
    USED_MEM_HIGH = 8  # CU_MEMPOOL_ATTR_USED_MEM_HIGH

    def __init__(self):
        self.pool = None
        try:
            cu = C.CDLL("libcuda.so.1")
            dev = C.c_int()
            pool = C.c_void_p()
            if cu.cuInit(0) != 0 or cu.cuDeviceGet(C.byref(dev), torch.cuda.current_device()) != 0:
                return
            if cu.cuDeviceGetMemPool(C.byref(pool), dev) != 0:
                return
            self.cu, self.pool = cu, pool
        except (OSError, AttributeError):
            self.pool = None

    def reset(self):
        if self.pool is not None:
            zero = C.c_uint64(0)
            self.cu.cuMemPoolSetAttribute(self.pool, self.USED_MEM_HIGH, C.byref(zero))

    def _get(self, attr):
        if self.pool is None:
            return None
        v = C.c_uint64(0)
        if self.cu.cuMemPoolGetAttribute(self.pool, attr, C.byref(v)) != 0:
            return None
        return v.value

    def high(self):
        """bytes: the pool's used-memory high-water mark since the last reset()"""
        return self._get(self.USED_MEM_HIGH)

    def used(self):
        """bytes: the pool's memory in use now"""
        return self._get(self.USED_MEM_CURRENT)


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")  # ms


def tflops(flop, ms):
    return flop / (ms * 1e-3) / 1e12


def ints(text):
    return [int(x) for x in text.split(",")]


def make_inputs(b, s, h, d, dt):
    q = torch.randn(b, s, h, d, device="cuda", dtype=dt)
    k = torch.randn_like(q)
    v = torch.randn_like(q)
    do = torch.randn_like(q)
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(q), torch.empty_like(q)
    return q, k, v, do, o, lse, dq, dk, dv


def use_own_stream():
    # a stream of our own: the legacy default stream (handle 0) would mean "the context's stream"
    # to the library, and do_bench's events would not see its work
    stream = torch.cuda.Stream()
    torch.cuda.set_stream(stream)
    return stream


# ---------------------------------------------------------------- default mode: side by side

def side_by_side(lib, args, dtype_name):
    dt = DTYPES[dtype_name]
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | {dtype_name} | "
          "TFLOP/s fwd / bwd (median of do_bench) | hidden 2048, batch 16384/seqlen")
    # --sm80: a second context under FLASHATTN_KERNELS=sm80 (the sm80 tensor-core path where it has
    # a kernel, else the SIMT one), timed on the same inputs in the same run
    lib80 = Library(args.lib, kernels=args.sm80_kernels) if args.sm80 else None
    extra = " sm80 path |" if lib80 else ""
    print(f"| d | causal | seqlen | flashattn |{extra} PyTorch flash (FA2) | cuDNN | standard (math) | ours / FA2 | variant |")
    print("|---|---|---|---|---|---|---|---|---|" + ("---|" if lib80 else ""))
    for d in ints(args.dims or "64,128"):
        for causal in causals:
            for s in ints(args.seqlens or "1024,4096,16384"):
                b, h = max(1, 16384 // s), 2048 // d
                flop = 4 * b * h * s * s * d / (2 if causal else 1)
                q, k, v, do, o, lse, dq, dk, dv = make_inputs(b, s, h, d, dt)
                lib.bind_stream()
                fa = lib.fwd_args(q, k, v, o, lse, causal)
                ba = lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, causal)
                # our library's answer first: an unsupported direction is reported, not run
                variants, ours = [], []
                for backward in (False, True):
                    try:
                        variants.append(lib.variant(fa, backward))
                        ours.append(True)
                    except Unsupported as e:
                        variants.append(f"not supported by flashattn: {e}")
                        ours.append(False)
                ours_f = bench(lambda: lib.forward(fa)) if ours[0] else None
                ours_b = bench(lambda: lib.backward(ba)) if ours[0] and ours[1] else None
                if ours[1] and not ours[0]:
                    variants[1] += " (not run: needs our forward)"
                sm80_cell = ""
                if lib80:
                    lib80.bind_stream()
                    fa80 = lib80.fwd_args(q, k, v, o, lse, causal)
                    ba80 = lib80.bwd_args(q, k, v, o, lse, do, dq, dk, dv, causal)
                    t80 = []
                    for backward, run in ((False, lambda: lib80.forward(fa80)), (True, lambda: lib80.backward(ba80))):
                        try:
                            t80.append((lib80.variant(fa80, backward), bench(run)))
                        except Unsupported:
                            t80.append(None)
                    sm80_cell = " " + " / ".join(
                        "n/s" if x is None else f"{tflops(flop * (2.5 if i else 1), x[1]):.0f}"
                        for i, x in enumerate(t80)) + " |"
                    if ours_f is not None:
                        lib.forward(fa)  # O and LSE of the default path again for the agreement line
                # agreement with PyTorch on this input (not a test: a sanity line)
                agree = None
                if ours_f is not None:
                    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                    try:
                        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                            ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
                        agree = (o.float() - ref.float()).abs().max().item()
                        del ref
                    except RuntimeError:
                        agree = None
                res = {}
                for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                                 ("math", SDPBackend.MATH)):
                    if name == "math" and (args.no_math or s > 4096):
                        res[name] = None
                        continue
                    try:
                        qg, kg, vg = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
                        dog = do.transpose(1, 2)
                        with sdpa_kernel(be):
                            f = lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                            tf = bench(f)
                            out = f()
                            tb = bench(lambda: out.backward(dog, retain_graph=True))
                        res[name] = (tf, tb)
                    except (RuntimeError, torch.OutOfMemoryError) as e:
                        res[name] = str(e).split("\n")[0][:40]
                    torch.cuda.empty_cache()

                def cell(r):
                    if r is None:
                        return "not run (N x N too large)" if s > 4096 else "not run"
                    if isinstance(r, str):
                        return "failed: " + r
                    return f"{tflops(flop, r[0]):.0f} / {tflops(2.5 * flop, r[1]):.0f}"

                def num(x, f):
                    return "n/s" if x is None else f(x)

                ours_cell = (f"{num(ours_f, lambda t: f'{tflops(flop, t):.0f}')} / "
                             f"{num(ours_b, lambda t: f'{tflops(2.5 * flop, t):.0f}')}")
                ratio = ""
                if isinstance(res["flash"], tuple) and ours_f is not None:
                    fa2_f, fa2_b = res["flash"]
                    ratio = f"{fa2_f / ours_f:.2f} / " + ("n/s" if ours_b is None else f"{fa2_b / ours_b:.2f}")
                tail = f" (max|O - FA2| {agree:.1e})" if agree is not None else ""
                print(f"| {d} | {'yes' if causal else 'no'} | {s} | {ours_cell} |{sm80_cell} {cell(res['flash'])} | "
                      f"{cell(res['cudnn'])} | {cell(res['math'])} | {ratio} | "
                      f"{variants[0]} / {variants[1]}{tail} |", flush=True)
                del q, k, v, do, o, lse, dq, dk, dv
                torch.cuda.empty_cache()


# ---------------------------------------------------------------- --modifiers

def modifiers(lib, args, dtype_name):
    dt = DTYPES[dtype_name]
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    print(f"# {torch.cuda.get_device_name()} | {dtype_name} | TFLOP/s fwd / bwd (median of do_bench) of our "
          "library; (x) = time relative to the plain call timed first | hidden 2048, batch 16384/seqlen")
    print("| d | causal | seqlen | plain | softcap 50 | ALiBi | softcap + ALiBi | plain again | variants |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d in ints(args.dims or "128"):
        for causal in causals:
            for s in ints(args.seqlens or "4096,16384"):
                b, h = max(1, 16384 // s), 2048 // d
                flop = 4 * b * h * s * s * d / (2 if causal else 1)
                q, k, v, do, o, lse, dq, dk, dv = make_inputs(b, s, h, d, dt)
                slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], device="cuda",
                                      dtype=torch.float32)
                lib.bind_stream()
                cells, names, base = [], [], None
                for mode in ("plain", "softcap", "alibi", "both", "plain"):
                    fa = lib.fwd_args(q, k, v, o, lse, causal)
                    ba = lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, causal)
                    for a in (fa, ba):
                        if mode in ("softcap", "both"):
                            a.opts.softcap = 50.0
                        if mode in ("alibi", "both"):
                            a.opts.alibi_slopes = slopes.data_ptr()
                    try:
                        names.append(f"{lib.variant(fa, False)} / {lib.variant(fa, True)}")
                    except Unsupported as e:
                        cells.append(f"n/s ({e})")
                        continue
                    tf, tb = bench(lambda: lib.forward(fa)), bench(lambda: lib.backward(ba))
                    if base is None:
                        base = (tf, tb)
                    cells.append(f"{tflops(flop, tf):.0f} / {tflops(2.5 * flop, tb):.0f} "
                                 f"({tf / base[0]:.3f} / {tb / base[1]:.3f})")
                print(f"| {d} | {'yes' if causal else 'no'} | {s} | " + " | ".join(cells) + " | "
                      + "; ".join(dict.fromkeys(names)) + " |", flush=True)
                del q, k, v, do, o, lse, dq, dk, dv
                torch.cuda.empty_cache()


# ---------------------------------------------------------------- --dropout

def dropout_cost(lib, args, dtype_name):
    """Our forward and backward without and with dropout p = 0.1, beside PyTorch's FA2 backend without
    and with it, on the same inputs: the overhead is the time with dropout over the time without."""
    dt = DTYPES[dtype_name]
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    ours = Library(args.lib, kernels="sm80") if args.sm80 else lib
    path = "sm80 path (FLASHATTN_KERNELS=sm80)" if args.sm80 else "default chooser"
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | {dtype_name} | dropout p = 0.1 | "
          f"ours: {path} | ms are medians of do_bench | hidden 2048, batch 16384/seqlen")
    print("| d | causal | seqlen | ours fwd ms plain / dropout (x) | ours bwd ms plain / dropout (x) | "
          "FA2 fwd ms plain / dropout (x) | FA2 bwd ms plain / dropout (x) | variants |")
    print("|---|---|---|---|---|---|---|---|")
    for d in ints(args.dims or "64,128"):
        for causal in causals:
            for s in ints(args.seqlens or "1024,4096,16384"):
                b, h = max(1, 16384 // s), 2048 // d
                q, k, v, do, o, lse, dq, dk, dv = make_inputs(b, s, h, d, dt)
                ours.bind_stream()
                times, names = [], []
                for p in (0.0, 0.1):
                    fa = ours.fwd_args(q, k, v, o, lse, causal)
                    ba = ours.bwd_args(q, k, v, o, lse, do, dq, dk, dv, causal)
                    for a in (fa, ba):
                        a.opts.dropout_p = p
                        a.opts.dropout_seed = 1234
                    try:
                        names.append(f"{ours.variant(fa, False)} / {ours.variant(fa, True)}")
                        ours.forward(fa)  # O and LSE of this option for the backward
                        times.append((bench(lambda: ours.forward(fa)), bench(lambda: ours.backward(ba))))
                    except Unsupported as e:
                        names.append(f"not supported by flashattn: {e}")
                        times.append(None)
                fa2 = []
                for p in (0.0, 0.1):
                    try:
                        qg, kg, vg = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
                        dog = do.transpose(1, 2)
                        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                            f = lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, dropout_p=p)
                            tf = bench(f)
                            out = f()
                            tb = bench(lambda: out.backward(dog, retain_graph=True))
                        fa2.append((tf, tb))
                    except (RuntimeError, torch.OutOfMemoryError) as e:
                        fa2.append(None)
                    torch.cuda.empty_cache()

                def pair(x, i):
                    if x[0] is None or x[1] is None:
                        return "n/s"
                    return f"{x[0][i]:.3f} / {x[1][i]:.3f} ({x[1][i] / x[0][i]:.3f})"

                print(f"| {d} | {'yes' if causal else 'no'} | {s} | {pair(times, 0)} | {pair(times, 1)} | "
                      f"{pair(fa2, 0)} | {pair(fa2, 1)} | {'; '.join(dict.fromkeys(names))} |", flush=True)
                del q, k, v, do, o, lse, dq, dk, dv
                torch.cuda.empty_cache()


# ---------------------------------------------------------------- --blocksparse

def block_sparse(lib, args, dtype_name):
    """Our forward and backward under RANDOM block masks against our own dense time. The ratio
    time / (measured density x dense time) is 1 when the time scales exactly with the kept blocks
    (the target is <= 1.3 down to density 0.125). The measured density (fa_block_mask_density) is
    above the nominal one because the RANDOM pattern always keeps the block diagonal."""
    dt = DTYPES[dtype_name]
    mb = args.mask_block
    densities = [float(x) for x in args.densities.split(",")]
    if args.sm80:  # the sm80 path instead of the default chooser
        lib = Library(args.lib, kernels="sm80")
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | {dtype_name} | non-causal | "
          f"{'sm80 path (FLASHATTN_KERNELS=sm80)' if args.sm80 else 'default chooser'} | "
          f"block-sparse RANDOM masks (fa_block_mask_create, one mask for all heads, seed {args.seed}), "
          f"mask blocks {mb} x {mb} | ms are medians of do_bench; the context keeps a mask's block lists "
          "(core/lists_cache.c), so the timed calls reuse the lists built by the first | hidden 2048, "
          "batch 16384/seqlen")
    print("| d | seqlen | density | measured density | fwd ms | bwd ms | fwd / (density x dense) | "
          "bwd / (density x dense) | max abs(O - SDPA masked) | variant |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in ints(args.dims or "128"):
        for s in ints(args.seqlens or "4096,16384"):
            b, h = max(1, 16384 // s), 2048 // d
            q, k, v, do, o, lse, dq, dk, dv = make_inputs(b, s, h, d, dt)
            lib.bind_stream()
            fa = lib.fwd_args(q, k, v, o, lse, False)
            ba = lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False)
            try:
                variant = lib.variant(fa, False) + " / " + lib.variant(fa, True)
            except Unsupported as e:
                print(f"| {d} | {s} | | | | | | | | not supported by flashattn: {e} |", flush=True)
                continue
            dense_f = bench(lambda: lib.forward(fa))
            dense_b = bench(lambda: lib.backward(ba))
            print(f"| {d} | {s} | dense (no mask) | 1 | {dense_f:.3f} | {dense_b:.3f} | 1 | 1 | | {variant} |",
                  flush=True)
            for density in densities:
                mask = lib.random_mask(1, s, s, mb, mb, density, args.seed)
                try:
                    measured = lib.mask_density(mask)
                    fm = lib.fwd_args(q, k, v, o, lse, False, mask)
                    bm = lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False, mask)
                    try:
                        var = lib.variant(fm, False) + " / " + lib.variant(fm, True)
                    except Unsupported as e:
                        print(f"| {d} | {s} | {density:g} | {measured:.3f} | | | | | | "
                              f"not supported by flashattn: {e} |", flush=True)
                        continue
                    # forward first: the backward reads O and LSE of the forward with the same mask
                    tf = bench(lambda: lib.forward(fm))
                    tb = bench(lambda: lib.backward(bm))
                    agree = masked_agreement(q, k, v, o, mask, s)
                    print(f"| {d} | {s} | {density:g} | {measured:.3f} | {tf:.3f} | {tb:.3f} | "
                          f"{tf / (measured * dense_f):.2f} | {tb / (measured * dense_b):.2f} | {agree} | {var} |",
                          flush=True)
                finally:
                    lib.free_mask(mask)
            del q, k, v, do, o, lse, dq, dk, dv
            torch.cuda.empty_cache()


def masked_agreement(q, k, v, o, mask, s):
    """max |O - SDPA(Q, K, V, boolean mask expanded from the blocks)| (a sanity line, not a test)."""
    try:
        n = mask.heads * mask.rows * mask.cols
        bits = torch.frombuffer(bytearray(C.string_at(mask.bits, n)), dtype=torch.uint8)
        bits = bits.view(mask.heads, mask.rows, mask.cols).to("cuda").bool()
        full = bits.repeat_interleave(mask.block_q, 1).repeat_interleave(mask.block_k, 2)[:, :s, :s]
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]):
            ref = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=full.unsqueeze(0)).transpose(1, 2)
        err = (o.float() - ref.float()).abs().max().item()
        del ref, full, bits
        torch.cuda.empty_cache()
        return f"{err:.1e}"
    except (RuntimeError, torch.OutOfMemoryError) as e:
        torch.cuda.empty_cache()
        return "n/a: " + str(e).split("\n")[0][:40]


# ---------------------------------------------------------------- --memory

def memory(lib, args, dtype_name):
    """Extra device memory of our forward + backward. The CUDA backend allocates its workspace
    itself (cudaMallocAsync, outside PyTorch's allocator): the table gives what fa_plan reports
    (workspace_fwd, workspace_bwd: the same numbers `flashattn run` prints), the measured high-water
    mark of the device's memory pool during the calls, and what PyTorch's allocator saw (nothing of
    ours is allocated through it)."""
    dt = DTYPES[dtype_name]
    b, h, d = 1, 16, 128
    pool = DevicePool()
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | {dtype_name} | batch {b}, heads {h}, "
          f"d {d}, non-causal | forward + backward | MiB = 2^20 bytes")
    print("# inputs+outputs: Q K V O dO dQ dK dV and LSE. ours (fa_plan): workspace forward / backward. "
          "pool high-water: cudaMallocAsync pool's used-memory high-water mark over one forward + backward. "
          "torch peak extra: max_memory_allocated over the calls minus allocated before. "
          "standard N x N: S and P, b h s^2 x 2 bytes each. SDPA math: one forward + backward, peak extra "
          "(includes its O, dQ, dK, dV)")
    print("| seqlen | inputs+outputs MiB | extra MiB ours (fa_plan fwd / bwd) | pool high-water MiB | "
          "torch peak extra MiB | standard N x N (S + P) MiB | SDPA math |")
    print("|---|---|---|---|---|---|---|")
    for s in ints(args.seqlens or "1024,4096,16384,65536"):
        tensors = make_inputs(b, s, h, d, dt)
        q, k, v, do, o, lse, dq, dk, dv = tensors
        io = sum(t.numel() * t.element_size() for t in tensors)
        nxn = 2 * (b * h * s * s * 2)
        lib.bind_stream()
        fa = lib.fwd_args(q, k, v, o, lse, False)
        ba = lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False)
        try:
            lib.variant(fa, False)
            lib.variant(fa, True)
            plan = lib.plan(fa)
            ours = f"{plan.workspace_fwd / MiB:.3f} / {plan.workspace_bwd / MiB:.3f}"
            lib.forward(fa)  # warm-up: the runtime's own one-time allocations are not ours
            lib.backward(ba)
            torch.cuda.synchronize()
            pool.reset()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            lib.forward(fa)
            lib.backward(ba)
            torch.cuda.synchronize()
            high = pool.high()
            pool_cell = "n/a" if high is None else f"{high / MiB:.3f}"
            torch_cell = f"{(torch.cuda.max_memory_allocated() - base) / MiB:.3f}"
        except Unsupported as e:
            ours, pool_cell, torch_cell = f"not supported by flashattn: {e}", "", ""
        math_cell = f"not tried (N x N {nxn / MiB / 1024:.0f} GiB)"
        if s <= 4096 and not args.no_math:
            math_cell = sdpa_math_memory(q, k, v, do)
        print(f"| {s} | {io / MiB:.1f} | {ours} | {pool_cell} | {torch_cell} | {nxn / MiB:.0f} | {math_cell} |",
              flush=True)
        del q, k, v, do, o, lse, dq, dk, dv, tensors
        torch.cuda.empty_cache()


def sdpa_math_memory(q, k, v, do):
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        qg, kg, vg = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(qg, kg, vg)
            out.backward(do.transpose(1, 2))
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        del out, qg, kg, vg
        torch.cuda.empty_cache()
        return f"runs, peak extra {peak / MiB:.0f} MiB"
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return "out of memory"
    except RuntimeError as e:
        torch.cuda.empty_cache()
        return "failed: " + str(e).split("\n")[0][:40]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--seqlens", default=None,
                    help="default: 1024,4096,16384; --blocksparse 4096,16384; --memory 1024,4096,16384,65536")
    ap.add_argument("--dims", default=None, help="head dims, e.g. 64,128,256 (default 64,128; --blocksparse 128)")
    ap.add_argument("--dtype", default="bf16", help="bf16, fp16, or a list: bf16,fp16 (one table each)")
    ap.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    ap.add_argument("--no-math", action="store_true")
    ap.add_argument("--sm80", action="store_true",
                    help="default mode: also time the sm80 path (FLASHATTN_KERNELS=sm80) in the same run; "
                    "--dropout, --blocksparse: time the sm80 path instead of the default chooser")
    ap.add_argument("--sm80-kernels", default="sm80",
                    help="default mode with --sm80: the FLASHATTN_KERNELS list of that context (e.g. "
                    "sm80,sm80-bwd-narrow)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--blocksparse", action="store_true", help="block-sparse table (RANDOM masks)")
    mode.add_argument("--memory", action="store_true", help="extra device memory table")
    mode.add_argument("--modifiers", action="store_true", help="cost of softcap / ALiBi against the plain call")
    mode.add_argument("--dropout", action="store_true", help="cost of dropout p = 0.1, ours and FA2's")
    ap.add_argument("--mask-block", type=int, default=128, help="--blocksparse: mask block size (square)")
    ap.add_argument("--densities", default="1,0.5,0.25,0.125", help="--blocksparse: nominal densities")
    ap.add_argument("--seed", type=int, default=1, help="--blocksparse: the masks' seed")
    args = ap.parse_args()
    dtypes = args.dtype.split(",")
    for name in dtypes:
        if name not in DTYPES:
            ap.error(f"--dtype: {name!r} is not one of {', '.join(DTYPES)}")
    if args.mask_block < 1:
        ap.error("--mask-block must be >= 1")
    lib = Library(args.lib)
    # the first line of the output (saved as .md by bench/device/h200-run.sh): date, commit, device, command
    print(prov.comment(torch.cuda.get_device_name()), flush=True)
    torch.manual_seed(0)
    stream = use_own_stream()  # noqa: F841 (kept current for the run)
    run = block_sparse if args.blocksparse else memory if args.memory else modifiers if args.modifiers \
        else dropout_cost if args.dropout else side_by_side
    for i, name in enumerate(dtypes):
        if i:
            print()
        run(lib, args, name)


if __name__ == "__main__":
    sys.exit(main())
