"""Custom kernels (torch_tpu.kernels, DESIGN.md "Custom kernels"): JAX functions, Pallas kernels
(interpret mode on the CPU plugin) and StableHLO modules as PyTorch ops on tpu tensors, in strict
and fused eager mode and inside torch.compile programs, with autograd, compared with PyTorch's
CPU results; bad input raises errors that name the kernel."""
import copy
import json
import os
import textwrap

import pytest
import torch

import torch_tpu
from conftest import run_python

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
from jax.experimental import pallas as pl  # noqa: E402

from torch_tpu import kernels  # noqa: E402

MODES = ("strict", "fused")


# ---- the kernels under test ----
def jax_rms_norm(x, w, eps=1e-6):
    """LlamaRMSNorm in jax.numpy: f32 statistics, the weight applied in the input dtype."""
    h = x.astype(jnp.float32)
    h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + eps)
    return w * h.astype(x.dtype)


def _softmax_kernel(x_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = (e / jnp.sum(e, axis=-1, keepdims=True)).astype(o_ref.dtype)


def _softmax_bwd_kernel(x_ref, g_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    y = e / jnp.sum(e, axis=-1, keepdims=True)
    g = g_ref[...].astype(jnp.float32)
    o_ref[...] = (y * (g - jnp.sum(g * y, axis=-1, keepdims=True))).astype(o_ref.dtype)


def pallas_softmax(x):
    return pl.pallas_call(_softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)


def pallas_softmax_bwd(x, g):
    return pl.pallas_call(_softmax_bwd_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, g)


def torch_rms_norm(x, w, eps=1e-6):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


@pytest.fixture(scope="module")
def rms_norm():
    return kernels.from_jax(jax_rms_norm, name="test_rms_norm", static_argnames=("eps",))


@pytest.fixture(scope="module")
def softmax():
    # Pallas kernels have no VJP in JAX: the backward is a second Pallas kernel.
    bwd = kernels.from_jax(pallas_softmax_bwd, name="test_softmax_bwd")
    return kernels.from_jax(pallas_softmax, name="test_softmax", backward=lambda x, g: (bwd(x, g),))


def _leaf(t):
    return t.detach().to("tpu").requires_grad_()


# ---- eager: strict and fused ----
@pytest.mark.parametrize("mode", MODES)
def test_rms_norm_forward_backward(rms_norm, mode):
    x = torch.randn(3, 5, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    g = torch.randn(3, 5, 16)
    with torch_tpu.eager_mode(mode):
        xt, wt = _leaf(x), _leaf(w)
        y = rms_norm(xt * 2, wt, eps=1e-5)
        y.backward(g.to("tpu"))
        ref = torch_rms_norm(x * 2, w, eps=1e-5)
        ref.backward(g)
        torch.testing.assert_close(y.detach().cpu(), ref.detach())
        torch.testing.assert_close(xt.grad.cpu(), x.grad)
        torch.testing.assert_close(wt.grad.cpu(), w.grad)


@pytest.mark.parametrize("mode", MODES)
def test_pallas_softmax_forward_backward(softmax, mode):
    x = torch.randn(2, 4, 32, requires_grad=True)
    g = torch.randn(2, 4, 32)
    with torch_tpu.eager_mode(mode):
        xt = _leaf(x)
        y = softmax(xt)
        y.backward(g.to("tpu"))
        ref = torch.softmax(x, -1)
        ref.backward(g)
        torch.testing.assert_close(y.detach().cpu(), ref.detach())
        torch.testing.assert_close(xt.grad.cpu(), x.grad)


def test_pallas_grid_kernel():
    """A Pallas kernel over a grid of blocks (interpret mode: a loop of dynamic slices)."""
    def scale_rows_kernel(x_ref, s_ref, o_ref):
        o_ref[...] = x_ref[...] * s_ref[...]

    def scale_rows(x, s):
        return pl.pallas_call(
            scale_rows_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 8,),
            in_specs=[pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0)), pl.BlockSpec((8, 1), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0)), interpret=True)(x, s)

    k = kernels.from_jax(scale_rows, name="test_scale_rows")
    x, s = torch.randn(32, 16), torch.randn(32, 1)
    torch.testing.assert_close(k(x.to("tpu"), s.to("tpu")).cpu(), x * s)


