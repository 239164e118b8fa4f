"""The first call, as a new user meets it: each case runs in a fresh process, cold (an empty
TORCH_TPU_CACHE_DIR, a temp folder) and then warm (a second process on the same folder).

Cases: the demo's tiny Llama greedy generate() of 24 tokens (examples/demo.py's model and
prompt) with the default cache and with StaticCache, and a first training step (forward,
backward, AdamW) of the same model in fused eager mode and under torch.compile(backend="tpu").

Reports medians over --repeats fresh pairs of processes: wall time of the first call (from
moving the model to tpu to its result on the host), the process's time before that (imports,
model build), programs compiled (and of those, at lowered effort: "quick"), loaded from disk, and shared (module text compiled before
under another signature), compile seconds, and the process's CPU seconds.

    python bench/first_call.py [--repeats 3] [--quick] [--cases generate_static,...] [--cores 1,all]

--cores 1,all runs each case under `taskset -c 0` and on every core. The machine is whatever
it is: compare figures within one run.

Figures seen (2026-12-07, the 2-core CPU-plugin machine shared with three other builds and test
runs, so walls are noisy; CPU seconds and counts are the steadier figures):
- e1d9dec, `--quick --cases generate_static`: cold 26.0 s, 207 programs compiled (20.2 s of
  compiles, 12.0 CPU s); warm 6.8 s, 207 loaded from disk in 0.6 s.
- The warm first generate() with StaticCache is Dynamo's: Transformers compiles the decode step
  with torch.compile on tpu; under cProfile Dynamo took 8.5 of 11.4 s (AOTAutograd and the tpu
  backend 2.6 s of it), loading the 207 programs 0.8 s. With the default cache (no Dynamo),
  loading 301 programs is half or more of a 0.6-2.5 s warm first call.
- Per-op programs exact at any effort compiled quickly (TORCH_TPU_QUICK_OP_COMPILE), default
  cache, cold, 3 interleaved pairs off/on: wall 26.7 -> 23.0 s, CPU 12.5 -> 11.4 s, compile
  26.0 -> 22.3 s; 216 of 301 programs quick. StaticCache: 174 of 207 quick, CPU 8.2 -> 8.2 s.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = ("generate_default", "generate_static", "train_fused", "train_compiled")
NEW_TOKENS = 24


def child(case):
    """One case in this fresh process; prints one JSON line."""
    t0 = time.perf_counter()
    # This folder holds kernels.py: left on sys.path, Transformers' probe for the `kernels`
    # package would import it (and JAX with it) in the middle of the first call.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    os.environ.setdefault("TORCH_TPU_QUIET", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    import torch_tpu
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(  # examples/demo.py generate_tokens()
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    prompt = torch.randint(3, 256, (1, 8))
    ready = time.perf_counter()
    before = torch_tpu.metrics()
    cpu0 = time.process_time()
    start = time.perf_counter()
    if case.startswith("generate"):
        model = model.eval().to("tpu")
        extra = {"cache_implementation": "static"} if case == "generate_static" else {}
        out = model.generate(prompt.to("tpu"), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=False, pad_token_id=0, **extra)
        out.cpu()
    else:
        torch_tpu.set_eager_mode("fused")
        model = model.train().to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        ids = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1)).to("tpu")

        def step():
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        if case == "train_compiled":
            step = torch.compile(step, backend="tpu")
        step().item()
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    after = torch_tpu.metrics(wait=True)  # background compiles done: their counts belong here

    def delta(name):
        return after.get(name, 0) - before.get(name, 0)

    print(json.dumps({
        "wall_s": wall, "before_s": ready - t0, "cpu_s": cpu,
        "compiled": delta("programs_compiled"), "quick": delta("programs_compiled_quick"), "loaded": delta("disk_cache_hits"),
        "shared": delta("compile_cache_hits"), "compile_s": delta("compile_time_s"),
        "load_s": delta("disk_load_time_s"),
    }))


def run_child(case, cache_dir, cores, env_extra):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir, **env_extra)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", case]
    if cores != "all":
        cmd = ["taskset", "-c", ",".join(str(c) for c in range(int(cores)))] + cmd
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{case} failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3, help="fresh cold+warm pairs per case (medians)")
    parser.add_argument("--quick", action="store_true", help="one pair per case")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--cores", default="all", help="comma list of 'all' and core counts for taskset, e.g. 1,all")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the children (repeatable)")
    parser.add_argument("--json", help="also write the medians here")
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    repeats = 1 if args.quick else args.repeats
    env_extra = dict(kv.split("=", 1) for kv in args.env)
    cols = ("wall_s", "process_s", "before_s", "cpu_s", "compiled", "quick", "loaded", "shared", "compile_s", "load_s")
    print(f"# first_call: repeats {repeats}, {time.strftime('%Y-%m-%d %H:%M')}, env {env_extra or '-'}")
    print(f"{'case':18} {'cores':5} {'cache':5} " + " ".join(f"{c:>10}" for c in cols))
    table = {}
    for case in args.cases.split(","):
        for cores in args.cores.split(","):
            runs = {"cold": [], "warm": []}
            for _ in range(repeats):
                with tempfile.TemporaryDirectory(prefix="first_call_") as folder:
                    runs["cold"].append(run_child(case, folder, cores, env_extra))
                    runs["warm"].append(run_child(case, folder, cores, env_extra))
            for cache, results in runs.items():
                med = {c: statistics.median(r[c] for r in results) for c in cols}
                table[f"{case}/{cores}/{cache}"] = med
                print(f"{case:18} {cores:5} {cache:5} " + " ".join(
                    f"{med[c]:10.2f}" if isinstance(med[c], float) else f"{med[c]:10}" for c in cols), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)


if __name__ == "__main__":
    main()
