"""Tensor-parallel Llama, torch-tpu against JAX, both compiled by libtpu for one TPU topology (issue 34).

The model is bench/tp_decode.py's (Transformers Llama: 2 layers, hidden 1024, intermediate 2816, 16/4
heads, vocab 32000, f32, batch 4, a 32-token prompt), split over every chip of the topology the same way
on both sides: q/k/v/gate/up column-parallel, o/down row-parallel (one all-reduce each), the rest
replicated. Two workloads: the forward over the prompt (prefill: logits of every position, the KV cache,
the greedy next token) and one decode step (one token per sequence after a 32-position cache).

- torch-tpu: DTensor's plan (tp_decode.plan) in rank threads, one device each, its all-reduces on the
  devices; every program is compiled for the topology by torch_tpu.tpu_target, and one step's figures
  are each program's weighed by how often the step ran it (tpu_target.runs()): a rank's share of the
  per-rank programs plus each collective program (one run covers every rank). Modes: strict (one
  program per op), fused (the fused graphs, TORCH_TPU_FUSED_COMPILE_AFTER=1, measured after two
  warm-up steps).
- JAX: the same model (bench/jax_llama.py llama_tp_step) under shard_map over a mesh of the topology's
  devices (jax.experimental.topologies.get_topology_desc), jit(...).lower(...).compile() ahead of time.

Columns, per chip and step: programs run, GFLOP, HBM MB (bytes accessed), modelled ms (the modelled part
of optimal_seconds; `unmod` counts instructions the model could not estimate), collectives run and the
bytes of their operands (all-reduce, all-gather, reduce-scatter, all-to-all in the optimised HLO), and
the ratios to JAX. These are libtpu's cost-model estimates, not measurements: no TPU runs anything.

    python bench/tp_estimate.py [--topology v5e:2x2] [--modes strict,fused] [--kv-heads 8] [--programs]
                                [--json out.json]
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH, PROMPT = 4, 32

# Element sizes of HLO types, for collective operand bytes.
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
          "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")


def _shape_bytes(shape):
    """Bytes of an HLO shape text: 'f32[4,1024]{1,0:T(8,128)}' or a tuple of them."""
    total = 0
    for elem, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", shape):
        if elem in _BYTES:
            n = 1
            for d in dims.split(","):
                n *= int(d) if d else 1
            total += _BYTES[elem] * n
    return total


def collective_bytes(hlo):
    """(collectives, bytes of their operands) in an optimised HLO module's text: all-reduce, all-gather,
    reduce-scatter and all-to-all, synchronous or the -start of an asynchronous pair."""
    shapes, count, total = {}, 0, 0
    line_re = re.compile(r"\s*(?:ROOT )?%?([\w.\-]+) = (.*?) ([a-z\-]+)\((.*?)\)(?:, |$)")
    for line in hlo.splitlines():
        m = line_re.match(line)
        if not m:
            continue
        name, shape, op, operands = m.groups()
        shapes[name] = shape
        base = op[:-6] if op.endswith("-start") else op
        if base in COLLECTIVES:
            count += 1
            names = [o.strip().lstrip("%") for o in operands.split(",") if o.strip()]
            # Optimised HLO prints operands by name only (a parameter's shape is its definition's).
            total += sum(_shape_bytes(shapes.get(n, "")) for n in names)
    return count, total


def llama_config(kv_heads=None):
    sys.path.insert(0, HERE)
    from tp_decode import CONFIG
    cfg = dict(CONFIG, max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=10000.0)
    cfg.pop("attn_implementation")
    if kv_heads:
        cfg["num_key_value_heads"] = kv_heads
    return cfg


def param_shapes(cfg):
    """LlamaForCausalLM's parameter names and shapes (torch layout: Linear weights [out, in])."""
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * (h // cfg["num_attention_heads"])
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        shapes.update({pre + "input_layernorm.weight": (h,), pre + "post_attention_layernorm.weight": (h,),
                       pre + "self_attn.q_proj.weight": (h, h), pre + "self_attn.k_proj.weight": (kv, h),
                       pre + "self_attn.v_proj.weight": (kv, h), pre + "self_attn.o_proj.weight": (h, h),
                       pre + "mlp.gate_proj.weight": (inter, h), pre + "mlp.up_proj.weight": (inter, h),
                       pre + "mlp.down_proj.weight": (h, inter)})
    return shapes


def _split(optimal_seconds):
    """(modelled seconds, unmodelled instructions): libtpu adds -1 s per instruction it cannot model
    (csrc/pjrt/topology.cpp SplitOptimalSeconds)."""
    n = math.ceil(-optimal_seconds) if optimal_seconds < 0 else 0
    return optimal_seconds + n, n


# ---- JAX ---------------------------------------------------------------------------------------------

def jax_programs(topology, cfg, batch=BATCH, prompt=PROMPT):
    """{"prefill": figures, "decode": figures} of JAX's shard_map Llama compiled for `topology`."""
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")  # as torch_tpu/tpu_target.py's worker
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    sys.path.insert(0, HERE)
    from jax_llama import llama_tp_step, tp_param_specs

    devices = topologies.get_topology_desc(platform="tpu", topology_name=topology).devices
    mesh = Mesh(np.array(devices), ("tp",))
    shapes = param_shapes(cfg)
    specs = tp_param_specs(shapes)
    params = {n: jax.ShapeDtypeStruct(s, jnp.float32, sharding=NamedSharding(mesh, specs[n]))
              for n, s in shapes.items()}
    d = cfg["hidden_size"] // cfg["num_attention_heads"]
    layers = cfg["num_hidden_layers"]
    cache_spec = P(None, "tp", None, None)
    cache = jax.ShapeDtypeStruct((batch, cfg["num_key_value_heads"], prompt, d), jnp.float32,
                                 sharding=NamedSharding(mesh, cache_spec))
    caches_spec = [(cache_spec, cache_spec)] * layers

    def ids(s):
        return jax.ShapeDtypeStruct((batch, s), jnp.int32, sharding=NamedSharding(mesh, P()))

    prefill = jax.shard_map(lambda p, i: llama_tp_step(p, i, None, 0, cfg), mesh=mesh, in_specs=(specs, P()),
                            out_specs=(P(), P(), caches_spec))
    decode = jax.shard_map(lambda p, i, c: llama_tp_step(p, i, c, prompt, cfg), mesh=mesh,
                           in_specs=(specs, P(), caches_spec), out_specs=(P(), P(), caches_spec))
    out = {}
    for name, fn, args in (("prefill", prefill, (params, ids(prompt))),
                           ("decode", decode, (params, ids(1), [(cache, cache)] * layers))):
        start = time.perf_counter()
        compiled = jax.jit(fn).lower(*args).compile()
        seconds = time.perf_counter() - start
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        modelled, unmodelled = _split(cost.get("optimal_seconds", -1.0))
        n_coll, coll = collective_bytes(compiled.as_text())
        out[name] = {"programs": 1, "gflop": cost.get("flops", 0) / 1e9, "hbm_mb": cost.get("bytes accessed", 0) / 1e6,
                     "ms": modelled * 1e3, "unmod": unmodelled, "collectives": n_coll, "coll_mb": coll / 1e6,
                     "errors": 0, "compile_s": seconds}
    return out


# ---- torch-tpu ---------------------------------------------------------------------------------------

def torch_programs(topology, cfg, mode, world):
    """{"prefill": figures, "decode": figures} of one rank's share of torch-tpu's programs, per step."""
    import copy

    import torch
    import torch_tpu
    from torch_tpu import tpu_target
    from torch_tpu.distributed import run_in_threads
    import transformers
    sys.path.insert(0, HERE)
    from tp_decode import plan

    tpu_target.enable(topology)
    torch.manual_seed(0)
    ref = transformers.AutoModelForCausalLM.from_config(
        transformers.LlamaConfig(**cfg, attn_implementation="eager")).eval()
    prompt = torch.randint(0, cfg["vocab_size"], (BATCH, PROMPT), generator=torch.Generator().manual_seed(0))
    barrier = threading.Barrier(world)
    marks = {}

    def mark(rank, name):
        torch.tpu.synchronize()
        barrier.wait()
        if rank == 0:
            torch_tpu.metrics(wait=True)  # background compiles settled: the next step runs its programs
            marks[name] = tpu_target.runs()
        barrier.wait()

    def ranks(rank, world):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module
        dev = torch.device("tpu", rank)
        model = parallelize_module(copy.deepcopy(ref).to(dev), init_device_mesh("tpu", (world,)), plan(ref.config))
        ids = prompt.to(dev)

        def prefill():
            out = model(input_ids=ids, use_cache=True)
            return out.past_key_values, out.logits[:, -1:].argmax(-1)

        def decode(cache, token):
            out = model(input_ids=token, past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            cache.crop(-1)  # back to 32 positions: every step has the same shapes
            token.cpu()
            return cache, token

        with torch.no_grad(), torch_tpu.eager_mode(mode):
            for _ in range(2):  # warm-up: every program compiled, fused graphs switched to
                cache, token = prefill()
                token.cpu()
                for _ in range(2):
                    cache, token = decode(cache, token)
            mark(rank, "start")
            cache, token = prefill()
            token.cpu()
            mark(rank, "prefill")
            decode(cache, token)
            mark(rank, "decode")

    run_in_threads(ranks, world)
    rows = {r["program_id"]: r for r in tpu_target.report(wait=True) if r["topology"] == topology}
    out = {}
    for name, before in (("prefill", "start"), ("decode", "prefill")):
        t = {"programs": 0, "gflop": 0.0, "hbm_mb": 0.0, "ms": 0.0, "unmod": 0, "collectives": 0, "coll_mb": 0.0,
             "errors": 0, "error_text": [], "top": []}
        for pid, n in marks[name].items():
            runs = n - marks[before].get(pid, 0)
            row = rows.get(pid)
            if runs <= 0 or row is None:
                continue
            # A collective program runs once for every rank; the others once on each rank.
            share = runs if row["name"].startswith("collective ") else runs / world
            t["programs"] += share
            if not row["ok"]:
                t["errors"] += 1
                t["error_text"].append(row["error"].splitlines()[0][:200] if row["error"] else "")
                continue
            n_coll, coll = collective_bytes(row["optimized_hlo"])
            t["gflop"] += share * row["flops"] / 1e9
            t["hbm_mb"] += share * row["bytes_accessed"] / 1e6
            t["ms"] += share * (row["modelled_ms"] or 0)
            t["unmod"] += share * (row["unmodelled"] or 0)
            t["collectives"] += share * n_coll
            t["coll_mb"] += share * coll / 1e6
            t["top"].append([row["name"], share, share * row["bytes_accessed"] / 1e6])
        t["top"] = sorted(t["top"], key=lambda r: -r[2])[:12]
        out[name] = t
    return out


# ---- driver ------------------------------------------------------------------------------------------

def _chips(topology):
    n = 1
    for d in topology.split(":")[1].split("x"):
        n *= int(d)
    return n


def _child(args, env=None):
    cmd = [sys.executable, os.path.abspath(__file__)] + args
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env={**os.environ, **(env or {})})
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(" ".join(args) + ": " + out.stderr[-3000:])
    return json.loads(lines[-1][7:])


def _ratio(a, b):
    return a / b if b else float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--topology", default="v5e:2x2")
    p.add_argument("--modes", default="strict,fused")
    p.add_argument("--kv-heads", type=int, help="key/value heads (default 4; 8 chips need 8)")
    p.add_argument("--json")
    p.add_argument("--programs", action="store_true", help="also list each torch-tpu side's 12 costliest programs")
    p.add_argument("--side", help=argparse.SUPPRESS)  # "jax" or a torch-tpu mode: one side, in this process
    a = p.parse_args()
    cfg = llama_config(a.kv_heads)
    world = _chips(a.topology)
    if a.side == "jax":
        print("RESULT " + json.dumps(jax_programs(a.topology, cfg)))
        return
    if a.side:
        print("RESULT " + json.dumps(torch_programs(a.topology, cfg, a.side, world)))
        return
    if cfg["num_key_value_heads"] % world or cfg["num_attention_heads"] % world:
        raise SystemExit(f"{world} chips do not split {cfg['num_attention_heads']}/{cfg['num_key_value_heads']} "
                         "heads: pass --kv-heads (a multiple of the chips)")
    kv = ["--kv-heads", str(a.kv_heads)] if a.kv_heads else []
    results = {"jax": _child(["--topology", a.topology, "--side", "jax"] + kv)}
    env = {"TORCH_TPU_NUM_DEVICES": str(world), "TORCH_TPU_QUIET": "1", "TORCH_TPU_FUSED_COMPILE_AFTER": "1",
           "TRANSFORMERS_VERBOSITY": "error"}
    for mode in a.modes.split(","):
        results[mode] = _child(["--topology", a.topology, "--side", mode] + kv, env)
    print(f"Tensor-parallel Llama (2 layers, hidden 1024, {cfg['num_attention_heads']}/{cfg['num_key_value_heads']} "
          f"heads, vocab 32000, f32, batch {BATCH}, prompt {PROMPT}) over {world} chips of {a.topology}")
    print("libtpu's cost model, per chip and step: estimates, not measurements (no TPU ran anything)")
    print(f"{'step':<8} {'side':<9} {'progs':>6} {'GFLOP':>8} {'HBM MB':>9} {'model ms':>9} {'unmod':>5} "
          f"{'colls':>5} {'coll MB':>8} {'HBM/JAX':>8} {'ms/JAX':>7} {'coll/JAX':>8}")
    for step in ("prefill", "decode"):
        j = results["jax"][step]
        for side in ["jax"] + a.modes.split(","):
            t = results[side][step]
            print(f"{step:<8} {side:<9} {t['programs']:>6.0f} {t['gflop']:8.3f} {t['hbm_mb']:9.2f} {t['ms']:9.4f} "
                  f"{t['unmod']:>5.0f} {t['collectives']:>5.0f} {t['coll_mb']:8.3f} "
                  f"{_ratio(t['hbm_mb'], j['hbm_mb']):8.2f} "
                  f"{_ratio(t['ms'], j['ms']):7.2f} {_ratio(t['coll_mb'], j['coll_mb']):8.2f}"
                  + (f"  ({t['errors']} errors: {t['error_text'][:2]})" if t["errors"] else ""), flush=True)
            if a.programs:
                for name, share, mb in t.get("top", []):
                    print(f"{'':<8} {'':<9} {share:6.2f} x {name[:60]:<60} {mb:9.2f} MB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"topology": a.topology, "config": cfg, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
