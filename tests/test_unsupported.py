"""What the backend says when it cannot do something, and what it says once at start-up:
an op with neither a tpu lowering nor a CPU kernel fails in one short line (sparse layouts:
test_sparse.py), and the platform notice is one informational line.
"""
import pytest
import torch

import torch_tpu
from conftest import run_python

TPU = "tpu"


def _short(message):
    return len(str(message).splitlines()) <= 2 and "Could not run" not in str(message)


def test_op_without_lowering_or_cpu_kernel_fails_in_one_line():
    x, grid = torch.randn(1, 1, 3, 3, device=TPU), torch.zeros(1, 2, 2, 2, device=TPU)
    with pytest.raises(NotImplementedError) as e:
        torch.ops.aten.cudnn_grid_sampler(x, grid)
    assert "aten::cudnn_grid_sampler has neither a tpu lowering nor a CPU kernel" in str(e.value)
    assert _short(e.value)


def test_platform_notice_is_one_informational_line():
    code = (
        "import threading, torch, torch_tpu\n"
        "torch.ones(2, device='tpu').cpu()\n"
        "t = threading.Thread(target=lambda: torch.ones(2, device=f'tpu:{torch.tpu.device_count() - 1}').cpu())\n"
        "t.start(); t.join()\n"
        "torch.tpu.get_device_name(); print(torch.tpu.get_device_properties(0).plugin_path)\n"
    )
    r = run_python(code, env={"TORCH_TPU_QUIET": ""})
    assert r.returncode == 0, r.stderr
    plugin = r.stdout.strip().splitlines()[-1]
    lines = [line for line in r.stderr.splitlines() if "torch_tpu" in line]
    platform = torch_tpu.platform()
    assert len(lines) == (platform != "tpu"), r.stderr  # on a TPU there is nothing to note
    if lines:
        assert lines[0].startswith("torch_tpu: note:") and f"PJRT {platform} platform" in lines[0] and plugin in lines[0]
    assert "Warning" not in r.stderr and ".py:" not in r.stderr
    quiet = run_python(code, env={"TORCH_TPU_QUIET": "1"})
    assert "torch_tpu: note" not in quiet.stderr
