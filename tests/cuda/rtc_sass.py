#!/usr/bin/env python3
"""rtc_sass.py: NVRTC against nvcc, kernel by kernel. Compiles kernels of each kernel family (simt,
sm80, decode, sm90, ring: FAMILIES below, each through its root header, as host/rtc_compiler.c does) with
NVRTC (libnvrtc opened with ctypes, as a run-time backend would dlopen it) by name expression, for
each of the family's architectures, from the source tree alone: no include path to the toolkit
(common/rtc_prelude.cuh stands in for its headers); then compares each kernel's SASS and resource
usage (`cuobjdump`, parsed as compare_sass.py parses them) with the kernel of the same mangled name
(NVRTC's lowered name) in nvcc's objects.

usage: rtc_sass.py SOURCE_ROOT REFERENCE... [--family F]... [--arch sm_80]... [--sample | --all | --kernel EXPR...]
                   [--nvrtc LIB] [--cuobjdump PATH] [--option OPT]... [--keep DIR] [--expect-shared-differences]
SOURCE_ROOT: the repository. REFERENCE: nvcc's build folders (every *.o under backends/cuda/),
object files or static libraries. An NVRTC target with an arch-specific letter (sm_90a) is compared
with the reference's plain architecture (sm_90) where the reference has no code of its own for it
(the SIMT kernels ship sm_90 machine code built from compute_80 PTX). The `.headerflags` line, which
names the virtual architecture the code came from, is left out of the instructions and printed.

Families: every one (the default) or each --family; architectures: the family's (FAMILIES) unless
--arch names them (the sm80, decode and ring kernels are compared for sm_80 only: nvcc builds their sm_90
code from compute_80 PTX, where NVRTC's sm_90a follows __CUDA_ARCH__ 900; the sm90 kernels exist for
sm_90a alone). Kernels: SIMT: every instance instances/simt_*.cu instantiates (--all), else a sample
of each storage type, both directions and the three head-dim buckets (--sample, the default); the
other families: every kernel of the family that the reference holds for the architecture (--all:
its namespace, and for sm80 and sm90 common/backward_elementwise.cuh's fa_gpu::dsum_kernel and
fa_gpu::dq_convert_kernel), else a few (FAMILY_SAMPLE); --kernel: these name expressions, in the
one --family given (simt when none is). Exit status: 0 when every
kernel has identical SASS and resource usage, 1 when one differs or NVRTC fails, 77 (meson's skip) when
NVRTC or cuobjdump is missing or the reference holds no machine code of the kernels for any --arch.

Found with NVRTC 13.0 and nvcc 13.0: the kernels without shared memory (dsum_kernel, the decode
family's check, append and combine kernels, the ring kernels) are identical; every kernel with shared
memory (static, or dynamic only, as the sm80 kernels': their SASS reads it) differs, because NVRTC addresses shared memory with 64-bit registers
(`mov.u64 %rd, <__shared__ variable>`) where nvcc's cicc uses 32-bit ones; a three-line kernel with
one __shared__ array shows it, and no NVRTC option found changes it. --expect-shared-differences
accepts exactly those differences (see its help)."""
import argparse
import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_sass  # noqa: E402  (parse_sass, parse_usage, demangle_all, normalise)

SKIP = 77
# the options meson passes nvcc for these kernels that reach the device code (kernel_args: -std=c++17
# -O3, which is also NVRTC's optimisation level; -DNDEBUG from buildtype=release; the host-compiler
# flags do not apply); nvcc's defaults for -fmad, -ftz, -prec-div, -prec-sqrt are NVRTC's too
NVRTC_OPTIONS = ["-std=c++17", "-DNDEBUG"]
STORES = {"f32": "fa_gpu::store_f32", "f16": "fa_gpu::store_f16", "bf16": "fa_gpu::store_bf16"}
SAMPLE = [  # (launcher, store, head-dim bucket, MOD): each dtype, both directions, each bucket, MOD on and off
    ("forward", "f16", 64, False),
    ("forward", "bf16", 128, True),
    ("forward", "f32", 256, False),
    ("backward", "f16", 128, True),
    ("backward", "bf16", 64, False),
]
FAMILIES = {  # family: (root header, architectures compared by default, namespace)
    "simt": ("simt/kernels.cuh", ["sm_80", "sm_90a"], "fa_gpu::simt::"),
    "sm80": ("sm80/kernels_device.cuh", ["sm_80"], "fa_gpu::sm80::"),
    "decode": ("decode/kernels_device.cuh", ["sm_80"], "fa_gpu::decode::"),
    "sm90": ("sm90/kernels_device.cuh", ["sm_90a"], "fa_gpu::sm90::"),
    "ring": ("ring/ring_kernels.cuh", ["sm_80"], "fa_gpu::ring::"),
}
SHARED = {"sm80": ("fa_gpu::dsum_kernel<", "fa_gpu::dq_convert_kernel<"),
          "sm90": ("fa_gpu::dsum_kernel<", "fa_gpu::dq_convert_kernel<")}
