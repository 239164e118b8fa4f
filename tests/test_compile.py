"""torch.compile(backend="tpu"): compiled results against eager tpu and PyTorch CPU for an MLP,
a small CNN, a tiny Llama (forward, training step, generate() with a static cache); graph
breaks, recompilation on new shapes (counted with reasons), input mutations, partitions
around ops without lowerings, errors, and the persistent compilation cache."""
import copy
import sys
import textwrap

import pytest
import torch
import torch._dynamo
import torch_tpu
from torch import nn
from torch.nn import functional as F
from torch.testing import assert_close

from conftest import run_python


def counters():
    return torch_tpu.metrics(wait=True)


def delta(before, key):
    return counters()[key] - before[key]


def tpu_copy(module):
    return copy.deepcopy(module).to("tpu")


def assert_params_close(a, b, **tol):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert_close(q.detach().cpu(), p.detach().cpu(), msg=lambda m: f"{name}: {m}", **tol)


def train_step(model, opt, x, y):
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def check_training(make, x, y, make_opt, steps=3, **tol):
    """Runs `steps` whole training steps (forward, backward, optimizer) on CPU, eagerly on
    tpu and compiled on tpu from the same weights; losses and parameters agree."""
    torch.manual_seed(0)
    cpu = make()
    eager, compiled = tpu_copy(cpu), tpu_copy(cpu)
    opts = [make_opt(m.parameters()) for m in (cpu, eager, compiled)]
    step = torch.compile(train_step, backend="tpu")
    xt, yt = x.to("tpu"), y.to("tpu")
    for _ in range(steps):
        expected = train_step(cpu, opts[0], x, y)
        got_eager = train_step(eager, opts[1], xt, yt)
        got = step(compiled, opts[2], xt, yt)
        assert got.device.type == "tpu"
        assert_close(got_eager.cpu(), expected, **tol)
        assert_close(got.cpu(), expected, **tol)
    assert_params_close(cpu, eager, **tol)
    assert_params_close(cpu, compiled, **tol)
    return cpu, eager, compiled


def mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def small_cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 2 * 2, 10))


# ---------------------------------------------------------------- models
def test_mlp_inference_matches_eager_and_cpu():
    torch.manual_seed(0)
    cpu = mlp()
    dev = tpu_copy(cpu)
    x = torch.randn(8, 16)
    before = counters()
    f = torch.compile(dev, backend="tpu")
    with torch.no_grad():
        got = f(x.to("tpu"))
        eager = dev(x.to("tpu"))
    assert got.device.type == "tpu"
    assert_close(got.cpu(), cpu(x).detach())
    assert_close(got.cpu(), eager.cpu())
    assert delta(before, "compile_programs") == 1
    assert delta(before, "compile_partitioned_graphs") == 0


def test_mlp_training_step_with_optimizer():
    torch._dynamo.reset()  # AdamW.step frames compiled by other tests would be reused
    before = counters()
    _, _, compiled = check_training(mlp, torch.randn(8, 16), torch.randint(0, 4, (8,)),
                                    lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1))
    # forward, backward and the optimizer's step are whole programs: AdamW is made capturable
    # on tpu, so its step counters live on the device and nothing runs on the host.
    assert delta(before, "compile_programs") >= 3
    assert delta(before, "compile_partitioned_graphs") == 0
    assert counters()["compile_eager_nodes_by_op"] == before["compile_eager_nodes_by_op"]


def test_training_step_in_fused_eager_mode():
    # Eager work deferred by the fused mode feeds the compiled graphs; they run it first.
    def step(model, opt, x, y):
        return train_step(model, opt, x * 2, y)

    torch.manual_seed(0)
    cpu = mlp()
    dev = tpu_copy(cpu)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (cpu, dev)]
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    f = torch.compile(step, backend="tpu")
    with torch_tpu.eager_mode("fused"):
        for _ in range(2):
            expected = step(cpu, opts[0], x, y)
            assert_close(f(dev, opts[1], x.to("tpu") + 0, y.to("tpu")).cpu(), expected)
    assert_params_close(cpu, dev)


def test_cnn_training_step_and_batch_norm_statistics():
    torch.manual_seed(0)
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    before = counters()
    cpu, eager, compiled = check_training(small_cnn, x, y, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                                          atol=1e-4, rtol=1e-4)
    # Batch-norm running statistics are input mutations of the training graph. (Eager tpu
    # is not compared: native_batch_norm runs through the CPU fallback there.)
    assert_close(compiled[1].running_mean.cpu(), cpu[1].running_mean)
    assert_close(compiled[1].running_var.cpu(), cpu[1].running_var)
    assert int(compiled[1].num_batches_tracked.cpu()) == 3
    assert delta(before, "compile_partitioned_graphs") == 0
    cpu.eval(), compiled.eval()
    with torch.no_grad():
        got = torch.compile(compiled, backend="tpu")(x.to("tpu"))
    assert_close(got.cpu(), cpu(x), atol=1e-4, rtol=1e-4)


