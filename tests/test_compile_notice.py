"""A user waiting on compilation is told once what is compiling; TORCH_TPU_QUIET=1 silences it."""
import os
import subprocess
import sys

SCRIPT = """
import torch, torch_tpu
x = torch.randn(64, 64, device="tpu")
for shape in (8, 16, 32):  # several programs: still one notice
    torch.tanh(x[:shape] @ x[:, :shape]).sum().cpu()
print("ok", torch_tpu.metrics(wait=True)["programs_compiled"])
"""


def run(tmp_path, **env):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path), TORCH_TPU_COMPILE_NOTICE_S="0", **env)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok"), out.stdout
    assert int(out.stdout.split()[1]) > 1  # programs were compiled in this process
    return out.stderr


def test_notice_names_the_op_once(tmp_path):
    err = run(tmp_path, TORCH_TPU_QUIET="0")
    lines = [line for line in err.splitlines() if "compiling device programs" in line]
    assert len(lines) == 1, err
    assert "aten::" in lines[0] and str(tmp_path) in lines[0], lines[0]


def test_quiet_silences_it(tmp_path):
    err = run(tmp_path, TORCH_TPU_QUIET="1")
    assert "compiling device programs" not in err, err
