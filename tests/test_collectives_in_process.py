"""torch.distributed among ranks that are threads of one process, one tpu device each
(torch_tpu.distributed.run_in_threads): the collectives run on the devices as one replicated
program, never on the host. Each result is checked against what the collective must produce
(Gloo's and the CPU's values), and ranks that diverge must raise, never hang."""
import datetime
import textwrap

import pytest
import torch

from conftest import needs_devices, run_python

pytestmark = [pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built"),
              needs_devices(2)]

import torch.distributed as dist  # noqa: E402
import torch_tpu  # noqa: E402
from torch_tpu.distributed import run_in_threads  # noqa: E402


def metrics_delta(fn, *args, **kw):
    before = torch_tpu.metrics()
    out = fn(*args, **kw)
    after = torch_tpu.metrics()
    return out, {k: after[k] - before[k] for k in ("collectives_on_device", "collectives_via_host",
                                                  "collectives_in_graphs", "replicated_graph_runs",
                                                  "collective_agreements",
                                                  "device_to_host_bytes",
                                                  "host_to_device_bytes")}


def collectives(rank, world):
    dev = torch.device("tpu", rank)
    seen = {}
    base = torch.arange(6.0).reshape(2, 3)
    for op in ["SUM", "AVG", "MIN", "MAX", "PRODUCT"]:
        t = (base + rank).to(dev)
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        seen[op] = t
    t = torch.tensor([rank + 1, 7], dtype=torch.int32, device=dev)
    dist.all_reduce(t)
    seen["int"] = t
    t = torch.full((3,), rank + 1.0, dtype=torch.bfloat16, device=dev)
    dist.all_reduce(t, async_op=True).wait()
    seen["bf16"] = t
    b = torch.tensor([-0.0, float(rank), float("inf")], device=dev)
    dist.broadcast(b, src=1)
    seen["broadcast"] = b
    out = torch.empty(2 * world, 3, device=dev)
    dist.all_gather_into_tensor(out, (base + 10 * rank).to(dev))
    seen["all_gather_into_tensor"] = out
    parts = [torch.empty(2, device=dev) for _ in range(world)]
    dist.all_gather(parts, torch.full((2,), float(rank), device=dev))
    seen["all_gather"] = torch.stack(parts)
    rs = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(2.0 * world, device=dev) * (rank + 1))
    seen["reduce_scatter_tensor"] = rs
    rs = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(2.0 * world, device=dev) * (rank + 1), op=dist.ReduceOp.AVG)
    seen["reduce_scatter_avg"] = rs
    rs = torch.empty(2, device=dev)
    dist.reduce_scatter(rs, [torch.full((2,), float(r + rank), device=dev) for r in range(world)])
    seen["reduce_scatter"] = rs
    whole = torch.zeros(4, 3, device=dev)
    view = whole[1:3, 1:]  # a strided view of a bigger storage
    view.copy_(torch.full((2, 2), rank + 1.0))
    dist.all_reduce(view)
    seen["view"] = whole
    r = torch.full((2,), float(rank + 1), device=dev)
    dist.reduce(r, dst=0)
    seen["reduce"] = r
    g = [torch.empty(2, device=dev) for _ in range(world)] if rank == 1 else None
    dist.gather(torch.full((2,), float(rank), device=dev), g, dst=1)
    seen["gather"] = torch.stack(g) if rank == 1 else torch.zeros(world, 2)
    sc = torch.empty(2, device=dev)
    dist.scatter(sc, [torch.full((2,), 5.0 + r, device=dev) for r in range(world)] if rank == 0 else None, src=0)
    seen["scatter"] = sc
    dist.barrier()
    return {k: v.cpu() for k, v in seen.items()}