def tiny_llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=128, vocab_size=128)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def test_llama_forward():
    cpu = tiny_llama()
    dev = tpu_copy(cpu)
    ids = torch.randint(0, 128, (2, 12))
    f = torch.compile(dev, backend="tpu")
    with torch.no_grad():
        before = counters()
        got = f(input_ids=ids.to("tpu")).logits
        assert delta(before, "compile_partitioned_graphs") == 0
        assert delta(before, "cpu_fallbacks") == 0
        eager = dev(input_ids=ids.to("tpu")).logits
        expected = cpu(input_ids=ids).logits
    assert_close(got.cpu(), expected, atol=1e-4, rtol=1e-4)
    assert_close(got.cpu(), eager.cpu(), atol=1e-4, rtol=1e-4)


def llama_step(model, opt, ids):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def test_llama_training_step():
    torch._dynamo.reset()  # AdamW.step frames compiled by other tests would recompile here
    cpu = tiny_llama().train()
    eager, compiled = tpu_copy(cpu), tpu_copy(cpu)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (cpu, eager, compiled)]
    step = torch.compile(llama_step, backend="tpu")
    ids = torch.randint(0, 128, (2, 16))
    before = counters()
    for _ in range(2):
        expected = llama_step(cpu, opts[0], ids)
        got_eager = llama_step(eager, opts[1], ids.to("tpu"))
        got = step(compiled, opts[2], ids.to("tpu"))
        assert_close(got.cpu(), expected, atol=1e-4, rtol=1e-4)
        assert_close(got_eager.cpu(), expected, atol=1e-4, rtol=1e-4)
    assert_params_close(cpu, compiled, atol=1e-4, rtol=1e-4)
    assert_params_close(cpu, eager, atol=1e-4, rtol=1e-4)
    assert delta(before, "compile_recompiles") == 0


def test_hf_generate_with_static_cache_and_compiled_forward():
    cpu = tiny_llama()
    dev = tpu_copy(cpu)
    ids = torch.randint(0, 128, (1, 6))
    kwargs = dict(max_new_tokens=6, do_sample=False, cache_implementation="static")
    expected = cpu.generate(ids, **kwargs)
    assert torch.equal(dev.generate(ids.to("tpu"), **kwargs).cpu(), expected)  # eager tpu
    dev.forward = torch.compile(dev.forward, backend="tpu")
    before = counters()
    got = dev.generate(ids.to("tpu"), **kwargs)
    assert torch.equal(got.cpu(), expected)
    # Prefill and decode are two graphs; the KV cache updates happen inside the programs.
    assert delta(before, "compile_graphs") == 2
    assert delta(before, "compile_partitioned_graphs") == 0
    mid = counters()
    assert torch.equal(dev.generate(ids.to("tpu"), **kwargs).cpu(), expected)
    assert delta(mid, "compile_graphs") == 0
    # generate()'s own eager ops between the compiled calls are fused graphs, compiled whole
    # the second time they are seen; from the third call on nothing compiles.
    steady = counters()
    assert torch.equal(dev.generate(ids.to("tpu"), **kwargs).cpu(), expected)
    assert delta(steady, "programs_compiled") == 0


# ---------------------------------------------------------------- Dynamo behaviour
def test_graph_break_pieces_run_eagerly_between_programs():
    def f(x, w):
        y = torch.relu(x @ w)
        torch._dynamo.graph_break()
        print_free = y.sum(dim=1, keepdim=True)
        return torch.tanh(y - print_free)

    x, w = torch.randn(4, 5), torch.randn(5, 3)
    before = counters()
    got = torch.compile(f, backend="tpu")(x.to("tpu"), w.to("tpu"))
    assert_close(got.cpu(), f(x, w))
    assert delta(before, "compile_graphs") == 2


def test_new_shape_recompiles_with_reason():
    def f(x):
        return (x * 2).sin().sum(0)

    torch._dynamo.reset()
    g = torch.compile(f, backend="tpu")
    before = counters()
    for rows in (8, 8, 4, 4):
        x = torch.randn(rows, 3)
        assert_close(g(x.to("tpu")).cpu(), f(x))
    assert delta(before, "compile_graphs") == 2
    assert delta(before, "compile_recompiles") == 1
    reasons = counters()["compile_recompile_reasons"]
    assert any("size" in r for r in reasons), reasons
    assert delta(before, "compile_programs_built") == 2  # static shapes: one program per shape


