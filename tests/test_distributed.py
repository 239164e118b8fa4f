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
