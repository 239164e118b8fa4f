"""Tensor parallelism of a Transformers Llama across the devices of one process, ranks as threads
(torch_tpu.distributed.run_in_threads): DTensor's ColwiseParallel/RowwiseParallel plan over the
attention and MLP projections, and Transformers' own plan applied by
`from_pretrained(..., tp_plan="auto")`, their all-reduces on the devices. Logits, loss and greedy
tokens must be those of the unsharded model on the CPU, and nothing may cross to the host."""
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


@pytest.mark.filterwarnings("ignore:Passing `tp_plan` directly:FutureWarning")  # it now prefers DistributedConfig
def test_from_pretrained_tp_plan_auto_matches_cpu(tmp_path, monkeypatch):
    """Transformers applies the model's own plan (config.base_model_tp_plan) while it loads the
    weights: each rank thread reads its shards from the saved checkpoint onto its device."""
    import transformers

    ref = tiny_llama()
    ref.save_pretrained(tmp_path)
    ids = torch.randint(0, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        want = ref(input_ids=ids, labels=ids)
        want_tokens = ref.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False)
    # What torchrun gives every rank alike: Transformers sizes the plan from WORLD_SIZE.
    monkeypatch.setenv("WORLD_SIZE", "2")
    # Its loader shards the weights on worker threads, which are no rank (a threaded world is
    # per thread): load on the rank's own thread.
    monkeypatch.setenv("HF_DEACTIVATE_ASYNC_LOAD", "1")

    def rank_fn(rank, world):
        dev = torch.device("tpu", rank)
        model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, tp_plan="auto", dtype=torch.float32)
        q = model.model.layers[0].self_attn.q_proj.weight
        assert isinstance(q, torch.distributed.tensor.DTensor) and q.device == dev, (type(q), q.device)
        assert q.to_local().shape[0] == ref.model.layers[0].self_attn.q_proj.weight.shape[0] // world
        local = ids.to(dev)
        with torch.no_grad():
            out = model(input_ids=local, labels=local)
            tokens = model.generate(local, attention_mask=mask.to(dev), max_new_tokens=3, do_sample=False)
        return out.logits.cpu(), out.loss.cpu(), tokens.cpu()

    before = torch_tpu.metrics()
    results = run_in_threads(rank_fn, 2)
    after = torch_tpu.metrics()
    for logits, loss, tokens in results:
        torch.testing.assert_close(logits, want.logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(loss, want.loss, atol=1e-5, rtol=1e-5)
        assert torch.equal(tokens, want_tokens)
    assert after["collectives_via_host"] == before["collectives_via_host"]
    # The forward and three decoding steps, each with its row-parallel all-reduces per layer.
    assert after["collectives_on_device"] - before["collectives_on_device"] >= 4 * 2 * 2