def test_integer_results_and_unused_inputs():
    """An integer result has no gradient (JAX's float0 cotangent is made inside the VJP); an
    input the function ignores is still an operand of the exported module (jit keep_unused)."""
    def f(x, offset, unused):
        return jnp.sin(x) * 2, jnp.argmax(x, -1).astype(jnp.int32) + offset

    k = kernels.from_jax(f, name="test_int_result")
    x = torch.randn(3, 5, requires_grad=True)
    offset = torch.arange(3, dtype=torch.int32)
    xt = _leaf(x)
    a, b = k(xt, offset.to("tpu"), torch.zeros(2, device="tpu"))
    a.sum().backward()
    (torch.sin(x) * 2).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
    torch.testing.assert_close(b.cpu(), x.detach().argmax(-1).to(torch.int32) + offset)


def test_bf16_and_tuple_results():
    def stats(x):
        return jnp.mean(x.astype(jnp.float32), axis=-1), jnp.max(x, axis=-1)

    k = kernels.from_jax(stats, name="test_stats")
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    mean, mx = k(x.to("tpu"))
    assert mean.dtype == torch.float32 and mx.dtype == torch.bfloat16
    torch.testing.assert_close(mean.cpu(), x.float().mean(-1))
    torch.testing.assert_close(mx.cpu(), x.max(-1).values)


def test_fused_kernel_is_inlined(rms_norm):
    """Between ordinary ops in fused mode the kernel is part of the one deferred graph: no
    program of its own, no host round trip."""
    x, w = torch.randn(4, 16), torch.randn(16)

    def measure(f):
        # A graph runs op by op until its whole program is compiled (at its second sighting,
        # in the background); a few more sightings leave room for a later policy.
        for _ in range(4):
            f()
        torch_tpu._C._await_background_compiles()
        torch_tpu.reset_metrics()
        return f(), torch_tpu.metrics(wait=True)

    with torch_tpu.eager_mode("fused"):
        xt, wt = x.to("tpu"), w.to("tpu")
        _, plain = measure(lambda: ((xt.sin() + wt) * 3).cos().cpu())
        y, m = measure(lambda: (rms_norm(xt.sin(), wt) * 3).cos().cpu())
    torch.testing.assert_close(y, (torch_rms_norm(x.sin(), w) * 3).cos())
    assert m["fused_graphs_run"] == 1 and m["fused_graphs_op_by_op"] == 0
    assert m["executions"] == 1  # sin, the kernel, mul and cos in one program
    assert m["host_syncs_by_cause"] == plain["host_syncs_by_cause"]  # the .cpu()'s, nothing more


def test_strict_kernel_is_one_program(rms_norm):
    x, w = torch.randn(4, 16), torch.randn(16)
    with torch_tpu.eager_mode("strict"):
        xt, wt = x.to("tpu"), w.to("tpu")
        torch.tpu.synchronize()
        torch_tpu.reset_metrics()
        y = rms_norm(xt, wt)
        torch.tpu.synchronize()
        m = torch_tpu.metrics(wait=True)
    torch.testing.assert_close(y.cpu(), torch_rms_norm(x, w))
    assert m["executions"] == 1


def test_static_arguments_are_identity(rms_norm):
    x, w = torch.randn(2, 16), torch.randn(16)
    xt, wt = x.to("tpu"), w.to("tpu")
    a = rms_norm(xt, wt, eps=1.0).cpu()
    b = rms_norm(xt, wt, eps=1e-6).cpu()
    torch.testing.assert_close(a, torch_rms_norm(x, w, eps=1.0))
    torch.testing.assert_close(b, torch_rms_norm(x, w, eps=1e-6))
    assert not torch.allclose(a, b)
    with torch_tpu.eager_mode("strict"):
        rms_norm(xt, wt, eps=0.5)
        torch_tpu.reset_metrics()
        rms_norm(xt, wt, eps=0.5)
        assert torch_tpu.metrics(wait=True)["signature_cache_misses"] == 0


def test_static_arguments_of_every_kind():
    def fill_nan(x, fill=0.0, shape=(1,), flag=False):
        y = jnp.where(jnp.isnan(x), fill, x).reshape(shape)
        return -y if flag else y

    k = kernels.from_jax(fill_nan, name="test_fill_nan", static_argnames=("fill", "shape", "flag"))
    x = torch.tensor([1.0, float("nan"), 3.0, float("nan")])
    want = torch.nan_to_num(x, nan=float("inf")).reshape(2, 2)
    torch.testing.assert_close(k(x.to("tpu"), fill=float("inf"), shape=(2, 2)).cpu(), want)
    torch.testing.assert_close(k(x.to("tpu"), fill=float("inf"), shape=[2, 2], flag=True).cpu(), -want)
    with pytest.raises(TypeError, match=r"static argument 'fill' is Tensor"):
        k(x.to("tpu"), fill=torch.tensor(1.0), shape=(4,))


