#!/usr/bin/env python3
"""check_info_absent.py: the flashattn tool where the vendor runtimes are absent (simulated:
FLASHATTN_OPENCL_LIBRARY and FLASHATTN_HIP_MODULE name files that do not exist): `info` lists
every backend compiled in with the reason it is unavailable (in text and in --json), the default
backend is one that is present (CPU, or CUDA where there is a GPU), and a CPU run
with --check passes.

usage: check_info_absent.py FLASHATTN_TOOL"""
import json
import os
import re
import subprocess
import sys


def main(tool):
    env = dict(os.environ, FLASHATTN_OPENCL_LIBRARY="/nonexistent/libOpenCL.so.1",
               FLASHATTN_HIP_MODULE="/nonexistent/libflashattn-hip.so")
    env.pop("FLASHATTN_BACKEND", None)
    info = subprocess.run([tool, "info"], env=env, capture_output=True, text=True, timeout=120)
    print(info.stdout)
    failures = []
    if info.returncode != 0:
        failures.append(f"flashattn info exited {info.returncode}: {info.stderr}")
    compiled = re.search(r"backends compiled in \(\d+\):(.*)", info.stdout)
    backends = compiled.group(1).split() if compiled else []
    if "cpu" not in backends:
        failures.append("info lists no cpu backend")
    for b in backends:
        m = re.search(rf"^backend {b}\n    availability: (.*)$", info.stdout, re.M)
        if not m:
            failures.append(f"info gives no availability line for {b}")
            continue
        why = m.group(1)
        if b in ("opencl", "hip"):
            path = env["FLASHATTN_OPENCL_LIBRARY" if b == "opencl" else "FLASHATTN_HIP_MODULE"]
            if not why.startswith("library not found: ") or path not in why:
                failures.append(f"{b}: availability '{why}' does not say its library {path} was not found")
        elif b == "cpu" and not why.startswith("available: "):
            failures.append(f"cpu: availability '{why}'")
    # the default is a backend that is present: the CPU's, or CUDA's where there is a GPU
    default = re.search(r"^default backend: (\S+)", info.stdout, re.M)
    if not default or default.group(1) in ("opencl", "hip") or default.group(1) not in backends:
        failures.append(f"the default backend is {default.group(1) if default else 'not named'}")
    js = subprocess.run([tool, "info", "--json"], env=env, capture_output=True, text=True, timeout=120)
    try:
        entries = {e["name"]: e for e in json.loads(js.stdout)["backends"]}
    except (ValueError, KeyError, TypeError) as e:
        entries = {}
        failures.append(f"info --json: {e}: {js.stdout[:500]}")
    for b in backends:
        e = entries.get(b)
        if e is None:
            failures.append(f"info --json has no entry for {b}")
        elif b in ("opencl", "hip"):
            why = e.get("unavailable_reason") or ""
            if e.get("available") or not why.startswith("library not found: "):
                failures.append(f"{b}: info --json says available={e.get('available')}, reason '{why}'")
        elif b == "cpu" and not e.get("available"):
            failures.append(f"cpu: info --json says unavailable: {e.get('unavailable_reason')}")
    run = subprocess.run([tool, "run", "--backend", "cpu", "--seqlen-q", "128", "--seqlen-k", "128", "--heads", "2",
                          "--dim", "64", "--causal", "--backward", "--check"],
                         env=env, capture_output=True, text=True, timeout=300)
    print(run.stdout[-2000:])
    if run.returncode != 0:
        failures.append(f"a cpu run with --check exited {run.returncode}: {run.stderr[-2000:]}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
