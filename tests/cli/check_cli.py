#!/usr/bin/env python3
"""check_cli.py: an independent NumPy float64 check of `flashattn fwd` and `flashattn bwd`.

Writes random inputs as .npy files, runs the tool, and compares its outputs with attention computed
here in float64 from the documented semantics (include/flashattn.h, core/philox.h), not from the C
code: forward O and LSE, and dQ, dK, dV by the analytic backward, with every option (--softcap and
--alibi-slopes included: softcap c tanh(S / c), then the ALiBi bias, then the mask; the backward
multiplies dS by 1 - tanh^2). Also the tool's smoke runs and `flashattn iomodel`;
check_cli_bad_input.py runs it on bad input (missing, truncated, mismatched files, bad options) and
check_cli_safety.py covers output paths, FIFOs and the exit statuses --help documents.

Pass rule (the C conformance suite's): max|tool - ref64| <= F * max|naive - ref64| + floor, F = 2
for O and 3 for gradients, floor = 1e-5 * max(1, max|ref64|), where "naive" is a plain NumPy
implementation in the input precision (float32 math; for fp16/bf16, P -- and in the backward dP and
dS -- rounded to the dtype before each matrix product, outputs rounded to the dtype). LSE: within
1e-3 (fp16/bf16) or 1e-5 (fp32) where finite, and -inf exactly where the reference is -inf.

Usage: check_cli.py FLASHATTN_EXECUTABLE [--backend NAME] [-k SUBSTRING]
"""

import math
import os
import subprocess
import sys
import tempfile
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
import reference  # noqa: E402  (python/tests/reference.py: the visibility mask)

# ------------------------------------------------------------------ dtypes

DTYPES = ("fp32", "fp16", "bf16")


def bf16_bits_from_f32(x):
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even; NaN stays a quiet NaN."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    nan = (u & np.uint64(0x7FFFFFFF)) > np.uint64(0x7F800000)
    quiet = (u >> np.uint64(16)) | np.uint64(0x40)
    return np.where(nan, quiet, rounded).astype(np.uint16)