# ---- torch.compile ----
def test_compiled_one_program_no_graph_break(rms_norm, softmax):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()

    def f(x, w):
        return softmax(rms_norm(x * 2, w, eps=1e-5)).sin()

    x, w = torch.randn(4, 16), torch.randn(16)
    torch_tpu.reset_metrics()
    before = torch_tpu._C._graph_stats()["compile_programs_built"]
    with torch.no_grad():
        got = torch.compile(f, backend="tpu")(x.to("tpu"), w.to("tpu"))
    torch.testing.assert_close(got.cpu(), torch.softmax(torch_rms_norm(x * 2, w, eps=1e-5), -1).sin())
    assert not torch._dynamo.utils.counters["graph_break"]
    assert torch_tpu._C._graph_stats()["compile_programs_built"] - before == 1
    assert torch_tpu.metrics(wait=True)["cpu_fallbacks"] == 0


def test_compiled_backward(rms_norm, softmax):
    torch._dynamo.reset()

    def f(x, w):
        return softmax(rms_norm(x, w, eps=1e-5) * 2)

    x = torch.randn(3, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    g = torch.randn(3, 16)
    xt, wt = _leaf(x), _leaf(w)
    torch.compile(f, backend="tpu")(xt, wt).backward(g.to("tpu"))
    f_ref = torch.softmax(torch_rms_norm(x, w, eps=1e-5) * 2, -1)
    f_ref.backward(g)
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
    torch.testing.assert_close(wt.grad.cpu(), w.grad)


# ---- a Transformers model with its RMSNorm and attention softmax replaced ----
def _patch_llama(model, rms_norm, softmax, calls):
    import types

    from transformers import AttentionInterface
    from transformers.models.llama import modeling_llama

    def norm_forward(self, hidden_states):
        calls["rms_norm"] += 1
        return rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)

    def attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        k = modeling_llama.repeat_kv(key, module.num_key_value_groups)
        v = modeling_llama.repeat_kv(value, module.num_key_value_groups)
        scores = torch.matmul(query, k.transpose(2, 3)) * scaling
        n = scores.shape[-1]
        causal = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
        calls["softmax"] += 1
        probs = softmax(scores.masked_fill(causal, float("-inf")))
        return torch.matmul(probs, v).transpose(1, 2).contiguous(), probs

    AttentionInterface.register("tpu_pallas_softmax", attention)
    for m in model.modules():
        if isinstance(m, modeling_llama.LlamaRMSNorm):
            m.forward = types.MethodType(norm_forward, m)
    model.config._attn_implementation = "tpu_pallas_softmax"
    for m in model.modules():
        if hasattr(m, "config"):
            m.config._attn_implementation = "tpu_pallas_softmax"
    return model


@pytest.mark.parametrize("mode", ["strict", "fused", "compiled"])
def test_llama_with_kernels(rms_norm, softmax, mode):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      attn_implementation="eager")
    cpu = transformers.LlamaForCausalLM(config).eval()
    tpu = transformers.LlamaForCausalLM(copy.deepcopy(config)).eval()  # its own config: patched below
    tpu.load_state_dict(cpu.state_dict())
    calls = {"rms_norm": 0, "softmax": 0}
    tpu = _patch_llama(tpu.to("tpu"), rms_norm, softmax, calls)
    ids = torch.randint(3, 96, (2, 12))

    ref = cpu(input_ids=ids).logits
    ref.float().pow(2).mean().backward()
    eager = "fused" if mode == "compiled" else mode
    with torch_tpu.eager_mode(eager):
        forward = tpu
        if mode == "compiled":
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()
            forward = torch.compile(tpu, backend="tpu")
        torch_tpu.reset_metrics()
        built = torch_tpu._C._graph_stats()["compile_programs_built"]
        logits = forward(input_ids=ids.to("tpu")).logits
        logits.float().pow(2).mean().backward()
        torch.testing.assert_close(logits.detach().cpu(), ref.detach(), atol=2e-5, rtol=1e-4)
        for (name, p), (_, q) in zip(cpu.named_parameters(), tpu.named_parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, atol=2e-5, rtol=1e-4, msg=name)
        assert torch_tpu.metrics(wait=True)["cpu_fallbacks"] == 0
    assert calls["rms_norm"] == 5 and calls["softmax"] == 2  # 2 layers x 2 norms + the final one
    if mode == "compiled":
        # One graph each way, each one program with the kernels inside.
        assert not torch._dynamo.utils.counters["graph_break"]
        assert torch_tpu._C._graph_stats()["compile_programs_built"] - built == 2


