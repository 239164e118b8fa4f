"""Transformers' mixture-of-experts models on tpu against the CPU, from tiny random configs
(offline), for the experts implementations eager, batched_mm and grouped_mm: logits, greedy
generate(), a training step's gradients, no CPU fallback, no host sync in a steady StaticCache
decode step but reading the next token, and one program per graph under torch.compile.

A few families run here; tools/moe_models.py sweeps every MoE family of the installed
Transformers through the same functions (22 build from a small config)."""
import os
import sys

import pytest
import torch

import torch_tpu

transformers = pytest.importorskip("transformers")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import moe_models  # noqa: E402

from conftest import run_python  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

CASES = [("qwen3_moe", impl) for impl in moe_models.IMPLS] + [
    (family, "grouped_mm") for family in ("mixtral", "gpt_oss", "olmoe", "deepseek_v3")]


@pytest.mark.parametrize("family,impl", CASES, ids=[f"{f}-{i}" for f, i in CASES])
def test_logits_and_generate_match_cpu(family, impl):
    cpu, tpu = moe_models.pair(family, impl)
    ids = moe_models.inputs()
    torch_tpu.metrics.reset()
    assert moe_models.logits_diff(cpu, tpu, ids) < 1e-4
    assert moe_models.generate_equal(cpu, tpu, ids)
    assert torch_tpu.metrics()["cpu_fallbacks"] == 0


@pytest.mark.parametrize("family,impl", [("qwen3_moe", "grouped_mm"), ("qwen3_moe", "batched_mm"),
                                         ("gpt_oss", "grouped_mm")])
def test_training_step_gradients_match_cpu(family, impl):
    """The backward of the grouped path runs _grouped_mm in its 2-D x 2-D layout (weight gradients)."""
    cpu, tpu = moe_models.pair(family, impl)
    torch_tpu.metrics.reset()
    assert moe_models.grads_diff(cpu, tpu, moe_models.inputs()) < 1e-3
    assert torch_tpu.metrics()["cpu_fallbacks"] == 0


def test_strict_mode_runs_without_fallback():
    """TORCH_TPU_STRICT=1 makes any CPU fallback an error: forward, generate and a training step."""
    code = ("import sys; sys.argv = ['moe_models', 'qwen3_moe', '--impl', 'grouped_mm']; "
            f"sys.path.insert(0, {os.path.join(os.path.dirname(__file__), '..', 'tools')!r}); "
            "import moe_models; moe_models.main()")
    r = run_python(code, env={"TORCH_TPU_STRICT": "1"}, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert " ok " in r.stdout


@pytest.mark.parametrize("impl", ["grouped_mm", "batched_mm"])
def test_static_cache_decode_step_syncs_only_for_the_token(impl):
    """A steady decode step with a StaticCache reads one thing on the host: the next token. The
    routing (sort, histc on int32, cumsum, the inverse permutation, gathers) and the grouped
    products stay on the device."""
    cpu, tpu = moe_models.pair("qwen3_moe", impl)
    ids = moe_models.inputs()

    def decode(model, device, counters=None):
        cache = transformers.StaticCache(config=model.config, max_cache_len=32)
        pos = torch.arange(ids.shape[1], device=device)
        tok, tokens = ids.to(device), []
        with torch.no_grad(), torch_tpu.eager_mode("fused"):
            for _ in range(6):
                torch_tpu.metrics.reset()
                logits = model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True).logits
                tok = logits[:, -1:].argmax(-1)
                tokens.append(tok.cpu())
                pos = pos[-1:] + 1
                if counters is not None:
                    m = torch_tpu.metrics()
                    counters.append((m["host_syncs_by_cause"], m["cpu_fallbacks"]))
        return torch.cat(tokens, 1)

    counters = []
    assert torch.equal(decode(tpu, "tpu", counters), decode(cpu, "cpu"))
    # Reading the token: the open fused graph runs, then its one result is copied.
    token_read = {"fused graph: device to host": 1, "device_to_host": 1}
    assert counters[2:] == [(token_read, 0)] * 4, counters


def test_compiled_moe_block_is_one_program():
    """torch.compile(backend="tpu") of a sparse MoE block (router, routing, grouped products)
    makes one graph and one program: no graph break at the experts."""
    cpu, tpu = moe_models.pair("qwen3_moe", "grouped_mm")
    block_cpu, block = cpu.model.layers[0].mlp, tpu.model.layers[0].mlp
    x = torch.randn(2, 5, cpu.config.hidden_size)
    torch._dynamo.reset()
    torch_tpu.metrics.reset()
    with torch.no_grad():
        got = torch.compile(block, backend="tpu", fullgraph=True)(x.to("tpu"))
        want = block_cpu(x)
    got = got[0] if isinstance(got, tuple) else got
    want = want[0] if isinstance(want, tuple) else want
    torch.testing.assert_close(got.cpu(), want, atol=1e-5, rtol=1e-4)
    m = torch_tpu.metrics()
    assert (m["compile_graphs"], m["compile_programs"]) == (1, 1)
    # The experts (sort, histc, cumsum, gathers, _grouped_mm) lower into the program, and so
    # does the torch.empty_like of the inverse permutation (aten::empty_permuted): no node
    # runs eagerly.
    assert m["compile_eager_nodes_by_op"] == {}, m["compile_eager_nodes_by_op"]
    assert m["compile_partitioned_graphs"] == 0
    assert m["cpu_fallbacks"] == 0
