#!/usr/bin/env python3
"""check_cli_options.py: the flashattn tool's command line.

- GNU options: '--name=VALUE' gives what '--name VALUE' gives, in every subcommand (run, run
  --decode, info, iomodel, fwd, fwd --k-cache, bwd), two-value options also as '--window=L,R';
  an unknown, abbreviated or valueless option, a value given to a flag and a stray word are
  usage errors (exit 2, a message naming the word, nothing on stdout, no output file).
- Help: 'flashattn --help', 'flashattn help' and no command list every subcommand, each with a
  line; 'flashattn CMD --help' and 'flashattn help CMD' show that command's options.
- Exit statuses, one case each: 0 success, 1 run --check over its bound (FA_TEST_RUN_CHECK_PERTURB
  adds an error to O), 2 usage, 3 library (no such backend), 4 output not written (/dev/full).
- --json: 'run --json' and 'info --json' print one JSON object whose members agree with the text
  output of the same command; also after a failed check and a library error; strings with quotes,
  backslashes, control characters and bytes that are not UTF-8 stay valid JSON.

Usage: check_cli_options.py FLASHATTN_EXECUTABLE
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

EXE = None
SMALL_RUN = ["run", "--batch", "1", "--seqlen-q", "48", "--seqlen-k", "40", "--heads", "2", "--dim", "16",
             "--repeat", "1", "--dtype", "fp32"]


def tool(args, env=None, stdout=None, text=True):
    full_env = dict(os.environ)
    full_env.pop("FA_TEST_RUN_CHECK_PERTURB", None)
    full_env.update(env or {})
    kw = dict(stderr=subprocess.PIPE, env=full_env, timeout=300)
    if stdout is None:
        kw["stdout"] = subprocess.PIPE
    else:
        kw["stdout"] = stdout
    if text:
        kw.update(text=True, encoding="utf-8", errors="replace")
    return subprocess.run([EXE] + list(args), **kw)


def equals_form(args):
    """['--a', '1', '--flag', '--b', '2'] -> ['--a=1', '--flag', '--b=2'] (options known to take a value)."""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append(a + "=" + args[i + 1])
            i += 2
        else:
            out.append(a)
            i += 1
    return out


# ---------------------------------------------------------------- GNU options

def gnu_equals_same_as_space(tmp):
    problems = []
    # run: the same problem, kernel and plan (the timings differ)
    a = tool(SMALL_RUN + ["--json", "--causal"])
    b = tool(equals_form(SMALL_RUN) + ["--json", "--causal"])
    if a.returncode or b.returncode:
        return ["run: exit %d / %d: %s" % (a.returncode, b.returncode, b.stderr.strip())]
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    for key in ("problem", "options", "kernel", "plan", "backend"):
        if ja[key] != jb[key]:
            problems.append("run %s differs: %r vs %r" % (key, ja[key], jb[key]))
    # the two-value options: --window L R, --window=L R, --window=L,R
    wins = []
    for form in (["--window", "-1", "0"], ["--window=-1", "0"], ["--window=-1,0"]):
        p = tool(SMALL_RUN + ["--json"] + form)
        wins.append((p.returncode, p.returncode == 0 and (json.loads(p.stdout)["options"]["window_left"],
                                                          json.loads(p.stdout)["options"]["window_right"])))
    if wins != [(0, (-1, 0))] * 3:
        problems.append("--window forms: %r" % wins)
    # iomodel, info: identical output
    for args in (["iomodel", "--seqlen-q", "300", "--dim", "64", "--dtype", "fp32", "--onchip", "65536", "--csv"],
                 ["iomodel", "--seqlen-q", "256", "--sweep", "16,32"],
                 ["info", "--backend", "cpu", "--device", "0"]):
        p, q = tool(args), tool(equals_form(args))
        if p.returncode or q.returncode or p.stdout != q.stdout:
            problems.append("%s: exit %d / %d, same output %s" % (" ".join(args[:1]), p.returncode, q.returncode,
                                                                  p.stdout == q.stdout))
    # fwd and bwd: the same files
    rng = np.random.default_rng(7)
    for n, shape in (("q", (1, 24, 2, 16)), ("k", (1, 20, 1, 16)), ("v", (1, 20, 1, 16)), ("do", (1, 24, 2, 16))):
        np.save(os.path.join(tmp, n + ".npy"), rng.standard_normal(shape).astype(np.float32))
    j = lambda n: os.path.join(tmp, n)
    results = {}
    for form in ("space", "equals"):
        fwd = ["fwd", "--q", j("q.npy"), "--k", j("k.npy"), "--v", j("v.npy"), "--out", j("o_%s.npy" % form),
               "--lse", j("lse_%s.npy" % form), "--causal", "--scale", "0.3"]
        bwd = ["bwd", "--q", j("q.npy"), "--k", j("k.npy"), "--v", j("v.npy"), "--o", j("o_%s.npy" % form),
               "--lse", j("lse_%s.npy" % form), "--do", j("do.npy"), "--dq", j("dq_%s.npy" % form),
               "--dk", j("dk_%s.npy" % form), "--dv", j("dv_%s.npy" % form), "--causal", "--scale", "0.3"]
        for args in (fwd, bwd):
            p = tool(equals_form(args) if form == "equals" else args)
            if p.returncode:
                problems.append("%s (%s): exit %d: %s" % (args[0], form, p.returncode, p.stderr.strip()))
        results[form] = {n: np.load(j("%s_%s.npy" % (n, form))) for n in ("o", "lse", "dq", "dk", "dv")
                         if os.path.exists(j("%s_%s.npy" % (n, form)))}
    if len(results["space"]) != 5 or any(not np.array_equal(results["space"][n], results["equals"].get(n))
                                         for n in results["space"]):
        problems.append("fwd/bwd: '--opt=value' results differ from '--opt value'")
    # fwd --k-cache
    np.save(j("kc.npy"), rng.standard_normal((1, 32, 1, 16)).astype(np.float32))
    np.save(j("q1.npy"), rng.standard_normal((1, 1, 2, 16)).astype(np.float32))
    outs = []
    for form in ("space", "equals"):
        args = ["fwd", "--q", j("q1.npy"), "--k-cache", j("kc.npy"), "--v-cache", j("kc.npy"),
                "--out", j("kvo_%s.npy" % form)]
        p = tool(equals_form(args) if form == "equals" else args)
        outs.append(np.load(j("kvo_%s.npy" % form)) if p.returncode == 0 else None)
        if p.returncode:
            problems.append("fwd --k-cache (%s): exit %d: %s" % (form, p.returncode, p.stderr.strip()))
    if outs[0] is not None and outs[1] is not None and not np.array_equal(outs[0], outs[1]):
        problems.append("fwd --k-cache: results differ")
    # run --decode
    p = tool(["run", "--decode", "--batch=1", "--kv=64", "--heads=2", "--heads-kv=1", "--dim=16", "--repeat=1",
              "--dtype=fp32"])
    if p.returncode:
        problems.append("run --decode with '=': exit %d: %s" % (p.returncode, p.stderr.strip()))
    return problems


def gnu_usage_errors(tmp):
    q = os.path.join(tmp, "q.npy")
    np.save(q, np.zeros((1, 8, 1, 8), np.float32))
    out = os.path.join(tmp, "never.npy")
    fwd = ["fwd", "--q", q, "--k", q, "--v", q, "--out", out]
    cases = [  # args, a word the message must contain
        (["run", "--dim=64x"], "--dim"),
        (["run", "--frobnicate=3"], "--frobnicate"),
        (["run", "--dim"], "--dim"),
        (["run", "--dim="], "--dim"),
        (["run", "--caus"], "not abbreviated"),
        (["run", "--causal=yes"], "takes no value"),
        (["run", "stray"], "stray"),
        (["run", "--window", "3"], "second value"),
        (["run", "--window=1,x"], "--window (right)"),
        (["run", "-q"], "-q"),
        (["info", "--json=1"], "takes no value"),
        (["info", "--back=cpu"], "not abbreviated"),
        (["iomodel", "--seqlen-q"], "--seqlen-q"),
        (["iomodel", "--csv=1"], "takes no value"),
        (["run", "--decode", "--kv=x"], "--kv"),
        (["run", "--decode=1"], "takes no value"),
        (fwd + ["--frobnicate"], "--frobnicate"),
        (fwd[:-2] + ["--out="], "empty file name"),
        (fwd + ["--causal=1"], "takes no value"),
        (fwd + ["--block-mask=%s" % q, "--block-size=4"], "second value"),
        (["bwd", "--q=%s" % q, "--dq"], "--dq"),
        (["fwd", "--q", q, "--k-cache=%s" % q, "--v-cache", q, "--out", out, "--dropout=0.1"], "--dropout"),
    ]
    problems = []
    for args, word in cases:
        p = tool(args)
        label = " ".join(a.replace(tmp, "T") for a in args)
        if p.returncode != 2:
            problems.append("%s: exit %d, expected 2" % (label, p.returncode))
        elif word not in p.stderr:
            problems.append("%s: message %r does not name %r" % (label, p.stderr.strip(), word))
        elif p.stdout:
            problems.append("%s: wrote to stdout: %r" % (label, p.stdout[:80]))
        if os.path.exists(out) or any(n.startswith(".never") for n in os.listdir(tmp)):
            problems.append("%s: an output file was written" % label)
    return problems


# ---------------------------------------------------------------- help

def listed_commands(text):
    m = re.search(r"^Commands:\n((?:  \S.*\n)+)", text, re.M)
    return [(l.split()[0], l.split(None, 1)[1] if len(l.split()) > 1 else "") for l in m.group(1).splitlines()] if m \
        else []


def help_lists_every_command(tmp):
    problems = []
    main_help = tool(["--help"])
    cmds = listed_commands(main_help.stdout)
    names = [c for c, _ in cmds]
    if main_help.returncode != 0:
        problems.append("--help: exit %d" % main_help.returncode)
    for need in ("info", "run", "fwd", "bwd", "iomodel"):
        if need not in names:
            problems.append("--help does not list %s (lists %s)" % (need, names))
    problems += ["%s has no description" % c for c, d in cmds if not d.strip()]
    p = tool(["help"])
    if p.returncode != 0 or p.stdout != main_help.stdout:
        problems.append("'flashattn help' differs from 'flashattn --help' (exit %d)" % p.returncode)
    p = tool([])
    if p.returncode != 2 or [c for c, _ in listed_commands(p.stderr)] != names or p.stdout:
        problems.append("no command: exit %d, lists %s on stderr" % (p.returncode, listed_commands(p.stderr)))
    for c in names:
        h = tool([c, "--help"])
        if h.returncode != 0 or not h.stdout.startswith("Usage: flashattn " + c) or "--" not in h.stdout:
            problems.append("%s --help: exit %d: %r" % (c, h.returncode, h.stdout[:60]))
        h2 = tool(["help", c])
        if h2.returncode != 0 or h2.stdout != h.stdout:
            problems.append("help %s differs from %s --help" % (c, c))
        h3 = tool([c, "-h"])
        if h3.stdout != h.stdout:
            problems.append("%s -h differs from %s --help" % (c, c))
    for args, start in ((["run", "--decode", "--help"], "Usage: flashattn run --decode"),
                        (["fwd", "--k-cache", "--help"], "Usage: flashattn fwd --q Q.npy --k-cache")):
        h = tool(args)
        if h.returncode != 0 or not h.stdout.startswith(start):
            problems.append("%s: exit %d: %r" % (" ".join(args), h.returncode, h.stdout[:60]))
    for phrase in ("0 success", "1 run --check", "2 a usage error", "3 the library", "4 an output could not"):
        if phrase not in " ".join(main_help.stdout.split()):
            problems.append("--help does not document %r" % phrase)
    return problems


# ---------------------------------------------------------------- exit statuses

def exit_0_success(tmp):
    p = tool(SMALL_RUN)
    return [] if p.returncode == 0 and p.stdout.startswith("backend: ") else [
        "exit %d: %s" % (p.returncode, p.stderr.strip())]


def exit_1_check_failed(tmp):
    problems = []
    ok = tool(SMALL_RUN + ["--check"])
    if ok.returncode != 0 or "EXCEEDS" in ok.stdout or ok.stdout.count(" ok\n") != 2:
        problems.append("unperturbed --check: exit %d: %s" % (ok.returncode, ok.stdout[-300:]))
    bad = tool(SMALL_RUN + ["--check"], env={"FA_TEST_RUN_CHECK_PERTURB": "1.0"})
    if bad.returncode != 1 or "max|O - ref64|" not in bad.stdout or "EXCEEDS BOUND" not in bad.stdout:
        problems.append("perturbed --check: exit %d, expected 1: %s" % (bad.returncode, bad.stdout[-300:]))
    return problems


def exit_2_usage(tmp):
    p = tool(["run", "--no-such-option"])
    return [] if p.returncode == 2 and "--no-such-option" in p.stderr else ["exit %d" % p.returncode]


def exit_3_library(tmp):
    problems = []
    for args in (SMALL_RUN + ["--backend", "no-such-backend"], ["info", "--backend=no-such-backend"]):
        p = tool(args)
        if p.returncode != 3 or "no-such-backend" not in p.stderr:
            problems.append("%s: exit %d, expected 3" % (" ".join(args[-2:]), p.returncode))
    return problems


def exit_4_io(tmp):
    problems = []
    for args in (["info"], SMALL_RUN + ["--json"], ["--help"]):
        with open("/dev/full", "w") as full:
            p = tool(args, stdout=full)
        if p.returncode != 4 or "standard output" not in p.stderr:
            problems.append("%s > /dev/full: exit %d, expected 4: %s" % (" ".join(args[:2]), p.returncode,
                                                                         p.stderr.strip()))
    return problems


# ---------------------------------------------------------------- --json

def text_fields(stdout):
    """backend, device name, kernels, problem numbers, plan tiles and check lines from run's text."""
    f = {}
    for line in stdout.splitlines():
        m = re.match(r"backend: (\S+), device (\d+) \((.*)\)(, (\d+) threads)?$", line)
        if m:
            f["backend"], f["device"], f["device_name"] = m.group(1), int(m.group(2)), m.group(3)
            f["threads"] = int(m.group(5)) if m.group(5) else None
        m = re.match(r"problem: batch (\d+), seqlen_q (\d+), seqlen_k (\d+), heads (\d+) \(kv (\d+)\), d (\d+)"
                     r"(, d_v (\d+))?, (\w+)", line)
        if m:  # the text names d_v only where it differs from d
            f["problem"] = dict(zip(("batch", "seqlen_q", "seqlen_k", "heads", "heads_kv", "dim"),
                                    map(int, m.groups()[:6])), dim_v=int(m.group(8) or m.group(6)), dtype=m.group(9))
        m = re.match(r"kernel: forward (\S+)(, backward (\S+))?$", line)
        if m:
            f["kernel"] = {"forward": m.group(1), "backward": m.group(3)}
        m = re.match(r"plan: tiles B_r x B_c = (\d+) x (\d+) \(paper (\d+) x (\d+) from M = (\d+) bytes\), "
                     r"(\d+) x (\d+) blocks", line)
        if m:
            f["plan"] = dict(zip(("block_q", "block_k", "paper_block_q", "paper_block_k", "onchip_bytes",
                                  "num_q_blocks", "num_k_blocks"), map(int, m.groups())))
        m = re.match(r"check: max\|(\w+) - ref64\| = (\S+) .* (ok|EXCEEDS BOUND)$", line)
        if m:
            f.setdefault("checks", []).append((m.group(1), float(m.group(2)), m.group(3) == "ok"))
        m = re.match(r"(forward|backward): +\S+ ms mean, .* over (\d+) runs", line)
        if m:
            f.setdefault("timed", []).append(m.group(1))
    return f


