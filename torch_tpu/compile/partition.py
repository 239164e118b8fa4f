"""Lowering an FX graph: the whole graph as one program when every node lowers, otherwise
the lowerable pieces as programs between nodes that run eagerly."""
import operator
import os
import threading
import warnings

import torch
import torch.fx

from .. import _C, _compat
from .. import _compile_stats as _stats
from . import bucketing
from .describe import _HARD, _SOFT, _Describer, _Unsupported, _consumers, _node_val, _op_name


class _Program:
    """A lowered FX graph: runs the compiled program on the graph's inputs (a boxed call:
    one list of tensors), returning its outputs."""

    def __init__(self, graph, gm, name, single_output, constants=(), views=(), kept=None, num_outputs=None):
        self.graph, self.gm, self.name, self.single = graph, gm, name, single_output
        self.kept = kept  # the positions of the inputs the program takes (None: all)
        self.constants = list(constants)
        # Outputs that are views: (position, (source kind, index), [(view op, args, kwargs)...]);
        # kind "input": of the program's inputs, "arg": the call's arguments, "output": its results
        self.views = [(pos, src, [(n.target, n.args[1:], n.kwargs) for n in chain]) for pos, src, chain in views]
        self.num_outputs = num_outputs  # the graph's; hidden outputs (bases of views) follow them
        self._boxed_call = True  # on the instance: wrappers copy the instance's __dict__
        self._warned = False

    def program_inputs(self, args):
        taken = args if self.kept is None else [args[i] for i in self.kept]
        return taken + self.constants if self.constants else taken

    def __call__(self, args):
        inputs = self.program_inputs(list(args))
        try:
            out = self.graph.run(inputs)
        except _C.GraphNotLowerable as e:
            _stats.count("compile_eager_graph_calls")
            if not self._warned:
                self._warned = True
                warnings.warn(f"torch_tpu: compiled graph {self.name} runs eagerly for these inputs: {e}")
            out = self.gm(*args)
            return out
        for position, (kind, index), chain in self.views:
            t = inputs[index] if kind == "input" else args[index] if kind == "arg" else out[index]
            for op, op_args, op_kwargs in chain:
                t = op(t, *op_args, **op_kwargs)
            out[position] = t
        if self.num_outputs is not None:
            del out[self.num_outputs:]
        return out[0] if self.single else tuple(out)


class _Piece(torch.nn.Module):
    """A compiled piece of a partitioned graph, called from the parent GraphModule."""

    def __init__(self, program):
        super().__init__()
        self.program = program

    def forward(self, *args):
        return self.program(list(args))


_name_lock = threading.Lock()
_name_counter = [0]


def _fresh_name(kind):
    with _name_lock:
        _name_counter[0] += 1
        return f"{kind}_{_name_counter[0]}"


def _analyze(gm, name, piece):
    """Describes `gm` and checks every node's lowering. Returns (describer, graph, bad) where
    bad maps nodes that cannot be in the program to (reason, kind)."""
    eager_cpu = set()
    while True:
        d = _Describer(gm, frozenset(eager_cpu), piece)
        try:
            desc = d.describe(name)
        except _Unsupported as e:
            return d, None, {None: (str(e), _HARD)}
        graph = _C._Graph(desc)
        bad = {}
        for index, reason in graph.check():
            if index < 0:
                return d, None, {None: (f"input {-1 - index}: {reason}", _HARD)}
            bad[d.order[index]] = (reason, _HARD)
        bad.update(d.bad)
        # A CPU scalar computed on the device must not feed a node that runs eagerly.
        demote = {n for n in d.hosted if any(u in bad and bad[u][1] != _SOFT for u in _consumers(n))}
        if not demote:
            return d, graph, bad
        eager_cpu |= demote


def _lower_whole(gm, name, piece=False):
    """A _Program for `gm`, or (None, {node: (reason, kind)}) naming the nodes that cannot be lowered."""
    d, graph, bad = _analyze(gm, name, piece)
    if bad:
        return None, bad
    out_arg = next(n for n in reversed(gm.graph.nodes) if n.op == "output").args[0]
    _stats.count("compile_programs")
    program = _Program(graph, gm, name, not isinstance(out_arg, (tuple, list)), d.constants, d.views, d.kept,
                       d.num_outputs)
    program.output_storages = _output_storages(d, out_arg)
    return program, {}


def _memory_order(sizes, strides):
    """The dims of a dense tensor's buffer: its sizes outermost first, as compiled_graph.cpp lays
    a dense result out (storage_layout.cpp's DenseBufferDims)."""
    return [n for n, _ in sorted(zip(sizes, strides), key=lambda p: -p[1])]


