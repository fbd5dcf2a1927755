#!/usr/bin/env python3
"""compare_sass.py: proves with the compiler that two builds of the CUDA kernels hold the same machine
code: every kernel's SASS (instructions and their encodings, `cuobjdump -sass`) and resource usage
(registers, stack, shared and local memory, `cuobjdump -res-usage`), per architecture, compared
by kernel name. For moves and renames of the source tree: names are demangled and the kernels'
namespaces removed before comparing (NAMESPACES below lists every namespace the tree has used), so
a kernel that moved namespace is compared with itself. A kernel instantiated in several objects
counts once: the build holds the same distinct codes of it before and after (a kernel that two
objects compile for different targets of one architecture may have two).

usage: compare_sass.py BEFORE AFTER [--cuobjdump PATH] [--report FILE]
BEFORE, AFTER: build folders (every *.o under backends/cuda/ is read) or object files.
Prints one line per architecture and every difference; exit status 0 when the kernels are the
same, 1 otherwise."""
import argparse
import collections
import hashlib
import os
import re
import shutil
import subprocess
import sys

# namespaces whose names differ between layouts of the tree, longest first
NAMESPACES = ["fa_gpu::sm80::", "fa_gpu::sm90::", "fa_gpu::simt::", "fa_gpu::decode::", "fa_gpu::mfma::",
              "fa_gpu::ring::", "(anonymous namespace)::",
              "fa_portable_cuda::kv::", "fa_portable_cuda::", "fa_sm80::", "fa_sm90::", "fa_mfma::", "fa_gpu::",
              "kv::"]
MANGLED = re.compile(r"_Z[\w$]+")


def objects(path):
    if os.path.isfile(path):
        return [path]
    found = sorted(os.path.join(d, n) for d, _, names in os.walk(os.path.join(path, "backends", "cuda"))
                   for n in names if n.endswith(".o"))  # meson names objects of ../ sources ".._*.o"
    if not found:
        sys.exit(f"compare_sass.py: no objects under {path}/backends/cuda")
    return found


def demangle_all(names):
    names = sorted(set(names))
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True, check=True)
    return dict(zip(names, out.stdout.splitlines()))


def normalise(name, demangled):
    s = MANGLED.sub(lambda m: demangled.get(m.group(0), m.group(0)), name)
    for ns in NAMESPACES:
        s = s.replace(ns, "")
    return s


def parse_sass(text):
    """{(arch, mangled name): [body lines]}"""
    funcs, arch, name = {}, None, None
    for line in text.splitlines():
        m = re.match(r"\s*code for (sm_\w+)", line)
        if m:
            arch, name = m.group(1), None
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            funcs[(arch, name)] = []
            continue
        if line.startswith("Fatbin") or line.startswith("arch = "):
            name = None
            continue
        if name is not None and line.strip():
            funcs[(arch, name)].append(" ".join(line.split()))  # the columns' padding follows the names
    return funcs


def parse_usage(text):
    """{(arch, mangled name): usage line}"""
    usage, arch, name = {}, None, None
    for line in text.splitlines():
        m = re.match(r"arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
            continue
        m = re.match(r"\s*Function (\S+):\s*$", line)
        if m:
            name = m.group(1)
            continue
        if name is not None and line.strip():
            usage[(arch, name)] = " ".join(line.split())
            name = None
    return usage


def kernels(path, cuobjdump):
    """{(arch, normalised name): set of fingerprints}, and the fingerprint's text for reports"""
    raw = []
    for obj in objects(path):
        sass = parse_sass(subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True, check=True).stdout)
        usage = parse_usage(subprocess.run([cuobjdump, "-res-usage", obj], capture_output=True, text=True,
                                           check=True).stdout)
        for key, body in sass.items():
            raw.append((key, body, usage.get(key, "")))
    names = set()
    for (arch, name), body, _ in raw:
        names.add(name)
        for line in body:
            names.update(MANGLED.findall(line))
    demangled = demangle_all(names)
    out = collections.defaultdict(dict)
    for (arch, name), body, use in raw:
        text = "\n".join(MANGLED.sub(lambda m: normalise(m.group(0), demangled), line) for line in body)
        code = hashlib.sha256(text.encode()).hexdigest()[:16]
        digest = hashlib.sha256((use + "\n" + text).encode()).hexdigest()[:16]
        out[(arch, normalise(name, demangled))][digest] = (code, use, len(body))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    ap.add_argument("--report", help="also write the report to this file")
    args = ap.parse_args()
    before, after = kernels(args.before, args.cuobjdump), kernels(args.after, args.cuobjdump)
    lines, failed = [], False
    for arch in sorted({a for a, _ in before} | {a for a, _ in after}):
        b = {n: v for (a, n), v in before.items() if a == arch}
        a = {n: v for (x, n), v in after.items() if x == arch}
        same = sum(1 for n in b if n in a and set(b[n]) == set(a[n]))
        lines.append(f"{arch}: {len(b)} kernels before, {len(a)} after, {same} with identical SASS and resource usage")
        for n in sorted(set(b) | set(a)):
            if n not in a:
                lines.append(f"  only before: {n}")
            elif n not in b:
                lines.append(f"  only after:  {n}")
            elif set(b[n]) != set(a[n]):
                if {v[0] for v in b[n].values()} == {v[0] for v in a[n].values()}:
                    what = "instructions identical, resource usage differs"
                else:
                    what = "instructions differ"
                use_b = sorted({v[1] for v in b[n].values()})
                use_a = sorted({v[1] for v in a[n].values()})
                lines.append(f"  differs:     {n}: {what}: before {use_b}, after {use_a}")
            else:
                continue
            failed = True
    lines.append("identical" if not failed else "DIFFERENT")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