def run_json_matches_text(tmp):
    problems = []
    args = SMALL_RUN + ["--causal", "--backward", "--check", "--softcap", "20", "--window", "30", "-1"]
    t = tool(args)
    j = tool(args + ["--json"])
    if t.returncode or j.returncode:
        return ["exit %d / %d: %s" % (t.returncode, j.returncode, j.stderr.strip())]
    try:
        d = json.loads(j.stdout)
    except ValueError as e:
        return ["not JSON: %s: %r" % (e, j.stdout[:200])]
    f = text_fields(t.stdout)
    for key in ("backend", "device", "device_name", "threads"):
        if d.get(key) != f.get(key):
            problems.append("%s: json %r, text %r" % (key, d.get(key), f.get(key)))
    if d["problem"] != f.get("problem"):
        problems.append("problem: json %r, text %r" % (d["problem"], f.get("problem")))
    if d["kernel"] != f.get("kernel"):
        problems.append("kernel: json %r, text %r" % (d["kernel"], f.get("kernel")))
    if {k: d["plan"][k] for k in f.get("plan", {})} != f.get("plan"):
        problems.append("plan: json %r, text %r" % (d["plan"], f.get("plan")))
    want_opts = {"causal": True, "window_left": 30, "window_right": -1, "softcap": 20, "backward": True,
                 "check": True, "repeat": 1}
    for k, v in want_opts.items():
        if d["options"].get(k) != v:
            problems.append("options.%s: %r, expected %r" % (k, d["options"].get(k), v))
    for part in ("forward", "backward"):
        tm = d["timings"].get(part)
        if not tm or not (tm["mean_ms"] > 0 and tm["min_ms"] > 0 and tm["runs"] == 1 and tm["flop"] > 0):
            problems.append("timings.%s: %r" % (part, tm))
    chk = d.get("check") or {}
    got = [(r["tensor"], r["ok"]) for r in chk.get("results", [])]
    if got != [(n, ok) for n, _, ok in f.get("checks", [])] or len(got) != 5 or chk.get("passed") is not True:
        problems.append("check: json %r, text %r" % (chk, f.get("checks")))
    for r, (_, err, _) in zip(chk.get("results", []), f.get("checks", [])):
        if abs(r["max_abs_error"] - err) > 1e-2 * max(err, 1e-30):  # text rounds to 4 digits
            problems.append("check %s: json error %r, text %r" % (r["tensor"], r["max_abs_error"], err))
    if d["exit_status"] != 0 or d["error"] is not None:
        problems.append("exit_status %r, error %r" % (d["exit_status"], d["error"]))
    return problems


