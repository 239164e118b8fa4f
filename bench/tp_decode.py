"""Tensor-parallel Llama decode step on 1, 2 and 4 devices of one process (issue 34), ranks as
threads (torch_tpu.distributed.run_in_threads), DTensor's colwise/rowwise plan over the attention
and MLP projections, the all-reduces on the devices. Each rank count runs in the same process;
the table gives the median time of one greedy decode step (one token per sequence after a KV cache
of the 32-token prompt, cropped back after each step so that every step has the same shapes) and its
ratio to one device.

With --tpu-topology every program of the step (each rank's, and the replicated collectives) is
also compiled for that TPU topology by libtpu, and the table adds the cost model's time of one
rank's step: the compiler's estimate, not a measurement. On the CPU plugin the "devices" share
the host's cores, so more ranks are not faster here; the TPU column is what the split buys.

    TORCH_TPU_NUM_DEVICES=4 python bench/tp_decode.py [--ranks 1,2,4] [--steps 8] [--tpu-topology v5e:2x2]
"""
import argparse
import copy
import os
import statistics
import time

os.environ.setdefault("TORCH_TPU_NUM_DEVICES", "4")
os.environ.setdefault("TORCH_TPU_QUIET", "1")

import torch  # noqa: E402
import torch_tpu  # noqa: E402
from torch_tpu.distributed import run_in_threads  # noqa: E402

CONFIG = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=2, num_attention_heads=16,
              num_key_value_heads=4, attn_implementation="eager")


def build():
    import transformers
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**CONFIG)).eval()


def plan(config):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    p = {}
    for i in range(config.num_hidden_layers):
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            p[f"model.layers.{i}.{name}"] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            p[f"model.layers.{i}.{name}"] = RowwiseParallel()
    return p


def decode(rank, world, ref, prompt, steps):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    dev = torch.device("tpu", rank)
    model = copy.deepcopy(ref).to(dev)
    if world > 1:
        model = parallelize_module(model, init_device_mesh("tpu", (world,)), plan(ref.config))
    times = []
    with torch.no_grad():
        out = model(input_ids=prompt.to(dev), use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(steps):
            start = time.perf_counter()
            out = model(input_ids=token, past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            cache.crop(-1)  # every step decodes position 32: the same shapes, no new programs
            token.cpu()
            times.append(time.perf_counter() - start)
    return statistics.median(times[2:]), token.cpu()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", default="1,2,4")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--tpu-topology")
    a = p.parse_args()
    if a.tpu_topology:
        from torch_tpu import tpu_target
        tpu_target.enable(a.tpu_topology)
    ref = build()
    prompt = torch.randint(0, CONFIG["vocab_size"], (a.batch, 32), generator=torch.Generator().manual_seed(0))
    print(f"Llama (2 layers, hidden 1024, 16/4 heads) greedy decode, batch {a.batch}, f32, "
          f"{torch_tpu._C._platform()} plugin; medians of {a.steps - 2} steps")
    cols = f" {a.tpu_topology + ' ms/rank':>18} {'programs':>9}" if a.tpu_topology else ""
    print(f"{'ranks':>5} {'step ms':>9} {'vs 1':>6}{cols}")
    base, first_tokens = None, None
    for world in (int(r) for r in a.ranks.split(",")):
        if a.tpu_topology:
            tpu_target.report(wait=True, clear=True)
        results = run_in_threads(decode, world, ref, prompt, a.steps)
        step = max(r[0] for r in results)
        tokens = results[0][1]
        first_tokens = tokens if first_tokens is None else first_tokens
        same = "" if torch.equal(tokens, first_tokens) else "  (tokens differ from 1 rank!)"
        base = base or step
        extra = ""
        if a.tpu_topology:
            rows = tpu_target.report(wait=True, clear=True)
            # One rank's programs: the per-op programs are the same text on every rank (deduplicated).
            ok = [r for r in rows if r["ok"]]
            ms = sum(r["modelled_ms"] for r in {r["module_text"]: r for r in ok}.values())
            extra = f" {ms:>18.3f} {len(ok):>4}/{len(rows):<4}"
        print(f"{world:>5} {step * 1e3:>9.2f} {step / base:>6.2f}{extra}{same}", flush=True)


if __name__ == "__main__":
    main()
