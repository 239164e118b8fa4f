"""torch-tpu on an accelerator next to JAX jit and PyTorch's own CUDA paths (issue 29): a Llama
forward and AdamW training step, a bf16 matmul, an add of 1000 elements with a sync, and the first
(cold) forward and training call, for tpu strict, fused and compiled, JAX jit and, where CUDA is
present, PyTorch CUDA eager and Inductor. Each setup runs in its own process with an empty
compilation cache (its first calls are cold); inside it, each workload is timed in rounds of
synchronised calls that alternate between workloads, and the table shows medians of the per-round
medians, ratios against JAX jit, and the loss of the first forward and of two training steps, which
must agree across setups (a setup whose loss differs is flagged DIFFERS). For the tpu setups it also
says how long XLA compiled during each first call (summed over compiles, which may overlap) and,
from TORCH_TPU_DUMP_DIR, the distribution of compile times per kind of program (per-op, fused
graph, compiled graph): count, median, 90th percentile, max.

    python bench/accelerator.py [--small] [--out FILE] [--json FILE] [--setups a,b] [--rounds 3]
                                [--iters 10] [--layers 4 --hidden 1024 --vocab 32000 --batch 8 --seq 512]
                                [--matmul 8192] [--precision high] [--xla-flags=--xla_gpu_...]

Defaults are the issue's model (Llama of 4 layers, hidden 1024, vocabulary 32000, batch 8 x 512,
float32 weights, eager attention, float32 matmul precision "high"). --small is a model small enough
for the CPU plugin (about a minute in all), so the script is exercised where no accelerator is
(tests/test_bench_accelerator.py). JAX is a benchmark-only dependency (`make bench-peers`
installs it); without it the JAX row says so and ratios are against the first setup that ran.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.realpath(__file__))
SETUPS = ("tpu strict", "tpu fused", "tpu compiled", "jax jit", "cuda eager", "cuda inductor")
WORKLOADS = ("forward", "train", "matmul", "add")
LR = 1e-3


def llama_config(args):
    return dict(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
                num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                max_position_embeddings=max(args.seq, 128), rms_norm_eps=1e-6, rope_theta=10000.0)


def forward_tflop(args):
    """Matmul and attention flops of one forward (for the reader: what a forward's ms means)."""
    tokens, h, d = args.batch * args.seq, args.hidden, args.hidden // args.heads
    kv = args.kv_heads * d
    per_layer = 2 * tokens * h * (2 * h + 2 * kv) + 2 * 2 * tokens * args.seq * h + 3 * 2 * tokens * h * args.intermediate
    return (args.layers * per_layer + 2 * tokens * h * args.vocab) / 1e12


# ---------------------------------------------------------------- one setup, in its own process

def torch_model(args, device):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**llama_config(args), attn_implementation="eager")
    return LlamaForCausalLM(cfg).to(device)


def inputs(args):
    import torch

    g = torch.Generator().manual_seed(1)
    return dict(ids=torch.randint(0, args.vocab, (args.batch, args.seq), generator=g),
                a=torch.randn(1000, generator=g), b=torch.randn(1000, generator=g),
                lhs=torch.randn(args.matmul, args.matmul, generator=g).bfloat16(),
                rhs=torch.randn(args.matmul, args.matmul, generator=g).bfloat16())


