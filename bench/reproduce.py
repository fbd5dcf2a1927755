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
               (FLASHATTN_KERNELS=sm90 / sm80 / simt: different tile shapes) at the Figure 2
               shape, next to the IO model at those tiles.
  runtime      (CUDA GPU, torch) forward, backward and forward + backward time against seqlen 128 ...
               65536 (d 64, 16 heads, batch 16384 / seqlen, at least 1; bf16) for our dense kernels,
               our block-sparse kernels (butterfly mask, 128 x 128 blocks), PyTorch's flash (FA2) and
               cuDNN backends and standard attention (SDPA math) until it runs out of memory
               (the paper's Figure 3), and the achieved TFLOP/s beside a measured bf16 GEMM ceiling.
  memory       (CUDA GPU, torch) device memory of one forward + backward against seqlen for the
               same set, every implementation from one baseline: inputs, outputs, gradients and
               workspace (torch's peak plus the stream-ordered pool's high-water mark, where our
               workspace lives). Alone: --parts memory (a few minutes at most; not yet timed).
  blocksparse  (CUDA GPU, torch) our forward + backward time against mask density, butterfly (the
               density set by the mask block size) and random (128 x 128 blocks), next to the ideal
               density x dense time; seqlen 4096, d 64.

usage: python3 bench/reproduce.py [--tool build/tools/flashattn] [--lib build/libflashattn.so]
                                  [--out docs/figures] [--parts iomodel,hbm,runtime,memory,blocksparse]
                                  [--max-seqlen 65536] [--plot-only]
--plot-only redraws every PNG from the CSVs already in --out (matplotlib, no GPU).
Every CSV starts with a provenance comment line (date, commit, device, command; bench/provenance.py)
and every PNG carries the same in its text chunks (Date, Commit, Device, Command, and Data: the
provenance lines of the CSVs it was drawn from).
"""
import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import provenance as prov  # noqa: E402

IOMODEL_DEVICE = "none: the IO model (flashattn iomodel, core/iomodel.c)"


def device_note(args, device=""):
    """The GPU's name for the plots: given by a measuring part (and kept in device.txt beside the
    CSVs), else read back from there (--plot-only)."""
    path = os.path.join(args.out, "device.txt")
    if device:
        with open(path, "w") as f:
            f.write(prov.comment(device) + "\n" + device + "\n")
        return device
    try:
        with open(path) as f:
            return "".join(l for l in f if not l.startswith("#")).strip()
    except OSError:
        return ""


def png_metadata(device, sources=()):
    """The PNG's text chunks: its own provenance (bench/provenance.py) and, under Data, the
    provenance line of each CSV it was drawn from."""
    meta = prov.png_metadata(device)
    data = []
    for src in sources:
        try:
            with open(src) as f:
                first = f.readline().strip()
        except OSError:
            continue
        data.append(f"{os.path.basename(src)}: " + (first if first.startswith("#") else "(no provenance line)"))
    if data:
        meta["Data"] = "\n".join(data)
    return meta


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        return None


def plot(out, name, title, xlabel, ylabel, series, logx=False, logy=False, note=None, device="", sources=()):
    """series: [(label, xs, ys)]; points with y None are skipped. device and sources (the CSVs
    drawn) go into the PNG's provenance text chunks."""
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
    fig.savefig(path, dpi=120, metadata=png_metadata(device, sources))
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
    bpath = os.path.join(args.out, "iomodel_blocksize.csv")
    prov.write_csv(bpath, ["block", "standard_bytes", "flash_alg1_bytes", "flash_qouter_bytes"], rows, IOMODEL_DEVICE)
    gib = 2.0 ** 30
    plot(args.out, "iomodel_blocksize",
         "IO model: HBM traffic vs block size (seqlen 1024, d 64, 16 heads, batch 64, fp16)",
         "block size B_r = B_c", "GiB read + written (model)",
         [("standard attention", blocks, [r[1] / gib for r in rows]),
          ("FlashAttention, Algorithm 1 (K/V outside)", blocks, [r[2] / gib for r in rows]),
          ("FlashAttention, query blocks outside (our kernels)", blocks, [r[3] / gib for r in rows])],
         logx=True, logy=True, note="flashattn iomodel --sweep (core/iomodel.c); forward only; caches not modelled",
         device=IOMODEL_DEVICE, sources=[bpath])
    seqlens = [128 << i for i in range(10)]
    srows = []
    for n in seqlens:  # the paper's blocks from M = 192 KiB at d 64: B_r = 64, B_c = 192
        proc = subprocess.run([args.tool, "iomodel", "--seqlen-q", str(n), "--dim", "64", "--dtype", "fp16",
                               "--heads", "16", "--onchip", str(192 * 1024), "--csv"],
                              capture_output=True, text=True, check=True)
        head, line = proc.stdout.strip().splitlines()
        assert head == "block_q,block_k,standard_bytes,flash_alg1_bytes,flash_qouter_bytes", head
        srows.append([n] + [int(x) for x in line.split(",")])
    spath = os.path.join(args.out, "iomodel_seqlen.csv")
    prov.write_csv(spath, ["seqlen", "block_q", "block_k", "standard_bytes", "flash_alg1_bytes", "flash_qouter_bytes"],
                   srows, IOMODEL_DEVICE)
    bq, bk = srows[0][1], srows[0][2]
    plot(args.out, "iomodel_seqlen", "IO model: HBM traffic vs seqlen (d 64, 16 heads, fp16, M = 192 KiB)",
         "seqlen", "GiB read + written (model)",
         [("standard attention", seqlens, [r[3] / gib for r in srows]),
          (f"FlashAttention, Algorithm 1 (paper's blocks {bq} x {bk})", seqlens, [r[4] / gib for r in srows]),
          (f"FlashAttention, query blocks outside ({bq}-row blocks)", seqlens, [r[5] / gib for r in srows])],
         logx=True, logy=True, note="flashattn iomodel (core/iomodel.c); forward only; caches not modelled",
         device=IOMODEL_DEVICE, sources=[spath])


