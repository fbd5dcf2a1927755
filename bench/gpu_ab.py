#!/usr/bin/env python3
"""gpu_ab.py: two builds of the library (A and B, e.g. before and after a change) timed on the same
inputs in one process, interleaved A, B, A, B, ... so that clock and thermal drift fall on both.
Plain calls (no dropout, mask or modifier), gpu_bench.py's shapes: hidden 2048 (heads = 2048 / d),
batch = 16384 / seqlen; bf16 unless --dtype. Each (d, causal, seqlen) row gives both builds'
forward and backward TFLOP/s (median over --repeats rounds of triton's do_bench medians), the
time ratio B / A, and the spread of that ratio over the rounds (min .. max). --kernels-b gives B's
context a FLASHATTN_KERNELS list of its own, so that one build with an opt-in can be B beside itself
without it as A (--lib the same path twice). --sink gives every call a learnable sink (-1 per head)
and the backward its dsink.

The output's first line is its provenance (date, commit, device, command; bench/provenance.py).

usage: python3 bench/gpu_ab.py --lib before/libflashattn.so --lib after/libflashattn.so \\
       [--names before,after] [--seqlens 1024,4096,16384] [--dims 64,128] [--causal both|yes|no] \\
       [--dtype bf16|fp16] [--repeats 3] [--kernels-b TOKENS] [--sink]
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_bench as gb  # noqa: E402
import provenance as prov  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", action="append", required=True, help="give it twice: A then B")
    ap.add_argument("--names", default="A,B")
    ap.add_argument("--seqlens", default="1024,4096,16384")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--causal", default="both", choices=["both", "yes", "no"])
    ap.add_argument("--dtype", default="bf16", choices=sorted(gb.DTYPES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kernels-b", default=None, help="FLASHATTN_KERNELS for B's context only, e.g. sm80")
    ap.add_argument("--sink", action="store_true", help="a learnable sink (-1 per head) in every call, dsink asked")
    args = ap.parse_args()
    if len(args.lib) != 2:
        ap.error("--lib must be given twice (A and B)")
    names = args.names.split(",")
    if len(names) != 2:
        ap.error("--names: two names, e.g. before,after")
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    libs = [gb.Library(args.lib[0]), gb.Library(args.lib[1], kernels=args.kernels_b)]
    print(prov.comment(torch.cuda.get_device_name()), flush=True)
    for n, path, kernels in zip(names, args.lib, (None, args.kernels_b)):
        print(f"# {n}: {os.path.realpath(path)}" + (f" with FLASHATTN_KERNELS={kernels}" if kernels else ""))
    torch.manual_seed(0)
    stream = gb.use_own_stream()  # noqa: F841 (kept current for the run)
    dt = gb.DTYPES[args.dtype]
    a, b = names
    sink_note = " | a learnable sink" if args.sink else ""
    print(f"# {torch.cuda.get_device_name()} | {args.dtype}{sink_note} | TFLOP/s fwd / bwd, median of {args.repeats} "
          "rounds of do_bench medians | ratio = time B / time A (> 1: B slower), spread = min .. max over the rounds")
    print(f"| d | causal | seqlen | {a} | {b} | fwd ratio (spread) | bwd ratio (spread) | variants ({b}) |")
    print("|---|---|---|---|---|---|---|---|")
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    for d in gb.ints(args.dims):
        for causal in causals:
            for s in gb.ints(args.seqlens):
                bsz, h = max(1, 16384 // s), 2048 // d
                flop = 4 * bsz * h * s * s * d / (2 if causal else 1)
                q, k, v, do, o, lse, dq, dk, dv = gb.make_inputs(bsz, s, h, d, dt)
                sink = torch.full((h,), -1.0, device="cuda", dtype=torch.float32)
                dsink = torch.empty((h,), device="cuda", dtype=torch.float32)
                calls = []
                for lib in libs:
                    lib.bind_stream()
                    fa = lib.fwd_args(q, k, v, o, lse, causal)
                    ba = lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, causal)
                    if args.sink:
                        fa.opts.learnable_sink = ba.opts.learnable_sink = sink.data_ptr()
                        ba.dsink = gb.as_tensor(dsink)
                    calls.append((lib, fa, ba))
                times = [[[], []], [[], []]]  # [lib][fwd, bwd]
                for _ in range(args.repeats):
                    for i, (lib, fa, ba) in enumerate(calls):
                        times[i][0].append(gb.bench(lambda: lib.forward(fa)))
                        times[i][1].append(gb.bench(lambda: lib.backward(ba)))
                med = [[statistics.median(t) for t in times[i]] for i in range(2)]
                ratios = [[times[1][j][r] / times[0][j][r] for r in range(args.repeats)] for j in range(2)]
                cells = [f"{gb.tflops(flop, med[i][0]):.0f} / {gb.tflops(2.5 * flop, med[i][1]):.0f}" for i in range(2)]
                rcells = [f"{med[1][j] / med[0][j]:.3f} ({min(ratios[j]):.3f} .. {max(ratios[j]):.3f})"
                          for j in range(2)]
                lib_b, fa_b, ba_b = calls[1]
                variants = f"{lib_b.variant(fa_b, False)} / {lib_b.variant(fa_b, True)}"
                print(f"| {d} | {'yes' if causal else 'no'} | {s} | {cells[0]} | {cells[1]} | {rcells[0]} | "
                      f"{rcells[1]} | {variants} |", flush=True)
                del q, k, v, do, o, lse, dq, dk, dv, sink, dsink, calls
                torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
