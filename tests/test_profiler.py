"""torch.profiler on tpu (torch_tpu/profiler.py, csrc/aten/profiler.cpp, docs/profiling.md):
a small training step profiled in strict, fused and compiled mode. From the exported Chrome
trace: every program execution appears once on its device's row, linked to the op that ran it;
compiles, transfers and host syncs appear as often as torch_tpu.metrics() counts them;
key_averages() credits device time to the ops that ran programs."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.profiler import profile, record_function

import torch_tpu
from torch_tpu import profiler as tpu_profiler

from conftest import needs_devices


@pytest.fixture(autouse=True)
def restore_mode():
    before = torch_tpu.get_eager_mode()
    yield
    torch_tpu.set_eager_mode(before)


def _model(width):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU(), torch.nn.Linear(width, 3))


def _step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def _profiled(run, tmp_path):
    """Profiles run() (its last step inside record_function("train_step")); returns the trace,
    the profiler and the metrics counted over the same span."""
    torch.tpu.synchronize()
    torch_tpu.metrics.reset()
    with profile(activities=tpu_profiler.activities()) as prof:
        run()
        torch_tpu.metrics(wait=True)  # background compiles finish while recording
    metrics = torch_tpu.metrics(wait=True)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        return json.load(f), prof, metrics


def _check_trace(trace, prof, m):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    programs = tpu_profiler.tpu_events(trace, "program")
    # Each execution once, as a kernel on the row of its device (pid = device index).
    assert len(programs) == m["executions"] > 0
    assert all(e["cat"] == "kernel" and e["pid"] == 0 and e["args"]["tpu device"] == 0 for e in programs)
    assert all(e["args"].get("cache key") for e in programs)
    assert all(e["dur"] >= 0 for e in programs)
    # Linked to a host op: its correlation id is a CPU op's (Kineto's flow arrow joins them).
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e["args"]}
    for e in programs:
        assert e["args"]["External id"] in ops, e
    flows = {e["id"] for e in trace["traceEvents"] if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    assert {e["args"]["External id"] for e in programs} <= flows
    # Compiles: one event per compile and per cache hit that the counters count.
    compiles = [e["args"]["cache"] for e in tpu_profiler.tpu_events(trace, "compile")
                if not e["name"].startswith("tpu compile wait")]
    assert compiles.count("miss") == m["programs_compiled"]
    assert compiles.count("hit (disk)") == m["disk_cache_hits"]
    assert compiles.count("hit (memory)") == m["compile_cache_hits"]
    # Transfers with their bytes, syncs with their causes: as the counters count them.
    transfers = tpu_profiler.tpu_events(trace, "transfer")
    h2d = sum(int(e["args"]["bytes"]) for e in transfers if e["name"].endswith("host to device"))
    d2h = sum(int(e["args"]["bytes"]) for e in transfers if e["name"].endswith("device to host"))
    assert (h2d, d2h) == (m["host_to_device_bytes"], m["device_to_host_bytes"])
    syncs = [e["args"]["cause"] for e in tpu_profiler.tpu_events(trace, "sync") if "cause" in e["args"]]
    assert len(syncs) == m["host_syncs"]
    assert {c: syncs.count(c) for c in set(syncs)} == m["host_syncs_by_cause"]
    assert "item" in syncs
    # The record_function range holds the step's programs' host ops ...
    (step,) = [e for e in events if e["name"] == "train_step" and e.get("cat") == "user_annotation"]
    inside = [e for e in programs if step["ts"] <= ops[e["args"]["External id"]]["ts"] <= step["ts"] + step["dur"]]
    assert inside
    # ... and is drawn on the device row over the programs it caused.
    (drawn,) = [e for e in events if e["name"] == "train_step" and e.get("cat") == "gpu_user_annotation"]
    assert drawn["pid"] == 0 and drawn["args"]["External id"] == step["args"]["External id"]
    covered = [e for e in programs if drawn["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= drawn["ts"] + drawn["dur"] + 1e-3]
    assert len(covered) >= len(inside)
    # key_averages: the ops that ran programs have device time.
    timed = {a.key for a in prof.key_averages() if a.self_device_time_total > 0}
    assert {ops[e["args"]["External id"]]["name"] for e in programs} <= timed
    return programs


def _eager_run(mode, width, steps):
    def run():
        torch_tpu.set_eager_mode(mode)
        model = _model(width).to("tpu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(16, 8).to("tpu"), torch.randint(0, 3, (16,)).to("tpu")
        for i in range(steps):
            with record_function("train_step") if i == steps - 1 else _nothing():
                _step(model, opt, x, y).item()
    return run


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_strict_step_programs_compiles_transfers_and_syncs(tmp_path):
    trace, prof, m = _profiled(_eager_run("strict", 24, 2), tmp_path)
    programs = _check_trace(trace, prof, m)
    names = {e["name"] for e in programs}
    assert "aten::addmm" in names and not any(n.startswith("fused graph") for n in names)
    assert m["programs_compiled"] + m["disk_cache_hits"] > 0  # width 24: shapes no other test compiled


def test_fused_step_runs_graphs_linked_to_the_sync(tmp_path):
    trace, prof, m = _profiled(_eager_run("fused", 20, 4), tmp_path)
    programs = _check_trace(trace, prof, m)
    flushes = tpu_profiler.tpu_events(trace, "flush")
    assert len(flushes) == m["fused_graphs_run"] > 0
    assert all("cause" in e["args"] for e in flushes)
    fused = [e for e in programs if e["name"].startswith("fused graph of")]
    if m["fused_graphs_run"] > m["fused_graphs_op_by_op"]:  # the repeated step ran as one program
        assert fused and all(int(e["args"]["fused ops"]) > 1 for e in fused)


def test_compiled_step_is_one_program_per_graph(tmp_path):
    torch_tpu.set_eager_mode("strict")
    model = _model(28).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8).to("tpu"), torch.randint(0, 3, (16,)).to("tpu")
    step = torch.compile(_step, backend="tpu")
    step(model, opt, x, y).item()  # dynamo traces outside the profile

    def run():
        with record_function("train_step"):
            step(model, opt, x, y).item()
    trace, prof, m = _profiled(run, tmp_path)
    programs = _check_trace(trace, prof, m)
    assert any(e["name"].startswith("compiled graph") for e in programs)


def test_profiler_off_records_nothing():
    torch_tpu._C._profiler_events_start()
    events = torch_tpu._C._profiler_events_stop()
    assert events == []
    a = torch.randn(4, device="tpu")
    (a + 1).cpu()
    assert not torch_tpu._C._profiler_recording()
    with profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:  # no device activity: no session
        assert not torch_tpu._C._profiler_recording()
        (a * 3).cpu()
    assert all(e.device_type != torch.autograd.DeviceType.PrivateUse1 for e in prof.events())


def test_plugin_without_device_profiler_says_so():
    torch.randn(1, device="tpu").cpu()
    assert tpu_profiler.device_profiler() is False  # the XLA CPU plugin exports no profiler extension


def test_schedule_and_tensorboard_handler(tmp_path):
    torch_tpu.set_eager_mode("strict")
    a = torch.randn(8, 8, device="tpu")
    with profile(activities=tpu_profiler.activities(), schedule=torch.profiler.schedule(wait=1, warmup=1, active=1),
                 on_trace_ready=torch.profiler.tensorboard_trace_handler(str(tmp_path))) as prof:
        for _ in range(3):
            (a @ a).sum().item()
            prof.step()
    (written,) = [p for p in os.listdir(tmp_path) if p.endswith(".pt.trace.json")]
    with open(tmp_path / written) as f:
        trace = json.load(f)
    names = [e["name"] for e in tpu_profiler.tpu_events(trace, "program")]
    assert names.count("aten::mm") == 1  # the active step's only


def test_summary_rejects_what_is_no_trace():
    with pytest.raises(ValueError, match="Chrome trace"):
        tpu_profiler.summarize({"not": "a trace"})


@needs_devices(2)
def test_collective_in_threads_is_a_runtime_event(tmp_path):
    import torch.distributed as dist
    from torch_tpu.distributed import run_in_threads

    def rank_fn(rank, world):
        t = torch.full((4,), float(rank), device=torch.device("tpu", rank))
        dist.all_reduce(t)
        return t.cpu()

    with profile(activities=tpu_profiler.activities()) as prof:
        run_in_threads(rank_fn, 2)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        trace = json.load(f)
    collectives = tpu_profiler.tpu_events(trace, "collective")
    assert sorted(e["args"]["rank"] for e in collectives) == ["0 of 2", "1 of 2"]
    assert all(e["args"]["operand elements"] == "4" and e["args"]["group"] for e in collectives)


def test_cli_profile_writes_a_trace_and_prints_tables(tmp_path):
    script = tmp_path / "step.py"
    script.write_text(textwrap.dedent("""
        import torch
        a = torch.randn(8, 8, device="tpu")
        print("sum", (a @ a).sum().item())
    """))
    out = tmp_path / "t.json"
    env = dict(os.environ, TORCH_TPU_QUIET="0")
    r = subprocess.run([sys.executable, "-m", "torch_tpu", "profile", "--out", str(out), str(script)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "top programs by device time" in r.stdout and "host syncs" in r.stdout
    assert "item" in r.stdout and "aten::mm" in r.stdout
    assert "this plugin has no device profiler; program-level events only" in r.stderr
    assert tpu_profiler.tpu_events(str(out), "program")


def _varint(v):
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _int(field, v):
    return _varint(field << 3) + _varint(v)


def _msg(field, body):
    body = body.encode() if isinstance(body, str) else body
    return _varint(field << 3 | 2) + _varint(len(body)) + body


def test_xspace_events_from_a_constructed_xspace():
    """The PJRT profiler extension's output (tensorflow.profiler.XSpace) decodes into timed
    device ops: line timestamp_ns + offset_ps, named by the plane's event metadata (display
    name first); aggregated events (num_occurrences) are left out; damage raises ValueError."""
    fusion = _int(1, 7) + _msg(2, "fusion.3") + _msg(4, "%fusion.3 = f32[8] add(...)")
    dot = _int(1, 9) + _msg(2, "dot.1")
    events = (_msg(4, _int(1, 7) + _int(2, 2_000_000) + _int(3, 3_000_000))      # 2 us in, 3 us long
              + _msg(4, _int(1, 9) + _int(2, 6_000_000) + _int(3, 1_500))          # 6 us in, 1.5 ns
              + _msg(4, _int(1, 9) + _int(5, 4) + _int(3, 9_000_000)))             # aggregated: left out
    line = _int(1, 1) + _msg(2, "XLA Ops") + _int(3, 1_700_000_000_000_000_000) + events
    plane = (_int(1, 3) + _msg(2, "/device:TPU:0") + _msg(3, line)
             + _msg(4, _int(1, 7) + _msg(2, fusion)) + _msg(4, _int(1, 9) + _msg(2, dot)))
    space = _msg(1, plane) + _msg(4, "host0")
    t0 = 1_700_000_000_000_000_000
    assert torch_tpu._C._profiler_xspace_events(space) == [
        ("/device:TPU:0", "XLA Ops", "%fusion.3 = f32[8] add(...)", t0 + 2000, t0 + 5000),
        ("/device:TPU:0", "XLA Ops", "dot.1", t0 + 6000, t0 + 6001),
    ]
    assert torch_tpu._C._profiler_xspace_events(b"") == []
    with pytest.raises(ValueError, match="XSpace"):
        torch_tpu._C._profiler_xspace_events(space[:-3])


@needs_devices(2)
def test_each_device_has_its_own_row(tmp_path):
    torch_tpu.set_eager_mode("strict")
    a, b = torch.randn(4, device="tpu:1"), torch.randn(4, device="tpu:0")
    with profile(activities=tpu_profiler.activities()) as prof:
        (a + 1).cpu()
        (b * 2).cpu()
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    with open(tmp_path / "t.json") as f:
        trace = json.load(f)
    assert sorted((e["name"], e["pid"]) for e in tpu_profiler.tpu_events(trace, "program")) == [
        ("aten::add.Tensor", 1), ("aten::mul.Tensor", 0)]
    rows = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "process_name" and e["pid"] in (0, 1)}
    assert rows == {0: "TPU 0", 1: "TPU 1"}
