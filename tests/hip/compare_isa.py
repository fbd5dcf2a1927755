#!/usr/bin/env python3
"""Compares the HIP kernels hipRTC compiles (rtc_compile_check, from the source the module embeds)
with those hipcc built (the aot objects), without an AMD GPU:
  * coverage: the kernels in hipcc's gfx90a code objects, demangled, are exactly the name
    expressions rtc_compile_check compiles (--list), so the run-time path knows every instance the
    hipcc build ships, and no other;
  * machine code: the MFMA forward for gfx90a (the objects named mfma_fwd_*), kernel by kernel:
    hipRTC's has the matrix-core instructions, as many of each v_mfma as hipcc's, no VGPR spills,
    and an instruction count within 5 % of hipcc's. The differing lines are counted and printed:
    hipRTC (through ROCm's comgr) optimizes to bitcode and then compiles that bitcode, where hipcc
    runs one pipeline, so register allocation and scheduling may differ (ROCm 5.2: the fp16 and
    bf16 d 64 kernels within one instruction of hipcc's, bf16 d 128 up to 5 % shorter).
Exit 77 (meson: SKIP) when gfx90a is not among the targets or hipRTC cannot be opened.

usage: compare_isa.py ARCHS OBJCOPY BUNDLER OBJDUMP READOBJ CXXFILT RTC_CHECK OBJECT..."""
import collections
import difflib
import os
import re
import subprocess
import sys
import tempfile


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        if r.returncode == 77:
            print(r.stdout.strip())
            sys.exit(77)
        sys.exit("compare_isa: %s failed (%d): %s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr.strip()))
    return r.stdout


def gfx90a_code_object(obj, objcopy, bundler, tmp):
    """obj's gfx90a code object (a file in tmp), unbundled from its .hip_fatbin section"""
    base = os.path.join(tmp, os.path.basename(obj))
    run([objcopy, "-O", "binary", "--only-section=.hip_fatbin", obj, base + ".fatbin"])
    if os.path.getsize(base + ".fatbin") == 0:
        return None  # host code alone (the dispatch files)
    bundles = run([bundler, "--list", "--type=o", "--input=" + base + ".fatbin"]).split()
    target = next((b for b in bundles if b.endswith("--gfx90a")), None)
    if target is None:
        sys.exit("compare_isa: no gfx90a code object in %s" % obj)
    run([bundler, "--unbundle", "--type=o", "--input=" + base + ".fatbin", "--targets=" + target,
         "--output=" + base + ".co"])
    return base + ".co"


def functions(objdump, co):
    """{kernel symbol: [instruction text]} of a code object's disassembly"""
    out, cur = {}, None
    for line in run([objdump, "-d", "--mcpu=gfx90a", co]).splitlines():
        m = re.match(r"^[0-9a-f]+ <(_Z\S*)>:", line)
        if m:
            cur = out.setdefault(m.group(1), [])
        elif re.match(r"^[0-9a-f]+ <", line):
            cur = None
        elif cur is not None and line.startswith("\t"):
            text = line.split("//")[0].strip()
            if text:
                cur.append(text)
    return out


def spills(readobj, co):
    notes = run([readobj, "--notes", co])
    return dict(zip(re.findall(r"\.name:\s+(\S+)", notes), map(int, re.findall(r"\.vgpr_spill_count:\s+(\d+)", notes))))


def main():
    archs, objcopy, bundler, objdump, readobj, cxxfilt, rtc_check = sys.argv[1:8]
    objects = sys.argv[8:]
    if "gfx90a" not in archs.split(";"):
        print("SKIP: gfx90a is not among -Dhip-archs (%s)" % archs)
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        hipcc = {}
        for obj in objects:
            co = gfx90a_code_object(obj, objcopy, bundler, tmp)
            if co is None:
                continue
            kernels = re.findall(r"\.name:\s+(\S+)", run([readobj, "--notes", co]))
            hipcc[obj] = (co, kernels)
        # coverage: hipcc's kernels by their demangled names against the run-time path's
        mangled = sorted({k for _, ks in hipcc.values() for k in ks})
        demangled = run([cxxfilt], input="\n".join(mangled) + "\n").splitlines()
        shipped = {re.sub(r"^void |\(.*\)$", "", d) for d in demangled}
        listed = set(run([rtc_check, "--list"]).split("\n")) - {""}
        print("hipcc's gfx90a kernels: %d; the run-time path's name expressions: %d" % (len(shipped), len(listed)))
        if shipped != listed:
            for name in sorted(shipped - listed):
                print("  shipped by hipcc, unknown to the run-time path: %s" % name)
            for name in sorted(listed - shipped):
                print("  named by the run-time path, not shipped by hipcc: %s" % name)
            sys.exit("compare_isa: the kernel sets differ")
        # machine code: the MFMA forward
        run([rtc_check, "gfx90a", tmp, "mfma"])
        rtc_co = os.path.join(tmp, "mfma-gfx90a.co")
        rtc = functions(objdump, rtc_co)
        rtc_spills = spills(readobj, rtc_co)
        failed = False
        compared = 0
        for obj, (co, kernels) in hipcc.items():
            if not os.path.basename(obj).startswith("hip_mfma_fwd_"):
                continue
            ref = functions(objdump, co)
            for k in kernels:
                a, b = ref.get(k, []), rtc.get(k, [])
                ma = collections.Counter(i.split()[0] for i in a if i.startswith("v_mfma"))
                mb = collections.Counter(i.split()[0] for i in b if i.startswith("v_mfma"))
                differing = sum(1 for d in difflib.unified_diff(a, b, lineterm="", n=0)
                                if d[:1] in "+-" and not d.startswith(("+++", "---")))
                ok = bool(b) and ma == mb and sum(mb.values()) > 0 and abs(len(a) - len(b)) <= len(a) // 20 and \
                    rtc_spills.get(k, 1) == 0
                print("%s %s: hipcc %d instructions, hipRTC %d, %d lines differ; v_mfma %s; VGPR spills %s" %
                      ("ok  " if ok else "FAIL", k, len(a), len(b), differing,
                       ", ".join("%s x%d" % kv for kv in sorted(mb.items())) or "none", rtc_spills.get(k, "?")))
                failed |= not ok
                compared += 1
        if compared == 0:
            sys.exit("compare_isa: no MFMA kernel compared")
        if failed:
            sys.exit("compare_isa: hipRTC's MFMA forward differs from hipcc's")
    print("PASS: hipRTC names every hipcc kernel; its gfx90a MFMA forward matches hipcc's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