def expected(rank, world):
    base = torch.arange(6.0).reshape(2, 3)
    ranks = [base + r for r in range(world)]
    return {
        "SUM": sum(ranks), "AVG": sum(ranks) / world, "MIN": ranks[0], "MAX": ranks[-1],
        "PRODUCT": torch.stack(ranks).prod(0),
        "int": torch.tensor([sum(range(1, world + 1)), 7 * world], dtype=torch.int32),
        "bf16": torch.full((3,), float(sum(range(1, world + 1))), dtype=torch.bfloat16),
        "broadcast": torch.tensor([-0.0, 1.0, float("inf")]),
        "all_gather_into_tensor": torch.cat([base + 10 * r for r in range(world)]),
        "all_gather": torch.stack([torch.full((2,), float(r)) for r in range(world)]),
        "reduce_scatter_tensor": torch.arange(2.0 * world)[2 * rank: 2 * rank + 2] * sum(range(1, world + 1)),
        "reduce_scatter_avg": torch.arange(2.0 * world)[2 * rank: 2 * rank + 2] * sum(range(1, world + 1)) / world,
        "reduce_scatter": torch.full((2,), float(sum(rank + r for r in range(world)))),
        "reduce": torch.full((2,), float(sum(range(1, world + 1)) if rank == 0 else rank + 1)),
        "gather": torch.stack([torch.full((2,), float(r)) for r in range(world)]) if rank == 1 else torch.zeros(world, 2),
        "scatter": torch.full((2,), 5.0 + rank),
        "view": torch.nn.functional.pad(torch.full((2, 2), float(sum(range(1, world + 1)))), (1, 0, 1, 1)),
    }


def test_collectives_run_on_the_devices():
    results, delta = metrics_delta(run_in_threads, collectives, 2)
    for rank, got in enumerate(results):
        for name, want in expected(rank, 2).items():
            assert got[name].dtype == want.dtype and torch.equal(got[name], want), (rank, name, got[name], want)
    assert torch.equal(results[0]["broadcast"][:1].sign_bit() if hasattr(torch.Tensor, "sign_bit")
                       else torch.signbit(results[0]["broadcast"][:1]), torch.tensor([True]))
    assert delta["collectives_via_host"] == 0, delta
    assert delta["collectives_on_device"] >= 17, delta


def test_ranks_that_diverge_raise_with_both_descriptions():
    def diverge(rank, world):
        t = torch.ones(4 if rank == 0 else 5, device=torch.device("tpu", rank))
        dist.all_reduce(t)

    with pytest.raises(RuntimeError) as info:
        run_in_threads(diverge, 2)
    message = str(info.value)
    assert "diverged" in message and "f32[4]" in message and "f32[5]" in message, message

    def other_op(rank, world):
        t = torch.ones(4, device=torch.device("tpu", rank))
        dist.all_reduce(t, op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX)

    with pytest.raises(RuntimeError, match=r"all_reduce\(sum\).*all_reduce\(max\)"):
        run_in_threads(other_op, 2)


def test_a_rank_that_never_comes_makes_the_others_raise_after_the_timeout():
    def absent(rank, world):
        if rank == 0:
            dist.all_reduce(torch.ones(2, device=torch.device("tpu", rank)))

    with pytest.raises(RuntimeError, match=r"rank\(s\) 1 did not arrive within"):
        run_in_threads(absent, 2, timeout=datetime.timedelta(seconds=2))


