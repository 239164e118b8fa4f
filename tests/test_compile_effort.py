"""Per-op programs compiled at lowered optimisation effort (csrc/runtime/compile_effort.h): only
programs exact at any effort (data movement, integer arithmetic), in fused mode by default, with
the same values as a full compile."""
import json
import os
import subprocess
import sys

CHILD = (
    "import torch, torch_tpu, json\n"
    "torch_tpu.metrics.reset()\n"
    "x = torch.arange(24.0).reshape(4, 6).to('tpu')\n"
    "ids = torch.arange(5).to('tpu')\n"
    "outs = {}\n"
    "for n in range(1, 4):\n"  # a growing sequence: data movement of new shapes
    "    ids = torch.cat([ids, (ids[-1:] * 7 + 3) % 11])\n"
    "    outs[f'ids{n}'] = ids.cpu().tolist()\n"
    "outs['t'] = x.t().contiguous().cpu().tolist()\n"
    "outs['exp'] = (x / 7).exp().tanh().cpu().tolist()\n"
    "outs['sum'] = x.sum(1).cpu().tolist()\n"
    "m = torch_tpu.metrics(wait=True)\n"
    "print(json.dumps({'outs': outs, 'compiled': m['programs_compiled'], 'quick': m['programs_compiled_quick']}))\n"
)


def _run(tmp_path, mode, **extra):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path / mode / str(sorted(extra.items()))),
               TORCH_TPU_EAGER_MODE=mode, **extra)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_fused_mode_compiles_exact_per_op_programs_quickly_with_the_same_values(tmp_path):
    fused = _run(tmp_path, "fused")
    full = _run(tmp_path, "fused", TORCH_TPU_QUICK_OP_COMPILE="0")
    assert 0 < fused["quick"] < fused["compiled"]  # exp, tanh and sum are float arithmetic: full effort
    assert full["quick"] == 0
    assert fused["outs"] == full["outs"]


def test_strict_mode_compiles_at_full_effort_unless_asked(tmp_path):
    strict = _run(tmp_path, "strict")
    asked = _run(tmp_path, "strict", TORCH_TPU_QUICK_OP_COMPILE="1")
    assert strict["quick"] == 0
    assert 0 < asked["quick"] < asked["compiled"]
    assert asked["outs"] == strict["outs"]
