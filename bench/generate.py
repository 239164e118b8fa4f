"""Greedy decoding of a tiny random Llama with Hugging Face generate(): tokens/s on tpu in the
strict and fused eager modes (StaticCache) next to CPU eager in the same run, and the time to
first token of a fresh process with a cold (empty) and a warm (populated) compilation cache
(TORCH_TPU_CACHE_DIR). Medians of repeated timings.

    python bench/generate.py [--new-tokens 32] [--repeats 3] [--ttft-repeats 3]
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


def ttft_child():
    """Runs in a fresh process: time from before the model moves to tpu to the first token."""
    start = time.perf_counter()
    model = tiny_llama().to("tpu")
    ids = prompt().to("tpu")
    generate(model, ids, 1)
    seconds = time.perf_counter() - start
    m = torch_tpu.metrics()
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
    m = torch_tpu.metrics()
    print(json.dumps({"calls_s": seconds, "programs_compiled": m["programs_compiled"],
                      "fused_graphs_compiled": m["fused_graphs_compiled"], "disk_cache_hits": m["disk_cache_hits"]}))


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
    parser.add_argument("--ttft-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calls-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ttft_child:
        return ttft_child()
    if args.calls_child:
        return calls_child(args.calls_child, args.first_calls, args.new_tokens)

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
            before = torch_tpu.metrics()
            rate, first, got = tokens_per_s(model, "tpu", args.new_tokens, args.repeats)
            after = torch_tpu.metrics()
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


def first_calls(args):
    """The first minute: each of the first N generate() calls of a fresh process on tpu (fused, the
    default mode) with an empty and with a populated cache, next to PyTorch CPU eager's first calls
    in a fresh process of its own. No call should be slower than the one before it."""
    child = ["--calls-child", "tpu", "--first-calls", str(args.first_calls), "--new-tokens", str(args.new_tokens)]
    with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as scratch:
        cold = run_child(empty, *child)
        warm = run_child(empty, *child)  # the same folder, now populated by the cold run
        cpu = run_child(scratch, *(child[:1] + ["cpu"] + child[2:]))
    print(f"\nfirst {args.first_calls} generate() calls of a fresh process ({args.new_tokens} new tokens), seconds:")
    for name, r in (("tpu cold cache", cold), ("tpu warm cache", warm), ("cpu eager", cpu)):
        calls = " ".join(f"{s:7.2f}" for s in r["calls_s"])
        extra = "" if name == "cpu eager" else (f"  programs compiled {r['programs_compiled']}, fused graphs compiled "
                                                f"{r['fused_graphs_compiled']}, loaded from disk {r['disk_cache_hits']}")
        print(f"  {name:15s} {calls}{extra}")
    print(f"  warm-cache first call / cpu eager first call: {warm['calls_s'][0] / cpu['calls_s'][0]:.2f}x")


if __name__ == "__main__":
    main()