def test_ddp_step_matches_one_device():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)) for _ in range(2)]

    def train(rank, world):
        dev = torch.device("tpu", rank)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        model.load_state_dict(state)
        ddp = torch.nn.parallel.DistributedDataParallel(model.to(dev), device_ids=[rank])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for x, y in batches:
            half = slice(2 * rank, 2 * rank + 2)
            loss = torch.nn.functional.mse_loss(ddp(x[half].to(dev)), y[half].to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
        return [p.detach().cpu() for p in ddp.module.parameters()]

    results, delta = metrics_delta(run_in_threads, train, 2)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(ref(x), y)
        ref_opt.zero_grad()
        loss.backward()
        ref_opt.step()
    for params in results:
        for p, q in zip(params, ref.parameters()):
            assert torch.allclose(p, q.detach(), atol=1e-5), (p, q)
    assert delta["collectives_via_host"] == 0 and delta["collectives_on_device"] > 0, delta


def test_dtensor_tensor_parallel_linear_matches_one_device():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    x = torch.randn(3, 8)

    def tp(rank, world):
        mesh = init_device_mesh("tpu", (world,))
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        model.load_state_dict(state)
        model = parallelize_module(model.to(mesh.device_type), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        return model(x.to(torch.device("tpu", rank))).detach().cpu()

    results, delta = metrics_delta(run_in_threads, tp, 2)
    want = ref(x).detach()
    for out in results:
        assert torch.allclose(out, want, atol=1e-5), (out, want)
    assert delta["collectives_via_host"] == 0 and delta["collectives_on_device"] > 0, delta


def test_collectives_between_processes_are_counted_as_via_host():
    # One process, world size 1, Gloo: the host path (the multi-process tests check values).
    store = dist.HashStore()
    dist.init_process_group("tpu_dist", rank=0, world_size=1, store=store)
    try:
        t = torch.ones(3, device="tpu")
        _, delta = metrics_delta(dist.all_reduce, t)
        assert delta["collectives_via_host"] == 1 and delta["collectives_on_device"] == 0, delta
        assert torch.equal(t.cpu(), torch.ones(3))
    finally:
        dist.destroy_process_group()


def test_cross_process_opt_in_runs_one_program_collectives_on_the_device(monkeypatch):
    # TORCH_TPU_CROSS_PROCESS_COLLECTIVES=1: a group of processes compiles each one-program
    # collective for its ranks' devices (exchanged through the store) and each process runs its
    # part, after the ranks agree on it through the store. Here one process (world size 1): the
    # same path, end to end, on the CPU plugin; more processes need a plugin with collectives
    # across them (libtpu, CUDA), which is where it is on by default.
    monkeypatch.setenv("TORCH_TPU_CROSS_PROCESS_COLLECTIVES", "1")
    before = torch_tpu.metrics()
    dist.init_process_group("tpu_dist", rank=0, world_size=1, store=dist.HashStore())
    try:
        # The group's first collective, an all_reduce whose compile and result every rank
        # reports through the store (two agreements), ran at creation.
        after = torch_tpu.metrics()
        assert after["collective_agreements"] - before["collective_agreements"] == 2, (before, after)
        base = torch.arange(6.0).reshape(2, 3)
        t = base.to("tpu")
        gathered, scattered, swapped = (torch.empty(2, 3, device="tpu") for _ in range(3))

        def run():
            dist.all_reduce(t)
            dist.broadcast(t, src=0)
            dist.all_gather_into_tensor(gathered, t)
            dist.reduce_scatter_tensor(scattered, t * 2)
            dist.all_to_all_single(swapped, t)
        _, delta = metrics_delta(run)
        assert delta["collectives_on_device"] == 5 and delta["collectives_via_host"] == 0, delta
        assert delta["collective_agreements"] == 5, delta
        for got, want in ((t, base), (gathered, base), (scattered, base * 2), (swapped, base)):
            assert torch.equal(got.cpu(), want)
        # Uneven all_to_all: the split sizes travel with the agreement, then one program.
        out = torch.empty(2, 3, device="tpu")
        _, delta = metrics_delta(dist.all_to_all_single, out, t, [2], [2])
        assert delta["collectives_on_device"] == 1 and delta["collectives_via_host"] == 0, delta
        assert torch.equal(out.cpu(), base)
        parts = [torch.empty(2, 3, device="tpu")]
        _, delta = metrics_delta(dist.all_to_all, parts, [t])
        assert delta["collectives_via_host"] == 0 and torch.equal(parts[0].cpu(), base), delta
    finally:
        dist.destroy_process_group()


def test_shaped_buffers_cross_processes_in_their_shape_when_every_rank_has_it(tmp_path):
    # Across processes no rank sees another's buffer: the shapes travel with the agreement, and
    # equal ones run the program typed in that shape (no relayout to 1-D on a TPU). Without the
    # checks there is no exchange, so the 1-D program runs.
    code = textwrap.dedent("""
        import os
        import torch, torch.distributed as dist, torch_tpu

        os.environ["TORCH_TPU_CROSS_PROCESS_COLLECTIVES"] = "1"
        base = torch.arange(24.0).reshape(4, 6)
        for checks in ("behind", "before", "off"):
            os.environ["TORCH_TPU_COLLECTIVE_CHECKS"] = checks
            dist.init_process_group("tpu_dist", rank=0, world_size=1, store=dist.HashStore())
            start = torch_tpu.metrics()["collective_checks_behind"]
            t = base.to("tpu")
            dist.all_reduce(t)
            g = torch.empty(4, 6, device="tpu")
            dist.all_gather_into_tensor(g, base.to("tpu") * 2)
            # Checked behind, a collective every rank ran in this buffer shape before runs in it
            # again at once: its shape is checked with it, after it ran.
            again = base.to("tpu") + 1
            dist.all_reduce(again)
            assert torch.equal(t.cpu(), base) and torch.equal(g.cpu(), base * 2) and torch.equal(again.cpu(), base + 1)
            behind = torch_tpu.metrics()["collective_checks_behind"] - start
            assert behind == {"behind": 1, "before": 0, "off": 0}[checks], (checks, behind)
            dist.destroy_process_group()
        print("ok")
    """)
    r = run_python(code, env={"TORCH_TPU_DUMP_DIR": str(tmp_path), "TORCH_TPU_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    texts = [p.read_text() for p in sorted(tmp_path.glob("*-collective-*.mlir"))]
    ops = [t for t in texts if '"stablehlo.all_reduce"' in t and "f32" in t or '"stablehlo.all_gather"' in t]
    shaped = [t for t in ops if "tensor<4x6xf32>" in t]
    flat = [t for t in ops if "tensor<24xf32>" in t]
    assert len(shaped) == 2 and len(flat) == 2, [t[-600:] for t in ops]


def test_a_compiled_graph_across_processes_holds_its_collectives(monkeypatch):
    # A group of processes on the devices: a torch.compile graph with functional collectives is
    # one program compiled for the group's devices, each process running its replica after the
    # ranks agree on it (one process here, on the CPU plugin).
    import torch.distributed._functional_collectives as funcol

    monkeypatch.setenv("TORCH_TPU_CROSS_PROCESS_COLLECTIVES", "1")
    dist.init_process_group("tpu_dist", rank=0, world_size=1, store=dist.HashStore())
    try:
        group = dist.group.WORLD

        def step(x, w):
            h = funcol.all_reduce(x @ w, "sum", group)
            return torch.relu(funcol.all_gather_tensor(h, 0, group)) * 2

        torch._dynamo.reset()
        x, w = torch.randn(4, 8), torch.randn(8, 6)
        got, delta = metrics_delta(lambda: torch.compile(step, backend="tpu")(x.to("tpu"), w.to("tpu")).cpu())
        assert (delta["replicated_graph_runs"], delta["collectives_in_graphs"], delta["collectives_on_device"],
                delta["collectives_via_host"], delta["collective_agreements"]) == (1, 2, 0, 0, 1), delta
        torch.testing.assert_close(got, torch.relu(x @ w) * 2)
    finally:
        dist.destroy_process_group()
        torch._dynamo.reset()


def test_a_compiled_graph_across_processes_holds_collectives_of_two_groups(monkeypatch):
    # A 2-D mesh's "dp" and "tp" groups: one program over the world, whose replica groups every
    # process fills from the groups all ranks post with the agreement.
    import torch.distributed._functional_collectives as funcol

    monkeypatch.setenv("TORCH_TPU_CROSS_PROCESS_COLLECTIVES", "1")
    dist.init_process_group("tpu_dist", rank=0, world_size=1, store=dist.HashStore())
    try:
        dp, tp = dist.new_group([0]), dist.new_group([0])

        def step(x):
            return funcol.all_reduce(funcol.all_reduce(x * 2, "sum", tp) + 1, "avg", dp)

        torch._dynamo.reset()
        x = torch.randn(4, 8)
        got, delta = metrics_delta(lambda: torch.compile(step, backend="tpu")(x.to("tpu")).cpu())
        assert (delta["replicated_graph_runs"], delta["collectives_in_graphs"], delta["collectives_on_device"],
                delta["collectives_via_host"]) == (1, 2, 0, 0), delta
        torch.testing.assert_close(got, x * 2 + 1)
    finally:
        dist.destroy_process_group()
        torch._dynamo.reset()


def test_a_compiled_graph_with_collectives_of_a_gloo_group_runs_them_eagerly(monkeypatch):
    # A group whose collectives run on the host: the graph's collective runs on its own, through
    # Gloo, and the rest of the graph in programs (the backend used to fail on such a group).
    import torch.distributed._functional_collectives as funcol

    monkeypatch.setenv("TORCH_TPU_CROSS_PROCESS_COLLECTIVES", "0")
    dist.init_process_group("tpu_dist", rank=0, world_size=1, store=dist.HashStore())
    try:
        group = dist.group.WORLD
        torch._dynamo.reset()
        x = torch.randn(4, 8)
        got, delta = metrics_delta(
            lambda: torch.compile(lambda t: funcol.all_reduce(t * 2, "sum", group) + 1, backend="tpu")(
                x.to("tpu")).cpu())
        assert delta["collectives_via_host"] == 1 and delta["collectives_in_graphs"] == 0, delta
        torch.testing.assert_close(got, x * 2 + 1)
    finally:
        dist.destroy_process_group()
        torch._dynamo.reset()


def test_a_new_group_of_the_same_name_forgets_the_devices_of_the_last(monkeypatch):
    # The default group's name comes back after destroy_process_group: a Gloo group made then
    # must not run on the devices of the one before.
    monkeypatch.setenv("TORCH_TPU_CROSS_PROCESS_COLLECTIVES", "1")
    dist.init_process_group("tpu_dist", rank=0, world_size=1, store=dist.HashStore())
    dist.destroy_process_group()
    monkeypatch.setenv("TORCH_TPU_CROSS_PROCESS_COLLECTIVES", "0")
    dist.init_process_group("tpu_dist", rank=0, world_size=1, store=dist.HashStore())
    try:
        t = torch.ones(3, device="tpu")
        _, delta = metrics_delta(dist.all_reduce, t)
        assert delta["collectives_via_host"] == 1 and delta["collectives_on_device"] == 0, delta
    finally:
        dist.destroy_process_group()


def all_to_all_and_p2p(rank, world):
    dev = torch.device("tpu", rank)
    seen = {}
    # Even: rank r sends rows [2d, 2d+2) of its input to rank d.
    x = (torch.arange(2.0 * world * 3).reshape(2 * world, 3) + 100 * rank).to(dev)
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    seen["even"] = out
    # Uneven: rank r sends (r + d) % 3 rows to rank d, some none.
    in_splits = [(rank + d) % 3 for d in range(world)]
    out_splits = [(s + rank) % 3 for s in range(world)]
    x = (torch.arange(float(sum(in_splits) * 2)).reshape(-1, 2) + 100 * rank).to(dev)
    out = torch.empty(sum(out_splits), 2, device=dev)
    dist.all_to_all_single(out, x, out_splits, in_splits)
    seen["uneven"] = out
    ints = torch.arange(world, dtype=torch.int64, device=dev) + 10 * rank
    got = torch.empty_like(ints)
    dist.all_to_all_single(got, ints, async_op=True).wait()
    seen["int64"] = got
    # List form, parts of different sizes: rank r sends d + 1 copies of r to rank d.
    ins = [torch.full((d + 1,), float(rank), device=dev) for d in range(world)]
    outs = [torch.empty(rank + 1, device=dev) for _ in range(world)]
    dist.all_to_all(outs, ins)
    seen["list"] = torch.cat(outs)
    # Blocking send/recv: rank 0 sends to every other rank.
    if rank == 0:
        for d in range(1, world):
            dist.send(torch.full((2, 3), 7.0 + d, device=dev), dst=d)
        seen["send_recv"] = torch.zeros(2, 3)
    else:
        r = torch.empty(2, 3, device=dev)
        dist.recv(r, src=0)
        seen["send_recv"] = r
    # A ring in one batch: every rank sends to rank + 1, receives from rank - 1.
    right, left = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(4, device=dev, dtype=torch.bfloat16)
    ops = [dist.P2POp(dist.isend, torch.full((4,), rank + 0.5, device=dev, dtype=torch.bfloat16), right),
           dist.P2POp(dist.irecv, got, left)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    seen["ring"] = got
    # isend/irecv in both directions with tags, waited in the reverse order.
    a = torch.full((3,), 10.0 * rank, device=dev)
    b, c = torch.empty(3, device=dev), torch.empty(3, device=dev)
    works = [dist.isend(a, dst=right, tag=1), dist.isend(a + 1, dst=left, tag=2),
             dist.irecv(b, src=left, tag=1), dist.irecv(c, src=right, tag=2)]
    for w in reversed(works):
        w.wait()
    seen["tags"] = torch.stack([b, c])
    return {k: v.cpu() for k, v in seen.items()}


def all_to_all_expected(rank, world):
    x = [torch.arange(2.0 * world * 3).reshape(2 * world, 3) + 100 * r for r in range(world)]
    ins = [[(r + d) % 3 for d in range(world)] for r in range(world)]
    uneven = []
    for s in range(world):
        rows = torch.arange(float(sum(ins[s]) * 2)).reshape(-1, 2) + 100 * s
        uneven.append(rows.split(ins[s])[rank])
    right, left = (rank + 1) % world, (rank - 1) % world
    return {
        "even": torch.cat([x[s][2 * rank: 2 * rank + 2] for s in range(world)]),
        "uneven": torch.cat(uneven),
        "int64": torch.tensor([rank + 10 * s for s in range(world)]),
        "list": torch.cat([torch.full((rank + 1,), float(s)) for s in range(world)]),
        "send_recv": torch.full((2, 3), 7.0 + rank) if rank else torch.zeros(2, 3),
        "ring": torch.full((4,), left + 0.5, dtype=torch.bfloat16),
        "tags": torch.stack([torch.full((3,), 10.0 * left), torch.full((3,), 10.0 * right + 1)]),
    }


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=needs_devices(4))])
def test_all_to_all_and_send_recv_run_on_the_devices(world):
    results, delta = metrics_delta(run_in_threads, all_to_all_and_p2p, world)
    for rank, got in enumerate(results):
        for name, want in all_to_all_expected(rank, world).items():
            assert got[name].dtype == want.dtype and torch.equal(got[name], want), (rank, name, got[name], want)
    assert delta["collectives_via_host"] == 0, delta
    # 3 all_to_all_single and 1 all_to_all, world - 1 sends, world ring transfers, 2 x world tagged
    # ones: each transfer is counted once.
    assert delta["collectives_on_device"] >= 4 + (world - 1) + world + 2 * world, delta


def functional_all_to_all(rank, world):
    import torch.distributed._functional_collectives as funcol

    dev = torch.device("tpu", rank)
    group = dist.group.WORLD
    x = (torch.arange(2.0 * world) + 10 * rank).to(dev)
    even = funcol.all_to_all_single(x, None, None, group)
    in_splits = [d + 1 for d in range(world)]
    out_splits = [rank + 1] * world
    y = (torch.arange(float(sum(in_splits))) + 10 * rank).to(dev)
    uneven = funcol.all_to_all_single(y, out_splits, in_splits, group)

    @torch.compile(backend="tpu", fullgraph=True, dynamic=False)
    def compiled(t):
        return funcol.all_to_all_single(t * 2, None, None, group) + 1

    return even.cpu(), uneven.cpu(), compiled(x).cpu()


@pytest.mark.parametrize("world", [2, pytest.param(4, marks=needs_devices(4))])
def test_functional_all_to_all_single_runs_on_the_devices(world):
    results, delta = metrics_delta(run_in_threads, functional_all_to_all, world)
    for rank, (even, uneven, compiled) in enumerate(results):
        xs = [torch.arange(2.0 * world) + 10 * s for s in range(world)]
        want = torch.cat([x[2 * rank: 2 * rank + 2] for x in xs])
        assert torch.equal(even, want), (rank, even, want)
        assert torch.equal(compiled, torch.cat([2 * x[2 * rank: 2 * rank + 2] for x in xs]) + 1), (rank, compiled)
        ys = [(torch.arange(float(sum(range(1, world + 1)))) + 10 * s).split([d + 1 for d in range(world)])[rank]
              for s in range(world)]
        assert torch.equal(uneven, torch.cat(ys)), (rank, uneven)
    # The eager even and uneven ones on the devices; the compiled one inside its graph's program.
    assert delta["collectives_via_host"] == 0 and delta["collectives_on_device"] >= 2, delta
    assert delta["collectives_in_graphs"] == 1, delta


def test_send_and_recv_that_disagree_raise_naming_both():
    def mismatch(rank, world):
        dev = torch.device("tpu", rank)
        if rank == 0:
            dist.send(torch.ones(2, 3, device=dev), dst=1)
        else:
            dist.recv(torch.empty(3, 2, dtype=torch.int32, device=dev), src=0)

    with pytest.raises(RuntimeError) as info:
        run_in_threads(mismatch, 2)
    message = str(info.value)
    assert "rank 0 sent f32[2,3]" in message and "receives i32[3,2]" in message, message


def test_all_to_all_splits_that_disagree_raise_naming_both():
    def mismatch(rank, world):
        dev = torch.device("tpu", rank)
        x = torch.ones(3, device=dev)
        dist.all_to_all_single(torch.empty(3, device=dev), x, [1, 2], [1, 2])

    # Rank 0 sends 2 rows to rank 1, whose output split for rank 0 is 1.
    with pytest.raises(ValueError, match=r"rank 0 sends 2 rows to rank 1, which expects 1 from it"):
        run_in_threads(mismatch, 2)


def test_a_recv_with_no_send_raises_after_the_timeout():
    def lonely(rank, world):
        if rank == 1:
            dist.recv(torch.empty(2, device=torch.device("tpu", rank)), src=0)

    with pytest.raises(RuntimeError, match=r"rank 0 posted no matching send within"):
        run_in_threads(lonely, 2, timeout=datetime.timedelta(seconds=2))


def test_shaped_buffers_reach_the_collective_in_their_shape(tmp_path):
    """A tensor whose storage's buffer is shaped like it (a TPU tiles 2-D buffers) is the collective
    program's operand as it is: the program is typed in that shape, with no reshape of it to 1-D
    (a relayout copy on a TPU), and gathers, scatters and all_to_all work on its dim 0. A reduce_scatter
    whose dim 0 does not split over the ranks takes the buffer copied out 1-D. Ranks holding the same
    tensor in buffers of different shapes (made by different ops) agree: they run the 1-D program."""
    code = textwrap.dedent("""
        import torch, torch.distributed as dist, torch_tpu
        from torch_tpu.distributed import run_in_threads

        def ranks(rank, world):
            dev = torch.device("tpu", rank)
            base = torch.arange(24.0).reshape(4, 6) * (rank + 1)
            out = {}
            t = base.to(dev)
            dist.all_reduce(t)
            out["all_reduce"] = t
            b = base.to(dev)
            dist.broadcast(b, src=1)
            out["broadcast"] = b
            g = torch.empty(8, 6, device=dev)
            dist.all_gather_into_tensor(g, base.to(dev))
            out["all_gather"] = g
            rs = torch.empty(2, 6, device=dev)
            dist.reduce_scatter_tensor(rs, base.to(dev))
            out["reduce_scatter"] = rs
            a2a = torch.empty(4, 6, device=dev)
            dist.all_to_all_single(a2a, base.to(dev))
            out["all_to_all"] = a2a
            odd = torch.empty(3, 6, device=dev)  # [3, 12] split over 2 ranks: dim 0 does not split
            dist.reduce_scatter_tensor(odd, torch.arange(36.0).reshape(3, 12).mul(rank + 1).to(dev))
            out["odd_reduce_scatter"] = odd
            # the same [4, 6] tensor: rank 0's buffer is [4, 6], rank 1's is 1-D (made by a 1-D op)
            mixed = base.to(dev) if rank == 0 else base.reshape(-1).to(dev).view(4, 6)
            dist.all_reduce(mixed)
            out["mixed"] = mixed
            return {k: v.cpu() for k, v in out.items()}

        results = run_in_threads(ranks, 2)
        base = [torch.arange(24.0).reshape(4, 6) * (r + 1) for r in range(2)]
        for rank, got in enumerate(results):
            want = {"all_reduce": base[0] + base[1], "broadcast": base[1], "all_gather": torch.cat(base),
                    "reduce_scatter": (base[0] + base[1])[2 * rank: 2 * rank + 2],
                    "all_to_all": torch.cat([base[0][2 * rank: 2 * rank + 2], base[1][2 * rank: 2 * rank + 2]]),
                    "odd_reduce_scatter": (torch.arange(36.0) * 3)[18 * rank: 18 * rank + 18].reshape(3, 6),
                    "mixed": base[0] + base[1]}
            for k, w in want.items():
                assert torch.equal(got[k], w), (rank, k, got[k], w)
        m = torch_tpu.metrics()
        assert m["collectives_via_host"] == 0 and m["collectives_on_device"] == 7, m
        print("ok")
    """)
    r = run_python(code, env={"TORCH_TPU_DUMP_DIR": str(tmp_path), "TORCH_TPU_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    texts = {p.name: p.read_text() for p in tmp_path.glob("*-collective-*.mlir")}
    shaped = [t for t in texts.values() if "mhlo.num_replicas = 2" in t and "tensor<4x6xf32>" in t]
    # all_reduce, broadcast, all_gather, reduce_scatter, all_to_all: typed [4,6], never reshaped
    assert len(shaped) == 5, list(texts)
    assert not any("stablehlo.reshape" in t for t in shaped), shaped
    assert any('"stablehlo.all_gather"' in t and "-> tensor<8x6xf32>" in t for t in shaped)
    assert any('"stablehlo.reduce_scatter"' in t and "-> tensor<2x6xf32>" in t for t in shaped)
    # the odd reduce_scatter's operand was copied out 1-D; the mixed ranks ran the 1-D all_reduce
    assert any('"stablehlo.reduce_scatter"' in t and "(tensor<36xf32>) -> tensor<18xf32>" in t for t in texts.values())
    assert any('"stablehlo.all_reduce"' in t and "(tensor<24xf32>) -> tensor<24xf32>" in t for t in texts.values())
    assert any("module @flatten" in t and "tensor<4x6xf32>" in t for t in texts.values()), list(texts)


def test_list_all_gather_and_gather_of_2d_tensors_take_rows_of_the_shaped_result():
    # The gathered program returns [world * 3, 4] (each rank's [3, 4] buffer stacked on dim 0);
    # the list forms cut it back into each rank's rows.
    def ranks(rank, world):
        dev = torch.device("tpu", rank)
        x = torch.arange(12.0).reshape(3, 4) + 100 * rank
        parts = [torch.empty(3, 4, device=dev) for _ in range(world)]
        dist.all_gather(parts, x.to(dev))
        g = [torch.empty(3, 4, device=dev) for _ in range(world)] if rank == 0 else None
        dist.gather(x.to(dev), g, dst=0)
        return [p.cpu() for p in parts], [p.cpu() for p in g] if g else None

    results, delta = metrics_delta(run_in_threads, ranks, 2)
    want = [torch.arange(12.0).reshape(3, 4) + 100 * r for r in range(2)]
    for rank, (parts, gathered) in enumerate(results):
        assert all(torch.equal(a, b) for a, b in zip(parts, want)), (rank, parts)
        if rank == 0:
            assert all(torch.equal(a, b) for a, b in zip(gathered, want)), gathered
    assert delta["collectives_via_host"] == 0 and delta["collectives_on_device"] == 2, delta
