"""torch-tpu's programs against JAX jit's, both compiled by libtpu for a TPU topology (no TPU needed).

Prints libtpu's cost model (GFLOP, HBM GB, modelled ms, relayout copies) per workload and variant. These
are the compiler's estimates, not measurements; no TPU runs anything.

Workloads: a Transformers Llama (2 layers, hidden 1024, intermediate 2816, 16/4 heads, vocab 32000, f32,
eager attention, batch 4x512 unless --llama-batch) forward (the loss with labels=ids) and train step
(forward and backward: the loss and every parameter's gradient, no optimizer), both of a function that
returns the loss alone (as JAX's does; not the model's logits), an MLP, a bf16 matmul and
a Diffusers UNet2DConditionModel forward (one denoising step); torch-tpu only: a Mixtral forward with
the loss (moe-fwd) and one Llama decode step with a static cache (decode), chosen with --only, for --s64.

Variants, each in a process of its own (only programs new to a process are compiled and reported):
- strict: torch-tpu strict eager mode, summed over the per-op programs of one step;
  every variant counts each program once per run in the step (tpu_target.runs()), so a program
  compiled but never run adds nothing and one run for each of the two layers counts twice;
- fused: torch-tpu fused eager mode with TORCH_TPU_FUSED_COMPILE_AFTER=1, the "fused graph" programs
  that run one step (the second of two steps; per-op programs that serve while a graph compiles are left out);
- compiled: torch.compile(backend="tpu"), every graph of the step (forward and backward);
- jax: jax.jit of the same computation (bench/jax_llama.py's Llama, the same shapes and dtypes),
  lowered here and compiled for the topology by the same worker as torch-tpu's programs
  (torch_tpu.tpu_target.compile_module). The UNet has no JAX version: Diffusers 0.42 dropped its
  Flax UNet and writing one by hand is a project of its own, so it reports torch-tpu's variants only.

Columns: programs, their runs in the step, GFLOP, HBM GB ("bytes accessed"), modelled ms (the modelled part of optimal_seconds;
`unmod` counts the instructions the model could not estimate), copies (copy instructions in the
TPU-optimised HLO), pcopy (copies whose operand is an entry parameter), prel (those of them that change
the parameter's layout: a relayout of an input buffer), and the ratios against JAX's program.

--precision sets the float32 matmul precision of both sides alike (torch.set_float32_matmul_precision and
JAX's jax_default_matmul_precision): highest (full f32; the default, torch's own), high, default (one bf16
pass: JAX's own default on TPU, torch's "medium"); native leaves each side at its own default (torch
highest against JAX default), which is not a comparison of the same program.

--s64 also compiles each torch-tpu program a second time with its 64-bit integer arithmetic rewritten
to 32 bits (a text rewrite of the StableHLO, for measuring only: s64 -> s32 wherever it appears) and
prints what 64-bit index arithmetic costs.

--without-donation also compiles each program that writes a storage in place without its aliases
(tf.aliasing_output), as if its storage's buffer were not donated (TORCH_TPU_DONATE=0), and prints what
donation saves: a partial write (a KV cache slot) then copies its whole storage.

    python bench/tpu_estimate.py [--topology v5e:2x2|v6e:2x2] [--only llama] [--variants strict,compiled,jax]
                                 [--llama-batch 4] [--precision highest|high|default|native]
                                 [--s64] [--without-donation] [--json out.json]
"""

import argparse
import json
import os
import re
import subprocess
import sys

os.environ.setdefault("TORCH_TPU_QUIET", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

import torch_tpu  # noqa: E402
from torch_tpu import tpu_target  # noqa: E402

VARIANTS = ("strict", "fused", "compiled", "jax")
# --precision: (torch.set_float32_matmul_precision, jax_default_matmul_precision); None keeps a side's default.
PRECISIONS = {"highest": ("highest", "highest"), "high": ("high", "high"), "default": ("medium", "default"),
              "native": (None, None)}
LLAMA = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=2, num_attention_heads=16,
             num_key_value_heads=4, max_position_embeddings=1024, rms_norm_eps=1e-6, rope_theta=10000.0,
             tie_word_embeddings=False)


def _entry(hlo):
    """The entry computation's lines: after "ENTRY", else the computation named main*, else the last."""
    blocks = re.split(r"\n(?=\S[^\n]*\{\s*\n)", hlo)
    for b in blocks:
        if b.startswith("ENTRY "):
            return b
    mains = [b for b in blocks if b.startswith("main")]
    return (mains or blocks or [""])[-1]


