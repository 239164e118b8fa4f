"""Errors on tpu are the errors PyTorch raises on the CPU, or clear ones of our own; nothing
crashes. Environment-dependent cases run in a subprocess."""
import textwrap

import pytest
import torch

from conftest import cpu_plugin_only, needs_devices, run_python


def cpu_and_tpu_error(fn):
    """Runs fn on CPU and tpu; both must raise the same exception class and message."""
    errors = []
    for device in ["cpu", "tpu"]:
        with pytest.raises(Exception) as info:
            fn(device)
        errors.append(info.value)
    cpu_err, tpu_err = errors
    assert type(tpu_err) is type(cpu_err)
    assert str(tpu_err).split("\n")[0] == str(cpu_err).split("\n")[0]
    return tpu_err


def test_invalid_device_index():
    n = torch.tpu.device_count()
    with pytest.raises(RuntimeError, match=rf"invalid device index {n + 3}\b.*{n} device"):
        torch.zeros(2, device=f"tpu:{n + 3}")
    with pytest.raises(RuntimeError, match=f"invalid device index {n}"):
        torch.tensor([1.0]).to(f"tpu:{n}")
    with pytest.raises(RuntimeError, match=f"invalid device index {n + 1}"):
        torch.tpu.set_device(n + 1)
    with pytest.raises(RuntimeError, match=f"invalid device index {n + 4}"):
        torch.empty_strided((2,), (1,), device=f"tpu:{n + 4}")
    assert torch.tpu.current_device() == 0  # a failed call leaves the current device alone
    assert torch.zeros(1, device="tpu").device.index == 0


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.complex32, torch.float8_e5m2],
                         ids=str)
def test_unsupported_dtype_is_a_type_error(dtype):
    name = str(dtype).replace("torch.", "")
    with pytest.raises(TypeError, match=name):
        torch.empty(3, dtype=dtype, device="tpu")
    if dtype.is_floating_point or dtype.is_complex:
        with pytest.raises(TypeError, match=name):
            torch.zeros(3, dtype=dtype).to("tpu")
        with pytest.raises(TypeError, match=name):
            torch.zeros(3, device="tpu").to(dtype)


def test_mismatched_shapes_same_error_as_cpu():
    err = cpu_and_tpu_error(lambda d: torch.ones(3, device=d) + torch.ones(4, device=d))
    assert "must match the size of tensor b" in str(err)
    cpu_and_tpu_error(lambda d: torch.ones(2, 3, device=d) @ torch.ones(4, 5, device=d))
    cpu_and_tpu_error(lambda d: torch.ones(6, device=d).view(4))
    cpu_and_tpu_error(lambda d: torch.ones(2, 3, device=d).t().view(6))
    cpu_and_tpu_error(lambda d: torch.ones(3, device=d).add_(torch.ones(2, 3, device=d)))
    cpu_and_tpu_error(lambda d: torch.cat([torch.ones(2, 3, device=d), torch.ones(2, 4, device=d)]))
    cpu_and_tpu_error(lambda d: torch.ones(2, device=d)[5])
    cpu_and_tpu_error(lambda d: torch.ones(2, 3, device=d).sum(dim=4))
    cpu_and_tpu_error(lambda d: torch.ones(2, device=d).item())
    cpu_and_tpu_error(lambda d: torch.ones(2, 2, device=d).expand(3, 3))
    cpu_and_tpu_error(lambda d: torch.ones(2, device=d).copy_(torch.ones(3, device=d)))
    cpu_and_tpu_error(lambda d: torch.ones(4, device=d).as_strided((5,), (1,), 0).resize_(-1))


def test_in_place_dtype_and_shape_errors_as_cpu():
    cpu_and_tpu_error(lambda d: torch.ones(3, dtype=torch.int64, device=d).add_(1.5 * torch.ones(3, device=d)))
    cpu_and_tpu_error(lambda d: torch.ones(2, 3, device=d).view(torch.int64).view(5, 5))
    cpu_and_tpu_error(lambda d: torch.add(torch.ones(3, device=d), torch.ones(3, device=d),
                                          out=torch.empty(3, dtype=torch.int64, device=d)))


@needs_devices(2)
def test_tensors_on_different_devices():
    a = torch.ones(3, device="tpu")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3) * a
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3, device="tpu:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a.add_(torch.ones(3, device="tpu:1"))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(torch.ones(2, 2, device="tpu"), torch.ones(2, 2))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.where(a > 0, a, torch.ones(3))
    # A 0-dim CPU tensor is a scalar and mixes with any device, as on CUDA.
    r = a * torch.tensor(2.0)
    assert r.device.type == "tpu" and torch.equal(r.cpu(), torch.full((3,), 2.0))
    r = a.add_(torch.tensor(1.0))
    assert torch.equal(a.cpu(), torch.full((3,), 2.0))


