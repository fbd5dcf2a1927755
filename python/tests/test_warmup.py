"""flashattn.warmup (fa_warmup) on the CPU backend: the shapes and options it takes, the sink it
allocates and frees, and bad input: Python's own checks (TypeError / ValueError) and the
library's refusals (FlashAttnError with the status and a message that starts "fa_warmup: ")."""
import numpy as np
import pytest

import flashattn as fa


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16", "float16", np.float32, np.dtype("float16")])
def test_forward_each_dtype(dtype):
    assert fa.warmup(dtype, 64, backend="cpu") is None


def test_forward_backward_with_every_option():
    fa.warmup("bf16", 64, head_dim_v=32, heads_q=4, heads_kv=2, seqlen=40, causal=True, softcap=30.0,
              learnable_sink=True, backward=True, backend="cpu")
    fa.warmup("fp16", 128, heads_q=2, window_size=(16, 0), backward=True, backend="cpu:0")
    fa.warmup("fp32", 32, backward=True, backend="cpu", device=0)


def test_environment_picks_the_backend(monkeypatch):
    monkeypatch.setenv("FLASHATTN_BACKEND", "cpu")
    fa.warmup("bf16", 64, backward=True)
    monkeypatch.setenv("FLASHATTN_BACKEND", "no-such-backend")
    with pytest.raises(fa.FlashAttnError) as e:
        fa.warmup("bf16", 64)
    assert e.value.status == "FA_ERR_NO_BACKEND"


@pytest.mark.parametrize("kwargs, status, needle", [
    (dict(head_dim=512), "FA_ERR_UNSUPPORTED", "512"),
    (dict(head_dim=64, head_dim_v=320, backward=True), "FA_ERR_UNSUPPORTED", "320"),
    (dict(head_dim=64, heads_q=3, heads_kv=2), "FA_ERR_INVALID_ARG", "heads"),
    (dict(head_dim=64, seqlen=0), "FA_ERR_INVALID_ARG", "seqlen 0"),
    (dict(head_dim=0), "FA_ERR_INVALID_ARG", "d 0"),
    (dict(head_dim=64, heads_q=0, learnable_sink=True), "FA_ERR_INVALID_ARG", "heads_q 0"),
    (dict(head_dim=64, head_dim_v=-1), "FA_ERR_INVALID_ARG", "d_v -1"),
    (dict(head_dim=64, seqlen=2 ** 40, heads_q=2 ** 20, heads_kv=2 ** 20), "FA_ERR_OVERFLOW", "overflows"),
])
def test_library_refusals(kwargs, status, needle):
    d = kwargs.pop("head_dim")
    with pytest.raises(fa.FlashAttnError) as e:
        fa.warmup("bf16", d, backend="cpu", **kwargs)
    assert e.value.status == status
    assert e.value.message.startswith("fa_warmup: ") and not e.value.message.startswith("fa_warmup: fa_warmup")
    assert needle in e.value.message


@pytest.mark.parametrize("args, kwargs, error", [
    (("fp8", 64), {}, ValueError),
    (("bf16", 64.0), {}, TypeError),
    (("bf16", True), {}, TypeError),
    (("bf16", 64), dict(heads_q=2 ** 64), ValueError),
    (("bf16", 64), dict(causal=1), TypeError),
    (("bf16", 64), dict(backward="yes"), TypeError),
    (("bf16", 64), dict(learnable_sink=np.zeros(1, np.float32)), TypeError),
    (("bf16", 64), dict(window_size=(1, 2, 3)), ValueError),
    (("bf16", 64), dict(window_size=None), TypeError),
    (("bf16", 64), dict(softcap=-1.0), ValueError),
    (("bf16", 64), dict(softcap=float("nan")), ValueError),
    (("bf16", 64), dict(backend=3), TypeError),
    (("bf16", 64), dict(backend="cpu:1", device=2), ValueError),
])
def test_python_checks(args, kwargs, error):
    kwargs.setdefault("backend", "cpu")
    with pytest.raises(error):
        fa.warmup(*args, **kwargs)


def test_keyword_only():
    with pytest.raises(TypeError):
        fa.warmup("bf16", 64, 64)


def test_arguments_reach_the_library(monkeypatch):
    """What fa_warmup is given: the defaults (heads_kv = heads_q, d_v 0 = d), the options, a sink
    in the context's memory, backward as 0 / 1."""
    from flashattn import _capi
    lib = _capi.lib()
    real, calls = lib.fa_warmup, []

    def spy(ctx, dtype, seqlen, hq, hk, d, d_v, opts, backward):
        o = opts._obj
        calls.append((dtype, seqlen, hq, hk, d, d_v, o.causal, o.window_left, o.window_right, o.softcap,
                      bool(o.learnable_sink), backward))
        return real(ctx, dtype, seqlen, hq, hk, d, d_v, opts, backward)

    monkeypatch.setattr(lib, "fa_warmup", spy)
    fa.warmup("bf16", 64, heads_q=4, backend="cpu")
    fa.warmup("fp16", 128, head_dim_v=64, heads_q=4, heads_kv=2, seqlen=7, causal=True, window_size=(8, 0),
              softcap=5.0, learnable_sink=True, backward=True, backend="cpu")
    assert calls == [(_capi.DTYPE_BF16, 128, 4, 4, 64, 0, 0, -1, -1, 0.0, False, 0),
                     (_capi.DTYPE_F16, 7, 4, 2, 128, 64, 1, 8, 0, 5.0, True, 1)]
