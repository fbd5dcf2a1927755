#!/usr/bin/env python3
"""check_include_graph.py: the CUDA-language tree (backends/cuda) keeps its layers: common/ (device
helpers and the parameter blocks) includes nothing of a kernel family or of host/; a kernel family
(simt, sm80, sm90, mfma, decode, ring) includes common/ and itself only; host/ includes common/ and
host/ only; instances/ include families and common/ (and host/kernels.h for the entry points'
declarations). Every include inside the tree names its folder ("common/params.h"), so there is one
way to read it. Prints each violation and exits 1; prints the graph's edges with --edges.

usage: check_include_graph.py SOURCE_ROOT [--edges]"""
import os
import re
import sys

FAMILIES = {"simt", "sm80", "sm90", "mfma", "decode", "ring"}
ALLOWED = {
    "common": {"common"},
    "host": {"common", "host"},
    "instances": {"common", "host"} | FAMILIES,
    ".": {"common", "host", "ring"},  # backend.c, nccl.c
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def main():
    root = os.path.join(sys.argv[1], "backends", "cuda")
    core = {n for d in ("core", "include") for n in os.listdir(os.path.join(sys.argv[1], d))}
    bad, edges = [], set()
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            if not name.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            folder = os.path.dirname(rel) or "."
            for inc in INCLUDE.findall(open(path).read()):
                if "/" not in inc:
                    if inc not in core:
                        bad.append(f"{rel}: \"{inc}\" is neither a core header nor named by its folder")
                    continue
                target = inc.split("/")[0]
                if not os.path.exists(os.path.join(root, inc)):
                    bad.append(f"{rel}: \"{inc}\" does not exist under backends/cuda")
                    continue
                edges.add((folder, target))
                allowed = ALLOWED.get(folder, {"common", folder})
                if target != folder and target not in allowed:
                    bad.append(f"{rel}: includes \"{inc}\" ({folder} -> {target})")
    if "--edges" in sys.argv:
        for a, b in sorted(edges):
            print(f"{a} -> {b}")
    for line in bad:
        print(line)
    print(f"{len(bad)} violations" if bad else "the include graph keeps its layers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