# ---------------------------------------------------------------- hbm (ncu)

# The forward tiles (query rows B_r x keys B_c) of each CUDA kernel family at d 64:
# sm90 backends/cuda/sm90/kernels.cuh (WS_BR, ws_bn), sm80 backends/cuda/sm80/tiles.h (4 warps x 16
# x fwd_mtiles rows, 64-key tiles), simt the SIMT kernels (64 x 64).
HBM_TILES = {"sm90": (128, 128), "sm80": (128, 64), "simt": (64, 64)}
HBM_METRICS = {"dram__bytes_read.sum": "dram_read", "dram__bytes_write.sum": "dram_write",
               "lts__t_sectors_srcunit_tex_op_read.sum": "l2_read_sectors",
               "lts__t_sectors_srcunit_tex_op_write.sum": "l2_write_sectors",
               "gpu__time_duration.sum": "duration"}
UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9,
         "sector": 1, "Ksector": 1e3, "Msector": 1e6, "Gsector": 1e9,
         "nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3, "ns": 1e-6, "us": 1e-3, "ms": 1.0,
         "s": 1e3, "": 1}


def part_hbm(args):
    ncu = shutil.which("ncu")
    if not ncu:
        print("hbm: ncu not found, skipped", flush=True)
        return
    dims = ["--batch", "64", "--heads", "16", "--seqlen-q", "1024", "--dim", "64", "--dtype", "fp16"]
    rows = []
    for family, (bq, bk) in HBM_TILES.items():
        env = dict(os.environ, FLASHATTN_KERNELS=family)
        info = subprocess.run([args.tool, "run", "--backend", "cuda", "--repeat", "1", "--json"] + dims, env=env,
                              capture_output=True, text=True)
        if info.returncode != 0:
            print(f"hbm: {family}: flashattn run failed: {info.stderr.strip()[:200]}", flush=True)
            continue
        kernel = "forward " + json.loads(info.stdout)["kernel"]["forward"]
        cmd = [ncu, "--clock-control", "none", "--csv", "--metrics", ",".join(HBM_METRICS), "-k", "regex:forward",
               "-c", "1", args.tool, "run", "--backend", "cuda", "--repeat", "1"] + dims
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        vals = {}
        for rec in csv.reader(proc.stdout.splitlines()):
            if len(rec) > 3 and rec[-3] in HBM_METRICS:
                unit = rec[-2]
                if unit not in UNITS:
                    print(f"hbm: unknown unit {unit!r} of {rec[-3]}", flush=True)
                vals[HBM_METRICS[rec[-3]]] = float(rec[-1].replace(",", "")) * UNITS.get(unit, float("nan"))
        if len(vals) < len(HBM_METRICS):
            print(f"hbm: {family}: ncu metrics missing ({sorted(vals)}): {proc.stderr.strip()[:300]}", flush=True)
            continue
        model = subprocess.run([args.tool, "iomodel"] + dims + ["--block-q", str(bq), "--block-k", str(bk), "--csv"],
                               capture_output=True, text=True, check=True).stdout.strip().splitlines()[1].split(",")
        rows.append([family, kernel, bq, bk, vals["dram_read"], vals["dram_write"], 32 * vals["l2_read_sectors"],
                     32 * vals["l2_write_sectors"], int(model[4]), int(model[2]), vals["duration"]])
    prov.write_csv(os.path.join(args.out, "hbm_measured.csv"),
              ["kernels", "variant", "block_q", "block_k", "dram_read_bytes", "dram_write_bytes", "l2_read_bytes",
               "l2_write_bytes", "model_qouter_bytes", "model_standard_bytes", "duration_ms"], rows, hbm_device(args))
    plot_hbm(args)