def torch_setup(setup, args):
    """name -> zero-argument callable that runs one synchronised call and returns its result."""
    import torch

    if setup.startswith("tpu"):
        import torch_tpu

        mode = "fused" if setup == "tpu fused" else "strict"
        torch_tpu.set_eager_mode(mode)
        device, sync = "tpu", torch.tpu.synchronize
        wrap = (lambda f: torch.compile(f, backend="tpu")) if setup == "tpu compiled" else (lambda f: f)
    else:
        device, sync = "cuda", torch.cuda.synchronize
        wrap = torch.compile if setup == "cuda inductor" else (lambda f: f)
    torch.set_float32_matmul_precision(args.precision)
    model = torch_model(args, device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    t = {k: v.to(device) for k, v in inputs(args).items()}

    def forward(ids):
        with torch.no_grad():
            return model(input_ids=ids, labels=ids).loss

    def train(ids):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    fwd, step = wrap(forward), wrap(train)
    calls = dict(forward=lambda: fwd(t["ids"]), train=lambda: step(t["ids"]),
                 matmul=lambda: torch.matmul(t["lhs"], t["rhs"]), add=lambda: torch.add(t["a"], t["b"]))

    def synced(fn):
        def call():
            out = fn()
            sync()
            return out
        return call
    return {k: synced(f) for k, f in calls.items()}, lambda out: float(out.detach().float().cpu())


def jax_setup(args):
    import torch
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, HERE)
    import jax_llama as jl

    # PyTorch's names for float32 matmul precision, in JAX's terms ("medium" allows bf16 passes).
    jax.config.update("jax_default_matmul_precision",
                      {"highest": "highest", "high": "high", "medium": "default"}[args.precision])
    cfg = llama_config(args)
    params = jl.params_from_state_dict(torch_model(args, "cpu").state_dict())
    j = {k: jnp.asarray(v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy()) for k, v in inputs(args).items()}
    j["lhs"], j["rhs"] = j["lhs"].astype(jnp.bfloat16), j["rhs"].astype(jnp.bfloat16)
    # Donated buffers are updated in place, as torch's optimizer does (the CPU backend ignores it).
    donate = (0, 1) if jax.default_backend() != "cpu" else ()
    fwd = jax.jit(lambda p, ids: jl.llama_loss(p, ids, cfg))
    step = jax.jit(lambda p, s, ids: jl.llama_train_step(p, s, ids, cfg, LR), donate_argnums=donate)
    matmul, add = jax.jit(jnp.matmul), jax.jit(jnp.add)
    state = [params, jl.adamw_init(params)]

    def train():
        state[0], state[1], loss = step(state[0], state[1], j["ids"])
        return jax.block_until_ready(loss)

    calls = dict(forward=lambda: jax.block_until_ready(fwd(state[0], j["ids"])), train=train,
                 matmul=lambda: jax.block_until_ready(matmul(j["lhs"], j["rhs"])),
                 add=lambda: jax.block_until_ready(add(j["a"], j["b"])))
    return calls, lambda out: float(out)


def compile_stats(dump_dir):
    """Compile wall times from TORCH_TPU_DUMP_DIR's files, by kind (op, fused, compiled): count,
    median, 90th percentile, max and total, in ms."""
    times = {}
    for name in sorted(os.listdir(dump_dir)) if dump_dir and os.path.isdir(dump_dir) else []:
        m = re.match(r".*?-(op|fused|compiled)(-cached)?-", name)
        if not m or m.group(2):
            continue
        with open(os.path.join(dump_dir, name), errors="replace") as f:
            found = re.search(r"^// compiled in ([0-9.]+) ms$", f.read(), re.M)
        if found:
            times.setdefault(m.group(1), []).append(float(found.group(1)))
    out = {}
    for kind, v in times.items():
        v.sort()
        out[kind] = dict(n=len(v), median=statistics.median(v), p90=v[min(len(v) - 1, int(0.9 * len(v)))],
                         max=v[-1], total=sum(v))
    return out


def run_setup(setup, args):
    """Cold first calls, losses, then rounds of timed calls; returns the result as a dict."""
    start = time.perf_counter()
    calls, value = jax_setup(args) if setup == "jax jit" else torch_setup(setup, args)
    res = dict(setup=setup, build_s=time.perf_counter() - start)
    tpu = setup.startswith("tpu")
    if tpu:
        import torch_tpu

    def xla_compile_s():  # the XLA compiler's share of a first call (the rest: tracing, lowering)
        return torch_tpu.metrics()["compile_time_s"] if tpu else 0.0
    c0, start = xla_compile_s(), time.perf_counter()
    res["loss_forward"] = value(calls["forward"]())
    res["first_forward_s"] = time.perf_counter() - start
    c1, start = xla_compile_s(), time.perf_counter()
    losses = [value(calls["train"]())]
    res["first_train_s"] = time.perf_counter() - start
    if tpu:
        res["first_xla_s"] = [c1 - c0, xla_compile_s() - c1]
    losses.append(value(calls["train"]()))
    res["loss_train"] = losses
    per_round = {w: [] for w in WORKLOADS}
    for w in WORKLOADS:  # warm: every program compiled, every path taken once
        for _ in range(args.warmup):
            calls[w]()
    for r in range(args.rounds):
        order = WORKLOADS[r % len(WORKLOADS):] + WORKLOADS[:r % len(WORKLOADS)]
        for w in order:
            samples = []
            for _ in range(args.iters):
                t0 = time.perf_counter()
                calls[w]()
                samples.append(time.perf_counter() - t0)
            per_round[w].append(statistics.median(samples))
    res["rounds"] = per_round
    res["median"] = {w: statistics.median(v) for w, v in per_round.items()}
    if tpu:
        m = torch_tpu.metrics(wait=True)  # waits for background compiles: the dump is complete after it
        res["metrics"] = {k: m.get(k) for k in ("programs_compiled", "compile_time_s", "slowest_compile_s",
                                                "fused_graphs_run", "fused_graphs_compiled", "fused_graphs_op_by_op", "fused_switches", "fused_compile_waits",
                                                "compile_ahead_programs", "compile_ahead_hits", "compile_ahead_misses",
                                                "compile_in_flight_waits", "executions")}
        res["compile_ms"] = compile_stats(os.environ.get("TORCH_TPU_DUMP_DIR"))
    return res


