"""The "tpu" Dynamo backend: AOTAutograd with the decomposition table, each forward, backward
and inference graph lowered by partition.compile_fx."""
import os
import warnings

import torch
import torch._dynamo
from torch._dynamo.backends.common import aot_autograd

from .. import _compile_stats as _stats
from .. import _flex_attention
from .. import buckets as _buckets
from .decompositions import _decompositions
from .partition import compile_ahead_enabled, compile_fx


_DYNAMIC_MESSAGE = (
    "torch.compile(backend='tpu') compiles static shapes only with TORCH_TPU_BUCKETS=0 (off): dynamic=True, "
    "torch._dynamo.mark_dynamic and symbolic shapes need buckets. Unset TORCH_TPU_BUCKETS, or leave `dynamic` "
    "unset (or pass dynamic=False): each new input shape then compiles its own program.")


def _forward_compiler(gm, example_inputs):
    return compile_fx(gm, example_inputs, "forward")


def _backward_compiler(gm, example_inputs):
    return compile_fx(gm, example_inputs, "backward")


def _inference_compiler(gm, example_inputs):
    return compile_fx(gm, example_inputs, "inference")


_last_compile = [None]


def _note_compile():
    _stats.count("compile_graphs")
    compile_id = torch._guards.CompileContext.current_compile_id()
    if compile_id is None or not compile_id.frame_compile_id:
        return
    key = (id(torch._guards.CompileContext.try_get()), compile_id.frame_id, compile_id.frame_compile_id)
    if key == _last_compile[0]:
        return  # another graph (after a graph break) of the same recompilation
    _last_compile[0] = key
    reason = None
    try:
        context = torch._dynamo.utils.get_metrics_context()
        if context.in_progress():
            reason = context._metrics.get("recompile_reason")
    except Exception:  # the reason is a private detail of Dynamo; the count is what matters
        reason = None
    _stats.count("compile_recompiles")
    _stats.count_keyed("compile_recompile_reasons", (reason or "unknown").splitlines()[0])


def _check_static(gm, example_inputs):
    if _buckets.enabled():
        return  # symbolic sizes: one program per bucket (bucketing.py)
    if not torch._dynamo.config.assume_static_by_default:
        raise RuntimeError(_DYNAMIC_MESSAGE)
    for x in example_inputs:
        if isinstance(x, (torch.SymInt, torch.SymFloat)) or (
                isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape)):
            raise RuntimeError(_DYNAMIC_MESSAGE)


def _drop_zero_dropouts(gm):
    """Removes dropouts with p=0, which return their input (as eager's at::dropout does):
    Transformers' attention calls dropout(p=0.0) in training, and AOTAutograd would otherwise keep
    a copy of the probabilities it saves for backward, a second saved tensor of the same values."""
    dropouts = (torch.nn.functional.dropout, torch.dropout, torch.ops.aten.dropout.default)
    dropped = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in dropouts or not node.args:
            continue
        p = node.kwargs.get("p", node.args[1] if len(node.args) > 1 else 0.5)
        if isinstance(p, (int, float)) and not isinstance(p, bool) and p == 0:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            dropped += 1
    if dropped:
        gm.recompile()
        _stats.count("compile_zero_dropouts_dropped", dropped)
    return gm


_aot_backend = None


def _partition_fn():
    """How AOTAutograd splits the joint graph; TORCH_TPU_COMPILE_PARTITION=min_cut|default.

    min_cut (the default, as Inductor's): the backward recomputes cheap elementwise work from
    fewer saved tensors. On a TPU the saved activations are HBM traffic: libtpu's cost model puts
    a Llama train step at 1.15x JAX's bytes with it and 1.29x with default_partition, which saves
    every intermediate the backward reads (README, TPU cost model)."""
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

    choice = os.environ.get("TORCH_TPU_COMPILE_PARTITION", "min_cut")
    if choice not in ("min_cut", "default"):
        raise ValueError(f"TORCH_TPU_COMPILE_PARTITION={choice!r}: expected 'min_cut' or 'default'")
    return min_cut_rematerialization_partition if choice == "min_cut" else default_partition


def backend(gm, example_inputs, **kwargs):
    """The "tpu" Dynamo backend: AOTAutograd with core ATen decompositions, each forward,
    backward and inference graph lowered to one program (csrc/aten/compiled/compiled_graph.cpp)."""
    global _aot_backend
    if kwargs.get("options"):
        warnings.warn(f"torch.compile(backend='tpu') ignores options {sorted(kwargs['options'])}")
    _check_static(gm, example_inputs)
    _note_compile()
    gm = _flex_attention.inline(gm)  # a higher-order op: its dense math, for AOTAutograd to trace
    gm = _drop_zero_dropouts(gm)
    if _aot_backend is None:
        _aot_backend = aot_autograd(
            fw_compiler=_forward_compiler,
            bw_compiler=_backward_compiler,
            inference_compiler=_inference_compiler,
            decompositions=_decompositions(),
            keep_inference_input_mutations=True,
            partition_fn=_partition_fn(),
        )
    if not compile_ahead_enabled():
        return _aot_backend(gm, example_inputs)
    # The backward graph is lowered with the forward, not at the first backward, so that its
    # program compiles while the forward runs (partition.compile_fx).
    with torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
        return _aot_backend(gm, example_inputs)


# Dynamo's automatic dynamic shapes: a dim seen with a second size makes the graph symbolic in
# it, and the backend runs one program per bucket of its sizes (bucketing.py). A shape seen once
# stays static, so fixed-shape workloads keep their programs. With TORCH_TPU_BUCKETS=0 (off),
# shapes stay static: each new shape is a recompilation with its own program, and symbolic
# graphs (dynamic=True, mark_dynamic) are refused.
torch._dynamo.config.automatic_dynamic_shapes = _buckets.enabled()
# Python floats (a norm's eps, an attention scale) stay constants of the graph, as with static
# shapes: dynamic=True would otherwise make them 0-d CPU tensors computed on the host.
torch._dynamo.config.specialize_float = True

# `torch.compile(backend="tpu")` finds this module through the `torch_dynamo_backends` entry
# point; when it is imported directly first, register the name here.
from torch._dynamo.backends import registry as _registry  # noqa: E402

if "tpu" not in _registry._BACKENDS:
    _registry.register_backend(compiler_fn=backend, name="tpu")
