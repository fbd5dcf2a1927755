#!/usr/bin/env python3
"""gpt2_step_profile.py: where a GPT-2 small training step's GPU time goes, per attention. The model,
data and step of gpt2_train.py (12 layers, 12 heads, hidden 768, bf16 autocast, AdamW, 16384 tokens a
step), a few warm-up steps, then torch.profiler over --steps steps. Per attention: the wall time of a
step, the sum of its kernels' times, and the kernels grouped by name (µs per step, launches per
step), the largest --top; then, for each kernel name, its µs per step under every attention side by
side, sorted by the largest difference: which kernels one attention adds or makes dearer.

The output's first line is its provenance (date, commit, device, command; bench/provenance.py).

usage: FLASHATTN_LIBRARY=build/libflashattn.so python3 bench/gpt2_step_profile.py [--context 1024]
       [--impls flashattn,sdpa-flash] [--steps 5] [--top 25]
"""
import argparse
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_train as g  # noqa: E402  (puts ../python first on the path, as it imports flashattn)
import provenance as prov  # noqa: E402


def kernel_times(prof):
    """{name: (total device µs, count)} of the profiled region's GPU work (kernels, memsets, copies)"""
    out = {}
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        us = e.self_cuda_time_total if us is None else us
        if us > 0 and e.count:
            out[e.key] = (us, e.count)
    return out


def profile_impl(impl, context, steps, warm, seed=0):
    torch.manual_seed(seed)
    model = g.GPT(impl, context).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    batch = max(1, 16384 // context)
    data = list(g.batches(context, batch, warm + steps, "cuda", seed=seed + 1))

    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for x, y in data[:warm]:
        step(x, y)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for x, y in data[warm:]:
            step(x, y)
        torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / steps
    return wall, {k: (us / steps, n / steps) for k, (us, n) in kernel_times(prof).items()}


def short(name, n=100):
    return name if len(name) <= n else name[:n - 3] + "..."


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--impls", default="flashattn,sdpa-flash")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpt2_step_profile: no CUDA device, nothing run")
        return 0
    impls = args.impls.split(",")
    print(prov.comment(torch.cuda.get_device_name()))
    print(f"# GPT-2 small step, context {args.context}, {16384 // args.context} sequences, {args.steps} profiled "
          f"steps after {args.warm}; torch {torch.__version__}, flashattn {g.flashattn.library_version()}")
    res = {}
    for impl in impls:
        res[impl] = profile_impl(impl, args.context, args.steps, args.warm)
        torch.cuda.empty_cache()  # the model and optimiser went with profile_impl's frame
    for impl in impls:
        wall, ks = res[impl]
        total = sum(us for us, _ in ks.values())
        print(f"\n## {impl}: {wall * 1e3:.2f} ms a step (wall, profiler on), kernels {total / 1e3:.2f} ms a step\n")
        print("| kernel | µs a step | launches a step |\n|---|---|---|")
        for name, (us, n) in sorted(ks.items(), key=lambda kv: -kv[1][0])[:args.top]:
            print(f"| `{short(name)}` | {us:.1f} | {n:g} |")
    names = set().union(*(res[i][1].keys() for i in impls))
    rows = [(n, [res[i][1].get(n, (0.0, 0))[0] for i in impls]) for n in names]
    rows.sort(key=lambda r: -(max(r[1]) - min(r[1])))
    print("\n## kernels by the difference between the attentions (µs a step)\n")
    print("| kernel | " + " | ".join(impls) + " |\n|---|" + "---|" * len(impls))
    for n, us in rows[:args.top]:
        print(f"| `{short(n)}` | " + " | ".join(f"{u:.1f}" for u in us) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
