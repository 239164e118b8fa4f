"""The persistent compilation cache and the recompilation counters."""
import glob
import json
import os
import subprocess
import sys

import torch

import torch_tpu

CHILD = (
    "import torch, torch_tpu, json\n"
    "x = torch.arange(12.0).reshape(3, 4).to('tpu')\n"
    "y = ((x * 3 - 1).relu() @ x.t()).softmax(-1)\n"
    "print(json.dumps({'sum': y.sum().item(), 'm': {k: v for k, v in torch_tpu.metrics(wait=True).items() "
    "if not isinstance(v, dict)}}))\n"
)


def _run(cache_dir, **extra):
    import json

    # Per-op programs (strict) make the number of cache entries predictable in every suite mode.
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache_dir), TORCH_TPU_EAGER_MODE="strict", **extra)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_starts_warm(tmp_path):
    cold = _run(tmp_path)
    warm = _run(tmp_path)
    assert cold["m"]["programs_compiled"] > 0 and cold["m"]["disk_cache_hits"] == 0
    assert warm["m"]["programs_compiled"] == 0
    assert warm["m"]["disk_cache_hits"] == cold["m"]["programs_compiled"]
    assert warm["sum"] == cold["sum"]
    files = glob.glob(str(tmp_path / "*" / "*.bin"))
    assert len(files) == cold["m"]["programs_compiled"]
    platform = torch_tpu.platform()
    assert all(os.path.basename(os.path.dirname(f)).startswith(f"{platform}-") for f in files)  # per-plugin folder


def test_compiler_flags_from_the_environment_key_the_disk_cache(tmp_path):
    # XLA_FLAGS changes what the plugin compiles: an executable built under other flags is
    # not served from disk, and each setting finds its own entries again.
    flag = "--xla_cpu_enable_fast_min_max=false"
    plain = _run(tmp_path, XLA_FLAGS="")
    flagged = _run(tmp_path, XLA_FLAGS=flag)
    assert flagged["m"]["disk_cache_hits"] == 0
    assert flagged["m"]["programs_compiled"] == plain["m"]["programs_compiled"] > 0
    assert _run(tmp_path, XLA_FLAGS=flag)["m"]["programs_compiled"] == 0
    assert _run(tmp_path, XLA_FLAGS="")["m"]["programs_compiled"] == 0
    assert flagged["sum"] == plain["sum"]


def test_corrupt_and_truncated_entries_are_recompiled(tmp_path):
    cold = _run(tmp_path)
    files = sorted(glob.glob(str(tmp_path / "*" / "*.bin")))
    with open(files[0], "r+b") as f:  # truncate one entry
        f.truncate(40)
    with open(files[1], "r+b") as f:  # flip bytes in another
        f.seek(100)
        f.write(b"\x00garbage\x00")
    again = _run(tmp_path)
    assert again["sum"] == cold["sum"]
    assert again["m"]["programs_compiled"] == 2 and again["m"]["disk_cache_hits"] == cold["m"]["programs_compiled"] - 2
    third = _run(tmp_path)  # the damaged entries were rewritten
    assert third["m"]["programs_compiled"] == 0


def test_concurrent_processes_share_the_cache(tmp_path):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path), TORCH_TPU_EAGER_MODE="strict")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate()[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert not glob.glob(str(tmp_path / "*" / "*.tmp.*"))  # no temp files left behind
    assert _run(tmp_path)["m"]["programs_compiled"] == 0, outs


def test_many_processes_compiling_the_same_programs_into_one_folder(tmp_path):
    # A folder shared by many processes (a pod's hosts): each publishes its entries by rename, so
    # whichever writer wins, every entry is whole, and a later process loads every program.
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path), TORCH_TPU_EAGER_MODE="strict")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len({o["sum"] for o in outs}) == 1
    assert not glob.glob(str(tmp_path / "*" / "*.tmp.*"))
    entries = glob.glob(str(tmp_path / "*" / "*.bin"))
    programs = max(o["m"]["programs_compiled"] + o["m"]["disk_cache_hits"] for o in outs)
    assert len(entries) == programs
    warm = _run(tmp_path)
    assert warm["m"]["programs_compiled"] == 0 and warm["m"]["disk_cache_hits"] == programs
    assert warm["sum"] == outs[0]["sum"]


# 40 programs of distinct shapes: more than one eviction period (a scan every 32 writes).
MANY = (
    "import torch, torch_tpu, json\n"
    "for n in range(1, 41): (torch.ones(n, device='tpu') * 2).cpu()\n"
    "print(json.dumps({'m': {'programs_compiled': torch_tpu.metrics(wait=True)['programs_compiled']}}))\n"
)