FAMILY_SAMPLE = {  # each: a forward or decode kernel with shared memory, a smaller one, one without MOD
    "sm80": ["fa_gpu::sm80::forward_kernel<__nv_bfloat16, 128, true, 0, false>",
             "fa_gpu::sm80::bwd_kernel<__half, 64, true, 1, false>", "fa_gpu::dsum_kernel<__nv_bfloat16>"],
    "decode": ["fa_gpu::decode::decode_kernel<fa_gpu::store_bf16, 128, 4, true>",
               "fa_gpu::decode::decode_mma_kernel<fa_gpu::store_f16, 64, 2, 8>",
               "fa_gpu::decode::check_kernel<fa_gpu::store_bf16>"],
    "sm90": ["fa_gpu::sm90::ws_forward_kernel<__nv_bfloat16, 128, false, true>", "fa_gpu::dsum_kernel<__half>"],
    "ring": ["fa_gpu::ring::copy_kernel", "fa_gpu::ring::add_kernel", "fa_gpu::ring::merge_kernel"],
}


def family_instances(root):
    """[(launcher, store, D)] from the explicit instantiations in instances/simt_*.cu"""
    found = []
    pat = re.compile(r"launch_(forward|backward)<store_(\w+), (\d+)>")
    for path in sorted(glob.glob(os.path.join(root, "backends", "cuda", "instances", "simt_*.cu"))):
        found += [(m.group(1), m.group(2), int(m.group(3))) for m in pat.finditer(open(path).read())]
    return found


def reference_kernels(ref, family, arch):
    """name expressions of the family's kernels that the reference holds for arch, else for its plain
    architecture (sm_90 for sm_90a: the SIMT kernels' sm_90 code comes from compute_80 PTX)"""
    _, _, ns = FAMILIES[family]
    for a in dict.fromkeys([arch, arch.rstrip("abf")]):
        names = []
        for m, d in compare_sass.demangle_all({m for x, m in ref if x == a}).items():
            expr = re.sub(r"^void ", "", d)
            expr = expr[:expr.rindex("(")] if expr.endswith(")") else expr
            if expr.startswith(ns) or expr.startswith(SHARED.get(family, ())):
                names.append(expr)
        if names:
            return sorted(names)
    return []


def kernels_of(launcher, store, d, mods=(False, True)):
    """the kernels a launcher instance launches (simt/forward.cuh, simt/backward.cuh), as name expressions"""
    s = STORES[store]
    b = lambda m: "true" if m else "false"  # noqa: E731
    if launcher == "forward":
        return [f"fa_gpu::simt::forward_kernel<{s}, {d}, {b(m)}>" for m in mods]
    names = [f"fa_gpu::simt::dsum_kernel<{s}>", "fa_gpu::simt::dsink_kernel<fa_gpu::THREADS>"]
    for m in mods:
        names += [f"fa_gpu::simt::dkdv_kernel<{s}, {d}, {b(m)}>", f"fa_gpu::simt::dq_kernel<{s}, {d}, {b(m)}>"]
    return names


class Nvrtc:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        self.lib.nvrtcGetLoweredName.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)]
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.version = f"{major.value}.{minor.value}"

    def check(self, r, what):
        if r:
            raise RuntimeError(f"{what}: {self.lib.nvrtcGetErrorString(r).decode()}")

    def compile(self, source, options, names):
        """(cubin bytes, {name expression: lowered name}, seconds); RuntimeError with the log on failure"""
        lib, prog = self.lib, ctypes.c_void_p()
        self.check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"rtc.cu", 0, None, None), "create")
        try:
            for n in names:
                self.check(lib.nvrtcAddNameExpression(prog, n.encode()), n)
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            t0 = time.monotonic()
            r = lib.nvrtcCompileProgram(prog, len(options), opts)
            seconds = time.monotonic() - t0
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            if r:
                raise RuntimeError(f"nvrtcCompileProgram {' '.join(options)}:\n{log.value.decode()}")
            lowered = {}
            for n in names:
                low = ctypes.c_char_p()
                self.check(lib.nvrtcGetLoweredName(prog, n.encode(), ctypes.byref(low)), n)
                lowered[n] = low.value.decode()
            self.check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "cubin size")
            buf = ctypes.create_string_buffer(size.value)
            self.check(lib.nvrtcGetCUBIN(prog, buf), "cubin")
            return buf.raw, lowered, seconds
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


