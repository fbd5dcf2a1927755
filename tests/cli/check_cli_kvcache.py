#!/usr/bin/env python3
"""check_cli_kvcache.py: `flashattn fwd --k-cache ...` (attention over a KV cache) on .npy files
against a NumPy float64 reference written here: a paged cache in shuffled pages with appended
keys and rotary (halves), causal, GQA; a contiguous cache with a batch index and no appended keys,
and with --cache-leftpad (1e38 before each pad: never read, so neither refused nor attended to).
fp32 inputs: O within 1e-4 of float64 (fp32 arithmetic over at most a few hundred keys), LSE
within 1e-4, the cache outputs equal the inputs with the new rows appended (rotated keys within
2e-6), the input files unchanged. Bad input: exit status 2, a message, no output written and an
existing output file left as it was.
usage: check_cli_kvcache.py path/to/flashattn"""
import os
import subprocess
import sys
import tempfile

import numpy as np


def rotate(x, cos, sin, pos):
    x = x.copy()
    h = cos.shape[1]
    a, b = x[..., :h].copy(), x[..., h:2 * h].copy()
    c, s = cos[pos], sin[pos]
    x[..., :h], x[..., h:2 * h] = a * c - b * s, a * s + b * c
    return x


def reference(q, keys, values, lens, causal):
    b, sn, hq, d = q.shape
    out, lse = np.zeros(q.shape), np.full((b, hq, sn), -np.inf)
    for i in range(b):
        k, v, sk = keys[i], values[i], lens[i]
        g = hq // k.shape[1]
        for h in range(hq):
            s = q[i, :, h] @ k[:sk, h // g].T / np.sqrt(d)
            if causal:
                s = np.where(np.arange(sk)[None] <= np.arange(sn)[:, None] + sk - sn, s, -np.inf)
            m = s.max(1, keepdims=True)
            p = np.exp(s - m)
            out[i, :, h] = p @ v[:sk, h // g] / p.sum(1, keepdims=True)
            lse[i, h] = (m + np.log(p.sum(1, keepdims=True)))[:, 0]
    return out, lse


def run(exe, args):
    return subprocess.run([exe, "fwd"] + [str(a) for a in args], capture_output=True, text=True, timeout=120)


def main():
    exe = sys.argv[1]
    rng = np.random.default_rng(5)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        p = lambda name: os.path.join(tmp, name)  # noqa: E731
        # paged, appended, rotary, causal
        b, sn, hq, hk, d, page, per, knew = 2, 3, 4, 2, 32, 16, 4, 3
        lens = np.array([5, 40], dtype=np.int32)
        q = rng.standard_normal((b, sn, hq, d)).astype(np.float32)
        kc = rng.standard_normal((b * per + 1, page, hk, d)).astype(np.float32)
        vc = rng.standard_normal(kc.shape).astype(np.float32)
        kn = rng.standard_normal((b, knew, hk, d)).astype(np.float32)
        vn = rng.standard_normal((b, knew, hk, d)).astype(np.float32)
        table = rng.permutation(b * per + 1)[: b * per].reshape(b, per).astype(np.int32)
        th = np.arange(80)[:, None] * 10000.0 ** (-2.0 * np.arange(8)[None] / 16)
        cos, sin = np.cos(th).astype(np.float32), np.sin(th).astype(np.float32)
        for name, arr in dict(q=q, kc=kc, vc=vc, kn=kn, vn=vn, bt=table, cs=lens, cos=cos, sin=sin).items():
            np.save(p(name + ".npy"), arr)
        r = run(exe, ["--q", p("q.npy"), "--k-cache", p("kc.npy"), "--v-cache", p("vc.npy"), "--block-table",
                      p("bt.npy"), "--cache-seqlens", p("cs.npy"), "--k-new", p("kn.npy"), "--v-new", p("vn.npy"),
                      "--rotary-cos", p("cos.npy"), "--rotary-sin", p("sin.npy"), "--causal", "--out", p("o.npy"),
                      "--lse", p("lse.npy"), "--k-cache-out", p("kc2.npy"), "--v-cache-out", p("vc2.npy"),
                      "--backend", "cpu", "--num-splits", "2"])
        if r.returncode != 0:
            failures.append(f"paged run: exit {r.returncode}: {r.stderr.strip()}")
        else:
            o, lse, kc2, vc2 = (np.load(p(n)) for n in ("o.npy", "lse.npy", "kc2.npy", "vc2.npy"))
            ek, ev = kc.astype(np.float64).copy(), vc.astype(np.float64).copy()
            for i in range(b):
                for j in range(knew):
                    t = lens[i] + j
                    pg, row = table[i, t // page], t % page
                    ek[pg, row] = rotate(kn[i, j].astype(np.float64), cos.astype(np.float64),
                                         sin.astype(np.float64), t)
                    ev[pg, row] = vn[i, j]
            if np.abs(kc2 - ek).max() > 2e-6 or not np.array_equal(vc2, ev.astype(np.float32)):
                failures.append(f"paged: caches differ (k {np.abs(kc2 - ek).max():.2e})")
            if not np.array_equal(np.load(p("kc.npy")), kc):
                failures.append("paged: the input cache file changed")
            keys = [kc2[table[i]].reshape(per * page, hk, d).astype(np.float64) for i in range(b)]
            vals = [vc2[table[i]].reshape(per * page, hk, d).astype(np.float64) for i in range(b)]
            qpos = lens[:, None] + np.arange(sn)[None]
            qr = rotate(q.astype(np.float64), cos.astype(np.float64), sin.astype(np.float64), qpos[:, :, None])
            ref_o, ref_l = reference(qr.astype(np.float32).astype(np.float64), keys, vals, lens + knew, True)
            if np.abs(o - ref_o).max() > 1e-4 or np.abs(lse - ref_l).max() > 1e-4:
                failures.append(f"paged: O error {np.abs(o - ref_o).max():.2e}, LSE {np.abs(lse - ref_l).max():.2e}")
        # contiguous, batch index, no append
        cc = rng.standard_normal((3, 50, hk, d)).astype(np.float32)
        cv = rng.standard_normal(cc.shape).astype(np.float32)
        idx, clens = np.array([2, 0], dtype=np.int32), np.array([50, 17], dtype=np.int32)
        for name, arr in dict(cc=cc, cv=cv, idx=idx, cl=clens).items():
            np.save(p(name + ".npy"), arr)
        r = run(exe, ["--q", p("q.npy"), "--k-cache", p("cc.npy"), "--v-cache", p("cv.npy"), "--cache-batch-idx",
                      p("idx.npy"), "--cache-seqlens", p("cl.npy"), "--out", p("o2.npy"), "--backend", "cpu"])
        if r.returncode != 0:
            failures.append(f"contiguous run: exit {r.returncode}: {r.stderr.strip()}")
        else:
            ref_o, _ = reference(q.astype(np.float64), [cc[i].astype(np.float64) for i in idx],
                                 [cv[i].astype(np.float64) for i in idx], clens, False)
            if np.abs(np.load(p("o2.npy")) - ref_o).max() > 1e-4:
                failures.append("contiguous: O differs")
        # the same with a left pad: keys from pads[i] on
        pads, cp = np.array([10, 4], dtype=np.int32), cc.copy()
        for i, r0 in enumerate(idx):
            cp[r0, : pads[i]] = 1e38
        np.save(p("lp.npy"), pads)
        np.save(p("cp.npy"), cp)
        r = run(exe, ["--q", p("q.npy"), "--k-cache", p("cp.npy"), "--v-cache", p("cv.npy"), "--cache-batch-idx",
                      p("idx.npy"), "--cache-seqlens", p("cl.npy"), "--cache-leftpad", p("lp.npy"), "--out",
                      p("o4.npy"), "--backend", "cpu"])
        if r.returncode != 0:
            failures.append(f"contiguous left-padded run: exit {r.returncode}: {r.stderr.strip()}")
        else:
            keys = [cc[r0, pads[i]:].astype(np.float64) for i, r0 in enumerate(idx)]
            vals = [cv[r0, pads[i]:].astype(np.float64) for i, r0 in enumerate(idx)]
            ref_o, _ = reference(q.astype(np.float64), keys, vals, clens - pads, False)
            if np.abs(np.load(p("o4.npy")) - ref_o).max() > 1e-4:
                failures.append("contiguous left-padded: O differs")
        # bad input: a full sequence with a key appended; an existing --out stays
        np.save(p("full.npy"), np.array([5, per * page], dtype=np.int32))
        np.save(p("keep.npy"), np.zeros(3, dtype=np.float32))
        before = open(p("keep.npy"), "rb").read()
        bad = [
            (["--q", p("q.npy"), "--k-cache", p("kc.npy"), "--v-cache", p("vc.npy"), "--block-table", p("bt.npy"),
              "--cache-seqlens", p("full.npy"), "--k-new", p("kn.npy"), "--v-new", p("vn.npy"), "--out", p("keep.npy"),
              "--k-cache-out", p("kx.npy"), "--v-cache-out", p("vx.npy")], "a full cache"),
            (["--q", p("q.npy"), "--k-cache", p("kc.npy"), "--v-cache", p("vc.npy"), "--block-table", p("bt.npy"),
              "--cache-seqlens", p("cs.npy"), "--k-new", p("kn.npy"), "--v-new", p("vn.npy"), "--out", p("keep.npy")],
             "--k-new without --k-cache-out"),
            (["--q", p("q.npy"), "--k-cache", p("kc.npy"), "--v-cache", p("vc.npy"), "--block-table", p("cos.npy"),
              "--cache-seqlens", p("cs.npy"), "--out", p("keep.npy")], "a float block table"),
            (["--q", p("q.npy"), "--k-cache", p("kc.npy"), "--v-cache", p("vc.npy"), "--cache-seqlens", p("cs.npy"),
              "--block-table", p("bt.npy"), "--out", p("keep.npy"), "--dropout", "0.1"], "dropout"),
        ]
        np.save(p("cos0.npy"), np.zeros((0, 8), dtype=np.float32))
        bad += [
            (["--q", p("q.npy"), "--k-cache", p("kc.npy"), "--v-cache", p("vc.npy"), "--block-table", p("bt.npy"),
              "--cache-seqlens", p("cs.npy"), "--rotary-cos", p("cos0.npy"), "--rotary-sin", p("cos0.npy"),
              "--out", p("keep.npy")], "an empty rotary table"),
            (["--q", p("q.npy"), "--k-cache", p("kc.npy"), "--v-cache", p("vc.npy"), "--block-table", p("bt.npy"),
              "--cache-seqlens", p("cs.npy"), "--scale", "-1", "--out", p("keep.npy")], "a negative scale"),
        ]
        np.save(p("lpbad.npy"), np.array([0, 18], dtype=np.int32))
        bad += [
            (["--q", p("q.npy"), "--k-cache", p("cc.npy"), "--v-cache", p("cv.npy"), "--cache-batch-idx",
              p("idx.npy"), "--cache-seqlens", p("cl.npy"), "--cache-leftpad", p("lpbad.npy"), "--out",
              p("keep.npy")], "a left pad past cache_seqlens"),
        ]
        for args, what in bad:
            r = run(exe, args + ["--backend", "cpu"])
            if r.returncode != 2 or not r.stderr.strip():
                failures.append(f"bad input ({what}): exit {r.returncode}, message {r.stderr.strip()!r}")
            if open(p("keep.npy"), "rb").read() != before or os.path.exists(p("kx.npy")):
                failures.append(f"bad input ({what}): an output was written")
        # the score-range check reads only the cached keys the call attends to: a huge value in a row
        # past cache_seqlens (never read) is no reason to refuse, one inside is
        for row, want in ((lens[0] + 1, 0), (lens[0] - 1, 2)):
            huge = kc.copy()
            huge[table[0, row // page], row % page] = 1e38
            np.save(p("huge.npy"), huge)
            r = run(exe, ["--q", p("q.npy"), "--k-cache", p("huge.npy"), "--v-cache", p("vc.npy"), "--block-table",
                          p("bt.npy"), "--cache-seqlens", p("cs.npy"), "--out", p("o3.npy"), "--backend", "cpu"])
            if r.returncode != want:
                failures.append(f"1e38 in cache row {row} (length {lens[0]}): exit {r.returncode}, expected {want}: "
                                f"{r.stderr.strip()}")
    for f in failures:
        print("FAILED:", f)
    print(f"cli kvcache: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