def f32_from_bf16_bits(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_to(dtype, x):
    """x rounded to dtype's precision, returned as float32 (identity beyond float32 for fp32)."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        return f32_from_bf16_bits(bf16_bits_from_f32(x))
    return x


def encode(dtype, x):
    """float32 values (already representable in dtype) -> the array the tool reads."""
    if dtype == "fp16":
        return x.astype(np.float16)
    if dtype == "bf16":
        return bf16_bits_from_f32(x)
    return x.astype(np.float32)


def decode(dtype, a):
    """The tool's output array -> float64."""
    if dtype == "bf16":
        if a.dtype != np.uint16:
            raise ValueError("expected uint16 bf16 bit patterns, got %s" % a.dtype)
        return f32_from_bf16_bits(a).astype(np.float64)
    want = np.float16 if dtype == "fp16" else np.float32
    if a.dtype != want:
        raise ValueError("expected %s, got %s" % (np.dtype(want).name, a.dtype))
    return a.astype(np.float64)


# ------------------------------------------------------------------ Philox4x32-10 and dropout

MASK32 = np.uint64(0xFFFFFFFF)
PHILOX_M0, PHILOX_M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Vectorised Philox4x32-10 (Random123): counters as uint64 arrays holding 32-bit words, key as
    Python ints. Ten rounds, the key bumped by the Weyl constants before every round but the first."""
    c = [np.asarray(w, dtype=np.uint64) & MASK32 for w in (c0, c1, c2, c3)]
    for rnd in range(10):
        if rnd:
            k0 = (k0 + PHILOX_W0) & 0xFFFFFFFF
            k1 = (k1 + PHILOX_W1) & 0xFFFFFFFF
        p0 = PHILOX_M0 * c[0]  # < 2^64: the full 64-bit product of two 32-bit words
        p1 = PHILOX_M1 * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & MASK32
        c = [hi1 ^ c[1] ^ np.uint64(k0), lo1, hi0 ^ c[3] ^ np.uint64(k1), lo0]
    return c


def philox_kat():
    """The Random123 known-answer tests for philox4x32_10; returns a list of failures."""
    vectors = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
         (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    ]
    bad = []
    for ctr, key, want in vectors:
        got = tuple(int(w) for w in philox4x32_10(*ctr, *key))
        if got != want:
            bad.append("ctr %s key %s: got %s want %s" % (
                [hex(x) for x in ctr], [hex(x) for x in key], [hex(x) for x in got], [hex(x) for x in want]))
    return bad


def dropout_threshold(p):
    """core/philox.h: min(floor(p * 2^16), 2^16 - 1), p as the float the API stores."""
    p32 = float(np.float32(p))
    if not p32 > 0.0:
        return 0
    return min(int(math.floor(p32 * 65536.0)), 65535)


def dropout_keep(seed, offset, b, heads_q, h, sq, sk, p):
    """Boolean [sq, sk]: element (b, h, i, j) kept. key = (lo32(seed), hi32(seed)); stream = offset
    + b*heads_q + h (64-bit, wrapping); counter = (j // 8, i, lo32(stream), hi32(stream)); key j
    takes the 16 bits at bit 16 (j % 2) of output word (j % 8) // 2, compared with the threshold:
    dropped iff r < threshold."""
    threshold = dropout_threshold(p)
    stream = (offset + b * heads_q + h) % (1 << 64)
    nblk = (sk + 7) // 8
    col_block = np.arange(nblk, dtype=np.uint64)[None, :]
    row = np.arange(sq, dtype=np.uint64)[:, None]
    words = philox4x32_10(np.broadcast_to(col_block, (sq, nblk)), np.broadcast_to(row, (sq, nblk)),
                          stream & 0xFFFFFFFF, stream >> 32, seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF)
    w = np.stack(words, axis=-1)  # [sq, nblk, 4]
    halves = np.stack([w & np.uint64(0xFFFF), (w >> np.uint64(16)) & np.uint64(0xFFFF)], axis=-1)
    r = halves.reshape(sq, nblk * 8)[:, :sk]  # column j: half j % 2 of word (j % 8) // 2 of block j // 8
    return r >= np.uint64(threshold)


# ------------------------------------------------------------------ attention in NumPy


class Case:
    def __init__(self, name, dtype, batch, sq, sk, hq, hkv, d, causal=False, window=None, scale=None,
                 dropout=None, block=None, varlen=None, backward=True, tool_window=None, softcap=None,
                 alibi=None):
        self.name, self.dtype = name, dtype
        self.batch, self.sq, self.sk, self.hq, self.hkv, self.d = batch, sq, sk, hq, hkv, d
        self.causal, self.window, self.scale = causal, window, scale
        self.dropout = dropout  # (p, seed, offset)
        self.block = block  # (bitmap [rows, cols] or [heads_q, rows, cols], block_q, block_k)
        self.varlen = varlen  # (cu_seqlens_q, cu_seqlens_k) as lists; batch/sq/sk then unused
        self.backward = backward
        self.softcap = softcap  # c of S' = c tanh(S / c), or None
        self.alibi = alibi  # float32 slopes [hq] or [batch, hq], or None
        # the --window the tool gets when it differs from the reference's: a bound of 2^63 - 1 on
        # the command line must mean what -1 (unbounded) means to the reference, whose own index
        # arithmetic would overflow with it
        self.tool_window = tool_window

    def slopes(self, b):
        """The ALiBi slopes of sequence b, [hq] float32, or None."""
        if self.alibi is None:
            return None
        return self.alibi if self.alibi.ndim == 1 else self.alibi[b]

    def scale32(self):
        s = self.scale if self.scale is not None else 1.0 / math.sqrt(self.d)
        return float(np.float32(s))  # the API carries softmax_scale as a float

    def sequences(self):
        """(b, q rows, k rows) for each sequence, as slices into the packed/flattened row axis."""
        if self.varlen:
            cq, ck = self.varlen
            return [(b, slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])) for b in range(len(cq) - 1)]
        return [(b, slice(b * self.sq, (b + 1) * self.sq), slice(b * self.sk, (b + 1) * self.sk))
                for b in range(self.batch)]


def visible(case, h, sq, sk):
    """Boolean [sq, sk]: query i sees key j (bottom-right aligned window/causal, block mask); the
    Python package's test oracle (python/tests/reference.py) builds it."""
    block = None
    if case.block is not None:
        bits, bq, bk = case.block
        block = (bits[h] if bits.ndim == 3 else bits, bq, bk)
    return reference.visible(sq, sk, case.causal, case.window if case.window else (-1, -1), block)[0]


def attention_sequence(case, b, q, k, v, do, exact):
    """One sequence. q [sq, hq, d], k/v [sk, hkv, d], do like q or None. exact: float64 throughout
    (the reference); otherwise the naive float32 implementation with dtype roundings. Returns
    o [sq, hq, d], lse [hq, sq], and dq, dk, dv (or None)."""
    ft = np.float64 if exact else np.float32
    if exact:
        def rnd(x):
            return x
    else:
        def rnd(x):
            return round_to(case.dtype, x)
    q, k, v = q.astype(ft), k.astype(ft), v.astype(ft)
    sq, hq, d = q.shape
    sk, hkv, _ = k.shape
    group = hq // hkv
    scale = ft(case.scale32())
    o = np.zeros((sq, hq, d), ft)
    lse = np.full((hq, sq), -np.inf, ft)
    if do is not None:
        do = do.astype(ft)
        dq = np.zeros((sq, hq, d), ft)
        dk = np.zeros((sk, hkv, d), ft)
        dv = np.zeros((sk, hkv, d), ft)
    for h in range(hq):
        g = h // group
        vis = visible(case, h, sq, sk)
        s = (scale * (q[:, h] @ k[:, g].T)).astype(ft)
        # the score modifiers, before the mask: softcap c tanh(S / c), then ALiBi -slope |i + sk - sq - j|
        softcap_grad = None
        if case.softcap is not None:
            c = ft(np.float32(case.softcap))
            t = np.tanh(s / c)
            s = (c * t).astype(ft)
            softcap_grad = (1 - t * t).astype(ft)
        slopes = case.slopes(b)
        if slopes is not None:
            dist = np.abs(np.arange(sq)[:, None] + sk - sq - np.arange(sk)[None, :])
            s = (s - ft(slopes[h]) * dist.astype(ft)).astype(ft)
        s = np.where(vis, s, -np.inf).astype(ft)
        m = np.max(s, axis=1, initial=-np.inf)
        live = np.isfinite(m)  # rows with at least one visible key
        e = np.where(vis, np.exp(s - np.where(live, m, 0)[:, None]), 0).astype(ft)
        l_sum = e.sum(axis=1, dtype=ft)
        p = (e / np.where(live, l_sum, 1)[:, None]).astype(ft)
        lse[h] = np.where(live, m + np.log(np.where(live, l_sum, 1)), -np.inf)
        if case.dropout:
            prob, seed, offset = case.dropout
            keep = dropout_keep(seed, offset, b, hq, h, sq, sk, prob)
            p32 = float(np.float32(prob))
            mult = keep.astype(ft) * ft(1.0 / (1.0 - p32))
        else:
            mult = np.ones((sq, sk), ft)
        z = rnd(p * mult)  # P after dropout, the matrix multiplied with V
        o[:, h] = rnd(z @ v[:, g])
        if do is None:
            continue
        dz = do[:, h] @ v[:, g].T
        dp = rnd(dz * mult)
        if exact:
            delta = (p * dp).sum(axis=1)  # = rowsum(dO * O) with the exact O
        else:
            delta = (do[:, h] * o[:, h]).sum(axis=1, dtype=ft)  # what a plain implementation does
        ds = p * (dp - delta[:, None])
        if softcap_grad is not None:
            ds = ds * softcap_grad
        ds = rnd(ds)
        dq[:, h] = rnd(scale * (ds @ k[:, g]))
        dk[:, g] += scale * (ds.T @ q[:, h])
        dv[:, g] += z.T @ do[:, h]
    if do is None:
        return o, lse, None, None, None
    return o, lse, dq, rnd(dk), rnd(dv)


def attention_all(case, q, k, v, do, exact):
    """All sequences, in the tool's layouts. Inputs are float arrays in the tool's layout."""
    hq, hkv, d = case.hq, case.hkv, case.d
    qf = q.reshape(-1, hq, d)
    kf, vf = k.reshape(-1, hkv, d), v.reshape(-1, hkv, d)
    dof = do.reshape(-1, hq, d) if do is not None else None
    o = np.zeros(qf.shape, np.float64)
    lse = np.full((hq, qf.shape[0]), -np.inf)
    dq = np.zeros(qf.shape, np.float64)
    dk = np.zeros(kf.shape, np.float64)
    dv = np.zeros(vf.shape, np.float64)
    for b, qs, ks in case.sequences():
        ob, lb, dqb, dkb, dvb = attention_sequence(case, b, qf[qs], kf[ks], vf[ks],
                                                   dof[qs] if dof is not None else None, exact)
        o[qs], lse[:, qs] = ob, lb
        if do is not None:
            dq[qs], dk[ks], dv[ks] = dqb, dkb, dvb
    if not case.varlen:  # back to [b, s, h, d] and LSE [b, hq, sq]
        o = o.reshape(q.shape)
        lse = lse.reshape(hq, case.batch, case.sq).transpose(1, 0, 2)
        dq, dk, dv = dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)
    return o, lse, dq, dk, dv


# ------------------------------------------------------------------ comparisons


def max_abs_err(a, b):
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b)))  # NaN propagates and fails every comparison