# ---------------------------------------------------------------- the parent: one process per setup

def available(setup):
    """None when the setup can run here, else why not."""
    if setup == "jax jit":
        try:
            import importlib.util
            return None if importlib.util.find_spec("jax") else "jax not installed (`make bench-peers` installs it)"
        except ValueError:
            return "jax not importable"
    if setup.startswith("cuda"):
        import torch
        return None if torch.cuda.is_available() else "no CUDA device"
    return None


def spawn(setup, args, argv):
    with tempfile.TemporaryDirectory() as cache:
        out = os.path.join(cache, "result.json")
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
                   TORCH_TPU_QUIET="1", TF_CPP_MIN_LOG_LEVEL="1", HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
        env.pop("TORCH_TPU_EAGER_MODE", None)  # the child sets its own mode
        if setup.startswith("tpu"):
            env["TORCH_TPU_DUMP_DIR"] = os.path.join(cache, "dump")  # compile time of every program
        if args.xla_flags is not None and (setup.startswith("tpu") or setup == "jax jit"):
            env["XLA_FLAGS"] = args.xla_flags  # the same compiler options for both (an experiment knob)
        # No tpu backend in JAX's and CUDA's processes (tpu ones import it themselves).
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        try:
            proc = subprocess.run([sys.executable, os.path.realpath(__file__), *argv, "--child", setup, "--child-out", out],
                                  env=env, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return dict(setup=setup, error=f"timed out after {args.timeout} s")
        if proc.returncode or not os.path.exists(out):
            lines = proc.stderr.strip().splitlines() or ["exit code %d" % proc.returncode]
            tail = next((l for l in reversed(lines) if "Error" in l), lines[-1])
            return dict(setup=setup, error=tail[:200])
        with open(out) as f:
            return json.load(f)


def close(a, b, tol):
    return abs(a - b) <= tol * max(1.0, abs(b))


def table(results, args):
    ok = [r for r in results if "median" in r]
    base = next((r for r in ok if r["setup"] == "jax jit"), ok[0] if ok else None)
    ref = base
    # TF32 / bf16 passes change the loss in the 4th digit; full float32 in the 6th.
    tol = 1e-5 if args.precision == "highest" else 2e-3
    lines = [f"| setup | forward ms | train step ms | bf16 matmul {args.matmul}³ TFLOP/s | add[1000] + sync µs "
             f"| first forward / train call s | × {base['setup'] if base else '-'} fwd / train | loss fwd / train×2 |",
             "|---|---|---|---|---|---|---|---|"]
    flagged = []
    for r in results:
        if "median" not in r:
            lines.append(f"| {r['setup']} | {r.get('error', r.get('skipped'))} |||||||")
            continue
        m = r["median"]
        same = (close(r["loss_forward"], ref["loss_forward"], tol)
                and all(close(a, b, tol) for a, b in zip(r["loss_train"], ref["loss_train"])))
        if not same:
            flagged.append(r["setup"])

        def ratio(w):
            return statistics.median(x / y for x, y in zip(r["rounds"][w], base["rounds"][w]))
        lines.append(f"| {r['setup']} | {m['forward'] * 1e3:.2f} | {m['train'] * 1e3:.2f} "
                     f"| {2 * args.matmul ** 3 / m['matmul'] / 1e12:.3g} | {m['add'] * 1e6:.1f} "
                     f"| {r['first_forward_s']:.2f} / {r['first_train_s']:.2f} "
                     f"| {ratio('forward'):.2f} / {ratio('train'):.2f} "
                     f"| {r['loss_forward']:.5f} / {', '.join(f'{x:.5f}' for x in r['loss_train'])}"
                     f"{'' if same else ' DIFFERS'} |")
    return lines, flagged


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="a model and sizes for the CPU plugin (about a minute)")
    p.add_argument("--out", help="also write the markdown report to this file")
    p.add_argument("--json", help="write every setup's raw result (rounds, metrics) to this file")
    p.add_argument("--setups", default=",".join(SETUPS), help="comma-separated subset of: " + ", ".join(SETUPS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=10, help="synchronised calls per workload and round")
    p.add_argument("--warmup", type=int, default=2, help="calls of each workload before timing")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--matmul", type=int, default=8192, help="side of the square bf16 matmul")
    p.add_argument("--precision", default="high", choices=("highest", "high", "medium"),
                   help="torch.set_float32_matmul_precision (JAX: jax_default_matmul_precision)")
    p.add_argument("--xla-flags", help="XLA_FLAGS for the tpu and JAX processes, as --xla-flags=--xla_gpu_autotune_level=0")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per setup process")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    argv = sys.argv[1:]
    args = p.parse_args()
    if args.small:
        small = dict(layers=2, hidden=128, intermediate=256, heads=4, kv_heads=2, vocab=256, batch=2, seq=64,
                     matmul=256, rounds=3, iters=5)
        for k, v in small.items():
            if f"--{k.replace('_', '-')}" not in argv:
                setattr(args, k, v)
    if args.child:
        res = run_setup(args.child, args)
        with open(args.child_out, "w") as f:
            json.dump(res, f)
        return 0

    child_argv, skip = [], False  # --out and --json (and their values) are the parent's only
    for a in argv:
        if skip or a.startswith(("--out=", "--json=")):
            skip = False
        elif a in ("--out", "--json"):
            skip = True
        else:
            child_argv.append(a)
    # The parent only launches: no backend (no device client) of its own.
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    import torch

    results = []
    for setup in args.setups.split(","):
        setup = setup.strip()
        if setup not in SETUPS:
            sys.exit(f"unknown setup {setup!r}; choose from {', '.join(SETUPS)}")
        why = available(setup)
        results.append(dict(setup=setup, skipped=why) if why else spawn(setup, args, child_argv))
    head = (f"Llama {args.layers} layers, hidden {args.hidden}, intermediate {args.intermediate}, heads "
            f"{args.heads}/{args.kv_heads} kv, vocab {args.vocab}, batch {args.batch} x {args.seq} "
            f"(~{forward_tflop(args):.3g} TFLOP per forward), float32 weights, eager attention, precision "
            f"\"{args.precision}\"; torch {torch.__version__}, {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.1f}; medians of {args.rounds} rounds x {args.iters} synced calls; "
            f"first calls cold (fresh process, empty compilation cache)")
    lines, flagged = table(results, args)
    report = [head, ""] + lines
    for r in results:
        if r.get("metrics"):
            report.append(f"- {r['setup']}: " + ", ".join(f"{k} {v if not isinstance(v, float) else round(v, 2)}"
                                                          for k, v in r["metrics"].items()))
            fwd, train = r["first_xla_s"]
            report.append(f"  first forward / train call: {r['first_forward_s']:.2f} / {r['first_train_s']:.2f} s, "
                          f"XLA compiling in them {fwd:.2f} / {train:.2f} s (summed over compiles, which overlap: "
                          f"a compiled graph's program compiles on its own thread ahead of its first run)")
            for kind, c in r.get("compile_ms", {}).items():
                report.append(f"  {kind} programs: {c['n']} compiled, ms median {c['median']:.0f} p90 {c['p90']:.0f} "
                              f"max {c['max']:.0f}, total {c['total'] / 1e3:.2f} s")
    if flagged:
        report.append(f"\nLOSSES DIFFER: {', '.join(flagged)}")
    text = "\n".join(report)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), results=results), f, indent=1)
    failed = [r["setup"] for r in results if "error" in r]
    return 1 if flagged or failed else 0


if __name__ == "__main__":
    sys.exit(main())
