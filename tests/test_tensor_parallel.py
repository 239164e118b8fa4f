"""Tensor parallelism of a Transformers Llama across the devices of one process, ranks as threads
(torch_tpu.distributed.run_in_threads): DTensor's ColwiseParallel/RowwiseParallel plan over the
attention and MLP projections, its all-reduces on the devices. Logits, loss and greedy tokens
must be those of the unsharded model on the CPU, and nothing may cross to the host."""
import copy

import pytest
import torch

from conftest import needs_devices

pytestmark = [pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built"),
              needs_devices(2)]

import torch_tpu  # noqa: E402
from torch_tpu.distributed import run_in_threads  # noqa: E402


def tiny_llama():
    import transformers
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager")
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def tp_plan(model):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    plan = {}
    for i in range(model.config.num_hidden_layers):
        p = f"model.layers.{i}."
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            plan[p + name] = ColwiseParallel()  # whole heads per rank: the projections split by output
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[p + name] = RowwiseParallel()  # partial sums, all-reduced on the devices
    return plan


def greedy(model, ids, steps):
    for _ in range(steps):
        next_id = model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, next_id], dim=1)
    return ids


def test_tensor_parallel_llama_matches_one_device():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    ref = tiny_llama()
    ids = torch.randint(0, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(input_ids=ids, labels=ids)
        want_tokens = greedy(ref, ids, 3)

    def rank_fn(rank, world):
        mesh = init_device_mesh("tpu", (world,))
        model = parallelize_module(copy.deepcopy(ref).to(torch.device("tpu", rank)), mesh, tp_plan(ref))
        local = ids.to(torch.device("tpu", rank))
        with torch.no_grad():
            out = model(input_ids=local, labels=local)
            tokens = greedy(model, local, 3)
        return out.logits.cpu(), out.loss.cpu(), tokens.cpu()

    before = torch_tpu.metrics()
    results = run_in_threads(rank_fn, 2)
    after = torch_tpu.metrics()
    for logits, loss, tokens in results:
        torch.testing.assert_close(logits, want.logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(loss, want.loss, atol=1e-5, rtol=1e-5)
        assert torch.equal(tokens, want_tokens)
    assert after["collectives_via_host"] == before["collectives_via_host"]
    # Two row-parallel projections per layer, each forward: at least those all-reduces ran on the devices.
    assert after["collectives_on_device"] - before["collectives_on_device"] >= 4 * 4
