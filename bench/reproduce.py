#!/usr/bin/env python3
"""reproduce.py: the FlashAttention paper's figures (Dao et al. 2022) with this library's kernels,
as CSV files and, where matplotlib is installed, PNG plots in one output folder (docs/figures by
default). docs/reproduction.md sets each against the paper's claim.

Parts (--parts, comma-separated; default all that this machine can run):
  iomodel      (anywhere) the paper's IO model through `flashattn iomodel`: HBM bytes against block
               size at the paper's Figure 2 shape (seqlen 1024, d 64, 16 heads, batch 64, fp16) and
               against seqlen (d 64, M = 192 KiB), for standard attention, Algorithm 1 and query
               blocks outside.
  hbm          (CUDA GPU, ncu) measured DRAM bytes (dram__bytes_read.sum + dram__bytes_write.sum,
               --clock-control none) and duration of the forward kernel of each CUDA kernel family
               (FLASHATTN_CUDA_KERNELS=sm90 / sm80 / portable: different tile shapes) at the Figure 2
               shape, next to the IO model at those tiles.
  runtime      (CUDA GPU, torch) forward, backward and forward + backward time against seqlen 128 ...
               65536 (d 64, 16 heads, batch 16384 / seqlen, at least 1; bf16) for our dense kernels,
               our block-sparse kernels (butterfly mask, 128 x 128 blocks), PyTorch's flash (FA2) and
               cuDNN backends and standard attention (SDPA math) until it runs out of memory
               (the paper's Figure 3), and the achieved TFLOP/s beside a measured bf16 GEMM ceiling.
  memory       (CUDA GPU, torch) extra device memory of forward + backward against seqlen for the
               same set (ours: the library's stream-ordered pool high-water mark plus torch's).
  blocksparse  (CUDA GPU, torch) our forward + backward time against mask density, butterfly (the
               density set by the mask block size) and random (128 x 128 blocks), next to the ideal
               density x dense time; seqlen 4096, d 64.

usage: python3 bench/reproduce.py [--tool build/tools/flashattn] [--lib build/libflashattn.so]
                                  [--out docs/figures] [--parts iomodel,hbm,runtime,memory,blocksparse]
                                  [--max-seqlen 65536]
"""
import argparse
import csv
import math
import os
import shutil
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    print(f"wrote {path}", flush=True)


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        return None


def plot(out, name, title, xlabel, ylabel, series, logx=False, logy=False, note=None):
    """series: [(label, xs, ys)]; points with y None are skipped."""
    plt = pyplot()
    if plt is None:
        print(f"matplotlib not found: no {name}.png (the CSV has the numbers)", flush=True)
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, xs, ys in series:
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None and not (isinstance(y, float) and math.isnan(y))]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    if note:
        fig.text(0.01, 0.01, note, fontsize=7)
    fig.tight_layout()
    path = os.path.join(out, name + ".png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}", flush=True)


# ---------------------------------------------------------------- iomodel (anywhere)

def iomodel_sweep(tool, extra):
    proc = subprocess.run([tool, "iomodel"] + extra, capture_output=True, text=True, check=True)
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "block,standard_bytes,flash_alg1_bytes,flash_qouter_bytes", lines[0]
    return [[int(x) for x in line.split(",")] for line in lines[1:]]


