#!/usr/bin/env python3
"""decode_kernel_times.py: the GPU time of each kernel of one fa_forward_kvcache call
(flash_attn_with_kvcache), from torch.profiler over 20 calls, at the decode shapes of
decode_bench.py (bf16, 32 query heads over 8 KV heads, d 128, one new token, contiguous cache,
check_on_device): where a call's time goes (the check, decode and combine kernels). With --new N
(chunked prefill: N new query tokens, causal, without check_on_device, which the dense path does
not take), the kernels of the path the library chooses for that shape. With --graph, the call is
captured in a CUDA graph and replayed (as decode_bench.py --graph times it), beside SDPA's cuDNN
backend captured the same way, and each kernel's line also gives the mean idle time of the GPU
before it (from the end of the kernel before it, the last one of the previous replay for the
first): where a replay's time goes between the kernels.

The output's first line is its provenance (date, commit, device, command; bench/provenance.py).

usage: FLASHATTN_LIBRARY=build/libflashattn.so python3 bench/decode_kernel_times.py
       [--shapes 1x4096,1x131072,8x32768] [--splits 0] [--calls 20] [--new 1] [--graph]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashattn  # noqa: E402
import provenance as prov  # noqa: E402
from decode_bench import graph_of  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1x4096,1x16384,1x131072,8x32768", help="batch x KV length, ...")
    ap.add_argument("--splits", type=int, default=0, help="num_splits (0: the library's choice)")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--new", type=int, default=1, help="new query tokens per sequence (causal when > 1)")
    ap.add_argument("--graph", action="store_true", help="replay CUDA graphs of one call, ours and SDPA cuDNN's")
    args = ap.parse_args()
    print(prov.comment(torch.cuda.get_device_name()), flush=True)
    if args.graph:
        print("| batch | KV length | who | kernel | calls | mean µs | GPU idle before, mean µs |")
        print("|---|---|---|---|---|---|---|")
    else:
        print("| batch | KV length | kernel | calls | mean µs |")
        print("|---|---|---|---|---|")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for shape in args.shapes.split(","):
        b, s = (int(x) for x in shape.split("x"))
        q = torch.randn(b, args.new, 32, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(b, s, 8, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(b, s, 8, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        lens = torch.full((b,), s, dtype=torch.int32, device="cuda")

        def call():
            return flashattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, num_splits=args.splits,
                                                     causal=args.new > 1, check_on_device=args.new == 1)
        if args.graph:
            def cudnn():
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                          is_causal=args.new > 1, enable_gqa=True)
            for who, fn in (("flashattn", call), ("SDPA cuDNN", cudnn)):
                for line in graph_timeline(fn, args.calls):
                    print(f"| {b} | {s:,} | {who} | {line}", flush=True)
            del q, k, v
            torch.cuda.empty_cache()
            continue
        for _ in range(5):
            call()
        flashattn.synchronize(q)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(args.calls):
                call()
            torch.cuda.synchronize()
        for e in prof.key_averages():
            if e.device_time_total > 0 and e.count > 0:
                name = e.key.split("(")[0].replace("void ", "")
                print(f"| {b} | {s:,} | `{name}` | {e.count} | {e.device_time_total / e.count:.1f} |", flush=True)
        del q, k, v
        torch.cuda.empty_cache()


def graph_timeline(fn, calls):
    """Lines `kernel | calls | mean µs | idle before µs |` for `calls` back-to-back replays of a CUDA
    graph of one fn() (decode_bench.py's graph_of), from the profiler's kernel records in start
    order."""
    g = graph_of(fn)
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            g.replay()
        torch.cuda.synchronize()
    def span(e):  # (start, end) in ns
        if hasattr(e, "start_ns"):
            return e.start_ns(), e.start_ns() + e.duration_ns()
        return e.start_us() * 1000, (e.start_us() + e.duration_us()) * 1000
    kernels = sorted((span(e) + (e.name(),) for e in prof.profiler.kineto_results.events()
                      if e.device_type() == torch.autograd.DeviceType.CUDA and span(e)[1] > span(e)[0]
                      and not e.name().startswith("Memcpy") and not e.name().startswith("Memset")),
                     key=lambda x: x[0])
    stats = {}
    for n, (start, end, name) in enumerate(kernels):
        short = name.split("(")[0].replace("void ", "")
        st = stats.setdefault(short, [0, 0.0, 0.0, 0])
        st[0] += 1
        st[1] += (end - start) / 1e3
        if n > 0:  # the first kernel of the profile has no kernel before it
            st[2] += (start - kernels[n - 1][1]) / 1e3
            st[3] += 1
    return [f"`{name}` | {c} | {t / c:.1f} | {gap / gaps if gaps else float('nan'):.1f} |"
            for name, (c, t, gap, gaps) in stats.items()]


if __name__ == "__main__":
    main()