def test_input_shaped_otherwise_is_relaid_not_recompiled():
    """A reshape of a permuted tensor is a view of its clone, whose buffer keeps the clone's
    shape (diffusers packs Flux latents so). The graph's program is built for inputs shaped like
    themselves: such an input is laid out once on the device, and no second program is built."""
    def f(x):
        return (x * 2 + 1).sum(-1)

    torch._dynamo.reset()
    g = torch.compile(f, backend="tpu")
    base = torch.randn(2, 3, 4)
    plain = torch.randn(2, 12)
    before = counters()
    assert_close(g(plain.to("tpu")).cpu(), f(plain))
    clone = base.to("tpu").permute(0, 2, 1).contiguous()  # its buffer: [2, 4, 3]
    packed = clone.view(2, 12)
    expected_packed = base.permute(0, 2, 1).reshape(2, 12)
    assert_close(g(packed).cpu(), f(expected_packed))
    assert delta(before, "compile_programs_built") == 1
    assert delta(before, "compile_input_relayouts") == 1
    # The storage kept its value: both views read it as the CPU does.
    assert torch.equal(packed.cpu(), expected_packed)
    assert torch.equal(clone.cpu(), base.permute(0, 2, 1).contiguous())
    clone.add_(1)  # a write through the other view lands in the relaid storage
    assert torch.equal(packed.cpu(), expected_packed + 1)


def test_dynamic_true_is_refused_with_buckets_off(monkeypatch):
    # With buckets (the default), symbolic graphs run one program per bucket (test_buckets.py).
    monkeypatch.setenv("TORCH_TPU_BUCKETS", "0")
    g = torch.compile(lambda x: x + 1, backend="tpu", dynamic=True)
    with pytest.raises(Exception, match="static shapes only"):
        g(torch.randn(3, device="tpu"))


def test_input_mutations_are_written_back():
    def f(cache, pos, new, buf):
        cache.index_copy_(1, pos, new)       # a KV-cache update
        buf.add_(1)                          # a running statistic
        return cache.sum(1)

    cache, pos, new, buf = torch.zeros(2, 5, 3), torch.tensor([1, 3]), torch.randn(2, 2, 3), torch.zeros(4)
    args = [cache.to("tpu"), pos.to("tpu"), new.to("tpu"), buf.to("tpu")]
    view = args[0][:, 1]  # a view of the mutated input sees the write
    got = torch.compile(f, backend="tpu")(*args)
    expected = f(cache, pos, new, buf)
    assert_close(got.cpu(), expected)
    assert_close(args[0].cpu(), cache)
    assert_close(args[3].cpu(), buf)
    assert_close(view.cpu(), cache[:, 1])


def test_mutation_of_a_strided_view_input():
    def f(x):
        x.mul_(2)
        return x + 1

    base = torch.arange(24.0).reshape(4, 6)
    dev = base.to("tpu")
    got = torch.compile(f, backend="tpu")(dev[1:, ::2])
    expected_base = base.clone()
    expected = f(expected_base[1:, ::2])
    assert_close(got.cpu(), expected)
    assert_close(dev.cpu(), expected_base)


def test_views_and_indexing_in_graphs():
    def f(x, idx, src, i, j):
        a = x.t()[1:, ::2].unsqueeze(0).expand(2, -1, -1)
        b = torch.stack(x.unbind(1)[:2]).diagonal(offset=1)
        c = x.gather(1, idx) + x[idx[:, 0], :2].sum()
        d = x.index_put((idx[:, 0], idx[:, 1]), src, accumulate=True)
        e = x[:, [0, 2]] * x[[1, 2]][None, :, 0]
        g = x.narrow(0, 1, 2).select(1, -1)
        h = torch.ops.aten.slice_scatter(x, src[:, None].expand(4, 3), 1, 0, 6, 2)
        k = x.reshape(2, 3, 4)[i, :, j]  # indexed dims apart: the index dims go first
        m = x.reshape(2, 3, 4).clone()
        m[:, i, j] = src[:2]  # index_put with a leading None
        return a.sum() + b.sum() + c.sum() + d.sum() + e.sum() + g.sum() + h.sum(), d, h, k, m

    x = torch.randn(4, 6)
    idx = torch.tensor([[0, 1], [3, 5], [2, 2], [1, 0]])
    src = torch.randn(4)
    i, j = torch.tensor([1, 0]), torch.tensor([3, -1])
    before = counters()
    got = torch.compile(f, backend="tpu")(*[t.to("tpu") for t in (x, idx, src, i, j)])
    for a, b in zip(got, f(x, idx, src, i, j)):
        assert_close(a.cpu(), b)
    assert delta(before, "compile_partitioned_graphs") == 0