def bound_check(label, tool, naive, ref, factor):
    err = max_abs_err(tool, ref)
    naive_err = max_abs_err(naive, ref)
    floor = 1e-5 * max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    bound = factor * naive_err + floor
    ok = err <= bound
    return ok, "%s %.2e%s%.2e (naive %.2e)" % (label, err, " <= " if ok else " > ", bound, naive_err)


def lse_check(dtype, tool, ref):
    tol = 1e-5 if dtype == "fp32" else 1e-3
    ref_inf = np.isneginf(ref)
    if tool.shape != ref.shape:
        return False, "LSE shape %s != %s" % (tool.shape, ref.shape)
    if not np.array_equal(ref_inf, np.isneginf(tool)):
        return False, "LSE -inf at %d places, reference at %d" % (int(np.isneginf(tool).sum()), int(ref_inf.sum()))
    err = max_abs_err(tool[~ref_inf], ref[~ref_inf])
    ok = err <= tol
    return ok, "LSE %.2e%s%.0e (%d rows -inf)" % (err, " <= " if ok else " > ", tol, int(ref_inf.sum()))


SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error:")


def run_tool(exe, args, timeout=300):
    return subprocess.run([exe] + [str(a) for a in args], capture_output=True, text=True, encoding="utf-8",
                          errors="replace", timeout=timeout)