def _output_storages(d, out_arg):
    """Per graph output, the storage it has after a run: ("out", index, buffer dims, nbytes) for
    a view replayed on a returned or hidden value (and its dtype), ("in", index) for an input or a view of one, and
    None for a value returned as a buffer of its own. A backward compiled ahead reads its saved
    tensors through this (_compile_ahead)."""
    items = list(out_arg) if isinstance(out_arg, (tuple, list)) else [out_arg]
    found = [None] * len(items)
    for position, (kind, index), _ in d.views:
        if kind == "arg":  # an opaque object passed on (a DeviceMesh): no storage
            continue
        if kind == "input":
            found[position] = ("in", index)
            continue
        val = _node_val(d.view_bases[index])
        dims = _memory_order([int(n) for n in val.shape], [int(n) for n in val.stride()])
        found[position] = ("out", index, dims, val.numel() * val.element_size(), val.dtype)
    for position, x in enumerate(items):
        if found[position] is None and isinstance(x, torch.fx.Node) and x in d.placeholders:
            found[position] = ("in", d.placeholders.index(x))
    return found


class _ForwardOutputs(threading.local):
    """The last forward compiled on this thread: AOTAutograd lowers its backward next, whose saved
    tensors are placeholders named as the forward's outputs."""
    positions = {}  # output node name -> position
    storages = []  # _output_storages
    inputs = []  # the forward's example inputs, as its program takes them
    bucketed = None  # a forward with symbolic sizes (bucketing.Bucketed)


_forward_outputs = _ForwardOutputs()


def _note_forward(program, gm, example_inputs):
    out_arg = next(n for n in reversed(gm.graph.nodes) if n.op == "output").args[0]
    items = list(out_arg) if isinstance(out_arg, (tuple, list)) else [out_arg]
    _forward_outputs.positions = {x.name: i for i, x in enumerate(items) if isinstance(x, torch.fx.Node)}
    _forward_outputs.storages = getattr(program, "output_storages", None) or [None] * len(items)
    taken = example_inputs or []
    _forward_outputs.inputs = taken if program.kept is None else [taken[i] for i in program.kept]


def _is_view_like(node):
    return node.target is operator.getitem or (
        isinstance(node.target, torch._ops.OpOverload) and node.target.is_view)


_warned_ops = set()


def _strict():
    value = os.environ.get("TORCH_TPU_STRICT", "")
    return bool(value) and value != "0"


def _leave_eager(node, reason, kind):
    """Counts (and warns once per op about) a node that runs eagerly; errors under TORCH_TPU_STRICT=1."""
    op = _op_name(node.target) if node is not None and isinstance(node.target, torch._ops.OpOverload) else (
        "graph" if node is None else str(node.target))
    first_line = reason.splitlines()[0] if reason else ""
    where = "the whole graph" if node is None else f"node '{node.name}' ({op})"
    if kind == _HARD and _strict():
        raise RuntimeError(f"tpu: torch.compile: {where} cannot be lowered: {reason}\n"
                           "TORCH_TPU_STRICT=1 forbids running it eagerly.")
    _stats.count_keyed("compile_eager_nodes_by_op", f"{op}: {first_line[:120]}")
    if kind == _HARD and op not in _warned_ops:
        _warned_ops.add(op)
        warnings.warn(f"torch_tpu: torch.compile: {where} runs eagerly: {first_line}")


def _partition(gm, bad, name):
    """Compiles the lowerable regions of `gm` into programs; the other nodes run eagerly."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport

    if None in bad:
        _leave_eager(None, *bad[None])
        return None
    ok = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node in bad and bad[node][1] != _SOFT:
            _leave_eager(node, *bad[node])
            continue
        if node.target is operator.getitem and node.args[0] not in ok:
            continue
        ok.add(node)

    class _Support(OperatorSupport):
        def is_node_supported(self, submodules, node):
            return node in ok

    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    # Pieces of views alone stay eager: there a view is metadata, in a program a copy.
    partitions = [p for p in partitioner.propose_partitions() if not all(_is_view_like(n) for n in p.nodes)]
    fused = partitioner.fuse_partitions(partitions, prefix="tpu_piece_")
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not str(node.target).startswith("tpu_piece_"):
            continue
        sub = fused.get_submodule(node.target)
        program, _ = _lower_whole(sub, f"{name}_{node.target}", piece=True)
        if program is not None:
            setattr(fused, node.target, _Piece(program))
    fused.recompile()
    _stats.count("compile_partitioned_graphs")
    return fused


def _boxed(fn):
    def run(args):
        return fn(*args)

    run._boxed_call = True
    return run


def compile_ahead_enabled():
    """TORCH_TPU_COMPILE_AHEAD=0 compiles each program at its graph's first run instead."""
    return os.environ.get("TORCH_TPU_COMPILE_AHEAD", "1") != "0"