def dump(path, cuobjdump, functions=None):
    """{(arch, mangled name): (headerflags, instruction lines, usage line)}, of the named functions only if given
    (a library's other kernels are not disassembled)"""
    only = ["-fun", ",".join(functions)] if functions else []
    sass = compare_sass.parse_sass(subprocess.run([cuobjdump, "-sass"] + only + [path], capture_output=True,
                                                  text=True, check=True).stdout)
    usage = compare_sass.parse_usage(subprocess.run([cuobjdump, "-res-usage"] + only + [path], capture_output=True,
                                                    text=True, check=True).stdout)
    out = {}
    for key, body in sass.items():
        flags = [line for line in body if line.startswith(".headerflags")]
        # a cubin's resource listing names no architecture: one cubin, one architecture
        out[key] = (flags[0] if flags else "", [line for line in body if not line.startswith(".headerflags")],
                    usage.get(key, usage.get((None, key[1]), "")))
    return out


def reference_objects(paths):
    found = []
    for p in paths:
        found += compare_sass.objects(p) if os.path.isdir(p) else [p]
    return found


# SASS that reads or writes shared memory (ld / st / ldmatrix / stmatrix / cp.async into it, atomics)
SHARED_OPS = re.compile(r"\b(LDS|STS|LDSM|STSM|LDGSTS|ATOMS)\b")


def uses_shared_memory(kernel):
    """whether a dump() entry uses shared memory: static (its usage line) or dynamic (its instructions)"""
    return "SHARED:0 " not in kernel[2] or any(SHARED_OPS.search(line) for line in kernel[1])


