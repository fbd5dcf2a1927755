#!/usr/bin/env python3
"""ncu_stalls.py: where a kernel's warps wait, from Nsight Compute's SASS source page
(`ncu --import REPORT --page source --csv --print-source sass > CSV`): the stall-sampling share
of each reason, the TOP instructions with the most samples (address, samples, share, SASS, the two
largest reasons), and, given ORDER, the whole kernel in program order with each instruction's
samples (and, where the page has them, the warp-level instructions executed there). Used by
profile_gpu.sh and decode_profile_gpu.sh.

usage: python3 bench/device/ncu_stalls.py CSV [TOP] [ORDER]
"""
import csv
import sys


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    rows = list(csv.reader(open(sys.argv[1], errors="replace")))
    top_n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    head = next((i for i, r in enumerate(rows) if any("Warp Stall Sampling (All Samples)" in c for c in r)), None)
    if head is None:
        print("no stall sampling columns; first lines:")
        print("\n".join(",".join(r)[:200] for r in rows[:5]))
        return
    cols = rows[head]
    src = next(i for i, c in enumerate(cols) if c.strip() in ("Source", "# Source") or c.endswith("Source"))
    addr = next((i for i, c in enumerate(cols) if "Address" in c), None)
    allc = next(i for i, c in enumerate(cols) if "Warp Stall Sampling (All Samples)" in c)
    execd = next((i for i, c in enumerate(cols) if c.strip() == "Instructions Executed"), None)
    reasons = [i for i, c in enumerate(cols) if c.startswith("stall_") and "Not Issued" not in c]
    body = [r for r in rows[head + 1:] if len(r) == len(cols)]
    total = sum(num(r[allc]) for r in body) or 1.0

    def where(r):
        return r[addr] if addr is not None else ""

    def why(r):
        top = sorted(((num(r[i]), cols[i]) for i in reasons), reverse=True)[:2]
        return " ".join(f"{n}={v:.0f}" for v, n in top if v > 0)

    print(f"{len(body)} instructions, {total:.0f} stall samples; by reason:")
    for v, n in sorted(((sum(num(r[i]) for r in body), cols[i]) for i in reasons), reverse=True)[:12]:
        print(f"  {n:28s} {100 * v / total:5.1f}%")
    print("top instructions:")
    for r in sorted(body, key=lambda r: -num(r[allc]))[:top_n]:
        print(f"{where(r):>8} {num(r[allc]):8.0f} {100 * num(r[allc]) / total:5.1f}%  {r[src].strip()[:60]:60s}  {why(r)}")
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            for r in body:
                ran = f"{num(r[execd]):9.0f} " if execd is not None else ""
                f.write(f"{where(r):>8} {ran}{num(r[allc]):7.0f}  {r[src].strip()[:80]:80s} {why(r)}\n")


if __name__ == "__main__":
    main()
