"""Greedy decoding of a tiny random Llama with Hugging Face generate(): tokens/s on tpu in the
strict and fused eager modes (StaticCache) next to CPU eager in the same run, and the time to
first token of a fresh process with a cold (empty) and a warm (populated) compilation cache
(TORCH_TPU_CACHE_DIR). Medians of repeated timings.

    python bench/generate.py [--new-tokens 32] [--repeats 3] [--ttft-repeats 3] [--first-calls-rounds 3]
    python bench/generate.py --cold [--first-calls 5] [--first-calls-rounds 3]   # fresh processes, empty cache
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
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import warnings  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)  # one-time CPU fallback notices

import torch  # noqa: E402

import torch_tpu  # noqa: E402

PROMPT_LEN = 16


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


def prompt():
    return torch.randint(3, 256, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(0))


def generate(model, ids, new_tokens):
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                         cache_implementation="static")
    return out.cpu()  # waits for the device


def tokens_per_s(model, device, new_tokens, repeats):
    ids = prompt().to(device)
    first = time.perf_counter()
    tokens = generate(model, ids, new_tokens)  # warm-up: compiles
    first = time.perf_counter() - first
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        generate(model, ids, new_tokens)
        rates.append(new_tokens / (time.perf_counter() - start))
    return statistics.median(rates), first, tokens


def settled_metrics():
    """The counters once background compiles are done (builds before metrics(wait=...) waited always)."""
    try:
        return torch_tpu.metrics(wait=True)
    except TypeError:
        return torch_tpu.metrics()


def ttft_child():
    """Runs in a fresh process: time from before the model moves to tpu to the first token."""
    start = time.perf_counter()
    model = tiny_llama().to("tpu")
    ids = prompt().to("tpu")
    generate(model, ids, 1)
    seconds = time.perf_counter() - start
    m = settled_metrics()
    print(json.dumps({"ttft_s": seconds, "programs_compiled": m["programs_compiled"],
                      "disk_cache_hits": m["disk_cache_hits"]}))


def calls_child(device, calls, new_tokens):
    """Runs in a fresh process: seconds of each of the first `calls` generate() calls."""
    model = tiny_llama().to(device)
    ids = prompt().to(device)
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        generate(model, ids, new_tokens)
        seconds.append(time.perf_counter() - start)
    start = time.perf_counter()
    pending = torch_tpu.metrics().get("background_compiles_pending")  # never waits
    metrics_s = time.perf_counter() - start
    m = settled_metrics()
    # Where the first call's time goes: Transformers compiles the decode step with torch.compile
    # on tpu (not on cpu), so Dynamo's tracing (PyTorch's) is part of it; the tpu backend's share
    # (AOTAutograd and our lowering) is inside it; programs load from disk or compile.
    dynamo = {}
    if "torch._dynamo" in sys.modules:
        from torch._dynamo.utils import compilation_time_metrics

        dynamo = {"dynamo_s": sum(compilation_time_metrics.get("_compile.compile_inner", [])),
                  "backend_s": sum(compilation_time_metrics.get("OutputGraph.call_user_compiler", []))}
    print(json.dumps({"calls_s": seconds, "metrics_s": metrics_s, "pending_after_calls": pending,
                      "fused_compile_waits": m["fused_compile_waits"], "programs_compiled": m["programs_compiled"],
                      "fused_graphs_compiled": m["fused_graphs_compiled"], "disk_cache_hits": m["disk_cache_hits"],
                      "compile_s": m["compile_time_s"], "disk_load_s": m.get("disk_load_time_s", 0.0), **dynamo}))


def run_child(cache_dir, *child_args):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "faulthandler", __file__, *(child_args or ["--ttft-child"])],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"time-to-first-token child failed (rc {proc.returncode}, cache {cache_dir}):\n"
                         + proc.stderr[-3000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ttft-repeats", type=int, default=3)
    parser.add_argument("--ttft-only", action="store_true", help="only the time-to-first-token part")
    parser.add_argument("--first-calls", type=int, default=5,
                        help="time each of the first N generate() calls of a fresh process (0: skip)")
    parser.add_argument("--first-calls-rounds", type=int, default=3,
                        help="alternating rounds (cold, warm, cpu) of the first-calls timing; medians")
    parser.add_argument("--cold", action="store_true",
                        help="only the first calls of fresh processes with an empty cache, each round printed")
    parser.add_argument("--ttft-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calls-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ttft_child:
        return ttft_child()
    if args.calls_child:
        return calls_child(args.calls_child, args.first_calls, args.new_tokens)
    if args.cold:
        return cold_calls(args)

    if not args.ttft_only:
        throughput(args)
    time_to_first_token(args)
    if args.first_calls:
        first_calls(args)


def throughput(args):
    import transformers

    transformers.logging.set_verbosity_error()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, tpu on "
          f"{torch.tpu.get_device_name()}; tiny Llama (hidden 64, 2 layers), prompt {PROMPT_LEN}, "
          f"{args.new_tokens} new tokens, StaticCache, medians of {args.repeats}")
    model = tiny_llama()
    cpu_rate, cpu_first, want = tokens_per_s(model, "cpu", args.new_tokens, args.repeats)
    rows = [("cpu eager", cpu_rate, cpu_first, True, None)]
    model = model.to("tpu")
    for mode in ("strict", "fused"):
        with torch_tpu.eager_mode(mode):
            before = settled_metrics()
            rate, first, got = tokens_per_s(model, "tpu", args.new_tokens, args.repeats)
            after = settled_metrics()
        compiled = (after["programs_compiled"] + after["fused_graphs_compiled"]
                    - before["programs_compiled"] - before["fused_graphs_compiled"])
        rows.append((f"tpu {mode}", rate, first, torch.equal(got, want), compiled))
    print(f"\n{'':10s} {'tokens/s':>9s} {'vs cpu':>7s} {'first call s':>13s} {'same tokens':>12s} {'programs compiled':>18s}")
    for name, rate, first, same, compiled in rows:
        print(f"{name:10s} {rate:9.1f} {rate / cpu_rate:6.2f}x {first:13.2f} {str(same):>12s} "
              f"{'' if compiled is None else compiled:>18}")
    print(f"cpu fallbacks on tpu: {torch_tpu.metrics()['cpu_fallbacks_by_op']}")


def time_to_first_token(args):

    cold, warm = [], []
    with tempfile.TemporaryDirectory() as populated:
        for _ in range(args.ttft_repeats):
            with tempfile.TemporaryDirectory() as empty:
                cold.append(run_child(empty))
        run_child(populated)  # populate
        for _ in range(args.ttft_repeats):
            warm.append(run_child(populated))
    print(f"\ntime to first token in a fresh process (model to tpu + prefill + first token), "
          f"medians of {args.ttft_repeats}:")
    for name, runs in (("cold cache", cold), ("warm cache", warm)):
        print(f"  {name}: {statistics.median(r['ttft_s'] for r in runs):6.2f} s "
              f"(whole process {statistics.median(r['process_s'] for r in runs):6.2f} s; programs compiled "
              f"{statistics.median(r['programs_compiled'] for r in runs):.0f}, loaded from disk "
              f"{statistics.median(r['disk_cache_hits'] for r in runs):.0f})")


def cold_calls(args):
    """Each of the first N generate() calls of fresh processes with an empty cache, round by
    round (the first minute of a new user, where a call that waits for background compiles
    shows), with how long torch_tpu.metrics() took right after them and what was still pending."""
    child = ["--calls-child", "tpu", "--first-calls", str(args.first_calls), "--new-tokens", str(args.new_tokens)]
    print(f"first {args.first_calls} generate() calls of a fresh process with an empty cache ({args.new_tokens} new "
          f"tokens), seconds; TORCH_TPU_FUSED_COMPILE_THREADS={os.environ.get('TORCH_TPU_FUSED_COMPILE_THREADS', 'default')}")
    runs = []
    for i in range(args.first_calls_rounds):
        with tempfile.TemporaryDirectory() as empty:
            r = run_child(empty, *child)
        runs.append(r)
        calls = " ".join(f"{s:6.2f}" for s in r["calls_s"])
        print(f"  round {i + 1}: {calls}   metrics() {r.get('metrics_s', 0) * 1e3:7.1f} ms "
              f"(compiles pending {r.get('pending_after_calls')}), fused graphs compiled {r['fused_graphs_compiled']}, "
              f"flushes that waited for a compile {r.get('fused_compile_waits')}", flush=True)
    med = [statistics.median(r["calls_s"][i] for r in runs) for i in range(args.first_calls)]
    print("  median:  " + " ".join(f"{s:6.2f}" for s in med))
    later = [max(r["calls_s"][2:]) / r["calls_s"][1] for r in runs if len(r["calls_s"]) > 2]
    if later:
        print(f"  slowest of calls 3..{args.first_calls} / call 2: median {statistics.median(later):.2f}x")


def first_calls(args):
    """The first minute: each of the first N generate() calls of a fresh process on tpu (fused, the
    default mode) with an empty and with a populated cache, next to PyTorch CPU eager's first calls
    in a fresh process of its own. No call should be slower than the one before it. Rounds of
    (cold, warm, cpu) alternate, so a shared machine's load falls on all three alike; medians."""
    child = ["--calls-child", "tpu", "--first-calls", str(args.first_calls), "--new-tokens", str(args.new_tokens)]
    runs = {"tpu cold cache": [], "tpu warm cache": [], "cpu eager": []}
    for _ in range(args.first_calls_rounds):
        with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as scratch:
            runs["tpu cold cache"].append(run_child(empty, *child))
            runs["tpu warm cache"].append(run_child(empty, *child))  # the same folder, now populated
            runs["cpu eager"].append(run_child(scratch, *(child[:1] + ["cpu"] + child[2:])))
    med = {name: [statistics.median(r["calls_s"][i] for r in rs) for i in range(args.first_calls)]
           for name, rs in runs.items()}
    print(f"\nfirst {args.first_calls} generate() calls of a fresh process ({args.new_tokens} new tokens), "
          f"seconds, medians of {args.first_calls_rounds} alternating rounds:")
    for name, rs in runs.items():
        calls = " ".join(f"{s:7.2f}" for s in med[name])
        extra = ""
        if name != "cpu eager":
            m = {k: statistics.median(r.get(k, 0.0) for r in rs) for k in rs[0] if k != "calls_s"}
            extra = (f"  programs compiled {m['programs_compiled']:.0f} ({m['compile_s']:.2f} s), fused graphs "
                     f"compiled {m['fused_graphs_compiled']:.0f}, loaded from disk {m['disk_cache_hits']:.0f} "
                     f"({m['disk_load_s']:.2f} s); torch.compile {m.get('dynamo_s', 0):.2f} s "
                     f"(its tpu backend {m.get('backend_s', 0):.2f} s)")
        print(f"  {name:15s} {calls}{extra}")
    for name in ("tpu cold cache", "tpu warm cache"):
        ratios = " ".join(f"{t / c:6.2f}x" for t, c in zip(med[name], med["cpu eager"]))
        print(f"  {name + ' / cpu':21s} {ratios}")
    # Dynamo's own tracing: torch.compile's time less the backend's (AOTAutograd, lowering, loads).
    warm = statistics.median(r["calls_s"][0] - r.get("dynamo_s", 0.0) + r.get("backend_s", 0.0)
                             for r in runs["tpu warm cache"])
    print(f"  warm-cache first call / cpu eager first call: {med['tpu warm cache'][0] / med['cpu eager'][0]:.2f}x "
          f"({warm / med['cpu eager'][0]:.2f}x without Dynamo's tracing)")


if __name__ == "__main__":
    main()