def test_outputs_viewing_one_value_share_one_result():
    # Several outputs viewing a value that is not an output itself: the program returns that value
    # once and replays each view on it, so the outputs share a storage as in eager.
    def f(x):
        y = x.sin() * 2
        return y.view(-1), y.t(), y[1:].unsqueeze(0), x.cos()

    x = torch.randn(3, 4)
    got = torch.compile(f, backend="tpu")(x.to("tpu"))
    for a, b in zip(got, f(x)):
        assert_close(a.cpu(), b)
        assert a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
    flat, t, part, _ = got
    assert flat.untyped_storage().data_ptr() == t.untyped_storage().data_ptr() == part.untyped_storage().data_ptr()
    flat.add_(1)  # a write through one view is seen by the others, as on CPU
    assert_close(t.cpu(), f(x)[1] + 1)


def test_training_step_saves_one_copy_of_values_its_backward_views_twice(monkeypatch):
    # softmax(q k^T) @ v saves the probabilities for the softmax's backward and, viewed as 3-D, for
    # the batched matmul's: the forward program returns them once (a hidden output). A dropout
    # with p=0 (Transformers' attention in training) is dropped rather than copying them.
    import torch_tpu.compile  # noqa: F401
    backend_module = sys.modules["torch_tpu.compile.backend"]
    programs = []

    def spy(gm, example_inputs=None, kind="graph"):
        program = compile_fx(gm, example_inputs, kind)
        programs.append((kind, program))
        return program
    compile_fx = backend_module.compile_fx
    monkeypatch.setattr(backend_module, "compile_fx", spy)

    def attend(q, k, v):
        p = F.dropout((q @ k.transpose(-1, -2)).softmax(-1), p=0.0, training=True)
        return (p @ v).sum()

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 8, 4, generator=g, requires_grad=True) for _ in range(3))
    tq, tk, tv = (t.detach().to("tpu").requires_grad_() for t in (q, k, v))
    before = counters()
    torch.compile(attend, backend="tpu")(tq, tk, tv).backward()
    attend(q, k, v).backward()
    for a, b in ((tq, q), (tk, k), (tv, v)):
        assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)
    assert delta(before, "compile_zero_dropouts_dropped") == 1
    forward = [p for kind, p in programs if kind == "forward"]
    main = next(line for line in forward[-1].graph.module_text.splitlines() if "@main(" in line)
    results = main.split("->", 1)[1]
    assert results.count("x8x8xf32>") == 1, main  # the probabilities, once


@pytest.mark.parametrize("partition", ["min_cut", "default"])
def test_partition_of_forward_and_backward(monkeypatch, partition):
    """min_cut (the default, as Inductor's) saves the input of an elementwise chain and recomputes the
    chain in the backward; default_partition saves the chain's intermediates. Both train like the CPU."""
    import torch_tpu.compile  # noqa: F401
    backend_module = sys.modules["torch_tpu.compile.backend"]
    if partition == "default":
        monkeypatch.setenv("TORCH_TPU_COMPILE_PARTITION", "default")
    else:
        monkeypatch.delenv("TORCH_TPU_COMPILE_PARTITION", raising=False)
    monkeypatch.setattr(backend_module, "_aot_backend", None)  # rebuilt with this partition
    torch._dynamo.reset()

    def chain(w, x):
        return ((x @ w).sin().exp() * 3).cos().sum()

    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(8, 8, generator=g, requires_grad=True), torch.randn(4, 8, generator=g)
    tw, tx = w.detach().to("tpu").requires_grad_(), x.to("tpu")
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        loss = torch.compile(chain, backend="tpu")(tw, tx)
    loss.backward()
    chain(w, x).backward()
    assert_close(loss.cpu(), chain(w, x).detach(), rtol=1e-5, atol=1e-5)
    assert_close(tw.grad.cpu(), w.grad, rtol=1e-4, atol=1e-5)
    # min_cut: x @ w alone (a matmul is never recomputed; x is saved transposed, for w's gradient);
    # default: the elementwise chain's values too.
    activations = [t for t in saved if t.shape == (4, 8)]
    assert len(activations) == (1 if partition == "min_cut" else 4), [t.shape for t in saved]
    torch._dynamo.reset()


def test_unknown_partition_is_refused(monkeypatch):
    import torch_tpu.compile  # noqa: F401
    backend_module = sys.modules["torch_tpu.compile.backend"]
    monkeypatch.setenv("TORCH_TPU_COMPILE_PARTITION", "mincut")
    with pytest.raises(ValueError, match="TORCH_TPU_COMPILE_PARTITION='mincut'"):
        backend_module._partition_fn()


