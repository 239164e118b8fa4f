"""The wheel, installed as a user installs it: into a fresh virtual environment that has only
PyTorch and the CPU plugin, with no source tree on the path.

`make wheel-test` (part of `make test`) builds the wheel and a base environment with torch and
xla-cpu-pjrt once (build/wheel-base), then runs this file; the fresh environment sees the
base's packages through a .pth file, so each run installs only the wheel, offline."""
import os
import re
import subprocess
import sys
import zipfile

import pytest

WHEEL = os.environ.get("TORCH_TPU_TEST_WHEEL", "")
BASE = os.environ.get("TORCH_TPU_TEST_WHEEL_BASE", "")

pytestmark = pytest.mark.skipif(not (WHEEL and BASE), reason="run by `make wheel-test` (it builds the wheel)")

# Trains an MLP for a few steps on tpu and on the CPU from the same initial weights.
SMOKE = r"""
import sys
import torch  # alone: the torch.backends entry point autoloads torch_tpu
assert "torch_tpu" in sys.modules, "import torch did not autoload torch_tpu"
import torch_tpu
print("torch_tpu", torch_tpu.__version__, torch_tpu.__file__)

def train(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(32, 8).to(device), torch.randn(32, 2).to(device)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]

tpu_losses, tpu_params = train("tpu")
cpu_losses, cpu_params = train("cpu")
torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
for a, b in zip(tpu_params, cpu_params):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
assert tpu_losses[-1] < tpu_losses[0], tpu_losses
print("trained on", torch.tpu.get_device_name(), "losses", tpu_losses)
"""


def _version():
    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml")) as f:
        return re.search(r'^version = "([^"]+)"$', f.read(), re.M).group(1)


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory):
    """A new virtual environment with the wheel installed on top of the base (torch + plugin)."""
    env_dir = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = str(env_dir / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    base_site = subprocess.run([os.path.join(BASE, "bin", "python"), "-c",
                                "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "_wheel_test_base.pth"), "w") as f:
        f.write(base_site + "\n")
    env = _clean_env()
    # Offline: the dependencies (torch==2.13.*, xla-cpu-pjrt) must be satisfied by the base.
    install = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-cache-dir", WHEEL],
                             env=env, capture_output=True, text=True)
    assert install.returncode == 0, install.stdout + install.stderr
    return python, site, env_dir


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "TORCH_TPU_", "PIP_REQUIRE"))}
    env.update(TORCH_TPU_QUIET="1", **extra)
    return env


def _run(python, args, cwd, **extra_env):
    return subprocess.run([python, *args], cwd=cwd, env=_clean_env(**extra_env), capture_output=True, text=True,
                          timeout=300)


def test_wheel_holds_the_extension_and_declares_its_dependencies():
    assert os.path.basename(WHEEL).startswith(f"torch_tpu-{_version()}-cp311-")
    with zipfile.ZipFile(WHEEL) as whl:
        names = whl.namelist()
        metadata = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        build_info = whl.read("torch_tpu/_build_info.py").decode()
        entry_points = whl.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert any(re.fullmatch(r"torch_tpu/_C\.cpython-311-.*\.so", n) for n in names), names
    assert "torch_tpu/__init__.py" in names and "torch_tpu/__main__.py" in names
    assert not any("__pycache__" in n or n.startswith(("tests/", "csrc/")) for n in names)
    assert "Requires-Dist: torch==2.13.*" in metadata and "Requires-Dist: xla-cpu-pjrt" in metadata
    assert f'version = "{_version()}"' in build_info and 'torch_version = "2.13.' in build_info
    assert "[torch.backends]" in entry_points


def test_import_torch_autoloads_and_trains_like_the_cpu(fresh_env, tmp_path):
    python, site, _ = fresh_env
    out = _run(python, ["-c", SMOKE], cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"torch_tpu {_version()} {site}" in out.stdout  # the installed wheel, not the source tree
    assert "trained on cpu" in out.stdout


def test_info_from_the_installed_wheel(fresh_env, tmp_path):
    python, _, _ = fresh_env
    out = _run(python, ["-m", "torch_tpu", "info"], cwd=tmp_path, TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"torch_tpu:        {_version()} (built for PyTorch 2.13." in out.stdout
    assert "plugin chosen by: CPU default\nplugin package:   xla-cpu-pjrt 0.0.1\n" in out.stdout


def test_another_pytorch_release_fails_at_import_with_both_versions(fresh_env, tmp_path):
    python, site, _ = fresh_env
    build_info = os.path.join(site, "torch_tpu", "_build_info.py")
    with open(build_info) as f:
        original = f.read()
    try:
        # Pretend the extension was compiled for another PyTorch release than the installed one.
        with open(build_info, "w") as f:
            f.write(re.sub(r'torch_version = "[^"]+"', 'torch_version = "2.99.0+cpu"', original))
        for code in ("import torch", "import torch_tpu"):
            out = _run(python, ["-c", code], cwd=tmp_path,
                       **({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"} if code == "import torch_tpu" else {}))
            assert out.returncode == 1, out.stdout + out.stderr
            assert "ImportError: torch_tpu" in out.stderr
            assert "was built for PyTorch 2.99.0+cpu, but PyTorch 2.13." in out.stderr
            assert 'pip install "torch==2.99.*"' in out.stderr
            assert "undefined symbol" not in out.stderr and "Segmentation" not in out.stderr
    finally:
        with open(build_info, "w") as f:
            f.write(original)
