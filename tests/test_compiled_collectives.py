"""Functional collectives inside torch.compile(backend="tpu") graphs, ranks as threads of one
process (torch_tpu.distributed.run_in_threads): each collective is a stablehlo collective of the
graph's program, which runs once, replicated over the group's devices, when every rank has
called its compiled graph. Results are those of the CPU; no collective runs on its own
(collectives_on_device) or through the host (collectives_via_host)."""
import copy

import pytest
import torch

from conftest import needs_devices

pytestmark = [pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built"),
              needs_devices(2)]

import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
import torch_tpu  # noqa: E402
from torch_tpu.distributed import run_in_threads  # noqa: E402

_COUNTERS = ("replicated_graph_runs", "collectives_in_graphs", "collectives_on_device", "collectives_via_host")


def run_counted(fn, world=2):
    torch._dynamo.reset()
    before = torch_tpu.metrics()
    results = run_in_threads(fn, world)
    after = torch_tpu.metrics()
    return results, {k: after[k] - before[k] for k in _COUNTERS}


def matmul_all_reduce_relu(x, w, group):
    return torch.relu(funcol.all_reduce(x @ w, "sum", group))


def test_matmul_all_reduce_relu_is_one_replicated_program():
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    ws = [torch.randn(8, 6) for _ in range(2)]
    want = torch.relu(sum(x @ w for w in ws))

    def rank_fn(rank, world):
        dev = torch.device("tpu", rank)
        compiled = torch.compile(matmul_all_reduce_relu, backend="tpu")
        return [compiled(x.to(dev), ws[rank].to(dev), dist.group.WORLD).cpu() for _ in range(2)]

    results, counted = run_counted(rank_fn)
    for outs in results:
        for out in outs:
            torch.testing.assert_close(out, want)
    # Two calls: two runs of one program across both devices, each holding the all_reduce.
    assert counted == {"replicated_graph_runs": 2, "collectives_in_graphs": 2, "collectives_on_device": 0,
                       "collectives_via_host": 0}


def gather_scatter(x, group):
    gathered = funcol.all_gather_tensor(x * 2, 0, group)
    summed = funcol.reduce_scatter_tensor(gathered + 1, "sum", 0, group)
    averaged = funcol.reduce_scatter_tensor(torch.cat([x, x]), "avg", 0, group)
    maxed = funcol.all_reduce(x, "max", group)
    return gathered, summed, averaged, maxed


def test_all_gather_reduce_scatter_and_all_reduce_ops():
    xs = [torch.arange(12.0).reshape(3, 4) * (r + 1) - 5 for r in range(2)]
    gathered = torch.cat([x * 2 for x in xs])
    want_sum = 2 * (gathered + 1)  # each rank scatters the same gathered tensor: twice it, split
    want_avg = sum(torch.cat([x, x]) for x in xs) / 2
    want_max = torch.maximum(xs[0], xs[1])

    def rank_fn(rank, world):
        out = torch.compile(gather_scatter, backend="tpu")(xs[rank].to(torch.device("tpu", rank)), dist.group.WORLD)
        return [t.cpu() for t in out]

    results, counted = run_counted(rank_fn)
    for rank, (g, s, a, m) in enumerate(results):
        torch.testing.assert_close(g, gathered)
        torch.testing.assert_close(s, want_sum[3 * rank:3 * rank + 3])
        torch.testing.assert_close(a, want_avg[3 * rank:3 * rank + 3])
        torch.testing.assert_close(m, want_max)
    assert counted == {"replicated_graph_runs": 1, "collectives_in_graphs": 4, "collectives_on_device": 0,
                       "collectives_via_host": 0}


def exchange(x, group):
    even = funcol.all_to_all_single(x * 2, None, None, group)
    split = funcol.all_to_all_single(x.t().contiguous(), [3, 3], [3, 3], group)  # equal split sizes given
    return even + 1, split


def _all_to_all(parts, rank):
    """What rank `rank` receives: part `rank` of every rank's parts, by rank."""
    return torch.cat([p[rank] for p in parts])