# ---- the disk cache: a second process compiles nothing ----
def test_second_process_loads_from_disk(tmp_path):
    code = textwrap.dedent("""
        import json, os, torch, torch_tpu, jax, jax.numpy as jnp
        from torch_tpu import kernels
        def scaled_tanh(x, scale=1.0):
            return jnp.tanh(x) * scale
        if os.environ.get("DEFINE_ANOTHER_FIRST"):  # kernels made in another order name alike
            kernels.from_jax(jnp.cos, name="another")
        k = kernels.from_jax(scaled_tanh, static_argnames=("scale",))
        x = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7
        y = k(x.to("tpu"), scale=2.5).cpu()
        torch.testing.assert_close(y, torch.tanh(x) * 2.5)
        m = torch_tpu.metrics(wait=True)
        print(json.dumps({k: m[k] for k in ("programs_compiled", "disk_cache_hits")}))
    """)
    env = {"TORCH_TPU_CACHE_DIR": str(tmp_path), "TORCH_TPU_EAGER_MODE": "strict"}
    runs = []
    for extra in ("", "1"):
        r = run_python(code, env={**env, "DEFINE_ANOTHER_FIRST": extra}, timeout=300)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert runs[0]["programs_compiled"] >= 1
    assert runs[1]["programs_compiled"] == 0 and runs[1]["disk_cache_hits"] >= 1


# ---- from_stablehlo ----
_ADD_SQUARE = """
module @add_square attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%a: tensor<2x3xf32> {jax.arg_info = "a"}, %b: tensor<2x3xf32>) -> (tensor<2x3xf32> {jax.result_info = "r"}) {
    %0 = stablehlo.add %a, %b : tensor<2x3xf32> loc("add")
    %1 = call @helper(%0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    return %1 : tensor<2x3xf32>
  }
  func.func private @helper(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = stablehlo.multiply %a, %a : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
}
"""

_HELPER_NEGATE = """
module {
  func.func @main(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = call @helper(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
  func.func private @helper(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = stablehlo.negate %a : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
}
"""


@pytest.fixture(scope="module")
def add_square():
    return kernels.from_stablehlo(_ADD_SQUARE, name="test_add_square")


@pytest.mark.parametrize("mode", MODES)
def test_from_stablehlo(add_square, mode):
    negate = kernels.from_stablehlo(_HELPER_NEGATE, name=f"test_negate_{mode}")
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    with torch_tpu.eager_mode(mode):
        # Both modules have a @helper and a @main: one fused graph holds them all.
        got = negate(add_square(a.to("tpu"), b.to("tpu"))) + 1
        torch.testing.assert_close(got.cpu(), -((a + b) ** 2) + 1)


def test_custom_op_and_fake_tensors(add_square, rms_norm):
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert torch.ops.torch_tpu.test_add_square.default._schema.name == "torch_tpu::test_add_square"
    with FakeTensorMode():
        x = torch.empty(3, 7, 16, device="tpu")
        w = torch.empty(16, device="tpu")
        y = rms_norm(x, w, eps=1e-5)
        assert y.shape == (3, 7, 16) and y.dtype == torch.float32 and y.device.type == "tpu"


# ---- bad input ----
def test_wrong_shape_names_kernel_and_signature(add_square):
    with pytest.raises(kernels.KernelError, match=r"torch_tpu::test_add_square expects \(arg0: f32\[2, 3\], "
                       r"arg1: f32\[2, 3\]\) -> \(f32\[2, 3\]\); got \(f32\[2, 3\], f32\[1, 3\]\)"):
        add_square(torch.randn(2, 3, device="tpu"), torch.randn(1, 3, device="tpu"))
    with pytest.raises(kernels.KernelError, match=r"expects .*got \(f32\[2, 3\], f16\[2, 3\]\)"):
        add_square(torch.randn(2, 3, device="tpu"), torch.randn(2, 3, device="tpu").half())
    # The op called directly, past the wrapper, says the same.
    with pytest.raises(Exception, match=r"test_add_square expects"):
        torch.ops.torch_tpu.test_add_square(torch.randn(2, 3, device="tpu"), torch.randn(4, device="tpu"))


