#!/usr/bin/env python3
"""Mutation check of the test suite: injects each fault of mutations.py into a scratch copy of the
source tree, rebuilds it incrementally (one CPU-only build directory for all mutations) and runs
the CPU test suite, cheapest tests first, stopping at the first failure. A mutation is CAUGHT when
some test fails (or times out), MISSED when every test passes; the script prints a table and
exits 1 if any mutation is missed, stale (its target text is gone) or does not build.

The suite is `meson test` of a build with -Dcuda=disabled -Dhip=disabled -Dopencl=disabled (there
is no GPU where this runs, and the faults are in the CPU kernels): the core and API unit tests,
the ring, CLI and Python tests, the long-sequence CPU checks, the kernel tables' short grids, then
the CPU conformance grid (--grid full by default, as the README's test command runs it). Before
any fault the unmodified copy must pass the same tests, otherwise nothing could be concluded.

Usage: run_mutations.py [--grid full|short] [--only ID[,ID...]] [--sample K [--seed S]] [--all-tests]
                        [--no-baseline] [--keep] [--list]
  --sample K    K of the mutations, chosen by the seed S (.ci/run: from the commit, so a run can be
                repeated; over many commits every mutation is drawn)
  --all-tests   run every stage even after a failure, to list every test that catches a fault
  --no-baseline skip the run of the unmodified copy (only when the same tests have just passed
                on the same tree, as in .ci/run)"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from mutations import MUTATIONS  # noqa: E402

# a stage that runs longer than this is reported as a time-out (a hang is a caught fault)
STAGE_TIMEOUT_S = 900


def run(cmd, cwd=None, timeout=None):
    return subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


def copy_tree(dst):
    """The tracked and untracked-but-not-ignored files of the checkout (what the build sees)."""
    listing = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT)
    if listing.returncode != 0:
        sys.exit("run_mutations: git ls-files failed in %s:\n%s" % (ROOT, listing.stdout))
    for rel in filter(None, listing.stdout.split("\0")):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):  # deleted in the work tree, or a submodule
            continue
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dst, rel))


def test_stages(build):
    """The suite's tests in four stages, cheapest first: unit tests, the other quick CPU tests,
    the kernel tables' short grids, then the conformance grids."""
    out = run(["meson", "test", "-C", build, "--list"]).stdout
    names = []
    for line in out.splitlines():
        m = re.match(r"^\S+:(\S+)? / (\S+)$", line.strip()) or re.match(r"^\S+ / (\S+)$", line.strip())
        if m:
            names.append(m.group(m.lastindex))
    # the fuzz targets check argument validation, not results: they run in .ci/run on their own
    names = [n for n in names if not n.startswith("fuzz-")]
    # mutations-current checks this file's edits against the source: every fault would "fail" it
    names = [n for n in names if n != "mutations-current"]
    unit = [n for n in names if n.startswith(("core_", "api_"))]
    conf = [n for n in names if n.startswith("conformance")]
    rest = [n for n in names if n not in unit and n not in conf]
    # the short grids of the CPU kernel tables (a fault in one table's code fails only its test)
    # before the full grids, which would otherwise share the cores with them
    tables = [n for n in conf if n.startswith("conformance-cpu-")]
    conf = [n for n in conf if n not in tables]
    return [s for s in (unit, rest, tables, conf) if s]


def failure_lines(text, limit=2):
    keep = []
    for line in text.splitlines():
        if re.search(r"\[\s*(ERROR|FAILED)\s*\]|\bFAIL(ED)?\b:|AssertionError|assert |error:", line) and \
                "FAILED  ] 0 test" not in line:
            keep.append(line.strip()[:160])
            if len(keep) >= limit:
                break
    return keep