def hbm_device(args):
    """The CUDA device's name from `flashattn info --json` (the hbm part runs without torch)."""
    try:
        info = json.loads(subprocess.run([args.tool, "info", "--json"], capture_output=True, text=True,
                                         timeout=60).stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return "unknown"
    for backend in info.get("backends", []):
        if backend.get("name") == "cuda" and backend.get("devices"):
            return backend["devices"][0].get("name") or "unknown"
    return "unknown"


def plot_hbm(args):
    hpath = os.path.join(args.out, "hbm_measured.csv")
    rows = prov.read_csv(hpath)
    if not rows:
        return
    gib = 2.0 ** 30
    labels = [f"{r['kernels']}\n{r['block_q']} x {r['block_k']}" for r in rows]
    x = list(range(len(rows)))
    series = [("IO model, query blocks outside (every tile from HBM)", "model_qouter_bytes", None),
              ("measured L2 -> SM traffic (lts__t_sectors_srcunit_tex read + write)", "l2_read_bytes", "l2_write_bytes"),
              ("measured DRAM traffic (dram__bytes read + write)", "dram_read_bytes", "dram_write_bytes")]
    plt = pyplot()
    if plt is None:
        print("matplotlib not found: no hbm_measured.png (the CSV has the numbers)", flush=True)
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    w = 0.8 / len(series)
    for i, (label, c1, c2) in enumerate(series):
        ys = [(float(r[c1]) + (float(r[c2]) if c2 else 0.0)) / gib for r in rows]
        ax.bar([xi + (i - 1) * w for xi in x], ys, width=w, label=label)
    std = float(rows[0]["model_standard_bytes"]) / gib
    ax.axhline(std, color="gray", linestyle="--", label=f"IO model, standard attention ({std:.1f} GiB)")
    ax.set_xticks(x)
    ax.set_xticklabels(labels)
    ax.set_yscale("log")
    ax.set_ylabel("GiB read + written (forward)")
    ax.set_xlabel("kernel family, forward tile B_r x B_c")
    ax.set_title("HBM traffic vs block size: model and ncu (seqlen 1024, d 64, 16 heads, batch 64, fp16)",
                 fontsize=10)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(args.out, "hbm_measured.png")
    fig.savefig(path, dpi=120, metadata=png_metadata(device_note(args) or hbm_device(args), [hpath]))
    plt.close(fig)
    print(f"wrote {path}", flush=True)


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
        res, density = {}, {}
        fa, ba = lib.fwd_args(q, k, v, o, lse, False), lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False)
        res["ours"] = (time_or_none(gb, lambda: lib.forward(fa)), time_or_none(gb, lambda: lib.backward(ba)))
        mask = butterfly_mask(gb, lib, s, 128) if s >= 256 else None
        if mask is not None:
            fm = lib.fwd_args(q, k, v, o, lse, False, mask)
            bm = lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False, mask)
            res["ours_butterfly"] = (time_or_none(gb, lambda: lib.forward(fm)),
                                     time_or_none(gb, lambda: lib.backward(bm)))
            density["ours_butterfly"] = lib.mask_density(mask)
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
        for name, (tf, tb) in res.items():
            dens = density.get(name, 1.0)  # block-sparse: the FLOP of the blocks kept
            flop = 4.0 * b * h * s * s * d * dens
            rows.append([s, name, tf, tb, (tf + tb) if tf is not None and tb is not None else None,
                         flop / (tf * 1e-3) / 1e12 if tf else None, 2.5 * flop / (tb * 1e-3) / 1e12 if tb else None,
                         dens])
        print(f"runtime: seqlen {s} done", flush=True)
        del q, k, v, do, o, lse, dq, dk, dv, qt, kt, vt
        torch.cuda.empty_cache()
    a = torch.randn(8192, 8192, device="cuda", dtype=dt)
    ceiling = 2.0 * 8192 ** 3 / (gb.bench(lambda: a @ a) * 1e-3) / 1e12
    device = torch.cuda.get_device_name()
    prov.write_csv(os.path.join(args.out, "runtime.csv"),
                   ["seqlen", "implementation", "fwd_ms", "bwd_ms", "fwd_bwd_ms", "fwd_tflops", "bwd_tflops", "density"],
                   rows, device)
    prov.write_csv(os.path.join(args.out, "gemm_ceiling.csv"), ["what", "tflops"],
                   [["bf16 8192^3 torch.matmul", ceiling]], device)
    plot_runtime(args, torch.cuda.get_device_name())


