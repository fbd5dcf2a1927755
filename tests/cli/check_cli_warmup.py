#!/usr/bin/env python3
"""check_cli_warmup.py: `flashattn warmup` on the CPU backend.

- The cartesian product of --dtype and --dim in order, one line per shape on stderr
  ("[2/4] bf16 d128 fwd+bwd causal: 0.01 s") and a summary; nothing on stdout without --json.
- --json: one object with the shapes warmed, exit_status 0 and error null.
- Every option of a shape together (d_v, GQA, sink, softcap, window, deterministic, backward).
- Failures: a head dim the backend refuses stops the run after the shapes before it (exit 3, the
  library's message behind "fa_warmup: "; --json names the error); heads_q not a multiple of
  heads_kv (exit 2); a bad --dtype or --dim list, or neither given (exit 2, a usage message).

Usage: check_cli_warmup.py FLASHATTN_EXECUTABLE
"""
import json
import re
import subprocess
import sys

EXE = None
LINE = re.compile(r"^\[(\d+)/(\d+)\] (.+): (\d+\.\d\d) s$")


def tool(*args):
    return subprocess.run([EXE, "warmup", "--backend", "cpu"] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=300)


def shape_lines(stderr):
    """(index, count, label) of each progress line"""
    out = []
    for line in stderr.splitlines():
        m = LINE.match(line)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), m.group(3)))
    return out


def check(cond, what, proc=None):
    if not cond:
        detail = "" if proc is None else "\n  exit %d\n  stdout: %s\n  stderr: %s" % (proc.returncode, proc.stdout,
                                                                                   proc.stderr)
        sys.exit("FAIL: %s%s" % (what, detail))


def main():
    global EXE
    EXE = sys.argv[1]

    p = tool("--dtype", "bf16,fp16", "--dim", "64,128", "--backward", "--causal")
    check(p.returncode == 0 and p.stdout == "", "product: exit 0, nothing on stdout", p)
    want = [(1, 4, "bf16 d64 fwd+bwd causal"), (2, 4, "bf16 d128 fwd+bwd causal"),
            (3, 4, "fp16 d64 fwd+bwd causal"), (4, 4, "fp16 d128 fwd+bwd causal")]
    check(shape_lines(p.stderr) == want, "product: one line per shape, dtype outer, dim inner", p)
    check(re.search(r"^warmed 4 shapes on cpu device 0 .* in \d+\.\d\d s$", p.stderr, re.M), "summary line", p)

    p = tool("--dtype", "fp32", "--dim", "32", "--json")
    check(p.returncode == 0, "--json: exit 0", p)
    j = json.loads(p.stdout)
    check(j["command"] == "warmup" and j["backend"] == "cpu" and j["exit_status"] == 0 and j["error"] is None,
          "--json: command, backend, exit_status, error", p)
    check([(s["dtype"], s["dim"]) for s in j["shapes"]] == [("fp32", 32)] and j["shapes_total"] == 1,
          "--json: the shapes warmed", p)

    p = tool("--dtype", "bf16", "--dim", "64", "--dim-v", "32", "--heads-q", "4", "--heads-kv", "2", "--sink",
             "--softcap", "30", "--window", "16", "0", "--deterministic", "--backward", "--seqlen", "40")
    check(p.returncode == 0, "every option together: exit 0", p)
    check(shape_lines(p.stderr) == [(1, 1, "bf16 d64 dv32 h4/2 fwd+bwd window 16,0 softcap 30 sink deterministic")],
          "every option together: the label", p)

    p = tool("--dtype", "fp32", "--dim", "64,512,32", "--json")
    check(p.returncode == 3, "d 512: exit 3", p)
    check(shape_lines(p.stderr) == [(1, 3, "fp32 d64 fwd")], "d 512: the shape before it warmed, none after", p)
    check("FA_ERR_UNSUPPORTED" in p.stderr and "fa_warmup: " in p.stderr and "512" in p.stderr,
          "d 512: the library's message", p)
    j = json.loads(p.stdout)
    check(j["exit_status"] == 3 and "fa_warmup: " in j["error"] and len(j["shapes"]) == 1, "d 512: --json", p)

    p = tool("--dtype", "fp32", "--dim", "64", "--heads-q", "3", "--heads-kv", "2")
    check(p.returncode == 2 and "fa_warmup: " in p.stderr and "heads" in p.stderr, "GQA 3 on 2: exit 2", p)

    for args, needle in ((["--dtype", "bf17", "--dim", "64"], "--dtype"), (["--dtype", "fp32,", "--dim", "64"], "--dtype"),
                         (["--dtype", "fp32", "--dim", "64,,2"], "--dim"), (["--dtype", "fp32", "--dim", "0"], "--dim"),
                         (["--dim", "64"], "required"), (["--dtype", "fp32"], "required"),
                         (["--dtype", "fp32", "--dim", "64", "--seqlen", "0"], "--seqlen")):
        p = tool(*args)
        check(p.returncode == 2 and needle in p.stderr and p.stdout == "", "usage error %s" % args, p)

    p = subprocess.run([EXE, "warmup", "--help"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "--dtype" in p.stdout and "--backward" in p.stdout, "--help", p)
    print("ok: flashattn warmup")


if __name__ == "__main__":
    main()