# as_strided_scatter(self, src, size, stride, offset) with self a whole contiguous storage (the
# functionalized base; compiled FlexAttention's backward on PyTorch 2.11 holds one).
AS_STRIDED_SCATTER_CASES = [
    ((12,), (2, 2), (3, 1), 1, torch.float32),
    ((4, 6), (3, 2), (6, 2), None, torch.float32),  # offset None: self's own, 0
    ((4, 6), (6,), (4,), 1, torch.int64),  # one dim across rows
    ((3, 4), (4, 3), (1, 4), 0, torch.float32),  # a transposed window
    ((4, 6), (4, 6), (6, 1), 0, torch.int32),  # the whole storage
    ((2, 3, 4), (2, 2, 2), (12, 4, 1), 5, torch.bfloat16),
    ((4, 6), (0, 3), (6, 1), 2, torch.float32),  # empty
    ((10,), (3,), (3,), 0, torch.bool),
]


@pytest.mark.parametrize("shape,size,stride,offset,dtype", AS_STRIDED_SCATTER_CASES)
def test_as_strided_scatter_in_graphs(shape, size, stride, offset, dtype):
    def f(x, src):
        a = torch.as_strided_scatter(x, src, size, stride, offset)
        b = torch.as_strided_scatter(x.clone() * 2, src.double(), size, stride, offset)  # src converts
        return a, b

    x = (torch.arange(torch.Size(shape).numel()) % 7).reshape(shape).to(dtype)
    src = (torch.arange(torch.Size(size).numel()) + 10).reshape(size).to(dtype)
    before = counters()
    got = torch.compile(f, backend="tpu")(x.to("tpu"), src.to("tpu"))
    assert delta(before, "compile_partitioned_graphs") == 0
    assert counters()["compile_eager_nodes_by_op"] == before["compile_eager_nodes_by_op"]
    for g, e in zip(got, f(x, src)):
        assert g.dtype == e.dtype and g.stride() == e.stride()
        assert_close(g.cpu(), e, rtol=0, atol=0)


def test_as_strided_scatter_of_a_view_in_graphs():
    # self is not its storage's row-major array (transposed, offset, part of a bigger storage):
    # the node runs eagerly, PyTorch's composite addressing self's real storage as in eager.
    # (PyTorch's trace checks the geometry against self's numel, so it stays within that.)
    def f(x, y, src):
        return (torch.as_strided_scatter(x.t(), src, (2, 2), (5, 1), 1),
                torch.as_strided_scatter(x[1:], src, (2, 2), (1, 6), None),
                torch.as_strided_scatter(y, src[0], (2,), (2,), 1))

    base = torch.randn(5, 6)
    src = torch.randn(2, 2)
    dev = base.to("tpu")
    got = torch.compile(f, backend="tpu")(dev[:4], dev[1:, 2], src.to("tpu"))
    for g, e in zip(got, f(base[:4], base[1:, 2], src)):
        assert_close(g.cpu(), e, rtol=0, atol=0)


def test_non_contiguous_and_offset_inputs():
    def f(a, b):
        return a @ b + a.sum()

    base = torch.randn(6, 8)
    a, b = base[1:5, ::2], base.t()[2:6, :3]
    dev = base.to("tpu")
    got = torch.compile(f, backend="tpu")(dev[1:5, ::2], dev.t()[2:6, :3])
    assert_close(got.cpu(), f(a, b))


def test_empty_permuted_lowers_into_the_program():
    # empty_like of a permuted tensor traces as aten::empty_permuted (MoE routing's inverse
    # permutation): a graph factory like empty_like, so nothing runs eagerly, and the result
    # keeps the permuted strides.
    def f(x):
        y = torch.empty_like(x.permute(2, 0, 1))
        y.copy_(x.permute(2, 0, 1) * 2)
        return y + 1

    x = torch.randn(3, 4, 5)
    before = counters()
    got = torch.compile(f, backend="tpu")(x.to("tpu"))
    want = f(x)
    assert_close(got.cpu(), want)
    assert got.stride() == want.stride()
    assert delta(before, "compile_partitioned_graphs") == 0
    assert not any(k.startswith("aten::empty_permuted") for k in counters()["compile_eager_nodes_by_op"])


# An op with only a CPU kernel (and a fake one for tracing): no lowering, ever. On tpu it runs
# through the CPU fallback.
@torch.library.custom_op("torch_tpu_test::unlowered_sin", mutates_args=())
def unlowered_sin(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x.cpu()).to(x.device)


@unlowered_sin.register_fake
def _(x):
    return torch.empty_like(x)


def test_op_without_lowering_runs_eagerly_in_a_partition():
    def f(x):
        y = torch.exp(x) * 2
        z = unlowered_sin(y)  # no lowering: runs eagerly between two programs
        return torch.tanh(z) + y

    x = torch.randn(5, 3)
    before = counters()
    with pytest.warns(UserWarning, match="unlowered_sin"):
        got = torch.compile(f, backend="tpu")(x.to("tpu"))
    assert_close(got.cpu(), f(x))
    assert delta(before, "compile_partitioned_graphs") == 1
    assert delta(before, "compile_programs") == 2
    assert any(k.startswith("torch_tpu_test::unlowered_sin") for k in counters()["compile_eager_nodes_by_op"])


