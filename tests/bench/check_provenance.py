#!/usr/bin/env python3
"""check_provenance.py: every file a benchmark writes carries its provenance line
(`# provenance: date <UTC> | commit <hash> | device <name> | command <argv>`, bench/provenance.h and
bench/provenance.py). Checked here on what runs without a GPU:
  - cpu_bench's output (the C helper), with an argument that needs shell quoting;
  - bench/provenance.py: the comment line, write_csv / read_csv, the PNG text chunks' fields;
  - bench/reproduce.py --parts iomodel: its CSVs; --plot-only on made-up CSVs of the GPU parts
    (runtime, memory, blocksparse) written by the same writer, and the PNGs' text chunks where
    matplotlib and Pillow are installed.

usage: check_provenance.py CPU_BENCH FLASHATTN_TOOL SOURCE_ROOT
"""
import datetime
import os
import re
import shlex
import subprocess
import sys
import tempfile

LINE = re.compile(r"^# provenance: date (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) \| commit (\S.*?) \| device (\S.*?) \| "
                  r"command (\S.*)$")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def check_line(text, what, argv_tail=None, device=None):
    """text's first line is a provenance line dated within the last hour, with a commit, the device
    (when given) and a command ending in argv_tail (when given)."""
    first = text.splitlines()[0] if text else ""
    m = LINE.match(first)
    check(m is not None, f"{what}: first line is a provenance line ({first[:120]!r})")
    if not m:
        return
    date = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    age = (datetime.datetime.now(datetime.timezone.utc) - date).total_seconds()
    check(-60 < age < 3600, f"{what}: date {m.group(1)} is now (UTC)")
    commit = m.group(2)
    check(re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown|.+ \(from FLASHATTN_BENCH_COMMIT(; git here: .+)?\)", commit) is not None,
          f"{what}: commit {commit!r} is a full hash, 'unknown' or named by FLASHATTN_BENCH_COMMIT")
    if device is not None:
        check(m.group(3) == device, f"{what}: device {m.group(3)!r} == {device!r}")
    if argv_tail is not None:
        words = shlex.split(m.group(4))
        check(words[-len(argv_tail):] == argv_tail, f"{what}: command {m.group(4)!r} ends with {argv_tail}")


