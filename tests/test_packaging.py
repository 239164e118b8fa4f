"""Package-level behaviour: the version, the PyTorch release check, plugin discovery and the
`python -m torch_tpu` commands. (The wheel itself is tested in test_wheel.py.)"""
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

import torch_tpu
import torch_tpu.__main__
from torch_tpu import _compat, _plugin

from conftest import cpu_plugin_only, run_python

pytestmark = pytest.mark.mode_independent("packaging, the release check, plugin discovery and the CLI: no eager execution is checked")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "torch_tpu", *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **env))


def test_version_is_pyprojects_and_records_the_pytorch_it_was_built_for():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        version = re.search(r'^version = "([^"]+)"$', f.read(), re.M).group(1)
    assert torch_tpu.__version__ == version
    assert torch_tpu._built_for_torch == str(torch.__version__)


@pytest.mark.parametrize("built_for, running", [("2.13.0+cpu", "2.13.0+cpu"), ("2.13.0+cpu", "2.13.1"),
                                                ("2.13.0", "2.13.0a0+git1234567")])
def test_same_pytorch_release_passes(built_for, running):
    assert _compat.mismatch_message("0.1.0", built_for, running) is None
    _compat.check_torch("0.1.0", built_for, running)


@pytest.mark.parametrize("built_for, running", [("2.13.0+cpu", "2.11.0+cpu"), ("2.13.0", "2.14.1"),
                                                ("2.13.0", "3.13.0")])
def test_another_pytorch_release_is_refused_naming_both(built_for, running):
    with pytest.raises(ImportError) as e:
        _compat.check_torch("0.1.0", built_for, running)
    message = str(e.value)
    assert f"built for PyTorch {built_for}, but PyTorch {running} is installed" in message
    assert f'pip install "torch=={built_for[:4]}.*"' in message and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in message


