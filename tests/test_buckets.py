"""Shape buckets (docs/buckets.md): the policy (torch_tpu.buckets, TORCH_TPU_BUCKETS), and
torch.compile(backend="tpu") graphs with symbolic sizes (dynamic=True, mark_dynamic, automatic
dynamic) running one program per bucket with exact values: reductions, softmax, mean, var,
cumsum, contractions and attention along the padded dim keep the padding out; an op that is
not bucket-aware runs the graph at exact sizes, counted."""
import math

import pytest
import torch
import torch._dynamo
import torch_tpu
from torch.nn import functional as F
from torch.testing import assert_close

from torch_tpu import buckets


def counters():
    return torch_tpu.metrics(wait=True)


def delta(before, key):
    now = counters()
    if isinstance(now[key], dict):
        return {k: v - before[key].get(k, 0) for k, v in now[key].items() if v != before[key].get(k, 0)}
    return now[key] - before[key]


# ---- the policy ----------------------------------------------------------------------------

def test_default_policy_multiples_of_8_then_quarter_steps(monkeypatch):
    monkeypatch.delenv("TORCH_TPU_BUCKETS", raising=False)
    assert [buckets.bucket(n) for n in (1, 7, 8, 9, 63, 64)] == [8, 8, 8, 16, 64, 64]
    assert [buckets.bucket(n) for n in (65, 80, 81, 100, 128, 129, 200, 257)] == [80, 80, 96, 112, 128, 160, 224, 320]
    for n in range(1, 5000):  # the documented waste bound
        b = buckets.bucket(n)
        assert b >= n and b % 8 == 0
        assert (b - n < 8) if n <= 64 else (b < 1.25 * n), n


@pytest.mark.parametrize("spec,sizes,expected", [
    ("pow2", (1, 9, 100, 1024), (8, 16, 128, 1024)),
    ("mult:128", (1, 128, 129), (128, 128, 256)),
    ("16,48,100", (3, 17, 48, 99, 101), (16, 48, 48, 100, 101)),
    ("0", (3, 17), (3, 17)),
    ("off", (5,), (5,)),
])
def test_configured_policies(monkeypatch, spec, sizes, expected):
    monkeypatch.setenv("TORCH_TPU_BUCKETS", spec)
    assert tuple(buckets.bucket(n) for n in sizes) == expected
    assert buckets.enabled() == (spec not in ("0", "off"))


@pytest.mark.parametrize("spec", ["mult:0", "mult:x", "16,8", "pow3", "0,8"])
def test_bad_policies_are_errors(monkeypatch, spec):
    monkeypatch.setenv("TORCH_TPU_BUCKETS", spec)
    with pytest.raises(ValueError, match="TORCH_TPU_BUCKETS"):
        buckets.bucket(5)


# ---- compiled graphs -----------------------------------------------------------------------

def run_lengths(f, make, lengths, compiled=None, **tol):
    """Runs compiled `f` on tpu and `f` on CPU for each length; returns the counters' deltas."""
    g = compiled or torch.compile(f, backend="tpu", dynamic=True)
    before = counters()
    for n in lengths:
        args = make(n)
        got = g(*[a.to("tpu") for a in args])
        want = f(*args)
        if isinstance(want, torch.Tensor):
            got, want = [got], [want]
        for x, y in zip(got, want):
            assert x.shape == y.shape
            assert_close(x.cpu(), y, **tol)
    return {k: delta(before, k) for k in ("bucket_programs", "bucket_exact_programs", "bucket_fallbacks_by_op",
                                          "bucket_pads")}


def along_padded(x):
    """Reductions, normalisations and scans along dim 1 (the varying one)."""
    return (x.sum(1), x.mean(1), x.amax(1), x.amin(1), x.var(1), x.softmax(1), x.log_softmax(1),
            x.cumsum(1), (x * 2).sin() + 1)


def test_dynamic_true_reductions_one_program_per_bucket():
    torch._dynamo.reset()
    d = run_lengths(along_padded, lambda n: (torch.randn(3, n, 4) - 0.5,), [9, 11, 16, 13], rtol=1e-5, atol=1e-5)
    assert d["bucket_programs"] == 1, d  # 9..16: one bucket
    assert d["bucket_exact_programs"] == 0 and not d["bucket_fallbacks_by_op"], d
    assert d["bucket_pads"] == 4  # dynamic=True: every dim is symbolic, 3 and 4 pad to 8 too


def test_padding_is_never_read_even_when_large():
    # A padded position read by amax or sum would show: values far above any real one.
    torch._dynamo.reset()

    def f(x):
        return (x.amax(1), x.sum(1), x.mean(1), F.softmax(x, 1))

    d = run_lengths(f, lambda n: (-torch.rand(2, n) - 1,), [3, 5, 7], rtol=1e-5, atol=1e-6)
    assert d["bucket_programs"] == 1, d