def part_iomodel(args):
    shape = ["--batch", "64", "--heads", "16", "--seqlen-q", "1024", "--dim", "64", "--dtype", "fp16",
             "--onchip", str(192 * 1024)]
    blocks = [16, 32, 64, 128, 256, 512, 1024]
    rows = iomodel_sweep(args.tool, shape + ["--sweep", ",".join(map(str, blocks))])
    write_csv(os.path.join(args.out, "iomodel_blocksize.csv"),
              ["block", "standard_bytes", "flash_alg1_bytes", "flash_qouter_bytes"], rows)
    gib = 2.0 ** 30
    plot(args.out, "iomodel_blocksize",
         "IO model: HBM traffic vs block size (seqlen 1024, d 64, 16 heads, batch 64, fp16)",
         "block size B_r = B_c", "GiB read + written (model)",
         [("standard attention", blocks, [r[1] / gib for r in rows]),
          ("FlashAttention, Algorithm 1 (K/V outside)", blocks, [r[2] / gib for r in rows]),
          ("FlashAttention, query blocks outside (our kernels)", blocks, [r[3] / gib for r in rows])],
         logx=True, logy=True, note="flashattn iomodel --sweep (core/iomodel.c); forward only; caches not modelled")
    seqlens = [128 << i for i in range(10)]
    srows = []
    for n in seqlens:  # the paper's blocks from M = 192 KiB at d 64: B_r = 64, B_c = 192
        proc = subprocess.run([args.tool, "iomodel", "--seqlen-q", str(n), "--dim", "64", "--dtype", "fp16",
                               "--heads", "16", "--onchip", str(192 * 1024), "--csv"],
                              capture_output=True, text=True, check=True)
        head, line = proc.stdout.strip().splitlines()
        assert head == "block_q,block_k,standard_bytes,flash_alg1_bytes,flash_qouter_bytes", head
        srows.append([n] + [int(x) for x in line.split(",")])
    write_csv(os.path.join(args.out, "iomodel_seqlen.csv"),
              ["seqlen", "block_q", "block_k", "standard_bytes", "flash_alg1_bytes", "flash_qouter_bytes"], srows)
    bq, bk = srows[0][1], srows[0][2]
    plot(args.out, "iomodel_seqlen", "IO model: HBM traffic vs seqlen (d 64, 16 heads, fp16, M = 192 KiB)",
         "seqlen", "GiB read + written (model)",
         [("standard attention", seqlens, [r[3] / gib for r in srows]),
          (f"FlashAttention, Algorithm 1 (paper's blocks {bq} x {bk})", seqlens, [r[4] / gib for r in srows]),
          (f"FlashAttention, query blocks outside ({bq}-row blocks)", seqlens, [r[5] / gib for r in srows])],
         logx=True, logy=True, note="flashattn iomodel (core/iomodel.c); forward only; caches not modelled")


# ---------------------------------------------------------------- hbm (ncu)

def part_hbm(args):
    ncu = shutil.which("ncu")
    if not ncu:
        print("hbm: ncu not found, skipped", flush=True)
        return
    shape = ["--batch", "64", "--heads", "16", "--seqlen-q", "1024", "--dim", "64", "--dtype", "fp16"]
    rows = []
    for family in ("sm90", "sm80", "portable"):
        env = dict(os.environ, FLASHATTN_CUDA_KERNELS=family)
        info = subprocess.run([args.tool, "run", "--backend", "cuda", "--repeat", "1"] + shape, env=env,
                              capture_output=True, text=True)
        if info.returncode != 0:
            print(f"hbm: {family}: flashattn run failed: {info.stderr.strip()[:200]}", flush=True)
            continue
        kernel = next((l.split(":", 1)[1].strip() for l in info.stdout.splitlines() if l.startswith("kernel:")), "?")
        cmd = [ncu, "--clock-control", "none", "--csv", "--metrics",
               "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum", "-k", "regex:forward", "-c", "1",
               args.tool, "run", "--backend", "cuda", "--repeat", "1"] + shape
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        vals = {}
        for rec in csv.reader(proc.stdout.splitlines()):
            if len(rec) > 3 and rec[-3] in ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum"):
                unit, value = rec[-2], float(rec[-1].replace(",", ""))
                scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "nsecond": 1e-6, "usecond": 1e-3,
                         "msecond": 1.0}.get(unit, float("nan"))
                vals[rec[-3]] = value * scale
        if len(vals) < 3:
            print(f"hbm: {family}: no ncu metrics: {proc.stderr.strip()[:300]}", flush=True)
            continue
        rows.append([family, kernel, vals["dram__bytes_read.sum"], vals["dram__bytes_write.sum"],
                     vals["gpu__time_duration.sum"]])
    write_csv(os.path.join(args.out, "hbm_measured.csv"),
              ["kernels", "variant", "dram_read_bytes", "dram_write_bytes", "duration_ms"], rows)


# ---------------------------------------------------------------- torch parts (runtime, memory, blocksparse)

def torch_setup(args):
    sys.path.insert(0, HERE)
    import gpu_bench as gb  # the ctypes binding of include/flashattn.h and the timing helpers
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    lib = gb.Library(args.lib)
    gb.use_own_stream()
    return gb, torch, lib


def butterfly_mask(gb, lib, s, block):
    import ctypes as C
    m = gb.BlockMask()
    st = lib.lib.fa_block_mask_create(C.byref(m), 1, 1, s, s, block, block, 0, 1.0, 0)  # FA_BLOCK_BUTTERFLY
    if st != gb.FA_SUCCESS:
        raise RuntimeError("fa_block_mask_create failed")
    return m


def time_or_none(gb, fn):
    import torch
    try:
        return gb.bench(fn)
    except (RuntimeError, torch.OutOfMemoryError, gb.Unsupported):
        torch.cuda.empty_cache()
        return None