def test_all_to_all_single_is_one_stablehlo_all_to_all():
    xs = [torch.arange(24.0).reshape(4, 6) + 100 * r for r in range(2)]

    def rank_fn(rank, world):
        out = torch.compile(exchange, backend="tpu")(xs[rank].to(torch.device("tpu", rank)), dist.group.WORLD)
        return [t.cpu() for t in out]

    results, counted = run_counted(rank_fn)
    for rank, (even, split) in enumerate(results):
        torch.testing.assert_close(even, _all_to_all([(x * 2).split(2) for x in xs], rank) + 1)
        torch.testing.assert_close(split, _all_to_all([x.t().split(3) for x in xs], rank))
    assert counted == {"replicated_graph_runs": 1, "collectives_in_graphs": 2, "collectives_on_device": 0,
                       "collectives_via_host": 0}


def test_uneven_all_to_all_single_runs_eagerly_on_the_devices():
    # Rank 0 sends 1 row to itself and 3 to rank 1; rank 1 sends 2 and 2. Results differ in shape
    # by rank: no one replicated program, so the all_to_all runs on its own (padded, on the devices).
    sends = [[1, 3], [2, 2]]
    xs = [torch.arange(12.0).reshape(4, 3) + 100 * r for r in range(2)]

    def uneven(x, out_splits, in_splits):
        return funcol.all_to_all_single(x + 1, out_splits, in_splits, dist.group.WORLD) * 2

    def rank_fn(rank, world):
        out_splits = [sends[0][rank], sends[1][rank]]
        # dynamic=False: the ranks share Dynamo's cache, and another rank's split sizes would
        # otherwise make them symbolic.
        return torch.compile(uneven, backend="tpu", dynamic=False)(xs[rank].to(torch.device("tpu", rank)), out_splits,
                                                   sends[rank]).cpu()

    results, counted = run_counted(rank_fn)
    for rank, got in enumerate(results):
        torch.testing.assert_close(got, _all_to_all([(x + 1).split(s) for x, s in zip(xs, sends)], rank) * 2)
    assert counted["collectives_in_graphs"] == 0 and counted["collectives_via_host"] == 0, counted


def test_ranks_with_different_programs_raise_on_every_rank():
    def reduce_sum(t):
        return funcol.all_reduce(t, "sum", dist.group.WORLD)

    def reduce_max(t):
        return funcol.all_reduce(t, "max", dist.group.WORLD)

    def rank_fn(rank, world):
        x = torch.ones(4, device=torch.device("tpu", rank))
        return torch.compile([reduce_sum, reduce_max][rank], backend="tpu")(x).cpu()  # rank 1 reduces otherwise

    with pytest.raises(RuntimeError, match="ranks diverged"):
        run_counted(rank_fn)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


def test_compiled_dtensor_tensor_parallel_mlp_matches_cpu():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    ref = MLP()
    x = torch.randn(4, 16)
    with torch.no_grad():
        want = ref(x)

    def rank_fn(rank, world):
        mesh = init_device_mesh("tpu", (world,))
        model = parallelize_module(copy.deepcopy(ref).to(torch.device("tpu", rank)), mesh,
                                   {"up": ColwiseParallel(), "down": RowwiseParallel()})
        compiled = torch.compile(model, backend="tpu")
        # Distributing the parameters ran eager collectives: count from after them. Between the
        # barriers only the compiled forward's collectives can be counted (a barrier counts once
        # every rank is in it).
        dist.barrier()
        before = torch_tpu.metrics()
        with torch.no_grad():
            out = compiled(x.to(torch.device("tpu", rank))).cpu()
        after = torch_tpu.metrics()
        dist.barrier()
        return out, {k: after[k] - before[k] for k in _COUNTERS}

    results, _ = run_counted(rank_fn)
    for out, counted in results:
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
        # RowwiseParallel's partial sums: one all_reduce inside the forward's one replicated run.
        assert counted == {"replicated_graph_runs": 1, "collectives_in_graphs": 1, "collectives_on_device": 0,
                           "collectives_via_host": 0}