def plot_runtime(args, device=""):
    device = device_note(args, device)
    def num(x):
        return float(x) if x not in ("", None) else None

    rpath, gpath = os.path.join(args.out, "runtime.csv"), os.path.join(args.out, "gemm_ceiling.csv")
    rows = [[int(r["seqlen"]), r["implementation"], num(r["fwd_ms"]), num(r["bwd_ms"]), num(r["fwd_bwd_ms"]),
             num(r["fwd_tflops"]), num(r["bwd_tflops"])] for r in prov.read_csv(rpath)]
    ceiling = float(prov.read_csv(gpath)[0]["tflops"])
    seqlens = sorted({r[0] for r in rows})
    names = {"ours": "flashattn (dense)", "ours_butterfly": "flashattn (butterfly block-sparse)",
             "fa2": "PyTorch flash (FA2)", "cudnn": "cuDNN", "math": "standard attention (SDPA math)"}
    for col, label in ((2, "forward"), (3, "backward"), (4, "forward + backward")):
        plot(args.out, "runtime_" + label.replace(" + ", "_").replace(" ", "_"),
             f"{label} time vs seqlen (bf16, d 64, 16 heads, batch 16384/seqlen)", "seqlen", "ms",
             [(names[n], [r[0] for r in rows if r[1] == n], [r[col] for r in rows if r[1] == n]) for n in names],
             logx=True, logy=True, note=device, device=device, sources=[rpath])
    plot(args.out, "tflops", f"achieved forward TFLOP/s vs seqlen (block-sparse: FLOP of the kept blocks); "
         f"bf16 GEMM ceiling {ceiling:.0f}", "seqlen",
         "TFLOP/s", [(names[n], [r[0] for r in rows if r[1] == n], [r[5] for r in rows if r[1] == n])
                     for n in names] + [("bf16 GEMM (8192^3)", seqlens, [ceiling] * len(seqlens))],
         logx=True, note=device, device=device, sources=[rpath, gpath])


def memory_of(torch, pool, s, h, d, dt, run, Unsupported):
    """Device memory of one forward + backward from a common baseline (nothing of the call allocated
    yet), for every implementation alike: its inputs Q, K, V, dO (allocated after the baseline), the
    outputs and gradients it allocates (O, LSE, dQ, dK, dV) and its workspace. Peak = PyTorch's
    max_memory_allocated beyond the baseline plus the high-water mark of the device's stream-ordered
    pool beyond what it held at the baseline (where the CUDA backend takes its workspace with
    cudaMallocAsync, outside PyTorch's allocator; SDPA leaves it at 0). run(q, k, v, do) does the
    call; one call before the measured one warms up the libraries' one-time allocations. Returns
    (inputs, torch peak, pool high) in bytes; the peaks None when the call ran out of memory."""
    def once():
        q = torch.randn(1, s, h, d, device="cuda", dtype=dt)
        k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
        run(q, k, v, do)
        torch.cuda.synchronize()
        return 4 * q.numel() * q.element_size()

    try:
        once()
    except (RuntimeError, torch.OutOfMemoryError, Unsupported):
        torch.cuda.empty_cache()
        return 4 * s * h * d * torch.tensor([], dtype=dt).element_size(), None, None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    pool_base = pool.used() or 0  # what the pool holds already (counted for no one)
    pool.reset()
    try:
        inputs = once()
        peak = torch.cuda.max_memory_allocated() - base
        high = pool.high()
        return inputs, peak, max(0, high - pool_base) if high is not None else 0
    except (RuntimeError, torch.OutOfMemoryError, Unsupported):
        torch.cuda.empty_cache()
        return 4 * s * h * d * torch.tensor([], dtype=dt).element_size(), None, None
    finally:
        torch.cuda.empty_cache()


