"""Varying lengths (issue 47): what a new sequence length costs once a workload is warm.

Tiny random models built from their configs (no downloads): Llama (2 layers, hidden 128,
vocab 512) and Qwen2 of the same size. Workloads, each warmed up on a spread of lengths and
then run on lengths never seen before:
  gen-dynamic  generate() with the default cache (DynamicCache), greedy, fused eager mode
  gen-static   the same with cache_implementation="static"
  train        AdamW steps on batches of 4 padded to the longest sequence (attention mask)
  compiled-fwd the Llama forward under torch.compile(backend="tpu") (Dynamo's automatic dynamic)
  compiled-train a compiled loss (forward, cross entropy) with its backward and an AdamW step
Per workload: programs compiled per new length (torch_tpu.metrics(): programs_compiled), bucket
pads and fallbacks, time on tpu against CPU eager in the same run (ratio), and whether the
values agree with CPU (greedy tokens equal; the largest relative loss difference).

    python bench/shapes.py [--new-lengths 10] [--quick] [--only gen-static,compiled-fwd] [--family llama,qwen2]
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TORCH_TPU_QUIET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TORCH_TPU_CACHE_DIR", tempfile.mkdtemp(prefix="torch_tpu_shapes_"))  # an empty cache
import warnings  # noqa: E402

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch._dynamo  # noqa: E402

import torch_tpu  # noqa: E402
import torch_tpu.buckets  # noqa: E402

VOCAB = 512
WORKLOADS = ["gen-dynamic", "gen-static", "train", "compiled-fwd", "compiled-train"]


def tiny(family):
    import transformers

    common = dict(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if family == "llama":
        cfg, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    elif family == "qwen2":
        cfg, cls = transformers.Qwen2Config(**common), transformers.Qwen2ForCausalLM
    else:
        raise ValueError(family)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return cls(cfg)


def counters():
    m = torch_tpu.metrics(wait=True)
    return {"programs": m.get("programs_compiled", 0), "pads": m.get("bucket_pads", 0),
            "fallbacks": sum((m.get("bucket_fallbacks_by_op") or {}).values())}


def ids_of(length, batch=1, seed=0):
    g = torch.Generator().manual_seed(seed * 1000 + length)
    return torch.randint(3, VOCAB, (batch, length), generator=g)


class Workload:
    """run(device, length) -> a value to compare with CPU's (tokens or losses)."""

    def __init__(self, name, family, new_tokens):
        self.name, self.family, self.new_tokens = name, family, new_tokens
        self.models = {}

    def model(self, device):
        if device not in self.models:
            m = tiny(self.family)
            self.models[device] = m.to(device)
            if self.name.startswith("compiled"):
                self.models[device] = (m.to(device), self.compiled(m.to(device), device))
            elif self.name == "train":
                self.models[device] = (m.train(), torch.optim.AdamW(m.parameters(), lr=1e-3))
        return self.models[device]

    def compiled(self, m, device):
        if device == "cpu":
            return m
        return torch.compile(m, backend="tpu")

    def run(self, device, length):
        if self.name.startswith("gen"):
            m = self.model(device).eval()
            ids = ids_of(length).to(device)
            extra = {"cache_implementation": "static"} if self.name == "gen-static" else {}
            with torch.no_grad():
                out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=self.new_tokens,
                                 min_new_tokens=self.new_tokens, do_sample=False, pad_token_id=0, **extra)
            return out.cpu().tolist()
        if self.name == "train":
            m, opt = self.model(device)
            lengths = [length, max(1, length - 3), max(1, length // 2), max(1, length - 1)]
            ids = torch.zeros(4, length, dtype=torch.long)
            mask = torch.zeros(4, length, dtype=torch.long)
            for row, n in enumerate(lengths):
                ids[row, :n] = ids_of(n, seed=row)[0]
                mask[row, :n] = 1
            labels = ids.masked_fill(mask == 0, -100)
            out = m(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device))
            out.loss.backward()
            opt.step()
            opt.zero_grad()
            return [out.loss.item()]
        if self.name == "compiled-fwd":
            _, f = self.model(device)
            with torch.no_grad():
                logits = f(ids_of(length, batch=2).to(device)).logits
            return [logits.float().abs().sum().item()]
        if self.name == "compiled-train":
            m, f = self.model(device)
            if not hasattr(self, "opts"):
                self.opts = {}
            opt = self.opts.setdefault(device, torch.optim.AdamW(m.parameters(), lr=1e-3))
            ids = ids_of(length, batch=2).to(device)
            logits = f(ids).logits
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), ids.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            return [loss.item()]
        raise ValueError(self.name)


