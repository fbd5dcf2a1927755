#!/usr/bin/env python3
"""gpu_bench.py: flashattn's CUDA backend beside PyTorch's SDPA backends (flash = FlashAttention-2,
cuDNN, math = standard attention that materialises N x N) on identical bf16/fp16 inputs, in one run.

Shapes follow the FlashAttention-2 benchmark: hidden 2048 (heads = 2048 / d), batch = 16384 / seqlen.
FLOPs: forward 4 b h s^2 d (halved when causal), backward 2.5x forward. Times are medians of
triton.testing.do_bench (CUDA events). Our library is called through ctypes on the tensors' device
memory (no copies) on PyTorch's current stream.

usage: python3 bench/gpu_bench.py --lib build/libflashattn.so [--seqlens 1024,4096,16384] [--dims 64,128]
       [--dtype bf16] [--causal both|yes|no] [--no-math]
"""
import argparse
import ctypes as C
import math
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import triton.testing


class Tensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int), ("ndim", C.c_int),
                ("shape", C.c_int64 * 4), ("stride", C.c_int64 * 4)]


class Options(C.Structure):
    _fields_ = [("softmax_scale", C.c_float), ("causal", C.c_int), ("window_left", C.c_int64),
                ("window_right", C.c_int64), ("dropout_p", C.c_float), ("dropout_seed", C.c_uint64),
                ("dropout_offset", C.c_uint64), ("block_mask", C.c_void_p), ("deterministic", C.c_int)]


class FwdArgs(C.Structure):
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor), ("lse", Tensor),
                ("varlen", C.c_void_p), ("opts", Options)]


class BwdArgs(C.Structure):
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor), ("lse", Tensor), ("dout", Tensor),
                ("dq", Tensor), ("dk", Tensor), ("dv", Tensor), ("varlen", C.c_void_p), ("opts", Options)]


DTYPE_CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def as_tensor(t):
    x = Tensor()
    x.data = t.data_ptr()
    x.dtype = DTYPE_CODE[t.dtype]
    x.ndim = t.dim()
    for i in range(t.dim()):
        x.shape[i] = t.shape[i]
        x.stride[i] = t.stride(i)
    return x


class Library:
    def __init__(self, path):
        self.lib = C.CDLL(path)
        self.lib.fa_status_string.restype = C.c_char_p
        self.lib.fa_context_last_error.restype = C.c_char_p
        self.lib.fa_context_last_error.argtypes = [C.c_void_p]
        self.lib.fa_forward.argtypes = [C.c_void_p, C.POINTER(FwdArgs)]
        self.lib.fa_backward.argtypes = [C.c_void_p, C.POINTER(BwdArgs)]
        self.lib.fa_context_set_stream.argtypes = [C.c_void_p, C.c_void_p]
        self.lib.fa_query_support.argtypes = [C.c_void_p, C.POINTER(FwdArgs), C.c_int, C.c_char_p, C.c_size_t]
        self.lib.fa_options_default.restype = Options
        self.ctx = C.c_void_p()
        self.check(self.lib.fa_context_create(C.byref(self.ctx), b"cuda", 0), "fa_context_create")

    def check(self, st, what):
        if st != 0:
            msg = self.lib.fa_context_last_error(self.ctx).decode() if self.ctx else ""
            raise RuntimeError(f"{what}: {self.lib.fa_status_string(st).decode()}: {msg}")

    def bind_stream(self):
        self.check(self.lib.fa_context_set_stream(self.ctx, C.c_void_p(torch.cuda.current_stream().cuda_stream)),
                   "set_stream")

    def fwd_args(self, q, k, v, o, lse, causal):
        a = FwdArgs()
        a.q, a.k, a.v, a.o, a.lse = as_tensor(q), as_tensor(k), as_tensor(v), as_tensor(o), as_tensor(lse)
        a.opts = self.lib.fa_options_default()
        a.opts.causal = int(causal)
        return a

    def bwd_args(self, q, k, v, o, lse, do, dq, dk, dv, causal):
        a = BwdArgs()
        for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse), ("dout", do), ("dq", dq),
                        ("dk", dk), ("dv", dv)):
            setattr(a, name, as_tensor(t))
        a.opts = self.lib.fa_options_default()
        a.opts.causal = int(causal)
        return a

    def variant(self, args, backward):
        buf = C.create_string_buffer(64)
        self.check(self.lib.fa_query_support(self.ctx, C.byref(args), int(backward), buf, 64), "fa_query_support")
        return buf.value.decode()


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")  # ms


def tflops(flop, ms):
    return flop / (ms * 1e-3) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--seqlens", default="1024,4096,16384")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--causal", default="both")
    ap.add_argument("--no-math", action="store_true")
    args = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    lib = Library(args.lib)
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | {args.dtype} | "
          "TFLOP/s fwd / bwd (median of do_bench) | hidden 2048, batch 16384/seqlen")
    print("| d | causal | seqlen | flashattn | PyTorch flash (FA2) | cuDNN | standard (math) | ours / FA2 | variant |")
    print("|---|---|---|---|---|---|---|---|---|")
    torch.manual_seed(0)
    # a stream of our own: the legacy default stream (handle 0) would mean "the context's stream"
    # to the library, and do_bench's events would not see its work
    stream = torch.cuda.Stream()
    torch.cuda.set_stream(stream)
    for d in [int(x) for x in args.dims.split(",")]:
        for causal in causals:
            for s in [int(x) for x in args.seqlens.split(",")]:
                b, h = max(1, 16384 // s), 2048 // d
                flop = 4 * b * h * s * s * d / (2 if causal else 1)
                q = torch.randn(b, s, h, d, device="cuda", dtype=dt)
                k = torch.randn_like(q)
                v = torch.randn_like(q)
                do = torch.randn_like(q)
                o = torch.empty_like(q)
                lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
                dq, dk, dv = torch.empty_like(q), torch.empty_like(q), torch.empty_like(q)
                lib.bind_stream()
                fa = lib.fwd_args(q, k, v, o, lse, causal)
                ba = lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, causal)
                variant = lib.variant(fa, False) + " / " + lib.variant(fa, True)
                ours_f = bench(lambda: lib.check(lib.lib.fa_forward(lib.ctx, C.byref(fa)), "fa_forward"))
                ours_b = bench(lambda: lib.check(lib.lib.fa_backward(lib.ctx, C.byref(ba)), "fa_backward"))
                # agreement with PyTorch on this input (not a test: a sanity line)
                qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
                agree = (o.float() - ref.float()).abs().max().item()
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

                ratio = ""
                if isinstance(res["flash"], tuple):
                    ratio = f"{res['flash'][0] / ours_f:.2f} / {res['flash'][1] / ours_b:.2f}"
                print(f"| {d} | {'yes' if causal else 'no'} | {s} | {tflops(flop, ours_f):.0f} / "
                      f"{tflops(2.5 * flop, ours_b):.0f} | {cell(res['flash'])} | {cell(res['cudnn'])} | "
                      f"{cell(res['math'])} | {ratio} | {variant} (max|O - FA2| {agree:.1e}) |", flush=True)
                del q, k, v, do, o, lse, dq, dk, dv
                torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