def param_copies(hlo):
    """(copies of an entry parameter, the relayouts among them: "%Arg_N.1: from -> to" for each copy
    that changes its parameter's layout). A copy is a copy or copy-start instruction whose operand is
    an entry parameter."""
    shapes, count, relayouts = {}, 0, []
    for line in _entry(hlo).splitlines():
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (.*) (parameter|copy|copy-start)\((.*?)\)", line)
        if not m:
            continue
        name, shape, op, operand = m.groups()
        if op == "parameter":
            shapes[name] = (shape, name)  # libtpu prints entry parameters as parameter(): the name numbers them
        elif operand.lstrip("%") in shapes:
            count += 1
            src, param = shapes[operand.lstrip("%")]
            dst = re.search(r"[a-z0-9]+\[[^\]]*\]\{[^}]*\}", shape[1:] if op == "copy-start" else shape)
            if dst and dst.group(0) != src:
                relayouts.append(f"%{param}: {src} -> {dst.group(0)}")
    return count, relayouts


def to_s32(text):
    """The module with its 64-bit integer types and constants as 32-bit ones (measuring only)."""
    text = re.sub(r"(tensor<(?:\d+x)*)(u?)i64>", r"\1\2i32>", text)

    # 64-bit sentinels (INT64_MIN as a max-reduction's start) become the 32-bit ones.
    def clamp(m):
        lo, hi = (0, 2**32 - 1) if m.group(3) else (-2**31, 2**31 - 1)
        values = re.sub(r"-?\d+", lambda v: str(min(max(int(v.group(0)), lo), hi)), m.group(1))
        return f"dense<{values}>{m.group(2)}"
    return re.sub(r"dense<([-\d, \[\]]+)>(\s*:\s*tensor<(?:\d+x)*(u?)i32>)", clamp, text)


def _sum(rows, s64_rows=None, kept_rows=None):
    t = tpu_target.totals(rows)
    out = {"gflop": t["gflop"], "gb": t["hbm_mb"] / 1e3, "ms": t["modelled_ms"], "unmod": t["unmodelled"],
           "copies": t["copies"], "param_copies": sum(param_copies(r["optimized_hlo"])[0] for r in rows if r["ok"]),
           "param_relayouts": sum(len(param_copies(r["optimized_hlo"])[1]) for r in rows if r["ok"]),
           "relayouts": [f"{r['name']}: {x}" for r in rows if r["ok"] for x in param_copies(r["optimized_hlo"])[1]],
           "errors": t["errors"], "programs": len({r.get("program_id", id(r)) for r in rows}), "runs": len(rows),
           "error_text": [r["error"].splitlines()[0][:200] for r in rows if not r["ok"] and r["error"]][:3]}
    if s64_rows is not None:
        s = tpu_target.totals(s64_rows)
        out["s32"] = {"gb": s["hbm_mb"] / 1e3, "ms": s["modelled_ms"],
                      "errors": s["errors"] + sum(1 for r in s64_rows if r.get("s32_error")),
                      "programs_with_s64": sum(1 for r in rows if r.get("has_s64"))}
    if kept_rows is not None:
        k = tpu_target.totals(kept_rows)
        out["undonated"] = {"gb": k["hbm_mb"] / 1e3, "ms": k["modelled_ms"], "errors": k["errors"],
                            "programs_aliased": len({r["program_id"] for r in rows if r.get("aliased")})}
    return out


def per_run(rows, before, after):
    """One row per run of the measured step: a per-op program that serves both layers counts
    twice, and a program compiled but not run (one built ahead for other input layouts) not at all."""
    return [r for r in rows for _ in range(after.get(r["program_id"], 0) - before.get(r["program_id"], 0))]


# ---- workloads: each gives a torch step builder and (optionally) a JAX module -----------------------

def _mlp_args():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) for s in [(512, 1024), (1024, 4096), (4096, 1024)]]


def mlp_torch(mode):
    x, w1, w2 = (a.to("tpu") for a in _mlp_args())

    def mlp(x, w1, w2):
        return torch.nn.functional.gelu(x @ w1) @ w2
    f = torch.compile(mlp, backend="tpu") if mode == "compiled" else mlp
    return lambda: f(x, w1, w2)


