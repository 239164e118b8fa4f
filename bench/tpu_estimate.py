"""torch-tpu's programs against JAX jit's, both compiled by libtpu for a TPU topology (no TPU needed).

Prints libtpu's cost model (GFLOP, HBM GB, modelled ms, relayout copies) per workload for torch-tpu strict
(summed over the programs of one step), fused (the step's programs once its graph compiled: the
last of four runs) and torch.compile, each in a process of its own, and JAX jit of the same computation. JAX's
module is lowered here (jax.jit(f).lower(...).as_text()) and compiled for the topology by the same worker
as torch-tpu's (torch_tpu.tpu_target.compile_module). These are the compiler's estimates, not measurements.

    python bench/tpu_estimate.py [--topology v5e:2x2]
"""

import argparse
import json
import subprocess
import sys

import torch

import torch_tpu
from torch_tpu import tpu_target


def _sum(rows):
    t = tpu_target.totals(rows)
    return {"gflop": t["gflop"], "gb": t["hbm_mb"] / 1e3, "ms": t["modelled_ms"], "unmod": t["unmodelled"],
            "copies": t["copies"], "errors": t["errors"], "programs": t["programs"]}


def torch_rows(fn, args, mode):
    tpu_target.report(wait=True, clear=True)
    dev = [a.to("tpu") for a in args]
    torch_tpu.synchronize() if hasattr(torch_tpu, "synchronize") else None
    tpu_target.report(wait=True, clear=True)  # the host-to-device copies are not the step
    if mode == "compiled":
        torch._dynamo.reset()
        out = torch.compile(fn, backend="tpu")(*dev)
    else:
        with torch_tpu.eager_mode(mode):
            out = fn(*dev)
    out.cpu()
    return tpu_target.report(wait=True, clear=True)


def jax_row(jfn, args, topology):
    import jax
    import jax.numpy as jnp
    jargs = [jnp.asarray(a.float().numpy()).astype(jnp.bfloat16 if a.dtype == torch.bfloat16 else jnp.float32)
             for a in args]
    text = jax.jit(jfn).lower(*jargs).as_text()
    return [tpu_target.compile_module(text, topology, name="jax")]


def workloads():
    import jax.numpy as jnp
    import jax
    g = torch.Generator().manual_seed(0)
    x, w1, w2 = (torch.randn(s, generator=g) for s in [(512, 1024), (1024, 4096), (4096, 1024)])

    def mlp(x, w1, w2):
        return torch.nn.functional.gelu(x @ w1) @ w2

    def jmlp(x, w1, w2):
        return jax.nn.gelu(x @ w1, approximate=False) @ w2
    a, b = (torch.randn(2048, 2048, generator=g).bfloat16() for _ in range(2))
    yield "MLP 512x1024x4096 f32", mlp, jmlp, [x, w1, w2]
    yield "matmul 2048^3 bf16", (lambda a, b: a @ b), (lambda a, b: jnp.matmul(a, b)), [a, b]


def one_variant(topology, index, variant):
    """In its own process: only programs new to a process are compiled (and reported)."""
    tpu_target.enable(topology)
    name, fn, jfn, args = list(workloads())[index]
    if variant == "fused":  # a fused graph compiles once it has been seen TORCH_TPU_FUSED_COMPILE_AFTER times
        for _ in range(4):
            rows = torch_rows(fn, args, variant)
    else:
        rows = jax_row(jfn, args, topology) if variant == "jax" else torch_rows(fn, args, variant)
    print("RESULT", json.dumps(_sum(rows)))


def run_variant(topology, index, variant):
    out = subprocess.run([sys.executable, __file__, "--topology", topology, "--one", str(index), variant],
                         capture_output=True, text=True, timeout=600)
    lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(lines[-1][7:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--topology", default="v5e:2x2")
    p.add_argument("--one", nargs=2)
    a = p.parse_args()
    topology = a.topology
    if a.one:
        return one_variant(topology, int(a.one[0]), a.one[1])
    print(f"libtpu cost model for {topology}: compiler estimates, not measurements")
    print(f"{'workload':<24} {'variant':<9} {'progs':>5} {'GFLOP':>8} {'HBM GB':>8} {'model ms':>9} {'unmod':>5} "
          f"{'copies':>6} {'GB/JAX':>7} {'ms/JAX':>7}")
    for index, (name, fn, jfn, args) in enumerate(workloads()):
        jax_t = run_variant(topology, index, "jax")
        for variant in ("strict", "compiled", "jax"):  # fused: its graph program is not reported yet (see one_variant)
            t = jax_t if variant == "jax" else run_variant(topology, index, variant)
            gb_ratio = t["gb"] / jax_t["gb"] if jax_t["gb"] else float("nan")
            ms_ratio = t["ms"] / jax_t["ms"] if jax_t["ms"] else float("nan")
            print(f"{name:<24} {variant:<9} {t['programs']:>5} {t['gflop']:8.2f} {t['gb']:8.4f} {t['ms']:9.4f} "
                  f"{t['unmod']:>5} {t['copies']:>6} {gb_ratio:7.2f} {ms_ratio:7.2f}"
                  + (f"  ({t['errors']} errors)" if t["errors"] else ""))


if __name__ == "__main__":
    main()
