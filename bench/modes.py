"""Steps/s of training and decoding in the three eager modes, in one run, as ratios; cold vs
warm start of a fresh process; peak device memory per mode. Medians of repeated timings."""
import copy
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TORCH_TPU_QUIET", "1")
import torch  # noqa: E402

import torch_tpu  # noqa: E402

MODES = ("debug", "strict", "fused")


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                               torch.nn.Linear(256, 10))


def llama_train_step(model, opt, ids):
    opt.zero_grad()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    return loss.item()


def mlp_train_step(model, opt, batch):
    x, y = batch
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def steps_per_s(fn, warmup=3, steps=10, repeats=5):
    for _ in range(warmup):
        fn()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            fn()
        rates.append(steps / (time.perf_counter() - start))
    return statistics.median(rates)


CPU = "cpu eager"  # reference: the same step in PyTorch on the CPU, timed in the same rounds


def interleaved_rates(steps_by_mode, warmup=3, steps=10, rounds=15, switch_warmup=2):
    """Steps/s per mode, timed in alternating rounds (debug, strict, fused, cpu, then strict,
    fused, cpu, debug, ...) so that a slow spell of a noisy machine hits every mode alike. Returns the median rate of each mode
    and the medians over rounds of the fused/strict and strict/cpu ratios of the same round.
    The first `switch_warmup` steps after each switch are not timed: they pay for the previous
    setup (its last work still running, PyTorch's OpenMP workers spinning after a CPU step)."""
    def mode_of(mode):
        return torch_tpu.eager_mode("strict" if mode == CPU else mode)

    for mode, fn in steps_by_mode.items():
        with mode_of(mode):
            for _ in range(warmup):
                fn()
    rates = {mode: [] for mode in steps_by_mode}
    order = list(steps_by_mode.items())
    for r in range(rounds):
        # Each round starts one setup later, so that no mode always follows the same one.
        for mode, fn in order[r % len(order):] + order[:r % len(order)]:
            with mode_of(mode):
                for _ in range(switch_warmup):
                    fn()
                start = time.perf_counter()
                for _ in range(steps):
                    fn()
                rates[mode].append(steps / (time.perf_counter() - start))
    ratios = {"fused/strict": statistics.median(f / s for f, s in zip(rates["fused"], rates["strict"]))}
    if CPU in rates:
        ratios["cpu/strict"] = statistics.median(c / s for c, s in zip(rates[CPU], rates["strict"]))
    return {mode: statistics.median(r) for mode, r in rates.items()}, ratios


def measure(name, build, step, batch):
    results, steps = {}, {}
    for mode in MODES:
        with torch_tpu.eager_mode(mode):
            torch.tpu.synchronize()
            torch.tpu.reset_peak_memory_stats()
            base = torch.tpu.memory_allocated()  # the other modes' models, still alive
            model = copy.deepcopy(build).to("tpu").train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            b = tuple(t.to("tpu") for t in batch) if isinstance(batch, tuple) else batch.to("tpu")
            step(model, opt, b)
            step(model, opt, b)
            results[mode] = {"peak_bytes": torch.tpu.max_memory_allocated() - base}
            steps[mode] = lambda model=model, opt=opt, b=b: step(model, opt, b)
    model = copy.deepcopy(build).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps[CPU] = lambda model=model, opt=opt, b=batch: step(model, opt, b)
    rates, ratios = interleaved_rates(steps)
    for mode in MODES + (CPU,):
        results.setdefault(mode, {})["steps_per_s"] = rates[mode]
    results.update(ratios)
    return results