def test_import_checks_the_pytorch_release_before_loading_the_extension():
    # A stand-in for the recorded build info that names another release than the running one.
    code = (
        "import sys, types, torch\n"
        "sys.modules['torch_tpu._build_info'] = types.SimpleNamespace(version='0.1.0', torch_version='2.99.0+cpu')\n"
        "try:\n"
        "    import torch_tpu\n"
        "except ImportError as e:\n"
        "    print('ERROR', e)\n"
        "print('C loaded', 'torch_tpu._C' in sys.modules)\n")
    out = run_python(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert out.returncode == 0, out.stderr
    assert f"ERROR torch_tpu 0.1.0 was built for PyTorch 2.99.0+cpu, but PyTorch {torch.__version__}" in out.stdout
    assert "C loaded False" in out.stdout


def _torch_requirement():
    sys.path.insert(0, os.path.join(ROOT, "tools", "packaging"))
    try:
        import torch_requirement
    finally:
        sys.path.pop(0)
    return torch_requirement


def test_pyproject_states_the_supported_releases_and_the_wheel_requires_the_one_it_was_built_for():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        pyproject = tomllib.load(f)
    settings = pyproject["tool"]["scikit-build"]["metadata"]["dependencies"]
    assert settings["supported-torch"] == ">=2.11,<2.14"
    assert pyproject["project"]["dynamic"] == ["dependencies"] and "dependencies" not in pyproject["project"]
    major, minor = _compat.release(torch.__version__)
    assert _torch_requirement().dynamic_metadata("dependencies", settings) == [f"torch=={major}.{minor}.*",
                                                                              "xla-cpu-pjrt"]


@pytest.mark.parametrize("installed, pinned", [("2.11.0+cu130", "torch==2.11.*"), ("2.12.1", "torch==2.12.*"),
                                               ("2.13.0+cpu", "torch==2.13.*"), ("2.13.0a0+git1234", "torch==2.13.*")])
def test_a_build_requires_the_release_it_is_built_against(installed, pinned):
    assert _torch_requirement().requirements(">=2.11,<2.14", installed, ["x"]) == [pinned, "x"]


@pytest.mark.parametrize("installed", ["2.10.0", "2.14.0", "3.0.0"])
def test_a_build_against_an_unsupported_release_stops_naming_both(installed):
    with pytest.raises(RuntimeError, match=rf"builds against PyTorch >=2.11,<2.14 .* but PyTorch {installed} is"):
        _torch_requirement().requirements(">=2.11,<2.14", installed, [])


# ---- plugin discovery, on stand-in packages and device nodes ----

@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """Installs stand-in plugin packages on request and points the device-node probes at tmp_path."""
    for name in ("libtpu", "jax_plugins"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(_plugin, "TPU_DEVICE_NODES", (str(tmp_path / "dev" / "accel[0-9]*"),))
    monkeypatch.setattr(_plugin, "GPU_DEVICE_NODES", (str(tmp_path / "dev" / "nvidia[0-9]*"),))
    monkeypatch.delenv("TORCH_TPU_PJRT_PLUGIN", raising=False)
    (tmp_path / "dev").mkdir()

    def install(what):
        if what in ("tpu", "gpu"):
            (tmp_path / "dev" / ("accel0" if what == "tpu" else "nvidia0")).touch()
            return None
        root = tmp_path / what
        if what == "libtpu":
            (root / "libtpu").mkdir(parents=True)
            so = root / "libtpu" / "libtpu.so"
            (root / "libtpu" / "__init__.py").write_text(f"def get_library_path():\n    return {str(so)!r}\n")
        else:  # jax_plugins.xla_cuda13 / xla_cuda12: a namespace package, as the real wheels ship it
            (root / "jax_plugins" / what).mkdir(parents=True)
            (root / "jax_plugins" / what / "__init__.py").touch()
            so = root / "jax_plugins" / what / "xla_cuda_plugin.so"
        so.touch()
        monkeypatch.syspath_prepend(str(root))
        return str(so)

    yield install
    for name in [m for m in sys.modules if m.split(".")[0] in ("libtpu", "jax_plugins")]:
        del sys.modules[name]


@pytest.mark.skipif(not _plugin.package_version("xla-cpu-pjrt"), reason="xla-cpu-pjrt is not installed (an accelerator image)")
def test_discovery_defaults_to_the_cpu_plugin(stand_ins):
    stand_ins("xla_cuda13")  # a CUDA plugin without a GPU is not chosen
    stand_ins("libtpu")  # nor libtpu without a TPU
    choice = _plugin.choose()
    assert choice.how == "CPU default" and choice.package == "xla-cpu-pjrt"
    assert choice.path.endswith("xla_cpu_pjrt.so") and os.path.exists(choice.path)


def test_discovery_finds_the_cuda_plugin_when_a_gpu_is_present(stand_ins):
    stand_ins("gpu")
    assert _plugin.choose().how == "CPU default"  # a GPU without a CUDA plugin package
    cuda12 = stand_ins("xla_cuda12")
    assert _plugin.choose() == (cuda12, "CUDA plugin", "jax-cuda12-pjrt")
    cuda13 = stand_ins("xla_cuda13")
    assert _plugin.choose() == (cuda13, "CUDA plugin", "jax-cuda13-pjrt")  # the newer CUDA first


def test_discovery_prefers_libtpu_on_a_tpu_and_the_variable_over_all(stand_ins, monkeypatch):
    stand_ins("gpu")
    cuda13 = stand_ins("xla_cuda13")
    libtpu = stand_ins("libtpu")
    assert _plugin.choose() == (cuda13, "CUDA plugin", "jax-cuda13-pjrt")  # libtpu without a TPU
    stand_ins("tpu")
    assert _plugin.choose() == (libtpu, "libtpu", "libtpu")
    monkeypatch.setenv("TORCH_TPU_PJRT_PLUGIN", "/opt/my_plugin.so")
    assert _plugin.choose() == ("/opt/my_plugin.so", "TORCH_TPU_PJRT_PLUGIN", "")


# ---- python -m torch_tpu ----

def _main(capsys, *argv):
    """Runs `python -m torch_tpu argv` in this process; returns (exit status, stdout)."""
    try:
        code = torch_tpu.__main__.main(list(argv))
    except SystemExit as e:  # argparse: --help and usage errors
        code = e.code
    return code, capsys.readouterr().out


def test_help_lists_the_commands(capsys):
    code, out = _main(capsys, "--help")
    assert code == 0
    for command in ("info", "metrics", "cache"):
        assert re.search(rf"^\s+{command}\s+\S", out, re.M), out
    assert "cache info" in out and "cache clear" in out
    code, out = _main(capsys, "cache", "--help")
    assert code == 0 and re.search(r"^\s+info\s+\S", out, re.M) and re.search(r"^\s+clear\s+\S", out, re.M)
    assert _main(capsys, "no-such-command")[0] == 2
    assert _main(capsys, "cache")[0] == 2  # an action is needed


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory):
    """A cache root holding the programs one small computation compiled."""
    cache_dir = str(tmp_path_factory.mktemp("filled") / "cache")
    run = run_python("import torch; (torch.ones(3, 5, device='tpu') * 7).cpu()", env={"TORCH_TPU_CACHE_DIR": cache_dir})
    assert run.returncode == 0, run.stderr
    entries = glob.glob(os.path.join(cache_dir, "*", "*.bin"))
    assert entries
    return cache_dir, entries


@cpu_plugin_only("expects the XLA CPU plugin chosen by default, with the two devices TORCH_TPU_NUM_DEVICES asks for")
def test_info_prints_what_a_bug_report_needs(filled_cache):
    cache_dir, entries = filled_cache
    out = _cli("info", TORCH_TPU_CACHE_DIR=cache_dir, TORCH_TPU_NUM_DEVICES="2", XLA_FLAGS="--xla_cpu_enable_fast_math=false",
               TORCH_TPU_EAGER_MODE="strict")
    assert out.returncode == 0, out.stderr
    fields = dict(re.match(r"(\S.*?):\s+(.*)", line).groups() for line in out.stdout.splitlines() if not line.startswith(" "))
    assert fields["torch_tpu"] == f"{torch_tpu.__version__} (built for PyTorch {torch.__version__})"
    assert fields["PyTorch"] == str(torch.__version__)
    assert fields["Python"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}.")
    assert fields["plugin"].endswith("xla_cpu_pjrt.so")
    assert fields["plugin chosen by"] == "CPU default"
    assert re.fullmatch(r"xla-cpu-pjrt \d+\.\d+\.\d+", fields["plugin package"])
    assert re.fullmatch(r"\d+\.\d+", fields["PJRT API version"])
    assert re.fullmatch(r"cpu \(platform version .+\)", fields["platform"]) and fields["devices"] == "2"
    assert re.search(r"^  tpu:1:\s+\S.*, [\d.]+ GiB memory, [\d.]+ GiB free$", out.stdout, re.M), out.stdout
    assert fields["eager mode"] == "strict"
    assert fields["matmul precision"].startswith("highest (")
    size = sum(os.path.getsize(p) for p in entries)
    assert fields["cache"] == f"{cache_dir} ({len(entries)} programs, {torch_tpu.__main__._size(size)})"
    folder = os.path.basename(os.path.dirname(entries[0]))
    assert re.search(rf"^  this plugin:\s+{folder} \({len(entries)} programs, ", out.stdout, re.M), out.stdout
    assert "TORCH_TPU_CACHE_DIR=" in fields["environment"] and "XLA_FLAGS=--xla_cpu_enable_fast_math=false" in fields["environment"]


def test_info_names_the_plugin_that_cannot_start(tmp_path):
    out = _cli("info", TORCH_TPU_PJRT_PLUGIN=str(tmp_path / "missing.so"))
    assert out.returncode == 0, out.stderr
    assert f"plugin:           {tmp_path / 'missing.so'}" in out.stdout
    assert "plugin chosen by: TORCH_TPU_PJRT_PLUGIN" in out.stdout
    assert re.search(r"^device:\s+cannot start: \w+", out.stdout, re.M), out.stdout
    assert "missing.so" in out.stdout.split("device:")[1]


def test_cache_info_and_clear(filled_cache, tmp_path, monkeypatch, capsys):
    cache_dir = str(tmp_path / "cache")
    shutil.copytree(filled_cache[0], cache_dir)
    entries = glob.glob(os.path.join(cache_dir, "*", "*.bin"))
    folder = os.path.basename(os.path.dirname(entries[0]))
    monkeypatch.setenv("TORCH_TPU_CACHE_DIR", cache_dir)
    code, out = _main(capsys, "cache", "info")
    assert code == 0 and out.startswith(f"{cache_dir}: {len(entries)} programs, ")
    assert re.search(rf"^  {re.escape(folder)}: {len(entries)} programs, ", out, re.M), out
    code, out = _main(capsys, "cache", "clear")
    assert code == 0 and out.strip() == f"removed {len(entries)} files from {cache_dir}"
    assert not glob.glob(os.path.join(cache_dir, "*", "*.bin"))
    assert f"{cache_dir}: 0 programs, 0 B" in _main(capsys, "cache", "info")[1]


def test_release_differences_are_named_per_release():
    sdpa_backward = "_scaled_dot_product_fused_attention_overrideable_backward"
    assert _compat.missing_meta_kernels("2.11.0+cu130") == [sdpa_backward, "bmm", "_transformer_encoder_layer_fwd"]
    assert _compat.missing_meta_kernels("2.12.0") == ["_transformer_encoder_layer_fwd"]
    assert _compat.missing_meta_kernels("2.13.0+cpu") == []
    # Every release has a Meta kernel for it now: PyTorch's own or torch_tpu's (_meta.py).
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{sdpa_backward}", "Meta")
