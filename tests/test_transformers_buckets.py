"""Buckets at Transformers' boundaries (torch_tpu/transformers_buckets.py, docs/buckets.md):
generate() left-pads a prompt to its bucket and a Trainer right-pads a batch to its bucket, once
a second length is seen, so a new length of a seen bucket compiles nothing. Tokens and losses
are the CPU's; settings under which padding could change a result are left exact, counted."""
import pytest
import torch
import torch_tpu

transformers = pytest.importorskip("transformers")

VOCAB = 256


def tiny_llama():
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def prompt(n, batch=1):
    return torch.randint(3, VOCAB, (batch, n), generator=torch.Generator().manual_seed(n))


def metrics():
    return torch_tpu.metrics(wait=True)


@pytest.fixture
def models():
    cpu = tiny_llama()
    return cpu, tiny_llama().to("tpu")


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_a_new_prompt_length_in_a_seen_bucket_compiles_nothing(models, cache):
    cpu, tpu = models
    extra = {"cache_implementation": "static"} if cache == "static" else {}
    start = metrics()
    for n in (5, 9, 13, 12):  # 5: the first length stays exact; 9, 13, 12 share bucket 16
        before = metrics()
        with torch.no_grad():
            want = cpu.generate(prompt(n), max_new_tokens=6, min_new_tokens=6, do_sample=False, **extra)
            got = tpu.generate(prompt(n).to("tpu"), max_new_tokens=6, min_new_tokens=6, do_sample=False, **extra)
        assert got.device.type == "tpu" and got.shape == want.shape == (1, n + 6)
        assert torch.equal(got.cpu(), want), n
    # Fused mode compiles a repeated graph whole at its second length (13): 12 meets it ready.
    assert metrics()["programs_compiled"] - before["programs_compiled"] == 0
    assert metrics()["bucket_generate_calls"] - start["bucket_generate_calls"] == 3


def test_max_length_and_a_left_padded_batch_keep_their_meaning(models):
    cpu, tpu = models
    ids = prompt(11, batch=2)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # the second row is left-padded by the user
    ids[1, :4] = 0
    with torch.no_grad():
        tpu.generate(prompt(6).to("tpu"), max_new_tokens=2)  # a first length: lengths now vary
        before = metrics()
        want = cpu.generate(ids, attention_mask=mask, max_length=17, do_sample=False)
        got = tpu.generate(ids.to("tpu"), attention_mask=mask.to("tpu"), max_length=17, do_sample=False)
    assert metrics()["bucket_generate_calls"] - before["bucket_generate_calls"] == 1
    assert got.shape == want.shape == (2, 17)  # max_length counts the real prompt, not the added columns
    assert torch.equal(got.cpu(), want)
    # A GenerationConfig given by keyword reaches the padded call.
    config = transformers.GenerationConfig(max_new_tokens=3, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        before = metrics()
        want = cpu.generate(prompt(10), generation_config=config)
        got = tpu.generate(prompt(10).to("tpu"), generation_config=config)
    assert metrics()["bucket_generate_calls"] - before["bucket_generate_calls"] == 1
    assert got.shape == want.shape == (1, 13) and torch.equal(got.cpu(), want)


def test_sampling_draws_what_exact_shapes_draw(models, monkeypatch):
    _, tpu = models

    def sample(n):
        torch.manual_seed(7)
        torch.tpu.manual_seed(7)
        with torch.no_grad():
            return tpu.generate(prompt(n).to("tpu"), max_new_tokens=5, do_sample=True, top_k=20).cpu()

    sample(4)
    before = metrics()
    bucketed = sample(10)
    assert metrics()["bucket_generate_calls"] - before["bucket_generate_calls"] == 1
    monkeypatch.setenv("TORCH_TPU_BUCKETS", "0")
    assert torch.equal(sample(10), bucketed)


def test_settings_that_read_the_prompt_stay_exact(models):
    cpu, tpu = models
    with torch.no_grad():
        tpu.generate(prompt(5).to("tpu"), max_new_tokens=2)
        before = metrics()
        want = cpu.generate(prompt(10), max_new_tokens=5, do_sample=False, repetition_penalty=1.5)
        got = tpu.generate(prompt(10).to("tpu"), max_new_tokens=5, do_sample=False, repetition_penalty=1.5)
    assert torch.equal(got.cpu(), want)
    now = metrics()
    assert now["bucket_generate_calls"] == before["bucket_generate_calls"]
    assert now["bucket_boundary_skips"].get("generate: repetition_penalty", 0) \
        == before["bucket_boundary_skips"].get("generate: repetition_penalty", 0) + 1


def test_a_trainer_pads_batches_to_buckets_with_the_cpus_losses(tmp_path):
    lengths = [7, 12, 10, 15, 9, 14]
    rows = [{"input_ids": prompt(n)[0][: n - (i % 3)]} for i, n in enumerate(x for x in lengths for _ in range(2))]

    def collate(features):
        n = max(len(f["input_ids"]) for f in features)
        ids = torch.zeros(len(features), n, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, f in enumerate(features):
            ids[r, :len(f["input_ids"])] = f["input_ids"]
            mask[r, :len(f["input_ids"])] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}

    def run(use_cpu):
        model = tiny_llama().train()
        seen = []
        model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["input_ids"].shape[1]), with_kwargs=True)
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / str(use_cpu)), per_device_train_batch_size=2, max_steps=len(lengths),
            learning_rate=1e-3, logging_steps=1, report_to=[], use_cpu=use_cpu, save_strategy="no",
            dataloader_pin_memory=False, seed=0, disable_tqdm=True)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=rows, data_collator=collate)
        trainer.train()
        return [h["loss"] for h in trainer.state.log_history if "loss" in h], seen

    before = metrics()
    cpu_losses, cpu_seen = run(True)
    tpu_losses, tpu_seen = run(False)
    assert len(tpu_losses) == len(lengths)
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), atol=1e-5, rtol=1e-4)
    # The first batch keeps its length; later ones reach the model at their bucket (8 or 16).
    assert tpu_seen[0] == cpu_seen[0]
    assert all(n in (8, 16) for n in tpu_seen[1:]) and len(set(cpu_seen)) > 2
    assert metrics()["bucket_trainer_batches"] - before["bucket_trainer_batches"] == sum(
        1 for a, b in zip(cpu_seen[1:], tpu_seen[1:]) if a != b)