def test_compiled_tensor_parallel_llama_matches_cpu():
    from test_tensor_parallel import tiny_llama, tp_plan
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    ref = tiny_llama()
    ids = torch.randint(0, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(input_ids=ids).logits

    def rank_fn(rank, world):
        mesh = init_device_mesh("tpu", (world,))
        model = parallelize_module(copy.deepcopy(ref).to(torch.device("tpu", rank)), mesh, tp_plan(ref))
        compiled = torch.compile(model, backend="tpu")
        dist.barrier()
        before = torch_tpu.metrics()
        with torch.no_grad():
            logits = compiled(input_ids=ids.to(torch.device("tpu", rank))).logits.cpu()
        after = torch_tpu.metrics()
        dist.barrier()
        return logits, {k: after[k] - before[k] for k in _COUNTERS}

    results, _ = run_counted(rank_fn)
    for logits, counted in results:
        torch.testing.assert_close(logits, want, atol=1e-5, rtol=1e-5)
        # Two row-parallel projections per layer, two layers: their all-reduces inside programs.
        assert counted["collectives_in_graphs"] >= 4
        assert counted["collectives_on_device"] == 0 and counted["collectives_via_host"] == 0


def _train_tensor_parallel(ref, plan, batches, make_opt, loss_fn, steps_counted=()):
    """Trains a copy of `ref` tensor-parallel over two rank threads under torch.compile and
    returns, per rank, the losses, the full parameters after the last step and the counters of
    `steps_counted` (their forward, backward and optimizer step, between barriers)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import parallelize_module

    counter_names = _COUNTERS + ("cpu_fallbacks",)

    def rank_fn(rank, world):
        dev = torch.device("tpu", rank)
        mesh = init_device_mesh("tpu", (world,))
        model = parallelize_module(copy.deepcopy(ref).to(dev), mesh, plan)
        opt = make_opt(model.parameters())
        compiled = torch.compile(model, backend="tpu")
        losses, counted = [], {k: 0 for k in counter_names}
        for step, batch in enumerate(batches):
            dist.barrier()
            before = torch_tpu.metrics()
            loss = loss_fn(compiled, [t.to(dev) for t in batch])
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach().cpu())
            after = torch_tpu.metrics()
            dist.barrier()
            if step in steps_counted:
                for k in counter_names:
                    counted[k] += after[k] - before[k]
        params = {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().cpu()
                  for n, p in model.named_parameters()}
        return losses, params, counted

    results, _ = run_counted(rank_fn)
    return results


def _train_on_cpu(ref, batches, make_opt, loss_fn):
    model = copy.deepcopy(ref)
    opt = make_opt(model.parameters())
    losses = []
    for batch in batches:
        loss = loss_fn(model, batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return losses, {n: p.detach() for n, p in model.named_parameters()}


class InputAndMLP(torch.nn.Module):
    """An unsharded layer in front of the MLP: its gradient needs the all_reduce of the MLP's
    input gradient (ColwiseParallel's partial sums) in the backward graph."""
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(16, 16)
        self.mlp = MLP()

    def forward(self, x):
        return self.mlp(torch.tanh(self.inp(x)))


def _mse(model, batch):
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)


# foreach=False: DTensor's foreach ops refuse a list mixing DTensors and the unsharded layer's tensors.
@pytest.mark.parametrize("make_opt", [lambda ps: torch.optim.SGD(ps, lr=0.1, foreach=False),
                                      lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=False)],
                         ids=["sgd", "adamw"])
