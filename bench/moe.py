"""Mixture-of-experts decoding: tokens/s of a Qwen3-MoE-shaped model (32 experts, top-8,
hidden 256, moe_intermediate 128) with a StaticCache at batch 1, 8 and 64, for Transformers'
experts implementations grouped_mm, batched_mm and eager, on tpu in fused eager mode and
compiled (torch.compile(backend="tpu")), next to the same decode in PyTorch on the CPU. The
setups run in alternating rounds in one process; ratios are medians of per-round ratios.
Then prefill of 512 tokens (batch 1) per setup.

    .venv/bin/python bench/moe.py [--batches 1 8 64] [--rounds 3] [--steps 3] [--layers 2] [--json out.json]
"""
import argparse
import copy
import json
import os
import statistics
import time

os.environ.setdefault("TORCH_TPU_QUIET", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import warnings  # noqa: E402

import torch  # noqa: E402

import torch_tpu  # noqa: E402

warnings.filterwarnings("ignore")
IMPLS = ("grouped_mm", "batched_mm", "eager")
KINDS = ("tpu fused", "tpu compiled", "cpu")
CACHE_LEN = 640


def build(layers):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    cfg = Qwen3MoeConfig(vocab_size=1024, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
                         num_experts=32, num_experts_per_tok=8, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=64, max_position_embeddings=CACHE_LEN,
                         decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False)
    torch.manual_seed(0)
    return Qwen3MoeForCausalLM(cfg).eval()


class Decoder:
    """One greedy decode step at a time over a StaticCache; the next token is read on the host
    each step (as generate() does). Positions wrap inside the cache, so steps never run out."""

    def __init__(self, model, kind, batch):
        from transformers import StaticCache

        self.device = "cpu" if kind == "cpu" else "tpu"
        self.model = model if kind == "cpu" else copy.deepcopy(model).to("tpu")
        self.forward = torch.compile(self.model, backend="tpu") if kind == "tpu compiled" else self.model
        self.kind = kind
        self.cache = StaticCache(config=model.config, max_cache_len=CACHE_LEN)
        self.token = torch.full((batch, 1), 5, dtype=torch.long, device=self.device)
        self.position = 0

    def step(self):
        with torch.no_grad(), torch_tpu.eager_mode("fused"):
            pos = torch.tensor([self.position], device=self.device)
            logits = self.forward(input_ids=self.token, past_key_values=self.cache, cache_position=pos,
                                  use_cache=True).logits
            self.token = logits[:, -1:].argmax(-1)
            self.token.cpu()
        self.position = (self.position + 1) % (CACHE_LEN - 1)


def prefill_rate(model, kind, impl, length=512, repeats=3):
    """Tokens/s of one forward over a `length`-token prompt (batch 1)."""
    from transformers import StaticCache

    device = "cpu" if kind == "cpu" else "tpu"
    m = model if kind == "cpu" else copy.deepcopy(model).to("tpu")
    m.set_experts_implementation(impl)
    forward = torch.compile(m, backend="tpu") if kind == "tpu compiled" else m
    ids = torch.randint(3, 1000, (1, length), generator=torch.Generator().manual_seed(0)).to(device)
    pos = torch.arange(length, device=device)
    times = []
    for i in range(repeats + 1):
        cache = StaticCache(config=model.config, max_cache_len=CACHE_LEN)
        start = time.perf_counter()
        with torch.no_grad(), torch_tpu.eager_mode("fused"):
            forward(input_ids=ids, past_key_values=cache, cache_position=pos, use_cache=True).logits[:, -1].cpu()
        if i:  # the first call compiles
            times.append(time.perf_counter() - start)
    return length / statistics.median(times)


def decode_rates(model, batch, rounds, steps, impls, kinds):
    """Tokens/s per (impl, kind), timed in alternating rounds; also the per-round ratios."""
    setups = {}
    for impl in impls:
        for kind in kinds:
            m = copy.deepcopy(model)
            m.set_experts_implementation(impl)
            try:
                d = Decoder(m, kind, batch)
                d.model.set_experts_implementation(impl)
                for _ in range(2):  # compile, then the steady programs
                    d.step()
                setups[(impl, kind)] = d
            except Exception as e:  # noqa: BLE001 - report the cell, keep the others
                print(f"  batch {batch} {impl} {kind}: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
    rates = {key: [] for key in setups}
    order = list(setups.items())
    for r in range(rounds):
        for key, d in order[r % len(order):] + order[:r % len(order)]:
            d.step()  # untimed: the previous setup's work and threads settle
            start = time.perf_counter()
            for _ in range(steps):
                d.step()
            rates[key].append(batch * steps / (time.perf_counter() - start))
    return rates


def ratio(rates, a, b):
    if a not in rates or b not in rates:
        return None
    return statistics.median(x / y for x, y in zip(rates[a], rates[b]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="*", default=[1, 8, 64])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--impls", nargs="*", default=list(IMPLS))
    parser.add_argument("--kinds", nargs="*", default=list(KINDS))
    parser.add_argument("--no-prefill", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    model = build(args.layers)
    print(f"platform: {torch.tpu.get_device_name()}; torch {torch.__version__}; CPU threads {torch.get_num_threads()}")
    report = {"decode": {}, "prefill": {}}
    for batch in args.batches:
        rates = decode_rates(model, batch, args.rounds, args.steps, args.impls, args.kinds)
        cells = {f"{impl} / {kind}": statistics.median(r) for (impl, kind), r in rates.items()}
        ratios = {
            "grouped_mm fused / eager fused": ratio(rates, ("grouped_mm", "tpu fused"), ("eager", "tpu fused")),
            "grouped_mm compiled / eager fused": ratio(rates, ("grouped_mm", "tpu compiled"), ("eager", "tpu fused")),
            "grouped_mm fused / grouped_mm cpu": ratio(rates, ("grouped_mm", "tpu fused"), ("grouped_mm", "cpu")),
            "grouped_mm compiled / grouped_mm cpu": ratio(rates, ("grouped_mm", "tpu compiled"), ("grouped_mm", "cpu")),
            "batched_mm fused / eager fused": ratio(rates, ("batched_mm", "tpu fused"), ("eager", "tpu fused")),
        }
        report["decode"][batch] = {"tokens_per_s": cells, "ratios": ratios}
        print(f"decode batch {batch} (tokens/s, median of {args.rounds} rounds of {args.steps} steps):")
        for k, v in cells.items():
            print(f"  {k:28s} {v:10.1f}")
        for k, v in ratios.items():
            if v is not None:
                print(f"  {k:40s} {v:7.2f}x")
    if not args.no_prefill:
        print("prefill 512 tokens, batch 1 (tokens/s):")
        for impl in args.impls:
            for kind in args.kinds:
                try:
                    rate = prefill_rate(model, kind, impl)
                except Exception as e:  # noqa: BLE001
                    rate = None
                    print(f"  {impl} / {kind}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
                report["prefill"][f"{impl} / {kind}"] = rate
                if rate is not None:
                    print(f"  {impl + ' / ' + kind:28s} {rate:10.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    main()
