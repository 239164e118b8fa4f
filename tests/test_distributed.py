"""torch.distributed on tpu tensors: two processes, one tpu device each (the CPU plugin shows
two), a gloo process group. Every collective is checked against the values it must produce,
and DDP training against single-process full-batch training on the CPU."""
import os
import sys
import subprocess
import textwrap

import pytest
import torch

from conftest import needs_devices

WORKER = textwrap.dedent('''
    import os, sys, tempfile, warnings
    warnings.simplefilter("ignore", FutureWarning)  # all_gather_into_tensor's new name
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    import torch_tpu

    def check(rank, world):
        dev = torch.device("tpu", rank)
        t = torch.full((4,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        assert t.device == dev and torch.equal(t.cpu(), torch.full((4,), 3.0)), t
        for op, want in [(dist.ReduceOp.AVG, 1.5), (dist.ReduceOp.MAX, 2.0), (dist.ReduceOp.MIN, 1.0)]:
            t = torch.full((4,), float(rank + 1), device=dev)
            dist.all_reduce(t, op=op)
            assert torch.equal(t.cpu(), torch.full((4,), want)), (op, t)
        t = torch.full((2, 3), float(rank + 1), device=dev, dtype=torch.bfloat16)
        w = dist.all_reduce(t, async_op=True)
        w.wait()
        assert t.dtype == torch.bfloat16 and torch.equal(t.cpu().float(), torch.full((2, 3), 3.0))
        out = torch.empty(6, device=dev)
        dist.all_gather_into_tensor(out, torch.arange(3.0, device=dev) + 10 * rank)
        assert torch.equal(out.cpu(), torch.tensor([0., 1, 2, 10, 11, 12])), out
        parts = [torch.empty(2, device=dev) for _ in range(world)]
        dist.all_gather(parts, torch.full((2,), float(rank), device=dev))
        assert [p.cpu().tolist() for p in parts] == [[0., 0.], [1., 1.]]
        rs = torch.empty(2, device=dev)
        dist.reduce_scatter_tensor(rs, torch.arange(4.0, device=dev) * (rank + 1))
        assert torch.equal(rs.cpu(), torch.arange(4.0)[2 * rank: 2 * rank + 2] * 3), rs
        rs = torch.empty(2, device=dev)
        dist.reduce_scatter_tensor(rs, torch.arange(4.0, device=dev) * (rank + 1), op=dist.ReduceOp.AVG)
        assert torch.equal(rs.cpu(), torch.arange(4.0)[2 * rank: 2 * rank + 2] * 1.5), rs
        b = torch.full((3,), float(rank), device=dev)
        dist.broadcast(b, src=1)
        assert torch.equal(b.cpu(), torch.ones(3)), b
        r = torch.full((2,), float(rank + 1), device=dev)
        dist.reduce(r, dst=0)
        if rank == 0:
            assert torch.equal(r.cpu(), torch.full((2,), 3.0)), r
        a2a = torch.empty(2, device=dev)
        dist.all_to_all_single(a2a, torch.tensor([10.0 * rank, 10.0 * rank + 1], device=dev))
        assert a2a.cpu().tolist() == [float(rank), 10.0 + rank], a2a
        if rank == 0:
            dist.send(torch.tensor([5.0, 6.0], device=dev), 1)
        else:
            got = torch.empty(2, device=dev)
            dist.recv(got, 0)
            assert got.cpu().tolist() == [5.0, 6.0], got
        dist.barrier()

    def ddp_matches_full_batch(rank, world):
        dev = torch.device("tpu", rank)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        ref.load_state_dict(model.state_dict())
        ddp = torch.nn.parallel.DistributedDataParallel(model.to(dev), device_ids=[rank])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        for _ in range(3):
            x, y = torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)
            half = slice(2 * rank, 2 * rank + 2)
            loss = torch.nn.functional.mse_loss(ddp(x[half].to(dev)), y[half].to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
            ref_loss = torch.nn.functional.mse_loss(ref(x), y)
            ref_opt.zero_grad()
            ref_loss.backward()
            ref_opt.step()
        for p, q in zip(ddp.module.parameters(), ref.parameters()):
            assert p.device == dev and torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5), (p, q)

    def run(rank, world, init, backend):
        dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
        torch.tpu.set_device(rank)
        check(rank, world)
        ddp_matches_full_batch(rank, world)
        print(f"rank {rank} OK", flush=True)
        dist.destroy_process_group()

    if __name__ == "__main__":
        with tempfile.TemporaryDirectory() as store:  # the FileStore file is left behind otherwise
            mp.spawn(run, args=(2, "file://" + os.path.join(store, "init"), sys.argv[1]), nprocs=2)
        print("ALL OK")
''')


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built")
@needs_devices(2)
@pytest.mark.parametrize("backend", ["gloo", "tpu_dist", "tpu_dist cross"])  # tpu_dist: what Transformers asks for
def test_collectives_and_ddp_across_two_processes(tmp_path, backend):
    # "tpu_dist cross": TORCH_TPU_CROSS_PROCESS_COLLECTIVES=1 on the CPU plugin, which has no
    # collectives across processes: the group warns and keeps Gloo, with the same values.
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, TORCH_TPU_NUM_DEVICES="2", TORCH_TPU_QUIET="1")
    if backend.endswith(" cross"):
        env["TORCH_TPU_CROSS_PROCESS_COLLECTIVES"] = "1"
    out = subprocess.run([sys.executable, str(script), backend.split()[0]], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    assert "rank 0 OK" in out.stdout and "rank 1 OK" in out.stdout and "ALL OK" in out.stdout, out.stdout
    if backend.endswith(" cross"):
        assert "the cpu plugin has no collectives across processes" in out.stderr, out.stderr[-3000:]


def test_collectives_are_registered_for_tpu():
    # c10d's generic PrivateUse1 kernels look for a tpu backend in the group; ours run the
    # group's CPU backend on host copies.
    import torch_tpu

    assert torch_tpu._C._register_collectives() == []
    dump = torch._C._dispatch_dump("c10d::allreduce_")
    line = next(entry for entry in dump.splitlines() if entry.startswith("PrivateUse1"))
    assert "collectives.cpp" in line, line


AGREEMENT_WORKER = textwrap.dedent('''
    import sys, time, datetime
    import torch
    import torch.distributed as dist
    import torch_tpu
    from torch_tpu import _C

    rank, port = int(sys.argv[1]), int(sys.argv[2])
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=datetime.timedelta(seconds=120))
    # What every collective of a group across processes does before it runs, here with no
    # devices behind the group (the CPU plugin has no collectives across processes).
    _C._register_cross_process_group("agree", [0, 1], store, rank, 120.0)
    for i in range(5):  # past the two slots each rank's posts take turns in
        got = _C._agree_across_processes("agree", "all_reduce(sum) f32[4] over 2 ranks", [rank, i])
        assert got == [[0, i], [1, i]], got
    mine = "all_reduce(sum) f32[4] over 2 ranks" if rank == 0 else "broadcast(from rank 0) f32[4] over 2 ranks"
    try:
        _C._agree_across_processes("agree", mine)
        raise SystemExit("no divergence raised")
    except RuntimeError as e:
        assert "diverged at collective #5" in str(e), e
        assert "rank 0 runs all_reduce(sum) f32[4]" in str(e) and "rank 1 runs broadcast(from rank 0)" in str(e), e
    try:  # the group's numbering is lost: every later collective says why
        _C._agree_across_processes("agree", "all_reduce(sum) f32[4] over 2 ranks")
        raise SystemExit("a collective ran after a divergence")
    except RuntimeError as e:
        assert "diverged at collective #5" in str(e) and "earlier collective" in str(e), e
    # TORCH_TPU_COLLECTIVE_CHECKS=0: a mere check passes alone; an exchange still waits for all.
    _C._register_cross_process_group("unchecked", [0, 1], store, rank, 120.0, "off")
    assert _C._agree_across_processes("unchecked", "rank %d's own" % rank, [], True) == []
    assert _C._agree_across_processes("unchecked", "split sizes", [7 + rank]) == [[7], [8]]
    # A rank that never comes is named after the group's timeout.
    _C._register_cross_process_group("late", [0, 1], store, rank, 1.0)
    if rank == 0:
        start = time.monotonic()
        try:
            _C._agree_across_processes("late", "all_gather f32[8] over 2 ranks")
            raise SystemExit("no timeout raised")
        except RuntimeError as e:
            assert "rank(s) 1 of group 'late' did not reach collective #0" in str(e), e
        # Checked behind, the collective runs; the next host read waits for the missing rank's
        # post up to the timeout, then names it.
        _C._register_cross_process_group("late behind", [0, 1], store, rank, 1.0)
        assert _C._agree_across_processes("late behind", "all_gather f32[8] over 2 ranks", [], True) == []
        try:
            torch.ones(2, device="tpu").cpu()
            raise SystemExit("no timeout raised at the host read")
        except RuntimeError as e:
            assert "rank(s) 1 of group 'late behind' did not reach collective #0" in str(e), e
        assert time.monotonic() - start < 30
    store.set("done%d" % rank, "1")
    store.wait(["done0", "done1"])  # rank 0 holds the store
    print("rank %d OK" % rank, flush=True)
''')


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built")
def test_ranks_across_processes_agree_on_each_collective_or_raise(tmp_path):
    # Two processes and a TCPStore: matching collectives exchange their host values; different
    # ones raise on both ranks, naming both; a missing rank is named after the timeout.
    _two_processes(tmp_path, AGREEMENT_WORKER)


BEHIND_WORKER = textwrap.dedent('''
    import sys, datetime
    import torch
    import torch.distributed as dist
    import torch_tpu
    from torch_tpu import _C

    rank, port = int(sys.argv[1]), int(sys.argv[2])
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=datetime.timedelta(seconds=120))
    desc = "all_reduce(sum) f32[4] over 2 ranks"
    _C._register_cross_process_group("behind", [0, 1], store, rank, 120.0)  # the default: checks behind
    before = torch_tpu.metrics()
    # Collectives that need nothing from the others run at once: 20 of them, past the window
    # (8) and past the 16 store slots each rank's posts take turns in.
    for i in range(20):
        assert _C._agree_across_processes("behind", desc, [], True) == []
    _C._settle_collective_checks()  # reads back the rest
    # An exchange that carries values reads back the posts behind in its own round trip.
    assert _C._agree_across_processes("behind", "split sizes", [7 + rank]) == [[7], [8]]
    after = torch_tpu.metrics()
    assert after["collective_checks_behind"] - before["collective_checks_behind"] == 20, (before, after)
    assert after["collective_agreements"] - before["collective_agreements"] == 21, (before, after)
    # Values every rank once posted alike (buffer shapes) are taken to repeat: exchanged once,
    # then checked behind, with the values returned as every rank's.
    _C._register_cross_process_group("shapes", [0, 1], store, rank, 120.0)
    for behind in (0, 1):
        start = torch_tpu.metrics()["collective_checks_behind"]
        assert _C._agree_across_processes("shapes", desc, [4, 6], False, [], True) == [[4, 6], [4, 6]]
        assert torch_tpu.metrics()["collective_checks_behind"] - start == behind, behind
    value = torch.arange(4.0, device="tpu") * 2
    assert value.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]  # read back: reads pass
    # A divergence checked behind: each rank goes on, and the next host read of a device value
    # raises it, naming both ranks' collectives.
    mine = desc if rank == 0 else "broadcast(from rank 0) f32[4] over 2 ranks"
    assert _C._agree_across_processes("behind", mine, [], True) == []
    for read in (lambda: value.cpu(), lambda: value.sum().item(), torch.tpu.synchronize):
        try:
            read()
            raise SystemExit("a host read passed a diverged collective")
        except RuntimeError as e:  # every later read too: the devices may wait in it
            assert "diverged at collective #21" in str(e) and "found after it ran" in str(e), e
            assert "rank 0 runs all_reduce(sum)" in str(e) or "rank 1 runs all_reduce(sum)" in str(e), e
            assert "runs broadcast(from rank 0)" in str(e), e
    try:
        _C._agree_across_processes("behind", desc, [], True)
        raise SystemExit("a collective ran after a divergence")
    except RuntimeError as e:
        assert "diverged at collective #21" in str(e) and "earlier collective" in str(e), e
    store.set("done%d" % rank, "1")
    store.wait(["done0", "done1"])  # rank 0 holds the store
    print("rank %d OK" % rank, flush=True)
''')


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built")
def test_collectives_checked_behind_raise_before_a_device_value_reaches_the_host(tmp_path):
    # The default checks: a collective that needs nothing from the others runs at once and is
    # checked later, several per store round trip; no host read passes an unchecked one.
    _two_processes(tmp_path, BEHIND_WORKER)


@pytest.mark.parametrize("platform,size,setting,wanted", [
    ("cpu", 2, "", False), ("cpu", 1, "", False), ("cpu", 1, "1", True), ("cpu", 2, "1", False),
    ("tpu", 4, "", True), ("cuda", 2, "", True), ("tpu", 4, "0", False), ("tpu", 4, "1", True)])
def test_which_groups_of_processes_ask_for_device_collectives(platform, size, setting, wanted):
    import warnings

    from torch_tpu.distributed import wants_device_collectives

    env = {"TORCH_TPU_CROSS_PROCESS_COLLECTIVES": setting} if setting else {}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert wants_device_collectives(platform, size, env) == wanted
    # Asked for on the CPU plugin with several processes: said, not silently dropped.
    assert bool(seen) == (platform == "cpu" and size > 1 and setting == "1"), [str(w.message) for w in seen]


def test_every_rank_reaches_one_verdict_from_the_exchanged_device_ids():
    from torch_tpu.distributed import collective_checks, device_collectives_verdict

    assert device_collectives_verdict([0, 1, 2, 3]) is None
    assert "rank(s) 2 keep Gloo" in device_collectives_verdict([0, 1, -1, 3])
    assert "two ranks are on one device" in device_collectives_verdict([0, 0])  # clients that do not span the job
    settings = {"": "behind", "1": "behind", "behind": "behind", "before": "before", "0": "off", "off": "off"}
    for setting, checks in settings.items():
        assert collective_checks({"TORCH_TPU_COLLECTIVE_CHECKS": setting}) == checks, setting
    assert collective_checks({}) == "behind"
    with pytest.raises(ValueError, match="TORCH_TPU_COLLECTIVE_CHECKS='yes'"):
        collective_checks({"TORCH_TPU_COLLECTIVE_CHECKS": "yes"})
    with pytest.raises(ValueError, match="TORCH_TPU_CROSS_PROCESS_COLLECTIVES='2'"):
        from torch_tpu.distributed import wants_device_collectives
        wants_device_collectives("tpu", 2, {"TORCH_TPU_CROSS_PROCESS_COLLECTIVES": "2"})


P2P_ORDER_WORKER = textwrap.dedent('''
    import sys, datetime
    import torch, torch.distributed as dist
    import torch_tpu
    from torch_tpu import _C

    rank, port = int(sys.argv[1]), int(sys.argv[2])
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=datetime.timedelta(seconds=120))
    dist.init_process_group("tpu_dist", store=dist.PrefixStore("pg", store), rank=rank, world_size=2)
    # The group as a plugin with collectives across processes would have it (the CPU plugin has
    # none: only empty transfers, which run no program, and mismatches, which raise before one).
    _C._register_cross_process_group(dist.group.WORLD.group_name, [0, 1], store, rank, 120.0)
    peer = 1 - rank
    before = torch_tpu.metrics()["collective_agreements"]
    # Both sides post their send, then their recv, before either waits (an exchange): run in
    # posting order, rank 0 would start with 0 -> 1 and rank 1 with 1 -> 0. The waits run them
    # in the order both processes share instead.
    ops = [dist.P2POp(dist.isend, torch.empty(0, device="tpu"), peer),
           dist.P2POp(dist.irecv, torch.empty(0, device="tpu"), peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    assert torch_tpu.metrics()["collective_agreements"] - before == 2
    assert torch_tpu.metrics()["collectives_via_host"] == 0
    try:
        if rank == 0:
            dist.send(torch.ones(6, device="tpu"), 1)
        else:
            dist.recv(torch.empty(4, device="tpu"), 0)
        raise SystemExit("a send of 6 elements met a recv of 4")
    except RuntimeError as e:
        assert "diverged at transfer #2 between ranks 0, 1" in str(e), e
        assert "send f32[6] from rank 0 to rank 1" in str(e) and "send f32[4] from rank 0 to rank 1" in str(e), e
    _C._forget_cross_process_group(dist.group.WORLD.group_name)
    dist.destroy_process_group()
    print("rank %d OK" % rank, flush=True)
''')


def _two_processes(tmp_path, worker):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "worker.py"
    script.write_text(worker)
    env = dict(os.environ, TORCH_TPU_QUIET="1")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(port)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"rank {r} OK" in out, out[-2000:] + err[-4000:]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built")
def test_send_recv_across_processes_run_in_one_shared_order_and_check_sizes(tmp_path):
    _two_processes(tmp_path, P2P_ORDER_WORKER)