def part_runtime(args):
    gb, torch, lib = torch_setup(args)
    F, SDPBackend, sdpa_kernel = gb.F, gb.SDPBackend, gb.sdpa_kernel
    d, h, dt = 64, 16, torch.bfloat16
    rows = []
    seqlens = [s for s in (128 << i for i in range(10)) if s <= args.max_seqlen]
    for s in seqlens:
        b = max(1, 16384 // s)
        q, k, v, do, o, lse, dq, dk, dv = gb.make_inputs(b, s, h, d, dt)
        lib.bind_stream()
        res = {}
        fa, ba = lib.fwd_args(q, k, v, o, lse, False), lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False)
        res["ours"] = (time_or_none(gb, lambda: lib.forward(fa)), time_or_none(gb, lambda: lib.backward(ba)))
        mask = butterfly_mask(gb, lib, s, 128) if s >= 256 else None
        if mask is not None:
            fm = lib.fwd_args(q, k, v, o, lse, False, mask)
            bm = lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False, mask)
            res["ours_butterfly"] = (time_or_none(gb, lambda: lib.forward(fm)),
                                     time_or_none(gb, lambda: lib.backward(bm)))
            lib.free_mask(mask)
        qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
        dot = do.transpose(1, 2)
        for name, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("math", SDPBackend.MATH)):
            def fwd():
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(qt, kt, vt)

            tf = time_or_none(gb, fwd)
            tb = None
            if tf is not None:
                try:
                    out = fwd()
                    tb = time_or_none(gb, lambda: torch.autograd.grad(out, (qt, kt, vt), dot, retain_graph=True))
                    del out
                except (RuntimeError, torch.OutOfMemoryError):
                    torch.cuda.empty_cache()
            res[name] = (tf, tb)
        flop = 4.0 * b * h * s * s * d
        for name, (tf, tb) in res.items():
            rows.append([s, name, tf, tb, (tf + tb) if tf is not None and tb is not None else None,
                         flop / (tf * 1e-3) / 1e12 if tf else None, 2.5 * flop / (tb * 1e-3) / 1e12 if tb else None])
        print(f"runtime: seqlen {s} done", flush=True)
        del q, k, v, do, o, lse, dq, dk, dv, qt, kt, vt
        torch.cuda.empty_cache()
    a = torch.randn(8192, 8192, device="cuda", dtype=dt)
    ceiling = 2.0 * 8192 ** 3 / (gb.bench(lambda: a @ a) * 1e-3) / 1e12
    write_csv(os.path.join(args.out, "runtime.csv"),
              ["seqlen", "implementation", "fwd_ms", "bwd_ms", "fwd_bwd_ms", "fwd_tflops", "bwd_tflops"], rows)
    write_csv(os.path.join(args.out, "gemm_ceiling.csv"), ["what", "tflops"], [["bf16 8192^3 torch.matmul", ceiling]])
    names = {"ours": "flashattn (dense)", "ours_butterfly": "flashattn (butterfly block-sparse)",
             "fa2": "PyTorch flash (FA2)", "cudnn": "cuDNN", "math": "standard attention (SDPA math)"}
    for col, label in ((2, "forward"), (3, "backward"), (4, "forward + backward")):
        plot(args.out, "runtime_" + label.replace(" + ", "_").replace(" ", "_"),
             f"{label} time vs seqlen (bf16, d 64, 16 heads, batch 16384/seqlen)", "seqlen", "ms",
             [(names[n], [r[0] for r in rows if r[1] == n], [r[col] for r in rows if r[1] == n]) for n in names],
             logx=True, logy=True, note=torch.cuda.get_device_name())
    plot(args.out, "tflops", f"achieved forward TFLOP/s vs seqlen; bf16 GEMM ceiling {ceiling:.0f}", "seqlen",
         "TFLOP/s", [(names[n], [r[0] for r in rows if r[1] == n], [r[5] for r in rows if r[1] == n])
                     for n in names] + [("bf16 GEMM (8192^3)", seqlens, [ceiling] * len(seqlens))],
         logx=True, note=torch.cuda.get_device_name())