def test_strict_mode_error_names_the_node_and_op(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_STRICT", "1")

    def f(x):
        return unlowered_sin(x + 1)

    with pytest.raises(Exception, match=r"node 'unlowered_sin' \(torch_tpu_test::unlowered_sin\)"):
        torch.compile(f, backend="tpu")(torch.randn(4, device="tpu"))


def test_backend_is_registered_and_device_interface():
    from torch._dynamo.backends.registry import list_backends
    from torch._dynamo.device_interface import get_interface_for_device

    assert "tpu" in list_backends()
    interface = get_interface_for_device("tpu")
    assert interface.__module__ == "torch_tpu._device_interface"  # not Dynamo's built-in "tpu"
    assert interface.device_count() == torch.tpu.device_count()
    assert interface.is_available()
    assert interface.current_device() == torch.tpu.current_device()


def test_random_ops_run_inside_the_program_from_the_device_generator():
    # Dropout and random factories are lowered into the program; each run draws a fresh Philox
    # state from the device's default generator, so calls differ, a seed reproduces them, and
    # the values are eager's for the same seed.
    def f(x):
        return F.dropout(x, 0.3, training=True) * torch.rand_like(x) + torch.randn(x.shape, device=x.device)

    x = torch.randn(64, 32, device="tpu")
    torch.manual_seed(3)
    eager = f(x).cpu()
    compiled = torch.compile(f, backend="tpu")
    before = counters()
    torch.manual_seed(3)
    first = compiled(x).cpu()
    assert counters()["compile_eager_nodes_by_op"] == before["compile_eager_nodes_by_op"]
    assert delta(before, "compile_partitioned_graphs") == 0
    assert_close(first, eager, rtol=1e-5, atol=1e-5)
    assert not torch.equal(compiled(x).cpu(), first)
    torch.manual_seed(3)
    assert torch.equal(compiled(x).cpu(), first)

    # Distributions: uniform [0, 1) mean 1/2 var 1/12; normal mean 0 var 1; dropout keeps 1 - p.
    big = torch.zeros(256, 256, device="tpu")
    u, n = torch.compile(lambda t: (torch.rand_like(t), torch.randn_like(t)), backend="tpu")(big)
    u, n = u.cpu(), n.cpu()
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert abs(n.mean()) < 0.02 and abs(n.var() - 1) < 0.03
    ones = torch.ones(256, 256, device="tpu", requires_grad=True)
    y = torch.compile(lambda t: F.dropout(t, 0.25, training=True), backend="tpu")(ones)
    y.sum().backward()
    kept = (y != 0).cpu()
    assert abs(kept.float().mean() - 0.75) < 0.01
    assert_close(y.detach().cpu()[kept], torch.full((int(kept.sum()),), 1 / 0.75))
    assert_close(ones.grad.cpu(), kept.float() / 0.75)  # the backward uses the forward's mask


def test_default_inductor_backend_on_tpu_tensors_uses_the_tpu_backend(monkeypatch):
    # Inductor cannot generate code for tpu (its "tpu" slot needs JAX): torch.compile(model)
    # with the default backend must still work, through this package's backend, with a warning.
    from torch_tpu import _dynamo_hooks

    monkeypatch.setattr(_dynamo_hooks, "_warned", False)
    torch._dynamo.reset()
    model = mlp()
    x = torch.randn(4, 16)
    before = counters()
    with pytest.warns(UserWarning, match="Inductor cannot generate code for tpu"):
        out = torch.compile(tpu_copy(model), mode="reduce-overhead", fullgraph=True)(x.to("tpu"))
    assert delta(before, "compile_graphs") == 1
    assert_close(out.cpu(), model(x), rtol=1e-5, atol=1e-5)
    # CPU graphs still go to Inductor.
    before = counters()
    assert_close(torch.compile(model)(x), model(x))
    assert delta(before, "compile_graphs") == 0


def test_second_process_loads_programs_from_the_disk_cache(tmp_path):
    code = textwrap.dedent("""
        import torch, torch_tpu
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2)).to("tpu")
        x = torch.randn(4, 8).to("tpu")
        torch_tpu.metrics.reset()
        out = torch.compile(model, backend="tpu")(x)
        out.sum().backward()
        m = torch_tpu.metrics(wait=True)
        print("RESULT", m["compile_programs"], m["programs_compiled"], m["disk_cache_hits"])
    """)
    env = {"TORCH_TPU_CACHE_DIR": str(tmp_path)}
    results = []
    for _ in range(2):
        proc = run_python(code, env=env, timeout=180)
        assert proc.returncode == 0, proc.stderr[-3000:]
        line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")][0]
        results.append([int(v) for v in line.split()[1:]])
    (graphs1, compiled1, _), (graphs2, compiled2, disk_hits2) = results
    assert graphs1 == graphs2 == 2  # forward and backward
    assert compiled1 >= 2
    assert compiled2 == 0 and disk_hits2 >= 2


def test_decomposition_table_is_pytorchs_core_aten_table():
    """The table is built with one pass over the dispatcher (decompositions._core_aten_table);
    it must hold exactly the ops and decompositions of torch._decomp.core_aten_decompositions()."""
    import functools

    from torch._decomp import core_aten_decompositions
    from torch_tpu.compile.decompositions import _core_aten_table

    def what(fn):  # a CIA op's decomposition is a fresh partial on each build
        return (fn.func.__code__, fn.args, tuple(sorted(fn.keywords.items()))) if isinstance(
            fn, functools.partial) else fn

    ours, pytorchs = _core_aten_table(), dict(core_aten_decompositions())
    assert set(ours) == set(pytorchs)
    assert {op for op in ours if what(ours[op]) != what(pytorchs[op])} == set()


def _unique_mlp(width):
    """A model of its own shapes, so that no earlier test compiled its programs."""
    torch.manual_seed(width)
    return nn.Sequential(nn.Linear(24, width), nn.GELU(), nn.Linear(width, 5))


def test_backward_program_compiles_ahead_during_the_forward():
    cpu = _unique_mlp(37)
    dev = tpu_copy(cpu)
    x = torch.randn(9, 24)
    fwd = torch.compile(lambda m, x: m(x).square().mean(), backend="tpu")
    before = counters()
    loss = fwd(dev, x.to("tpu"))
    # The forward's and the backward's programs, both from AOTAutograd's example inputs; the
    # backward's compiled before any backward ran (metrics() waits for compiles in flight).
    after_forward = counters()
    assert after_forward["compile_ahead_programs"] - before["compile_ahead_programs"] == 2
    def loaded(c):  # compiled, or read from the disk cache of an earlier run
        return c["programs_compiled"] + c["disk_cache_hits"]

    compiled = loaded(after_forward) - loaded(before)
    loss.backward()
    after_backward = counters()
    assert loaded(after_backward) - loaded(after_forward) <= 1  # the gradient seed's fill_ at most
    # Both first runs found the program compiled ahead: nothing was built twice.
    assert after_backward["compile_ahead_hits"] - before["compile_ahead_hits"] == 2
    assert after_backward["compile_ahead_misses"] == before["compile_ahead_misses"]
    assert compiled >= 2
    ref = cpu(x).square().mean()
    ref.backward()
    assert_close(loss.detach().cpu(), ref.detach())
    for p, q in zip(cpu.parameters(), dev.parameters()):
        assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)