def main():
    cpu_bench, tool, root = sys.argv[1:4]
    sys.path.insert(0, os.path.join(root, "bench"))
    import provenance as prov

    # the C helper, through cpu_bench on a tiny size
    argv = ["--seqlens", "64", "--dims", "16", "--heads", "1", "--threads", "1", "--causal", "no", "--budget", "0.01",
            "--no-check"]
    proc = subprocess.run([cpu_bench] + argv, capture_output=True, text=True, timeout=300)
    check(proc.returncode == 0, f"cpu_bench exits 0 (stderr: {proc.stderr.strip()[:200]})")
    check_line(proc.stdout, "cpu_bench", argv_tail=argv)
    # a build without git metadata names its commit through the environment; the command line is
    # quoted for a shell (the program reached through a path with a space and a quote)
    env = dict(os.environ, FLASHATTN_BENCH_COMMIT="abc123")
    with tempfile.TemporaryDirectory() as tmp:
        odd = os.path.join(tmp, "cpu bench's copy")
        os.symlink(os.path.abspath(cpu_bench), odd)
        proc = subprocess.run([odd] + argv, capture_output=True, text=True, timeout=300, env=env)
        check(proc.returncode == 0, "cpu_bench through a path with a space and a quote exits 0")
        check_line(proc.stdout, "cpu_bench (odd path)", argv_tail=[odd] + argv)

        # bench/provenance.py
        line = prov.comment("Test Device", ["bench/x.py", "--a", "b c"])
        check_line(line, "provenance.comment", argv_tail=["bench/x.py", "--a", "b c"], device="Test Device")
        path = os.path.join(tmp, "t.csv")
        prov.write_csv(path, ["x", "y"], [[1, 2.5], [3, None]], "Test Device")
        with open(path) as f:
            text = f.read()
        check_line(text, "provenance.write_csv", device="Test Device")
        rows = prov.read_csv(path)
        check(rows == [{"x": "1", "y": "2.5"}, {"x": "3", "y": ""}], f"provenance.read_csv reads the rows back ({rows})")
        meta = prov.png_metadata("Test Device")
        check(set(meta) >= {"Date", "Commit", "Device", "Command"} and meta["Device"] == "Test Device",
              f"provenance.png_metadata has Date, Commit, Device, Command ({sorted(meta)})")

        # bench/reproduce.py --parts iomodel (runs anywhere): its CSVs, and the plots read them back
        out = os.path.join(tmp, "fig")
        cmd = [sys.executable, os.path.join(root, "bench", "reproduce.py"), "--tool", tool, "--out", out,
               "--parts", "iomodel"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        check(proc.returncode == 0, f"reproduce.py --parts iomodel exits 0 ({proc.stdout[-300:]} {proc.stderr[-300:]})")
        for name in ("iomodel_blocksize.csv", "iomodel_seqlen.csv"):
            try:
                with open(os.path.join(out, name)) as f:
                    text = f.read()
            except OSError as e:
                check(False, f"{name} written ({e})")
                continue
            check_line(text, f"reproduce.py {name}", argv_tail=cmd[1:])
            check(len(prov.read_csv(os.path.join(out, name))) > 3, f"{name} has rows after its provenance line")

        # --plot-only on made-up measurements (the GPU parts' CSVs, written by the same writer):
        # the readers skip the provenance line, and a memory.csv of the old format is refused
        dev = "Fake GPU"
        prov.write_csv(os.path.join(out, "runtime.csv"),
                       ["seqlen", "implementation", "fwd_ms", "bwd_ms", "fwd_bwd_ms", "fwd_tflops", "bwd_tflops",
                        "density"],
                       [[s, n, 1.0, 2.0, 3.0, 100.0, 90.0, 1.0] for s in (1024, 2048)
                        for n in ("ours", "fa2", "cudnn", "math")], dev)
        prov.write_csv(os.path.join(out, "gemm_ceiling.csv"), ["what", "tflops"], [["made up", 600.0]], dev)
        prov.write_csv(os.path.join(out, "memory.csv"),
                       ["seqlen", "implementation", "inputs_bytes", "torch_peak_bytes", "pool_high_bytes", "peak_bytes",
                        "beyond_inputs_bytes"],
                       [[s, n, 8 * s, 20 * s, 4 * s, 24 * s, 16 * s] for s in (1024, 2048)
                        for n in ("ours", "fa2", "cudnn", "math")], dev)
        prov.write_csv(os.path.join(out, "blocksparse.csv"),
                       ["pattern", "mask_block", "density", "fwd_bwd_ms", "ideal_ms", "dense_sm80_ms",
                        "dense_default_ms"],
                       [["butterfly", 128, 0.5, 3.0, 2.5, 5.0, 4.0], ["random", 128, 0.25, 2.0, 1.25, 5.0, 4.0]], dev)
        plot_cmd = [sys.executable, os.path.join(root, "bench", "reproduce.py"), "--tool", tool, "--out", out,
                    "--plot-only", "--parts", "runtime,memory,blocksparse"]
        proc = subprocess.run(plot_cmd, capture_output=True, text=True, timeout=300)
        check(proc.returncode == 0 and "not run here" not in proc.stdout,
              f"reproduce.py --plot-only reads CSVs with a provenance line ({proc.stdout[-400:]} {proc.stderr[-300:]})")
        with open(os.path.join(out, "memory.csv"), "w") as f:  # the format before the common baseline
            f.write("seqlen,implementation,extra_bytes_fwd_bwd\n1024,ours,4325376\n")
        proc = subprocess.run(plot_cmd[:-1] + ["memory"], capture_output=True, text=True, timeout=300)
        check(proc.returncode != 0 and "measure again" in proc.stdout,
              f"reproduce.py --plot-only refuses an old-format memory.csv ({proc.stdout[-300:]})")

        try:
            from PIL import Image
        except ImportError:
            Image = None
        pngs = [os.path.join(out, n) for n in ("iomodel_blocksize.png", "runtime_forward.png", "blocksparse.png")]
        if Image is not None and all(os.path.exists(p) for p in pngs):
            for png in pngs:
                info = Image.open(png).text
                check(LINE.match("# provenance: " + " | ".join(
                    f"{k.lower()} {info.get(k, '')}" for k in ("Date", "Commit", "Device", "Command"))) is not None
                    and info.get("Data", "").count("# provenance:") >= 1,
                    f"{os.path.basename(png)} text chunks carry its provenance and its data's ({sorted(info)})")
        else:
            print("note: PNG text chunks not read back here (matplotlib or Pillow not installed)", flush=True)
    print(f"{len(failures)} failed" if failures else "all passed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