def test_compiled_tensor_parallel_mlp_training_matches_cpu(make_opt):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    torch.manual_seed(0)
    ref = InputAndMLP()
    batches = [(torch.randn(4, 16), torch.randn(4, 16)) for _ in range(3)]
    want_losses, want_params = _train_on_cpu(ref, batches, make_opt, _mse)

    results = _train_tensor_parallel(ref, {"mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel()}, batches,
                                     make_opt,
                                     _mse, steps_counted=(1, 2))
    for losses, params, counted in results:
        torch.testing.assert_close(torch.stack(losses), torch.stack(want_losses), atol=1e-5, rtol=1e-5)
        assert params.keys() == want_params.keys()
        for name, want in want_params.items():
            torch.testing.assert_close(params[name], want, atol=1e-5, rtol=1e-5, msg=name)
        # Each counted step: the forward's all_reduce (RowwiseParallel's partial sums) and the
        # backward's (ColwiseParallel's input gradient), each inside a replicated program.
        assert counted == {"replicated_graph_runs": 2 * 2, "collectives_in_graphs": 2 * 2, "collectives_on_device": 0,
                           "collectives_via_host": 0, "cpu_fallbacks": 0}


def _causal_lm_loss(model, batch):
    (ids,) = batch
    return model(input_ids=ids, labels=ids).loss


def test_compiled_tensor_parallel_llama_training_matches_cpu():
    from test_tensor_parallel import tiny_llama, tp_plan

    ref = tiny_llama().train()
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 128, (2, 10), generator=gen),) for _ in range(3)]

    def make_opt(ps):
        return torch.optim.AdamW(ps, lr=1e-3, foreach=False)

    want_losses, want_params = _train_on_cpu(ref, batches, make_opt, _causal_lm_loss)
    results = _train_tensor_parallel(ref, tp_plan(ref), batches, make_opt, _causal_lm_loss, steps_counted=(1, 2))
    for losses, params, counted in results:
        torch.testing.assert_close(torch.stack(losses), torch.stack(want_losses), atol=1e-5, rtol=1e-5)
        assert params.keys() == want_params.keys()
        for name, want in want_params.items():
            torch.testing.assert_close(params[name], want, atol=1e-5, rtol=1e-5, msg=name)
        # Each counted step: one replicated forward and one replicated backward. Per layer, the
        # forward all-reduces the two row-parallel projections' partial sums and the backward at
        # least the input gradients of the column-parallel ones (attention's and the MLP's).
        assert counted["replicated_graph_runs"] == 2 * 2, counted
        assert counted["collectives_in_graphs"] >= 2 * (2 * 2 + 2 * 2), counted
        assert counted["collectives_on_device"] == 0 and counted["collectives_via_host"] == 0, counted
        assert counted["cpu_fallbacks"] == 0, counted


# A 2-D DeviceMesh of four rank threads, mesh [[0, 1], [2, 3]]: "dp" groups {0, 2} and {1, 3},
# "tp" groups {0, 1} and {2, 3}. A graph holding collectives of both runs as one program
# replicated over the world, each collective over its own group's replicas. The suite's
# processes have two devices: with fewer than four, the checks run in a process of four.
_MESH_WORLD = 4


def _mesh_groups(rank):
    """(dp group, tp group) of `rank`, as world ranks in each group's rank order."""
    dp_rank, tp_rank = divmod(rank, 2)
    return [tp_rank, tp_rank + 2], [2 * dp_rank, 2 * dp_rank + 1]