@needs_devices(2)
def test_tensors_on_different_devices_in_fallback_ops():
    # An op without a native kernel must not hide the mismatch by moving everything to the CPU.
    a = torch.ones(3, 3, device="tpu")
    mask = torch.ones(3, 3, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.masked_select(a, mask)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.masked_select(a, mask.to("tpu:1"))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.equal(a, torch.ones(3, 3))
    # With both on the device it runs, and picks the values the CPU picks.
    x, m = torch.arange(9.0).reshape(3, 3), torch.tensor([[True, False, True], [False, False, True], [True] * 3])
    picked = torch.masked_select(x.to("tpu"), m.to("tpu"))
    assert picked.device.type == "tpu"
    assert torch.equal(picked.cpu(), torch.masked_select(x, m))


def test_program_limit_raises_a_clear_error(tmp_path):
    code = textwrap.dedent("""
        import torch, torch_tpu
        torch_tpu.set_eager_mode("strict")
        try:
            for i in range(1, 100):
                (torch.ones(i, device="tpu") * 3).sum().item()
            print("NO ERROR")
        except RuntimeError as e:
            print("RAISED", e)
        print("STILL USABLE", (torch.ones(4, device="tpu") * 3).sum().item())
    """)
    out = run_python(code, {"TORCH_TPU_MAX_PROGRAMS": "12", "TORCH_TPU_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert "RAISED" in out.stdout and "TORCH_TPU_MAX_PROGRAMS=12" in out.stdout
    assert "STILL USABLE 12.0" in out.stdout  # programs already compiled keep running


@cpu_plugin_only("XLA's CPU JIT maps three memory regions per program; an accelerator plugin's programs add "
                 "none, so the budget is never reached and the loop would compile 999 programs")
def test_memory_mapping_budget(tmp_path):
    # XLA's CPU JIT keeps every program's kernels mapped (3 mappings each) for the life of the
    # process; past vm.max_map_count it would abort inside XLA. Here the budget is lowered to
    # just above what the process already maps: whole fused graphs are no longer compiled
    # (their ops run through per-op programs), and new per-op programs end in a clear error.
    code = textwrap.dedent("""
        import os, torch, torch_tpu
        mapped = sum(1 for _ in open("/proc/self/maps"))
        # Half the budget is below what the process maps once the runtime is up; 90% leaves
        # room for a few dozen programs.
        os.environ["TORCH_TPU_MAX_MAPPINGS"] = str(int((mapped + 150) * 1.6))
        x = torch.ones(8, device="tpu")
        with torch_tpu.eager_mode("fused"):
            torch_tpu.metrics.reset()
            for _ in range(3):
                print("FUSED", ((x * 2 + 1).exp() - 3).sum().item())
            m = torch_tpu.metrics()
            print("WHOLE", m["fused_graphs_compiled"], "OP BY OP", m["fused_graphs_op_by_op"])
        torch_tpu.set_eager_mode("strict")
        try:
            for i in range(1, 1000):
                (torch.ones(i, device="tpu") * 3).sum().item()
            print("NO ERROR")
        except RuntimeError as e:
            print("RAISED", e)
        print("STILL USABLE", (torch.ones(4, device="tpu") * 3).sum().item())
    """)
    out = run_python(code, {"TORCH_TPU_CACHE_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    expected = float(((torch.ones(8) * 2 + 1).exp() - 3).sum())
    fused = [float(line.split()[1]) for line in out.stdout.splitlines() if line.startswith("FUSED")]
    assert len(fused) == 3 and all(abs(v - expected) < 1e-3 for v in fused), out.stdout
    assert "WHOLE 0 OP BY OP 3" in out.stdout, out.stdout
    assert "RAISED" in out.stdout and "vm.max_map_count" in out.stdout and "memory mappings" in out.stdout, out.stdout
    assert "STILL USABLE 12.0" in out.stdout, out.stdout


def test_out_of_memory_in_subprocess():
    code = textwrap.dedent("""
        import torch
        a = torch.empty(1024, device="tpu")          # 4 KiB: fits
        try:
            torch.empty(1 << 20, device="tpu")       # 4 MiB: over the limit
        except torch.OutOfMemoryError as e:
            assert "out of memory" in str(e) and "tpu:0" in str(e), str(e)
            print("OOM-RAISED")
        try:
            torch.ones(1 << 20, device="tpu") + 1
        except torch.OutOfMemoryError:
            print("OOM-COMPUTE")
        # Memory is fine again after the failure; device 1 has its own budget.
        b = torch.ones(1024, device="tpu")
        c = torch.ones(1024, device=f"tpu:{torch.tpu.device_count() - 1}")
        assert (b + 1).sum().item() == 2048 and c.sum().item() == 1024
        free, total = torch.tpu.mem_get_info()
        assert total == 100000, total
        print("OK")
    """)
    r = run_python(code, env={"TORCH_TPU_MEMORY_LIMIT": "100000"})
    assert r.returncode == 0, r.stderr
    assert "OOM-RAISED" in r.stdout and "OOM-COMPUTE" in r.stdout and "OK" in r.stdout


def test_bad_plugin_path_in_subprocess():
    code = textwrap.dedent("""
        import torch
        assert torch.tpu.is_available() is False
        assert torch.tpu.device_count() == 0
        try:
            torch.zeros(2, device="tpu")
        except Exception as e:
            print("RAISED", type(e).__name__, e)
        try:
            torch.tpu.manual_seed(1)
        except Exception as e:
            print("SEED", type(e).__name__, e)
        torch.manual_seed(0)  # seeds no tpu generator, and does not fail
        print("CPU", torch.ones(2).sum().item())
    """)
    r = run_python(code, env={"TORCH_TPU_PJRT_PLUGIN": "/nonexistent.so"})
    assert r.returncode == 0, r.stderr  # no crash, `import torch` still works
    assert "RAISED" in r.stdout and "/nonexistent.so" in r.stdout, r.stdout + r.stderr
    assert "Error" in r.stdout.split("RAISED", 1)[1].split()[0]
    assert "/nonexistent.so" in r.stdout.split("SEED", 1)[1].split("\n")[0]
    assert "CPU 2.0" in r.stdout


STRICT_CODE = textwrap.dedent("""
    import warnings
    import torch, torch_tpu
    x = torch.tensor([[2.0, 1.0], [1.0, 3.0]], device="tpu")
    print("PRINTED", x)  # printing needs no fallback, so strict mode allows it
    try:
        d = torch.linalg.ldl_factor(x)[0].sum()  # no lowering: a CPU fallback
        print("RESULT", d.cpu().item())
    except RuntimeError as e:
        print("RAISED", e)
""")


def test_strict_mode_makes_fallback_raise():
    r = run_python(STRICT_CODE, env={"TORCH_TPU_STRICT": "1"})
    assert r.returncode == 0, r.stderr
    assert "RAISED" in r.stdout and "TORCH_TPU_STRICT" in r.stdout, r.stdout + r.stderr
    assert "PRINTED tensor([[2., 1.]," in r.stdout
    r = run_python(STRICT_CODE, env={"TORCH_TPU_STRICT": "0"})
    assert r.returncode == 0, r.stderr
    assert "RESULT 5.0" in r.stdout, r.stdout + r.stderr  # LD of [[2, 1], [1, 3]]: 2 + 0.5 + 2.5


def test_fallback_warns_once_and_counts():
    import warnings

    import torch_tpu

    # An op with no lowering (LDL factorization): it runs through the counted CPU fallback.
    op = "aten::linalg_ldl_factor_ex.out"
    before = torch_tpu.metrics()["cpu_fallbacks_by_op"].get(op, 0)
    x = torch.tensor([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
    t = x.to("tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r1 = torch.linalg.ldl_factor(t)[0]
        r2 = torch.linalg.ldl_factor(t * 2)[0]
    torch.testing.assert_close(r1.cpu(), torch.linalg.ldl_factor(x)[0])
    torch.testing.assert_close(r2.cpu(), torch.linalg.ldl_factor(x * 2)[0])
    assert r1.device.type == "tpu"
    counts = torch_tpu.metrics()["cpu_fallbacks_by_op"]
    assert counts.get(op, 0) == before + 2
    assert torch_tpu.metrics()["cpu_fallbacks"] >= 2
    mine = [w for w in caught if "ldl_factor" in str(w.message)]
    assert len(mine) <= 1  # once per process: an earlier test may already have triggered it
    # A fresh process sees exactly one warning for two calls.
    code = textwrap.dedent("""
        import warnings, torch, torch_tpu
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t = torch.eye(3, device="tpu") * 2
            torch.linalg.ldl_factor(t); torch.linalg.ldl_factor(t + 1)
        print("WARNINGS", sum("ldl_factor" in str(w.message) for w in caught))
        print("COUNT", torch_tpu.metrics()["cpu_fallbacks_by_op"]["aten::linalg_ldl_factor_ex.out"])
    """)
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert "WARNINGS 1" in r.stdout and "COUNT 2" in r.stdout, r.stdout + r.stderr


def test_errors_leave_the_device_usable():
    a = torch.ones(3, device="tpu")
    for _ in range(2):
        with pytest.raises(RuntimeError):
            a + torch.ones(4, device="tpu")
    assert torch.equal((a + 1).cpu(), torch.full((3,), 2.0))
