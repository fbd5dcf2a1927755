#!/usr/bin/env python3
"""gpt2_train.py: end-to-end training benchmark of the flashattn Python package. A GPT-2 small
shaped model (12 layers, 12 heads, hidden 768, vocabulary 50257, tied embeddings, pre-LayerNorm,
GELU MLP, no dropout) in plain PyTorch, trained in bf16 autocast with AdamW on synthetic tokens
(a seeded noisy linear-congruential sequence, so that there is something to learn), with the
attention from this package (flash_attn_qkvpacked_func), from SDPA's flash (FlashAttention-2),
cuDNN and math backends, in the same run. Every implementation starts from the same seed: the same weights
and the same batches. NAME#2 in --impls trains NAME once more: the two non-deterministic
backwards (ours and SDPA flash's add dQ with atomics) then show how far a run drifts from itself,
the noise that the curves of different implementations are compared with.

Prints, per seed and context length: tokens per second (median step time after warm-up), peak
device memory, the mean of the last 20 losses and the loss curves' mean and largest difference
from SDPA flash's; then, over the seeds, each attention's last-20 mean minus SDPA flash's. Writes
into --out, each file with its provenance (date, commit, device, command; bench/provenance.py):
gpt2_train.md (the tables), gpt2_summary.csv (one row per seed, context and attention) and the loss
curves gpt2_loss_ctx<context>[_seed<seed>].csv (and .png where matplotlib is installed), rewritten
after every seed and context, so that a run stopped early keeps what it finished. --time-limit
bounds the whole run: a training run that would end after it is not started.

usage: python3 bench/gpt2_train.py [--contexts 1024,4096] [--tokens-per-step 16384] [--steps 200]
                                   [--timed-steps 30] [--impls flashattn,sdpa-flash,sdpa-cudnn,sdpa-flash#2,sdpa-math]
                                   [--seed 0 | --seeds 1,2,3,4] [--time-limit SECONDS] [--out DIR]
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashattn  # noqa: E402
import provenance as prov  # noqa: E402

VOCAB, LAYERS, HEADS, HIDDEN = 50257, 12, 12, 768
# the attentions --impls names: this package, and SDPA restricted to one backend each
SDPA_BACKENDS = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
                 "sdpa-math": SDPBackend.MATH}
IMPLS = ["flashattn"] + list(SDPA_BACKENDS)


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
            with sdpa_kernel([SDPA_BACKENDS[self.impl]]):
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


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def run(impl, context, data, timed, device, seed=0):
    """Trains from seed's weights on the batches in data (a list of (x, y)); returns (losses,
    tokens/s, peak device memory (0 off CUDA), median step time in s, (fastest, slowest) step of the
    timed window in s)."""
    torch.manual_seed(seed)
    model = GPT(impl, context).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    losses, times = [], []
    for x, y in data:
        sync(device)
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    warm = min(5, len(times) - 1)
    window = sorted(times[warm:warm + timed]) if timed else sorted(times[warm:])
    median = window[len(window) // 2]
    batch = data[0][0].shape[0]
    del model, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return losses, batch * context / median, peak, median, (window[0], window[-1])


def tail_mean(losses, n=20):
    tail = losses[-n:]
    return sum(tail) / len(tail)


def relative(tps, res):
    """tokens/s over SDPA flash's and over SDPA cuDNN's in the same run ('-' where one did not run)."""
    return " / ".join(f"{tps / res[ref][1]:.3f}" if res.get(ref) else "-" for ref in ("sdpa-flash", "sdpa-cudnn"))


def finite(losses):
    return all(math.isfinite(x) for x in losses)


SUMMARY_HEADER = ["context", "seed", "attention", "steps", "tokens_per_s", "step_ms", "peak_gib", "loss_last20_mean",
                  "mean_abs_diff_vs_sdpa_flash", "max_abs_diff_vs_sdpa_flash", "loss_finite", "note", "step_ms_fastest",
                  "step_ms_slowest"]


def across_seeds(summary, contexts, impls):
    """Markdown lines: per context and attention, over the seeds where it and SDPA flash both ran
    with finite losses: the last-20 mean minus SDPA flash's (mean, min, max, seeds where it is
    higher) and the mean |loss - SDPA flash's| over the steps, averaged over the seeds."""
    out = ["", "## across seeds: each attention against SDPA flash of the same seed", "",
           "| context | attention | seeds | last-20 mean - SDPA flash's: mean / min / max | seeds higher | "
           "mean \\|loss - SDPA flash's\\| over the steps, mean over seeds |", "|---|---|---|---|---|---|"]
    for context in contexts:
        base = {r[1]: r for r in summary if r[0] == context and r[2] == "sdpa-flash" and r[10]}
        for impl in impls:
            if impl == "sdpa-flash":
                continue
            pairs = [(r, base[r[1]]) for r in summary if r[0] == context and r[2] == impl and r[10] and r[1] in base]
            if not pairs:
                continue
            d = [r[7] - b[7] for r, b in pairs]
            out.append(f"| {context} | {impl} | {','.join(str(r[1]) for r, _ in pairs)} | "
                       f"{sum(d) / len(d):+.4f} / {min(d):+.4f} / {max(d):+.4f} | {sum(x > 0 for x in d)} of {len(d)} | "
                       f"{sum(r[8] for r, _ in pairs) / len(pairs):.4f} |")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--tokens-per-step", type=int, default=16384)
    ap.add_argument("--steps", default="200", help="steps per context (one value or one per context)")
    ap.add_argument("--timed-steps", type=int, default=30)
    ap.add_argument("--impls", default="flashattn,sdpa-flash,sdpa-cudnn,sdpa-math",
                    help=f"comma-separated, of {','.join(IMPLS)}; NAME#2 runs NAME again")
    ap.add_argument("--seed", type=int, default=0, help="weights from SEED, batches from SEED + 1")
    ap.add_argument("--seeds", default=None, help="several seeds, e.g. 1,2,3,4 (replaces --seed)")
    ap.add_argument("--time-limit", type=float, default=0,
                    help="seconds: a run that would end after this (estimated from the last run of the same "
                         "attention and context) is not started; what ran is written (0: no limit)")
    ap.add_argument("--out", default=".")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a smoke test of the script (tiny sizes), not a measurement")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpt2_train: no CUDA device, nothing run")
        return 0
    t_start = time.perf_counter()
    os.makedirs(args.out, exist_ok=True)
    contexts = [int(c) for c in args.contexts.split(",")]
    steps = [int(s) for s in args.steps.split(",")]
    steps = steps + [steps[-1]] * (len(contexts) - len(steps))
    impls = args.impls.split(",")
    unknown = [i for i in impls if i.split("#")[0] not in IMPLS]
    if unknown:
        ap.error(f"--impls: unknown {','.join(unknown)} (known: {','.join(IMPLS)})")
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [args.seed]
    device = torch.cuda.get_device_name() if args.device == "cuda" else prov.torch_device()
    md = [prov.comment(device),
          f"# {device} | torch {torch.__version__} | flashattn {flashattn.library_version()} | "
          f"GPT-2 small shape ({LAYERS} layers, {HEADS} heads, hidden {HIDDEN}), bf16 autocast, AdamW, {args.tokens_per_step} tokens per step, "
          f"seeds {','.join(map(str, seeds))}"]
    print("\n".join(md), flush=True)
    summary, run_wall = [], {}
    md_path, summary_path = os.path.join(args.out, "gpt2_train.md"), os.path.join(args.out, "gpt2_summary.csv")
    for seed in seeds:
        for context, n in zip(contexts, steps):
            batch = max(1, args.tokens_per_step // context)
            data = list(batches(context, batch, n, args.device, seed=seed + 1))
            res, notes = {}, {}
            for impl in impls:
                key = (impl.split("#")[0], context)
                elapsed = time.perf_counter() - t_start
                if args.time_limit and key in run_wall and elapsed + run_wall[key] > args.time_limit:
                    res[impl], notes[impl] = None, f"not run: --time-limit {args.time_limit:g} s"
                    continue
                t0 = time.perf_counter()
                try:
                    res[impl] = run(impl.split("#")[0], context, data, args.timed_steps, args.device, seed)
                except torch.OutOfMemoryError:
                    torch.cuda.empty_cache()
                    res[impl], notes[impl] = None, "out of memory"
                except RuntimeError as e:  # an SDPA backend with no kernel for this device or shape
                    if "No available kernel" not in str(e):
                        raise
                    res[impl], notes[impl] = None, "not run: SDPA has no kernel of this backend here"
                run_wall[key] = time.perf_counter() - t0
            del data
            base = res.get("sdpa-flash")
            table = ["", f"## context {context}, seed {seed}, {n} steps", "",
                     "| context | attention | tokens/s | tokens/s over SDPA flash's / cuDNN's | step (ms): median "
                     "(fastest-slowest) | peak memory (GiB) | "
                     "loss, mean of the last 20 steps | mean / max \\|loss - SDPA flash's\\| over the steps |",
                     "|---|---|---|---|---|---|---|---|"]
            for impl in impls:
                r = res[impl]
                if r is None:
                    table.append(f"| {context} | {impl} | {notes[impl]} | | | | | |")
                    summary.append([context, seed, impl, n, None, None, None, None, None, None, False, notes[impl],
                                    None, None])
                    continue
                losses, tps, peak, med, (lo, hi) = r
                step = f"{med * 1e3:.1f} ({lo * 1e3:.1f}-{hi * 1e3:.1f})"
                bad = next((i for i, x in enumerate(losses) if not math.isfinite(x)), None)
                if bad is not None:  # a run whose loss is not finite has no valid figures
                    table.append(f"| {context} | {impl} | (loss not finite from step {bad}) | - | {step} | "
                                 f"{peak / 2**30:.2f} | - | - |")
                    summary.append([context, seed, impl, n, tps, med * 1e3, peak / 2**30, None, None, None, False,
                                    f"loss not finite from step {bad}", lo * 1e3, hi * 1e3])
                    continue
                diffs = [abs(a - b) for a, b in zip(losses, base[0])] if base else [float("nan")]
                table.append(f"| {context} | {impl} | {tps:,.0f} | {relative(tps, res)} | {step} | {peak / 2**30:.2f} | "
                             f"{tail_mean(losses):.3f} | {sum(diffs) / len(diffs):.4f} / {max(diffs):.4f} |")
                summary.append([context, seed, impl, n, tps, med * 1e3, peak / 2**30, tail_mean(losses),
                                sum(diffs) / len(diffs), max(diffs), True, "", lo * 1e3, hi * 1e3])
            print("\n".join(table), flush=True)
            md += table
            tag = f"ctx{context}" + (f"_seed{seed}" if seed else "")
            names = [i for i in impls if res[i] is not None]
            prov.write_csv(os.path.join(args.out, f"gpt2_loss_{tag}.csv"), ["step"] + names,
                           [[s] + [res[i][0][s] for i in names] for s in range(n)], device)
            try:
                import matplotlib
                matplotlib.use("Agg")
                import matplotlib.pyplot as plt
                fig, ax = plt.subplots(figsize=(7, 4.5))
                for i in names:
                    ax.plot(range(n), res[i][0], label=i, linewidth=1)
                ax.set_xlabel("step")
                ax.set_ylabel("training loss")
                ax.set_title(f"GPT-2 small, context {context}, seed {seed}: loss per step ({device})", fontsize=10)
                ax.grid(True, alpha=0.3)
                ax.legend()
                fig.tight_layout()
                fig.savefig(os.path.join(args.out, f"gpt2_loss_{tag}.png"), dpi=120, metadata=prov.png_metadata(device))
                plt.close(fig)
            except ImportError:
                pass
            # written after every (seed, context): a run cut short keeps what it finished
            with open(md_path, "w") as f:
                f.write("\n".join(md + across_seeds(summary, contexts, impls)) + "\n")
            prov.write_csv(summary_path, SUMMARY_HEADER, summary, device)
    print("\n".join(across_seeds(summary, contexts, impls)), flush=True)
    print(f"# wall {time.perf_counter() - t_start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
