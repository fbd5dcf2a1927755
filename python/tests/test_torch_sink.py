"""learnable_sink= and d_v != d on torch tensors (CPU tensors, the CPU backend; CUDA tensors where
a GPU is present and the CUDA backend runs them): outputs and the gradients dQ, dK, dV, dsink
through autograd against a plain torch implementation in float64 (the sink concatenated to the
logits as one more column, softmax, the column dropped), with the C suite's pass rule (2x / 3x the
same implementation's float32 error); the sink's dtype conversions; the custom operators'
registrations (torch.library.opcheck: schema, fake, autograd) and torch.compile(dynamic=True,
fullgraph=True) with the sink. Skipped as a whole where torch is not installed."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not importable here: the torch sink cases skipped; .ci/run "
                                              "runs them in a venv with torch")

import flashattn as fa  # noqa: E402
import reference as ref  # noqa: E402

SINK = [-1.0, 0.5, 2.0, 6.0]  # one logit per query head; the last takes most of each row


def plain_attention(q, k, v, sink, scale, causal):
    """O [b, sq, h, d_v] and LSE [b, h, sq] in q's dtype: the sink as an extra logit column."""
    b, sq, h, _ = q.shape
    sk, hk = k.shape[1], k.shape[2]
    kk, vv = k.repeat_interleave(h // hk, dim=2), v.repeat_interleave(h // hk, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, kk) * scale
    if causal:
        i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
        s = s.masked_fill(~(j <= i + sk - sq).to(s.device), float("-inf"))
    if sink is not None:
        s = torch.cat([s, sink.to(s.dtype).view(1, h, 1, 1).expand(b, h, sq, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1)
    if sink is not None:
        p = p[..., :-1]
    p = torch.nan_to_num(p)  # a row of no keys and no sink: 0
    return torch.einsum("bhij,bjhd->bihd", p, vv), lse


def plain_grads(q, k, v, do, sink, scale, causal, dtype):
    """out, lse and the gradients (dq, dk, dv, dsink or None) of plain_attention in dtype."""
    leaves = [x.detach().to(dtype).requires_grad_() for x in (q, k, v)]
    s = sink.detach().to(dtype).requires_grad_() if sink is not None else None
    out, lse = plain_attention(*leaves, s, scale, causal)
    out.backward(do.to(dtype))
    return out, lse, [x.grad for x in leaves] + [s.grad if s is not None else None]


def arr(t):
    return t.detach().to("cpu", torch.float64).numpy()


def check(got, ref64, naive, factor, name):
    r = arr(ref64)
    err, ok = ref.error(arr(got), r)
    assert ok and err <= ref.bound(factor, ref.error(arr(naive), r)[0], r), f"{name} error {err}"


def make(b, sq, sk, h, hk, d, d_v, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g, dtype=torch.float32).to(device)
    return mk(b, sq, h, d), mk(b, sk, hk, d), mk(b, sk, hk, d_v), mk(b, sq, h, d_v)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d,d_v", [(64, 64), (48, 32)])
def test_sink_autograd(causal, d, d_v):
    """flash_attn_func with learnable_sink: out, lse, and q/k/v/sink .grad; seqlen_q > seqlen_k
    so that under causal the first rows see no key (O = 0, LSE = sink, dQ = 0)."""
    b, sq, sk, h, hk = 2, 70, 52, 4, 2
    q, k, v, do = make(b, sq, sk, h, hk, d, d_v, seed=d + d_v + causal)
    sink = torch.tensor(SINK)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, sink)]
    out, lse, _ = fa.flash_attn_func(*leaves[:3], causal=causal, return_attn_probs=True, learnable_sink=leaves[3])
    assert out.shape == (b, sq, h, d_v)
    out.backward(do)
    r_out, r_lse, r_grads = plain_grads(q, k, v, do, sink, d ** -0.5, causal, torch.float64)
    n_out, n_lse, n_grads = plain_grads(q, k, v, do, sink, d ** -0.5, causal, torch.float32)
    check(out, r_out, n_out, 2.0, "O")
    check(lse, r_lse, n_lse, 2.0, "LSE")
    for name, x, r, n in zip(("dQ", "dK", "dV", "dsink"), leaves, r_grads, n_grads):
        assert x.grad.dtype == x.dtype and x.grad.shape == x.shape
        check(x.grad, r, n, 3.0, name)
    if causal:
        assert bool((out[:, : sq - sk] == 0).all()) and bool((leaves[0].grad[:, : sq - sk] == 0).all())


def test_head_dim_v_autograd():
    """d_v != d without a sink: the sink input stays None, no gradient for it"""
    q, k, v, do = make(1, 40, 64, 2, 1, 80, 16, seed=2)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = fa.flash_attn_func(*leaves, causal=True)
    out.backward(do)
    r_out, _, r_grads = plain_grads(q, k, v, do, None, 80 ** -0.5, True, torch.float64)
    n_out, _, n_grads = plain_grads(q, k, v, do, None, 80 ** -0.5, True, torch.float32)
    check(out, r_out, n_out, 2.0, "O")
    for name, x, r, n in zip(("dQ", "dK", "dV"), leaves, r_grads, n_grads):
        check(x.grad, r, n, 3.0, name)


def test_varlen_sink_autograd():
    """packed sequences with a sink and d_v != d: dsink sums every sequence's share"""
    lens = [9, 40, 23]
    cu = torch.tensor(np.cumsum([0] + lens), dtype=torch.int32)
    q, k, v, do = (x[0] for x in make(1, sum(lens), sum(lens), 4, 2, 32, 48, seed=5))
    sink = torch.tensor(SINK, requires_grad=True)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = fa.flash_attn_varlen_func(*leaves, cu, cu, max(lens), max(lens), causal=True, learnable_sink=sink)
    out.backward(do)
    r_dsink, n_dsink = 0.0, 0.0
    for s in range(len(lens)):
        a, e = int(cu[s]), int(cu[s + 1])
        sl = lambda x: x[None, a:e].detach()
        r_out, _, r_grads = plain_grads(sl(q), sl(k), sl(v), sl(do), sink, 32 ** -0.5, True, torch.float64)
        n_out, _, n_grads = plain_grads(sl(q), sl(k), sl(v), sl(do), sink, 32 ** -0.5, True, torch.float32)
        check(sl(out), r_out, n_out, 2.0, "O")
        for name, x, r, n in zip(("dQ", "dK", "dV"), leaves, r_grads, n_grads):
            check(sl(x.grad), r, n, 3.0, name)
        r_dsink, n_dsink = r_dsink + r_grads[3], n_dsink + n_grads[3]
    check(sink.grad, r_dsink, n_dsink, 3.0, "dsink")


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_sink_dtype_and_device_conversion(dtype):
    """a sink tensor of another float dtype is converted to float32 by differentiable ops: its
    gradient comes back in its own dtype, equal to the float32 sink's rounded; integers refused"""
    q, k, v, do = make(1, 24, 24, 4, 4, 32, 32, seed=9)
    sink32 = torch.tensor(SINK).to(dtype).float().requires_grad_()
    other = torch.tensor(SINK).to(dtype).requires_grad_()
    outs = []
    for s in (sink32, other):
        out = fa.flash_attn_func(q, k, v, learnable_sink=s)
        out.backward(do)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    assert other.grad.dtype == dtype and torch.equal(other.grad, sink32.grad.to(dtype))
    with pytest.raises(TypeError, match="learnable_sink"):
        fa.flash_attn_func(q, k, v, learnable_sink=torch.tensor([1, 2, 3, 4]))
    with pytest.raises(ValueError, match=r"learnable_sink must be \[heads\] = \(4,\)"):
        fa.flash_attn_func(q, k, v, learnable_sink=torch.zeros(3))


def test_parameter_sink_takes_the_eager_path(monkeypatch):
    """an nn.Parameter sink (what a model trains) runs the eager path, not the operator's slower
    dispatch, and its .grad is the plain tensor's"""
    from flashattn import _torch as ft
    q, k, v, do = make(1, 20, 20, 4, 2, 32, 32, seed=6)
    plain = torch.tensor(SINK, requires_grad=True)
    fa.flash_attn_func(q, k, v, learnable_sink=plain).backward(do)

    def no_operator(*args):
        raise AssertionError("the operator was called")

    monkeypatch.setattr(ft, "fwd", no_operator)
    param = torch.nn.Parameter(torch.tensor(SINK))
    fa.flash_attn_func(q, k, v, learnable_sink=param).backward(do)
    assert torch.equal(param.grad, plain.grad)


def test_operators_opcheck():
    """torch.library.opcheck on flashattn::fwd / flashattn::bwd with a sink and d_v != d: the
    schema, the fake implementations' shapes and the autograd registration agree with the real
    operators"""
    q, k, v, do = make(1, 16, 20, 2, 1, 32, 16, seed=4)
    sink = torch.tensor(SINK[:2], requires_grad=True)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    options = (None, None, 0, 0, None, 0, 0, 0.0, 0.0, True, -1, -1, False, 0, 0, 0.0, None)
    torch.library.opcheck(torch.ops.flashattn.fwd.default, (q, k, v, *options, None, sink))
    out, lse = torch.ops.flashattn.fwd(q, k, v, *options, None, sink)
    assert out.shape == (1, 16, 2, 16)
    bwd_args = (do, q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(), *options, sink.detach())
    torch.library.opcheck(torch.ops.flashattn.bwd.default, bwd_args)
    grads = torch.ops.flashattn.bwd(*bwd_args)
    assert [tuple(g.shape) for g in grads] == [(1, 16, 2, 32), (1, 20, 1, 32), (1, 20, 1, 16), (2,)]
    no_sink = torch.ops.flashattn.bwd(*bwd_args[:-1], None)
    assert no_sink[3].shape == (0,)


def test_compile_dynamic_sink():
    """torch.compile(dynamic=True, fullgraph=True) of a loss with a learnable sink and d_v != d:
    traced through the operators, the same bits as eager for two sequence lengths, and the sink's
    gradient against the plain float64 implementation"""
    def f(q, k, v, sink):
        out = fa.flash_attn_func(q, k, v, causal=True, learnable_sink=sink)
        return (out * out).sum()

    compiled = torch.compile(f, dynamic=True, fullgraph=True, backend="aot_eager")
    for sq in (37, 52):
        q, k, v, _ = make(2, sq, sq + 5, 4, 2, 48, 32, seed=sq)
        sink = torch.tensor(SINK)
        results = []
        for fn in (f, compiled):
            leaves = [x.clone().requires_grad_() for x in (q, k, v, sink)]
            loss = fn(*leaves)
            loss.backward()
            results.append([loss.detach()] + [x.grad for x in leaves])
        for a, b in zip(*results):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        out = fa.flash_attn_func(q, k, v, causal=True, learnable_sink=sink)
        do = 2 * out  # d(sum out^2)/d out
        _, _, r_grads = plain_grads(q, k, v, do, sink, 48 ** -0.5, True, torch.float64)
        _, _, n_grads = plain_grads(q, k, v, do, sink, 48 ** -0.5, True, torch.float32)
        check(results[1][4], r_grads[3], n_grads[3], 3.0, "compiled dsink")


def test_kvcache_sink():
    """flash_attn_with_kvcache on torch tensors with a sink and a value cache of head dim d_v:
    eager, compiled (dynamic, fullgraph) and NumPy give the same bits, against the plain
    implementation over each sequence's cache"""
    g = torch.Generator().manual_seed(3)
    b, sn, h, hk, d, d_v, cap = 3, 2, 4, 2, 64, 32, 24
    q, kc, vc = (torch.randn(*s, generator=g) for s in ((b, sn, h, d), (b, cap, hk, d), (b, cap, hk, d_v)))
    lens = torch.tensor([0, 9, cap], dtype=torch.int32)
    sink = torch.tensor(SINK)

    def f(q, kc, vc, lens, sink):
        return fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True, return_softmax_lse=True,
                                          learnable_sink=sink)

    eager = f(q, kc, vc, lens, sink)
    compiled = torch.compile(f, dynamic=True, fullgraph=True, backend="aot_eager")(q, kc, vc, lens, sink)
    numpy = f(q.numpy(), kc.numpy(), vc.numpy(), lens.numpy(), sink.numpy())
    assert eager[0].shape == (b, sn, h, d_v)
    for e, c, n in zip(eager, compiled, numpy):
        assert torch.equal(e, c) and np.array_equal(e.numpy(), n)
    for bi in range(b):
        sk = int(lens[bi])
        sl = lambda x: x[bi:bi + 1, :sk]
        r_out, r_lse = plain_attention(q[bi:bi + 1].double(), sl(kc).double(), sl(vc).double(), sink, d ** -0.5, True)
        n_out, n_lse = plain_attention(q[bi:bi + 1], sl(kc), sl(vc), sink, d ** -0.5, True)
        check(eager[0][bi:bi + 1], r_out, n_out, 2.0, "O")
        check(eager[1][bi:bi + 1], r_lse, n_lse, 2.0, "LSE")
