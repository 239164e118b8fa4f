"""torch.compile(backend="tpu") on a tiny Llama: a training step (forward, backward, AdamW)
and a forward, against strict eager on tpu, PyTorch CPU eager and torch.compile with the
default Inductor backend on CPU, all measured in this one run. Reports medians and ratios.

    python bench/compile.py [--batch 4] [--seq 64] [--rounds 5] [--iters 10] [--partitions]

--partitions adds the compiled step with AOTAutograd's other partition of the joint graph
(TORCH_TPU_COMPILE_PARTITION: min_cut, the default, against default_partition, or the reverse).
"""
import argparse
import copy
import os
import statistics
import time

os.environ.setdefault("TORCH_TPU_QUIET", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
import torch  # noqa: E402

import torch_tpu  # noqa: E402


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=128, vocab_size=128)
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def train_step(model, opt, ids):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def forward(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--iters", type=int, default=10, help="timed calls per setup and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--switch-warmup", type=int, default=5, help="untimed calls after each switch of setup")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-inductor", action="store_true", help="skip the Inductor baseline (slow to compile)")
    parser.add_argument("--partitions", action="store_true",
                        help="also the compiled step with the other TORCH_TPU_COMPILE_PARTITION")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads for the CPU baselines (0: PyTorch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch_tpu.set_eager_mode("strict")
    ids_cpu = torch.randint(0, 128, (args.batch, args.seq), generator=torch.Generator().manual_seed(1))
    base = tiny_llama()

    def tpu_sync(out):
        torch.tpu.synchronize()

    def cpu_sync(out):
        pass

    setups = [
        ("tpu compiled", "tpu", lambda f: torch.compile(f, backend="tpu"), tpu_sync),
        ("tpu strict eager", "tpu", lambda f: f, tpu_sync),
        ("cpu eager", "cpu", lambda f: f, cpu_sync),
        ("cpu inductor", "cpu", lambda f: torch.compile(f), cpu_sync),
    ]
    if args.no_inductor:
        setups.pop()
    if args.partitions:
        from torch_tpu.compile import backend as tpu_backend

        ours = os.environ.get("TORCH_TPU_COMPILE_PARTITION", "min_cut")
        other = "default" if ours == "min_cut" else "min_cut"

        def compiled_with(partition, f):
            # The partition is read when the backend's AOTAutograd is first built: build it anew.
            # The step and the forward are wrapped, and compiled, one after the other.
            os.environ["TORCH_TPU_COMPILE_PARTITION"] = partition
            tpu_backend._aot_backend = None
            return torch.compile(f, backend="tpu")

        setups[0] = ("tpu compiled", "tpu", lambda f: compiled_with(ours, f), tpu_sync)
        setups.insert(1, (f"tpu compiled {other}", "tpu", lambda f: compiled_with(other, f), tpu_sync))
    # Everything is built (and compiled) first, then timed in rounds: each round runs every
    # setup in turn, so a slow spell of a noisy machine hits all of them alike, and a ratio is
    # taken within each round. The first calls after a switch are not timed: they pay for the
    # other side's idle threads (PyTorch's OpenMP workers spin after a parallel region and take
    # the cores the XLA CPU runtime needs).
    compile_s, runs = {}, {}
    for name, device, wrap, sync in setups:
        model = copy.deepcopy(base).to(device)
        ids = ids_cpu.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        step, fwd = wrap(train_step), wrap(forward)
        start = time.perf_counter()
        sync(step(model, opt, ids))
        sync(fwd(model, ids))
        compile_s[name] = time.perf_counter() - start
        runs[(name, "train step")] = (lambda step=step, model=model, opt=opt, ids=ids: step(model, opt, ids), sync)
        runs[(name, "forward")] = (lambda fwd=fwd, model=model, ids=ids: fwd(model, ids), sync)
    for fn, sync in runs.values():
        for _ in range(args.warmup):
            sync(fn())
    # Two timings per setup and round: each call synchronised (latency of one step), and
    # `iters` calls in a row synchronised once at the end (throughput of a loop that does not
    # read a value every step, where the host runs ahead of the device). CPU setups are
    # synchronous, so both are the same for them.
    per_round = {key: [] for key in runs}
    pipelined = {key: [] for key in runs}
    for _ in range(args.rounds):
        for key, (fn, sync) in runs.items():
            for _ in range(args.switch_warmup):
                sync(fn())
            samples = []
            for _ in range(args.iters):
                start = time.perf_counter()
                sync(fn())
                samples.append((time.perf_counter() - start) * 1e3)
            per_round[key].append(statistics.median(samples))
            start = time.perf_counter()
            for _ in range(args.iters):
                out = fn()
            sync(out)
            pipelined[key].append((time.perf_counter() - start) * 1e3 / args.iters)
    results = {key: statistics.median(ms) for key, ms in per_round.items()}
    results_pipelined = {key: statistics.median(ms) for key, ms in pipelined.items()}

    def ratio(baseline, what, table=per_round):  # median over rounds of baseline time / compiled time
        return statistics.median(b / c for b, c in zip(table[(baseline, what)], table[("tpu compiled", what)]))

    print(f"platform: {torch.tpu.get_device_name()}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print(f"tiny Llama (hidden 64, 2 layers, vocab 128), batch {args.batch} x seq {args.seq}, "
          f"{args.rounds} rounds of {args.iters} timed calls per setup, medians; "
          f"load average {os.getloadavg()[0]:.1f}")
    for what in ("train step", "forward"):
        print(f"\n{what}:  ms per call, each call synchronised | {args.iters} calls, one sync")
        for name, *_ in setups:
            line = f"  {name:18s} {results[(name, what)]:9.2f} ms | {results_pipelined[(name, what)]:7.2f} ms"
            print(line + (f"   (first calls incl. compile: {compile_s[name]:.1f} s)" if what == "train step" else ""))
        for baseline, *_ in setups[1:]:
            print(f"  compiled tpu vs {baseline:16s}: {ratio(baseline, what):5.2f}x | "
                  f"{ratio(baseline, what, pipelined):5.2f}x faster (medians of per-round ratios)")
    m = torch_tpu.metrics()
    print(f"\ncompile metrics: graphs {m['compile_graphs']}, programs {m['compile_programs']}, "
          f"partitioned {m['compile_partitioned_graphs']}, eager nodes {sum(m['compile_eager_nodes_by_op'].values())}, "
          f"recompiles {m['compile_recompiles']}, cpu fallbacks {m['cpu_fallbacks']}")


if __name__ == "__main__":
    main()