def sanitizer_report(proc):
    return any(mark in proc.stderr for mark in SANITIZER_MARKS)


def unsupported(proc):
    return proc.returncode == 3 and "FA_ERR_UNSUPPORTED" in proc.stderr


def first_lines(text, n=6):
    lines = text.strip().splitlines()
    return " | ".join(lines[:n])


# ------------------------------------------------------------------ one numerical case


def check_case(exe, case, tmp, extra):
    """Runs fwd (and bwd) for one case; returns a list of (status, line)."""
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    hq, hkv, d = case.hq, case.hkv, case.d
    if case.varlen:
        total_q, total_k = case.varlen[0][-1], case.varlen[1][-1]
        qshape, kshape = (total_q, hq, d), (total_k, hkv, d)
    else:
        qshape, kshape = (case.batch, case.sq, hq, d), (case.batch, case.sk, hkv, d)

    def sample(shape):
        return round_to(case.dtype, rng.standard_normal(shape).astype(np.float32))

    q, k, v, do = sample(qshape), sample(kshape), sample(kshape), sample(qshape)
    path = {n: os.path.join(tmp, "%s.npy" % n) for n in ("q", "k", "v", "o", "lse", "do", "dq", "dk", "dv",
                                                      "cuq", "cuk", "mask", "slopes")}
    for name, arr in (("q", q), ("k", k), ("v", v), ("do", do)):
        np.save(path[name], encode(case.dtype, arr))
    opts = []
    if case.causal:
        opts.append("--causal")
    window = case.tool_window or case.window
    if window:
        opts += ["--window", window[0], window[1]]
    if case.scale is not None:
        opts += ["--scale", repr(case.scale)]
    if case.dropout:
        opts += ["--dropout", repr(case.dropout[0]), "--seed", case.dropout[1], "--offset", case.dropout[2]]
    if case.block is not None:
        np.save(path["mask"], case.block[0])
        opts += ["--block-mask", path["mask"], "--block-size", case.block[1], case.block[2]]
    if case.varlen:
        np.save(path["cuq"], np.array(case.varlen[0], dtype=np.int32))
        np.save(path["cuk"], np.array(case.varlen[1], dtype=np.int32))
        opts += ["--cu-seqlens-q", path["cuq"], "--cu-seqlens-k", path["cuk"]]
    if case.softcap is not None:
        opts += ["--softcap", repr(case.softcap)]
    if case.alibi is not None:
        np.save(path["slopes"], case.alibi)
        opts += ["--alibi-slopes", path["slopes"]]
    if case.dtype == "bf16":
        opts.append("--bf16")
    opts += extra

    results = []
    ref = attention_all(case, q, k, v, do if case.backward else None, exact=True)
    naive = attention_all(case, q, k, v, do if case.backward else None, exact=False)

    proc = run_tool(exe, ["fwd", "--q", path["q"], "--k", path["k"], "--v", path["v"], "--out", path["o"],
                          "--lse", path["lse"]] + opts)
    label = "fwd %s" % case.name
    if unsupported(proc):
        return [("SKIP", "%s: %s" % (label, first_lines(proc.stderr, 2)))]
    if proc.returncode != 0 or sanitizer_report(proc):
        return [("FAIL", "%s: exit %d: %s" % (label, proc.returncode, first_lines(proc.stderr)))]
    try:
        o_tool = decode(case.dtype, np.load(path["o"]))
        lse_tool = np.load(path["lse"])
        if lse_tool.dtype != np.float32:
            raise ValueError("LSE dtype %s, expected float32" % lse_tool.dtype)
        if o_tool.shape != q.shape:
            raise ValueError("O shape %s, expected %s" % (o_tool.shape, q.shape))
    except (ValueError, OSError) as exc:
        return [("FAIL", "%s: reading the outputs: %s" % (label, exc))]
    ok_o, text_o = bound_check("O", o_tool, naive[0], ref[0], 2.0)
    ok_l, text_l = lse_check(case.dtype, lse_tool.astype(np.float64), ref[1])
    results.append(("PASS" if ok_o and ok_l else "FAIL", "%s: %s; %s" % (label, text_o, text_l)))
    if not case.backward:
        return results

    proc = run_tool(exe, ["bwd", "--q", path["q"], "--k", path["k"], "--v", path["v"], "--o", path["o"],
                          "--lse", path["lse"], "--do", path["do"], "--dq", path["dq"], "--dk", path["dk"],
                          "--dv", path["dv"]] + opts)
    label = "bwd %s" % case.name
    if unsupported(proc):
        return results + [("SKIP", "%s: %s" % (label, first_lines(proc.stderr, 2)))]
    if proc.returncode != 0 or sanitizer_report(proc):
        return results + [("FAIL", "%s: exit %d: %s" % (label, proc.returncode, first_lines(proc.stderr)))]
    try:
        grads = [decode(case.dtype, np.load(path[n])) for n in ("dq", "dk", "dv")]
        for g, want in zip(grads, (q.shape, k.shape, v.shape)):
            if g.shape != want:
                raise ValueError("gradient shape %s, expected %s" % (g.shape, want))
    except (ValueError, OSError) as exc:
        return results + [("FAIL", "%s: reading the outputs: %s" % (label, exc))]
    oks, texts = [], []
    for name, g, nv, rf in zip(("dQ", "dK", "dV"), grads, naive[2:], ref[2:]):
        ok, text = bound_check(name, g, nv, rf, 3.0)
        oks.append(ok)
        texts.append(text)
    results.append(("PASS" if all(oks) else "FAIL", "%s: %s" % (label, "; ".join(texts))))
    return results