def mlp_jax():
    import jax

    def jmlp(x, w1, w2):
        return jax.nn.gelu(x @ w1, approximate=False) @ w2
    return jax.jit(jmlp).lower(*(_spec(a.shape, "float32") for a in _mlp_args())).as_text()


def matmul_torch(mode):
    a, b = (torch.randn(2048, 2048).bfloat16().to("tpu") for _ in range(2))
    f = torch.compile(torch.matmul, backend="tpu") if mode == "compiled" else torch.matmul
    return lambda: f(a, b)


def matmul_jax():
    import jax
    import jax.numpy as jnp
    return jax.jit(jnp.matmul).lower(_spec((2048, 2048), "bfloat16"), _spec((2048, 2048), "bfloat16")).as_text()


def _spec(shape, dtype):
    import jax
    import jax.numpy as jnp
    return jax.ShapeDtypeStruct(tuple(shape), getattr(jnp, dtype))


def _llama_model():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**LLAMA, attn_implementation="eager")).float()


def _llama_ids(batch):
    return torch.randint(0, LLAMA["vocab_size"], (batch, 512), generator=torch.Generator().manual_seed(0))


def llama_torch(mode, train, batch):
    model = _llama_model().to("tpu")
    model.train(train)
    ids = _llama_ids(batch).to("tpu")

    # The loss alone, as jax_llama.llama_loss returns it: compiling the model itself would add its
    # logits (batch x 512 x vocab f32) to the forward program's outputs and their zero gradient to
    # the backward's inputs, work the JAX program does not do.
    def loss_of(ids):
        return model(input_ids=ids, labels=ids).loss
    loss_fn = torch.compile(loss_of, backend="tpu") if mode == "compiled" else loss_of

    def step():
        if not train:
            with torch.no_grad():
                return loss_fn(ids)
        model.zero_grad(set_to_none=True)
        loss = loss_fn(ids)
        loss.backward()
        return model.lm_head.weight.grad
    return step


def llama_jax(train, batch):
    import jax
    import jax.numpy as jnp
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from jax_llama import llama_loss
    shapes = {k: _spec(v.shape, "float32") for k, v in _llama_model().state_dict().items()}
    ids = jax.ShapeDtypeStruct((batch, 512), jnp.int32)  # JAX's default integer (x64 off), as JAX users run it
    cfg = dict(LLAMA)
    f = jax.value_and_grad(llama_loss) if train else llama_loss
    return jax.jit(lambda p, ids: f(p, ids, cfg)).lower(shapes, ids).as_text()


MIXTRAL = dict(LLAMA, hidden_size=512, intermediate_size=1024, num_local_experts=8, num_experts_per_tok=2,
               num_attention_heads=8, num_key_value_heads=2)


def _mixtral_model():
    from transformers import MixtralConfig, MixtralForCausalLM
    torch.manual_seed(0)
    return MixtralForCausalLM(MixtralConfig(**MIXTRAL, attn_implementation="eager")).float().eval()


def moe_torch(mode, batch):
    """Mixtral forward with the loss (routing, top-k, expert dispatch, cross entropy): torch-tpu only."""
    model = _mixtral_model().to("tpu")
    ids = _llama_ids(batch)[:, :128].to("tpu")
    forward = torch.compile(model, backend="tpu") if mode == "compiled" else model

    def step():
        with torch.no_grad():
            return forward(input_ids=ids, labels=ids).loss
    return step


def decode_torch(mode, batch):
    """One greedy decode step of the Llama with a static cache of 512 positions after a 64-token prompt
    (cache positions, the mask's arange and the argmax): torch-tpu only."""
    from transformers import StaticCache
    model = _llama_model().eval().to("tpu")
    ids = _llama_ids(batch)[:, :64].to("tpu")
    cache = StaticCache(config=model.config, max_cache_len=512)
    forward = torch.compile(model, backend="tpu") if mode == "compiled" else model
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=torch.arange(64, device="tpu"))
    token = ids[:, -1:]
    position = torch.tensor([64], device="tpu")

    def step():
        with torch.no_grad():
            logits = forward(input_ids=token, past_key_values=cache, use_cache=True, cache_position=position).logits
            return logits[:, -1].argmax(-1)
    return step


