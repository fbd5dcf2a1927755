#!/usr/bin/env python3
"""Inspects the HIP backend's MFMA objects as built (one per dtype): the offload bundle in each
one's .hip_fatbin section must hold a code object for every -Dhip-archs target, and their gfx90a
code objects must contain the matrix-core instructions (v_mfma_f32_32x32x8f16 for fp16,
v_mfma_f32_32x32x8bf16_1k for bf16) with no VGPR spills. Exit 77 (meson: SKIP) when gfx90a is not
among the targets.

usage: check_isa.py ARCHS OBJCOPY BUNDLER OBJDUMP READOBJ OBJECT..."""
import os
import re
import subprocess
import sys
import tempfile


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("check_isa: %s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return r.stdout


def inspect(obj, archs, objcopy, bundler, objdump, readobj, counts):
    """Adds obj's gfx90a MFMA instructions to counts; exits on a missing target or a spill."""
    with tempfile.TemporaryDirectory() as tmp:
        fat = os.path.join(tmp, "fatbin")
        run([objcopy, "-O", "binary", "--only-section=.hip_fatbin", obj, fat])
        if os.path.getsize(fat) == 0:
            sys.exit("check_isa: %s has no .hip_fatbin section" % obj)
        bundles = run([bundler, "--list", "--type=o", "--input=" + fat]).split()
        print("%s: offload bundle entries: %s" % (os.path.basename(obj), ", ".join(bundles)))
        for a in archs:
            if not any(b.endswith("--" + a) for b in bundles):
                sys.exit("check_isa: no code object for %s in %s" % (a, obj))
        target = next(b for b in bundles if b.endswith("--gfx90a"))
        co = os.path.join(tmp, "gfx90a.co")
        run([bundler, "--unbundle", "--type=o", "--input=" + fat, "--targets=" + target, "--output=" + co])
        asm = run([objdump, "-d", "--mcpu=gfx90a", co])
        for m in re.finditer(r"\b(v_mfma_\w+)", asm):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
        notes = run([readobj, "--notes", co])
        kernels = re.findall(r"\.name:\s+(\S+)", notes)
        vgpr = [int(x) for x in re.findall(r"\.vgpr_count:\s+(\d+)", notes)]
        spills = [int(x) for x in re.findall(r"\.vgpr_spill_count:\s+(\d+)", notes)]
        for k, v, s in zip(kernels, vgpr, spills):
            print("  %s: %d VGPRs (incl. AGPRs), %d spilled" % (k, v, s))
        if not kernels or any(spills):
            sys.exit("check_isa: kernel metadata missing or VGPRs spilled in %s" % obj)


def main():
    archs, objcopy, bundler, objdump, readobj = sys.argv[1:6]
    objects = sys.argv[6:]
    archs = [a for a in archs.split(";") if a]
    if "gfx90a" not in archs:
        print("SKIP: gfx90a is not among -Dhip-archs (%s): no MFMA code object to inspect" % ";".join(archs))
        return 77
    if not objects:
        sys.exit("check_isa: no objects given")
    counts = {}
    for obj in objects:
        inspect(obj, archs, objcopy, bundler, objdump, readobj, counts)
    print("gfx90a MFMA instructions:", ", ".join("%s x%d" % kv for kv in sorted(counts.items())) or "none")
    for need in ("v_mfma_f32_32x32x8f16", "v_mfma_f32_32x32x8bf16_1k"):
        if counts.get(need, 0) == 0:
            sys.exit("check_isa: %s missing from the gfx90a code objects" % need)
    print("PASS: gfx90a code objects carry the MFMA forward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
