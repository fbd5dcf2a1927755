#!/usr/bin/env python3
"""build_profile.py: where a build's time goes, from ninja's log (BUILD/.ninja_log): each compile's
duration, summed by kernel family (sm80 forward, sm80 backward, sm90, simt, decode, HIP, the
rest), and the longest compiles. Durations are wall time per job: with more jobs than cores
(ninja's default is cores + 2) each job's time includes waiting for a core, so the sums are the
jobs' shares, not CPU seconds; the build's own wall time is the span of the log.

usage: python3 bench/build_profile.py BUILD [--top N]"""
import argparse
import os
import sys

FAMILIES = (
    ("HIP", ("backends/hip/",)),
    ("sm80 backward", ("sm80_bwd",)),
    ("sm80 forward and dispatch", ("sm80_fwd", "sm80_dispatch")),
    ("sm90", ("sm90",)),
    ("decode", ("decode",)),
    ("simt", ("simt",)),
)


def family(output):
    for name, keys in FAMILIES:
        if any(k in output for k in keys):
            return name
    return "the rest"


def read_log(path):
    """The last entry of each output (a rebuilt file appears twice): (start_ms, end_ms, output)."""
    entries = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4:
                continue
            entries[parts[3]] = (int(parts[0]), int(parts[1]), parts[3])
    return list(entries.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    log = os.path.join(args.build, ".ninja_log")
    entries = read_log(log)
    if not entries:
        sys.exit(f"{log}: no entries")
    span = (max(e[1] for e in entries) - min(e[0] for e in entries)) / 1000
    total = sum(e[1] - e[0] for e in entries) / 1000
    print(f"# {log}: {len(entries)} outputs, wall span {span:.0f} s, job time {total:.0f} s")
    sums = {}
    for start, end, out in entries:
        sums[family(out)] = sums.get(family(out), 0) + (end - start) / 1000
    print("| family | job time (s) | share |\n|---|---|---|")
    for name, t in sorted(sums.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {t:.0f} | {100 * t / total:.0f}% |")
    print(f"\nlongest {args.top}:")
    for start, end, out in sorted(entries, key=lambda e: e[0] - e[1])[:args.top]:
        print(f"  {(end - start) / 1000:6.0f} s  {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