def run_suite(build, stages, stop_at_first):
    """Returns (failed test names, a few failure lines, timed out)."""
    failed, lines, timed_out = [], [], False
    for stage in stages:
        cmd = ["meson", "test", "-C", build, "--no-rebuild", "--print-errorlogs"]
        if stop_at_first:
            cmd += ["--maxfail", "1"]
        try:
            r = run(cmd + stage, timeout=STAGE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            failed.append("(stage %s timed out after %d s)" % (",".join(stage), STAGE_TIMEOUT_S))
            timed_out = True
            break
        for line in r.stdout.splitlines():
            m = re.match(r"^\s*\d+/\d+\s+\S+ / (\S+)\s+(FAIL|TIMEOUT|ERROR|UNEXPECTEDPASS)\b", line)
            name = m and m.group(1) + ("" if m.group(2) == "FAIL" else " (" + m.group(2) + ")")
            if m and name not in failed:  # meson lists a failure twice: as it runs and in its summary
                failed.append(name)
        if r.returncode != 0 and not failed:
            failed.append("(meson test exited %d)" % r.returncode)
        if failed and not lines:
            lines = failure_lines(r.stdout)
        if failed and stop_at_first:
            break
    return failed, lines, timed_out


def apply_edits(tree, edits):
    """Applies the edits; returns {path: original text}, or raises ValueError when stale."""
    originals, texts = {}, {}
    for rel, old, new in edits:
        path = os.path.join(tree, rel)
        if rel not in texts:
            with open(path, encoding="utf-8") as f:
                texts[rel] = f.read()
            originals[rel] = texts[rel]
        n = texts[rel].count(old)
        if n != 1:
            raise ValueError("%s: the text to replace occurs %d times (expected once): %r" % (rel, n, old[:60]))
        texts[rel] = texts[rel].replace(old, new)
    for rel, text in texts.items():
        with open(os.path.join(tree, rel), "w", encoding="utf-8") as f:
            f.write(text)
    return originals


def restore(tree, originals):
    for rel, text in originals.items():
        with open(os.path.join(tree, rel), "w", encoding="utf-8") as f:
            f.write(text)


def stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt


def main():
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", choices=["full", "short"], default="full")
    ap.add_argument("--only", default="")
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--all-tests", action="store_true")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy and print its path")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--check-current", metavar="SRC",
                    help="only check that every edit applies to the source tree SRC (no build); exit 1 if any is stale")
    args = ap.parse_args()

    if args.check_current:
        stale = []
        for m in MUTATIONS:
            texts = {}
            for rel, old, new in m["edits"]:
                if rel not in texts:
                    with open(os.path.join(args.check_current, rel), encoding="utf-8") as f:
                        texts[rel] = f.read()
                n = texts[rel].count(old)
                if n != 1:
                    stale.append("%s: %s: the text to replace occurs %d times (expected once): %r" %
                                 (m["id"], rel, n, old[:60]))
                    break
                texts[rel] = texts[rel].replace(old, new)
        print("\n".join(stale) if stale else "all %d mutations apply to the current source" % len(MUTATIONS))
        return 1 if stale else 0

    muts = MUTATIONS
    if args.only:
        wanted = args.only.split(",")
        unknown = [w for w in wanted if w not in {m["id"] for m in MUTATIONS}]
        if unknown:
            sys.exit("run_mutations: unknown mutation id(s): " + ", ".join(unknown))
        muts = [m for m in MUTATIONS if m["id"] in wanted]
    if 0 < args.sample < len(muts):
        picked = set(random.Random(args.seed).sample(range(len(muts)), args.sample))
        muts = [m for i, m in enumerate(muts) if i in picked]
    if args.list:
        for m in muts:
            print("%-30s %s" % (m["id"], m["what"]))
        return 0

    t_start = time.time()
    scratch = tempfile.mkdtemp(prefix="fa-mutation-")
    # mkdtemp makes it 0700; cli-safety runs one case as user nobody (when run as root), who must
    # reach the tool inside: a copy it cannot enter would fail that test for every fault
    os.chmod(scratch, 0o755)
    tree, build = os.path.join(scratch, "src"), os.path.join(scratch, "build")
    try:
        copy_tree(tree)
        setup = run(["meson", "setup", build, "-Dcuda=disabled", "-Dhip=disabled", "-Dopencl=disabled",
                     "-Dwerror=true", "-Dbench=false", "-Dconformance_grid=" + args.grid], cwd=tree)
        if setup.returncode != 0:
            print(setup.stdout)
            sys.exit("run_mutations: meson setup failed")
        b = run(["ninja", "-C", build])
        if b.returncode != 0:
            print(b.stdout[-4000:])
            sys.exit("run_mutations: the unmodified copy does not build")
        stages = test_stages(build)
        print("run_mutations: %d mutations, conformance grid %s, tests in stages: %s" %
              (len(muts), args.grid, " | ".join(" ".join(s) for s in stages)), flush=True)
        if not args.no_baseline:
            t0 = time.time()
            failed, lines, _ = run_suite(build, stages, stop_at_first=False)
            if failed:
                print("\n".join(lines))
                sys.exit("run_mutations: the unmodified copy fails %s; no mutation can be judged" % ", ".join(failed))
            print("baseline (no fault): every test passes (%.0f s)" % (time.time() - t0), flush=True)

        results = []
        for m in muts:
            t0 = time.time()
            try:
                originals = apply_edits(tree, m["edits"])
            except ValueError as e:
                results.append((m["id"], "STALE", str(e), [], 0.0))
                print("%-30s STALE  %s" % (m["id"], e), flush=True)
                continue
            try:
                b = run(["ninja", "-C", build])
                if b.returncode != 0:
                    verdict, failed, lines = "NOBUILD", [], failure_lines(b.stdout)
                else:
                    failed, lines, timed_out = run_suite(build, stages, stop_at_first=not args.all_tests)
                    verdict = ("TIMEOUT" if timed_out else "CAUGHT") if failed else "MISSED"
            finally:
                restore(tree, originals)
            dt = time.time() - t0
            results.append((m["id"], verdict, ", ".join(failed), lines, dt))
            print("%-30s %-7s %5.0f s  %s" % (m["id"], verdict, dt, ", ".join(failed)), flush=True)
            for line in lines:
                print("%38s%s" % ("", line), flush=True)

        print("\n== mutation summary (%.0f s in all)" % (time.time() - t_start))
        print("%-30s %-8s %s" % ("mutation", "verdict", "caught by"))
        for mid, verdict, by, _, _ in results:
            print("%-30s %-8s %s" % (mid, verdict, by))
        bad = [r for r in results if r[1] not in ("CAUGHT", "TIMEOUT")]
        print("%d of %d mutations caught" % (len(results) - len(bad), len(results)))
        return 1 if bad else 0
    finally:
        if args.keep:
            print("scratch copy kept: " + scratch)
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
