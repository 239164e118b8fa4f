"""Mixture-of-experts models of the installed Transformers on tpu against the CPU.

For each MoE family (every model whose experts use `@use_experts_implementation`) a tiny random
config is built offline; for each experts implementation (eager, batched_mm, grouped_mm) the
same weights run on the CPU and on tpu: logits, greedy generate() tokens, and one training
step's gradients are compared. tests/test_moe_models.py runs a few families through the same
functions; this script sweeps them all:

    .venv/bin/python tools/moe_models.py [family ...] [--impl grouped_mm] [--strict]

`--strict` runs tpu with TORCH_TPU_STRICT=1 semantics checked through the fallback counter.
"""
import argparse
import copy
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

import torch_tpu  # noqa: E402

IMPLS = ("eager", "batched_mm", "grouped_mm")
VOCAB = 96

# Small values for whichever of these fields a config has. Sizes are multiples of 16 bytes in
# every dtype: PyTorch's CPU grouped_mm requires aligned strides.
_TINY = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=64, moe_intermediate_size=32, shared_expert_intermediate_size=32,
    expert_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    num_experts=8, num_local_experts=8, n_routed_experts=8, num_experts_per_tok=2, top_k=2, moe_topk=2,
    n_shared_experts=1, num_shared_experts=1, n_group=2, topk_group=1, first_k_dense_replace=1,
    max_position_embeddings=64, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
    v_head_dim=8, qk_head_dim=16, sliding_window=None, decoder_sparse_step=1, mlp_only_layers=[],
    bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False, layer_types=None,
    moe_layer_freq=1, attention_dropout=0.0, router_aux_loss_coef=0.0, output_router_logits=False,
)

# Where a family needs other values (multi-head latent attention has one kv head per head).
_OVERRIDES = {
    "gpt_oss": dict(sliding_window=4),
    "deepseek_v3": dict(num_key_value_heads=4),
    "deepseek_v2": dict(num_key_value_heads=4),
    "glm4_moe": dict(num_key_value_heads=4),
    "dots1": dict(sliding_window=4),
    "minimax": dict(sliding_window=4),
    "exaone_moe": dict(sliding_window=4),
    "cohere2_moe": dict(sliding_window=4),
    "lfm2_moe": dict(layer_types=["conv", "full_attention"], num_dense_layers=0),
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=1, expert_layer_offset=0),
}

# family -> (config class name, model class name)
FAMILIES = {
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM"),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM"),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM"),
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM"),
    "phimoe": ("PhimoeConfig", "PhimoeForCausalLM"),
    "granitemoe": ("GraniteMoeConfig", "GraniteMoeForCausalLM"),
    "granitemoeshared": ("GraniteMoeSharedConfig", "GraniteMoeSharedForCausalLM"),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM"),
    "dots1": ("Dots1Config", "Dots1ForCausalLM"),
    "ernie4_5_moe": ("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM"),
    "hunyuan_v1_moe": ("HunYuanMoEV1Config", "HunYuanMoEV1ForCausalLM"),
    "minimax": ("MiniMaxConfig", "MiniMaxForCausalLM"),
    "flex_olmo": ("FlexOlmoConfig", "FlexOlmoForCausalLM"),
    "lfm2_moe": ("Lfm2MoeConfig", "Lfm2MoeForCausalLM"),
    "exaone_moe": ("ExaoneMoeConfig", "ExaoneMoeForCausalLM"),
    "jamba": ("JambaConfig", "JambaForCausalLM"),
    "cohere2_moe": ("Cohere2MoeConfig", "Cohere2MoeForCausalLM"),
    "minimax_m2": ("MiniMaxM2Config", "MiniMaxM2ForCausalLM"),
    "solar_open": ("SolarOpenConfig", "SolarOpenForCausalLM"),
}


def build(family, seed=0):
    """A tiny random CPU model of `family` (eval mode, float32)."""
    import transformers

    config_name, model_name = FAMILIES[family]
    config_cls, model_cls = getattr(transformers, config_name), getattr(transformers, model_name)
    defaults = config_cls().to_dict()
    kwargs = {k: v for k, v in _TINY.items() if k in defaults}
    kwargs.update(_OVERRIDES.get(family, {}))
    config = config_cls(**kwargs)
    torch.manual_seed(seed)
    return model_cls(config).eval()


def pair(family, impl, seed=0):
    """The same weights on the CPU and on tpu, both using the `impl` experts implementation."""
    cpu = build(family, seed)
    tpu = copy.deepcopy(cpu).to("tpu")
    for m in (cpu, tpu):
        m.set_experts_implementation(impl)
    return cpu, tpu


def inputs(batch=2, length=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=g)


def logits_diff(cpu, tpu, ids):
    with torch.no_grad():
        want = cpu(input_ids=ids).logits
        got = tpu(input_ids=ids.to("tpu")).logits.cpu()
    return (got - want).abs().max().item()


def generate_equal(cpu, tpu, ids, new=6):
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    want = cpu.generate(input_ids=ids, **kw)
    got = tpu.generate(input_ids=ids.to("tpu"), **kw).cpu()
    return torch.equal(got, want)


def grads_diff(cpu, tpu, ids):
    """Largest difference of one training step's gradients (relative to the largest CPU gradient)."""
    grads = []
    for model, device in ((cpu, "cpu"), (tpu, "tpu")):
        model.train()
        model.zero_grad()
        x = ids.to(device)
        model(input_ids=x, labels=x).loss.backward()
        grads.append({n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None})
        model.eval()
    assert grads[0].keys() == grads[1].keys(), "parameters with gradients differ"
    worst = 0.0
    for n, want in grads[0].items():
        scale = want.abs().max().item() or 1.0
        worst = max(worst, (grads[1][n] - want).abs().max().item() / scale)
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("families", nargs="*", default=list(FAMILIES))
    parser.add_argument("--impl", action="append", choices=IMPLS)
    parser.add_argument("--no-train", action="store_true")
    args = parser.parse_args()
    impls = args.impl or list(IMPLS)
    failed = 0
    for family in args.families:
        for impl in impls:
            start = time.time()
            try:
                cpu, tpu = pair(family, impl)
                ids = inputs()
                torch_tpu.metrics.reset()
                diff = logits_diff(cpu, tpu, ids)
                same = generate_equal(cpu, tpu, ids)
                gdiff = float("nan") if args.no_train else grads_diff(cpu, tpu, ids)
                fallbacks = torch_tpu.metrics()["cpu_fallbacks_by_op"]
                ok = diff < 1e-4 and same and (args.no_train or gdiff < 1e-3)
                failed += not ok
                print(f"{family:18s} {impl:10s} logits {diff:.1e}  generate {'same' if same else 'DIFFERENT'}  "
                      f"grads {gdiff:.1e}  fallbacks {fallbacks or 0}  {'ok' if ok else 'MISMATCH'}  "
                      f"({time.time() - start:.0f}s)", flush=True)
            except Exception as e:  # noqa: BLE001 - a sweep reports every family
                failed += 1
                print(f"{family:18s} {impl:10s} ERROR {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