def test_jax_trace_failure_is_an_error():
    def bad(x, y):
        return x @ y

    k = kernels.from_jax(bad, name="test_bad_matmul")
    with pytest.raises(kernels.KernelError, match=r"torch_tpu::test_bad_matmul: the function does not trace for "
                       r"inputs \(f32\[2, 3\], f32\[2, 3\]\).*TypeError: dot_general"):
        k(torch.randn(2, 3, device="tpu"), torch.randn(2, 3, device="tpu"))
    # The kernel still works for inputs it accepts.
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    torch.testing.assert_close(k(a.to("tpu"), b.to("tpu")).cpu(), a @ b)


def test_non_tpu_tensors_refused(rms_norm):
    with pytest.raises(ValueError, match=r"torch_tpu::test_rms_norm runs on tpu tensors; argument 0 is on cpu"):
        rms_norm(torch.randn(2, 16), torch.randn(16))
    with pytest.raises(ValueError, match=r"runs on tpu tensors only; got tensors on cpu"):
        torch.ops.torch_tpu.test_rms_norm(torch.randn(2, 16), torch.randn(16))


def test_int64_needs_jax_x64():
    def plus_one(x):
        return x + 1

    k = kernels.from_jax(plus_one, name="test_plus_one")
    if jax.config.jax_enable_x64:
        pytest.skip("JAX runs with 64-bit types on in this process")
    with pytest.raises(kernels.KernelError, match=r"i64 and JAX has 64-bit types off.*jax_enable_x64"):
        k(torch.arange(4, device="tpu"))
    x = torch.arange(4, dtype=torch.int32)
    torch.testing.assert_close(k(x.to("tpu")).cpu(), x + 1)


