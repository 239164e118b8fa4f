"""Varying lengths (issue 47): what a new sequence length costs once a workload is warm.

Tiny random models built from their configs (no downloads): Llama (2 layers, hidden 128,
vocab 512) and Qwen2 of the same size. Workloads, each warmed up on a spread of lengths and
then run on lengths never seen before:
  gen-dynamic  generate() with the default cache (DynamicCache), greedy, fused eager mode
  gen-static   the same with cache_implementation="static"
  train        AdamW steps on batches of 4 padded to the longest sequence (attention mask), in a
               plain training loop
  trainer      the same batches through transformers.Trainer (one step per length; its collator
               pads to the longest sequence, as DataCollatorWithPadding does)
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
WORKLOADS = ["gen-dynamic", "gen-static", "train", "trainer", "compiled-fwd", "compiled-train"]
# Bucketed by torch_tpu (torch_tpu/transformers_buckets.py at generate(), the Trainer and a causal
# LM's training call; torch_tpu/compile/bucketing.py under torch.compile): they warm up on the
# buckets, as a server warmed on its buckets would. TORCH_TPU_BUCKETS=0 gives the exact baseline.
BUCKETED = ("gen-dynamic", "gen-static", "train", "trainer", "compiled-fwd", "compiled-train")


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
            # Prompt and mask made on the host and copied, as a tokenizer's output is.
            ids = ids_of(length)
            mask = torch.ones_like(ids).to(device)
            ids = ids.to(device)
            extra = {"cache_implementation": "static"} if self.name == "gen-static" else {}
            with torch.no_grad():
                out = m.generate(ids, attention_mask=mask, max_new_tokens=self.new_tokens,
                                 min_new_tokens=self.new_tokens, do_sample=False, pad_token_id=0, **extra)
            return out.cpu().tolist()
        if self.name == "trainer":
            return self.trainer_step(device, length)
        if self.name == "train":
            m, opt = self.model(device)
            ids, mask, labels = padded_batch(length)
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


    def trainer_step(self, device, length):
        """One Trainer step on one batch of four sequences, padded by the collator to the longest."""
        import transformers

        if device not in self.models:
            m = tiny(self.family)
            # One optimizer across the runs, as one Trainer.train() over many batches would have:
            # a fresh AdamW per step would move every weight by lr * sign(grad) at each step,
            # where CPU and device disagree on the sign of gradients near zero.
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3) if device == "cpu" else None
            self.models[device] = [m, opt]
        rows = [length, max(1, length - 3), max(1, length // 2), max(1, length - 1)]
        data = [{"input_ids": ids_of(n, seed=row)[0]} for row, n in enumerate(rows)]

        def collate(features):
            ids, mask, labels = padded_batch(max(len(f["input_ids"]) for f in features),
                                             [len(f["input_ids"]) for f in features])
            return {"input_ids": ids, "attention_mask": mask, "labels": labels}

        args = transformers.TrainingArguments(
            output_dir=tempfile.mkdtemp(prefix="shapes_trainer_"), per_device_train_batch_size=4, max_steps=1,
            learning_rate=1e-3, report_to=[], use_cpu=device == "cpu", save_strategy="no", logging_steps=1,
            dataloader_pin_memory=False, seed=0, disable_tqdm=True, log_level="error")
        model, opt = self.models[device]
        if opt is None:  # the parameters are on the device once the first Trainer has moved them
            model.to(device)
            opt = self.models[device][1] = torch.optim.AdamW(model.parameters(), lr=1e-3)
        constant = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=data, data_collator=collate,
                                       optimizers=(opt, constant))
        trainer.train()
        return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def padded_batch(length, rows=None):
    """Four sequences padded on the right to `length`: ids, attention mask, labels (-100 on padding)."""
    rows = rows or [length, max(1, length - 3), max(1, length // 2), max(1, length - 1)]
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    mask = torch.zeros(len(rows), length, dtype=torch.long)
    for row, n in enumerate(rows):
        ids[row, :n] = ids_of(n, seed=row)[0]
        mask[row, :n] = 1
    return ids, mask, ids.masked_fill(mask == 0, -100)


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
    """(warm-up lengths, new lengths). The bucketed workloads also warm up on three lengths in
    each default bucket (torch_tpu.buckets) up to the largest new length, so that a new length
    after warm-up meets a bucket already seen, as a server warmed up on its buckets would. Three:
    fused mode compiles a graph whole when it repeats (the second length of a bucket), and the
    whole graph's results can come in other buffer layouts than the op-by-op path's, which the
    programs that read them then meet once (the third)."""
    warm = [6, 20, 44, 90] if not quick else [6, 20, 44]
    top = 150 if not quick else 60
    if name in BUCKETED:
        edges = sorted({torch_tpu.buckets._default(n) for n in range(5, top)})
        warm = sorted(set(warm) | {e - k for e in edges for k in (1, 2, 3)})
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
