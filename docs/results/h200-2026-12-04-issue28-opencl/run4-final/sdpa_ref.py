"""PyTorch SDPA (flash = FlashAttention-2, cudnn) at opencl_bench's shapes, fp16, for context in the same run."""
import sys, time, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
print("# torch", torch.__version__, torch.cuda.get_device_name(0), "commit", sys.argv[1] if len(sys.argv) > 1 else "?")
print("| backend | d | causal | seqlen | fwd ms | fwd TFLOP/s | bwd ms | bwd TFLOP/s |")
print("|---|---|---|---|---|---|---|---|")
def t(fn, reps=5):
    fn(); torch.cuda.synchronize(); ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort(); return ts[len(ts) // 2]
for d in (64, 128):
    for causal in (False, True):
        s, bsz, h = 4096, 4, 2048 // d
        q, k, v = (torch.randn(bsz, h, s, d, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            with sdpa_kernel(be):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                go = torch.randn_like(o)
                fwd = t(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                bwd = t(lambda: torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=causal), (q, k, v), go)) - fwd
            fl = 4 * bsz * h * s * s * d / (2 if causal else 1)
            print(f"| {name} | {d} | {'yes' if causal else 'no'} | {s} | {fwd:.2f} | {fl / fwd / 1e9:.1f} | {bwd:.2f} | {2.5 * fl / bwd / 1e9:.1f} |")
