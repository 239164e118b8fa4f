"""torch_tpu.tpu_target: every program also compiled for a TPU topology by libtpu in a worker process."""

import os
import subprocess
import sys

import pytest
import torch

import torch_tpu
from conftest import needs_devices
from torch_tpu import kernels, tpu_target

TOPOLOGY = "v5e:2x2"

# The TPU target compiles in a worker process of its own and sets its own eager modes.
pytestmark = pytest.mark.mode_independent("compiles for a TPU topology in its own worker; tests set their modes")

# Shapes no other test uses, so each program is compiled (and logged) here, not found in the memory cache.
M, K, N = 40, 56, 24


@pytest.fixture(scope="module", autouse=True)
def target_on():
    tpu_target.enable(TOPOLOGY)
    yield
    tpu_target.disable()


def _new_rows(action):
    tpu_target.report(wait=True, clear=True)
    result = action()
    rows = tpu_target.report(wait=True, clear=True)
    assert rows, "no program was reported"
    assert all(r["topology"] == TOPOLOGY for r in rows)
    return result, rows


def test_compile_module_row():
    text = """module @m attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%a: tensor<128x256xf32>, %b: tensor<256x128xf32>) -> tensor<128x128xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<128x256xf32>, tensor<256x128xf32>) -> tensor<128x128xf32>
    return %0 : tensor<128x128xf32>
  }
}"""
    row = tpu_target.compile_module(text, TOPOLOGY, name="matmul")
    assert row["ok"], row["error"]
    assert row["flops"] == 2 * 128 * 256 * 128
    assert row["bytes_accessed"] >= 4 * (2 * 128 * 256 + 128 * 128)
    assert row["modelled_ms"] > 0 and row["unmodelled"] == 0
    assert row["argument_mb"] == pytest.approx(2 * 128 * 256 * 4 / 1e6)
    assert "convolution" in row["optimized_hlo"] or "dot" in row["optimized_hlo"]
    bad = tpu_target.compile_module("module { bad }", TOPOLOGY)
    assert not bad["ok"] and bad["error"]


def test_split_optimal_seconds():
    row = tpu_target._row("x", TOPOLOGY, {"compiled": True, "optimal_seconds": -12.9967, "modelled_seconds": 0.0033,
                                          "unmodelled_instructions": 13})
    assert row["unmodelled"] == 13 and row["modelled_ms"] == pytest.approx(3.3)


def test_strict_op_reported():
    a, b = torch.randn(M, K), torch.randn(K, N)

    def run():
        with torch_tpu.eager_mode("strict"):
            return (a.to("tpu") @ b.to("tpu")).cpu()
    got, rows = _new_rows(run)
    torch.testing.assert_close(got, a @ b)
    mm = [r for r in rows if r["name"] == "aten::mm"]
    assert mm and mm[0]["ok"] and mm[0]["flops"] >= 2 * M * K * N


def test_runs_count_each_program():
    """runs() counts each reported program's executions: one step's figures weigh a program that runs
    twice (two layers of one shape) twice."""
    x = torch.randn(19, 7)

    def run():
        with torch_tpu.eager_mode("strict"):
            return ((x.to("tpu") * 5) * 5).cpu()
    got, rows = _new_rows(run)
    torch.testing.assert_close(got, x * 25)
    mul = [r for r in rows if r["name"].startswith("aten::mul")]
    assert len(mul) == 1, [r["name"] for r in rows]
    assert tpu_target.runs()[mul[0]["program_id"]] == 2


def test_fused_graph_reported():
    a, b = torch.randn(M + 1, K), torch.randn(K, N)

    def run():
        with torch_tpu.eager_mode("fused"):
            return torch.relu(a.to("tpu") @ b.to("tpu") + 1).sum(0).cpu()
    got, rows = _new_rows(run)
    torch.testing.assert_close(got, torch.relu(a @ b + 1).sum(0))
    assert all(r["ok"] for r in rows), [r["error"] for r in rows]
    assert sum(r["flops"] for r in rows) >= 2 * (M + 1) * K * N


def test_torch_compile_reported():
    a, b = torch.randn(M + 2, K), torch.randn(K, N)

    def f(x, y):
        return torch.tanh(x @ y) * 2

    def run():
        return torch.compile(f, backend="tpu")(a.to("tpu"), b.to("tpu")).cpu()
    got, rows = _new_rows(run)
    torch.testing.assert_close(got, f(a, b))
    compiled = [r for r in rows if "compiled" in r["name"]]
    assert compiled, [r["name"] for r in rows]
    assert all(r["ok"] for r in compiled) and sum(r["flops"] for r in compiled) >= 2 * (M + 2) * K * N


_KERNEL = """module @k attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%a: tensor<24x40xf32>, %b: tensor<40x8xf32>) -> tensor<24x8xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<24x40xf32>, tensor<40x8xf32>) -> tensor<24x8xf32>
    return %0 : tensor<24x8xf32>
  }
}"""


def test_custom_kernel_reported():
    kernel = kernels.from_stablehlo(_KERNEL, name="test_tpu_target_matmul")
    a, b = torch.randn(24, 40), torch.randn(40, 8)

    def run():
        with torch_tpu.eager_mode("strict"):
            return kernel(a.to("tpu"), b.to("tpu")).cpu()
    got, rows = _new_rows(run)
    torch.testing.assert_close(got, a @ b)
    mine = [r for r in rows if "test_tpu_target_matmul" in r["name"]]
    assert mine and mine[0]["ok"] and mine[0]["flops"] >= 2 * 24 * 40 * 8


