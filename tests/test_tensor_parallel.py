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


def test_fused_decode_step_runs_one_graph_per_segment_between_collectives():
    """Fused mode keeps one open graph per device: each rank's ops between two all-reduces run as
    one program, whatever the other rank threads do meanwhile (one graph for the process made the
    ranks cut each other's graphs, and a step ran 67-100 programs, mostly op by op)."""
    import threading

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    ref = tiny_llama()
    ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(2))
    barrier = threading.Barrier(2)
    marks = {}

    def mark(rank, name):
        torch.tpu.synchronize()
        barrier.wait()
        if rank == 0:
            marks[name] = torch_tpu.metrics(wait=True)  # background compiles settled
        barrier.wait()

    def rank_fn(rank, world):
        model = parallelize_module(copy.deepcopy(ref).to(torch.device("tpu", rank)), init_device_mesh("tpu", (world,)),
                                   tp_plan(ref))

        def decode(cache, token):
            out = model(input_ids=token, past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            cache.crop(-1)  # every step decodes the same position: the same graphs
            token.cpu()
            return cache, token

        with torch.no_grad(), torch_tpu.eager_mode("fused"):
            out = model(input_ids=ids.to(torch.device("tpu", rank)), use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            for _ in range(4):
                cache, token = decode(cache, token)
                mark(rank, "warm")
            mark(rank, "start")
            cache, token = decode(cache, token)
            mark(rank, "end")
        return token.cpu()

    tokens = run_in_threads(rank_fn, 2)
    assert torch.equal(tokens[0], tokens[1])
    start, end = marks["start"], marks["end"]
    delta = {k: end[k] - start[k] for k in ("executions", "fused_graphs_run", "fused_graphs_op_by_op",
                                            "collectives_on_device")}
    causes = {k: v - start["host_syncs_by_cause"].get(k, 0) for k, v in end["host_syncs_by_cause"].items()}
    assert causes.get("fused graph: another device", 0) == 0, causes
    collectives = delta["collectives_on_device"]  # one per all-reduce of the group (2 layers x 2)
    assert collectives == 4, delta
    # Each rank: one graph before, between and after its all-reduces; the step's graphs all warm.
    assert delta["fused_graphs_run"] <= 2 * (collectives + 1), delta
    assert delta["fused_graphs_op_by_op"] == 0, delta
    assert delta["executions"] == delta["fused_graphs_run"] + collectives, delta
