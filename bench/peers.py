"""torch-tpu next to its peers on the same compiler: the same workloads in JAX (jit and op by op)
and in torch-tpu (strict, fused, torch.compile) and PyTorch CPU eager, timed in alternating rounds
in one process, as medians of per-round ratios; plus the cold first call of the compiled paths,
each in a fresh process with an empty compilation cache. JAX runs XLA's CPU backend, the compiler
our CPU plugin carries, so JAX jit is the fair limit of our compiled path on this machine.

JAX is a benchmark-only dependency (`make bench-peers` installs it); nothing else imports it.

    python bench/peers.py [--rounds 7] [--iters 10] [--only mlp,llama_fwd,llama_train,add,matmul]
                          [--no-cold]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TORCH_TPU_QUIET", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import torch  # noqa: E402

import torch_tpu  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))  # bench/jax_llama.py, also from a link
try:
    import jax
    import jax.numpy as jnp

    import jax_llama as jl
except ImportError:
    sys.exit("bench/peers.py needs JAX: run `make bench-peers` (it installs jax into the venv)")

# The workloads of issue 18: tiny Llama (vocab 256, hidden 128, intermediate 256, 2 layers,
# 4 heads, 2 kv heads, batch 4 x 64), an MLP of 4 layers of 1024 at batch 256, one add of
# 1000 elements, one matmul 256x1024 @ 1024x1024.
LLAMA = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
BATCH, SEQ = 4, 64
MLP_WIDTH, MLP_LAYERS, MLP_BATCH = 1024, 4, 256
LR = 1e-3


# ---------------------------------------------------------------- PyTorch side

def torch_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**LLAMA))


def torch_mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(MLP_LAYERS):
        layers += [torch.nn.Linear(MLP_WIDTH, MLP_WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def torch_inputs():
    g = torch.Generator().manual_seed(1)
    return dict(ids=torch.randint(0, LLAMA["vocab_size"], (BATCH, SEQ), generator=g),
                x=torch.randn(MLP_BATCH, MLP_WIDTH, generator=g),
                a=torch.randn(1000, generator=g), b=torch.randn(1000, generator=g),
                lhs=torch.randn(256, 1024, generator=g), rhs=torch.randn(1024, 1024, generator=g))


def torch_workloads(device, wrap, inputs):
    """name -> (callable returning something to wait on, the loss/output for a correctness check)."""
    llama, mlp = torch_llama().to(device), torch_mlp().to(device)
    opt = torch.optim.AdamW(llama.parameters(), lr=LR)
    t = {k: v.to(device) for k, v in inputs.items()}

    def llama_fwd(ids):
        with torch.no_grad():
            return llama(input_ids=ids, labels=ids).loss

    def llama_train(ids):
        loss = llama(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    def mlp_fwd_bwd(x):
        loss = mlp(x).square().mean()
        loss.backward()
        return loss

    fns = dict(llama_fwd=(wrap(llama_fwd), (t["ids"],)), llama_train=(wrap(llama_train), (t["ids"],)),
               mlp=(wrap(mlp_fwd_bwd), (t["x"],)), add=(wrap(torch.add), (t["a"], t["b"])),
               matmul=(wrap(torch.matmul), (t["lhs"], t["rhs"])))
    return {name: (lambda f=f, a=a: f(*a)) for name, (f, a) in fns.items()}, llama, mlp


# ---------------------------------------------------------------- JAX side (same weights)

def jax_params(llama, mlp):
    p = jl.params_from_state_dict(llama.state_dict())
    m = [(jnp.asarray(l.weight.detach().cpu().numpy()), jnp.asarray(l.bias.detach().cpu().numpy()))
         for l in mlp if isinstance(l, torch.nn.Linear)]
    return p, m


def jax_llama_loss(p, ids):
    return jl.llama_loss(p, ids, LLAMA)


def jax_llama_train(params, state, ids):
    return jl.llama_train_step(params, state, ids, LLAMA, LR)


def jax_mlp_loss(layers, x):
    for i, (w, b) in enumerate(layers):
        x = x @ w.T + b
        if i < len(layers) - 1:
            x = jax.nn.relu(x)
    return jnp.mean(x * x)


def jax_workloads(jit, llama, mlp, inputs):
    wrap = jax.jit if jit else (lambda f: f)
    p, m = jax_params(llama, mlp)
    j = {k: jnp.asarray(v.numpy()) for k, v in inputs.items()}
    state = [p, jl.adamw_init(p)]
    fwd, train = wrap(jax_llama_loss), wrap(jax_llama_train)
    mlp_grad, add, matmul = wrap(jax.value_and_grad(jax_mlp_loss)), wrap(jnp.add), wrap(jnp.matmul)

    def llama_train():
        state[0], state[1], loss = train(state[0], state[1], j["ids"])
        return loss

    return dict(llama_fwd=lambda: fwd(p, j["ids"]), llama_train=llama_train,
                mlp=lambda: mlp_grad(m, j["x"]), add=lambda: add(j["a"], j["b"]),
                matmul=lambda: matmul(j["lhs"], j["rhs"]))


# ---------------------------------------------------------------- timing

def tpu_sync(_):
    torch.tpu.synchronize()


def jax_sync(out):
    jax.block_until_ready(out)


def no_sync(_):
    pass


def setups(inputs, names):
    """(setup, workload) -> (fn, sync, eager mode or None)."""
    runs = {}
    cpu_fns, llama, mlp = torch_workloads("cpu", lambda f: f, inputs)
    for name in names:
        runs[("cpu eager", name)] = (cpu_fns[name], no_sync, None)
    for setup, mode, wrap in (("tpu strict", "strict", lambda f: f), ("tpu fused", "fused", lambda f: f),
                              ("tpu compiled", "strict", lambda f: torch.compile(f, backend="tpu"))):
        with torch_tpu.eager_mode(mode):
            fns, *_ = torch_workloads("tpu", wrap, inputs)
        for name in names:
            runs[(setup, name)] = (fns[name], tpu_sync, mode)
    for setup, jit in (("jax jit", True), ("jax op-by-op", False)):
        fns = jax_workloads(jit, llama, mlp, inputs)
        for name in names:
            runs[(setup, name)] = (fns[name], jax_sync, None)
    return runs


def timed(fn, sync, mode, n):
    with torch_tpu.eager_mode(mode or "strict"):
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            sync(fn())
            samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def check_same_losses(runs, names):
    """Every setup computes the same thing: losses of the first call agree (float32 tolerance)."""
    for name in ("llama_fwd", "mlp"):
        if name not in names:
            continue
        values = {}
        for (setup, n), (fn, sync, mode) in runs.items():
            if n == name:
                with torch_tpu.eager_mode(mode or "strict"):
                    out = fn()
                out = out[0] if isinstance(out, tuple) else out
                values[setup] = float(out.detach().cpu() if isinstance(out, torch.Tensor) else out)
        ref = values["cpu eager"]
        bad = {s: v for s, v in values.items() if abs(v - ref) > 1e-4 * max(1.0, abs(ref))}
        print(f"{name}: first loss {ref:.6f} in every setup" if not bad else f"{name}: LOSSES DIFFER {values}")


COLD_SCRIPT = r"""
import json, sys, time
sys.argv = ["peers"]
import bench_peers as b
which, name = {which!r}, {name!r}
inputs = b.torch_inputs()
if which == "jax jit":
    fns = b.jax_workloads(True, b.torch_llama(), b.torch_mlp(), inputs)
    start = time.perf_counter()
    b.jax_sync(fns[name]())