def run_json_on_failure(tmp):
    problems = []
    p = tool(SMALL_RUN + ["--check", "--json"], env={"FA_TEST_RUN_CHECK_PERTURB": "1.0"})
    try:
        d = json.loads(p.stdout)
        res = {r["tensor"]: r["ok"] for r in d["check"]["results"]}
        if p.returncode != 1 or d["exit_status"] != 1 or d["check"]["passed"] or res != {"O": False, "LSE": True} \
                or "bound" not in (d["error"] or ""):
            problems.append("failed check: exit %d, %r" % (p.returncode, d.get("check")))
    except (ValueError, KeyError, TypeError) as e:
        problems.append("failed check: %s: %r" % (e, p.stdout[:200]))
    p = tool(SMALL_RUN + ["--json", "--backend", "no-such-backend"])
    try:
        d = json.loads(p.stdout)
        if p.returncode != 3 or d["exit_status"] != 3 or "no-such-backend" not in d["error"] or d["kernel"] is not None:
            problems.append("library error: exit %d, %r" % (p.returncode, d))
    except (ValueError, KeyError, TypeError) as e:
        problems.append("library error: %s: %r" % (e, p.stdout[:200]))
    p = tool(SMALL_RUN + ["--json", "--bogus"])
    if p.returncode != 2 or p.stdout:
        problems.append("usage error with --json: exit %d, stdout %r (expected 2 and nothing)" % (p.returncode,
                                                                                                 p.stdout[:80]))
    return problems