def test_mark_dynamic_matmul_over_padded_dim():
    torch._dynamo.reset()

    def f(a, b):
        return a @ b, torch.bmm(a.unsqueeze(0), b.unsqueeze(0)), (a.t() @ a)

    g = torch.compile(f, backend="tpu")
    before = counters()
    for n in (20, 23, 18):
        a, b = torch.randn(4, n), torch.randn(n, 5)
        at, bt = a.to("tpu"), b.to("tpu")
        torch._dynamo.mark_dynamic(at, 1)
        torch._dynamo.mark_dynamic(bt, 0)
        for x, y in zip(g(at, bt), f(a, b)):
            assert x.shape == y.shape
            assert_close(x.cpu(), y, rtol=1e-5, atol=1e-5)
    assert delta(before, "bucket_programs") == 1  # 18..23 share bucket 24
    assert delta(before, "compile_graphs") == 1


def test_automatic_dynamic_second_size_is_bucketed():
    torch._dynamo.reset()

    def f(x):
        return x.softmax(-1).sum(-1) + x.mean(-1)

    g = torch.compile(f, backend="tpu")  # dynamic unset: Dynamo's automatic dynamic shapes
    before = counters()
    for n in (10, 12, 13, 15, 11):
        x = torch.randn(2, n)
        got = g(x.to("tpu"))
        assert got.shape == (2,)
        assert_close(got.cpu(), f(x), rtol=1e-5, atol=1e-5)
    assert delta(before, "compile_graphs") == 2  # static (10), then symbolic
    assert delta(before, "compile_programs_built") == 2  # 10's, then bucket 16's


def test_gradients_through_padded_dim_are_exact():
    torch._dynamo.reset()
    w = torch.randn(6, 6)

    def f(x, w):
        h = torch.tanh(x @ w)                      # [b, n, 6]
        att = (h @ h.transpose(1, 2)).softmax(-1)  # [b, n, n]: padded on both
        return (att @ h).mean(1).pow(2).sum() + F.log_softmax(h, 1).mean()

    g = torch.compile(f, backend="tpu", dynamic=True)
    before = counters()
    for n in (5, 7, 6):
        x = torch.randn(2, n, 6)
        xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
        xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
        want = f(xc, wc)
        want.backward()
        got = g(xt, wt)
        got.backward()
        assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
        assert xt.grad.shape == xc.grad.shape
        assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
        assert_close(wt.grad.cpu(), wc.grad, rtol=1e-4, atol=1e-5)
    assert delta(before, "bucket_programs") == 2  # the forward's and the backward's, bucket 8
    assert not delta(before, "bucket_fallbacks_by_op")


def test_op_without_bucket_rule_falls_back_exact_and_is_counted():
    torch._dynamo.reset()

    def f(x):
        return torch.flip(x, [1]).cumsum(1) * 2  # flip reads the padding at the front

    d = run_lengths(f, lambda n: (torch.randn(2, n),), [5, 6, 7])
    assert any("flip" in k for k in d["bucket_fallbacks_by_op"]), d
    assert d["bucket_programs"] == 0 and d["bucket_exact_programs"] == 3, d


def tiny_llama(attention="sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    cfg._attn_implementation = attention
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_tiny_llama_forward_and_training_step_one_program_per_bucket(attention):
    import copy

    torch._dynamo.reset()
    cpu = tiny_llama(attention)
    tpu = copy.deepcopy(cpu).to("tpu")
    g = torch.compile(tpu, backend="tpu", dynamic=True)
    before = counters()
    for n in (10, 13, 11):
        ids = torch.randint(0, 128, (2, n), generator=torch.Generator().manual_seed(n))
        want = cpu(ids, use_cache=False).logits
        loss_cpu = F.cross_entropy(want.reshape(-1, 128), ids.reshape(-1))
        loss_cpu.backward()
        got = g(ids.to("tpu"), use_cache=False).logits
        assert got.shape == want.shape
        loss = F.cross_entropy(got.reshape(-1, 128), ids.to("tpu").reshape(-1))
        loss.backward()
        assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
        assert_close(loss.detach().cpu(), loss_cpu.detach(), rtol=1e-5, atol=1e-5)
        for (name, p), q in zip(cpu.named_parameters(), tpu.parameters()):
            assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
        cpu.zero_grad()
        tpu.zero_grad()
    d = {k: delta(before, k) for k in ("bucket_programs", "bucket_exact_programs", "bucket_fallbacks_by_op")}
    assert d["bucket_programs"] == 2 and d["bucket_exact_programs"] == 0, d  # forward + backward, bucket 16
    assert not d["bucket_fallbacks_by_op"], d
