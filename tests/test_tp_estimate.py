"""bench/tp_estimate.py's JAX side: a tiny tensor-parallel Llama under shard_map compiles for v5e:2x2
(four chips, no TPU needed) with one all-reduce per row-parallel projection, whose operand bytes the
bench's HLO parser counts. Skipped without JAX or libtpu."""
import importlib.util
import json
import os

import pytest

from conftest import run_python

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("libtpu") is None or importlib.util.find_spec("jax") is None,
                                 reason="needs libtpu and JAX"),
              pytest.mark.mode_independent("the JAX side of a bench, compiled for a TPU topology")]

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench")

CODE = r"""
import json, sys
sys.path.insert(0, %r)
import tp_estimate
cfg = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=1, num_attention_heads=4,
           num_key_value_heads=4, rms_norm_eps=1e-6, rope_theta=10000.0)
print("RESULT " + json.dumps(tp_estimate.jax_programs("v5e:2x2", cfg, batch=2, prompt=8)))
""" % BENCH


def test_jax_tensor_parallel_llama_compiles_for_four_chips():
    r = run_python(CODE, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads([x for x in r.stdout.splitlines() if x.startswith("RESULT ")][-1][7:])
    for step, tokens in (("prefill", 2 * 8), ("decode", 2 * 1)):
        t = out[step]
        assert t["gflop"] > 0 and t["hbm_mb"] > 0 and t["ms"] > 0, t
        # o_proj and down_proj: each sums [tokens, hidden] f32 over the chips.
        assert t["collectives"] == 2 and t["coll_mb"] == pytest.approx(2 * tokens * 256 * 4 / 1e6), t


def test_collective_bytes_parser():
    import sys
    sys.path.insert(0, BENCH)
    import tp_estimate
    hlo = """ENTRY %main {
  %p0 = f32[4,1024]{1,0} parameter(0)
  %p1 = bf16[2,8]{1,0} parameter(1)
  %fusion = f32[4,1024]{1,0} fusion(%p0), kind=kLoop
  %ar = f32[4,1024]{1,0} all-reduce(%fusion), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=%add
  %ags = (bf16[2,8]{1,0}, bf16[8,8]{1,0}) all-gather-start(%p1), dimensions={0}
  %agd = bf16[8,8]{1,0} all-gather-done(%ags)
  ROOT %t = (f32[4,1024]{1,0}) tuple(%ar)
}"""
    assert tp_estimate.collective_bytes(hlo) == (2, 4 * 1024 * 4 + 2 * 8 * 2)