class _SharedSaves(nn.Module):
    """Saves what a transformer block saves: one normalized input viewed by three projections,
    probabilities read twice, and weights read transposed."""

    def __init__(self, d):
        super().__init__()
        torch.manual_seed(d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        p = (self.q(h) @ self.k(h).transpose(-1, -2)).softmax(-1)
        return (p @ self.v(h)).square().mean()


def test_backward_compiled_ahead_reads_saved_views_as_the_forward_returns_them():
    # The forward returns views of one value as that value's buffer (a hidden output) and
    # views of it: the backward compiled ahead must expect those buffers' shapes, or its
    # first run builds and compiles it again.
    cpu = _SharedSaves(19)
    dev = tpu_copy(cpu)
    x = torch.randn(3, 7, 19)
    step = torch.compile(lambda m, x: m(x), backend="tpu")
    before = counters()
    loss = step(dev, x.to("tpu"))
    loss.backward()
    assert delta(before, "compile_ahead_programs") == 2
    assert delta(before, "compile_ahead_hits") == 2
    assert delta(before, "compile_ahead_misses") == 0
    ref = cpu(x)
    ref.backward()
    assert_close(loss.detach().cpu(), ref.detach())
    for p, q in zip(cpu.parameters(), dev.parameters()):
        assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,part", [
    ((1, 64), lambda ids: ids[:, -1:]),  # a decode step's last token, of a prompt sliced from [1, 512]
    ((7, 64), lambda ids: ids[2:5, 3:9]),
    ((7, 64), lambda ids: ids.t()[5:]),
])
def test_compile_ahead_of_a_part_of_a_shaped_storage_is_a_hit(shape, part):
    # An input that is a part of its storage (a decode step's `ids[:, -1:]`) reads the storage's
    # 2-D buffer; compiled ahead from Dynamo's fake copy (which does not say the buffer's shape),
    # the program guesses that shape from the strides, and the first run finds that program.
    cpu = torch.arange(shape[0] * 512).reshape(shape[0], 512)[:, :shape[1]]
    ids = cpu.to("tpu")  # strides (512, 1): .to keeps a [1, 64] tensor's
    emb = torch.randn(shape[0] * 512, 24)
    dev_emb = emb.to("tpu")
    torch._dynamo.reset()  # each case a first shape: a later one would be automatic dynamic (bucketed)
    f = torch.compile(lambda t: dev_emb[t].sum(-1), backend="tpu")
    before = counters()
    got = f(part(ids))
    assert delta(before, "compile_ahead_programs") == 1
    assert delta(before, "compile_ahead_hits") == 1
    assert delta(before, "compile_ahead_misses") == 0
    assert_close(got.cpu(), emb[part(cpu)].sum(-1))


