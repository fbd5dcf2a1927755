#!/usr/bin/env python3
"""decode_bench.py: attention over a KV cache (flash_attn_with_kvcache, the library's
fa_forward_kvcache) beside PyTorch's SDPA flash (FlashAttention-2) and cuDNN backends in one
process on a CUDA device, at a grouped-query decode shape: 32 query heads over 8 KV heads, d 128, one new
token (decode), bf16 unless --dtype. Rate = the K and V bytes of the cache read per second (the
cache each call attends to: batch x KV length x heads_kv x (d + d_v) x element size); beside
it the device's copy rate (a large tensor copied; bytes read + written per second), measured in
the same run. Each time is triton's do_bench median (ms). The library's row names its cache:
contiguous, or paged (--page, pages in shuffled order). Chunked prefill: --new 512 --shapes 1x8192
(causal, bottom-right). Multi-head latent attention (MLA) decode: --heads 128/1 --dim 576 --dim-v 512
--shared-v (v_cache the first 512 channels of k_cache, as in MLA's latent cache; its bytes counted
once); SDPA's flash and cuDNN backends refuse head dims that large (reported as not run).

SDPA gets the same problem as dense tensors: q [batch, heads, new, d], K and V [batch, heads_kv,
KV, d] with enable_gqa=True, causal as a bottom-right mask (causal_lower_right; its backends
refuse what they do not run: reported as not run). The last column compares the library's O with
fp32 math attention on the first two sequences.

--check-on-device passes check_on_device=True (the int32 arrays checked by the GPU: no copy to
the host and no wait per call). --graph times every attention (ours with check_on_device, which
a graph needs, and both SDPA backends) as a CUDA graph of one call replayed, so that no Python
or launch overhead on the host is in the times: what a serving loop that captures its decode
step sees.

The output's first line is its provenance (date, commit, device, command; bench/provenance.py).

usage: FLASHATTN_LIBRARY=build/libflashattn.so python3 bench/decode_bench.py
       [--shapes 1x4096,1x131072,8x32768,64x32768] [--heads 32/8] [--dim 128] [--dtype bf16|fp16]
       [--dim-v D_V] [--shared-v] [--page 0|64] [--new 1] [--splits 0] [--check-on-device] [--graph]
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right
from triton.testing import do_bench

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashattn  # noqa: E402
import provenance as prov  # noqa: E402


def copy_rate(dtype):
    """Bytes read + written per second by a 2 GiB device copy."""
    n = 2 ** 30 // torch.tensor([], dtype=dtype).element_size()
    a = torch.empty(n, dtype=dtype, device="cuda")
    b = torch.empty_like(a)
    ms = do_bench(lambda: b.copy_(a))
    return 2 * a.numel() * a.element_size() / (ms * 1e-3)


def causal_mask(sn, s):
    """Bottom-right causal (the library's alignment; SDPA's is_causal is top-left when sn != s)."""
    return causal_lower_right(sn, s) if sn > 1 else None


def sdpa(q, k, v, causal):
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=causal_mask(q.shape[1], k.shape[1]) if causal else None,
                                          enable_gqa=True).transpose(1, 2)


GRAPH_STREAM = None


def graph_of(fn):
    """A CUDA graph of one fn() call, captured after a warm-up call on the capture stream, so that
    the library's context has met it (its scratch and fault record allocated, its scratch last
    used there) before the capture."""
    global GRAPH_STREAM
    if GRAPH_STREAM is None:
        GRAPH_STREAM = torch.cuda.Stream()
    GRAPH_STREAM.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(GRAPH_STREAM):
        fn()
    torch.cuda.current_stream().wait_stream(GRAPH_STREAM)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=GRAPH_STREAM):
        fn()
    torch.cuda.synchronize()
    return g


def bench(fn, graph):
    """do_bench median (ms) of fn, or of replaying graph_of(fn) (graph)."""
    return do_bench(graph_of(fn).replay) if graph else do_bench(fn)


def sdpa_time(backend, q, k, v, causal, graph):
    try:
        with sdpa_kernel([backend]):
            sdpa(q, k, v, causal)
            return bench(lambda: sdpa(q, k, v, causal), graph)
    except RuntimeError as e:
        return f"not run ({str(e).splitlines()[0][:60]})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1x4096,1x16384,1x131072,8x32768,64x32768", help="batch x KV length, ...")
    ap.add_argument("--heads", default="32/8")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dim-v", type=int, default=0, help="v's head dim (0: --dim)")
    ap.add_argument("--shared-v", action="store_true",
                    help="v_cache a view of k_cache's first dim-v channels (MLA's latent cache)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--page", type=int, default=0, help="0: contiguous cache; else the page size (shuffled pages)")
    ap.add_argument("--new", type=int, default=1, help="new query tokens per sequence (causal when > 1)")
    ap.add_argument("--splits", type=int, default=0, help="num_splits (0: the library's choice)")
    ap.add_argument("--check-on-device", action="store_true", help="check_on_device=True")
    ap.add_argument("--graph", action="store_true", help="time CUDA graph replays (implies --check-on-device)")
    ap.add_argument("--sink", action="store_true",
                    help="ours with a learnable sink of -30 per query head (folded in, its weight e^-30 leaves O "
                         "within rounding of SDPA's, so SDPA stays the reference)")
    args = ap.parse_args()
    check = args.check_on_device or args.graph
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    hq, hk = (int(x) for x in args.heads.split("/"))
    d, sn, causal = args.dim, args.new, args.new > 1
    dv = args.dim_v or d
    if args.shared_v and dv > d:
        sys.exit("--shared-v: --dim-v must be at most --dim")
    print(prov.comment(torch.cuda.get_device_name()), flush=True)
    rate = copy_rate(dt)
    print(f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | {args.dtype} | heads {hq}/{hk}, d {d}, "
          f"{'' if dv == d else f'd_v {dv}, '}{sn} new token(s){' (causal)' if causal else ''} | cache: "
          f"{'v a view of k, ' if args.shared_v else ''}"
          f"{'paged, page ' + str(args.page) + ', shuffled' if args.page else 'contiguous'} | device copy "
          f"{rate / 1e9:,.0f} GB/s (read + write) | times: do_bench medians"
          f"{' of CUDA graph replays' if args.graph else ''} | check_on_device {check}"
          f"{' | ours with a learnable sink of -30' if args.sink else ''}", flush=True)
    print("| batch | KV length | flashattn µs (GB/s) | SDPA flash µs (GB/s) | SDPA cuDNN µs (GB/s) | "
          "flashattn / best SDPA (time) | max |O - SDPA| |")
    print("|---|---|---|---|---|---|---|")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for shape in args.shapes.split(","):
        b, s = (int(x) for x in shape.split("x"))
        q = torch.randn(b, sn, hq, d, device="cuda", dtype=dt, generator=gen)
        k = torch.randn(b, s, hk, d, device="cuda", dtype=dt, generator=gen)
        v = k[..., :dv] if args.shared_v else torch.randn(b, s, hk, dv, device="cuda", dtype=dt, generator=gen)
        lens = torch.full((b,), s, dtype=torch.int32, device="cuda")
        if args.page:
            per = (s + args.page - 1) // args.page
            perm = torch.randperm(b * per, device="cuda", generator=gen).to(torch.int32)
            table = perm.reshape(b, per)
            kc = torch.zeros(b * per, args.page, hk, d, device="cuda", dtype=dt)
            pad = per * args.page - s
            kc[perm.long()] = torch.nn.functional.pad(k, (0, 0, 0, 0, 0, pad)).reshape(b * per, args.page, hk, d)
            if args.shared_v:
                vc = kc[..., :dv]
            else:
                vc = torch.zeros(b * per, args.page, hk, dv, device="cuda", dtype=dt)
                vc[perm.long()] = torch.nn.functional.pad(v, (0, 0, 0, 0, 0, pad)).reshape(b * per, args.page, hk, dv)
        else:
            table, kc, vc = None, k, v

        sink = torch.full((hq,), -30.0, device="cuda", dtype=torch.float32) if args.sink else None

        def ours():
            return flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table, causal=causal,
                                                     num_splits=args.splits, check_on_device=check,
                                                     learnable_sink=sink)
        try:
            o = ours()
            if check:
                flashattn.synchronize(q)
            t_ours = bench(ours, args.graph)
            if check:
                flashattn.synchronize(q)
        except flashattn.FlashAttnError as e:
            o, t_ours = None, f"not run ({e.status})"
        t_fa2 = sdpa_time(SDPBackend.FLASH_ATTENTION, q, k, v, causal, args.graph)
        t_cud = sdpa_time(SDPBackend.CUDNN_ATTENTION, q, k, v, causal, args.graph)
        kv_bytes = b * s * hk * (d + (0 if args.shared_v else dv)) * q.element_size()

        def cell(t):
            return t if isinstance(t, str) else f"{t * 1e3:,.1f} ({kv_bytes / (t * 1e-3) / 1e9:,.0f})"
        times = [t for t in (t_fa2, t_cud) if not isinstance(t, str)]
        ratio = f"{t_ours / min(times):.3f}" if times and not isinstance(t_ours, str) else "-"
        diff = "-"
        if o is not None:  # against fp32 math attention on the first two sequences
            n = min(b, 2)
            with sdpa_kernel([SDPBackend.MATH]):
                ref = sdpa(q[:n].float(), k[:n].float(), v[:n].float(), causal)
            diff = f"{(o[:n].float() - ref).abs().max().item():.1e}"
        print(f"| {b} | {s:,} | {cell(t_ours)} | {cell(t_fa2)} | {cell(t_cud)} | {ratio} | {diff} |", flush=True)
        del q, k, v, kc, vc
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