def _in_mesh_process(check):
    """Runs `check` (a function of this module) here with four devices, else in a process of four."""
    if torch.tpu.device_count() >= _MESH_WORLD:
        check()
        return
    import os

    from conftest import run_python

    tests = os.path.dirname(os.path.abspath(__file__))
    code = f"import sys; sys.path.insert(0, {tests!r}); import test_compiled_collectives as t; t.{check.__name__}()"
    done = run_python(code, env={"TORCH_TPU_NUM_DEVICES": str(_MESH_WORLD)}, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def _mesh_counted(fn):
    """Runs fn(rank, mesh, dev) on the four ranks of a 2x2 mesh; per rank: its result and the
    counters of what ran between two barriers around it."""
    from torch.distributed.device_mesh import init_device_mesh

    def rank_fn(rank, world):
        mesh = init_device_mesh("tpu", (2, 2), mesh_dim_names=("dp", "tp"))
        dist.barrier()
        before = torch_tpu.metrics()
        out = fn(rank, mesh, torch.device("tpu", rank))
        after = torch_tpu.metrics()
        dist.barrier()
        return out, {k: after[k] - before[k] for k in _COUNTERS}

    torch._dynamo.reset()
    return run_in_threads(rank_fn, _MESH_WORLD)


def tp_then_dp(x, w, tp, dp):
    y = funcol.all_reduce(x @ w, "sum", tp)              # the tp group's partial sums
    gathered = funcol.all_gather_tensor(y, 0, dp)        # then both dp ranks' rows, by dp rank
    scattered = funcol.reduce_scatter_tensor(gathered * 2, "sum", 0, tp)
    averaged = funcol.all_reduce(torch.tanh(y), "avg", dp)
    return y, gathered, scattered, averaged


def _check_two_groups_in_one_program():
    torch.manual_seed(0)
    xs = [torch.randn(4, 8) for _ in range(_MESH_WORLD)]
    ws = [torch.randn(8, 6) for _ in range(_MESH_WORLD)]
    steps = 2

    def rank_fn(rank, mesh, dev):
        compiled = torch.compile(tp_then_dp, backend="tpu")
        tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
        return [[t.cpu() for t in compiled(xs[rank].to(dev), ws[rank].to(dev), tp, dp)] for _ in range(steps)]

    results = _mesh_counted(rank_fn)
    ys = [sum(xs[s] @ ws[s] for s in _mesh_groups(r)[1]) for r in range(_MESH_WORLD)]
    for rank, (outs, counted) in enumerate(results):
        dp_ranks, tp_ranks = _mesh_groups(rank)
        gathered = torch.cat([ys[s] for s in dp_ranks])
        scattered = sum(torch.cat([ys[d] for d in _mesh_groups(s)[0]]) * 2 for s in tp_ranks)
        averaged = sum(torch.tanh(ys[s]) for s in dp_ranks) / 2
        for y, g, s, a in outs:
            torch.testing.assert_close(y, ys[rank])
            torch.testing.assert_close(g, gathered)
            torch.testing.assert_close(s, scattered.chunk(2)[tp_ranks.index(rank)])
            torch.testing.assert_close(a, averaged)
        # Each step: one run of one program over the four devices, holding the four collectives.
        assert counted == {"replicated_graph_runs": steps, "collectives_in_graphs": 4 * steps,
                           "collectives_on_device": 0, "collectives_via_host": 0}, (rank, counted)


def test_collectives_of_two_mesh_groups_are_one_program():
    _in_mesh_process(_check_two_groups_in_one_program)


def mlp_train_step(x, y, w_up, w_down, lr, tp, dp):
    """One SGD step of a tanh MLP, tensor-parallel over `tp` (w_up column shards, w_down row
    shards, Megatron style) and data-parallel over `dp`, gradients written out by hand: the
    forward's all_reduce over tp and the gradients' over dp are in one graph."""
    h = torch.tanh(x @ w_up)
    out = funcol.all_reduce(h @ w_down, "sum", tp)
    loss = ((out - y) ** 2).mean()
    d_out = 2 * (out - y) / out.numel()
    d_down = funcol.all_reduce(h.t() @ d_out, "avg", dp)
    d_pre = (d_out @ w_down.t()) * (1 - h * h)
    d_up = funcol.all_reduce(x.t() @ d_pre, "avg", dp)
    w_up.sub_(lr * d_up)
    w_down.sub_(lr * d_down)
    return funcol.all_reduce(loss, "avg", dp)


def _check_tp_dp_mlp_training():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16, bias=False), torch.nn.Tanh(), torch.nn.Linear(16, 8, bias=False))
    batches = [(torch.randn(8, 8), torch.randn(8, 8)) for _ in range(3)]  # each dp rank takes 4 rows
    lr = 0.1
    want_losses = []
    opt = torch.optim.SGD(ref.parameters(), lr=lr)
    w_up, w_down = ref[0].weight.detach().t().clone(), ref[2].weight.detach().t().clone()
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(ref(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        want_losses.append(loss.detach())

    def rank_fn(rank, mesh, dev):
        dp_rank, tp_rank = divmod(rank, 2)
        up = w_up.chunk(2, dim=1)[tp_rank].contiguous().to(dev)
        down = w_down.chunk(2, dim=0)[tp_rank].contiguous().to(dev)
        step = torch.compile(mlp_train_step, backend="tpu")
        tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
        losses = [step(x.chunk(2)[dp_rank].to(dev), y.chunk(2)[dp_rank].to(dev), up, down, lr, tp, dp).cpu()
                  for x, y in batches]
        return losses, up.cpu(), down.cpu()

    results = _mesh_counted(rank_fn)
    for rank, ((losses, up, down), counted) in enumerate(results):
        tp_rank = rank % 2
        torch.testing.assert_close(torch.stack(losses), torch.stack(want_losses), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(up, ref[0].weight.detach().t().chunk(2, dim=1)[tp_rank], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(down, ref[2].weight.detach().t().chunk(2, dim=0)[tp_rank], atol=1e-5, rtol=1e-5)
        # Each step: one program over the four devices holding its four collectives.
        assert counted == {"replicated_graph_runs": 3, "collectives_in_graphs": 4 * 3, "collectives_on_device": 0,
                           "collectives_via_host": 0}, (rank, counted)


def test_tensor_and_data_parallel_mlp_training_step_is_one_program():
    _in_mesh_process(_check_tp_dp_mlp_training)