def test_buckets_off_leaves_generate_exact(models, monkeypatch):
    _, tpu = models
    monkeypatch.setenv("TORCH_TPU_BUCKETS", "off")
    before = metrics()
    with torch.no_grad():
        for n in (5, 9):
            assert tpu.generate(prompt(n).to("tpu"), max_new_tokens=2).shape == (1, n + 2)
    assert metrics()["bucket_generate_calls"] == before["bucket_generate_calls"]


def test_a_training_loop_pads_each_batch_on_the_device(monkeypatch):
    """A plain loop (no Trainer) over batches padded to their longest sequence: from the second
    length on, the causal LM's call pads to the bucket, so a new length of a seen bucket compiles
    only the pad; losses and the logits' shape are the CPU's."""
    def batch(n):
        ids = prompt(n, batch=3)
        mask = torch.ones_like(ids)
        mask[1, n - 2:] = 0
        return ids, mask, ids.masked_fill(mask == 0, -100)

    def loop(device, lengths):
        model = tiny_llama().to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses, programs = [], []
        for n in lengths:
            before = metrics()["programs_compiled"]
            ids, mask, labels = (t.to(device) for t in batch(n))
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
            assert out.logits.shape == (3, n, VOCAB)
            out.loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(out.loss.item())
            programs.append(metrics()["programs_compiled"] - before)
        return losses, programs

    lengths = [6, 13, 14, 15, 12, 11]  # 13..11 share bucket 16
    before = metrics()
    cpu_losses, _ = loop("cpu", lengths)
    tpu_losses, programs = loop("tpu", lengths)
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), atol=1e-5, rtol=1e-5)
    assert metrics()["bucket_forward_calls"] - before["bucket_forward_calls"] == 5
    assert programs[-1] <= 1 and programs[-2] <= 1, programs  # the pad of a new length, nothing else


def test_an_eval_call_that_returns_a_cache_stays_exact(models):
    _, tpu = models
    with torch.no_grad():
        tpu(prompt(5).to("tpu"))
        before = metrics()
        out = tpu(prompt(9).to("tpu"))
    assert out.logits.shape == (1, 9, VOCAB) and out.past_key_values.get_seq_length() == 9
    skips = metrics()["bucket_boundary_skips"]
    reason = "forward: returns a cache (eval mode without use_cache=False)"
    assert skips.get(reason, 0) == before["bucket_boundary_skips"].get(reason, 0) + 1
