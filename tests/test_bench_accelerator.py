"""bench/accelerator.py --small on the CPU plugin, so the script that `make device-check` runs on an
accelerator keeps working where none is: every tpu setup (and JAX jit, when installed) runs in its
own process, times every workload and computes the same losses."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_JAX = importlib.util.find_spec("jax") is not None


@pytest.mark.mode_independent("runs once per suite: its processes choose their own eager modes")
def test_accelerator_small(tmp_path):
    setups = ["tpu strict", "tpu fused", "tpu compiled"] + (["jax jit"] if HAVE_JAX else [])
    out, raw = tmp_path / "table.md", tmp_path / "raw.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "accelerator.py"), "--small", "--rounds", "1",
                           "--iters", "2", "--warmup", "1", "--setups", ",".join(setups), "--out", str(out),
                           "--json", str(raw)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = out.read_text()
    assert "DIFFER" not in table
    results = {r["setup"]: r for r in json.loads(raw.read_text())["results"]}
    assert list(results) == setups
    for setup in setups:
        r = results[setup]
        assert "error" not in r, r
        assert all(v > 0 for v in r["median"].values()), r
        assert r["first_forward_s"] > 0 and r["first_train_s"] > 0
        assert f"| {setup} | " in table
        # The same model, weights and data everywhere: the first forward's loss and two training
        # steps' losses agree (the table flags a difference; this checks the check).
        assert r["loss_forward"] == pytest.approx(results[setups[0]]["loss_forward"], rel=2e-3)
        assert r["loss_train"] == pytest.approx(results[setups[0]]["loss_train"], rel=2e-3)
        # A training step changes the weights: the second step's loss is another.
        assert r["loss_train"][0] != r["loss_train"][1]
    for setup in setups[:3]:
        assert results[setup]["metrics"]["programs_compiled"] > 0
        # Compile times come from TORCH_TPU_DUMP_DIR's files: every program compiled is there.
        stats = results[setup]["compile_ms"]
        assert sum(c["n"] for c in stats.values()) == results[setup]["metrics"]["programs_compiled"], stats
        assert all(0 < c["median"] <= c["p90"] <= c["max"] for c in stats.values()), stats
    assert "compiled" in results["tpu compiled"]["compile_ms"] and "op" in results["tpu strict"]["compile_ms"]
