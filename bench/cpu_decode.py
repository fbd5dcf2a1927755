#!/usr/bin/env python3
"""cpu_decode.py: the CPU backend's attention over a KV cache (flash_attn_with_kvcache, one new
token per sequence: decode) against PyTorch's CPU scaled_dot_product_attention on the same arrays,
in one process, at 1, 2, 4, ... threads: how the decode path scales to all cores.

For each (dtype, batch x KV length) and thread count: both times (minimum and median over --runs
calls after a warm-up), the cache bytes read per second (batch x KV x heads_kv x d x 2 tensors x
element size over the time), ours relative to PyTorch (time ratio: > 1 means ours is faster) and
each one's speed-up over its own 1-thread time. Threads: FLASHATTN_NUM_THREADS (read by the
library on every call) for ours, torch.set_num_threads for PyTorch. PyTorch gets q [batch, heads,
1, d] and the caches as [batch, heads_kv, KV, d] views of the same arrays, enable_gqa=True. The last
column is the largest difference between the two outputs.

The first line of the output is its provenance (date, commit, device, command).

usage: python3 bench/cpu_decode.py [--threads 1,2,4,8,16] [--shapes 1x32768,8x8192] [--heads 32/8]
       [--dim 128] [--dtypes fp32,bf16] [--runs 5]
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    n = os.cpu_count() or 1
    default_threads = ",".join(str(1 << i) for i in range(n.bit_length()) if 1 << i <= n)
    ap.add_argument("--threads", default=default_threads)
    ap.add_argument("--shapes", default="1x32768,8x8192", help="batch x KV length, ...")
    ap.add_argument("--heads", default="32/8", help="query heads / KV heads")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--runs", type=int, default=5)
    return ap.parse_args()


def timed(fn, runs):
    fn()  # warm-up
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts), statistics.median(ts)


def main():
    args = parse()
    os.environ.pop("FLASHATTN_BACKEND", None)
    import numpy as np
    import torch
    import torch.nn.functional as F
    import flashattn
    import provenance as prov
    from cpu_sdpa import cpu_name

    threads = [int(x) for x in args.threads.split(",") if x]
    hq, hk = (int(x) for x in args.heads.split("/"))
    d = args.dim
    print(prov.comment(f"{cpu_name()}, {os.cpu_count()} logical CPUs, threads {args.threads}"))
    print(f"# torch {torch.__version__}; flashattn library {flashattn.library_version()}")
    print(f"# heads {hq}/{hk}, d {d}, one new token per sequence, the whole cache visible")
    print("| dtype | batch x KV | threads | ours ms | torch ms | ours GB/s | torch GB/s | ours relative "
          "| ours speed-up | torch speed-up | max abs diff O |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for dt in [x for x in args.dtypes.split(",") if x]:
        if dt == "bf16":
            try:
                import ml_dtypes
            except ImportError:
                print("# bf16 skipped: ml_dtypes is not installed")
                continue
            np_dt, elem = ml_dtypes.bfloat16, 2
        elif dt == "fp32":
            np_dt, elem = np.float32, 4
        else:
            sys.exit(f"unknown dtype {dt}")
        for shape in [x for x in args.shapes.split(",") if x]:
            batch, kv = (int(x) for x in shape.split("x"))
            q = rng.standard_normal((batch, 1, hq, d), dtype=np.float32).astype(np_dt)
            kc = rng.standard_normal((batch, kv, hk, d), dtype=np.float32).astype(np_dt)
            vc = rng.standard_normal((batch, kv, hk, d), dtype=np.float32).astype(np_dt)
            lens = np.full(batch, kv, dtype=np.int32)

            def as_torch(x):
                if dt == "bf16":  # same bits, through int16
                    return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
                return torch.from_numpy(x)

            tq, tk, tv = (as_torch(x).transpose(1, 2) for x in (q, kc, vc))
            out = {}

            def ours():
                out["o"] = flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens)

            def theirs():
                with torch.no_grad():
                    out["t"] = F.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True)

            nbytes = 2.0 * batch * kv * hk * d * elem
            first = {}
            for th in threads:
                os.environ["FLASHATTN_NUM_THREADS"] = str(th)
                torch.set_num_threads(th)
                o = timed(ours, args.runs)
                t = timed(theirs, args.runs)
                diff = float(np.max(np.abs(out["o"].astype(np.float32) -
                                           out["t"].transpose(1, 2).float().numpy())))
                first.setdefault("o", o[0])
                first.setdefault("t", t[0])

                def ms(x):
                    return f"{x[0] * 1e3:.2f} ({x[1] * 1e3:.2f})"

                print(f"| {dt} | {batch}x{kv} | {th} | {ms(o)} | {ms(t)} | {nbytes / o[0] / 1e9:.1f} "
                      f"| {nbytes / t[0] / 1e9:.1f} | {t[0] / o[0]:.2f}x | {first['o'] / o[0]:.2f}x "
                      f"| {first['t'] / t[0]:.2f}x | {diff:.2e} |", flush=True)
    print("# ms: minimum (median) over the runs; rates, ratios and speed-ups from the minima; speed-up: "
          "over the same library's time at the first thread count")
    return 0


if __name__ == "__main__":
    sys.exit(main())
