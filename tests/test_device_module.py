"""torch.tpu, the device module: devices, RNG, memory statistics, streams and events."""
import subprocess
import sys
import time

import os

import pytest
import torch

import torch_tpu

from conftest import assert_same, cpu_plugin_only, needs_devices


def _last():
    return torch.tpu.device_count() - 1


def test_is_available_and_device_count():
    assert torch.tpu.is_available() is True
    assert torch.tpu.device_count() >= 1
    # Initialization is lazy: a fresh process is not initialized until it first uses the device.
    code = ("import torch, torch_tpu; before = torch.tpu.is_initialized(); torch.zeros(1, device='tpu'); "
            "print(before, torch.tpu.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


@cpu_plugin_only("only the CPU plugin makes as many devices as TORCH_TPU_NUM_DEVICES asks for")
def test_cpu_plugin_makes_the_devices_asked_for():
    assert torch.tpu.device_count() == int(os.environ["TORCH_TPU_NUM_DEVICES"]) == 2


@needs_devices(2)
def test_current_and_set_device():
    assert torch.tpu.current_device() == 0
    try:
        torch.tpu.set_device(1)
        assert torch.tpu.current_device() == 1
        assert torch.zeros(2, device="tpu").device == torch.device("tpu:1")
        torch.tpu.set_device("tpu:0")
        assert torch.tpu.current_device() == 0
        assert torch.empty(2, device="tpu").device == torch.device("tpu:0")
    finally:
        torch.tpu.set_device(0)


@needs_devices(2)
def test_device_context_manager():
    with torch.tpu.device(1):
        assert torch.tpu.current_device() == 1
        t = torch.ones(3, device="tpu")
        assert t.device.index == 1
    assert torch.tpu.current_device() == 0
    with torch.tpu.device("tpu:1"):
        assert torch.tpu.current_device() == 1
    with torch.tpu.device(None):
        assert torch.tpu.current_device() == 0
    assert_same(t * 2, torch.ones(3) * 2)


def _heavy_work(device):
    """Programs that take a while to run (results kept), in strict mode: one execution each."""
    x = torch.randn(384, 384, device=device)
    torch.tpu.synchronize(device)
    with torch_tpu.eager_mode("strict"):
        ys = [x @ x @ x for _ in range(6)]
    return x, ys


def test_synchronize_waits_for_results():
    from torch_tpu import _C

    for device, sync in (("tpu:0", None), ("tpu:0", 0), (f"tpu:{_last()}", f"tpu:{_last()}")):
        index = torch.device(device).index
        x, ys = _heavy_work(device)
        torch_tpu.metrics.reset()
        torch.tpu.synchronize(sync)
        # Nothing is left running, and no read of a result was needed to get there.
        assert _C._executions_in_flight(index) == 0, device
        assert torch_tpu.metrics()["host_syncs_by_cause"].get("synchronize", 0) >= 1
        assert "device_to_host" not in torch_tpu.metrics()["host_syncs_by_cause"]
    xc = x.cpu()
    assert_same(ys[-1], xc @ xc @ xc, atol=1e-2, rtol=1e-4)


@needs_devices(2)
def test_synchronize_without_a_device_is_the_current_devices():
    """As torch.cuda.synchronize: no argument means the current device. Another device's open
    fused graph is left alone (a rank thread syncing its own device must not cut the graph
    another rank thread is recording)."""
    with torch_tpu.eager_mode("fused"):
        x = torch.arange(6.0, device="tpu:1")
        y = (x * 2 + 1).relu()
        torch_tpu.metrics.reset()
        torch.tpu.synchronize()  # the current device is tpu:0
        assert torch_tpu.metrics()["fused_graphs_run"] == 0
        with torch.tpu.device(1):
            torch.tpu.synchronize()
        assert torch_tpu.metrics()["fused_graphs_run"] == 1
        z = y - 1
        torch.tpu.synchronize("tpu:1")
        assert torch_tpu.metrics()["fused_graphs_run"] == 2
        # Reading a value runs its own device's graph only.
        w = torch.ones(3, device="tpu:0") * 3
        v = z + 1
        assert_same(v, (torch.arange(6.0) * 2 + 1).relu())
        assert torch_tpu.metrics()["fused_graphs_run"] == 3
        assert_same(w, torch.full((3,), 3.0))
        assert torch_tpu.metrics()["fused_graphs_run"] == 4
    assert_same(z, (torch.arange(6.0) * 2 + 1).relu() - 1)


def test_synchronize_waits_for_programs_whose_outputs_were_dropped():
    # No storage holds these results, so only the record of executions can make
    # synchronize (and Event timing, and benchmarks) wait for them.
    from torch_tpu import _C

    x = torch.randn(384, 384, device="tpu")
    torch.tpu.synchronize()
    with torch_tpu.eager_mode("strict"):
        for _ in range(8):
            x @ x @ x
    torch.tpu.synchronize()
    assert _C._executions_in_flight(0) == 0


def test_manual_seed_reaches_the_device_generator():
    torch.tpu.manual_seed(1234)
    a = torch.rand(64, device="tpu")
    torch.tpu.manual_seed(1234)
    b = torch.rand(64, device="tpu")
    torch.tpu.manual_seed(4321)
    c = torch.rand(64, device="tpu")
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(a.cpu(), c.cpu())
    assert torch.tpu.initial_seed() == 4321
    # torch.manual_seed seeds every device generator too.
    torch.manual_seed(7)
    d = torch.rand(64, device="tpu")
    with torch.tpu.device(_last()):
        e = torch.rand(64, device="tpu")
    torch.manual_seed(7)
    assert torch.equal(d.cpu(), torch.rand(64, device="tpu").cpu())
    assert torch.equal(e.cpu(), torch.rand(64, device=f"tpu:{_last()}").cpu())


@needs_devices(2)
def test_manual_seed_all_and_per_device_streams():
    torch.tpu.manual_seed_all(99)
    a0 = torch.rand(16, device="tpu:0")
    a1 = torch.rand(16, device="tpu:1")
    torch.tpu.manual_seed_all(99)
    assert torch.equal(a0.cpu(), torch.rand(16, device="tpu:0").cpu())
    assert torch.equal(a1.cpu(), torch.rand(16, device="tpu:1").cpu())
    assert all(g.initial_seed() == 99 for g in torch.tpu.default_generators)


def test_rng_state_round_trip():
    torch.tpu.manual_seed(5)
    torch.rand(10, device="tpu")  # advance the offset
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.shape == (16,) and state.device.type == "cpu"
    seed = int.from_bytes(bytes(state[:8].tolist()), "little")
    offset = int.from_bytes(bytes(state[8:].tolist()), "little")
    assert seed == 5 and offset > 0
    x = torch.rand(100, device="tpu")
    torch.tpu.set_rng_state(state)
    y = torch.rand(100, device="tpu")
    assert torch.equal(x.cpu(), y.cpu())
    states = torch.tpu.get_rng_state_all()
    assert len(states) == torch.tpu.device_count()
    z = torch.randn(8, device="tpu")
    torch.tpu.set_rng_state_all(states)
    assert torch.equal(z.cpu(), torch.randn(8, device="tpu").cpu())
    with pytest.raises(RuntimeError):
        torch.tpu.set_rng_state(torch.zeros(5, dtype=torch.uint8))


def test_generator_object_on_device():
    g = torch.Generator(device="tpu")
    assert g.device.type == "tpu"
    g.manual_seed(42)
    a = torch.rand(32, generator=g, device="tpu")
    g.manual_seed(42)
    b = torch.rand(32, generator=g, device="tpu")
    c = torch.rand(32, generator=g, device="tpu")
    assert a.device.type == "tpu"
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(b.cpu(), c.cpu())
    # A private generator does not disturb the default one.
    torch.tpu.manual_seed(3)
    d = torch.rand(8, device="tpu")
    torch.tpu.manual_seed(3)
    torch.rand(8, generator=g, device="tpu")
    assert torch.equal(d.cpu(), torch.rand(8, device="tpu").cpu())
    assert len(g.get_state()) == 16
    # A CPU generator with a tpu tensor is an error, as on CUDA.
    with pytest.raises(RuntimeError):
        torch.rand(4, generator=torch.Generator(), device="tpu")


def test_memory_stats_follow_tensors():
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == base
    free0, total = torch.tpu.mem_get_info()
    assert total > 0 and 0 <= free0 <= total
    x = torch.empty(1024, 256, device="tpu")  # 1 MiB
    nbytes = x.numel() * x.element_size()
    assert torch.tpu.memory_allocated() == base + nbytes
    assert torch.tpu.memory_allocated(0) == base + nbytes
    assert torch.tpu.max_memory_allocated() >= base + nbytes
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == base + nbytes
    assert stats["num_device_alloc"] >= 1
    assert torch.tpu.memory_reserved() >= torch.tpu.memory_allocated()
    # Free memory: what the plugin says is in use where it keeps statistics (an accelerator),
    # else the tensors counted here (the CPU plugin, whose device memory is host memory).
    plugin_stats = torch_tpu._C._plugin_memory_stats(0)
    if plugin_stats is None:
        assert torch.tpu.mem_get_info()[0] == free0 - nbytes
    else:
        free, _ = torch.tpu.mem_get_info()
        assert free == max(total - torch_tpu._C._plugin_memory_stats(0)["bytes_in_use"], 0)
    # Another device's counters do not move.
    other = torch.tpu.memory_allocated(_last())
    del x
    assert torch.tpu.memory_allocated() == base
    assert torch.tpu.max_memory_allocated() >= base + nbytes
    if _last() > 0:
        assert torch.tpu.memory_allocated(_last()) == other
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == base
    if plugin_stats is None:
        assert torch.tpu.mem_get_info()[0] == free0
    torch.tpu.empty_cache()
    # torch.accelerator reads the same allocator.
    assert torch.accelerator.memory_allocated(0) == torch.tpu.memory_allocated(0)


def test_memory_of_computed_results_is_counted():
    base = torch.tpu.memory_allocated()
    a = torch.ones(1000, device="tpu")
    b = a * 3
    assert torch.tpu.memory_allocated() == base + 8000
    del a, b
    assert torch.tpu.memory_allocated() == base


def test_stream_and_event():
    s = torch.tpu.Stream()
    assert s.device.type == "tpu"
    assert torch.tpu.current_stream().device == torch.device("tpu:0")
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    with torch.tpu.stream(s):
        host_start = time.perf_counter()
        start.record()
        x = torch.ones(256, 256, device="tpu")
        y = x @ x
        time.sleep(0.05)
        end.record()
        host_ms = (time.perf_counter() - host_start) * 1000
    end.synchronize()
    assert end.query()
    # The events measure the time between the two records: the 50 ms sleep, within the host's span.
    assert 50 <= start.elapsed_time(end) <= host_ms
    assert end.elapsed_time(start) == pytest.approx(-start.elapsed_time(end))
    s.synchronize()
    assert s.query()
    assert_same(y, torch.ones(256, 256) @ torch.ones(256, 256))
    ev = s.record_event()
    ev.wait(torch.tpu.current_stream())
    ev.synchronize()
    assert ev.query()


def test_device_name_is_honest_and_properties():
    name = torch.tpu.get_device_name()
    assert name in ("tpu", "cuda", "rocm", "cpu")  # the PJRT platform, whatever runs
    assert torch_tpu.platform() == name
    props = torch.tpu.get_device_properties(0)
    assert props.name == name and props.platform == name
    assert os.path.exists(props.plugin_path) and props.plugin_path.endswith(".so")
    assert isinstance(props.pjrt_api_version, tuple) and props.pjrt_api_version[0] >= 0
    assert torch.tpu.get_device_properties(f"tpu:{_last()}").device_kind
    # The memory a device has: what the plugin reports where it keeps statistics, else the
    # host's physical memory (the CPU plugin's device memory is host memory).
    plugin_stats = torch_tpu._C._plugin_memory_stats(0)
    if plugin_stats is not None and plugin_stats["bytes_limit"] > 0:
        assert props.total_memory == plugin_stats["bytes_limit"]
    else:
        assert props.total_memory == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@cpu_plugin_only("the XLA CPU plugin names its platform 'cpu' and keeps no memory statistics")
def test_device_name_on_the_cpu_plugin():
    assert torch.tpu.get_device_name() == "cpu" and torch_tpu.platform() == "cpu"
    props = torch.tpu.get_device_properties(0)
    assert "xla_cpu_pjrt" in props.plugin_path
    assert torch_tpu._C._plugin_memory_stats(0) is None


def test_accelerator_integration():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert torch.accelerator.device_count() == torch.tpu.device_count()
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(_last())
    try:
        assert torch.tpu.current_device() == _last()
    finally:
        torch.accelerator.set_device_index(0)
    torch.accelerator.synchronize()


def test_tensor_methods_generated():
    c = torch.arange(6.0).reshape(2, 3)
    t = c.tpu()
    assert t.is_tpu and not c.is_tpu
    assert t.device == torch.device("tpu:0")
    assert c.tpu(_last()).device == torch.device("tpu", _last())
    assert_same(t, c)
    m = torch.nn.Linear(3, 2).tpu()
    assert m.weight.is_tpu
    assert torch.tensor([1.0]).untyped_storage().tpu().device.type == "tpu"


def test_amp_dtypes_and_default_device():
    assert torch.bfloat16 in torch.tpu.get_amp_supported_dtype()
    with torch.device("tpu"):
        t = torch.ones(2)
    assert t.device.type == "tpu"
    assert_same(t, torch.ones(2))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_autocast_policies(dtype):
    torch.manual_seed(0)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    ta, tb = a.to("tpu"), b.to("tpu")
    with torch.autocast("tpu", dtype=dtype):
        assert torch.is_autocast_enabled("tpu")
        mm = ta @ tb  # lower precision, as on CUDA
        lin = torch.nn.functional.linear(ta, tb.t())
        sm = torch.softmax(mm, dim=-1)  # f32 for numerically sensitive ops
        added = mm + ta[:, :4]  # no policy: ordinary promotion
    assert mm.dtype == dtype and lin.dtype == dtype
    assert sm.dtype == torch.float32 and added.dtype == torch.float32
    tol = 2e-2 if dtype == torch.bfloat16 else 2e-3
    torch.testing.assert_close(mm.float().cpu(), a @ b, atol=tol * 8, rtol=tol)
    torch.testing.assert_close(sm.cpu(), torch.softmax((a @ b).to(dtype).float(), dim=-1), atol=tol, rtol=tol)
    with torch.autocast("tpu", dtype=dtype, enabled=False):
        assert (ta @ tb).dtype == torch.float32


def test_forked_child_refuses_the_device():
    from conftest import run_python

    code = """
import os, torch
x = torch.ones(2, device="tpu")
pid = os.fork()
if pid == 0:
    try:
        torch.zeros(2, device="tpu")
        print("CHILD-NO-ERROR", flush=True)
    except RuntimeError as e:
        print("CHILD-RAISED", e, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("PARENT", (x + 1).sum().item())
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert "CHILD-RAISED" in r.stdout and "forked subprocess" in r.stdout, r.stdout
    assert "PARENT 4.0" in r.stdout