def _example(t, own_storage):
    """How the C++ graph reads an example input (_Graph.compile_ahead); None when it can't.
    `own_storage`: lay it out as a tensor of its own, offset 0, rather than as the example's
    storage says (see _compile_ahead)."""
    if not isinstance(t, torch.Tensor):
        return None
    if t.device.type == "cpu":
        return (True, t.dtype, [], [], 0, 0, 0) if t.dim() == 0 else None
    sizes, strides = [int(d) for d in t.shape], [int(d) for d in t.stride()]
    if own_storage:
        span = 0 if 0 in sizes else 1 + sum((n - 1) * s for n, s in zip(sizes, strides))
        return (False, t.dtype, sizes, strides, 0, 0, span * t.element_size())
    storage = t.untyped_storage()
    return (False, t.dtype, sizes, strides, int(t.storage_offset()), storage._cdata, int(storage.nbytes()))


def _compile_ahead(program, example_inputs, kind):
    """Starts compiling the program for the example inputs' layout on another thread: the
    backward's while the forward still runs, the forward's while Dynamo finishes its guards.
    The first run finds it, or waits for it, unless its inputs are laid out otherwise.
    A forward's examples are Dynamo's copies of the real inputs (views and storages alike).
    A backward's are AOTAutograd's values of the forward's outputs; they are laid out as the
    forward program returns them (_saved_examples)."""
    if example_inputs is None or not compile_ahead_enabled():
        return
    try:
        if kind == "backward":
            examples = _saved_examples(program)
        else:
            taken = example_inputs if program.kept is None else [example_inputs[i] for i in program.kept]
            examples = [_example(t, False) for t in taken]
        examples += [_example(t, False) for t in program.constants]
    except Exception:  # symbolic sizes, tensor subclasses: compiled at the first run instead
        return
    if all(e is not None for e in examples):
        program.graph.compile_ahead(examples)


def _saved_examples(program):
    """A backward's examples as its first run will see them: a saved tensor the forward program
    returns as a view of a value it returns (or hides) reads that value's buffer, shaped like
    it, shared with the other views of it; one that is the forward's input, or a view of it,
    reads that input's storage; any other is a dense buffer of its own (as are the gradients)."""
    placeholders = list(program.gm.graph.find_nodes(op="placeholder"))
    taken = placeholders if program.kept is None else [placeholders[i] for i in program.kept]
    keys = {}

    def storage_id(key):
        return keys.setdefault(key, len(keys) + 1)  # distinct storages: the C++ side tells them apart by id

    examples = []
    for node in taken:
        t = _node_val(node)
        example = _example(t, True)
        if example is None or example[0]:
            examples.append(example)
            continue
        position = _forward_outputs.positions.get(node.name)
        storage = _forward_outputs.storages[position] if position is not None else None
        sizes, strides, offset = example[2], example[3], int(t.storage_offset())
        if storage is not None and storage[0] == "out" and storage[4] == t.dtype:
            _, index, dims, nbytes, _ = storage
            examples.append((False, t.dtype, sizes, strides, offset, storage_id(storage[:2]), nbytes, dims))
        elif storage is not None and storage[0] == "in" and _dense_own(_forward_outputs.inputs[storage[1]]):
            base = _forward_outputs.inputs[storage[1]]
            dims = _memory_order([int(n) for n in base.shape], [int(n) for n in base.stride()])
            examples.append((False, t.dtype, sizes, strides, offset, storage_id(storage[:2]),
                             int(base.untyped_storage().nbytes()), dims))
        else:
            examples.append(example[:5] + (storage_id(("own", node.name)),) + example[6:])
    return examples


def _dense_own(t):
    """Whether `t` is the whole of its storage, dense from offset 0 (its buffer has its shape)."""
    from .describe import _is_dense
    return (isinstance(t, torch.Tensor) and t.device.type != "cpu" and t.storage_offset() == 0
            and _is_dense(t.shape, t.stride()) and t.numel() * t.element_size() == t.untyped_storage().nbytes())


def _lower_static(gm, name):
    """A boxed callable for a static graph (a bucket's specialization of a symbolic one)."""
    program, bad = _lower_whole(gm, name)
    if program is not None:
        return program
    fused = _partition(gm, bad, name)
    return _boxed(fused if fused is not None else gm)


def compile_fx(gm, example_inputs=None, kind="graph"):
    """Lowers one AOTAutograd graph of ATen ops; returns a boxed callable."""
    name = _fresh_name(kind)
    _compat.fold_host_constants_moved_to_tpu(gm)
    if not any(n.op == "call_function" for n in gm.graph.nodes):
        return _boxed(gm)
    if bucketing.symbolic(gm):
        forward = _forward_outputs.bucketed if kind == "backward" else None
        program = bucketing.Bucketed(gm, name, _lower_static, forward)
        if kind == "forward":
            _forward_outputs.positions = {}  # its outputs are sliced from bucket-sized buffers
            _forward_outputs.bucketed = program
        return program
    program, bad = _lower_whole(gm, name)
    if program is not None:
        if kind == "forward":
            _note_forward(program, gm, example_inputs)
        _compile_ahead(program, example_inputs, kind)
        return program
    if kind == "forward":
        _forward_outputs.positions = {}  # a partitioned forward returns its outputs through eager nodes
    fused = _partition(gm, bad, name)
    return _boxed(fused if fused is not None else gm)
