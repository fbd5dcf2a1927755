"""cold_start.py: where the time of the first flash_attn_func call on CUDA tensors goes, each phase
timed in a fresh Python process (nothing warm but the disk cache): importing torch and making the
tensors, importing flashattn, loading libflashattn through ctypes, creating the library's CUDA
context, the first call (synchronised), the second call. The first call is also profiled
(cProfile, the 15 largest cumulative entries) so the cost can be named.

    python3 bench/cold_start.py [--repeat 3] [--out cold_start.md]

Writes Markdown with the provenance line first (bench/provenance.py)."""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# One fresh process: prints one JSON object of phase times in seconds (and the profile's text).
CHILD = r"""
import json, sys, time
t = {}
t0 = time.perf_counter()
import torch
torch.cuda.init()
q = torch.randn(1, 1024, 16, 128, device="cuda", dtype=torch.bfloat16)
k, v = torch.randn_like(q), torch.randn_like(q)
torch.cuda.synchronize()
t["torch import + tensors"] = time.perf_counter() - t0
t0 = time.perf_counter()
import flashattn
t["import flashattn"] = time.perf_counter() - t0
t0 = time.perf_counter()
from flashattn import _capi
_capi.lib()
t["load libflashattn (ctypes)"] = time.perf_counter() - t0
if MODE == "context-first":
    t0 = time.perf_counter()
    _capi.context("cuda", 0)
    t["fa_context_create(cuda)"] = time.perf_counter() - t0
profile_text = ""
t0 = time.perf_counter()
if PROFILE:
    import cProfile, io, pstats
    pr = cProfile.Profile()
    pr.enable()
out = flashattn.flash_attn_func(q, k, v, causal=True)
torch.cuda.synchronize()
if PROFILE:
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(15)
    profile_text = s.getvalue()
t["first call"] = time.perf_counter() - t0
t0 = time.perf_counter()
out = flashattn.flash_attn_func(q, k, v, causal=True)
torch.cuda.synchronize()
t["second call"] = time.perf_counter() - t0
print(json.dumps({"times": t, "profile": profile_text}))
"""


def run_child(mode, profile, env_extra):
    code = f"MODE = {mode!r}\nPROFILE = {profile!r}\n" + CHILD
    env = dict(os.environ, **env_extra)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"child failed ({mode}, {env_extra}):\n{r.stderr}")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    result["process wall"] = wall
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="cold_start.md")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    import provenance
    device = provenance.torch_device()
    configs = [("call-first", {}), ("context-first", {}),
               ("call-first", {"FLASHATTN_NO_TORCH": "1"}), ("call-first", {"CUDA_MODULE_LOADING": "EAGER"})]
    lines = [provenance.comment(device), "",
             "Each row: one fresh process; seconds. Shapes: bf16 [1, 1024, 16, 128], causal.", ""]
    for mode, env in configs:
        label = mode + (" " + " ".join(f"{k}={v}" for k, v in env.items()) if env else "")
        rows = [run_child(mode, False, env) for _ in range(args.repeat)]
        phases = list(rows[0]["times"].keys())
        lines += [f"## {label}", "", "| " + " | ".join(phases + ["process wall"]) + " |",
                  "|" + "---|" * (len(phases) + 1)]
        for r in rows:
            lines.append("| " + " | ".join(f"{r['times'][p]:.3f}" for p in phases) + f" | {r['process wall']:.3f} |")
        lines.append("")
    prof = run_child("call-first", True, {})
    lines += ["## cProfile of the first call (call-first, one more process)", "", "```", prof["profile"].strip(),
              "```", ""]
    text = "\n".join(lines)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
