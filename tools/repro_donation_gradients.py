"""Reproduces a wrong-gradient bug under buffer donation (found 2026-12-07, open).

A tiny Llama trained with SGD on batches padded to 8, 16, ..., 40 tokens: from the step at
length 38 (bucket 40) on, the tpu gradients differ from the CPU's on the same weights by up to
50% (the loss still matches), in every eager mode. TORCH_TPU_DONATE=0 makes them agree to 1e-6.
Narrowed so far: in lm_head's backward, `mm(grad_logits, t(t(lm_head.weight)))` returns a wrong
result; the same mm on a clone of the weight is right, and so is the original mm once the weight
has been read by that clone. Exact-length batches ([4, 38] instead of [4, 40]) do not show it.

    python tools/repro_donation_gradients.py            # exit 1: the gradients disagree
    TORCH_TPU_DONATE=0 python tools/repro_donation_gradients.py   # exit 0
"""
import os
import sys
import warnings

import torch
import torch_tpu  # noqa: F401
import transformers

warnings.filterwarnings("ignore")
VOCAB = 512


def tiny():
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                   bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).train()


def batch(n, padded_to):
    ids = torch.zeros(4, padded_to, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, m in enumerate([n, max(1, n - 3), max(1, n // 2), max(1, n - 1)]):
        ids[row, :m] = torch.randint(3, VOCAB, (m,), generator=torch.Generator().manual_seed(row * 1000 + m))
        mask[row, :m] = 1
    return ids, mask, ids.masked_fill(mask == 0, -100)


def main():
    os.environ.setdefault("TORCH_TPU_BUCKETS", "0")  # pad by hand here, on the host
    model = tiny().to("tpu")
    worst_seen = 0.0
    for n in [5, 6, 7, 13, 14, 15, 20, 21, 22, 23, 29, 30, 31, 37, 38, 39]:
        ids, mask, labels = batch(n, -(-n // 8) * 8)
        reference = tiny()
        reference.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
        reference(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        model(input_ids=ids.to("tpu"), attention_mask=mask.to("tpu"), labels=labels.to("tpu")).loss.backward()
        worst = max((a.grad - b.grad.cpu()).abs().max().item() / (a.grad.abs().max().item() + 1e-30)
                    for a, b in zip(reference.parameters(), model.parameters()))
        worst_seen = max(worst_seen, worst)
        print(f"length {n:3d}: largest relative gradient difference {worst:.1e}", flush=True)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-0.5)
                p.grad = None
    return 0 if worst_seen < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
