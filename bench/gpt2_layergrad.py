#!/usr/bin/env python3
"""gpt2_layergrad.py: per-layer gradients of GPT-2 small (bench/gpt2_train.py's model) with each
attention implementation, against a higher-precision reference, on the same weights and batch.

The question it answers: is the gradient our attention gives the model biased compared with the
same-precision baselines (SDPA flash, SDPA cuDNN, SDPA math in bf16)? For each checkpoint (the
weights after --train-steps steps of training with SDPA flash, as gpt2_train.py trains) and each
mode, one forward + backward per implementation on one batch, then per layer (embeddings, block
0..11, final LayerNorm) and overall:
  rel err   ||g - g_ref|| / ||g_ref||       (how far from the reference)
  ratio     ||g|| / ||g_ref||                (a systematic scale bias shows as ratio != 1)
  cos       cos(g, g_ref)
  err cos   cos(g - g_ref, g_sdpa-flash - g_ref): near 1 when our error is SDPA flash's error
            (the bf16 rounding of the rest of the model), lower when ours adds its own
and the forward: loss and logits against the reference's (max and rms |diff|).

Modes:
  autocast   the whole model under bf16 autocast, exactly as gpt2_train.py trains; the reference is
             the same model in fp32 (no autocast, TF32 off) with SDPA math in fp32.
  attn-only  the model in fp32 (TF32 off); only the attention runs in bf16 (Q, K, V rounded to bf16,
             the output back to fp32): every difference from the reference (the same model with
             fp32 SDPA math attention, or fp64 with --ref-dtype fp64) is the attention's.
flashattn#2 runs our attention a second time: our backward adds dQ with atomics, so this is our
run-to-run noise floor.

Writes gpt2_layergrad.md and gpt2_layergrad.csv (with a provenance line) into --out.

usage: python3 bench/gpt2_layergrad.py [--contexts 1024,4096] [--train-steps 0,50] [--modes autocast,attn-only]
           [--impls flashattn,flashattn#2,sdpa-flash,sdpa-cudnn,sdpa-math] [--ref-dtype fp32|fp64] [--out DIR]
"""
import argparse
import os
import sys
import types

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import flashattn  # noqa: E402
import gpt2_train as g2  # noqa: E402
import provenance as prov  # noqa: E402

SDPA = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa-math": SDPBackend.MATH}


def attention(qkv, impl):
    """qkv [b, s, 3, heads, d] -> [b, s, heads, d], causal."""
    if impl == "flashattn":
        return flashattn.flash_attn_qkvpacked_func(qkv, causal=True)
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
    with sdpa_kernel([SDPA[impl]]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


def set_attention(model, impl, bf16_attention):
    """Every block's attention becomes impl; bf16_attention: Q, K, V rounded to bf16 and the output
    returned in the model's dtype (attn-only mode)."""
    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(x).view(b, s, 3, g2.HEADS, g2.HIDDEN // g2.HEADS)
        if bf16_attention:
            y = attention(qkv.to(torch.bfloat16), impl).to(x.dtype)
        else:
            y = attention(qkv, impl)
        return self.proj(y.reshape(b, s, g2.HIDDEN))
    for blk in model.blocks:
        blk.attn.forward = types.MethodType(forward, blk.attn)


def logits_of(model, idx, recompute):
    """gpt2_train.GPT.forward up to the logits; recompute: each block's activations recomputed in the
    backward (torch.utils.checkpoint), so that the materialising fp32 reference fits at 4096 tokens."""
    x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1], device=idx.device))
    for blk in model.blocks:
        x = torch.utils.checkpoint.checkpoint(blk, x, use_reentrant=False) if recompute else blk(x)
    return F.linear(model.ln_f(x), model.wte.weight)


def layer_of(name):
    if name.startswith(("wte.", "wpe.")):
        return "embeddings"
    if name.startswith("blocks."):
        return f"block {int(name.split('.')[1]):2d}"
    return "ln_f"