def numerical_cases():
    rng = np.random.default_rng(20240607)

    def bitmap(shape, density, dtype):
        bits = rng.random(shape) < density
        return bits.astype(dtype)

    shared = bitmap((4, 3), 0.6, np.uint8)  # 128 rows / 32, 192 cols / 64
    shared[1, :] = 0  # query rows 32..63: fully masked
    shared[0, 0] = 1
    per_head = bitmap((3, 7, 4), 0.5, np.bool_)  # 100 rows / 16, 100 cols / 32
    per_head[2, 3, :] = False
    varlen_bits = bitmap((2, 5, 4), 0.7, np.uint8)  # max_seqlen_q 120 / 32, max_seqlen_k 110 / 32
    cu_a = ([0, 50, 50, 170, 201], [0, 80, 120, 120, 190])  # a zero-length q and a zero-length k sequence
    cu_b = ([0, 37, 157], [0, 110, 150])
    return [
        Case("fp32-dense", "fp32", 2, 128, 128, 4, 4, 64),
        Case("fp16-dense", "fp16", 2, 77, 93, 2, 2, 64),
        Case("bf16-dense", "bf16", 2, 64, 130, 2, 2, 64),
        Case("fp16-causal-sq<sk", "fp16", 2, 100, 160, 4, 4, 64, causal=True),
        Case("bf16-causal-sq>sk", "bf16", 2, 160, 100, 4, 4, 64, causal=True),
        Case("fp32-causal-sq>sk", "fp32", 1, 130, 70, 2, 2, 32, causal=True),
        Case("fp16-window", "fp16", 2, 200, 200, 2, 2, 64, window=(32, 8)),
        Case("fp32-window+causal-sq>sk", "fp32", 2, 150, 90, 2, 2, 32, causal=True, window=(20, 5)),
        Case("bf16-window-left-only", "bf16", 1, 96, 130, 2, 2, 48, window=(16, -1)),
        Case("fp16-window-right-only-sq<sk", "fp16", 1, 60, 140, 2, 2, 64, window=(-1, 3)),
        Case("fp16-gqa", "fp16", 2, 128, 96, 8, 2, 64),
        Case("bf16-mqa-causal", "bf16", 2, 64, 64, 4, 1, 64, causal=True),
        Case("fp32-dropout", "fp32", 2, 96, 112, 4, 2, 64, dropout=(0.17, 12345, 7)),
        Case("fp16-dropout-causal-bigseed", "fp16", 2, 128, 128, 4, 4, 64, causal=True,
             dropout=(0.17, (1 << 40) + 3, (1 << 33) + 5)),
        Case("bf16-dropout-gqa-window", "bf16", 2, 90, 120, 4, 2, 32, window=(24, 24), dropout=(0.17, 99, 0)),
        Case("fp16-blockmask-shared", "fp16", 2, 128, 192, 4, 4, 64, block=(shared, 32, 64)),
        Case("fp32-blockmask-perhead-causal", "fp32", 1, 100, 100, 3, 3, 32, causal=True,
             block=(per_head, 16, 32)),
        Case("fp16-varlen-causal", "fp16", 0, 0, 0, 4, 2, 64, causal=True, varlen=cu_a),
        Case("bf16-varlen-dropout-window", "bf16", 0, 0, 0, 2, 2, 64, window=(30, 10),
             dropout=(0.17, 7, 1 << 32), varlen=cu_a),
        Case("fp32-varlen-blockmask-gqa", "fp32", 0, 0, 0, 2, 1, 32, block=(varlen_bits, 32, 32), varlen=cu_b),
        Case("fp32-scale", "fp32", 2, 64, 80, 2, 2, 64, scale=0.3),
        Case("fp16-scale-causal", "fp16", 2, 72, 72, 2, 2, 64, causal=True, scale=0.05),
        Case("fp16-d128-causal", "fp16", 1, 128, 128, 2, 2, 128, causal=True),
        Case("bf16-d128-dropout", "bf16", 1, 64, 100, 2, 1, 128, dropout=(0.17, 5, 11)),
        Case("fp32-d40-odd", "fp32", 1, 33, 47, 2, 1, 40),
    ] + window_bound_cases(cu_a) + score_modifier_cases(rng, cu_a)