def compare(names, lowered, arch, path, ref, args):
    """(lines to print, expected differences, whether one is unexpected) for one family's cubin for arch"""
    # each kernel against the reference's code for arch, else for its plain architecture (above)
    ref_arch = {m: next((a for a in (arch, arch.rstrip("abf")) if (a, m) in ref), None) for m in lowered.values()}
    got = dump(path, args.cuobjdump)
    same, lines, expected = 0, [], []
    for n in names:
        mangled = lowered[n]
        mine = got.get((arch, mangled))
        theirs = ref.get((ref_arch[mangled], mangled))
        if mine is None or theirs is None:
            lines.append(f"  missing:  {n} ({'NVRTC' if mine is None else 'reference'} has no {mangled})")
            continue
        codes = {t[1] for t in theirs}
        if "\n".join(mine[1]) in codes and mine[2] in {t[2] for t in theirs}:
            same += 1
            continue
        what = "instructions identical, resource usage differs" if "\n".join(mine[1]) in codes \
            else "instructions differ"
        if args.expect_shared_differences and uses_shared_memory(mine):
            expected.append(f"  expected: {n} (shared memory): {what}")
            continue
        lines.append(f"  differs:  {n}: {what}: NVRTC [{mine[2]}] {len(mine[1])} lines; "
                     f"nvcc {sorted((t[2], t[1].count(chr(10)) + 1) for t in theirs)}")
    flags = sorted({got[(a, m)][0] for (a, m) in got if a == arch})
    ref_flags = sorted({t[0] for m, a in ref_arch.items() if a for t in ref[(a, m)]})
    head = (f"{same} of {len(names)} kernels with identical SASS and resource usage, {len(expected)} differing "
            f"as expected; headerflags NVRTC {flags}, nvcc {ref_flags}")
    return [head] + expected + lines, bool(expected), bool(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root")
    ap.add_argument("reference", nargs="+")
    ap.add_argument("--family", action="append", choices=sorted(FAMILIES), help="this family (default: every one)")
    ap.add_argument("--arch", action="append", help="NVRTC target (default: the family's, FAMILIES)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="every kernel of the family (see above)")
    which.add_argument("--sample", action="store_true", help="the sample (default)")
    which.add_argument("--kernel", action="append", help="this name expression (repeatable; one --family)")
    ap.add_argument("--nvrtc", default=None, help="libnvrtc to open (default: libnvrtc.so, then libnvrtc.so.13)")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    ap.add_argument("--option", action="append", default=[], help="one more NVRTC option")
    ap.add_argument("--keep", help="write the cubins here")
    ap.add_argument("--expect-shared-differences", action="store_true",
                    help="NVRTC 13.0 addresses shared memory with 64-bit registers where nvcc uses 32-bit ones "
                         "(`mov.u64 %%rd, <shared variable>` in its PTX; no NVRTC option changes it), so the "
                         "kernels with shared memory (static, or dynamic: shared-memory instructions in their SASS) "
                         "differ: list their differences as expected, and still fail on "
                         "a difference in a kernel without shared memory, on a compile error, and when every "
                         "kernel is identical (the expectation is then stale)")
    args = ap.parse_args()
    families = args.family or (["simt"] if args.kernel else list(FAMILIES))
    if args.kernel and len(families) != 1:
        ap.error("--kernel names the kernels of one --family")

    nvrtc = None
    for lib in [args.nvrtc] if args.nvrtc else ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"]:
        try:
            nvrtc = Nvrtc(lib)
            break
        except OSError:
            continue
    if nvrtc is None:
        print("SKIP: libnvrtc not found (LD_LIBRARY_PATH, or --nvrtc)")
        return SKIP
    if not (os.path.isfile(args.cuobjdump) or shutil.which(args.cuobjdump)):
        print(f"SKIP: no cuobjdump ({args.cuobjdump}; --cuobjdump)")
        return SKIP

    objects = reference_objects(args.reference)
    ref = {}

    def read_reference(functions=None):
        for obj in objects:
            for key, val in dump(obj, args.cuobjdump, functions).items():
                ref.setdefault(key, set()).add((val[0], "\n".join(val[1]), val[2]))

    jobs = []  # (family, arch, name expressions)
    if args.all:
        read_reference()  # every kernel: the non-SIMT families' lists come from it
    for family in families:
        for arch in args.arch or FAMILIES[family][1]:
            if args.kernel:
                names = args.kernel
            elif family == "simt":
                insts = family_instances(args.root) if args.all else None
                names = [n for inst in insts for n in kernels_of(*inst)] if args.all else \
                    [n for launcher, st, d, mod in SAMPLE for n in kernels_of(launcher, st, d, (mod,))]
            else:
                names = reference_kernels(ref, family, arch) if args.all else FAMILY_SAMPLE[family]
            if names:
                jobs.append((family, arch, list(dict.fromkeys(names))))

    includes = ["-I" + os.path.join(args.root, "backends", "cuda"), "-I" + os.path.join(args.root, "core")]
    print(f"NVRTC {nvrtc.version}; {sum(len(n) for _, _, n in jobs)} kernels of {', '.join(families)}; options "
          f"{' '.join(NVRTC_OPTIONS + args.option)}")
    tmp = args.keep or tempfile.mkdtemp(prefix="rtc_sass.")
    os.makedirs(tmp, exist_ok=True)
    compiled = []
    for family, arch, names in jobs:  # first every compile: NVRTC must take the sources whatever the reference holds
        source = f'#include "{FAMILIES[family][0]}"\n'
        try:
            cubin, lowered, seconds = nvrtc.compile(source, [f"-arch={arch}"] + NVRTC_OPTIONS + args.option + includes,
                                                    names)
        except RuntimeError as e:
            print(f"{family} {arch}: NVRTC failed: {e}")
            return 1
        path = os.path.join(tmp, f"{family}.{arch}.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        compiled.append((family, arch, names, path, lowered, seconds))
    if not args.all:
        read_reference(sorted({m for c in compiled for m in c[4].values()}))
    ref_archs = {a for a, _ in ref}

    failed, skipped, any_expected = False, [], False
    for family, arch, names, path, lowered, seconds in compiled:
        if arch not in ref_archs and arch.rstrip("abf") not in ref_archs:
            skipped.append(f"{family} {arch}: compiled by NVRTC in {seconds:.1f} s, not compared: the reference has "
                           f"no machine code of these kernels for it (it has {sorted(ref_archs) or 'none'}; a "
                           "-Dcuda-ptx-only=true build has none)")
            continue
        lines, expected, differs = compare(names, lowered, arch, path, ref, args)
        print(f"{family} {arch}: NVRTC {seconds:.1f} s; " + lines[0])
        for line in lines[1:]:
            print(line)
        failed |= differs
        any_expected |= expected
    for line in skipped:
        print(line)
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    if failed:
        print("DIFFERENT")
        return 1
    if skipped and len(skipped) == len(compiled):
        print("SKIP: nothing compared")
        return SKIP
    if args.expect_shared_differences and not any_expected:
        print("every kernel identical: --expect-shared-differences is stale, drop it")
        return 1
    print("identical except the expected differences" if any_expected else "identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
