#!/usr/bin/env python3
"""gpt2_train.py: end-to-end training benchmark of the flashattn Python package. A GPT-2 small
shaped model (12 layers, 12 heads, hidden 768, vocabulary 50257, tied embeddings, pre-LayerNorm,
GELU MLP, no dropout) in plain PyTorch, trained in bf16 autocast with AdamW on synthetic tokens
(a seeded noisy linear-congruential sequence, so that there is something to learn), with the
attention from this package (flash_attn_qkvpacked_func), from SDPA's flash backend and from SDPA's
math backend, in the same run. Every implementation starts from the same seed: the same weights
and the same batches. NAME#2 in --impls trains NAME once more: the two non-deterministic
backwards (ours and SDPA flash's add dQ with atomics) then show how far a run drifts from itself,
the noise that the curves of different implementations are compared with.

Prints, per context length: tokens per second (median step time after warm-up), peak device
memory, and the loss curves' largest difference from SDPA flash's; writes the loss curves as CSV
(and PNG where matplotlib is installed) into --out.

usage: python3 bench/gpt2_train.py [--contexts 1024,4096] [--tokens-per-step 16384] [--steps 200]
                                   [--timed-steps 30] [--impls flashattn,sdpa-flash,sdpa-flash#2,sdpa-math] [--out DIR]
"""
import argparse
import csv
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashattn  # noqa: E402

VOCAB, LAYERS, HEADS, HIDDEN = 50257, 12, 12, 768


class Attention(nn.Module):
    def __init__(self, impl):
        super().__init__()
        self.impl = impl
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.proj = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(x).view(b, s, 3, HEADS, HIDDEN // HEADS)
        if self.impl == "flashattn":
            y = flashattn.flash_attn_qkvpacked_func(qkv, causal=True)
        else:
            q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
            backend = SDPBackend.FLASH_ATTENTION if self.impl == "sdpa-flash" else SDPBackend.MATH
            with sdpa_kernel([backend]):
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
        return self.proj(y.reshape(b, s, HIDDEN))


class Block(nn.Module):
    def __init__(self, impl):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
        self.attn = Attention(impl)
        self.mlp = nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(approximate="tanh"), nn.Linear(4 * HIDDEN, HIDDEN))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, impl, context):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(context, HIDDEN)
        self.blocks = nn.ModuleList(Block(impl) for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(HIDDEN)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * LAYERS) if name.endswith(("proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1))


def batches(context, batch, steps, device, seed):
    """seeded synthetic tokens: x[t+1] = (x[t] * 1103 + 12345 + noise) mod V, noise 0 with p 0.9"""
    g = torch.Generator(device="cpu").manual_seed(seed)
    for _ in range(steps):
        x = torch.empty(batch, context + 1, dtype=torch.int64)
        x[:, 0] = torch.randint(0, VOCAB, (batch,), generator=g)
        noise = torch.randint(0, VOCAB, (batch, context), generator=g) * (torch.rand(batch, context, generator=g) < 0.1)
        for t in range(context):
            x[:, t + 1] = (x[:, t] * 1103 + 12345 + noise[:, t]) % VOCAB
        x = x.to(device)
        yield x[:, :-1], x[:, 1:]


def run(impl, context, batch, steps, timed, device, seed=0):
    torch.manual_seed(seed)
    model = GPT(impl, context).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    losses, times = [], []
    for step, (x, y) in enumerate(batches(context, batch, steps, device, seed=seed + 1)):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    peak = torch.cuda.max_memory_allocated()
    warm = min(5, len(times) - 1)
    window = sorted(times[warm:warm + timed]) if timed else sorted(times[warm:])
    median = window[len(window) // 2]
    del model, opt
    torch.cuda.empty_cache()
    return losses, batch * context / median, peak, median


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--tokens-per-step", type=int, default=16384)
    ap.add_argument("--steps", default="200", help="steps per context (one value or one per context)")
    ap.add_argument("--timed-steps", type=int, default=30)
    ap.add_argument("--impls", default="flashattn,sdpa-flash,sdpa-math")
    ap.add_argument("--seed", type=int, default=0, help="weights from SEED, batches from SEED + 1")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpt2_train: no CUDA device, nothing run")
        return 0
    os.makedirs(args.out, exist_ok=True)
    contexts = [int(c) for c in args.contexts.split(",")]
    steps = [int(s) for s in args.steps.split(",")]
    steps = steps + [steps[-1]] * (len(contexts) - len(steps))
    impls = args.impls.split(",")
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | flashattn {flashattn.library_version()} | "
          f"GPT-2 small (12 x 12 heads x 768), bf16 autocast, AdamW, {args.tokens_per_step} tokens per step, seed {args.seed}")
    print("| context | attention | tokens/s | step (ms) | peak memory (GiB) | loss, mean of the last 20 steps | "
          "mean / max |loss - SDPA flash's| over the steps |")
    print("|---|---|---|---|---|---|---|")
    for context, n in zip(contexts, steps):
        batch = max(1, args.tokens_per_step // context)
        res = {}
        for impl in impls:
            try:
                res[impl] = run(impl.split("#")[0], context, batch, n, args.timed_steps, "cuda", args.seed)
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                res[impl] = None
        base = res.get("sdpa-flash")
        for impl in impls:
            r = res[impl]
            if r is None:
                print(f"| {context} | {impl} | out of memory | | | | |")
                continue
            losses, tps, peak, med = r
            bad = next((i for i, x in enumerate(losses) if not math.isfinite(x)), None)
            if bad is not None:  # a run whose loss is not finite has no valid figures
                print(f"| {context} | {impl} | (loss not finite from step {bad}) | {med * 1e3:.1f} | "
                      f"{peak / 2**30:.2f} | - | - |", flush=True)
                continue
            diffs = [abs(a - b) for a, b in zip(losses, base[0])] if base else [float("nan")]
            tail = losses[-20:]
            print(f"| {context} | {impl} | {tps:,.0f} | {med * 1e3:.1f} | {peak / 2**30:.2f} | {sum(tail) / len(tail):.3f} | "
                  f"{sum(diffs) / len(diffs):.4f} / {max(diffs):.4f} |", flush=True)
        tag = f"ctx{context}" + (f"_seed{args.seed}" if args.seed else "")
        path = os.path.join(args.out, f"gpt2_loss_{tag}.csv")
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            names = [i for i in impls if res[i] is not None]
            w.writerow(["step"] + names)
            for s in range(n):
                w.writerow([s] + [res[i][0][s] for i in names])
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for i in names:
                ax.plot(range(n), res[i][0], label=i, linewidth=1)
            ax.set_xlabel("step")
            ax.set_ylabel("training loss")
            ax.set_title(f"GPT-2 small, context {context}, seed {args.seed}: loss per step ({torch.cuda.get_device_name()})",
                         fontsize=10)
            ax.grid(True, alpha=0.3)
            ax.legend()
            fig.tight_layout()
            fig.savefig(os.path.join(args.out, f"gpt2_loss_{tag}.png"), dpi=120)
            plt.close(fig)
        except ImportError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
