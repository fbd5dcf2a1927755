#!/usr/bin/env python3
"""cpu_sdpa.py: the CPU backend against PyTorch's CPU scaled_dot_product_attention, in one process,
on the same inputs and with the same number of threads, beside the machine's SGEMM rate.

For each (dtype, d, causal, seqlen): forward and backward times of both (minimum and median over
--runs calls after a warm-up, printed as min (median); the backward alone: ours from the forward's O and LSE, PyTorch's by
autograd.grad over a graph kept with retain_graph), their TFLOP/s (4 b h s^2 d forward, 2.5x that
backward, halved when causal) and ours relative to PyTorch (time ratio: > 1 means ours is faster).
The SGEMM lines: torch.mm of two n x n fp32 matrices (n = 2048) and the attention-shaped product
Q K^T over all heads (torch.bmm), same threads: the machine's measured matrix rate, the ceiling
the forward's rate is read against. Also the outputs' largest difference between the two.

Inputs are (batch, seqlen, heads, d) arrays; PyTorch sees them transposed to (batch, heads, seqlen,
d) without a copy. Threads: FLASHATTN_NUM_THREADS for ours, torch.set_num_threads for PyTorch.
bf16 needs ml_dtypes for ours (NumPy has no bfloat16); the arrays are rounded once and both get the
same values (PyTorch computes bf16 SDPA with its own bf16 kernels).

The first line of the output is its provenance (date, commit, device, command).

usage: python3 bench/cpu_sdpa.py [--threads N] [--seqlens 1024,2048,4096] [--dims 64,128]
       [--heads 16] [--batch 1] [--causal both|yes|no] [--dtypes fp32,bf16] [--runs 5] [--no-backward]
"""
import argparse
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seqlens", default="1024,2048,4096")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    ap.add_argument("--dtypes", default="fp32")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-backward", action="store_true")
    return ap.parse_args()


def timed(fn, runs):
    fn()  # warm-up (thread start, page faults, first-use caches)
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts), statistics.median(ts)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    args = parse()
    os.environ["FLASHATTN_NUM_THREADS"] = str(args.threads)
    os.environ.pop("FLASHATTN_BACKEND", None)
    import numpy as np
    import torch
    import torch.nn.functional as F
    import flashattn
    import provenance as prov

    torch.set_num_threads(args.threads)
    device = f"{cpu_name()}, {os.cpu_count()} logical CPUs, {args.threads} threads"
    print(prov.comment(device))
    print(f"# torch {torch.__version__}; flashattn library {flashattn.library_version()}")
    import ctypes
    from flashattn import _capi
    name = ctypes.create_string_buffer(512)
    _capi.lib().fa_device_name(b"cpu", 0, name, len(name))
    print(f"# our CPU device: {name.value.decode()}; FLASHATTN_CPU_ISA={os.environ.get('FLASHATTN_CPU_ISA', '')}")

    n = 2048
    a = torch.randn(n, n, dtype=torch.float32)
    b = torch.randn(n, n, dtype=torch.float32)
    t, _ = timed(lambda: torch.mm(a, b), max(args.runs, 3))
    print(f"# SGEMM torch.mm {n}x{n}x{n} fp32: {2 * n ** 3 / t / 1e12:.3f} TFLOP/s")

    rng = np.random.default_rng(0)
    dtypes = [x for x in args.dtypes.split(",") if x]
    print("| dtype | d | causal | seqlen | ours fwd / bwd ms | torch fwd / bwd ms | ours TFLOP/s fwd / bwd "
          "| torch TFLOP/s fwd / bwd | ours relative fwd / bwd | QK^T bmm TFLOP/s | max abs diff O |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for dt in dtypes:
        if dt == "bf16":
            try:
                import ml_dtypes
            except ImportError:
                print(f"# bf16 skipped: ml_dtypes is not installed")
                continue
            np_dt, t_dt = ml_dtypes.bfloat16, torch.bfloat16
        elif dt == "fp32":
            np_dt, t_dt = np.float32, torch.float32
        else:
            sys.exit(f"unknown dtype {dt}")
        for d in [int(x) for x in args.dims.split(",")]:
            for causal in {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]:
                for s in [int(x) for x in args.seqlens.split(",")]:
                    shape = (args.batch, s, args.heads, d)
                    q, k, v, do = (rng.standard_normal(shape, dtype=np.float32).astype(np_dt) for _ in range(4))

                    def as_torch(x):
                        if dt == "bf16":  # same bits: through int16
                            return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
                        return torch.from_numpy(x)

                    tq, tk, tv, tdo = (as_torch(x).transpose(1, 2) for x in (q, k, v, do))
                    out = {}

                    def ours_fwd():
                        out["o"], out["lse"], _ = flashattn.flash_attn_func(q, k, v, causal=causal,
                                                                            return_attn_probs=True)

                    def torch_fwd():
                        with torch.no_grad():
                            out["to"] = F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

                    of = timed(ours_fwd, args.runs)
                    tf = timed(torch_fwd, args.runs)
                    diff = float(np.max(np.abs(out["o"].astype(np.float32) -
                                               out["to"].transpose(1, 2).float().numpy())))
                    ob = tb = (float("nan"), float("nan"))
                    if not args.no_backward:
                        o, lse = out["o"], out["lse"]
                        ob = timed(lambda: flashattn.flash_attn_backward(do, q, k, v, o, lse, causal=causal),
                                   args.runs)
                        gq, gk, gv = (x.detach().clone().requires_grad_(True) for x in (tq, tk, tv))
                        to = F.scaled_dot_product_attention(gq, gk, gv, is_causal=causal)
                        tb = timed(lambda: torch.autograd.grad(to, (gq, gk, gv), tdo, retain_graph=True),
                                   args.runs)
                    flops = 4.0 * args.batch * args.heads * s * s * d * (0.5 if causal else 1.0)
                    qh = torch.from_numpy(q.astype(np.float32)).transpose(1, 2).reshape(-1, s, d).contiguous()
                    kh = torch.from_numpy(k.astype(np.float32)).transpose(1, 2).reshape(-1, s, d).contiguous()
                    gt, _ = timed(lambda: torch.bmm(qh, kh.transpose(1, 2)), 3)
                    gemm = 2.0 * qh.shape[0] * s * s * d / gt / 1e12

                    def ms(t):
                        return f"{t[0] * 1e3:.1f} ({t[1] * 1e3:.1f})"

                    def tfl(x, m):
                        return m * flops / x / 1e12

                    print(f"| {dt} | {d} | {'yes' if causal else 'no'} | {s} "
                          f"| {ms(of)} / {ms(ob)} | {ms(tf)} / {ms(tb)} "
                          f"| {tfl(of[0], 1):.3f} / {tfl(ob[0], 2.5):.3f} | {tfl(tf[0], 1):.3f} / {tfl(tb[0], 2.5):.3f} "
                          f"| {tf[0] / of[0]:.2f}x / {tb[0] / ob[0]:.2f}x | {gemm:.3f} | {diff:.2e} |", flush=True)
    print("# ms: minimum (median) over the runs; TFLOP/s and ratios from the minima")
    return 0


if __name__ == "__main__":
    sys.exit(main())
