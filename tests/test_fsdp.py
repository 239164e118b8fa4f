"""FSDP2 (torch.distributed.fsdp.fully_shard) across the devices of one process, ranks as threads
(torch_tpu.distributed.run_in_threads): parameters sharded over a "tpu" DeviceMesh, gathered
before each layer and their gradients reduce-scattered, all on the devices. A few AdamW steps
must give the losses and parameters of the same training on the CPU, and nothing may cross to
the host."""
import copy

import pytest
import torch

from conftest import needs_devices

pytestmark = [pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built"),
              needs_devices(2)]

import torch_tpu  # noqa: E402
from torch_tpu.distributed import run_in_threads  # noqa: E402

from test_tensor_parallel import tiny_llama  # noqa: E402

COUNTERS = ("collectives_on_device", "collectives_via_host", "cpu_fallbacks", "compile_graph_runs")


def metrics_delta(fn, *args):
    before = torch_tpu.metrics()
    out = fn(*args)
    after = torch_tpu.metrics()
    return out, {k: after[k] - before[k] for k in COUNTERS}


def shard(model, blocks, mesh):
    """FSDP2 as its docs apply it: each block its own unit, then the root."""
    from torch.distributed.fsdp import fully_shard
    for block in blocks:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def full_state(model):
    """The unsharded parameters, gathered on the devices, as CPU tensors."""
    return {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}


class Block(torch.nn.Module):
    """A layer written in user code: `nn.Linear(...).compile()` on its own gave Dynamo no graph
    here, a module like this one does."""

    def __init__(self, n_in, n_out, act=True):
        super().__init__()
        self.linear = torch.nn.Linear(n_in, n_out)
        self.act = act

    def forward(self, x):
        y = self.linear(x)
        return torch.tanh(y) if self.act else y


def test_fsdp2_llama_adamw_matches_cpu():
    from torch.distributed.device_mesh import init_device_mesh

    init = tiny_llama().train()
    steps = torch.randint(0, 128, (3, 2, 10), generator=torch.Generator().manual_seed(1))  # step, rank, tokens

    def train(rank, world):
        dev = torch.device("tpu", rank)
        model = copy.deepcopy(init).to(dev)
        shard(model, model.model.layers, init_device_mesh("tpu", (world,)))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for ids in steps:
            mine = ids[rank:rank + 1].to(dev)
            loss = model(input_ids=mine, labels=mine).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        return torch.stack(losses).cpu(), full_state(model)

    results, delta = metrics_delta(run_in_threads, train, 2)

    # The CPU reference: FSDP averages the ranks' gradients, so one step on the mean of their losses.
    ref = copy.deepcopy(init)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    want = []
    for ids in steps:
        per_rank = [ref(input_ids=ids[r:r + 1], labels=ids[r:r + 1]).loss for r in range(2)]
        opt.zero_grad()
        (sum(per_rank) / 2).backward()
        opt.step()
        want.append(torch.stack(per_rank).detach())
    want = torch.stack(want)
    for rank, (losses, state) in enumerate(results):
        torch.testing.assert_close(losses, want[:, rank], atol=1e-5, rtol=1e-5)
        for name, p in ref.state_dict().items():
            # Adam divides by sqrt(v): gradients equal to 1e-7 give parameters equal to ~1e-5 after 3 steps.
            torch.testing.assert_close(state[name], p, atol=1e-4, rtol=1e-4, msg=name)
    assert delta["collectives_via_host"] == 0, delta
    # Counted once per collective of the group. Per step, for each of the 3 units (2 layers,
    # the root): an all-gather before its forward and a reduce-scatter of its gradients.
    assert delta["collectives_on_device"] >= 3 * 3 * 2, delta
    assert delta["cpu_fallbacks"] == 0, delta


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fsdp2_mlp_adamw_matches_cpu(compiled):
    from torch.distributed.device_mesh import init_device_mesh

    torch.manual_seed(0)
    init = torch.nn.Sequential(Block(8, 16), Block(16, 16), Block(16, 1, act=False))
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)) for _ in range(3)]

    def train(rank, world):
        dev = torch.device("tpu", rank)
        model = copy.deepcopy(init).to(dev)
        if compiled:  # each block compiled, as torchtitan does; FSDP's gathers and reduce-scatters stay eager
            for block in model:
                block.compile(backend="tpu")
        shard(model, list(model), init_device_mesh("tpu", (world,)))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for x, y in batches:
            half = slice(2 * rank, 2 * rank + 2)
            loss = torch.nn.functional.mse_loss(model(x[half].to(dev)), y[half].to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        return torch.stack(losses).cpu(), full_state(model)

    results, delta = metrics_delta(run_in_threads, train, 2)

    ref = copy.deepcopy(init)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    want = []
    for x, y in batches:
        per_rank = [torch.nn.functional.mse_loss(ref(x[2 * r:2 * r + 2]), y[2 * r:2 * r + 2]) for r in range(2)]
        opt.zero_grad()
        (sum(per_rank) / 2).backward()
        opt.step()
        want.append(torch.stack(per_rank).detach())
    want = torch.stack(want)
    for rank, (losses, state) in enumerate(results):
        torch.testing.assert_close(losses, want[:, rank], atol=1e-6, rtol=1e-6)
        for name, p in ref.state_dict().items():
            torch.testing.assert_close(state[name], p, atol=1e-5, rtol=1e-5, msg=name)
    assert delta["collectives_via_host"] == 0, delta
    # Per step, for each of the 3 blocks: an all-gather before its forward and a reduce-scatter.
    assert delta["collectives_on_device"] >= 3 * 3 * 2, delta
    assert delta["cpu_fallbacks"] == 0, delta
    if compiled:  # each block's forward and backward, per step and rank, ran as a compiled graph
        assert delta["compile_graph_runs"] >= 3 * 2 * 3 * 2, delta
    else:
        assert delta["compile_graph_runs"] == 0, delta