MEMORY_HEADER = ["seqlen", "implementation", "inputs_bytes", "torch_peak_bytes", "pool_high_bytes", "peak_bytes",
                 "beyond_inputs_bytes"]


def part_memory(args):
    gb, torch, lib = torch_setup(args)
    F, SDPBackend, sdpa_kernel = gb.F, gb.SDPBackend, gb.sdpa_kernel
    pool = gb.DevicePool()
    if pool.pool is None:
        raise RuntimeError("the device's memory pool is not readable (libcuda): our workspace would go uncounted")
    d, h, dt, rows = 64, 16, torch.bfloat16, []

    def ours(q, k, v, do):
        o, lse = torch.empty_like(q), torch.empty(q.shape[0], q.shape[2], q.shape[1], device="cuda",
                                                   dtype=torch.float32)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(q), torch.empty_like(q)
        lib.bind_stream()
        lib.forward(lib.fwd_args(q, k, v, o, lse, False))
        lib.backward(lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False))

    def sdpa(backend):
        def call(q, k, v, do):
            qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(qt, kt, vt)
            grads = torch.autograd.grad(out, (qt, kt, vt), do.transpose(1, 2))
            return out, grads
        return call

    impls = [("ours", ours), ("fa2", sdpa(SDPBackend.FLASH_ATTENTION)), ("cudnn", sdpa(SDPBackend.CUDNN_ATTENTION)),
             ("math", sdpa(SDPBackend.MATH))]
    for s in [s for s in (1024 << i for i in range(7)) if s <= args.max_seqlen]:
        for name, run in impls:
            inputs, peak, high = memory_of(torch, pool, s, h, d, dt, run, gb.Unsupported)
            total = peak + high if peak is not None else None
            rows.append([s, name, inputs, peak, high, total, total - inputs if total is not None else None])
        print(f"memory: seqlen {s} done", flush=True)
    device = torch.cuda.get_device_name()
    prov.write_csv(os.path.join(args.out, "memory.csv"), MEMORY_HEADER, rows, device)
    plot_memory(args, device)


def plot_memory(args, device=""):
    device = device_note(args, device)
    path = os.path.join(args.out, "memory.csv")
    recs = prov.read_csv(path)
    if recs and "peak_bytes" not in recs[0]:
        raise RuntimeError(f"{path} is from before the common-baseline measurement (no peak_bytes column): "
                           "measure again with --parts memory")
    rows = [[int(r["seqlen"]), r["implementation"], int(r["peak_bytes"]) if r["peak_bytes"] else None]
            for r in recs]
    names = {"ours": "flashattn", "fa2": "PyTorch flash (FA2)", "cudnn": "cuDNN", "math": "standard attention"}
    mib = 2.0 ** 20
    plot(args.out, "memory", "device memory of forward + backward vs seqlen: inputs, outputs, gradients, workspace "
         "(bf16, d 64, 16 heads, batch 1)",
         "seqlen", "MiB", [(names[n], [r[0] for r in rows if r[1] == n],
                            [r[2] / mib if r[2] is not None else None for r in rows if r[1] == n]) for n in names],
         logx=True, logy=True, note=device, device=device, sources=[path])