def unet_torch(mode):
    from diffusers import UNet2DConditionModel
    torch.manual_seed(0)
    unet = UNet2DConditionModel(block_out_channels=(128, 256), layers_per_block=1, sample_size=32, in_channels=4,
                                out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=256,
                                attention_head_dim=8, norm_num_groups=32).eval().to("tpu")
    g = torch.Generator().manual_seed(0)
    sample = torch.randn(2, 4, 32, 32, generator=g).to("tpu")
    text = torch.randn(2, 77, 256, generator=g).to("tpu")
    t = torch.tensor([500, 500]).to("tpu")
    forward = torch.compile(unet, backend="tpu") if mode == "compiled" else unet

    def step():
        with torch.no_grad():
            return forward(sample, t, encoder_hidden_states=text).sample
    return step


def workloads(batch):
    return {
        "llama-fwd": (f"Llama fwd {batch}x512 f32", lambda m: llama_torch(m, False, batch),
                      lambda: llama_jax(False, batch)),
        "llama-train": (f"Llama train {batch}x512 f32", lambda m: llama_torch(m, True, batch),
                        lambda: llama_jax(True, batch)),
        "mlp": ("MLP 512x1024x4096 f32", mlp_torch, mlp_jax),
        "matmul": ("matmul 2048^3 bf16", matmul_torch, matmul_jax),
        "unet": ("UNet2DCond 2x4x32x32 f32", unet_torch, None),
        "moe-fwd": (f"Mixtral fwd {batch}x128 f32", lambda m: moe_torch(m, batch), None),
        "decode": (f"Llama decode {batch}x1 f32", lambda m: decode_torch(m, batch), None),
    }


# ---- one variant, in its own process ------------------------------------------------------------------

def _s64_rows(rows, topology):
    out, done = [], {}
    for r in rows:
        if r["program_id"] in done:  # a program the step ran again
            out.append(done[r["program_id"]])
            continue
        text = r.get("module_text", "")
        r["has_s64"] = bool(re.search(r"tensor<(?:\d+x)*u?i64>", text))
        if not r["has_s64"]:
            out.append(r)
            continue
        s32 = tpu_target.compile_module(to_s32(text), topology, name=r["name"])
        # A rewrite libtpu rejects counts as an error and keeps the s64 program's figures.
        done[r["program_id"]] = s32 if s32["ok"] or not r["ok"] else dict(r, ok=True, s32_error=s32["error"])
        out.append(done[r["program_id"]])
    return out


ALIAS = re.compile(r" \{tf\.aliasing_output = \d+ : i32\}")


def _undonated_rows(rows, topology):
    """The same programs without their in-place aliases (tf.aliasing_output): what each in-place
    write would move if its storage's buffer were not donated (every write a fresh buffer)."""
    out, done = [], {}
    for r in rows:
        if r["program_id"] not in done:
            text = r.get("module_text", "")
            r["aliased"] = bool(ALIAS.search(text))
            done[r["program_id"]] = (tpu_target.compile_module(ALIAS.sub("", text), topology, name=r["name"])
                                     if r["aliased"] else r)
        out.append(done[r["program_id"]])
    return out


def one_variant(topology, key, variant, batch, s64, precision, undonated=False):
    name, torch_build, jax_build = workloads(batch)[key]
    torch_precision, jax_precision = PRECISIONS[precision]
    if variant == "jax":
        import jax
        if jax_precision:
            jax.config.update("jax_default_matmul_precision", jax_precision)
        rows = [tpu_target.compile_module(jax_build(), topology, name="jax")]
        print("RESULT", json.dumps(_sum(rows)))
        return
    if torch_precision:
        torch.set_float32_matmul_precision(torch_precision)
    tpu_target.enable(topology)
    step = torch_build(variant)
    torch.tpu.synchronize()  # the setup's own work (a decode step's prefill) is done before the step
    tpu_target.report(wait=True, clear=True)  # moving the inputs to the device is not the step
    if variant == "fused":
        with torch_tpu.eager_mode("fused"):
            step().cpu()
            torch_tpu.metrics(wait=True)  # background compiles settled: the next step runs its programs
            before = tpu_target.runs()
            step().cpu()
        rows = [r for r in tpu_target.report(wait=True, clear=True) if r["name"].startswith("fused graph")]
    else:
        before = tpu_target.runs()
        with torch_tpu.eager_mode("strict" if variant == "strict" else "fused"):
            step().cpu()
        rows = tpu_target.report(wait=True, clear=True)
    rows = per_run(rows, before, tpu_target.runs())
    print("RESULT", json.dumps(_sum(rows, _s64_rows(rows, topology) if s64 else None,
                                    _undonated_rows(rows, topology) if undonated else None)))


