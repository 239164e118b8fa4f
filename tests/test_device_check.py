"""tools/device_check.py (`make device-check`) keeps working here, on the CPU plugin, so that it
works on the accelerator machine the day one is at hand: its plan names files and -k expressions
that exist, it refuses the CPU plugin without --allow-cpu, and with it it installs carried wheels,
runs tests in their own processes and writes the report (counts, failures, skip reasons)."""
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tools", "device_check.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import device_check  # noqa: E402

# The script runs its own processes in the default mode: once per suite run is enough.
pytestmark = pytest.mark.skipif(os.environ.get("TORCH_TPU_EAGER_MODE", "fused") != "fused",
                                reason="checks a script, not an eager mode: runs in the suite's fused (default) pass only")


def _script(*args, env=None, timeout=600):
    full = dict(os.environ, **(env or {}))
    full.pop("OUT", None)
    return subprocess.run([sys.executable, SCRIPT, *args], env=full, capture_output=True, text=True, timeout=timeout)


def test_the_plan_names_what_exists():
    r = _script("--list")
    assert r.returncode == 0, r.stderr
    for path, expr, _ in device_check.SELECTION:
        assert os.path.exists(os.path.join(ROOT, path)), path
        assert f"test: {path}" in r.stdout
    assert "bench: bench/accelerator.py" in r.stdout
    # Each -k expression still selects tests (a renamed test would silently drop out of the check).
    for path, expr, _ in device_check.SELECTION:
        if expr:
            c = subprocess.run([sys.executable, "-m", "pytest", path, "--collect-only", "-q", "-k", expr],
                               cwd=ROOT, capture_output=True, text=True, timeout=300)
            assert c.returncode == 0 and "::" in c.stdout, (path, expr, c.stdout[-2000:])


def test_refuses_the_cpu_plugin_without_allow_cpu(tmp_path):
    r = _script("--no-bench", "--wheels=", "--report", str(tmp_path / "r.md"))  # not a local .whl/
    assert r.returncode == 2, r.stdout + r.stderr
    assert "XLA CPU plugin" in r.stderr and "--allow-cpu" in r.stderr
    assert not (tmp_path / "r.md").exists()


def _wheel(folder):
    """A minimal wheel of one module, to check that carried wheels are installed and found first."""
    path = folder / "devcheck_probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("devcheck_probe.py", "VALUE = 42\n")
        z.writestr("devcheck_probe-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: devcheck-probe\nVersion: 1.0\n")
        z.writestr("devcheck_probe-1.0.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("devcheck_probe-1.0.dist-info/RECORD", "")
    return path


def test_end_to_end_with_allow_cpu(tmp_path):
    wheels = tmp_path / "whl"
    wheels.mkdir()
    _wheel(wheels)
    tests = tmp_path / "test_probe.py"
    tests.write_text(textwrap.dedent("""
        import pytest, torch
        import devcheck_probe
        def test_passes():
            assert devcheck_probe.VALUE == 42 and torch.ones(2, device="tpu").sum().item() == 2
        def test_fails():
            assert 1 + 1 == 3, "the reason it failed"
        def test_skips():
            pytest.skip("a reason to skip")
        def test_not_selected():
            pass
    """))
    bench = tmp_path / "bench.py"
    bench.write_text("import sys\nprint('| setup | ms |')\nprint('| tpu |', sys.argv[1:], '|')\n")
    report = tmp_path / "report.md"
    r = _script("--allow-cpu", "--bench", str(bench), "--bench-args", "--setups 'tpu compiled'", "--wheels",
                str(wheels), "--report", str(report), "--select", f"{tests}::-knot not_selected")
    assert r.returncode == 1, r.stdout + r.stderr  # a test failed
    text = report.read_text()
    assert "- platform: **cpu**" in text and "## python -m torch_tpu info" in text and "plugin chosen by" in text
    assert f"| {tests} | not not_selected | 1 | 1 | 0 | 1 |" in text, text
    assert "### " in text and "the reason it failed" in text
    assert "1 x " in text and "a reason to skip" in text
    assert "exit status 0 after" in text and "| tpu | ['--setups', 'tpu compiled'] |" in text
    assert "devcheck_probe-1.0-py3-none-any.whl" in r.stdout
