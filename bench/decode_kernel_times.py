#!/usr/bin/env python3
"""decode_kernel_times.py: the GPU time of each kernel of one fa_forward_kvcache call
(flash_attn_with_kvcache), from torch.profiler over 20 calls, at the decode shapes of
decode_bench.py (bf16, 32 query heads over 8 KV heads, d 128, one new token, contiguous cache,
check_on_device): where a call's time goes (the check, decode and combine kernels). With --new N
(chunked prefill: N new query tokens, causal, without check_on_device, which the dense path does
not take), the kernels of the path the library chooses for that shape.

The output's first line is its provenance (date, commit, device, command; bench/provenance.py).

usage: FLASHATTN_LIBRARY=build/libflashattn.so python3 bench/decode_kernel_times.py
       [--shapes 1x4096,1x131072,8x32768] [--splits 0] [--calls 20] [--new 1]
"""
import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashattn  # noqa: E402
import provenance as prov  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1x4096,1x16384,1x131072,8x32768", help="batch x KV length, ...")
    ap.add_argument("--splits", type=int, default=0, help="num_splits (0: the library's choice)")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--new", type=int, default=1, help="new query tokens per sequence (causal when > 1)")
    args = ap.parse_args()
    print(prov.comment(torch.cuda.get_device_name()), flush=True)
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


if __name__ == "__main__":
    main()
