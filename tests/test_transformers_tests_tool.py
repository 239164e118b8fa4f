"""tools/transformers_tests.py runs Transformers' tests from the checkout's root, as they expect
(issue #35: test_can_load_with_global_device_set relaunches pytest with a path relative to it),
with the device spec importable there, and leaves the checkout as it found it."""
import pytest
import subprocess
import sys
import textwrap
from pathlib import Path

pytestmark = pytest.mark.mode_independent("a tool that runs Transformers' tests in processes of its own")

REPO = Path(__file__).resolve().parent.parent


def test_runs_from_the_checkout_root(tmp_path):
    src = tmp_path / "transformers"
    family = src / "tests" / "models" / "tiny"
    family.mkdir(parents=True)
    (family / "test_tiny.py").write_text(textwrap.dedent("""
        import os, subprocess, sys

        def test_relative_paths_resolve_from_the_root():
            assert os.path.isfile("tests/models/tiny/test_tiny.py"), os.getcwd()

        def test_the_device_spec_is_importable_by_its_bare_name():
            spec = os.environ.get("TRANSFORMERS_TEST_DEVICE_SPEC")
            if spec is None:  # the CPU run
                return
            assert os.sep not in spec and os.path.isfile(spec)
            import importlib
            assert importlib.import_module(spec[:-3]).DEVICE_NAME == "tpu"

        def test_a_relaunch_with_a_relative_path():
            r = subprocess.run([sys.executable, "-m", "pytest", "tests/models/tiny/test_tiny.py", "-q",
                                "-k", "relative_paths", "-p", "no:cacheprovider"], capture_output=True, text=True)
            assert r.returncode == 0, r.stdout + r.stderr
    """))
    keep = tmp_path / "logs"
    r = subprocess.run([sys.executable, str(REPO / "tools" / "transformers_tests.py"), "--src", str(src),
                        "--models", "tiny", "--keep", str(keep)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for device in ("tpu", "cpu"):
        line = next(l for l in r.stdout.splitlines() if l.startswith(f"tiny         {device}"))
        assert "collected     3  passed     3  failed     0" in line, r.stdout
        assert (keep / f"tiny-{device}.xml").is_file()
    assert sorted(p.name for p in src.iterdir()) == ["tests"]  # the spec shim is gone