def grads_and_logits(model, x, y, autocast, recompute=False):
    model.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
        logits = logits_of(model, x, recompute)
        wide = torch.promote_types(logits.dtype, torch.float32)  # the loss in fp32 (fp64 for an fp64 reference)
        loss = F.cross_entropy(logits.to(wide).view(-1, g2.VOCAB), y.reshape(-1))
    loss.backward()
    grads = {n: p.grad.detach().double() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return float(loss), logits.detach().float(), grads


def grouped(grads):
    out = {}
    for n, g in grads.items():
        out.setdefault(layer_of(n), []).append(g.flatten())
    out = {k: torch.cat(v) for k, v in out.items()}
    out["all"] = torch.cat([g.flatten() for g in grads.values()])
    return out


def compare(g, ref, flash_err):
    """(rel err, norm ratio, cos, err cos vs SDPA flash's error) of flat float64 vectors."""
    e = g - ref
    nr = float(ref.norm())
    rel = float(e.norm()) / nr if nr else float("nan")
    ratio = float(g.norm()) / nr if nr else float("nan")
    cos = float(F.cosine_similarity(g, ref, dim=0))
    ecos = float(F.cosine_similarity(e, flash_err, dim=0)) if flash_err is not None else float("nan")
    return rel, ratio, cos, ecos


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--tokens", type=int, default=16384, help="tokens in the batch (batch = tokens / context)")
    ap.add_argument("--train-steps", default="0,50",
                    help="checkpoints: steps of SDPA-flash training (as gpt2_train.py) before the comparison")
    ap.add_argument("--modes", default="autocast,attn-only")
    ap.add_argument("--impls", default="flashattn,flashattn#2,sdpa-flash,sdpa-cudnn,sdpa-math")
    ap.add_argument("--ref-dtype", default="fp32", choices=["fp32", "fp64"],
                    help="attn-only mode's reference dtype (the model and SDPA math); fp64 needs ~2x the memory")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=".")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a smoke test of the script (tiny sizes), not a measurement")
    args = ap.parse_args()
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("gpt2_layergrad: no CUDA device, nothing run")
        return 0

    def empty_cache():
        if dev == "cuda":
            torch.cuda.empty_cache()

    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be fp32
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    device = torch.cuda.get_device_name() if dev == "cuda" else prov.torch_device()
    impls = args.impls.split(",")
    checkpoints = sorted(int(s) for s in args.train_steps.split(","))
    md = [prov.comment(device),
          f"# {device} | torch {torch.__version__} | flashattn {flashattn.library_version()} | GPT-2 small, "
          f"{g2.LAYERS} layers, {g2.HEADS} heads, hidden {g2.HIDDEN}, {args.tokens} tokens per batch, seed {args.seed}; reference: SDPA math, model and attention in "
          f"fp32 (attn-only: {args.ref_dtype}); TF32 off",
          "# rel err = |g - g_ref| / |g_ref|, ratio = |g| / |g_ref|, cos = cos(g, g_ref), "
          "err cos = cos(g - g_ref, g_sdpa-flash - g_ref)"]
    rows = []
    for context in (int(c) for c in args.contexts.split(",")):
        batch = max(1, args.tokens // context)
        data = g2.batches(context, batch, checkpoints[-1] + 1, dev, seed=args.seed + 1)
        torch.manual_seed(args.seed)
        model = g2.GPT("sdpa-flash", context).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        done, upcoming = 0, next(data)
        for ck in checkpoints:
            while done < ck:  # train as gpt2_train.run does (the same weights, batches, optimiser)
                x, y = upcoming
                with torch.autocast(dev, dtype=torch.bfloat16):
                    loss = model(x, y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                done += 1
                upcoming = next(data, None)
            x, y = upcoming  # the batch step ck trains on, the same for every implementation
            state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            for mode in args.modes.split(","):
                autocast = mode == "autocast"
                ref_dt = torch.float64 if (mode == "attn-only" and args.ref_dtype == "fp64") else torch.float32
                probe = g2.GPT("sdpa-math", context).to(dev)
                probe.load_state_dict(state)
                probe.to(ref_dt)
                set_attention(probe, "sdpa-math", False)
                ref_loss, ref_logits, ref_g = grads_and_logits(probe, x, y, False, recompute=True)
                ref_logits = ref_logits.float()
                probe.float()
                probe.load_state_dict(state)
                ref_groups = grouped(ref_g)
                del ref_g
                results, start = {}, len(md)
                for impl in impls:
                    set_attention(probe, impl.split("#")[0], not autocast)
                    try:
                        loss, logits, g = grads_and_logits(probe, x, y, autocast)
                    except (RuntimeError, torch.OutOfMemoryError) as e:
                        empty_cache()
                        md.append(f"# context {context}, step {ck}, {mode}: {impl} not run: {str(e).splitlines()[0][:120]}")
                        continue
                    d = (logits - ref_logits).abs()
                    results[impl] = (loss, float(d.max()), float(d.pow(2).mean().sqrt()), grouped(g))
                    del logits, g, d
                    empty_cache()
                flash = results.get("sdpa-flash")
                md.append("")
                md.append(f"## context {context} (batch {batch}), after {ck} training steps, mode {mode}; "
                          f"reference loss {ref_loss:.6f}")
                md.append("")
                md.append("| attention | loss - ref | logits max / rms abs diff | all: rel err | ratio | cos | err cos |")
                md.append("|---|---|---|---|---|---|---|")
                for impl, (loss, lmax, lrms, groups) in results.items():
                    ferr = flash[3]["all"] - ref_groups["all"] if flash and impl != "sdpa-flash" else None
                    rel, ratio, cos, ecos = compare(groups["all"], ref_groups["all"], ferr)
                    md.append(f"| {impl} | {loss - ref_loss:+.3e} | {lmax:.3e} / {lrms:.3e} | {rel:.3e} | {ratio:.6f} | "
                              f"{cos:.8f} | {ecos:.4f} |")
                md.append("")
                md.append("| layer | " + " | ".join(f"{i} rel err / ratio / err cos" for i in results) + " |")
                md.append("|---|" + "---|" * len(results))
                for layer in ref_groups:
                    cells = []
                    for impl, (loss, lmax, lrms, groups) in results.items():
                        ferr = flash[3][layer] - ref_groups[layer] if flash and impl != "sdpa-flash" else None
                        rel, ratio, cos, ecos = compare(groups[layer], ref_groups[layer], ferr)
                        cells.append(f"{rel:.3e} / {ratio:.5f} / {ecos:.3f}")
                        rows.append([context, ck, mode, impl, layer, loss - ref_loss, lmax, lrms, rel, ratio, cos, ecos])
                    md.append(f"| {layer} | " + " | ".join(cells) + " |")
                print("\n".join(md[start:]), flush=True)
                del probe, results, ref_groups, ref_logits
                empty_cache()
        del model, opt
        empty_cache()
    with open(os.path.join(args.out, "gpt2_layergrad.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    prov.write_csv(os.path.join(args.out, "gpt2_layergrad.csv"),
                   ["context", "train_steps", "mode", "attention", "layer", "loss_minus_ref", "logits_max_abs_diff",
                    "logits_rms_diff", "grad_rel_err", "grad_norm_ratio", "grad_cos", "err_cos_vs_sdpa_flash"],
                   rows, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