def compare(name, cpu, tpu):
    """(equal tokens?, largest relative difference of losses)."""
    if name.startswith("gen"):
        return all(a == b for a, b in zip(cpu, tpu)), None
    worst = 0.0
    for a, b in zip(cpu, tpu):
        for x, y in zip(a, b):
            worst = max(worst, abs(x - y) / max(abs(x), 1e-12))
    return None, worst


def lengths_for(quick, new, name):
    """(warm-up lengths, new lengths). The compiled workloads also warm up on one length in each
    default bucket (torch_tpu.buckets) up to the largest new length, so that a new length after
    warm-up meets a bucket already seen, as a server warmed up on its buckets would."""
    warm = [6, 20, 44, 90] if not quick else [6, 20, 44]
    top = 150 if not quick else 60
    if name.startswith("compiled"):
        edges = sorted({torch_tpu.buckets._default(n) for n in range(5, top)})
        warm = sorted(set(warm) | {e - 1 for e in edges})
    rng = random.Random(47)
    pool = [n for n in range(5, top) if n not in warm]
    return warm, sorted(rng.sample(pool, new))


def bench(name, family, args):
    w = Workload(name, family, args.new_tokens)
    warm, new = lengths_for(args.quick, args.new_lengths, name)
    for n in warm:
        w.run("tpu", n)
        w.run("cpu", n)
    per_length, tpu_s, cpu_s, cpu_vals, tpu_vals = [], 0.0, 0.0, [], []
    first = counters()
    for n in new:
        before = counters()
        start = time.perf_counter()
        tpu_vals.append(w.run("tpu", n))
        tpu_s += time.perf_counter() - start
        after = counters()
        per_length.append(after["programs"] - before["programs"])
        start = time.perf_counter()
        cpu_vals.append(w.run("cpu", n))
        cpu_s += time.perf_counter() - start
    last = counters()
    tokens_equal, rel = compare(name, cpu_vals, tpu_vals)
    values = f"tokens equal to CPU: {tokens_equal}" if tokens_equal is not None else f"loss rel. diff {rel:.2e}"
    print(f"{family:6s} {name:15s} new lengths {new}: programs per new length {per_length} (total {sum(per_length)}), "
          f"pads {last['pads'] - first['pads']}, fallbacks {last['fallbacks'] - first['fallbacks']}, "
          f"tpu {tpu_s:.2f}s cpu {cpu_s:.2f}s ratio {tpu_s / max(cpu_s, 1e-9):.1f}x, {values}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--new-lengths", type=int, default=None, help="lengths never seen (default 10; 3 with --quick)")
    p.add_argument("--quick", action="store_true", help="3 new lengths, shorter prompts, 4 new tokens")
    p.add_argument("--new-tokens", type=int, default=None)
    p.add_argument("--only", default=",".join(WORKLOADS))
    p.add_argument("--family", default="llama,qwen2")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)  # family:workload, in this process
    args = p.parse_args()
    args.new_lengths = args.new_lengths or (3 if args.quick else 10)
    args.new_tokens = args.new_tokens or (4 if args.quick else 16)
    if args.child:
        # Enough recompilations that exact shapes compile rather than fall back to eager (Dynamo's 8).
        torch._dynamo.config.recompile_limit = 64
        family, name = args.child.split(":")
        bench(name, family, args)
        return 0
    print(f"torch_tpu {torch_tpu.__file__}; TORCH_TPU_BUCKETS={os.environ.get('TORCH_TPU_BUCKETS', '(default)')}; "
          f"one process and empty cache per workload", flush=True)
    for family in args.family.split(","):
        for name in args.only.split(","):
            if name.startswith("compiled") and family != "llama":
                continue  # the compiled workloads run on the Llama only
            # Each workload in a process of its own with an empty compilation cache: the
            # families share most per-op programs, which would otherwise be warm.
            env = dict(os.environ, TORCH_TPU_CACHE_DIR=tempfile.mkdtemp(prefix="torch_tpu_shapes_"))
            cmd = [sys.executable, __file__, "--child", f"{family}:{name}", "--new-lengths", str(args.new_lengths),
                   "--new-tokens", str(args.new_tokens)] + (["--quick"] if args.quick else [])
            subprocess.run(cmd, env=env, check=False)


if __name__ == "__main__":
    sys.exit(main())