def decode_step_rate(model_cpu):
    """One-token decode steps with a StaticCache: shapes stay fixed, so programs are reused."""
    from transformers import StaticCache

    # Transformers 5.24 renamed past_key_values to cache (the old name warns).
    cache_arg = "cache" if "cache" in inspect.signature(model_cpu.forward).parameters else "past_key_values"
    steps = {}
    for mode in MODES:
        with torch_tpu.eager_mode(mode):
            model = copy.deepcopy(model_cpu).to("tpu")
            ids = torch.tensor([[1, 2, 3, 4]], device="tpu")
            with torch.no_grad():
                cache = StaticCache(config=model.config, max_cache_len=64)
                out = model(input_ids=ids, **{cache_arg: cache}, use_cache=True,
                            cache_position=torch.arange(4, device="tpu"))
            state = {"token": out.logits[:, -1:].argmax(-1), "position": 4}

            def step(model=model, cache=cache, state=state):
                with torch.no_grad():
                    o = model(input_ids=state["token"], **{cache_arg: cache}, use_cache=True,
                              cache_position=torch.tensor([state["position"]], device="tpu"))
                state["token"] = o.logits[:, -1:].argmax(-1)
                state["token"].cpu()
                state["position"] += 1

            steps[mode] = step
    # 3 + 6 * (1 + 8) = 57 steps after the 4-token prompt: inside the 64-position cache.
    rates, ratios = interleaved_rates(steps, warmup=3, steps=8, rounds=6, switch_warmup=1)
    results = {mode: {"steps_per_s": rates[mode]} for mode in MODES}
    results.update(ratios)
    return results


COLD_WARM_CHILD = r"""
import time, torch, torch_tpu, json, sys
sys.path.insert(0, {bench!r})
from modes import mlp, mlp_train_step
torch.manual_seed(0)
m = mlp().to("tpu"); opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
b = (torch.randn(32, 64).to("tpu"), torch.randint(0, 10, (32,)).to("tpu"))
start = time.perf_counter(); mlp_train_step(m, opt, b); first = time.perf_counter() - start
print(json.dumps({{"first_step_s": first, "compiled": torch_tpu.metrics()["programs_compiled"],
                  "disk_hits": torch_tpu.metrics()["disk_cache_hits"]}}))
"""


def cold_warm():
    code = COLD_WARM_CHILD.format(bench=os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache, TORCH_TPU_QUIET="1")
        runs = [json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                          check=True).stdout.strip().splitlines()[-1]) for _ in range(3)]
    return runs[0], runs[1:]


def main():
    print(f"platform: {torch.tpu.get_device_name()}")
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    only = set(sys.argv[1:])
    table = {}
    if not only or "mlp" in only:
        table["mlp train step"] = measure("mlp", mlp(), mlp_train_step, (x, y))
    try:
        llama = tiny_llama()
        ids = torch.randint(0, 128, (2, 16))
        if not only or "train" in only:
            table["tiny llama train step"] = measure("llama", llama, llama_train_step, ids)
        if not only or "decode" in only:
            table["tiny llama decode step"] = decode_step_rate(llama)
    except ImportError:
        print("transformers is not installed: llama rows skipped")
    print(f"{'workload':26s} {'debug':>9s} {'strict':>9s} {'fused':>9s} {'fused/strict':>13s} "
          f"{'cpu eager':>10s} {'cpu/strict':>11s}  steps/s (medians)")
    for name, r in table.items():
        rates = [r[m]["steps_per_s"] for m in MODES]
        line = f"{name:26s} {rates[0]:9.1f} {rates[1]:9.1f} {rates[2]:9.1f} {r['fused/strict']:12.2f}x"
        if CPU in r:
            line += f" {r[CPU]['steps_per_s']:10.1f} {r['cpu/strict']:10.2f}x"
        print(line)
    print("(modes timed in alternating rounds; ratios are medians of per-round ratios. 'cpu eager' is the\n"
          " same step in PyTorch on the CPU, timed in the same rounds: on a step this small most of the\n"
          " time is PyTorch's own Python, which every mode and the CPU pay alike)")
    for name, r in table.items():
        if "peak_bytes" in r["strict"]:
            print(f"peak device memory, {name}: " + ", ".join(f"{m} {r[m]['peak_bytes'] / 2**20:.2f} MiB" for m in MODES))
    if only and "coldwarm" not in only:
        return
    cold, warm = cold_warm()
    warm_s = statistics.median(w["first_step_s"] for w in warm)
    print(f"first mlp train step in a fresh process: cold cache {cold['first_step_s']:.2f} s "
          f"({cold['compiled']} compiles), warm cache {warm_s:.2f} s ({warm[0]['disk_hits']} disk hits): "
          f"{cold['first_step_s'] / warm_s:.1f}x")


if __name__ == "__main__":
    main()