def test_size_limit_evicts_and_clear_empties(tmp_path):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path), TORCH_TPU_EAGER_MODE="strict")

    def run(**extra):
        out = subprocess.run([sys.executable, "-c", MANY], env=dict(env, **extra), capture_output=True, text=True,
                             check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])["m"]["programs_compiled"]

    def files():
        return glob.glob(str(tmp_path / "*" / "*.bin"))

    compiled = run(TORCH_TPU_CACHE_MAX_BYTES="1")
    assert compiled >= 40
    # The limit holds after every write (each entry is larger than 1 byte: none is kept).
    assert not files(), (len(files()), compiled)
    # Without a limit every program stays, and a limit above the total evicts nothing.
    for f in files():
        os.remove(f)
    run()
    assert len(files()) == compiled
    assert run(TORCH_TPU_CACHE_MAX_BYTES=str(1 << 30)) == 0 and len(files()) == compiled
    code = "import torch_tpu; print(torch_tpu.cache.clear())"
    removed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(removed.stdout.strip()) == compiled
    assert not files()


def test_recompilation_is_counted_with_its_reason():
    # Shapes no other test uses: a signature seen before in this process is no recompilation.
    torch_tpu.metrics.reset()
    a = torch.ones(13, 37, device="tpu")
    (a * 2).cpu()
    (torch.ones(14, 37, device="tpu") * 2).cpu()
    m = torch_tpu.metrics(wait=True)
    assert m["recompilations"] >= 1
    reasons = [r for r in m["recompile_reasons"] if r.startswith("aten::mul.Tensor") and "[14, 37]" in r]
    assert reasons and "argument 'self'" in reasons[0] and "[13, 37]" in reasons[0], m["recompile_reasons"]


def _report_values(text):
    """{counter: value} of the top-level lines of a metrics report."""
    values = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and not line.startswith(" ") and value.strip():
            try:
                values[name] = float(value)
            except ValueError:  # a named value: the slowest op, the grouped-matmul path
                values[name] = value.strip()
    return values


def test_metrics_cli_prints_counters():
    # A fresh process: every counter is printed, and each is zero.
    out = subprocess.run([sys.executable, "-m", "torch_tpu", "metrics"], capture_output=True, text=True, check=True)
    values = _report_values(out.stdout)
    flat = {k for k, v in torch_tpu.metrics(wait=True).items() if not isinstance(v, (dict, str))}
    assert flat <= set(values), flat - set(values)
    assert {k: values[k] for k in flat if values[k]} == {}


def test_metrics_cli_runs_a_script_and_reports_its_counters(tmp_path):
    script = tmp_path / "work.py"
    script.write_text(
        "import json, sys, torch, torch_tpu\n"
        "with torch_tpu.eager_mode('strict'):\n"
        "    x = torch.ones(3, device='tpu')\n"
        "    y = x + 1\n"
        "with torch_tpu.eager_mode('fused'):\n"
        "    z = (y * 2).sum()\n"
        "print('result', z.item(), sys.argv[1:])\n"
        "print('inside', json.dumps({k: v for k, v in torch_tpu.metrics(wait=True).items() if isinstance(v, (int, float))}))\n"
        "sys.exit(int(sys.argv[1]))\n")
    out = subprocess.run([sys.executable, "-m", "torch_tpu", "metrics", str(script), "3"],
                         capture_output=True, text=True)
    assert out.returncode == 3  # the script's exit status
    assert "result 12.0 ['3']" in out.stdout
    report = out.stdout.split("torch_tpu metrics after")[1]
    assert "ops_dispatched_by_mode:" in report
    by_mode = dict(line.split(":") for line in report.split("ops_dispatched_by_mode:")[1].splitlines()[1:4])
    assert {k.strip(): int(v) for k, v in by_mode.items()} == {"debug": 0, "strict": 2, "fused": 2}
    # The report prints the values the script's own process counted.
    inside = json.loads(out.stdout.split("inside ")[1].splitlines()[0])
    values = _report_values(report)
    assert inside["ops_dispatched"] == 4 and inside["executions"] > 0 and inside["host_syncs"] > 0
    assert {k: values.get(k) for k in inside if not k.endswith("_s")} == \
        {k: v for k, v in inside.items() if not k.endswith("_s")}  # seconds (compile, disk load) not compared


def test_ops_are_counted_per_eager_mode():
    x = torch.ones(4, device="tpu")
    torch.tpu.synchronize()
    torch_tpu.metrics.reset()
    for mode, n in (("debug", 1), ("strict", 2), ("fused", 3)):
        with torch_tpu.eager_mode(mode):
            y = x
            for _ in range(n):
                y = y * 2
            y.cpu()
    m = torch_tpu.metrics(wait=True)
    assert m["ops_dispatched_by_mode"] == {"debug": 1, "strict": 2, "fused": 3}
    assert m["ops_dispatched"] == 6


def test_arange_with_new_bounds_is_no_recompilation():
    # torch.arange(a, b) hands its out= kernel an empty tensor to resize: resizing is not a
    # signature miss, and bounds giving the same length reuse one program (a decode loop's
    # cache_position = arange(past, past + 1) used to count a "recompilation" per token).
    torch.arange(100, 104, device="tpu").cpu()
    torch_tpu.metrics.reset()
    for start in range(5):
        assert torch.equal(torch.arange(start, start + 4, device="tpu").cpu(), torch.arange(start, start + 4))
    m = torch_tpu.metrics(wait=True)
    assert m["signature_cache_misses"] == 0 and m["recompilations"] == 0, m
