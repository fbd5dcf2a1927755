#!/usr/bin/env python3
"""check_cli_messages.py: what the flashattn tool tells a user, from a new user's findings.

- A library error carries no C file:line ('validate.c:261'); with --debug (any command) the
  location is on a line of its own, and '--debug=1' is a usage error.
- fwd and bwd refuse --dropout without --seed (exit 2, a message naming --seed, no output), as the
  Python package does; with --seed they run.
- info --backend NAME for a backend that cannot be opened prints the error and the backends
  compiled in, nothing of the report on stdout, exit 3.
- A .npy of a dtype the reader does not know, given to --q, is refused with the dtypes --q takes
  (fp32, fp16, bf16) and not the reader's other types ('<i4', '|u1', '|b1').
- run --check: with stderr not a terminal, stderr holds the one note it always had and no
  progress; --quiet leaves stderr empty and stdout as it was; with stderr on a pseudo-terminal
  the progress line of the reference ('reference forward: 37 % (about 2 s left)') appears,
  rewritten with carriage returns, and is cleared at the end.

Usage: check_cli_messages.py FLASHATTN_EXECUTABLE
"""
import os
import pty
import re
import select
import subprocess
import sys
import tempfile

import numpy as np

EXE = None
LOCATION = re.compile(r"\b\w+\.(c|cu|cpp):\d+")


