#!/usr/bin/env python3
"""check_cli_bad_input.py: `flashattn fwd` / `bwd` on bad input.

Missing, truncated and mismatched .npy files and bad options: each case expects a non-zero exit
below 128 (not a signal), a message on stderr naming what is wrong, no sanitizer report, and no
output file. check_cli.py checks the numbers of the good calls; check_cli_safety.py covers output
paths, FIFOs and the exit statuses --help documents.

Usage: check_cli_bad_input.py FLASHATTN_EXECUTABLE
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_cli import first_lines, run_tool, sanitizer_report  # noqa: E402


def bad_input_checks(exe, tmp):
    """(status, line) per bad-input case: a non-zero exit below 128 (not a signal), a message on
    stderr naming what is wrong, no sanitizer report, and no output file."""
    rng = np.random.default_rng(7)
    good = {}
    for name, shape in (("q", (1, 16, 2, 8)), ("k", (1, 20, 2, 8)), ("v", (1, 20, 2, 8))):
        good[name] = os.path.join(tmp, "good_%s.npy" % name)
        np.save(good[name], rng.standard_normal(shape).astype(np.float32))

    def make(name, arr=None, raw=None):
        p = os.path.join(tmp, name)
        if raw is not None:
            with open(p, "wb") as f:
                f.write(raw)
        else:
            np.save(p, arr)
        return p

    with open(good["q"], "rb") as f:
        q_bytes = f.read()
    truncated = make("truncated.npy", raw=q_bytes[:-10])
    header_cut = make("header_cut.npy", raw=q_bytes[:40])
    not_npy = make("not_npy.npy", raw=b"this is not a numpy file at all\n" * 4)
    bad_shape_k = make("k_bad_d.npy", rng.standard_normal((1, 20, 2, 9)).astype(np.float32))
    bad_batch_v = make("v_bad_batch.npy", rng.standard_normal((2, 20, 2, 8)).astype(np.float32))
    fortran = make("fortran.npy", np.asfortranarray(rng.standard_normal((1, 16, 2, 8)).astype(np.float32)))
    f64 = make("f64.npy", rng.standard_normal((1, 16, 2, 8)))
    u16 = make("u16.npy", np.zeros((1, 16, 2, 8), np.uint16))
    q3 = make("q3d.npy", rng.standard_normal((16, 2, 8)).astype(np.float32))
    k3 = make("k3d.npy", rng.standard_normal((20, 2, 8)).astype(np.float32))
    cu_dec_q = make("cu_dec_q.npy", np.array([0, 10, 6, 16], np.int32))
    cu_ok_k = make("cu_ok_k.npy", np.array([0, 5, 10, 20], np.int32))
    cu_f32 = make("cu_f32.npy", np.array([0, 8, 16], np.float32))
    small_mask = make("small_mask.npy", np.ones((1, 1), np.uint8))
    q_h3 = make("q_h3.npy", rng.standard_normal((1, 16, 3, 8)).astype(np.float32))
    lse_bad = make("lse_bad.npy", np.zeros((1, 2, 15), np.float32))
    slopes_ok = make("slopes_ok.npy", np.array([0.5, 0.25], np.float32))
    slopes_len3 = make("slopes_len3.npy", np.array([0.5, 0.25, 0.125], np.float32))
    slopes_batch2 = make("slopes_batch2.npy", np.full((2, 2), 0.5, np.float32))
    slopes_3d = make("slopes_3d.npy", np.full((1, 1, 2), 0.5, np.float32))
    slopes_f16 = make("slopes_f16.npy", np.array([0.5, 0.25], np.float16))
    slopes_f64 = make("slopes_f64.npy", np.array([0.5, 0.25], np.float64))
    slopes_i32 = make("slopes_i32.npy", np.array([1, 2], np.int32))
    out = os.path.join(tmp, "bad_out.npy")
    base = ["--q", good["q"], "--k", good["k"], "--v", good["v"]]
    bwd_base = base + ["--o", good["q"], "--lse", lse_bad, "--do", good["q"], "--dq", out,
                       "--dk", out + ".dk.npy", "--dv", out + ".dv.npy"]
    lse_ok = make("lse_ok.npy", np.zeros((1, 2, 16), np.float32))
    bwd_ok = base + ["--o", good["q"], "--lse", lse_ok, "--do", good["q"], "--dq", out, "--dk", out + ".dk.npy",
                     "--dv", out + ".dv.npy"]

    cases = [
        # (name, args, expected exit status, a word the message must contain); what the library
        # rejects as FA_ERR_INVALID_ARG is the user's input too: exit 2 like the tool's own checks
        ("missing file", ["fwd", "--q", os.path.join(tmp, "nope.npy"), "--k", good["k"], "--v", good["v"],
                          "--out", out], 2, "nope.npy"),
        ("truncated data", ["fwd", "--q", truncated, "--k", good["k"], "--v", good["v"], "--out", out], 2,
         "truncated.npy"),
        ("truncated header", ["fwd", "--q", header_cut, "--k", good["k"], "--v", good["v"], "--out", out], 2,
         "header_cut.npy"),
        ("not an npy file", ["fwd", "--q", not_npy, "--k", good["k"], "--v", good["v"], "--out", out], 2,
         "not_npy.npy"),
        ("empty file", ["fwd", "--q", make("empty.npy", raw=b""), "--k", good["k"], "--v", good["v"],
                        "--out", out], 2, "empty.npy"),
        ("mismatched head dim", ["fwd", "--q", good["q"], "--k", bad_shape_k, "--v", good["v"], "--out", out], 2,
         "k_bad_d.npy"),
        ("mismatched k/v", ["fwd", "--q", good["q"], "--k", good["k"], "--v", bad_batch_v, "--out", out], 2,
         "v_bad_batch.npy"),
        ("fortran order", ["fwd", "--q", fortran, "--k", good["k"], "--v", good["v"], "--out", out], 2,
         "fortran"),
        ("float64 input", ["fwd", "--q", f64, "--k", good["k"], "--v", good["v"], "--out", out], 2, "f64.npy"),
        ("uint16 without --bf16", ["fwd", "--q", u16, "--k", good["k"], "--v", good["v"], "--out", out], 2,
         "--bf16"),
        ("--bf16 with float32", ["fwd"] + base + ["--out", out, "--bf16"], 2, "--bf16"),
        ("mixed dtypes", ["fwd", "--q", good["q"], "--k", make("k16.npy", np.zeros((1, 20, 2, 8), np.float16)),
                          "--v", good["v"], "--out", out], 2, "k16.npy"),
        ("3-D without cu_seqlens", ["fwd", "--q", q3, "--k", k3, "--v", k3, "--out", out], 2, "q3d.npy"),
        ("missing --out", ["fwd"] + base, 2, "--out"),
        ("missing --k", ["fwd", "--q", good["q"], "--v", good["v"], "--out", out], 2, "--k"),
        ("missing option value", ["fwd"] + base + ["--out"], 2, "--out"),
        ("unknown option", ["fwd"] + base + ["--out", out, "--frobnicate"], 2, "--frobnicate"),
        ("dropout out of range", ["fwd"] + base + ["--out", out, "--dropout", "1.5"], 2, "--dropout"),
        ("window not a number", ["fwd"] + base + ["--out", out, "--window", "x", "3"], 2, "--window"),
        ("only one cu_seqlens", ["fwd", "--q", q3, "--k", k3, "--v", k3, "--out", out, "--cu-seqlens-q",
                                 cu_dec_q], 2, "cu-seqlens"),
        ("cu_seqlens not int32", ["fwd", "--q", q3, "--k", k3, "--v", k3, "--out", out, "--cu-seqlens-q", cu_f32,
                                  "--cu-seqlens-k", cu_f32], 2, "cu_f32.npy"),
        ("decreasing cu_seqlens", ["fwd", "--q", q3, "--k", k3, "--v", k3, "--out", out, "--cu-seqlens-q",
                                   cu_dec_q, "--cu-seqlens-k", cu_ok_k], 2, "cu_seqlens"),
        ("block mask without size", ["fwd"] + base + ["--out", out, "--block-mask", small_mask], 2, "--block-size"),
        ("block mask too small", ["fwd"] + base + ["--out", out, "--block-mask", small_mask, "--block-size", "4",
                                                   "4"], 2, "block"),
        ("heads not a multiple", ["fwd", "--q", q_h3, "--k", good["k"], "--v", good["v"], "--out", out], 2,
         "heads"),
        ("bwd LSE wrong shape", ["bwd"] + bwd_base, 2, "lse_bad.npy"),
        ("bwd missing --do", ["bwd", "--q", good["q"], "--k", good["k"], "--v", good["v"], "--o", good["q"],
                              "--lse", lse_bad, "--dq", out, "--dk", out, "--dv", out], 2, "--do"),
        # --softcap: a finite number >= 0 that stays non-zero in float32
        ("softcap nan", ["fwd"] + base + ["--out", out, "--softcap", "nan"], 2, "--softcap"),
        ("softcap inf", ["fwd"] + base + ["--out", out, "--softcap", "inf"], 2, "--softcap"),
        ("softcap negative", ["fwd"] + base + ["--out", out, "--softcap", "-2"], 2, "--softcap"),
        ("softcap rounds to 0", ["fwd"] + base + ["--out", out, "--softcap", "1e-60"], 2, "--softcap"),
        ("softcap not a number", ["fwd"] + base + ["--out", out, "--softcap", "x"], 2, "--softcap"),
        ("softcap missing value", ["fwd"] + base + ["--out", out, "--softcap"], 2, "--softcap"),
        ("softcap over scale ratio", ["fwd"] + base + ["--out", out, "--softcap", "3e38"], 2, "softcap"),
        ("bwd softcap negative", ["bwd"] + bwd_ok + ["--softcap", "-1"], 2, "--softcap"),
        # --alibi-slopes: float32 [heads_q] or [batch, heads_q]
        ("alibi slopes too long", ["fwd"] + base + ["--out", out, "--alibi-slopes", slopes_len3], 2,
         "slopes_len3.npy"),
        ("alibi slopes wrong batch", ["fwd"] + base + ["--out", out, "--alibi-slopes", slopes_batch2], 2,
         "slopes_batch2.npy"),
        ("alibi slopes 3-D", ["fwd"] + base + ["--out", out, "--alibi-slopes", slopes_3d], 2, "slopes_3d.npy"),
        ("alibi slopes float16", ["fwd"] + base + ["--out", out, "--alibi-slopes", slopes_f16], 2, "float32"),
        ("alibi slopes float64", ["fwd"] + base + ["--out", out, "--alibi-slopes", slopes_f64], 2,
         "slopes_f64.npy"),
        ("alibi slopes int32", ["fwd"] + base + ["--out", out, "--alibi-slopes", slopes_i32], 2, "float32"),
        ("alibi slopes missing", ["fwd"] + base + ["--out", out, "--alibi-slopes", os.path.join(tmp, "no.npy")],
         2, "no.npy"),
        ("alibi slopes given twice", ["fwd"] + base + ["--out", out, "--alibi-slopes", slopes_ok,
                                                       "--alibi-slopes", slopes_ok], 2, "twice"),
        ("bwd alibi slopes wrong shape", ["bwd"] + bwd_ok + ["--alibi-slopes", slopes_len3], 2, "slopes_len3.npy"),
        ("run alibi slopes wrong shape", ["run", "--batch", "1", "--heads", "2", "--seqlen-q", "8", "--dim", "8",
                                          "--repeat", "1", "--alibi-slopes", slopes_len3], 2, "slopes_len3.npy"),
        ("run alibi slopes float64", ["run", "--batch", "1", "--heads", "2", "--seqlen-q", "8", "--dim", "8",
                                      "--repeat", "1", "--alibi-slopes", slopes_f64], 2, "slopes_f64.npy"),
        ("run --alibi and --alibi-slopes", ["run", "--heads", "2", "--alibi", "--alibi-slopes", slopes_ok], 2,
         "--alibi"),
        ("run softcap inf", ["run", "--softcap", "inf"], 2, "--softcap"),
        ("unknown backend", ["fwd"] + base + ["--out", out, "--backend", "no-such-backend"], 3, "no-such-backend"),
        ("unknown command", ["frobnicate"], 2, "frobnicate"),
        ("no command", [], 2, "COMMAND"),
    ]
    results = []
    for name, args, want_rc, word in cases:
        for p in (out, out + ".dk.npy", out + ".dv.npy"):
            if os.path.exists(p):
                os.remove(p)
        label = "bad input: %s" % name
        try:
            proc = run_tool(exe, args, timeout=60)
        except subprocess.TimeoutExpired:
            results.append(("FAIL", "%s: timed out" % label))
            continue
        problems = []
        if proc.returncode < 0 or proc.returncode >= 128:
            problems.append("killed or crashed (exit %d)" % proc.returncode)
        elif proc.returncode != want_rc:
            problems.append("exit %d, expected %d" % (proc.returncode, want_rc))
        if not proc.stderr.strip():
            problems.append("no message on stderr")
        elif word.lower() not in proc.stderr.lower():
            problems.append("message does not mention '%s'" % word)
        if sanitizer_report(proc):
            problems.append("sanitizer report")
        if os.path.exists(out):
            problems.append("an output file was written")
        msg = first_lines(proc.stderr, 1)
        if problems:
            results.append(("FAIL", "%s: %s; stderr: %s" % (label, ", ".join(problems), first_lines(proc.stderr))))
        else:
            results.append(("PASS", "%s: exit %d: %s" % (label, proc.returncode, msg)))
    return results


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 2
    exe = os.path.abspath(argv[1])
    if len(argv) > 2:
        print("check_cli_bad_input.py: unknown argument %r" % argv[2], file=sys.stderr)
        return 2
    if not os.access(exe, os.X_OK):
        print("check_cli_bad_input.py: %s is not an executable" % exe, file=sys.stderr)
        return 2

    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    with np.errstate(all="ignore"), tempfile.TemporaryDirectory(prefix="flashattn-cli-") as tmp:
        for status, line in bad_input_checks(exe, tmp):
            counts[status] += 1
            print("%s %s" % (status, line), flush=True)
    print("cli-bad-input: %d passed, %d failed, %d skipped" % (counts["PASS"], counts["FAIL"], counts["SKIP"]))
    return 1 if counts["FAIL"] or not counts["PASS"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
