"""The Python package on torch tensors: CPU tensors (the CPU backend) and, where a GPU is present,
CUDA tensors (the CUDA backend, current stream): outputs and gradients through autograd against
float64 with the C suite's pass rule, the custom operators under torch.compile(fullgraph=True),
agreement with torch's scaled_dot_product_attention, dropout from torch's generator. Skipped as
a whole where torch is not installed, the CUDA cases where there is no GPU."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not importable here: every torch case (CPU and CUDA tensors, autograd, "
                                              "torch.compile) skipped; .ci/run runs them in a venv with torch")

import flashattn as fa  # noqa: E402
import reference as ref  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: GPU cases not run")


def f64(t):
    return t.detach().to("cpu", torch.float64).numpy()


def rounding(dtype):
    return {torch.float32: np.float32, torch.float16: np.float16, torch.bfloat16: "bfloat16"}[dtype]


def make(b, sq, sk, h, hk, d, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)
    q, k, v, do = mk(b, sq, h, d), mk(b, sk, hk, d), mk(b, sk, hk, d), mk(b, sq, h, d)
    return q, k, v, do


def check(out, lse, grads, q, k, v, do, scale, vis, dtype, softcap=0.0, slopes_of=lambda bi: None):
    """per sequence: O and LSE (2x the plain implementation's error) and dQ, dK, dV (3x);
    slopes_of(bi): sequence bi's ALiBi slopes [heads] or None"""
    rd = rounding(dtype)
    for bi in range(q.shape[0]):
        mods = dict(softcap=softcap, slopes=slopes_of(bi))
        args64 = [f64(x[bi]) for x in (q, k, v)]
        args32 = [a.astype(np.float32) for a in args64]
        ro, rl = ref.attention(*args64, scale, vis, **mods)
        no, nl = ref.attention(*args32, scale, vis, rd, **mods)
        err, ok = ref.error(f64(out[bi]), ro)
        assert ok and err <= ref.bound(2.0, ref.error(no, ro)[0], ro), f"O error {err}"
        if lse is not None:
            err, _ = ref.error(f64(lse[bi]), rl)
            assert err <= ref.bound(2.0, ref.error(nl, rl)[0], rl), f"LSE error {err}"
        if grads is None:
            continue
        rg = ref.gradients(*args64, f64(do[bi]), scale, vis, **mods)
        ng = ref.gradients(*args32, f64(do[bi]).astype(np.float32), scale, vis, rd, **mods)
        for name, gr, r, n in zip(("dQ", "dK", "dV"), grads, rg, ng):
            err, ok = ref.error(f64(gr[bi]), r)
            assert ok and err <= ref.bound(3.0, ref.error(n, r)[0], r), f"{name} error {err}"


def dtypes_of(device):
    return [torch.float32] if device == "cpu" else [torch.float16, torch.bfloat16]


CASES = [(d, dt, c) for d in ("cpu", "cuda") for dt in (dtypes_of(d) if d in DEVICES else []) for c in (False, True)]


@pytest.mark.parametrize("device,dtype,causal", CASES, ids=lambda x: str(x).replace("torch.", ""))
@pytest.mark.parametrize("hd", [64, 128])
def test_autograd(device, dtype, causal, hd):
    b, sq, sk, h, hk = 2, 100, 130, 4, 2
    q, k, v, do = make(b, sq, sk, h, hk, hd, dtype, device, seed=hd + causal)
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    assert out.device == q.device and out.dtype == dtype and lse.shape == (b, h, sq)
    out.backward(do)
    check(out, lse, (q.grad, k.grad, v.grad), q, k, v, do, hd ** -0.5, ref.visible(sq, sk, causal, (-1, -1)), dtype)


@pytest.mark.parametrize("device,dtype,causal", CASES, ids=lambda x: str(x).replace("torch.", ""))
def test_softcap_alibi_autograd(device, dtype, causal):
    """softcap= and per-sequence ALiBi slopes through the custom operator and autograd."""
    b, sq, sk, h, hk, d = 2, 90, 130, 4, 2, 64
    q, k, v, do = make(b, sq, sk, h, hk, d, dtype, device, seed=3)
    slopes = torch.tensor([[2.0 ** (-2 * (i + 1)) * (1 + bi) for i in range(h)] for bi in range(b)],
                          dtype=torch.float32, device=device)
    for x in (q, k, v):
        x.requires_grad_(True)
    out = fa.flash_attn_func(q, k, v, causal=causal, softcap=2.0, alibi_slopes=slopes)
    out.backward(do)
    vis = ref.visible(sq, sk, causal, (-1, -1))
    check(out, None, (q.grad, k.grad, v.grad), q, k, v, do, d ** -0.5, vis, dtype, softcap=2.0,
          slopes_of=lambda bi: slopes[bi].cpu().numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_and_block_sparse_autograd(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    lens = [7, 64, 33]
    cu = torch.tensor(np.cumsum([0] + lens), dtype=torch.int32, device=device)
    q, k, v, do = (x[0] for x in make(1, sum(lens), sum(lens), 2, 2, 64, dtype, device, seed=3))
    for x in (q, k, v):
        x.requires_grad_()
    out = fa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)
    out.backward(do)
    for s in range(len(lens)):
        a, e = int(cu[s]), int(cu[s + 1])
        sl = lambda x: x[None, a:e]
        check(sl(out), None, (sl(q.grad), sl(k.grad), sl(v.grad)), sl(q), sl(k), sl(v), sl(do), 0.125,
              ref.visible(e - a, e - a, True, (-1, -1)), dtype)
    q2, k2, v2, do2 = make(1, 128, 128, 2, 2, 64, dtype, device, seed=4)
    for x in (q2, k2, v2):
        x.requires_grad_()
    bits = torch.tensor([[1, 0, 1, 0], [0, 1, 0, 0], [1, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.bool)
    out2 = fa.block_sparse_attn_func(q2, k2, v2, bits, (32, 32))
    out2.backward(do2)
    check(out2, None, (q2.grad, k2.grad, v2.grad), q2, k2, v2, do2, 0.125,
          ref.visible(128, 128, False, (-1, -1), (bits.numpy(), 32, 32)), dtype)


def nan_filled(allocate):
    """allocate (torch.empty, torch.empty_like) with its floating-point tensors filled with NaN: an
    output element the package leaves unwritten then shows"""
    def allocate_nan(*args, **kwargs):
        t = allocate(*args, **kwargs)
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t
    return allocate_nan


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_rows_after_the_last_sequence(device, monkeypatch):
    """cu_seqlens[-1] below the packed rows (padding at the end): those rows get out = 0,
    LSE = -inf and zero gradients. torch.empty is poisoned with NaN, so an output row the package
    leaves unwritten shows."""
    monkeypatch.setattr(torch, "empty", nan_filled(torch.empty))
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    g = torch.Generator().manual_seed(12)
    mk = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)
    q, k, v = mk(64, 2, 64), mk(40, 2, 64), mk(40, 2, 64)
    for x in (q, k, v):
        x.requires_grad_()
    cu_q = torch.tensor([0, 1, 5], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 7, 30], dtype=torch.int32, device=device)
    out, lse, _ = fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 23, return_attn_probs=True)
    assert bool((out[5:] == 0).all()) and bool((lse[:, 5:] == float("-inf")).all())
    assert bool(torch.isfinite(out[:5]).all()) and bool(torch.isfinite(lse[:, :5]).all())
    out.backward(mk(64, 2, 64))
    assert bool((q.grad[5:] == 0).all()) and bool((k.grad[30:] == 0).all()) and bool((v.grad[30:] == 0).all())
    assert all(bool(torch.isfinite(x.grad).all()) for x in (q, k, v))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    """a small attention model compiled with fullgraph=True: no graph break, and the same outputs
    and gradients as eager"""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads = heads
            self.qkv = torch.nn.Linear(dim, 3 * dim)
            self.proj = torch.nn.Linear(dim, dim)

        def forward(self, x):
            b, s, dim = x.shape
            qkv = self.qkv(x).view(b, s, 3, self.heads, dim // self.heads)
            y = fa.flash_attn_qkvpacked_func(qkv, causal=True)
            return x + self.proj(y.reshape(b, s, dim))

    model = Block(256, 4).to(device=device, dtype=dtype)
    x = torch.randn(2, 96, 256, device=device, dtype=dtype)
    eager = model(x)
    eager.float().square().mean().backward()
    g_eager = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    y = compiled(x)
    y.float().square().mean().backward()
    tol = dict(rtol=0, atol=0) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(y, eager, **tol)
    for a, b in zip((p.grad for p in model.parameters()), g_eager):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_varlen_and_block_sparse(device):
    """varlen and block-sparse calls under torch.compile(fullgraph=True): traced, no graph break,
    outputs and gradients equal to eager"""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    lens = [5, 40, 19]
    cu = torch.tensor(np.cumsum([0] + lens), dtype=torch.int32, device=device)
    bits = torch.tensor([[1, 0], [1, 1]], dtype=torch.bool)

    def f(q, k, v, q2, k2, v2):
        a = fa.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True, deterministic=True)
        b = fa.block_sparse_attn_func(q2, k2, v2, bits, (32, 32), deterministic=True)
        return a.float().square().sum() + b.float().square().sum()

    q, k, v, _ = (x[0] for x in make(1, sum(lens), sum(lens), 2, 1, 32, dtype, device, seed=8))
    q2, k2, v2, _ = make(2, 64, 64, 2, 2, 64, dtype, device, seed=9)
    inputs = [x.detach().requires_grad_() for x in (q, k, v, q2, k2, v2)]
    eager = f(*inputs)
    eager.backward()
    g_eager = [x.grad.clone() for x in inputs]
    for x in inputs:
        x.grad = None
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    y = compiled(*inputs)
    y.backward()
    torch.testing.assert_close(y, eager, rtol=1e-6, atol=0)
    for a, b in zip((x.grad for x in inputs), g_eager):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_compile_dynamic_softcap():
    """torch.compile(dynamic=True, fullgraph=True) with softcap and causal: traced once for two
    sequence lengths and two softcap values (a float graph input, no concrete value while tracing),
    outputs and gradients equal to eager; a bad softcap is still refused, at once in eager and
    when the compiled code runs"""
    def f(q, k, v, cap):
        return fa.flash_attn_func(q, k, v, causal=True, softcap=cap, softmax_scale=0.3)

    compiled = torch.compile(f, dynamic=True, fullgraph=True, backend="aot_eager")
    for sq, cap in ((33, 5.0), (47, 2.5)):
        q, k, v, do = (x.requires_grad_() for x in make(2, sq, sq + 9, 4, 2, 32, torch.float32, "cpu", seed=sq))
        do = do.detach()
        y = compiled(q, k, v, cap)
        grads = torch.autograd.grad(y, (q, k, v), do)
        eager = f(q, k, v, cap)
        g_eager = torch.autograd.grad(eager, (q, k, v), do)
        torch.testing.assert_close(y, eager, rtol=0, atol=0)
        for a, b in zip(grads, g_eager):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(ValueError, match="softcap"):
        f(q, k, v, -1.0)
    with pytest.raises(ValueError, match="softcap"):
        compiled(q, k, v, float("nan"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("compiled", [False, True])
def test_last_dimension_strided_is_made_contiguous(device, compiled):
    """q, k, v and dout whose last stride is not 1 (every other element of a wider tensor) are
    copied as FlashAttention-2's maybe_contiguous does: the same bits as contiguous tensors,
    outputs and gradients, eager and compiled"""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v, do = make(2, 40, 56, 4, 2, 64, dtype, device, seed=17)

    def run(x, y, z, dout):
        leaves = [t.detach().requires_grad_() for t in (x, y, z)]
        f = fa.flash_attn_func
        if compiled:
            f = torch.compile(f, fullgraph=True, backend="aot_eager")
        out = f(*leaves, causal=True)
        return [out] + list(torch.autograd.grad(out, leaves, dout))

    expected = run(q, k, v, do)
    wide = [x.repeat_interleave(2, dim=-1) for x in (q, k, v, do)]
    strided = [w[..., ::2] for w in wide]
    assert all(t.stride(-1) == 2 for t in strided)
    for got, want in zip(run(*strided), expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def plain_attention(q, k, v, causal, softcap):
    """attention in torch's own ops, in q's dtype: its gradients are autograd's"""
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if causal:
        seen = torch.ones(s.shape[-2:], dtype=torch.bool).tril(s.shape[-1] - s.shape[-2])
        s = s.masked_fill(~seen, float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v)


def test_float64_refused_with_the_way_to_check_gradients():
    """fp64 is not a dtype of the library: the error says so and names the fp32 gradcheck, for
    torch tensors and NumPy arrays"""
    q = torch.randn(1, 4, 2, 8, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"fp64 is not a dtype of this library.*gradcheck"):
        fa.flash_attn_func(q, q, q)
    with pytest.raises(TypeError, match=r"fp64 is not a dtype of this library.*gradcheck"):
        fa.flash_attn_func(q.numpy(), q.numpy(), q.numpy())


def test_gradients_by_finite_differences_in_fp32():
    """the check gradcheck makes, in fp32: directional derivatives of sum(O * dO) by central
    differences (evaluated in float64 from fp32 outputs) against the autograd gradients, within 3x
    the discrepancy that the same check finds for attention in torch's own fp32 ops on the same
    inputs; and torch.autograd.gradcheck on fp32 inputs with the tolerances the error message names"""
    q, k, v, do = make(1, 12, 16, 2, 2, 16, torch.float32, "cpu", seed=31)
    cases = {"flashattn": lambda *x: fa.flash_attn_func(*x, causal=True, softcap=3.0),
             "plain": lambda *x: plain_attention(*x, True, 3.0)}
    g = torch.Generator().manual_seed(5)
    directions = [[torch.randn(x.shape, generator=g) for x in (q, k, v)] for _ in range(8)]
    step = 3e-3
    worst = {}
    for name, f in cases.items():
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        grads = torch.autograd.grad(f(*leaves), leaves, do)
        errors = []
        for u in directions:
            def along(t):
                return float((f(*(x + t * du for x, du in zip((q, k, v), u))).double() * do.double()).sum())
            numeric = (along(step) - along(-step)) / (2 * step)
            analytic = sum(float((gr.double() * du.double()).sum()) for gr, du in zip(grads, u))
            errors.append(abs(numeric - analytic) / max(1.0, abs(analytic)))
        worst[name] = max(errors)
    assert worst["flashattn"] <= 3.0 * worst["plain"] + 1e-5, worst
    small = [torch.randn(1, 6, 2, 8, generator=g).requires_grad_() for _ in range(3)]
    assert torch.autograd.gradcheck(lambda *x: fa.flash_attn_func(*x, causal=True), small, eps=1e-3, atol=1e-2,
                                    rtol=1e-2)


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_agrees_with_sdpa(dtype):
    """ours and torch's scaled_dot_product_attention both within the pass rule of float64, and
    within twice that of each other"""
    q, k, v, do = make(2, 256, 256, 8, 8, 128, dtype, "cuda", seed=5)
    ours = fa.flash_attn_func(q, k, v, causal=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                            is_causal=True).transpose(1, 2)
    vis = ref.visible(256, 256, True, (-1, -1))
    check(ours, None, None, q, k, v, do, 128 ** -0.5, vis, dtype)
    ro, _ = ref.attention(f64(q[0]), f64(k[0]), f64(v[0]), 128 ** -0.5, vis)
    no, _ = ref.attention(*(f64(x[0]).astype(np.float32) for x in (q, k, v)), 128 ** -0.5, vis, rounding(dtype))
    b = ref.bound(2.0, ref.error(no, ro)[0], ro)
    assert float((ours[0].float() - sdpa[0].float()).abs().max()) <= 2 * b


@needs_gpu
def test_current_stream():
    q, k, v, _ = make(1, 512, 512, 4, 4, 64, torch.bfloat16, "cuda", seed=6)
    expected = fa.flash_attn_func(q, k, v)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = fa.flash_attn_func(q, k, v)
    s.synchronize()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_dropout_from_torch_generator(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v, do = make(1, 64, 64, 2, 2, 64, dtype, device, seed=7)
    torch.manual_seed(123)
    a = fa.flash_attn_func(q, k, v, dropout_p=0.2)
    torch.manual_seed(123)
    b = fa.flash_attn_func(q, k, v, dropout_p=0.2)
    c = fa.flash_attn_func(q, k, v, dropout_p=0.2)  # the generator has moved on
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(a, c)
    for x in (q, k, v):
        x.requires_grad_()
    # autograd's backward regenerates the forward's mask: the same gradients as an explicit
    # backward with that seed (deterministic, so bitwise)
    out = fa.flash_attn_func(q, k, v, dropout_p=0.2, seed=5, deterministic=True)
    out.backward(do)
    lse = fa.flash_attn_func(q.detach(), k.detach(), v.detach(), dropout_p=0.2, seed=5, return_attn_probs=True)[1]
    dq, dk, dv = fa.flash_attn_backward(do, q.detach(), k.detach(), v.detach(), out.detach(), lse, dropout_p=0.2,
                                        seed=5, deterministic=True)
    torch.testing.assert_close(q.grad, dq, rtol=0, atol=0)
    torch.testing.assert_close(k.grad, dk, rtol=0, atol=0)
    torch.testing.assert_close(v.grad, dv, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_errors(device):
    q, k, v, _ = make(1, 16, 16, 2, 2, 64, torch.float32 if device == "cpu" else torch.float16, device)
    with pytest.raises(fa.FlashAttnError) as e:
        fa.flash_attn_func(q, k[..., :32], v)
    assert e.value.status == "FA_ERR_INVALID_ARG"
    with pytest.raises(TypeError):
        fa.flash_attn_func(q.double(), k.double(), v.double())
    if device == "cuda":
        with pytest.raises((ValueError, RuntimeError)):
            fa.flash_attn_func(q, k.cpu(), v.cpu())


@needs_gpu
@pytest.mark.parametrize("hd", [64, 128])
def test_long_packed_backward(hd):
    """the shape that GPT-2 training gives the package: packed QKV views (token stride 3 h d),
    causal, 1024 tokens, many query tiles per key tile; gradients through autograd against float64"""
    dtype, b, s, h = torch.bfloat16, 1, 1024, 3
    g = torch.Generator().manual_seed(hd)
    qkv = torch.randn(b, s, 3, h, hd, generator=g).to(device="cuda", dtype=dtype).requires_grad_()
    do = torch.randn(b, s, h, hd, generator=g).to(device="cuda", dtype=dtype)
    out = fa.flash_attn_qkvpacked_func(qkv, causal=True)
    out.backward(do)
    q, k, v = qkv.unbind(2)
    dq, dk, dv = qkv.grad.unbind(2)
    check(out, None, (dq, dk, dv), q, k, v, do, hd ** -0.5, ref.visible(s, s, True, (-1, -1)), dtype)


@needs_gpu
def test_default_stream_order():
    """calls on torch's default stream (handle 0) are ordered with torch's work on it: inputs
    written by a kernel queued behind a long sleep, outputs read by the next kernel"""
    q, k, v, do = make(1, 2048, 2048, 8, 8, 128, torch.bfloat16, "cuda", seed=7)
    assert torch.cuda.current_stream().cuda_stream == 0
    q.requires_grad_()
    out = fa.flash_attn_func(q, k, v, deterministic=True)
    out.backward(do)
    expected, expected_dq = out.detach().clone(), q.grad.clone()
    torch.cuda.synchronize()
    q2 = torch.zeros_like(q)
    torch.cuda._sleep(200_000_000)  # some 0.1 s of spinning ahead of the copy on the default stream
    q2.copy_(q.detach())
    q2.requires_grad_()
    out2 = fa.flash_attn_func(q2, k, v, deterministic=True)
    got = out2.detach().clone()  # the next kernel on the default stream
    torch.cuda._sleep(200_000_000)
    do2 = do * 1
    out2.backward(do2)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(q2.grad, expected_dq, rtol=0, atol=0)


def kvcache_inputs(seed, paged):
    """q, caches (contiguous or paged in shuffled pages), new keys / values, rotary tables, lengths
    and block table: float32 CPU tensors (flash_attn_with_kvcache runs on the CPU backend)"""
    g = torch.Generator().manual_seed(seed)
    b, sn, h, hk, d, cap, page = 3, 1, 4, 2, 64, 64, 16
    q = torch.randn(b, sn, h, d, generator=g)
    kn, vn = torch.randn(b, 1, hk, d, generator=g), torch.randn(b, 1, hk, d, generator=g)
    rows = (b * cap // page + 2, page) if paged else (b, cap)
    kc, vc = torch.randn(*rows, hk, d, generator=g), torch.randn(*rows, hk, d, generator=g)
    table = (torch.randperm(rows[0], generator=g)[: b * cap // page].reshape(b, cap // page).to(torch.int32)
             if paged else None)
    theta = torch.arange(cap + sn)[:, None] * 10000.0 ** (-2.0 * torch.arange(16)[None, :] / 32)
    lens = torch.tensor([0, 9, cap - 4], dtype=torch.int32)
    return q, kc, vc, kn, vn, theta.cos(), theta.sin(), lens, table


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_tensors_as_numpy(paged):
    """torch CPU tensors through the custom operator give the NumPy path's outputs and caches, bit
    for bit (test_kvcache.py holds the NumPy path to float64); the caches are written in place"""
    q, kc, vc, kn, vn, cos, sin, lens, table = kvcache_inputs(4, paged)
    n = [x.numpy().copy() if x is not None else None for x in (q, kc, vc, kn, vn, cos, sin, lens, table)]
    kc_before = kc.clone()
    out, lse = fa.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, rotary_cos=cos, rotary_sin=sin, cache_seqlens=lens,
                                         block_table=table, causal=True, return_softmax_lse=True)
    n_out, n_lse = fa.flash_attn_with_kvcache(n[0], n[1], n[2], k=n[3], v=n[4], rotary_cos=n[5], rotary_sin=n[6],
                                             cache_seqlens=n[7], block_table=n[8], causal=True,
                                             return_softmax_lse=True)
    assert not torch.equal(kc, kc_before)
    for got, want in ((out, n_out), (lse, n_lse), (kc, n[1]), (vc, n[2])):
        np.testing.assert_array_equal(got.numpy(), want)


def test_kvcache_compile_fullgraph():
    """three decode steps (append one token, attend) under torch.compile(fullgraph=True): traced
    through flashattn::fwd_kvcache without a graph break, the caches mutated as in eager, the same
    outputs; an int cache_seqlens as well as a tensor"""
    q, kc, vc, kn, vn, cos, sin, lens, table = kvcache_inputs(5, True)

    def steps(q, kc, vc, kn, vn, lens):
        outs = []
        for i in range(3):
            outs.append(fa.flash_attn_with_kvcache(q, kc, vc, k=kn + i, v=vn - i, rotary_cos=cos, rotary_sin=sin,
                                                   cache_seqlens=lens + i, block_table=table, causal=True))
        outs.append(fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=3, block_table=table))
        return torch.stack(outs)

    eager_kc, eager_vc = kc.clone(), vc.clone()
    eager = steps(q, eager_kc, eager_vc, kn, vn, lens)
    compiled = torch.compile(steps, fullgraph=True, backend="aot_eager")
    got = compiled(q, kc, vc, kn, vn, lens)
    torch.testing.assert_close(got, eager, rtol=0, atol=0)
    torch.testing.assert_close(kc, eager_kc, rtol=0, atol=0)
    torch.testing.assert_close(vc, eager_vc, rtol=0, atol=0)
    assert not torch.equal(kc, kvcache_inputs(5, True)[1])
    # functionalization relies on the schema naming the caches as written (aot_eager alone would
    # not notice an undeclared mutation: the operator runs eagerly inside the graph)
    written = [a.name for a in torch.ops.flashattn.fwd_kvcache.default._schema.arguments
               if a.alias_info is not None and a.alias_info.is_write]
    assert written == ["k_cache", "v_cache"]


@pytest.mark.parametrize("device", DEVICES)
def test_kvcache_check_on_device(device):
    """check_on_device=True: the same outputs and caches as the host check; a full sequence given a
    new token is refused at once on the CPU and, on CUDA, by flashattn.synchronize, with the
    outputs, the caches and a good call made in between all untouched; then the context runs again"""
    q, kc, vc, kn, vn, cos, sin, lens, table = (x.to(device) if x is not None else None
                                                 for x in kvcache_inputs(6, True))
    args = dict(k=kn, v=vn, rotary_cos=cos, rotary_sin=sin, block_table=table, causal=True, return_softmax_lse=True)
    kc2, vc2 = kc.clone(), vc.clone()
    want = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, **args)
    got = fa.flash_attn_with_kvcache(q, kc2, vc2, cache_seqlens=lens, check_on_device=True, **args)
    fa.synchronize(q)
    for g, w in zip(got + (kc2, vc2), want + (kc, vc)):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    full = torch.tensor([0, 9, table.shape[1] * kc.shape[1]], dtype=torch.int32, device=device)
    before_k, before_v = kc.clone(), vc.clone()
    if device == "cpu":
        with pytest.raises(fa.FlashAttnError) as e:
            fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=full, check_on_device=True, **args)
    else:
        out, _ = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=full, check_on_device=True, **args)
        out_before = out.clone()
        good, _ = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, check_on_device=True, **args)
        good_before = good.clone()
        with pytest.raises(fa.FlashAttnError) as e:
            fa.synchronize(q)
        assert "checked on the device" in e.value.message
        torch.testing.assert_close(out, out_before, rtol=0, atol=0)
        torch.testing.assert_close(good, good_before, rtol=0, atol=0)
    assert e.value.status == "FA_ERR_INVALID_ARG"
    torch.testing.assert_close(kc, before_k, rtol=0, atol=0)
    torch.testing.assert_close(vc, before_v, rtol=0, atol=0)
    again = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, check_on_device=True, **args)
    fa.synchronize(q)
    for g, w in zip(again, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_kvcache_eager_arguments():
    """every option reaches the library on the eager path of torch tensors (which skips the custom
    operator) as on the NumPy path and through the operator itself, bit for bit: three new
    tokens, causal and a window, softcap, ALiBi, a given scale, half-split rotary, two splits"""
    g = torch.Generator().manual_seed(8)
    b, sn, h, hk, d, cap = 3, 3, 4, 2, 64, 64
    q = torch.randn(b, sn, h, d, generator=g)
    kc, vc = torch.randn(b, cap, hk, d, generator=g), torch.randn(b, cap, hk, d, generator=g)
    kn, vn = torch.randn(b, sn, hk, d, generator=g), torch.randn(b, sn, hk, d, generator=g)
    theta = torch.arange(cap + sn)[:, None] * 10000.0 ** (-2.0 * torch.arange(16)[None, :] / 32)
    lens = torch.tensor([0, 9, cap - sn - 1], dtype=torch.int32)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    opts = dict(softmax_scale=0.3, causal=True, window_size=(5, -1), softcap=20.0, rotary_interleaved=False,
                num_splits=2)
    caches = [(kc.clone(), vc.clone()) for _ in range(2)]
    got = fa.flash_attn_with_kvcache(q, caches[0][0], caches[0][1], k=kn, v=vn, rotary_cos=theta.cos(),
                                     rotary_sin=theta.sin(), cache_seqlens=lens, alibi_slopes=slopes,
                                     return_softmax_lse=True, **opts)
    n_kc, n_vc = kc.numpy().copy(), vc.numpy().copy()
    want = fa.flash_attn_with_kvcache(q.numpy(), n_kc, n_vc, k=kn.numpy(), v=vn.numpy(),
                                      rotary_cos=theta.cos().numpy(), rotary_sin=theta.sin().numpy(),
                                      cache_seqlens=lens.numpy(), alibi_slopes=slopes.numpy(),
                                      return_softmax_lse=True, **opts)
    op = torch.ops.flashattn.fwd_kvcache(q, caches[1][0], caches[1][1], kn, vn, theta.cos(), theta.sin(), lens, None,
                                         None, None, 0.3, True, 5, -1, 20.0, False, slopes, 2, False, None)
    for g_, w_, o_ in zip(got + caches[0], want + (n_kc, n_vc), op + caches[1]):
        np.testing.assert_array_equal(g_.numpy(), w_)
        np.testing.assert_array_equal(o_.numpy(), w_)


def graph_nodes(fn):
    """the names of every autograd node reachable from fn"""
    names, todo, seen = set(), [fn], set()
    while todo:
        f = todo.pop()
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        names.add(f.name())
        todo.extend(n for n, _ in f.next_functions)
    return names


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("packing", ["qkv", "kv"])
@pytest.mark.parametrize("with_sink", [False, True])
def test_packed_gradient_in_one_tensor(device, packing, with_sink):
    """qkv- and kv-packed calls (FlashAttention-2's FlashAttnQKVPackedFunc): the gradient of the
    packed tensor is written as one tensor by the backward, not assembled by autograd from its
    slices (a zero tensor of the packed shape per slice, then their sum); within the float64 rule
    (without a sink), and in the deterministic mode the unpacked call's bits, the sink's gradient
    included"""
    dtype = dtypes_of(device)[0]
    b, s, h, d = 2, 75, 4, 64
    q, k, v, do = make(b, s, s, h, h, d, dtype, device, seed=21)
    qkv = torch.stack((q, k, v), dim=2)

    def packed_call(deterministic):
        packed = (qkv if packing == "qkv" else qkv[:, :, 1:]).clone().requires_grad_()
        q1 = q.clone().requires_grad_()
        sink = torch.nn.Parameter(torch.linspace(-1.0, 1.0, h, device=device)) if with_sink else None
        opts = dict(causal=True, deterministic=deterministic, learnable_sink=sink)
        out = fa.flash_attn_qkvpacked_func(packed, **opts) if packing == "qkv" else \
            fa.flash_attn_kvpacked_func(q1, packed, **opts)
        names = graph_nodes(out.grad_fn)
        assert "_EagerPackedAttentionBackward" in names and not any("Select" in n or "Unbind" in n for n in names)
        out.backward(do)
        grads = (packed.grad[:, :, 0], packed.grad[:, :, 1], packed.grad[:, :, 2]) if packing == "qkv" else \
            (q1.grad, packed.grad[:, :, 0], packed.grad[:, :, 1])
        return out, grads, sink

    out, grads, _ = packed_call(False)
    if not with_sink:
        check(out, None, grads, q, k, v, do, d ** -0.5, ref.visible(s, s, True, (-1, -1)), dtype)
    _, grads, sink = packed_call(True)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    sink1 = torch.nn.Parameter(sink.detach().clone()) if with_sink else None
    fa.flash_attn_func(*leaves, causal=True, deterministic=True, learnable_sink=sink1).backward(do)
    for a, e in zip(grads, (x.grad for x in leaves)):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    if with_sink:
        assert sink.grad is not None and bool(sink.grad.abs().sum() > 0)
        torch.testing.assert_close(sink.grad, sink1.grad, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("packing", ["qkv", "kv"])
def test_packed_varlen_rows_after_the_last_sequence(device, packing, monkeypatch):
    """the packed varlen gradient: rows after cu_seqlens[-1] are zero (torch.empty_like poisoned
    with NaN shows a row left unwritten), the sequences' rows the unpacked call's"""
    dtype = dtypes_of(device)[0]
    g = torch.Generator().manual_seed(22)
    qkv = torch.randn(50, 3, 2, 64, generator=g).to(device=device, dtype=dtype)
    do = torch.randn(50, 2, 64, generator=g).to(device=device, dtype=dtype)
    cu = torch.tensor([0, 9, 41], dtype=torch.int32, device=device)
    packed = (qkv if packing == "qkv" else qkv[:, 1:].clone()).requires_grad_()
    q1 = qkv[:, 0].detach().clone().requires_grad_()
    monkeypatch.setattr(torch, "empty_like", nan_filled(torch.empty_like))
    out = fa.flash_attn_varlen_qkvpacked_func(packed, cu, 32, causal=True, deterministic=True) if packing == "qkv" \
        else fa.flash_attn_varlen_kvpacked_func(q1, packed, cu, cu, 32, 32, causal=True, deterministic=True)
    out.backward(do)
    monkeypatch.undo()
    assert bool((packed.grad[41:] == 0).all()) and bool(torch.isfinite(packed.grad).all())
    if packing == "kv":
        assert bool((q1.grad[41:] == 0).all()) and bool(torch.isfinite(q1.grad).all())
    leaves = [qkv[:, i].detach().clone().requires_grad_() for i in range(3)]
    fa.flash_attn_varlen_func(*leaves, cu, cu, 32, 32, causal=True, deterministic=True).backward(do)
    want = torch.stack([x.grad for x in leaves], dim=1)
    got = packed.grad if packing == "qkv" else torch.cat((q1.grad[:, None], packed.grad), dim=1)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_eager_path_is_the_operator(device):
    """Eager calls on plain tensors run _EagerAttention (the operator's first call costs seconds of
    torch imports); it must give the operator's bits, forward and gradients, and a traced call
    (a FakeTensor, as torch.compile sees) must still go to the operator."""
    from flashattn import _torch as ft
    dtype = dtypes_of(device)[0]
    q, k, v, do = make(2, 70, 90, 4, 2, 64, dtype, device, seed=3)
    args = (None, None, 0, 0, None, 0, 0, 0.0, 0.0, True, -1, -1, False, 0, 0, 0.0, None, None, None)
    grads = []
    for run in (lambda *t: ft._EagerAttention.apply(*t, *args), lambda *t: ft.fwd(*t, *args)):
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        out, lse = run(*leaves)
        out.backward(do)
        grads.append((out.detach(), lse, *(x.grad for x in leaves)))
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    assert ft._eager(q, k, v)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(q)
        assert not ft._eager(fake, fake, fake)