def run_variant(topology, key, variant, batch, s64, precision, undonated=False):
    env = dict(os.environ)
    if variant == "fused":
        env["TORCH_TPU_FUSED_COMPILE_AFTER"] = "1"
    cmd = [sys.executable, os.path.abspath(__file__), "--topology", topology, "--one", key, variant,
           "--llama-batch", str(batch), "--precision", precision] + (["--s64"] if s64 else []) + \
        (["--without-donation"] if undonated else [])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"{key} {variant}: " + out.stderr[-3000:])
    return json.loads(lines[-1][7:])


def _ratio(a, b):
    return a / b if b else float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--topology", default="v5e:2x2")
    p.add_argument("--only", default="llama-fwd,llama-train,mlp,matmul,unet")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--llama-batch", type=int, default=4)
    p.add_argument("--precision", choices=sorted(PRECISIONS), default="highest")
    p.add_argument("--s64", action="store_true")
    p.add_argument("--without-donation", action="store_true",
                   help="also compile each program without its in-place aliases: what donation saves")
    p.add_argument("--json")
    p.add_argument("--one", nargs=2)
    a = p.parse_args()
    if a.one:
        return one_variant(a.topology, a.one[0], a.one[1], a.llama_batch, a.s64, a.precision, a.without_donation)
    variants = a.variants.split(",")
    print(f"libtpu cost model for {a.topology}: the compiler's estimates, not measurements (no TPU ran anything); "
          f"f32 matmul precision {a.precision}" + (" (each side's own default)" if a.precision == "native" else
                                                    " on both sides"))
    print(f"{'workload':<26} {'variant':<9} {'progs':>5} {'runs':>5} {'GFLOP':>8} {'HBM GB':>8} {'model ms':>9} {'unmod':>5} "
          f"{'copies':>6} {'pcopy':>5} {'prel':>4} {'GB/JAX':>7} {'ms/JAX':>7}", flush=True)
    results = {}
    table = workloads(a.llama_batch)
    for key in a.only.split(","):
        name, _, jax_build = table[key]
        jax_t = (run_variant(a.topology, key, "jax", a.llama_batch, False, a.precision)
                 if jax_build and "jax" in variants else None)
        for variant in variants:
            if variant == "jax" and jax_t is None:
                continue
            try:
                t = jax_t if variant == "jax" else run_variant(a.topology, key, variant, a.llama_batch, a.s64,
                                                                a.precision, a.without_donation)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"{name:<26} {variant:<9} failed: {str(e)[-300:]}", flush=True)
                continue
            results[f"{key}/{variant}"] = t
            gb_r = _ratio(t["gb"], jax_t["gb"]) if jax_t else float("nan")
            ms_r = _ratio(t["ms"], jax_t["ms"]) if jax_t else float("nan")
            print(f"{name:<26} {variant:<9} {t['programs']:>5} {t['runs']:>5} {t['gflop']:8.2f} {t['gb']:8.4f} {t['ms']:9.4f} "
                  f"{t['unmod']:>5} {t['copies']:>6} {t['param_copies']:>5} {t['param_relayouts']:>4} {gb_r:7.2f} {ms_r:7.2f}"
                  + (f"  ({t['errors']} errors: {t['error_text']})" if t["errors"] else ""), flush=True)
            for relayout in t.get("relayouts", [])[:4]:
                print(f"{'':<26}   relayout of {relayout}", flush=True)
            if "s32" in t:
                s = t["s32"]
                print(f"{'':<26} {'  as s32':<9} {s['programs_with_s64']:>5} {'':>5} {'':>8} {s['gb']:8.4f} {s['ms']:9.4f} "
                      f"{'':>5} {'':>6} {'':>5} {'':>4} {_ratio(t['gb'], s['gb']):7.3f} {_ratio(t['ms'], s['ms']):7.3f}"
                      f"  (s64/s32; {s['errors']} errors)", flush=True)
            if "undonated" in t:
                u = t["undonated"]
                print(f"{'':<26} {'  no alias':<9} {u['programs_aliased']:>5} {'':>5} {'':>8} {u['gb']:8.4f} {u['ms']:9.4f} "
                      f"{'':>5} {'':>6} {'':>5} {'':>4} {_ratio(t['gb'], u['gb']):7.3f} {_ratio(t['ms'], u['ms']):7.3f}"
                      f"  (donated/undonated; {u['errors']} errors)", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"topology": a.topology, "llama_batch": a.llama_batch, "precision": a.precision,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