def part_blocksparse(args):
    gb, torch, lib = torch_setup(args)
    d, h, s, dt = 64, 16, 4096, torch.bfloat16
    b = 16384 // s
    q, k, v, do, o, lse, dq, dk, dv = gb.make_inputs(b, s, h, d, dt)
    lib.bind_stream()
    fa, ba = lib.fwd_args(q, k, v, o, lse, False), lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False)
    dense = gb.bench(lambda: lib.forward(fa)) + gb.bench(lambda: lib.backward(ba))
    # block-sparse calls run on the sm80 kernels (the chooser keeps the sm90 ones for dense calls):
    # the dense time of that family, from a second context, is the baseline sparsity scales
    os.environ["FLASHATTN_KERNELS"] = "sm80"
    try:
        lib80 = gb.Library(args.lib)
    finally:
        del os.environ["FLASHATTN_KERNELS"]
    lib80.bind_stream()
    fa80, ba80 = lib80.fwd_args(q, k, v, o, lse, False), lib80.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False)
    dense80 = gb.bench(lambda: lib80.forward(fa80)) + gb.bench(lambda: lib80.backward(ba80))
    rows = []
    masks = [("butterfly", blk, butterfly_mask(gb, lib, s, blk)) for blk in (64, 128, 256, 512, 1024)]
    masks += [("random", 128, lib.random_mask(1, s, s, 128, 128, dens, 1)) for dens in (0.75, 0.5, 0.25, 0.125, 0.0625)]
    for pattern, blk, m in masks:
        density = lib.mask_density(m)
        fm = lib.fwd_args(q, k, v, o, lse, False, m)
        bm = lib.bwd_args(q, k, v, o, lse, do, dq, dk, dv, False, m)
        t = gb.bench(lambda: lib.forward(fm)) + gb.bench(lambda: lib.backward(bm))
        rows.append([pattern, blk, density, t, density * dense80, dense80, dense])
        lib.free_mask(m)
    prov.write_csv(os.path.join(args.out, "blocksparse.csv"),
                   ["pattern", "mask_block", "density", "fwd_bwd_ms", "ideal_ms", "dense_sm80_ms", "dense_default_ms"],
                   rows, torch.cuda.get_device_name())
    plot_blocksparse(args, torch.cuda.get_device_name())


def plot_blocksparse(args, device=""):
    device = device_note(args, device)
    bpath = os.path.join(args.out, "blocksparse.csv")
    rows = [[r["pattern"], int(r["mask_block"]), float(r["density"]), float(r["fwd_bwd_ms"]),
             float(r["dense_sm80_ms"]), float(r["dense_default_ms"])] for r in prov.read_csv(bpath)]
    s = 4096
    series = []
    for pattern in ("butterfly", "random"):
        pts = sorted((r[2], r[3]) for r in rows if r[0] == pattern)
        series.append((f"flashattn, {pattern} (sm80 kernels)", [p[0] for p in pts], [p[1] for p in pts]))
    xs = sorted(r[2] for r in rows)
    dense80, dense = rows[0][4], rows[0][5]
    series.append(("ideal: density x dense (sm80 kernels)", xs, [x * dense80 for x in xs]))
    series.append(("dense, default kernels (sm90 on H200)", xs, [dense for _ in xs]))
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
    fig.text(0.01, 0.01, device, fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "blocksparse.png"), dpi=120, metadata=png_metadata(device, [bpath]))
    print(f"wrote {os.path.join(args.out, 'blocksparse.png')}", flush=True)


PARTS = {"iomodel": part_iomodel, "hbm": part_hbm, "runtime": part_runtime, "memory": part_memory,
         "blocksparse": part_blocksparse}
# --plot-only: the PNGs again from the CSVs in --out (no measurement; the iomodel part is cheap and reruns)
PLOTS = {"iomodel": part_iomodel, "hbm": plot_hbm, "runtime": plot_runtime, "memory": plot_memory,
         "blocksparse": plot_blocksparse}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", default="build/tools/flashattn")
    ap.add_argument("--lib", default="build/libflashattn.so")
    ap.add_argument("--out", default="docs/figures")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--max-seqlen", type=int, default=65536)
    ap.add_argument("--plot-only", action="store_true", help="redraw the PNGs from the CSVs in --out")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    failed = []
    for name in args.parts.split(","):
        if name not in PARTS:
            ap.error(f"unknown part {name!r} (one of {', '.join(PARTS)})")
        try:
            (PLOTS if args.plot_only else PARTS)[name](args)
        except (ImportError, RuntimeError, OSError, subprocess.CalledProcessError) as e:
            print(f"{name}: not run here: {e}", flush=True)
            failed.append(name)
    return 1 if failed and args.parts != ",".join(PARTS) else 0


if __name__ == "__main__":
    sys.exit(main())