def tool(args, env=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([EXE] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env,
                          timeout=300, text=True, encoding="utf-8", errors="replace")


def small_inputs(tmp, dtype=np.float32):
    rng = np.random.default_rng(3)
    paths = {}
    for n, shape in (("q", (1, 12, 2, 8)), ("k", (1, 10, 2, 8)), ("v", (1, 10, 2, 8)), ("do", (1, 12, 2, 8))):
        paths[n] = os.path.join(tmp, n + ".npy")
        np.save(paths[n], rng.standard_normal(shape).astype(dtype))
    return paths


# ---------------------------------------------------------------- library messages

def no_location_without_debug(tmp):
    problems = []
    bad_dim = ["run", "--batch", "1", "--seqlen-q", "8", "--heads", "1", "--dim", "3000", "--dtype", "fp32",
               "--repeat", "1"]
    p = tool(bad_dim)
    if p.returncode != 3 or "at most 256" not in p.stderr:
        problems.append("run --dim 3000: exit %d, stderr %r" % (p.returncode, p.stderr))
    if LOCATION.search(p.stderr):
        problems.append("run --dim 3000: a C location in %r" % p.stderr)
    for args in (bad_dim + ["--debug"], ["run", "--debug"] + bad_dim[1:]):
        d = tool(args)
        m = re.search(r"^  \(raised at (\w+\.c:\d+) in the library\)$", d.stderr, re.M)
        if d.returncode != 3 or not m:
            problems.append("%s: exit %d, no location line in %r" % (" ".join(args), d.returncode, d.stderr))
        elif d.stderr.replace(m.group(0) + "\n", "") != p.stderr:
            problems.append("--debug changes more than the location line: %r vs %r" % (d.stderr, p.stderr))
    # fa_context_create's reason, through fa_last_error
    c = tool(["run", "--backend", "no-such-backend", "--debug"])
    if c.returncode != 3 or not re.search(r"raised at \w+\.c:\d+", c.stderr):
        problems.append("run --backend no-such-backend --debug: exit %d, %r" % (c.returncode, c.stderr))
    u = tool(["info", "--debug=1"])
    if u.returncode != 2 or "--debug" not in u.stderr or u.stdout:
        problems.append("info --debug=1: exit %d, %r" % (u.returncode, u.stderr))
    i = tool(["iomodel", "--seqlen-q", "256", "--debug"])
    if i.returncode != 0:
        problems.append("iomodel --debug: exit %d, %r" % (i.returncode, i.stderr))
    return problems


# ---------------------------------------------------------------- dropout needs a seed

def dropout_needs_seed(tmp):
    problems = []
    f = small_inputs(tmp)
    out = os.path.join(tmp, "o.npy")
    lse = os.path.join(tmp, "lse.npy")
    fwd = ["fwd", "--q", f["q"], "--k", f["k"], "--v", f["v"], "--out", out, "--lse", lse, "--dropout", "0.1"]
    p = tool(fwd)
    if p.returncode != 2 or "--seed" not in p.stderr or os.path.exists(out) or os.path.exists(lse):
        problems.append("fwd --dropout without --seed: exit %d, output written %s, stderr %r"
                        % (p.returncode, os.path.exists(out), p.stderr))
    p = tool(fwd + ["--seed", "5"])
    if p.returncode != 0 or not os.path.exists(out):
        problems.append("fwd --dropout --seed 5: exit %d, %r" % (p.returncode, p.stderr))
        return problems
    run = ["run", "--seqlen-q", "16", "--heads", "1", "--dim", "8", "--repeat", "1", "--dropout", "0.1"]
    p = tool(run)
    if p.returncode != 2 or "--seed" not in p.stderr:
        problems.append("run --dropout without --seed: exit %d, stderr %r" % (p.returncode, p.stderr))
    p = tool(run + ["--seed", "5"])
    if p.returncode != 0:
        problems.append("run --dropout --seed 5: exit %d, %r" % (p.returncode, p.stderr))
    p = tool(fwd[:7] + ["--out", os.path.join(tmp, "o0.npy"), "--dropout", "0"])
    if p.returncode != 0:
        problems.append("fwd --dropout 0 without --seed: exit %d, %r" % (p.returncode, p.stderr))
    dq = os.path.join(tmp, "dq.npy")
    bwd = ["bwd", "--q", f["q"], "--k", f["k"], "--v", f["v"], "--o", out, "--lse", lse, "--do", f["do"],
           "--dq", dq, "--dk", os.path.join(tmp, "dk.npy"), "--dv", os.path.join(tmp, "dv.npy"), "--dropout", "0.1"]
    p = tool(bwd)
    if p.returncode != 2 or "--seed" not in p.stderr or os.path.exists(dq):
        problems.append("bwd --dropout without --seed: exit %d, stderr %r" % (p.returncode, p.stderr))
    p = tool(bwd + ["--seed", "5"])
    if p.returncode != 0:
        problems.append("bwd --dropout --seed 5: exit %d, %r" % (p.returncode, p.stderr))
    return problems


# ---------------------------------------------------------------- info --backend

def info_bad_backend_prints_only_the_error(tmp):
    problems = []
    p = tool(["info", "--backend", "foo"])
    if p.returncode != 3:
        problems.append("info --backend foo: exit %d" % p.returncode)
    if p.stdout:
        problems.append("info --backend foo printed the report: %r" % p.stdout[:200])
    if "foo" not in p.stderr or "backends compiled in:" not in p.stderr:
        problems.append("info --backend foo: stderr %r" % p.stderr)
    p = tool(["info", "--backend", "cpu", "--device", "99"])
    if p.returncode != 3 or p.stdout:
        problems.append("info --backend cpu --device 99: exit %d, stdout %r" % (p.returncode, p.stdout[:200]))
    p = tool(["info", "--backend", "cpu"])
    if p.returncode != 0 or "plan on cpu device 0" not in p.stdout:
        problems.append("info --backend cpu: exit %d, %r" % (p.returncode, p.stderr))
    return problems


# ---------------------------------------------------------------- dtype lists

def q_dtype_message_lists_what_q_takes(tmp):
    problems = []
    f = small_inputs(tmp)
    q64 = os.path.join(tmp, "q64.npy")
    np.save(q64, np.zeros((1, 12, 2, 8), dtype=np.float64))
    qi8 = os.path.join(tmp, "qi8.npy")
    np.save(qi8, np.zeros((1, 12, 2, 8), dtype=np.int64))
    qi4 = os.path.join(tmp, "qi4.npy")
    np.save(qi4, np.zeros((1, 12, 2, 8), dtype=np.int32))
    for q in (q64, qi8, qi4):
        out = os.path.join(tmp, "o.npy")
        for args in (["fwd", "--q", q, "--k", f["k"], "--v", f["v"], "--out", out],
                     ["fwd", "--q", q, "--k-cache", f["k"], "--v-cache", f["v"], "--out", out]):
            p = tool(args)
            what = "%s %s" % (" ".join(args[:2]), os.path.basename(q))
            if p.returncode != 2:
                problems.append("%s: exit %d, %r" % (what, p.returncode, p.stderr))
            for name in ("fp32", "fp16", "bf16"):
                if name not in p.stderr:
                    problems.append("%s: %s not named in %r" % (what, name, p.stderr))
            for other in ("|u1", "|b1") + (("<i4",) if q != qi4 else ()):
                if other in p.stderr:
                    problems.append("%s: lists %s: %r" % (what, other, p.stderr))
    return problems


# ---------------------------------------------------------------- run's progress line

CHECK_RUN = ["run", "--check", "--batch", "1", "--seqlen-q", "1024", "--heads", "8", "--dim", "64", "--dtype", "fp32",
             "--repeat", "2", "--backend", "cpu"]


def report_shape(stdout):
    """The text report with its numbers blanked, to compare runs."""
    return re.sub(r" +", " ", re.sub(r"[0-9.e+-]+", "#", stdout))


def run_progress_line(tmp):
    problems = []
    small = ["run", "--check", "--batch", "1", "--seqlen-q", "64", "--heads", "2", "--dim", "16", "--dtype", "fp32",
             "--repeat", "2", "--backend", "cpu"]
    p = tool(small)
    if p.returncode != 0 or p.stderr != "check: running the float64 reference forward...\n":
        problems.append("run --check, stderr a pipe: exit %d, stderr %r" % (p.returncode, p.stderr))
    q = tool(small + ["--quiet"])
    if q.returncode != 0 or q.stderr != "" or report_shape(q.stdout) != report_shape(p.stdout):
        problems.append("run --check --quiet: exit %d, stderr %r, stdout %r vs %r" % (q.returncode, q.stderr,
                                                                                     q.stdout, p.stdout))
    # long enough for a line to be drawn, were stderr a terminal
    p = tool(CHECK_RUN)
    if p.returncode != 0 or p.stderr != "check: running the float64 reference forward...\n":
        problems.append("run --check (1024), stderr a pipe: exit %d, stderr %r" % (p.returncode, p.stderr[-300:]))
    # stderr on a terminal: the progress line; stdout stays a pipe
    master, slave = pty.openpty()
    proc = subprocess.Popen([EXE] + CHECK_RUN, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    out = proc.stdout.read().decode()
    proc.stdout.close()
    rc = proc.wait(timeout=300)
    text = seen.decode(errors="replace")
    if rc != 0:
        problems.append("run --check on a terminal: exit %d, %r" % (rc, text))
    if not re.search(r"\rreference forward: \d+ % \((about \d+ (s|min) left|estimating the time left)\)", text):
        problems.append("no progress line for the reference on the terminal: %r" % text[-400:])
    if not text.endswith("\r\033[K"):
        problems.append("the progress line is not cleared at the end: %r" % text[-80:])
    if "check: max|O - ref64|" not in out:
        problems.append("stdout lost the check lines: %r" % out)
    return problems


CASES = [
    ("library errors without file:line, --debug adds it", no_location_without_debug),
    ("fwd / bwd --dropout need --seed", dropout_needs_seed),
    ("info --backend foo prints only the error", info_bad_backend_prints_only_the_error),
    ("--q of a wrong dtype lists fp32, fp16, bf16 only", q_dtype_message_lists_what_q_takes),
    ("run --check: progress on a terminal only, --quiet", run_progress_line),
]


def main(argv):
    global EXE
    EXE = os.path.abspath(argv[1])
    only = argv[2:]
    failed = run = 0
    with tempfile.TemporaryDirectory(prefix="flashattn-messages-") as tmp:
        for i, (name, fn) in enumerate(CASES):
            if only and fn.__name__ not in only:
                continue
            sub = os.path.join(tmp, "case%d" % i)
            os.mkdir(sub)
            try:
                problems = fn(sub)
            except Exception as e:  # a crash of the check is a failure, with its reason
                problems = ["%s: %s" % (type(e).__name__, e)]
            print("%s: %s" % ("PASS" if not problems else "FAIL", name))
            for p in problems:
                print("    " + p)
            failed += bool(problems)
            run += 1
    print("%d of %d failed" % (failed, run))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
