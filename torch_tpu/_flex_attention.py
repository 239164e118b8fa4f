"""FlexAttention on tpu tensors.

PyTorch (2.11-2.13) offers no registration point for a new device: `flex_attention` checks the
device against a fixed set (cuda, cpu, xpu, hpu, mps) and raises for any other. Past that check
everything already works on tpu:

- eager: `flex_attention` runs its higher-order op through Dynamo's "eager" backend, whose
  dense implementation (scores, score_mod/mask_mod by vmap, softmax, and the dense backward
  op for gradients) is made of ordinary ATen ops, each lowered as usual;
- torch.compile(backend="tpu"): the Dynamo graph holds the higher-order op itself, which is no
  ATen op. `inline` replaces it by the same dense math before AOTAutograd, which then traces
  forward and backward into ATen ops like any other function.

So `allow_tpu` lets tpu through the device check (unlike on the CPU, backward is allowed: the
dense backward runs natively) and keeps the check for every other device.
"""
import torch


def allow_tpu(module):
    """Wraps torch.nn.attention.flex_attention._validate_device (called right after import)."""
    original = module._validate_device
    if getattr(original, "_torch_tpu", False):
        return

    def _validate_device(query, key, value):
        if query.device.type == "tpu":
            return
        return original(query, key, value)

    _validate_device._torch_tpu = True
    module._validate_device = _validate_device


def _dense(query, key, value, score_mod, block_mask, scale, kernel_options,
           score_mod_other_buffers=(), mask_mod_other_buffers=()):
    """The higher-order op's own dense implementation, as a plain function AOTAutograd traces
    (and differentiates) into ATen ops: (out, lse, max_scores), the statistics in log2 units."""
    from torch._higher_order_ops.flex_attention import _permute_strides, math_attention

    out, lse, max_scores = math_attention(query, key, value, score_mod, block_mask, scale, kernel_options,
                                          score_mod_other_buffers, mask_mod_other_buffers)
    return _permute_strides(out, query.stride()), lse, max_scores


def inline(gm):
    """Replaces flex_attention higher-order ops in a Dynamo graph (and its submodules) by
    `_dense`; returns the graph module."""
    hop = getattr(torch.ops.higher_order, "flex_attention", None)
    if hop is None:
        return gm
    for module in gm.modules():
        graph = getattr(module, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            continue
        changed = False
        for node in graph.nodes:
            if node.op == "call_function" and node.target is hop:
                node.target = _dense
                changed = True
        if changed:
            module.recompile()
    return gm