def alibi_standard(heads):
    """Press et al.'s slopes for a power-of-two number of heads: 2^(-8 h / H), h = 1..H."""
    return np.array([2.0 ** (-8.0 * h / heads) for h in range(1, heads + 1)], np.float32)


def score_modifier_cases(rng, cu):
    """--softcap and --alibi-slopes, alone and together, with the other options."""
    def slopes(shape):
        return rng.uniform(0.01, 0.6, shape).astype(np.float32)

    return [
        Case("fp32-softcap", "fp32", 2, 64, 80, 2, 2, 32, softcap=2.0, scale=1.0),
        Case("fp16-softcap-causal-gqa", "fp16", 2, 70, 96, 4, 2, 64, causal=True, softcap=5.0),
        Case("bf16-alibi-heads", "bf16", 2, 64, 100, 4, 4, 32, alibi=alibi_standard(4)),
        Case("fp32-alibi-batch-heads-sq>sk", "fp32", 2, 90, 60, 2, 1, 32, alibi=slopes((2, 2))),
        Case("fp16-softcap-alibi-window-dropout", "fp16", 2, 80, 80, 2, 2, 64, window=(20, 4), softcap=3.0,
             alibi=slopes(2), dropout=(0.17, 11, 3)),
        Case("fp32-varlen-softcap-alibi-batch-heads", "fp32", 0, 0, 0, 2, 2, 16, causal=True, softcap=1.5,
             alibi=slopes((4, 2)), varlen=cu),
    ]


INT64_MAX = (1 << 63) - 1


def window_bound_cases(cu):
    """Window bounds at 2^63 - 1 (core/mask.h once overflowed there and masked every key, giving
    O = 0 and LSE = -inf): the tool gets the huge bound, the reference the unbounded side (-1)."""
    return [
        Case("fp32-window-0-int64max", "fp32", 1, 40, 40, 2, 2, 16, window=(0, -1), tool_window=(0, INT64_MAX)),
        Case("fp32-window-0-int64max-sq>sk", "fp32", 1, 70, 30, 2, 2, 16, window=(0, -1),
             tool_window=(0, INT64_MAX)),
        Case("fp16-window-int64max-0-sq<sk", "fp16", 2, 30, 70, 2, 1, 32, window=(-1, 0),
             tool_window=(INT64_MAX, 0)),
        Case("fp32-window-int64max-both", "fp32", 1, 50, 60, 2, 2, 16, window=(-1, -1),
             tool_window=(INT64_MAX, INT64_MAX)),
        Case("bf16-window-int64max-both-causal", "bf16", 1, 64, 48, 2, 2, 32, causal=True, window=(-1, -1),
             tool_window=(INT64_MAX, INT64_MAX)),
        Case("fp32-varlen-window-int64max-3", "fp32", 0, 0, 0, 2, 2, 16, window=(-1, 3), varlen=cu,
             tool_window=(INT64_MAX, 3)),
    ]


# ------------------------------------------------------------------ the other commands


