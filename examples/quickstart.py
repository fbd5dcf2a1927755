"""examples/quickstart.py: causal attention with the flashattn Python package on NumPy arrays (the
CPU backend), forward and backward, the output checked against plain NumPy attention in float64."""
import sys

try:
    import numpy as np
except ImportError:  # the test suite reports this example as skipped, with this reason
    print("SKIP: the Python quick start needs NumPy (Debian: apt-get install python3-numpy)")
    sys.exit(77)

from flashattn import flash_attn_backward, flash_attn_func

rng = np.random.default_rng(0)
batch, seqlen, heads, dim = 2, 256, 4, 64
q, k, v = (rng.standard_normal((batch, seqlen, heads, dim), dtype=np.float32) for _ in range(3))

# out: [batch, seqlen, heads, dim]; lse: [batch, heads, seqlen], what the backward needs
out, lse, _ = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
dq, dk, dv = flash_attn_backward(np.ones_like(out), q, k, v, out, lse, causal=True)

# the same attention in float64, materialising the scores: softmax(q k^T / sqrt(d) + causal mask) v
scores = np.einsum("bihd,bjhd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(dim)
scores[:, :, np.triu(np.ones((seqlen, seqlen), dtype=bool), 1)] = -np.inf
p = np.exp(scores - scores.max(axis=-1, keepdims=True))
expected = np.einsum("bhij,bjhd->bihd", p / p.sum(axis=-1, keepdims=True), v.astype(np.float64))
error = np.abs(out - expected).max()
print(f"causal forward, {seqlen} tokens, {heads} heads, d {dim}: max error {error:.1e}; dq {dq.shape}")
sys.exit(0 if error < 1e-4 else 1)