def json_string_escaping(tmp):
    """A slopes file whose name holds a quote, a backslash, a newline, a tab, a control character,
    UTF-8 and a byte that is not UTF-8: the JSON is valid UTF-8 and gives the name back, the bad byte
    as U+FFFD."""
    name = b'sl "q" \\ back\nnew\ttab\x01ctl \xc3\xa9 \xff.npy'
    path = os.path.join(os.fsencode(tmp), name)
    with open(path, "wb") as f:
        np.save(f, np.array([0.5, 0.25], np.float32))
    args = [os.fsencode(a) for a in SMALL_RUN] + [b"--json", b"--alibi-slopes", path]
    p = subprocess.run([os.fsencode(EXE)] + args, capture_output=True, timeout=300)
    if p.returncode:
        return ["exit %d: %r" % (p.returncode, p.stderr[:300])]
    try:
        d = json.loads(p.stdout.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return ["not valid UTF-8 JSON: %s: %r" % (e, p.stdout[:300])]
    want = path.replace(b"\xff", b"\xef\xbf\xbd").decode("utf-8")
    got = d["options"]["alibi_slopes_file"]
    return [] if got == want and d["options"]["alibi"] is True else ["alibi_slopes_file %r, expected %r" % (got, want)]


def info_json_matches_text(tmp):
    problems = []
    t, j = tool(["info"]), tool(["info", "--json"])
    if t.returncode or j.returncode:
        return ["exit %d / %d" % (t.returncode, j.returncode)]
    d = json.loads(j.stdout)
    lines = t.stdout.splitlines()
    if lines[0] != "flashattn " + d["version"] or tool(["--version"]).stdout.strip() != lines[0]:
        problems.append("version %r vs %r" % (d["version"], lines[0]))
    m = re.match(r"backends compiled in \((\d+)\): ?(.*)$", lines[1])
    if not m or m.group(2).split() != d["backends_compiled"] or [b["name"] for b in d["backends"]] != \
            d["backends_compiled"]:
        problems.append("backends: json %r, text %r" % (d["backends_compiled"], lines[1]))
    for b in d["backends"]:
        sect = t.stdout.split("\nbackend %s\n" % b["name"], 1)[1].split("\n\n", 1)[0]
        m = re.search(r"devices: (\d+)\n", sect)
        names = re.findall(r"^      \d+: (.*)$", sect, re.M)
        if m:
            if not b["available"] == (int(m.group(1)) > 0) or [x["name"] for x in b["devices"]] != names:
                problems.append("backend %s: json %r, text devices %r" % (b["name"], b["devices"], names))
        elif b["available"] or not b["unavailable_reason"]:
            problems.append("backend %s: text says unusable, json %r" % (b["name"], b))
        feats = re.search(r"features: (.*)$", sect, re.M)
        caps = b["capabilities"] or {}
        if feats and feats.group(1).split() != caps.get("features"):
            problems.append("backend %s features: json %r, text %r" % (b["name"], caps.get("features"),
                                                                       feats.group(1)))
        dts = re.search(r"dtypes: (.*)$", sect, re.M)
        if dts and dts.group(1).split() != caps.get("dtypes"):
            problems.append("backend %s dtypes: json %r, text %r" % (b["name"], caps.get("dtypes"), dts.group(1)))
    m = re.search(r"^default backend: (\S+)", t.stdout, re.M)
    if not m or d["default_backend"]["name"] != m.group(1):
        problems.append("default backend: json %r, text %r" % (d["default_backend"], m and m.group(1)))
    kernels = re.findall(r"^      forward  kernel: (\S+)", t.stdout, re.M)
    if [p.get("forward_kernel") for p in d["example_plans"]["plans"]] != kernels:
        problems.append("example kernels: json %r, text %r" % (d["example_plans"], kernels))
    return problems


CASES = [
    ("'--opt=value' gives what '--opt value' gives", gnu_equals_same_as_space),
    ("bad options are usage errors", gnu_usage_errors),
    ("--help lists every command", help_lists_every_command),
    ("exit 0: success", exit_0_success),
    ("exit 1: --check over its bound", exit_1_check_failed),
    ("exit 2: usage error", exit_2_usage),
    ("exit 3: library error", exit_3_library),
    ("exit 4: output not written", exit_4_io),
    ("run --json agrees with the text", run_json_matches_text),
    ("run --json after a failure", run_json_on_failure),
    ("--json string escaping", json_string_escaping),
    ("info --json agrees with the text", info_json_matches_text),
]


def main(argv):
    global EXE
    EXE = os.path.abspath(argv[1])
    failed = 0
    with tempfile.TemporaryDirectory(prefix="flashattn-options-") as tmp:
        for i, (name, fn) in enumerate(CASES):
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
    print("%d of %d failed" % (failed, len(CASES)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
