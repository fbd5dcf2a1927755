"""reference.py: float64 attention and its gradients (the oracle), and the plain same-precision
implementation whose error sets the tolerance, as the C suite does (tests/conformance/harness.c,
tests/support/reference.c): a result passes when its error against float64 is within 2x (forward)
or 3x (gradients) the plain implementation's error, plus 1e-5 x max(1, |reference|). Dropout's
mask comes from a NumPy Philox4x32-10 written here from its definition (Salmon et al., SC'11;
the counter layout of core/philox.h), not from the library."""
import numpy as np


def visible(sq, sk, causal, window, block=None, heads=1):
    """[heads or 1, sq, sk] bool: the keys each query sees (bottom-right aligned causal / window,
    then the block mask (rows, cols, block_q, block_k) expanded)."""
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    off = sk - sq
    left, right = window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    ok = np.ones((sq, sk), dtype=bool)
    if left >= 0:
        ok &= j >= i + off - left
    if right >= 0:
        ok &= j <= i + off + right
    ok = ok[None]
    if block is not None:
        bits, bq, bk = block
        bits = np.asarray(bits, dtype=bool)
        if bits.ndim == 2:
            bits = bits[None]
        expanded = bits[:, (np.arange(sq) // bq)[:, None], (np.arange(sk) // bk)[None, :]]
        ok = ok & expanded
    return ok


PHILOX_M0, PHILOX_M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85


def philox4x32_10(ctr, key):
    """Philox4x32-10 of counters ctr (4 uint32 arrays of one shape) under key (k0, k1): four
    uint32 arrays; the key is bumped between rounds (Random123's order)."""
    c = [np.asarray(x, dtype=np.uint64) for x in ctr]
    k0, k1 = int(key[0]) & 0xFFFFFFFF, int(key[1]) & 0xFFFFFFFF
    mask = np.uint64(0xFFFFFFFF)
    for rnd in range(10):
        if rnd > 0:
            k0, k1 = (k0 + PHILOX_W0) & 0xFFFFFFFF, (k1 + PHILOX_W1) & 0xFFFFFFFF
        p0, p1 = PHILOX_M0 * c[0], PHILOX_M1 * c[2]
        hi0, lo0, hi1, lo1 = p0 >> np.uint64(32), p0 & mask, p1 >> np.uint64(32), p1 & mask
        c = [hi1 ^ c[1] ^ np.uint64(k0), lo1, hi0 ^ c[3] ^ np.uint64(k1), lo0]
    return [x.astype(np.uint32) for x in c]


def dropout_threshold(p):
    """The integer threshold of drop probability p (the library's float32 p): floor(p * 2^16),
    at most 2^16 - 1."""
    t = float(np.float32(p)) * 65536.0
    return 0 if p <= 0 else min(int(t), 65535)


def dropout_keep(seed, offset, batch, heads_q, head, sq, sk, p):
    """[sq, sk] bool: the elements dropout keeps for (batch, head): counter (j / 8, i,
    lo(stream), hi(stream)), stream = offset + batch * heads_q + head (mod 2^64), key (lo(seed),
    hi(seed)); element j is the 16 bits of word (j % 8) / 2 at bit 16 (j % 2); kept when they
    are >= the threshold."""
    stream = (offset + batch * heads_q + head) % 2 ** 64
    i = np.arange(sq, dtype=np.uint64)[:, None]
    j = np.arange(sk, dtype=np.uint64)[None, :]
    shape = (sq, sk)
    ctr = [np.broadcast_to(j >> np.uint64(3), shape), np.broadcast_to(i, shape),
           np.full(shape, stream & 0xFFFFFFFF, dtype=np.uint64), np.full(shape, stream >> 32, dtype=np.uint64)]
    words = philox4x32_10(ctr, (seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF))
    word = np.choose(np.broadcast_to((j % np.uint64(8)) // np.uint64(2), shape).astype(np.int64), words)
    bits = (word.astype(np.uint64) >> (np.uint64(16) * (j % np.uint64(2)))) & np.uint64(0xFFFF)
    return bits >= np.uint64(dropout_threshold(p))


def dropout_factors(seed, offset, batch, heads_q, sq, sk, p):
    """[heads_q, sq, sk]: 0 where dropped, 1 / (1 - p) in float64 where kept (p as the library
    holds it, float32)."""
    scale = 1.0 / (1.0 - float(np.float32(p)))
    return np.stack([dropout_keep(seed, offset, batch, heads_q, h, sq, sk, p) for h in range(heads_q)]) * scale


def _modify(s, softcap, slopes, dt):
    """The score modifiers on scaled scores s [h, sq, sk]: softcap c > 0 gives c tanh(s / c), then
    ALiBi slopes [h] subtract slope * |i + sk - sq - j|; returns the scores and dS'/dS."""
    g = np.ones_like(s)
    if softcap:
        t = np.tanh(s / dt(softcap))
        s, g = dt(softcap) * t, 1 - t * t
    if slopes is not None:
        h, sq, sk = s.shape
        i, j = np.arange(sq)[:, None], np.arange(sk)[None, :]
        s = s - np.asarray(slopes, dtype=dt)[:, None, None] * np.abs(i + sk - sq - j).astype(dt)
    return s, g


def _probs(q, k, scale, vis, dt, softcap=0.0, slopes=None, grad=False, sink=None):
    """P [heads, sq, sk] and LSE [heads, sq] of one sequence in arithmetic type dt (float64 for
    the reference, float32 for the plain implementation); q [sq, h, d], k [sk, hk, d]; with
    grad, also the score modifiers' dS'/dS. sink [h]: one more logit per head in every row's
    softmax, after the modifiers and the mask, that P leaves out (a row without keys: P = 0,
    LSE = sink)."""
    h, hk = q.shape[1], k.shape[1]
    kk = np.repeat(k.astype(dt), h // hk, axis=1)
    s = np.einsum("ihd,jhd->hij", q.astype(dt), kk) * dt(scale)
    s, g = _modify(s, softcap, slopes, dt)
    s = np.where(vis, s, -np.inf)
    m = s.max(-1, keepdims=True, initial=-np.inf)  # -inf for a row of no keys
    if sink is not None:
        sk_ = np.asarray(sink, dtype=dt)[:, None, None]
        m = np.maximum(m, sk_)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)
    l = e.sum(-1, keepdims=True)
    if sink is not None:
        l = l + np.exp(sk_ - m)
    p = np.where(l > 0, e / np.where(l > 0, l, 1), 0)
    lse = np.where(l[..., 0] > 0, (m + np.log(np.where(l > 0, l, 1)))[..., 0], -np.inf)
    if grad:
        return p.astype(dt), lse, g.astype(dt)
    return p.astype(dt), lse


def _round(x, dtype):
    """x rounded to dtype (float16, bfloat16 given as ml_dtypes' type or the string "bfloat16",
    float32: unchanged), returned as float32; bfloat16 by round-to-nearest-even on the bits, so
    ml_dtypes is not needed."""
    x = np.asarray(x, dtype=np.float32)
    if dtype is np.float32 or dtype == np.float32:
        return x
    if (dtype if isinstance(dtype, str) else np.dtype(dtype).name) == "bfloat16":
        b = x.view(np.uint32).astype(np.uint64)
        b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
        return b.astype(np.uint32).view(np.float32)
    return x.astype(dtype).astype(np.float32)


def attention(q, k, v, scale, vis, dtype=None, z=None, softcap=0.0, slopes=None, sink=None):
    """O [sq, h, d_v] and LSE [h, sq] of one sequence: float64 when dtype is None, else the plain
    implementation (float32 arithmetic, P and O rounded to dtype); z [h, sq, sk]: the dropout
    factors (dropout_factors), None without dropout; softcap, ALiBi slopes [h] and the learnable
    sink [h] as flashattn.h."""
    dt = np.float64 if dtype is None else np.float32
    p, lse = _probs(q, k, scale, vis, dt, softcap, slopes, sink=sink)
    h, hk = q.shape[1], k.shape[1]
    vv = np.repeat(v.astype(dt), h // hk, axis=1)
    if z is not None:
        p = p * z.astype(dt)
    if dtype is not None:
        p = _round(p, dtype)
    o = np.einsum("hij,jhd->ihd", p, vv)
    if dtype is not None:
        o = _round(o, dtype)
    return o.astype(np.float64), lse.astype(np.float64)


def gradients(q, k, v, do, scale, vis, dtype=None, z=None, softcap=0.0, slopes=None, sink=None):
    """dQ, dK, dV of one sequence, float64 or the plain implementation (as attention()). With
    dropout factors z: dV = (P o Z)^T dO, dP = Z o (dO V^T), dS = P o (dP - rowsum(P o dP)),
    times the softcap's 1 - tanh^2. With a sink [h], also this sequence's share of dsink [h]:
    -sum_i exp(sink - LSE_i) D_i, D_i = rowsum(P o dP) = dO_i . O_i (the sink's probability times
    the gradient of its logit, which carries no value)."""
    dt = np.float64 if dtype is None else np.float32
    p, lse, gmod = _probs(q, k, scale, vis, dt, softcap, slopes, grad=True, sink=sink)
    h, hk = q.shape[1], k.shape[1]
    g = h // hk
    kk, vv = np.repeat(k.astype(dt), g, axis=1), np.repeat(v.astype(dt), g, axis=1)
    do_, q_ = do.astype(dt), q.astype(dt)
    zz = np.ones_like(p) if z is None else z.astype(dt)
    dp = np.einsum("ihd,jhd->hij", do_, vv)
    pr = _round(p * zz, dtype) if dtype is not None else p * zz
    if dtype is not None:
        dp = _round(dp, dtype)
    dp = dp * zz
    dv = np.einsum("hij,ihd->jhd", pr, do_)
    dsum = (p * dp).sum(-1, keepdims=True)
    ds = p * (dp - dsum) * gmod
    if dtype is not None:
        ds = _round(ds, dtype)
    ds = ds * dt(scale)
    dq = np.einsum("hij,jhd->ihd", ds, kk)
    dk = np.einsum("hij,ihd->jhd", ds, q_)
    sk, d, d_v = k.shape[0], q.shape[2], v.shape[2]
    dk = dk.reshape(sk, hk, g, d).sum(2)
    dv = dv.reshape(sk, hk, g, d_v).sum(2)
    out = [dq, dk, dv]
    if dtype is not None:
        out = [_round(x, dtype) for x in out]
    if sink is not None:  # float32, unrounded: dsink's dtype whatever q's
        out.append(-(np.exp(np.asarray(sink, dtype=dt)[:, None] - lse) * dsum[..., 0]).sum(-1))
    return [x.astype(np.float64) for x in out]


def error(x, ref):
    """max |x - ref| over finite reference entries, and whether x is finite where ref is."""
    x = np.asarray(x, dtype=np.float64)
    fin = np.isfinite(ref)
    ok = bool(np.all(np.isfinite(x[fin])))
    err = float(np.max(np.abs(x[fin] - ref[fin]))) if fin.any() else 0.0
    return err, ok


def bound(factor, naive_err, ref):
    fin = np.abs(ref[np.isfinite(ref)])
    return factor * naive_err + 1e-5 * max(1.0, float(fin.max()) if fin.size else 1.0)