def smoke_checks(exe, extra, tmp):
    """--help, info, and a tiny `run --check` (the tool's own float64 comparison), also with the score
    modifiers."""
    results = []
    slopes = os.path.join(tmp, "run_slopes.npy")
    np.save(slopes, np.array([[0.3, 0.1, 0.05], [0.2, 0.7, 0.01]], np.float32))
    for args in (["--help"], ["info", "--help"], ["run", "--help"], ["fwd", "--help"], ["bwd", "--help"],
                 ["iomodel", "--help"],
                 ["info"] + extra,
                 ["run", "--batch", "1", "--seqlen-q", "48", "--seqlen-k", "80", "--heads", "2", "--dim", "32",
                  "--dtype", "fp16", "--causal", "--dropout", "0.1", "--seed", "3", "--repeat", "1", "--backward",
                  "--check"] + extra,
                 ["run", "--batch", "1", "--seqlen-q", "64", "--heads", "2", "--heads-kv", "1", "--dim", "16",
                  "--dtype", "bf16", "--block-sparse", "local", "--block-size", "16", "16", "--density", "0.5",
                  "--repeat", "1", "--check"] + extra,
                 ["run", "--batch", "1", "--seqlen-q", "40", "--seqlen-k", "56", "--heads", "4", "--dim", "32",
                  "--dtype", "fp32", "--causal", "--softcap", "4", "--scale", "1", "--alibi", "--repeat", "1",
                  "--backward", "--check"] + extra,
                 ["run", "--batch", "2", "--seqlen-q", "48", "--heads", "3", "--dim", "16", "--dtype", "fp16",
                  "--alibi-slopes", slopes, "--window", "8", "8", "--repeat", "1", "--backward", "--check"] + extra):
        label = "flashattn %s" % " ".join(args[:2])
        proc = run_tool(exe, args, timeout=120)
        # the [batch, heads] slopes reach fa_options with batch stride = heads
        want = "batch stride 3)" if slopes in args else ""
        if unsupported(proc):
            results.append(("SKIP", "%s: %s" % (label, first_lines(proc.stderr, 2))))
        elif proc.returncode != 0 or not proc.stdout.strip() or sanitizer_report(proc) or want not in proc.stdout:
            results.append(("FAIL", "%s: exit %d: %s %s" % (label, proc.returncode, first_lines(proc.stdout, 3),
                                                            first_lines(proc.stderr))))
        else:
            results.append(("PASS", "%s: exit 0" % label))
    return results


def alibi_standard_slope_checks(exe, extra):
    """`run --alibi` prints the first and last standard slope: 2^(-8 h / H) for a power of two H, and
    for H = 6 the 4 slopes of 4 heads (2^-2 .. 2^-8) then every other one of 8 heads (2^-1, 2^-3)."""
    results = []
    for heads, first, last in ((8, 0.5, 2.0 ** -8), (6, 0.25, 0.125), (1, 2.0 ** -8, 2.0 ** -8)):
        proc = run_tool(exe, ["run", "--batch", "1", "--seqlen-q", "8", "--heads", str(heads), "--dim", "8",
                              "--repeat", "1", "--alibi"] + extra, timeout=60)
        want = "ALiBi (standard slopes %g .. %g)" % (first, last)
        label = "flashattn run --alibi --heads %d" % heads
        if unsupported(proc):
            results.append(("SKIP", "%s: %s" % (label, first_lines(proc.stderr, 2))))
        elif proc.returncode != 0 or want not in proc.stdout:
            results.append(("FAIL", "%s: exit %d, want %r in: %s" % (label, proc.returncode, want,
                                                                      first_lines(proc.stdout, 2))))
        else:
            results.append(("PASS", "%s: %s" % (label, want)))
    return results