def part_memory(args):
    gb, torch, lib = torch_setup(args)
    F, SDPBackend, sdpa_kernel = gb.F, gb.SDPBackend, gb.sdpa_kernel
    pool = gb.DevicePool()
    d, h, dt, rows = 64, 16, torch.bfloat16, []
    for s in [s for s in (1024 << i for i in range(7)) if s <= args.max_seqlen]:
        q, k, v, do, o, lse, dq, dk, dv = gb.make_inputs(1, s, h, d, dt)
        lib.bind_stream()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        pool.reset()
        lib.forward(lib.fwd_args(q, k, v, o, lse, False))
        lib.backward(lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False))
        torch.cuda.synchronize()
        ours = (torch.cuda.max_memory_allocated() - base) + (pool.high() or 0)
        rows.append([s, "ours", ours])
        qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
        for name, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("math", SDPBackend.MATH)):
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            try:
                with sdpa_kernel([backend]):
                    out = F.scaled_dot_product_attention(qt, kt, vt)
                torch.autograd.grad(out, (qt, kt, vt), do.transpose(1, 2))
                torch.cuda.synchronize()
                rows.append([s, name, torch.cuda.max_memory_allocated() - base])
                del out
            except (RuntimeError, torch.OutOfMemoryError):
                rows.append([s, name, None])
            torch.cuda.empty_cache()
        del q, k, v, do, o, lse, dq, dk, dv, qt, kt, vt
        torch.cuda.empty_cache()
        print(f"memory: seqlen {s} done", flush=True)
    write_csv(os.path.join(args.out, "memory.csv"), ["seqlen", "implementation", "extra_bytes_fwd_bwd"], rows)
    names = {"ours": "flashattn", "fa2": "PyTorch flash (FA2)", "cudnn": "cuDNN", "math": "standard attention"}
    mib = 2.0 ** 20
    plot(args.out, "memory", "extra device memory of forward + backward vs seqlen (bf16, d 64, 16 heads, batch 1)",
         "seqlen", "MiB", [(names[n], [r[0] for r in rows if r[1] == n],
                            [r[2] / mib if r[2] is not None else None for r in rows if r[1] == n]) for n in names],
         logx=True, logy=True, note=torch.cuda.get_device_name())


def part_blocksparse(args):
    gb, torch, lib = torch_setup(args)
    d, h, s, dt = 64, 16, 4096, torch.bfloat16
    b = 16384 // s
    q, k, v, do, o, lse, dq, dk, dv = gb.make_inputs(b, s, h, d, dt)
    lib.bind_stream()
    fa, ba = lib.fwd_args(q, k, v, o, lse, False), lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False)
    dense = gb.bench(lambda: lib.forward(fa)) + gb.bench(lambda: lib.backward(ba))
    rows = []
    masks = [("butterfly", blk, butterfly_mask(gb, lib, s, blk)) for blk in (64, 128, 256, 512, 1024)]
    masks += [("random", 128, lib.random_mask(1, s, s, 128, 128, dens, 1)) for dens in (0.75, 0.5, 0.25, 0.125, 0.0625)]
    for pattern, blk, m in masks:
        density = lib.mask_density(m)
        fm = lib.fwd_args(q, k, v, o, lse, False, m)
        bm = lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False, m)
        t = gb.bench(lambda: lib.forward(fm)) + gb.bench(lambda: lib.backward(bm))
        rows.append([pattern, blk, density, t, density * dense, dense])
        lib.free_mask(m)
    write_csv(os.path.join(args.out, "blocksparse.csv"),
              ["pattern", "mask_block", "density", "fwd_bwd_ms", "ideal_ms", "dense_ms"], rows)
    series = []
    for pattern in ("butterfly", "random"):
        pts = sorted((r[2], r[3]) for r in rows if r[0] == pattern)
        series.append((f"flashattn, {pattern}", [p[0] for p in pts], [p[1] for p in pts]))
    xs = sorted(r[2] for r in rows)
    series.append(("ideal: density x dense", xs, [x * dense for x in xs]))
    plt = pyplot()
    if plt is None:
        print("matplotlib not found: no blocksparse.png", flush=True)
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, x, y in series:
        ax.plot(x, y, marker="o", label=label)
    ax.set_title(f"block-sparse forward + backward vs density (seqlen {s}, d 64, 16 heads, bf16)", fontsize=10)
    ax.set_xlabel("measured mask density")
    ax.set_ylabel("ms")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.text(0.01, 0.01, torch.cuda.get_device_name(), fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "blocksparse.png"), dpi=120)
    print(f"wrote {os.path.join(args.out, 'blocksparse.png')}", flush=True)


PARTS = {"iomodel": part_iomodel, "hbm": part_hbm, "runtime": part_runtime, "memory": part_memory,
         "blocksparse": part_blocksparse}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", default="build/tools/flashattn")
    ap.add_argument("--lib", default="build/libflashattn.so")
    ap.add_argument("--out", default="docs/figures")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--max-seqlen", type=int, default=65536)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    failed = []
    for name in args.parts.split(","):
        if name not in PARTS:
            ap.error(f"unknown part {name!r} (one of {', '.join(PARTS)})")
        try:
            PARTS[name](args)
        except (ImportError, RuntimeError, OSError, subprocess.CalledProcessError) as e:
            print(f"{name}: not run here: {e}", flush=True)
            failed.append(name)
    return 1 if failed and args.parts != ",".join(PARTS) else 0


if __name__ == "__main__":
    sys.exit(main())
