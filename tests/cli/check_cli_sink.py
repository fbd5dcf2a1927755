#!/usr/bin/env python3
"""check_cli_sink.py: the flashattn tool's learnable sink and value head dim d_v.

- fwd --sink / bwd --sink --dsink with V's head dim d_v != d (dense GQA, causal with rows that see
  no key; packed varlen), and fwd --k-cache --sink with a value cache of its own head dim: O, LSE,
  dQ, dK, dV and dsink against float64 (python/tests/reference.py, which takes the sink) with the
  conformance pass rule (2x / 3x the error of a plain float32 implementation, plus 1e-5 x
  max(1, |reference|); LSE within 1e-5). A backend that reports FA_ERR_UNSUPPORTED is a skip.
- Bad input, each a usage error (exit 2) with a message naming the option and no output file: a
  sink of the wrong shape or dtype, --dsink without --sink, a V whose leading dims are not K's, a
  dO of Q's shape where O has d_v, a sink of the wrong length with --k-cache.
- run: --sink X|random and --dim-v (exit 0; --json reports them; the FLOP counts are 2 b hq sq sk
  (d + d_v) forward and 2 b hq sq sk (3d + 2d_v) backward); --sink with a value that is not a
  number; --check with --sink and --dim-v passes, with a dsink line, in fp32 and bf16, and fails
  (exit 1) when FA_TEST_RUN_CHECK_PERTURB puts an error into O.

Usage: check_cli_sink.py FLASHATTN_EXECUTABLE [--backend NAME]
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
import reference as ref  # noqa: E402  (float64 attention, its gradients and dsink)

SINK = np.array([-1.0, 0.5, 2.0, 6.0], dtype=np.float32)
EXE, EXTRA = None, []


def tool(args):
    return subprocess.run([EXE] + [str(a) for a in args], capture_output=True, text=True, encoding="utf-8",
                          errors="replace", timeout=300)


def unsupported(proc):
    return proc.returncode == 3 and "FA_ERR_UNSUPPORTED" in proc.stderr


def within(name, got, r, n, factor):
    """(ok, text): max|got - r| within factor x max|n - r| + 1e-5 max(1, |r|)"""
    err, fin = ref.error(got, r)
    bound = ref.bound(factor, ref.error(n, r)[0], r)
    ok = fin and got.shape == r.shape and err <= bound
    return ok, "%s %.2e%s%.2e" % (name, err, " <= " if ok else " > ", bound)


def f64(x):
    return np.asarray(x, dtype=np.float64)


def dense_case(tmp):
    """fwd and bwd, dense GQA, causal with seqlen_q > seqlen_k, d 48, d_v 24"""
    rng = np.random.default_rng(4)
    b, sq, sk, h, hk, d, d_v = 2, 40, 29, 4, 2, 48, 24
    arrays = {"q": (b, sq, h, d), "k": (b, sk, hk, d), "v": (b, sk, hk, d_v), "do": (b, sq, h, d_v)}
    x = {n: rng.standard_normal(s).astype(np.float32) for n, s in arrays.items()}
    p = lambda n: os.path.join(tmp, n + ".npy")
    for n, a in x.items():
        np.save(p(n), a)
    np.save(p("sink"), SINK)
    fwd = tool(["fwd", "--q", p("q"), "--k", p("k"), "--v", p("v"), "--out", p("o"), "--lse", p("lse"), "--causal",
                "--sink", p("sink")] + EXTRA)
    if unsupported(fwd):
        return [("SKIP", "fwd --sink, d_v != d: " + fwd.stderr.strip().splitlines()[0])]
    if fwd.returncode:
        return [("FAIL", "fwd --sink, d_v != d: exit %d: %s" % (fwd.returncode, fwd.stderr.strip()))]
    bwd = tool(["bwd", "--q", p("q"), "--k", p("k"), "--v", p("v"), "--o", p("o"), "--lse", p("lse"), "--do", p("do"),
                "--dq", p("dq"), "--dk", p("dk"), "--dv", p("dv"), "--dsink", p("dsink"), "--causal",
                "--sink", p("sink")] + EXTRA)
    if unsupported(bwd):
        return [("SKIP", "bwd --sink --dsink, d_v != d: " + bwd.stderr.strip().splitlines()[0])]
    if bwd.returncode:
        return [("FAIL", "bwd --sink --dsink: exit %d: %s" % (bwd.returncode, bwd.stderr.strip()))]
    got = {n: np.load(p(n)) for n in ("o", "lse", "dq", "dk", "dv", "dsink")}
    vis = ref.visible(sq, sk, True, (-1, -1))
    texts, oks = [], []
    r_ds, n_ds = 0.0, 0.0
    for bi in range(b):
        a64 = [f64(x[n][bi]) for n in ("q", "k", "v")]
        a32 = [x[n][bi] for n in ("q", "k", "v")]
        ro, rl = ref.attention(*a64, d ** -0.5, vis, sink=SINK)
        no, nl = ref.attention(*a32, d ** -0.5, vis, np.float32, sink=SINK)
        rg = ref.gradients(*a64, f64(x["do"][bi]), d ** -0.5, vis, sink=SINK)
        ng = ref.gradients(*a32, x["do"][bi], d ** -0.5, vis, np.float32, sink=SINK)
        checks = [("O", got["o"][bi], ro, no, 2.0), ("LSE", got["lse"][bi], rl, nl, 2.0)]
        checks += [(nm, got[key][bi], r, n, 3.0) for nm, key, r, n in zip(("dQ", "dK", "dV"), ("dq", "dk", "dv"),
                                                                          rg, ng)]
        for c in checks:
            ok, text = within(*c)
            oks.append(ok)
            if bi == 0 or not ok:
                texts.append(text)
        r_ds, n_ds = r_ds + rg[3], n_ds + ng[3]
    ok, text = within("dsink", got["dsink"], r_ds, n_ds, 3.0)
    oks.append(ok and got["dsink"].dtype == np.float32)
    texts.append(text)
    blind = sq - sk  # rows that see no key: O = 0, LSE = sink
    oks.append(bool(np.all(got["o"][:, :blind] == 0)) and
               bool(np.all(got["lse"][:, :, :blind] == SINK[None, :, None])))
    return [("PASS" if all(oks) else "FAIL", "fwd/bwd --sink --dsink, d 48 d_v 24, causal: " + "; ".join(texts))]


def varlen_case(tmp):
    """fwd --sink on a packed batch with d_v != d"""
    rng = np.random.default_rng(5)
    lens_q, lens_k = [7, 20], [11, 5]
    cu_q, cu_k = (np.cumsum([0] + n).astype(np.int32) for n in (lens_q, lens_k))
    h, d, d_v = 4, 32, 40
    q = rng.standard_normal((cu_q[-1], h, d)).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], h, d)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], h, d_v)).astype(np.float32)
    p = lambda n: os.path.join(tmp, "vl_" + n + ".npy")
    for n, a in (("q", q), ("k", k), ("v", v), ("cuq", cu_q), ("cuk", cu_k), ("sink", SINK)):
        np.save(p(n), a)
    proc = tool(["fwd", "--q", p("q"), "--k", p("k"), "--v", p("v"), "--out", p("o"), "--lse", p("lse"),
                 "--cu-seqlens-q", p("cuq"), "--cu-seqlens-k", p("cuk"), "--sink", p("sink")] + EXTRA)
    if unsupported(proc):
        return [("SKIP", "fwd --sink varlen: " + proc.stderr.strip().splitlines()[0])]
    if proc.returncode:
        return [("FAIL", "fwd --sink varlen: exit %d: %s" % (proc.returncode, proc.stderr.strip()))]
    o, lse = np.load(p("o")), np.load(p("lse"))
    oks, texts = [o.shape == (cu_q[-1], h, d_v)], []
    for s in range(2):
        a, e, ka, ke = cu_q[s], cu_q[s + 1], cu_k[s], cu_k[s + 1]
        vis = ref.visible(e - a, ke - ka, False, (-1, -1))
        ro, rl = ref.attention(f64(q[a:e]), f64(k[ka:ke]), f64(v[ka:ke]), d ** -0.5, vis, sink=SINK)
        no, nl = ref.attention(q[a:e], k[ka:ke], v[ka:ke], d ** -0.5, vis, np.float32, sink=SINK)
        for c in (("O", o[a:e], ro, no, 2.0), ("LSE", lse[:, a:e], rl, nl, 2.0)):
            ok, text = within(*c)
            oks.append(ok)
            texts.append(text)
    return [("PASS" if all(oks) else "FAIL", "fwd --sink varlen, d 32 d_v 40: " + "; ".join(texts))]


def kvcache_case(tmp):
    """fwd --k-cache --sink with a value cache of head dim d_v != d"""
    rng = np.random.default_rng(6)
    b, sn, h, hk, d, d_v, cap = 2, 1, 4, 2, 64, 32, 20
    lens = np.array([0, 13], dtype=np.int32)
    q = rng.standard_normal((b, sn, h, d)).astype(np.float32)
    kc = rng.standard_normal((b, cap, hk, d)).astype(np.float32)
    vc = rng.standard_normal((b, cap, hk, d_v)).astype(np.float32)
    p = lambda n: os.path.join(tmp, "kv_" + n + ".npy")
    for n, a in (("q", q), ("kc", kc), ("vc", vc), ("cs", lens), ("sink", SINK)):
        np.save(p(n), a)
    proc = tool(["fwd", "--q", p("q"), "--k-cache", p("kc"), "--v-cache", p("vc"), "--cache-seqlens", p("cs"),
                 "--out", p("o"), "--lse", p("lse"), "--sink", p("sink")] + EXTRA)
    if unsupported(proc):
        return [("SKIP", "fwd --k-cache --sink: " + proc.stderr.strip().splitlines()[0])]
    if proc.returncode:
        return [("FAIL", "fwd --k-cache --sink: exit %d: %s" % (proc.returncode, proc.stderr.strip()))]
    o, lse = np.load(p("o")), np.load(p("lse"))
    oks, texts = [o.shape == (b, sn, h, d_v)], []
    for bi in range(b):
        sk = int(lens[bi])
        vis = ref.visible(sn, sk, False, (-1, -1))
        ro, rl = ref.attention(f64(q[bi]), f64(kc[bi, :sk]), f64(vc[bi, :sk]), d ** -0.5, vis, sink=SINK)
        no, nl = ref.attention(q[bi], kc[bi, :sk], vc[bi, :sk], d ** -0.5, vis, np.float32, sink=SINK)
        for c in (("O", o[bi], ro, no, 2.0), ("LSE", lse[bi], rl, nl, 2.0)):
            ok, text = within(*c)
            oks.append(ok)
            texts.append(text)
    return [("PASS" if all(oks) else "FAIL", "fwd --k-cache --sink, d 64 d_v 32: " + "; ".join(texts))]


def bad_input_cases(tmp):
    rng = np.random.default_rng(7)
    p = lambda n: os.path.join(tmp, "bad_" + n + ".npy")
    arrays = {"q": (1, 8, 4, 16), "k": (1, 8, 2, 16), "v": (1, 8, 2, 8), "v_batch": (2, 8, 2, 8),
              "o": (1, 8, 4, 8), "do_d": (1, 8, 4, 16), "kc": (1, 8, 2, 16), "vc": (1, 8, 2, 8)}
    for n, s in arrays.items():
        np.save(p(n), rng.standard_normal(s).astype(np.float32))
    np.save(p("lse"), np.zeros((1, 4, 8), np.float32))
    np.save(p("sink"), SINK)
    np.save(p("sink3"), SINK[:3])
    np.save(p("sink2d"), SINK[None])
    np.save(p("sink16"), SINK.astype(np.float16))
    out = p("out")
    fwd = ["fwd", "--q", p("q"), "--k", p("k"), "--out", out]
    bwd = ["bwd", "--q", p("q"), "--k", p("k"), "--v", p("v"), "--o", p("o"), "--lse", p("lse"), "--dq", p("dq"),
           "--dk", p("dk"), "--dv", out]
    cases = [
        ("--sink of 3 logits for 4 heads", fwd + ["--v", p("v"), "--sink", p("sink3")], "[heads_q] = (4,)"),
        ("--sink [1, 4]", fwd + ["--v", p("v"), "--sink", p("sink2d")], "[heads_q] = (4,)"),
        ("--sink float16", fwd + ["--v", p("v"), "--sink", p("sink16")], "float32"),
        ("--dsink without --sink", bwd + ["--do", p("o"), "--dsink", p("ds")], "--dsink"),
        ("V with another batch than K", fwd + ["--v", p("v_batch")], "--v"),
        ("dO with d where O has d_v", bwd + ["--do", p("do_d")], "--do"),
        ("--k-cache --sink of 3 logits", ["fwd", "--q", p("q"), "--k-cache", p("kc"), "--v-cache", p("vc"),
                                          "--out", out, "--sink", p("sink3")], "[heads_q] = (4,)"),
    ]
    results = []
    for name, args, needle in cases:
        proc = tool(args + EXTRA)
        ok = proc.returncode == 2 and needle in proc.stderr and not os.path.exists(out) and \
            not os.path.exists(p("ds"))
        results.append(("PASS" if ok else "FAIL", "%s: exit %d, %s" % (name, proc.returncode,
                                                                        proc.stderr.strip().splitlines()[0]
                                                                        if proc.stderr.strip() else "no message")))
    return results


def run_cases():
    small = ["run", "--batch", "1", "--seqlen-q", "40", "--seqlen-k", "24", "--heads", "4", "--heads-kv", "2",
             "--dim", "32", "--repeat", "1", "--dtype", "fp32", "--quiet"] + EXTRA
    results = []
    proc = tool(small + ["--dim-v", "16", "--sink", "random", "--backward", "--causal", "--json"])
    if unsupported(proc) or (proc.returncode == 3 and "UNSUPPORTED" in proc.stdout):
        results.append(("SKIP", "run --sink random --dim-v 16: unsupported by the backend"))
    elif proc.returncode:
        results.append(("FAIL", "run --sink random --dim-v 16: exit %d: %s" % (proc.returncode, proc.stderr.strip())))
    else:
        j = json.loads(proc.stdout)
        pairs = 2.0 * 1 * 4 * 40 * 24 * 0.5
        t = j["timings"]
        ok = (j["problem"]["dim_v"] == 16 and j["options"]["sink"] == "random" and
              t["forward"]["flop"] == pairs * (32 + 16) and t["backward"]["flop"] == pairs * (3 * 32 + 2 * 16))
        results.append(("PASS" if ok else "FAIL", "run --sink random --dim-v 16 --json: problem %s, sink %r, flop "
                        "%s / %s" % (j["problem"], j["options"]["sink"], t["forward"]["flop"],
                                     t["backward"]["flop"])))
    proc = tool(small + ["--sink", "-2.5"])
    ok = proc.returncode == 0 and "sink -2.5" in proc.stdout or unsupported(proc)
    results.append(("PASS" if ok else "FAIL", "run --sink -2.5: exit %d" % proc.returncode))
    for args, needle in ((["--sink", "many"], "--sink"), (["--sink", "nan"], "--sink")):
        proc = tool(small + args)
        ok = proc.returncode == 2 and needle in proc.stderr and not proc.stdout
        results.append(("PASS" if ok else "FAIL", "run %s: exit %d: %s" % (" ".join(args), proc.returncode,
                                                                            proc.stderr.strip().splitlines()[0]
                                                                            if proc.stderr.strip() else "")))
    for dtype in ("fp32", "bf16"):
        args = small + ["--sink", "random", "--dim-v", "16", "--backward", "--causal", "--check", "--json",
                        "--dtype", dtype]
        proc = tool(args)
        if unsupported(proc) or proc.returncode == 3:
            results.append(("SKIP", "run --check --sink --dim-v (%s): exit 3" % dtype))
            continue
        lines = {r["tensor"]: r["ok"] for r in (json.loads(proc.stdout).get("check") or {}).get("results", [])}
        ok = proc.returncode == 0 and sorted(lines) == ["LSE", "O", "dK", "dQ", "dV", "dsink"] and all(lines.values())
        results.append(("PASS" if ok else "FAIL", "run --check --sink random --dim-v 16 --backward (%s): exit %d, %r"
                        % (dtype, proc.returncode, lines)))
    env = dict(os.environ, FA_TEST_RUN_CHECK_PERTURB="0.5")
    proc = subprocess.run([EXE] + small + ["--sink", "1", "--dim-v", "16", "--check"], capture_output=True,
                          text=True, env=env, timeout=300)
    results.append(("PASS" if proc.returncode == 1 else "FAIL", "run --check --sink --dim-v with O perturbed: exit %d"
                    % proc.returncode))
    return results


def main(argv):
    global EXE, EXTRA
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 2
    EXE = os.path.abspath(argv[1])
    if argv[2:4] and argv[2] == "--backend" and len(argv) > 3:
        EXTRA = ["--backend", argv[3]]
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    with np.errstate(all="ignore"), tempfile.TemporaryDirectory(prefix="flashattn-cli-sink-") as tmp:
        for part in (dense_case, varlen_case, kvcache_case, bad_input_cases):
            for status, line in part(tmp):
                counts[status] += 1
                print("%s %s" % (status, line), flush=True)
        for status, line in run_cases():
            counts[status] += 1
            print("%s %s" % (status, line), flush=True)
    print("cli-sink: %d passed, %d failed, %d skipped" % (counts["PASS"], counts["FAIL"], counts["SKIP"]))
    return 1 if counts["FAIL"] or not counts["PASS"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