def iomodel_checks(exe):
    """`flashattn iomodel`: the --sweep CSV against the paper's algorithms walked block by block in
    Python (an independent count of the tiles each loop moves), batch x heads scaling, the text
    report, and bad input (exit 2, nothing on stdout)."""
    def walk(nq, nk, d, e, b):
        blocks = lambda n: [min(b, n - i) for i in range(0, n, b)]
        std = (nq * d + nk * d) * e + 4 * nq * nk * e + nk * d * e + nq * d * e
        alg1 = nq * d * e + 2 * nq * 4
        for kr in blocks(nk):
            alg1 += 2 * kr * d * e
            for qr in blocks(nq):
                alg1 += 3 * qr * d * e + 4 * qr * 4
        qout = 0
        for qr in blocks(nq):
            qout += qr * d * e + sum(2 * kr * d * e for kr in blocks(nk)) + qr * d * e + qr * 4
        return std, alg1, qout

    results = []
    for nq, nk, d, dtype, bh, sweep in ((100, 100, 16, "fp16", (1, 1), [64]),
                                        (300, 77, 64, "bf16", (2, 3), [1, 16, 64, 128, 512]),
                                        (1024, 1024, 128, "fp32", (1, 16), [32, 64, 128])):
        e = 4 if dtype == "fp32" else 2
        args = ["iomodel", "--seqlen-q", str(nq), "--seqlen-k", str(nk), "--dim", str(d), "--dtype", dtype,
                "--batch", str(bh[0]), "--heads", str(bh[1]), "--sweep", ",".join(map(str, sweep))]
        proc = run_tool(exe, args, timeout=60)
        label = "flashattn iomodel %dx%d d %d %s" % (nq, nk, d, dtype)
        lines = proc.stdout.strip().splitlines()
        want = ["block,standard_bytes,flash_alg1_bytes,flash_qouter_bytes"]
        for b in sweep:
            counts = [c * bh[0] * bh[1] for c in walk(nq, nk, d, e, b)]
            want.append("%d,%d,%d,%d" % (b, counts[0], counts[1], counts[2]))
        if proc.returncode != 0 or lines != want:
            results.append(("FAIL", "%s: exit %d, got %s, want %s" % (label, proc.returncode, lines, want)))
        else:
            results.append(("PASS", "%s: %d blocks match the walked algorithms" % (label, len(sweep))))
    proc = run_tool(exe, ["iomodel", "--seqlen-q", "300", "--seqlen-k", "77", "--dim", "64", "--block-q", "64",
                          "--block-k", "64", "--heads", "3", "--csv"], timeout=60)
    want = ["block_q,block_k,standard_bytes,flash_alg1_bytes,flash_qouter_bytes",
            "64,64,%d,%d,%d" % tuple(3 * c for c in walk(300, 77, 64, 2, 64))]
    ok = proc.returncode == 0 and proc.stdout.strip().splitlines() == want
    results.append(("PASS" if ok else "FAIL", "flashattn iomodel --csv matches the walked algorithms%s" % (
        "" if ok else ": exit %d: %s" % (proc.returncode, first_lines(proc.stdout + proc.stderr)))))
    proc = run_tool(exe, ["iomodel", "--seqlen-q", "4096", "--dim", "64", "--onchip", "196608"], timeout=60)
    text = proc.stdout
    ok = (proc.returncode == 0 and "B_r = 64, B_c = 192" in text and "standard" in text and
          "Algorithm 1" in text and "query blocks outside" in text)
    results.append(("PASS" if ok else "FAIL", "flashattn iomodel report with the paper's blocks (M = 192 KiB, d 64)%s"
                    % ("" if ok else ": exit %d: %s" % (proc.returncode, first_lines(text + proc.stderr)))))
    for args in (["--sweep", "3,x"], ["--sweep", "0"], ["--sweep", "4,"], ["--dim", "0"], ["--dtype", "fp8"],
                 ["--onchip", "-1"], ["--bogus"]):
        proc = run_tool(exe, ["iomodel"] + args, timeout=60)
        ok = proc.returncode == 2 and not proc.stdout and proc.stderr.strip()
        results.append(("PASS" if ok else "FAIL", "flashattn iomodel %s: exit %d%s" % (
            " ".join(args), proc.returncode, "" if ok else ", stdout %r" % proc.stdout[:80])))
    proc = run_tool(exe, ["iomodel", "--seqlen-q", str(1 << 62), "--dim", "4"], timeout=60)
    ok = proc.returncode == 3 and "OVERFLOW" in proc.stderr and not proc.stdout
    results.append(("PASS" if ok else "FAIL", "flashattn iomodel with a count over 64 bits: exit %d" % proc.returncode))
    return results


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 2
    exe = os.path.abspath(argv[1])
    extra, name_filter = [], None
    rest = argv[2:]
    while rest:
        if rest[0] == "--backend" and len(rest) > 1:
            extra += ["--backend", rest[1]]
            rest = rest[2:]
        elif rest[0] == "-k" and len(rest) > 1:
            name_filter = rest[1]
            rest = rest[2:]
        else:
            print("check_cli.py: unknown argument %r" % rest[0], file=sys.stderr)
            return 2
    if not os.access(exe, os.X_OK):
        print("check_cli.py: %s is not an executable" % exe, file=sys.stderr)
        return 2

    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}

    def report(status, line):
        counts[status] += 1
        print("%s %s" % (status, line), flush=True)

    kat = philox_kat()
    report("FAIL" if kat else "PASS", "philox4x32_10 Random123 known answers%s" % (": " + "; ".join(kat) if kat else ""))
    with np.errstate(all="ignore"), tempfile.TemporaryDirectory(prefix="flashattn-cli-") as tmp:
        for case in numerical_cases():
            if name_filter and name_filter not in case.name:
                continue
            case_dir = os.path.join(tmp, case.name.replace("<", "lt").replace(">", "gt").replace("+", "_"))
            os.mkdir(case_dir)
            try:
                for status, line in check_case(exe, case, case_dir, extra):
                    report(status, line)
            except subprocess.TimeoutExpired as exc:
                report("FAIL", "%s: timed out: %s" % (case.name, exc))
        if not name_filter or "smoke" in name_filter:
            for status, line in smoke_checks(exe, extra, tmp):
                report(status, line)
            for status, line in alibi_standard_slope_checks(exe, extra):
                report(status, line)
        if not name_filter or "iomodel" in name_filter:
            for status, line in iomodel_checks(exe):
                report(status, line)
    print("cli: %d passed, %d failed, %d skipped" % (counts["PASS"], counts["FAIL"], counts["SKIP"]))
    return 1 if counts["FAIL"] or not counts["PASS"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
