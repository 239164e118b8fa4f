"""Transformers' LlamaForCausalLM and torch.optim.AdamW written in JAX, for the benchmarks that set
JAX jit beside torch-tpu on the same compiler (bench/peers.py, bench/accelerator.py). The weights
come from the torch model's state dict, so both compute the same loss and the benchmarks check it.

Only what those models use: RMSNorm, rotary embeddings (theta from the config), grouped-query
eager attention with a causal mask, SiLU MLP, untied lm_head, labels=ids loss. Imports JAX, which is
a benchmark-only dependency (`make bench-peers` installs it).
"""
import jax
import jax.numpy as jnp
import numpy as np


def params_from_state_dict(state_dict):
    return {k: jnp.asarray(v.detach().cpu().numpy()) for k, v in state_dict.items()}


def rms_norm(x, w, eps=1e-6):
    x32 = x.astype(jnp.float32)
    return w * (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + eps)).astype(x.dtype)


def rope(x, positions, head_dim, theta=10000.0):
    inv_freq = 1.0 / theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
    freqs = positions[:, None].astype(jnp.float32) * inv_freq[None, :]
    emb = jnp.concatenate([freqs, freqs], -1)
    x1, x2 = jnp.split(x, 2, -1)
    return x * jnp.cos(emb) + jnp.concatenate([-x2, x1], -1) * jnp.sin(emb)


def llama_loss(p, ids, cfg):
    """LlamaForCausalLM's forward with labels=ids (the shifted mean cross entropy); `cfg` is a dict
    with the LlamaConfig fields the model was built from."""
    h_dim, n_heads = cfg["hidden_size"], cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_heads
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    d = h_dim // n_heads
    b, s = ids.shape
    pos = jnp.arange(s)
    x = p["model.embed_tokens.weight"][ids]
    causal = jnp.tril(jnp.ones((s, s), bool))
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        q = (h @ p[pre + "self_attn.q_proj.weight"].T).reshape(b, s, n_heads, d).transpose(0, 2, 1, 3)
        k = (h @ p[pre + "self_attn.k_proj.weight"].T).reshape(b, s, n_kv, d).transpose(0, 2, 1, 3)
        v = (h @ p[pre + "self_attn.v_proj.weight"].T).reshape(b, s, n_kv, d).transpose(0, 2, 1, 3)
        q, k = rope(q, pos, d, theta), rope(k, pos, d, theta)
        k, v = jnp.repeat(k, n_heads // n_kv, 1), jnp.repeat(v, n_heads // n_kv, 1)
        scores = jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / np.sqrt(d), -jnp.inf)
        attn = (jax.nn.softmax(scores, -1) @ v).transpose(0, 2, 1, 3).reshape(b, s, h_dim)
        x = x + attn @ p[pre + "self_attn.o_proj.weight"].T
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        gate, up = h @ p[pre + "mlp.gate_proj.weight"].T, h @ p[pre + "mlp.up_proj.weight"].T
        x = x + (jax.nn.silu(gate) * up) @ p[pre + "mlp.down_proj.weight"].T
    logits = rms_norm(x, p["model.norm.weight"], eps) @ p["lm_head.weight"].T
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), -1)
    return -jnp.mean(jnp.take_along_axis(logp, ids[:, 1:, None], -1))


def adamw_init(params):
    return (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, params), jax.tree.map(jnp.zeros_like, params))


def adamw(params, grads, state, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.01):
    """torch.optim.AdamW's defaults, step for step."""
    step, m, v = state
    step = step + 1
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    c1, c2 = 1 - b1 ** step, 1 - b2 ** step

    def update(p, m, v):
        p = p * (1 - lr * wd)
        return p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps)
    return jax.tree.map(update, params, m, v), (step, m, v)


def llama_train_step(params, state, ids, cfg, lr):
    """One AdamW step on the Llama loss: (new params, new optimizer state, loss before the step)."""
    loss, grads = jax.value_and_grad(llama_loss)(params, ids, cfg)
    params, state = adamw(params, grads, state, lr)
    return params, state, loss


# ---- tensor parallelism (bench/tp_estimate.py) -------------------------------------------------------
# The Megatron split DTensor's plan in bench/tp_decode.py makes: q/k/v/gate/up column-parallel (each
# chip holds a slice of the output features, so of the heads), o/down row-parallel (a slice of the
# input features, summed over the chips by one all-reduce each), the embedding, norms and lm_head
# replicated. Written with shard_map, so each chip's program and its collectives are explicit.

COLWISE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
ROWWISE = ("self_attn.o_proj", "mlp.down_proj")


def tp_param_specs(names, axis="tp"):
    """PartitionSpec of each parameter (torch Linear weights are [out, in])."""
    from jax.sharding import PartitionSpec as P
    specs = {}
    for n in names:
        if any(f".{m}.weight" in n for m in COLWISE):
            specs[n] = P(axis, None)
        elif any(f".{m}.weight" in n for m in ROWWISE):
            specs[n] = P(None, axis)
        else:
            specs[n] = P()
    return specs


def llama_tp_step(p, ids, caches, start, cfg, axis="tp"):
    """One chip's part of LlamaForCausalLM's forward over `ids` [b, s] at positions start.. with a KV
    cache of `start` positions (`caches`: per layer (k, v) [b, local kv heads, start, d], or None):
    (logits [b, s, vocab], the greedy next token [b], the caches with the new positions). Runs inside
    shard_map over `axis`: the weights are this chip's slices."""
    h_dim, n_heads = cfg["hidden_size"], cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_heads
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    d = h_dim // n_heads
    b, s = ids.shape
    pos = start + jnp.arange(s)
    x = p["model.embed_tokens.weight"][ids]
    new_caches = []
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        q = (h @ p[pre + "self_attn.q_proj.weight"].T).reshape(b, s, -1, d).transpose(0, 2, 1, 3)
        k = (h @ p[pre + "self_attn.k_proj.weight"].T).reshape(b, s, -1, d).transpose(0, 2, 1, 3)
        v = (h @ p[pre + "self_attn.v_proj.weight"].T).reshape(b, s, -1, d).transpose(0, 2, 1, 3)
        q, k = rope(q, pos, d, theta), rope(k, pos, d, theta)
        if caches is not None:
            k, v = jnp.concatenate([caches[i][0], k], 2), jnp.concatenate([caches[i][1], v], 2)
        new_caches.append((k, v))
        group = n_heads // n_kv
        kr, vr = jnp.repeat(k, group, 1), jnp.repeat(v, group, 1)
        mask = jnp.arange(k.shape[2])[None, :] <= pos[:, None]
        scores = jnp.where(mask, q @ kr.transpose(0, 1, 3, 2) / np.sqrt(d), -jnp.inf)
        attn = (jax.nn.softmax(scores, -1) @ vr).transpose(0, 2, 1, 3).reshape(b, s, -1)
        x = x + jax.lax.psum(attn @ p[pre + "self_attn.o_proj.weight"].T, axis)
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        gate, up = h @ p[pre + "mlp.gate_proj.weight"].T, h @ p[pre + "mlp.up_proj.weight"].T
        x = x + jax.lax.psum((jax.nn.silu(gate) * up) @ p[pre + "mlp.down_proj.weight"].T, axis)
    logits = rms_norm(x, p["model.norm.weight"], eps) @ p["lm_head.weight"].T
    return logits, jnp.argmax(logits[:, -1], -1), new_caches