def test_compile_ahead_off_compiles_at_the_first_run():
    code = textwrap.dedent("""
        import torch, torch_tpu
        m = torch.nn.Linear(6, 3).to("tpu")
        loss = torch.compile(lambda x: m(x).sum(), backend="tpu")(torch.randn(2, 6, device="tpu"))
        loss.backward()
        c = torch_tpu.metrics(wait=True)
        print("RESULT", c["compile_ahead_programs"], c["compile_programs_built"], m.weight.grad.shape)
    """)
    out = run_python(code, {"TORCH_TPU_COMPILE_AHEAD": "0"})
    assert "RESULT 0 2 torch.Size([3, 6])" in out.stdout, out.stderr


def test_inputs_that_alias_at_run_time_share_a_program_with_distinct_ones():
    # A program is built without regard to which read-only inputs are views of one storage
    # (as a backward compiled ahead cannot know); the results must not depend on it.
    f = torch.compile(lambda a, b: a * 2 + b.sum(), backend="tpu")
    base = torch.randn(4, 4)
    dev = base.to("tpu")
    assert_close(f(dev, dev.view(16)).cpu(), base * 2 + base.sum())
    other = torch.randn(16)
    before = counters()
    assert_close(f(dev, other.to("tpu")).cpu(), base * 2 + other.sum())
    assert delta(before, "programs_compiled") == 0  # same module text: the memory cache's


def test_written_input_and_its_view_stay_one_storage():
    def g(a, b):
        a.add_(1)
        return b * 3  # b views a: it must see the write

    f = torch.compile(g, backend="tpu")
    cpu = torch.randn(3, 4)
    dev = cpu.to("tpu")
    expected = g(cpu, cpu[1])
    got = f(dev, dev[1])
    assert_close(got.cpu(), expected)
    assert_close(dev.cpu(), cpu)


def test_compile_ahead_for_other_layouts_is_a_miss_that_still_runs_correctly():
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch_tpu.compile.partition import compile_fx

    gm = make_fx(lambda x: x * x, tracing_mode="fake")(torch.randn(6, 5, device="tpu"))
    example = torch.empty_strided((6, 5), (1, 6), device="tpu")  # column-major: not the run's
    before = counters()
    program = compile_fx(gm, [example], "forward")
    assert delta(before, "compile_ahead_programs") == 1
    x = torch.randn(6, 5)
    out = program([x.to("tpu")])
    assert_close((out[0] if isinstance(out, (tuple, list)) else out).cpu(), x * x)
    assert delta(before, "compile_ahead_misses") == 1
    assert delta(before, "compile_ahead_hits") == 0


def test_one_module_compiling_on_two_threads_is_compiled_once(tmp_path):
    # Two graphs with the same program, compiled ahead at once: the second thread waits for
    # the first one's compile (or finds it done) instead of compiling it again.
    code = textwrap.dedent("""
        import torch, torch_tpu
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch_tpu.compile.partition import compile_fx

        def chain(x):
            for i in range(150):  # a compile long enough for the two to overlap
                x = torch.sin(x) * 0.5 + x.cos() * 0.25
            return x

        x = torch.randn(8, 8, device="tpu")
        gm = make_fx(chain, tracing_mode="fake")(x)
        before = torch_tpu.metrics(wait=True)  # strict mode has compiled randn's program
        first, second = compile_fx(gm, [x], "forward"), compile_fx(gm, [x], "forward")
        c = {k: v - before[k] for k, v in torch_tpu.metrics(wait=True).items() if isinstance(v, (int, float))}
        torch.testing.assert_close(second([x]).cpu(), chain(x.cpu()), rtol=1e-4, atol=1e-4)
        print("RESULT", c["compile_ahead_programs"], c["programs_compiled"],
              c["compile_in_flight_waits"] + c["compile_cache_hits"] >= 1)
    """)
    out = run_python(code, {"TORCH_TPU_CACHE_DIR": str(tmp_path)})
    assert "RESULT 2 1 True" in out.stdout, out.stdout + out.stderr
