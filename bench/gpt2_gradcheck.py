#!/usr/bin/env python3
"""gpt2_gradcheck.py: the attention of bench/gpt2_train.py in isolation. At GPT-2 small's shapes
(packed QKV [b, s, 3, 12, 64], causal, bf16, 16384 tokens per call) the output and gradients of
this package and of SDPA's flash backend, each against SDPA's math backend on the same values in
fp32: max and rms error. Inputs scaled by 1 and by 4 (sharper softmax rows, as training produces).

Its output starts with a provenance line (date, commit, device, command; bench/provenance.py).
bench/gpt2_layergrad.py compares the whole model's gradients, layer by layer.

usage: python3 bench/gpt2_gradcheck.py [--seqlens 1024,4096]
"""
import argparse
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashattn  # noqa: E402
import provenance as prov  # noqa: E402


def sdpa(qkv, do, backend):
    x = qkv.detach().requires_grad_()
    q, k, v = (t.transpose(1, 2) for t in x.unbind(2))
    with sdpa_kernel([backend]):
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
    y.backward(do.to(y.dtype))
    return y.detach().float(), x.grad.float()


def ours(qkv, do):
    x = qkv.detach().requires_grad_()
    y = flashattn.flash_attn_qkvpacked_func(x, causal=True)
    y.backward(do)
    return y.detach().float(), x.grad.float()


def err(a, r):
    return f"max {float((a - r).abs().max()):.3e} rms {float((a - r).pow(2).mean().sqrt()):.3e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqlens", default="1024,4096")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpt2_gradcheck: no CUDA device, nothing run")
        return 0
    print(prov.comment(torch.cuda.get_device_name()), flush=True)  # first line of a saved output
    torch.manual_seed(0)
    for s in (int(x) for x in args.seqlens.split(",")):
        b = max(1, 16384 // s)
        for scale in (1.0, 4.0):
            qkv = (torch.randn(b, s, 3, 12, 64, device="cuda") * scale).to(torch.bfloat16)
            do = torch.randn(b, s, 12, 64, device="cuda").to(torch.bfloat16)
            ref_o, ref_g = sdpa(qkv.float(), do, SDPBackend.MATH)
            fl_o, fl_g = sdpa(qkv, do, SDPBackend.FLASH_ATTENTION)
            our_o, our_g = ours(qkv, do)
            print(f"s {s} input scale {scale}: O ours {err(our_o, ref_o)} | sdpa-flash {err(fl_o, ref_o)}")
            for i, n in enumerate("qkv"):
                print(f"   d{n}: ours {err(our_g[:, :, i], ref_g[:, :, i])} | sdpa-flash {err(fl_g[:, :, i], ref_g[:, :, i])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