def test_pallas_without_interpret_on_cpu():
    """A Pallas kernel written for TPU (no interpret=True) runs interpreted on the CPU plugin: its
    module there is plain StableHLO, no Mosaic custom call."""
    if torch_tpu.platform() != "cpu":
        pytest.skip("the CPU plugin is the one that interprets Pallas kernels")

    def compiled_softmax(x):
        return pl.pallas_call(_softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    k = kernels.from_jax(compiled_softmax, name="test_compiled_softmax")
    x = torch.randn(8, 128)
    torch.testing.assert_close(k(x.to("tpu")).cpu(), torch.softmax(x, -1))
    (module,) = k._exported.values()
    assert module.custom_calls == []


def test_tpu_form_is_mosaic():
    """A program compiled for a TPU topology (torch_tpu.tpu_target) calls a JAX kernel's TPU form: the
    same entry symbol, with the Mosaic custom call in place of the interpreted kernel."""
    if torch_tpu.platform() == "tpu":
        pytest.skip("on TPU the form that runs is the TPU form")

    def compiled_softmax(x):
        return pl.pallas_call(_softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    k = kernels.from_jax(compiled_softmax, name="test_tpu_form_softmax")
    k(torch.randn(8, 128, device="tpu")).cpu()
    (module,) = k._exported.values()
    program = "module {\n" + module.functions + "}\n"
    text, replaced, errors = kernels.tpu_form(program, "v5e:1x1")
    assert not errors and replaced == [k.op_name]
    assert "tpu_custom_call" in text and "tpu_custom_call" not in program
    assert f"func.func private @{module.entry}(" in text
    assert kernels.tpu_form(program, "v5e:2x2")[0] == text  # one chip kind, one form
    _, replaced, errors = kernels.tpu_form(program, "v9z:1x1")
    assert not replaced and "no JAX device kind known for TPU chip 'v9z'" in errors[0]


def test_foreign_custom_call_refused():
    """A Pallas kernel exported for TPU (a Mosaic custom call) on a plugin of another platform."""
    if torch_tpu.platform() == "tpu":
        pytest.skip("the TPU plugin runs Mosaic kernels")

    def compiled_softmax(x):
        return pl.pallas_call(_softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    text = jax.export.export(jax.jit(compiled_softmax), platforms=["tpu"])(
        jax.ShapeDtypeStruct((8, 128), jnp.float32)).mlir_module()
    with pytest.raises(kernels.KernelError, match=r"torch_tpu::test_mosaic: the module calls custom call "
                       r"'tpu_custom_call', compiled for tpu, and the PJRT plugin here runs on cpu.*interpret=True"):
        kernels.from_stablehlo(text, name="test_mosaic")


def test_bad_modules_refused():
    with pytest.raises(kernels.KernelError, match=r"no @main"):
        kernels.from_stablehlo(_HELPER_NEGATE.replace("@main", "@entry"), name="test_no_main")
    with pytest.raises(kernels.KernelError, match=r"dynamic dimension"):
        kernels.from_stablehlo(_HELPER_NEGATE.replace("tensor<2x3xf32>", "tensor<?x3xf32>"), name="test_dynamic")
    with pytest.raises(kernels.KernelError, match=r"exists already"):
        kernels.from_stablehlo(_HELPER_NEGATE, name="test_add_square")


def test_stablehlo_versions_checked(monkeypatch):
    """JAX's StableHLO against the range the plugin reports: outside it, an error naming both."""
    from torch_tpu.kernels import _jax

    low, high = kernels.plugin_stablehlo_range()
    assert low is not None and high is not None and low <= high
    monkeypatch.setitem(kernels._versions, "plugin", ((99, 0, 0), (99, 1, 0)))
    ours = _jax.stablehlo_version()
    with pytest.raises(kernels.KernelError, match=rf"emits StableHLO {ours}, older than the oldest version the "
                       r"PJRT plugin accepts \(99.0.0; it accepts 99.0.0 to 99.1.0\)"):
        kernels._check_jax_version("torch_tpu::k", "module {}", _jax)
    # A plugin older than JAX: a module is accepted when it uses nothing the plugin's version
    # lacks (it serializes as a portable artifact at that version), refused otherwise.
    monkeypatch.setitem(kernels._versions, "plugin", ((0, 9, 0), (0, 9, 0)))
    plain = jax.export.export(jax.jit(jnp.sin), platforms=["cpu"])(jax.ShapeDtypeStruct((2,), jnp.float32))
    kernels._check_jax_version("torch_tpu::k", plain.mlir_module(), _jax)
    composite = textwrap.dedent("""
        module {
          func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {
            %0 = stablehlo.composite "my.op" %a {decomposition = @d, version = 1 : i32} : (tensor<2xf32>) -> tensor<2xf32>
            return %0 : tensor<2xf32>
          }
          func.func private @d(%a: tensor<2xf32>) -> tensor<2xf32> {
            return %a : tensor<2xf32>
          }
        }""")
    with pytest.raises(kernels.KernelError, match=rf"JAX {jax.__version__} emits StableHLO {ours}, and this kernel "
                       r"uses features the PJRT plugin's StableHLO 0.9.0 does not have"):
        kernels._check_jax_version("torch_tpu::k", composite, _jax)


def test_jax_is_imported_by_from_jax_only():
    r = run_python("import sys, torch, torch_tpu; x = torch.ones(2, device='tpu') + 1; "
                   "k = torch_tpu.kernels.from_stablehlo; print('jax' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "False"


# ---- Tokamax (Google's kernel library), its XLA implementations on the CPU plugin ----
@pytest.fixture(scope="module")
def tokamax_ops():
    tokamax = pytest.importorskip("tokamax")
    from absl import flags

    # Tokamax reads absl flags, which absl would otherwise parse from pytest's command line.
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()

    def attention(q, k, v, is_causal=False):
        # Tokamax lays attention out [batch, seq, heads, head_dim]; SDPA [batch, heads, seq, head_dim].
        return tokamax.dot_product_attention(q, k, v, is_causal=is_causal, implementation="xla")

    def ragged_dot(lhs, rhs, group_sizes):
        return tokamax.ragged_dot(lhs, rhs, group_sizes, implementation="xla")

    return (kernels.from_jax(attention, name="test_tokamax_attention", static_argnames=("is_causal",)),
            kernels.from_jax(ragged_dot, name="test_tokamax_ragged_dot"))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("is_causal", [False, True])
def test_tokamax_attention_matches_sdpa(tokamax_ops, mode, is_causal):
    attention, _ = tokamax_ops
    q = torch.randn(2, 12, 4, 8, requires_grad=True)
    k = torch.randn(2, 12, 2, 8, requires_grad=True)  # grouped-query: 2 key/value heads for 4
    v = torch.randn(2, 12, 2, 8, requires_grad=True)
    g = torch.randn(2, 12, 4, 8)
    with torch_tpu.eager_mode(mode):
        qt, kt, vt = _leaf(q), _leaf(k), _leaf(v)
        out = attention(qt, kt, vt, is_causal=is_causal)
        out.backward(g.to("tpu"))
        ref = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=is_causal,
            enable_gqa=True).transpose(1, 2)
        ref.backward(g)
        torch.testing.assert_close(out.detach().cpu(), ref.detach())
        for a, b in ((qt, q), (kt, k), (vt, v)):
            torch.testing.assert_close(a.grad.cpu(), b.grad)


@pytest.mark.parametrize("mode", MODES)
def test_tokamax_ragged_dot_matches_grouped_mm(tokamax_ops, mode):
    """On the CPU plugin JAX exports ragged_dot as dense dots and selects (chlo.ragged_dot,
    which XLA:CPU refuses, is what it exports for TPU and GPU), so the plugin compiles it."""
    _, ragged_dot = tokamax_ops
    lhs = torch.randn(12, 8, requires_grad=True)
    rhs = torch.randn(3, 8, 16, requires_grad=True)
    sizes = torch.tensor([5, 0, 7], dtype=torch.int32)
    g = torch.randn(12, 16)
    with torch_tpu.eager_mode(mode):
        lt, rt = _leaf(lhs), _leaf(rhs)
        out = ragged_dot(lt, rt, sizes.to("tpu"))
        out.backward(g.to("tpu"))
        ref = torch._grouped_mm(lhs, rhs, offs=torch.cumsum(sizes, 0, dtype=torch.int32))
        ref.backward(g)
        torch.testing.assert_close(out.detach().cpu(), ref.detach())
        torch.testing.assert_close(lt.grad.cpu(), lhs.grad)
        torch.testing.assert_close(rt.grad.cpu(), rhs.grad)


def test_tokamax_attention_compiled(tokamax_ops):
    attention, _ = tokamax_ops
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()

    def f(q, k, v):
        return attention(q * 0.5, k, v, is_causal=True).sum(-1)

    q, k, v = (torch.randn(1, 8, 2, 8) for _ in range(3))
    before = torch_tpu._C._graph_stats()["compile_programs_built"]
    with torch.no_grad():
        got = torch.compile(f, backend="tpu")(q.to("tpu"), k.to("tpu"), v.to("tpu"))
    ref = torch.nn.functional.scaled_dot_product_attention(
        (q * 0.5).transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2).sum(-1)
    torch.testing.assert_close(got.cpu(), ref)
    assert not torch._dynamo.utils.counters["graph_break"]
    assert torch_tpu._C._graph_stats()["compile_programs_built"] - before == 1


def test_tokamax_benchmark_runs(tokamax_ops):
    bench = os.path.join(os.path.dirname(__file__), "..", "bench", "kernels.py")
    r = run_python(f"import sys; sys.argv = ['kernels.py', '--small', '--rounds', '1', '--iters', '1']; "
                   f"exec(compile(open({bench!r}).read(), {bench!r}, 'exec'))", timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("x\n") == 8 and "cpu fallbacks 0" in r.stdout, r.stdout


def test_tokamax_example_runs(tokamax_ops):
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "tokamax_attention.py")
    r = run_python(open(example).read(), timeout=600)
    assert r.returncode == 0, r.stderr
    assert "matches SDPA on the CPU, forward and backward" in r.stdout
    assert "cpu fallbacks 0" in r.stdout


# ---- more of the call path ----
def test_strided_inputs(rms_norm):
    """Views (a transpose, a slice with an offset) enter the kernel as their logical arrays."""
    base = torch.randn(16, 6)
    w = torch.randn(6)
    x = base.t()[1:5].t()  # [16, 4]: strided, offset
    w2 = torch.randn(4)
    got = rms_norm(base.to("tpu").t()[1:5].t(), w2.to("tpu"))
    torch.testing.assert_close(got.cpu(), torch_rms_norm(x, w2))
    got = rms_norm(base.to("tpu")[3:9], w.to("tpu"))
    torch.testing.assert_close(got.cpu(), torch_rms_norm(base[3:9], w))


def test_variadic_function():
    def total(*xs):
        return sum(xs[1:], xs[0])

    k = kernels.from_jax(total, name="test_total")
    xs = [torch.randn(3) for _ in range(3)]
    torch.testing.assert_close(k(*[x.to("tpu") for x in xs]).cpu(), xs[0] + xs[1] + xs[2])
    assert "Tensor[] args" in k.schema


def test_import_is_torch_free_text_work():
    """torch_tpu/kernels/_stablehlo.py: locations go (also inside strings they stay), symbols are
    renamed only where they name a function of the module, attributes of main's boundary go."""
    from torch_tpu.kernels import _stablehlo

    text = textwrap.dedent('''
        #loc1 = loc("x")
        module @m attributes {mhlo.num_partitions = 1 : i32} {
          func.func public @main(%arg0: tensor<2xf32> {mhlo.sharding = "{replicated}"} loc("x")) -> (tensor<2xf32> {jax.result_info = "result"}) {
            %0 = stablehlo.custom_call @Sharding(%arg0) {backend_config = "loc(not a location) @main"} : (tensor<2xf32>) -> tensor<2xf32> loc(#loc1)
            %1 = func.call @"odd.name"(%0) : (tensor<2xf32>) -> tensor<2xf32>
            return %1 : tensor<2xf32> loc(unknown)
          } loc(#loc1)
          func.func private @"odd.name"(%arg0: tensor<2xf32>) -> tensor<2xf32> {
            return %arg0 : tensor<2xf32>
          }
        } loc(#loc1)
    ''')
    m = _stablehlo.import_module(text, "p")
    assert m.entry == "p_main" and m.inputs == [("f32", [2])] and m.results == [("f32", [2])]
    assert m.custom_calls == ["Sharding"]
    assert "loc(" not in m.functions.replace('"loc(not a location) @main"', "")
    assert '"loc(not a location) @main"' in m.functions  # string contents are left alone
    assert "@p_odd.name" in m.functions and "func.func private @p_main(" in m.functions
    assert "jax.result_info" not in m.functions and "mhlo.sharding" not in m.functions
    assert "public" not in m.functions
    # Shardy's sharding rules on custom calls (their `->` is no closing bracket) go.
    rule = "#sdy.op_sharding_rule<([i, j])->([k, l], []) {i=4, j=4, k=4, l=4}, custom>"
    assert _stablehlo.strip_sharding_rules(f"{{a = {{}}, sdy.sharding_rule = {rule}}}") == "{a = {}}"
    assert _stablehlo.strip_sharding_rules(f"{{sdy.sharding_rule = {rule}, b = 1}}") == "{b = 1}"
    with pytest.raises(_stablehlo.ImportError_, match="other than a function"):
        _stablehlo.import_module("module { sdy.mesh @mesh = <[\"x\"=2]> func.func @main() -> () { return } }", "p")


def test_pallas_without_backward_says_so():
    k = kernels.from_jax(pallas_softmax, name="test_softmax_no_backward")
    x = torch.randn(2, 8, device="tpu", requires_grad=True)
    y = k(x)
    torch.testing.assert_close(y.detach().cpu(), torch.softmax(x.detach().cpu(), -1))
    with pytest.raises(kernels.KernelError, match=r"torch_tpu::test_softmax_no_backward has no backward: JAX cannot "
                       r"differentiate the function, so give it one with from_jax\(\.\.\., backward=fn\)"):
        y.sum().backward()


def test_torch_export(rms_norm):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(16))

        def forward(self, x):
            return rms_norm(x * 2, self.w, eps=1e-5).sin()

    block = Block().to("tpu")
    x = torch.randn(4, 16, device="tpu")
    ep = torch.export.export(block, (x,))
    assert torch.ops.torch_tpu.test_rms_norm.default in [n.target for n in ep.graph.nodes]
    torch.testing.assert_close(ep.module()(x).cpu(), block(x).detach().cpu())


def test_jaxlib_only_custom_call_refused():
    """jnp.linalg on CPU calls LAPACK through custom calls jaxlib registers; the XLA CPU plugin has
    no handler for them: refused when the module is imported, naming the call."""
    if torch_tpu.platform() != "cpu":
        pytest.skip("the XLA CPU plugin lacks jaxlib's LAPACK handlers")
    k = kernels.from_jax(jnp.linalg.inv, name="test_inv")
    with pytest.raises(kernels.KernelError, match=r"torch_tpu::test_inv: the module calls custom call "
                       r"'lapack_sgetrf_ffi', which JAX's own CPU runtime registers .* on cpu, has no handler"):
        k(torch.eye(4, device="tpu"))