# libtpu aborts the process on one stablehlo.convert from f32 to complex<f64> (our own lowerings
# build that convert from parts, so the module is a custom kernel's).
_ABORTS = """module @k attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%a: tensor<5x3xf32>) -> tensor<5x3xcomplex<f64>> {
    %0 = stablehlo.convert %a : (tensor<5x3xf32>) -> tensor<5x3xcomplex<f64>>
    return %0 : tensor<5x3xcomplex<f64>>
  }
}"""


@needs_devices(2)
def test_device_collectives_compile_for_the_topology():
    """Collectives between rank threads run as programs replicated over the ranks' devices; each is
    compiled for the topology too, on as many chips as ranks (its mhlo.num_replicas)."""
    import torch.distributed as dist
    from torch_tpu.distributed import run_in_threads

    def ranks(rank, world):
        t = torch.full((37, 29), float(rank + 1), device=f"tpu:{rank}")
        dist.all_reduce(t)
        out = torch.empty(2 * 37, 29, device=f"tpu:{rank}")
        dist.all_gather_into_tensor(out, t)
        swapped = torch.empty_like(out)
        dist.all_to_all_single(swapped, out)
        got = torch.empty(41, device=f"tpu:{rank}")
        works = [dist.isend(torch.full((41,), float(rank), device=f"tpu:{rank}"), 1 - rank),
                 dist.irecv(got, 1 - rank)]
        for w in works:
            w.wait()
        return swapped.cpu(), got.cpu()

    results, rows = _new_rows(lambda: run_in_threads(ranks, 2))
    assert all(torch.equal(s, torch.full((74, 29), 3.0)) for s, _ in results)
    assert all(torch.equal(got, torch.full((41,), float(1 - rank))) for rank, (_, got) in enumerate(results))
    collective = {r["name"]: r for r in rows if r["name"].startswith("collective ")}
    assert any("all_reduce(sum) f32[1073] over 2 ranks" in n for n in collective), list(collective)
    assert any("all_gather f32[1073] over 2 ranks" in n for n in collective), list(collective)
    assert any("all_to_all f32[2146] over 2 ranks" in n for n in collective), list(collective)
    assert any("send/recv f32[41]" in n for n in collective), list(collective)
    assert all(r["ok"] for r in collective.values()), [r["error"] for r in collective.values()]
    assert all(r["bytes_accessed"] > 0 for r in collective.values())


def test_compiler_abort_is_an_error_row():
    kernel = kernels.from_stablehlo(_ABORTS, name="test_tpu_target_to_c128")
    x = torch.randn(5, 3)

    def run():
        with torch_tpu.eager_mode("strict"):
            return kernel(x.to("tpu")).cpu()
    got, rows = _new_rows(run)
    torch.testing.assert_close(got, x.to(torch.complex128))  # the process runs on
    aborted = [r for r in rows if not r["ok"]]
    assert aborted and "the TPU compiler aborted (signal 6" in aborted[0]["error"]
    # The worker was restarted: the next program compiles.
    # (A shape no other test uses, in strict mode: a program already in this process's cache is
    # not compiled again, so it would not be reported.)
    y = torch.randn(17, 3)

    def next_program():
        with torch_tpu.eager_mode("strict"):
            return (y.to("tpu") * 3).cpu()
    _, rows = _new_rows(next_program)
    assert all(r["ok"] for r in rows)


def test_a_waiter_gets_the_work_lock_while_the_drain_thread_waits():
    # The drain thread waits for programs 0.2 s at a time. It once held the work lock across that
    # wait and took it again at once, and report(wait=True) waited minutes for it (Python's locks
    # are not fair). Now the lock is free while the drain waits: every try gets it well within
    # one drain cycle, and report(wait=True) returns.
    assert tpu_target._thread is not None and tpu_target._thread.is_alive()
    for _ in range(10):
        assert tpu_target._work_lock.acquire(timeout=1.0), "the drain thread kept the work lock"
        tpu_target._work_lock.release()
    for _ in range(3):
        tpu_target.report(wait=True)
    assert tpu_target._takes_finished > 0


def test_missing_libtpu(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_LIBTPU_PATH", "/nonexistent/libtpu.so")
    with pytest.raises(tpu_target.TpuTargetError, match=r"pip install 'torch-tpu\[tpu\]'.*libtpu==0\.0\.42"):
        tpu_target.enable("v6e:2x2")
    with pytest.raises(ValueError, match="not a TPU topology name"):
        tpu_target.enable("v5litepod-8")


def test_cli_report_and_dump(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("import torch, torch_tpu\nx = torch.randn(33, 65, device='tpu')\nprint((x @ x.T).sum().item())\n")
    dump = tmp_path / "dump"
    env = dict(os.environ, TORCH_TPU_DUMP_DIR=str(dump), TORCH_TPU_CACHE_DIR="", TORCH_TPU_QUIET="1")
    out = subprocess.run([sys.executable, "-m", "torch_tpu", "tpu-report", "--topology", TOPOLOGY, str(script)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "---- torch_tpu tpu-report after" in out.stdout
    assert "aten::mm" in out.stdout and "total: " in out.stdout and " 0 errors" in out.stdout, out.stdout
    modules = sorted(p for p in os.listdir(dump) if p.endswith(".mlir"))
    tpu_hlo = sorted(p for p in os.listdir(dump) if p.endswith(".tpu-v5e_2x2.hlo"))
    assert modules and len(tpu_hlo) == len(modules)
    assert "parameter(" in (dump / tpu_hlo[0]).read_text()