else:
    with b.torch_tpu.eager_mode("strict"):
        fns, *_ = b.torch_workloads("tpu", lambda f: b.torch.compile(f, backend="tpu"), inputs)
        start = time.perf_counter()
        b.tpu_sync(fns[name]())
first = time.perf_counter() - start
m = b.torch_tpu.metrics()
print(json.dumps(dict(first=first, programs=m.get("programs_compiled"), compile_s=round(m.get("compile_time_s", 0), 2), disk_hits=m.get("disk_cache_hits"))))
"""


def cold_first_call(which, name):
    """First call (tracing and compiling; the model is built before) in a fresh process, empty cache."""
    with tempfile.TemporaryDirectory() as cache:
        # The script is imported as a module from a link in the scratch folder.
        os.symlink(os.path.abspath(__file__), os.path.join(cache, "bench_peers.py"))
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache, PYTHONPATH=cache)
        out = subprocess.run([sys.executable, "-c", COLD_SCRIPT.format(which=which, name=name)], env=env,
                             capture_output=True, text=True, timeout=900)
        if out.returncode:
            return dict(error=out.stderr.strip().splitlines()[-1:])
        return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=10, help="timed calls per setup and round (op-by-op JAX: 2)")
    parser.add_argument("--switch-warmup", type=int, default=2)
    parser.add_argument("--only", default="mlp,llama_fwd,llama_train,add,matmul")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold first calls (fresh processes)")
    args = parser.parse_args()
    names = args.only.split(",")
    inputs = torch_inputs()
    runs = setups(inputs, names)
    check_same_losses(runs, names)
    for fn, sync, mode in runs.values():  # warm: compiles everything before timing
        timed(fn, sync, mode, 2)
    per_round = {key: [] for key in runs}
    for r in range(args.rounds):
        keys = list(runs)
        keys = keys[r % len(keys):] + keys[:r % len(keys)]  # each round starts one setup later
        for key in keys:
            fn, sync, mode = runs[key]
            n = 2 if key[0] == "jax op-by-op" and key[1].startswith("llama") else args.iters
            timed(fn, sync, mode, args.switch_warmup)
            per_round[key].append(timed(fn, sync, mode, n))
    print(f"\nplatform: {torch.tpu.get_device_name()}, torch {torch.__version__}, jax {jax.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.rounds} rounds, medians")
    setup_names = list(dict.fromkeys(s for s, _ in runs))
    print(f"{'workload':12s}" + "".join(f"{s:>15s}" for s in setup_names) + "   compiled/jax-jit  strict/jax-jit")
    for name in names:
        cells = "".join(f"{statistics.median(per_round[(s, name)]) * 1e3:13.3f}ms" for s in setup_names)

        def ratio(a, b):
            return statistics.median(x / y for x, y in zip(per_round[(a, name)], per_round[(b, name)]))
        print(f"{name:12s}{cells}   {ratio('tpu compiled', 'jax jit'):14.2f}x {ratio('tpu strict', 'jax jit'):14.2f}x")
    if not args.no_cold:
        print("\ncold first call in a fresh process, empty cache (tracing + compiling, model built before):")
        for name in ("llama_fwd", "llama_train"):
            if name in names:
                ours, theirs = cold_first_call("tpu compiled", name), cold_first_call("jax jit", name)
                ratio = ours["first"] / theirs["first"] if "first" in ours and "first" in theirs else float("nan")
                print(f"  {name:12s} tpu compiled {ours}  jax jit {theirs}  ratio {ratio:.2f}x")


if __name__ == "__main__":
    main()
