"""Shared setup for the Python tests: two CPU-plugin devices, quiet notices, and helpers
that compare a tpu result with PyTorch's CPU result on the same inputs.

Tests are honest on any plugin. The platform they are checked against is
TORCH_TPU_TEST_PLATFORM, by default the one the loaded plugin reports (tpu, cuda, cpu).
A check true only of the XLA CPU plugin carries `@cpu_plugin_only("why")`, and skips, saying
so, on any other platform; one that needs several devices carries `@needs_devices(n)` (only
the CPU plugin makes devices on request, with TORCH_TPU_NUM_DEVICES). Running the suite with
TORCH_TPU_TEST_PLATFORM=cuda on the CPU plugin shows which tests would skip on a GPU."""
import os
import subprocess
import sys
import time

os.environ.setdefault("TORCH_TPU_NUM_DEVICES", "2")
os.environ.setdefault("TORCH_TPU_QUIET", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch_tpu  # noqa: E402,F401  (autoload already imported it; explicit for clarity)


def assert_same(tpu_result, cpu_result, *, atol=None, rtol=None, check_stride=False):
    """Asserts that a tpu result equals the CPU result: values, dtype, shape (and strides)."""
    if isinstance(cpu_result, (tuple, list)):
        assert isinstance(tpu_result, (tuple, list)) and len(tpu_result) == len(cpu_result)
        for a, b in zip(tpu_result, cpu_result):
            assert_same(a, b, atol=atol, rtol=rtol, check_stride=check_stride)
        return
    if not isinstance(cpu_result, torch.Tensor):
        assert tpu_result == cpu_result
        return
    assert isinstance(tpu_result, torch.Tensor)
    assert tpu_result.device.type == "tpu", f"expected a tpu tensor, got {tpu_result.device}"
    assert tpu_result.dtype == cpu_result.dtype
    assert tpu_result.shape == cpu_result.shape
    if check_stride:
        assert tpu_result.stride() == cpu_result.stride()
        assert tpu_result.storage_offset() == cpu_result.storage_offset()
    torch.testing.assert_close(tpu_result.cpu(), cpu_result, atol=atol, rtol=rtol, equal_nan=True)


@pytest.fixture
def compare():
    """compare(fn, *cpu_args): runs fn on CPU inputs and on their tpu copies, and checks
    that the results (and the inputs, which fn may mutate) agree. Returns the tpu result."""

    def run(fn, *args, check_stride=False, atol=None, rtol=None):
        cpu_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        tpu_args = [a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args]
        expected = fn(*cpu_args)
        got = fn(*tpu_args)
        assert_same(got, expected, atol=atol, rtol=rtol, check_stride=check_stride)
        for t, c in zip(tpu_args, cpu_args):
            if isinstance(c, torch.Tensor):
                assert_same(t, c, atol=atol, rtol=rtol)
        return got

    return run


def run_python(code, env=None, timeout=120):
    """Runs `code` in a fresh interpreter with extra environment variables; returns the
    CompletedProcess (stdout/stderr as text)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def tpu():
    return torch.device("tpu:0")


_platform = None


def platform_under_test():
    """The platform the suite checks against: TORCH_TPU_TEST_PLATFORM, else the plugin's own."""
    global _platform
    if _platform is None:
        _platform = os.environ.get("TORCH_TPU_TEST_PLATFORM") or torch_tpu.platform()
    return _platform


def on_cpu_plugin():
    return platform_under_test() == "cpu"


def cpu_plugin_only(reason):
    """Marks a test whose check is true only of the XLA CPU plugin (`reason` says why)."""
    return pytest.mark.cpu_plugin_only(reason=reason)


def needs_devices(n):
    """Marks a test that needs `n` tpu devices (the CPU plugin makes them on request)."""
    return pytest.mark.needs_devices(n)


def last_device():
    """The last tpu device: tpu:1 with the CPU plugin's two, tpu:0 on one accelerator chip."""
    return torch.device("tpu", torch.tpu.device_count() - 1)


def pytest_configure(config):
    config.addinivalue_line("markers", "cpu_plugin_only(reason): checks what only the XLA CPU plugin does")
    config.addinivalue_line("markers", "needs_devices(n): needs n tpu devices")
    # `make test` runs the suite twice, in strict and in fused eager mode, each pass on
    # pytest-xdist workers. A test whose behaviour does not depend on the eager mode (it runs
    # its own processes with their own modes, or checks no execution at all) carries
    # mode_independent and runs in the first pass only; the Makefile deselects it in the second.
    config.addinivalue_line("markers", "mode_independent(reason): runs in one eager-mode pass only (why: reason)")
    # Every xdist worker must collect the same tests: the rotating OpInfo part is chosen once, by
    # the controller, from the day it started (a run that crosses midnight UTC keeps its part).
    if not hasattr(config, "workerinput"):
        os.environ.setdefault("TORCH_TPU_OPINFO_DAY", str(int(time.time() // 86400)))


# Files whose tests run longest (build/test-times-*.json of a `make test`): run first, so that
# the xdist workers do not end the pass waiting on one of them. Order within a file is kept.
LONG_FILES_FIRST = ("test_tpu_compile.py", "test_diffusers.py", "test_cache.py", "test_tensor_parallel.py",
                    "test_compile.py", "test_distributed.py")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        name = item.nodeid.split("::")[0].rsplit("/", 1)[-1]
        return LONG_FILES_FIRST.index(name) if name in LONG_FILES_FIRST else len(LONG_FILES_FIRST)
    items.sort(key=rank)  # stable
    for item in items:  # a marker without its reason is a mistake, not a silent choice
        for name in ("mode_independent",):
            mark = item.get_closest_marker(name)
            if mark is not None and not (mark.args or mark.kwargs.get("reason")):
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name} needs a reason")


def pytest_runtest_setup(item):
    # Decided when the test runs, not at collection: asking the platform starts the runtime.
    mark = item.get_closest_marker("cpu_plugin_only")
    if mark is not None and not on_cpu_plugin():
        pytest.skip(f"true only of the XLA CPU plugin, and this run checks the {platform_under_test()} platform: "
                    f"{mark.kwargs.get('reason') or mark.args[0]}")
    mark = item.get_closest_marker("needs_devices")
    if mark is not None and torch.tpu.device_count() < mark.args[0]:
        pytest.skip(f"needs {mark.args[0]} tpu devices, the plugin has {torch.tpu.device_count()} "
                    "(TORCH_TPU_NUM_DEVICES makes more on the CPU plugin only)")


def pytest_terminal_summary(terminalreporter):
    reports = [r for rs in terminalreporter.stats.values() for r in rs
               if isinstance(r, pytest.TestReport) and r.when == "call"]
    ran = [r for r in reports if "test_opinfo.py::test_opinfo[" in r.nodeid]
    opinfo = sys.modules.get("test_opinfo")
    if opinfo is None and ran:  # under xdist only the workers imported it
        sys.path.insert(0, os.path.dirname(__file__))
        import test_opinfo as opinfo
    if opinfo is not None:
        # which part of the OpInfo database this run checked, and what it cost, against its
        # budget of about 5 minutes per eager mode on 2 cores (summed over the workers)
        terminalreporter.write_line(f"{opinfo.PART_LINE}: {len(opinfo.ENTRIES)} entries, "
                                    f"{len({r.nodeid for r in ran})} run in {sum(r.duration for r in ran):.0f} s")
    _write_file_times(terminalreporter, reports)


def _write_file_times(terminalreporter, reports):
    """Each test file's time (the sum of its tests' durations, over all workers), printed for the
    slowest files and written to $TORCH_TPU_TEST_TIMES (JSON) when set: `make test` keeps one per pass."""
    by_file = {}
    for r in reports:
        by_file[r.nodeid.split("::")[0]] = by_file.get(r.nodeid.split("::")[0], 0.0) + r.duration
    if not by_file:
        return
    slowest = sorted(by_file.items(), key=lambda kv: -kv[1])
    terminalreporter.write_line("test time by file (s, summed over workers): " +
                                ", ".join(f"{f.split('/')[-1]} {t:.0f}" for f, t in slowest[:12]))
    path = os.environ.get("TORCH_TPU_TEST_TIMES")
    if path:
        import json
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"files": dict(slowest),
                       "tests": {r.nodeid: round(r.duration, 2) for r in sorted(reports, key=lambda r: -r.duration)}},
                      f, indent=1)


class native:
    """Asserts that the block ran without a CPU fallback (other than the `allow`ed ops)."""

    def __init__(self, allow=()):
        self.allow = set(allow)

    def __enter__(self):
        torch_tpu.metrics.reset()

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            fallbacks = set(torch_tpu.metrics()["cpu_fallbacks_by_op"]) - self.allow
            assert not fallbacks, f"ran on the CPU: {fallbacks}"
