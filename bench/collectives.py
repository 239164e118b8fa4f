"""all_reduce bandwidth among the CPU plugin's devices of one process, ranks as threads (issue
34): on the devices (one replicated XLA program, "tpu_dist" in a threaded world) against the
host path (Gloo over host copies, what processes without device collectives use), from 4 KB to
64 MB of float32. Each size runs rounds that alternate the two paths; the table shows medians
of the per-call times, the bus bandwidth 2(n-1)/n x bytes / time, and the median of the
per-round ratios host/device.

    TORCH_TPU_NUM_DEVICES=4 python bench/collectives.py [--ranks 4] [--rounds 5] [--iters 5]
                                                        [--tpu-topology v5e:2x2]

--tpu-topology also compiles each all_reduce program for that TPU topology with libtpu (no TPU
needed) and adds the cost model's time and bus bandwidth: the compiler's estimates, not measurements.

    python bench/collectives.py --agreement [--ranks 2] [--rounds 5] [--iters 500]  # more iters than the default 5

instead times what a collective across processes on the devices adds: the ranks' agreement
through a TCPStore (csrc/aten/distributed/collective_agreement.cpp), in that many processes, checked before
each collective and checked behind (the default), against a Gloo all_reduce of one float32 on
the CPU among the same processes in the same run (the cheapest host collective). Medians of the
per-round means, and of the per-round ratios.
"""
import argparse
import datetime
import os
import socket
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TORCH_TPU_NUM_DEVICES", "4")
os.environ.setdefault("TORCH_TPU_QUIET", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch_tpu  # noqa: E402
from torch_tpu.distributed import run_in_threads  # noqa: E402

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def timed(rank, world, nbytes, iters):
    dev = torch.device("tpu", rank)
    t = torch.ones(nbytes // 4, device=dev)
    dist.all_reduce(t)  # compiles (device path) and warms up
    t[:1].cpu()
    times = []
    for _ in range(iters):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(t)
        t[:1].cpu()  # waits for the result
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def agreement_worker(rank, n, port, rounds, iters):
    """One process of --agreement: per round, the mean time per collective of the agreement
    checked before each collective, then checked behind (TORCH_TPU_COLLECTIVE_CHECKS's default:
    posted, read back several at a time, the rest at the end of the loop, as a host read would),
    then of a Gloo all_reduce of one float."""
    store = dist.TCPStore("127.0.0.1", port, n, rank == 0, timeout=datetime.timedelta(seconds=300))
    dist.init_process_group("gloo", store=dist.PrefixStore("gloo", store), rank=rank, world_size=n)
    for checks in ("before", "behind"):
        torch_tpu._C._register_cross_process_group("bench_" + checks, list(range(n)), store, rank, 300.0, checks)
    what = "all_reduce(sum) f32[1024] over %d ranks" % n
    one = torch.ones(1)
    for r in range(rounds + 1):  # the first round warms up
        dist.barrier()
        start = time.perf_counter()
        for i in range(iters):
            torch_tpu._C._agree_across_processes("bench_before", what)
        before = (time.perf_counter() - start) / iters
        dist.barrier()
        start = time.perf_counter()
        for i in range(iters):
            torch_tpu._C._agree_across_processes("bench_behind", what, [], True)
        torch_tpu._C._settle_collective_checks()
        behind = (time.perf_counter() - start) / iters
        dist.barrier()
        start = time.perf_counter()
        for i in range(iters):
            dist.all_reduce(one)
        gloo = (time.perf_counter() - start) / iters
        if rank == 0 and r:
            print(f"ROUND {before} {behind} {gloo}", flush=True)
    dist.destroy_process_group()


def agreement(a):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, __file__, "--agreement-worker", "--ranks", str(a.ranks), "--rounds", str(a.rounds),
           "--iters", str(a.iters), "--port", str(port)]
    procs = [subprocess.Popen(cmd + ["--rank", str(r)], stdout=subprocess.PIPE, text=True) for r in range(a.ranks)]
    out = [p.communicate()[0] for p in procs][0]
    rounds = [tuple(float(x) for x in line.split()[1:]) for line in out.splitlines() if line.startswith("ROUND")]
    before, behind, gloo = (statistics.median(r[i] for r in rounds) for i in range(3))

    def ratio(i, j):
        return statistics.median(r[i] / r[j] for r in rounds)

    print(f"{a.ranks} processes, {a.rounds} rounds x {a.iters} collectives, per collective (medians):")
    print(f"  checked before it runs: {before * 1e6:.1f} us ({ratio(0, 2):.2f}x Gloo)")
    print(f"  checked behind it (default): {behind * 1e6:.1f} us ({ratio(1, 2):.2f}x Gloo, {ratio(1, 0):.2f}x before)")
    print(f"  Gloo all_reduce of 1 float32: {gloo * 1e6:.1f} us")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--agreement", action="store_true")
    p.add_argument("--agreement-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--max-bytes", type=int, default=SIZES[-1])
    p.add_argument("--tpu-topology")
    a = p.parse_args()
    if a.agreement_worker:
        return agreement_worker(a.rank, a.ranks, a.port, a.rounds, a.iters)
    if a.agreement:
        return agreement(a)
    n = a.ranks
    if a.tpu_topology:
        from torch_tpu import tpu_target
        tpu_target.enable(a.tpu_topology)
    print(f"all_reduce(sum) f32 over {n} in-process devices ({torch_tpu._C._platform()}), "
          f"{a.rounds} rounds x {a.iters} calls")
    tpu_cols = f" {a.tpu_topology + ' ms':>14} {'GB/s':>8}" if a.tpu_topology else ""
    print(f"{'bytes':>10} {'device ms':>10} {'host ms':>10} {'device GB/s':>12} {'host GB/s':>10} {'host/device':>12}"
          + tpu_cols)
    for nbytes in [s for s in SIZES if s <= a.max_bytes]:
        dev_t, host_t, ratios = [], [], []
        for _ in range(a.rounds):
            d = max(run_in_threads(timed, n, nbytes, a.iters))
            h = max(run_in_threads(timed, n, nbytes, a.iters, backend="gloo"))
            dev_t.append(d)
            host_t.append(h)
            ratios.append(h / d)
        d, h = statistics.median(dev_t), statistics.median(host_t)
        bus = 2 * (n - 1) / n * nbytes
        tpu = ""
        if a.tpu_topology:
            name = f"collective all_reduce(sum) f32[{nbytes // 4}] over {n} ranks"
            rows = [r for r in tpu_target.report(wait=True, clear=True) if r["name"] == name]
            if rows and rows[0]["ok"] and rows[0]["modelled_ms"] > 0:
                tpu = f" {rows[0]['modelled_ms']:>14.4f} {bus / rows[0]['modelled_ms'] / 1e6:>8.1f}"
            else:
                tpu = f" {'error' if rows else 'not compiled':>14}"
        print(f"{nbytes:>10} {d * 1e3:>10.3f} {h * 1e3:>10.3f} {bus / d / 1e9:>12.2f} {bus / h / 1e9:>10.2f} "
              f"{statistics.median(ratios):>12.2f}" + tpu, flush=True)


if __name__ == "__main__":
    main()
