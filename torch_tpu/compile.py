"""torch.compile(backend="tpu"): whole graphs through the eager lowering table.

Dynamo hands the backend an FX graph; AOTAutograd (core ATen decompositions) turns it into
a forward and a backward graph (or one inference graph) of ATen ops; each becomes one
StableHLO program, built in csrc/aten/graph.cpp by calling every node's lowering from the
table eager uses, and compiled through the runtime's memory and disk caches. Nodes that have
no lowering run eagerly on tpu between compiled pieces of the graph.

Shapes are static: every new input shape is a Dynamo recompilation (counted, with its
reason, in torch_tpu.metrics()) and a new program. dynamic=True is refused.

Nodes left to run eagerly are counted in torch_tpu.metrics()["compile_eager_nodes_by_op"] and
warned about once per op; TORCH_TPU_STRICT=1 makes such a node an error that names it.
TORCH_TPU_COMPILE_PARTITION=min_cut saves fewer activations for backward (recomputes them).

Loaded lazily: the "tpu" name reaches Dynamo through the `torch_dynamo_backends` entry point,
so `import torch_tpu` does not import Dynamo.
"""
import operator
import os
import threading
import warnings

import torch
import torch._dynamo
import torch.fx
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd

from . import _C
from . import _flex_attention
from . import _compile_stats as _stats

__all__ = ["backend"]

# Argument kinds and output kinds shared with csrc/aten/graph.cpp.
(_NONE, _TENSOR, _SCALAR, _INT, _DOUBLE, _BOOL, _INTS, _DOUBLES, _BOOLS, _STR, _TENSORS, _SCALARS, _DTYPE, _LAYOUT,
 _MEMORY_FORMAT, _GENERATOR) = range(16)
_OUT_VALUE, _OUT_INPUT, _OUT_NONE = range(3)

_DYNAMIC_MESSAGE = (
    "torch.compile(backend='tpu') compiles static shapes only: dynamic=True, torch._dynamo.mark_dynamic and "
    "symbolic shapes are not supported yet. Leave `dynamic` unset (or pass dynamic=False): each new input "
    "shape then compiles its own program.")


class _Unsupported(Exception):
    """A node (or graph) the compiled program cannot contain; it runs eagerly instead."""


class _HostWork(_Unsupported):
    """A node that works on CPU tensors or host values: it stays on the CPU, as in eager."""


class _CpuOperand(_HostWork):
    """A node reading a 0-d CPU tensor that another node computes: it can join a compiled
    piece of the graph, which then takes that tensor as a run-time scalar input."""


# Kinds of nodes left out of a program (the second item of each `bad` entry).
_SOFT, _HOST, _HARD = "soft", "host", "hard"


# ---------------------------------------------------------------- graph description
def _op_name(target):
    if not isinstance(target, torch._ops.OpOverload):
        raise _Unsupported(f"not an ATen op: {getattr(target, '__name__', target)}")
    schema = target._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _static(shape):
    if any(isinstance(s, torch.SymInt) for s in shape):
        raise _Unsupported("symbolic shape")
    return [int(s) for s in shape]


def _tensor_type(val):
    """(dtype, sizes, strides) of a tpu FakeTensor; None for an absent (None) result."""
    if val is None:
        return None
    if not isinstance(val, torch.Tensor):
        raise _HostWork(f"a result that is not a tensor ({type(val).__name__})")
    if val.device.type != "tpu":
        raise _HostWork(f"a result on {val.device}")
    if val.layout != torch.strided:
        raise _Unsupported(f"layout {val.layout}")
    return (val.dtype, _static(val.shape), _static(val.stride()))


def _element_type(val):
    """_tensor_type of one result of a multi-result op; ints there (sizes the op reports) are
    not values of the program."""
    if isinstance(val, (int, float, bool, torch.SymInt)):
        return None
    return _tensor_type(val)


def _is_cpu_scalar(val):
    return isinstance(val, torch.Tensor) and val.device.type == "cpu" and val.dim() == 0


def _hosted_type(val):
    return None if val is None else (val.dtype, [], [])


def _consumers(node):
    """Users of `node`, looking through getitem."""
    for user in node.users:
        if user.target is operator.getitem:
            yield from _consumers(user)
        else:
            yield user


def _is_dense(sizes, strides):
    """Non-overlapping and dense in some dim order (graph.cpp lays such results out as is)."""
    expected = 1
    for size, stride in sorted(zip(sizes, strides), key=lambda p: p[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _input_type(val):
    """Like _tensor_type for a graph input; a 0-d CPU tensor becomes a run-time scalar."""
    if isinstance(val, torch.Tensor) and val.device.type == "cpu" and val.dim() == 0:
        return (val.dtype, [], [], True)
    return _tensor_type(val)


def _fetch_attr(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj


def _node_val(node):
    return node.meta.get("val", node.meta.get("example_value"))


class _Describer:
    """Turns an FX graph of ATen ops into the tuple csrc/aten/graph.cpp reads."""

    def __init__(self, gm, eager_cpu=frozenset(), piece=False):
        self.gm = gm
        # 0-d CPU results (optimizer step counts, ...) are computed on the device when all their
        # consumers are in the program; `eager_cpu` lists the nodes that must stay on the CPU.
        self.eager_cpu = eager_cpu
        self.piece = piece  # a piece of a partitioned graph: its outputs stay internal
        self.hosted = set()
        self.ids = {}  # node -> value id, or list of ids for multi-result nodes
        self.valid = set()  # value ids that are tpu tensors
        self.inputs, self.nodes, self.order, self.placeholders = [], [], [], []
        self.constants = []  # tensors of get_attr nodes, passed after the placeholders
        self.views = []
        self.bad = {}  # node -> (reason, kind)
        self.cpu_values = set()  # value ids of 0-d CPU tensors computed by nodes
        self.copy_targets = {}  # copy_ node -> placeholder index it writes
        self.next_id = 0

    def tensor_id(self, node):
        vid = self.ids.get(node)
        if vid in self.cpu_values:
            raise _CpuOperand(f"operand '{node.name}' is a CPU scalar computed in the graph")
        if not isinstance(vid, int) or vid not in self.valid:
            raise _HostWork(f"operand '{node.name}' is not a tpu tensor in this graph")
        return vid

    def encode(self, jit_type, v):
        t = jit_type.getElementType() if isinstance(jit_type, torch._C.OptionalType) else jit_type
        if isinstance(t, torch._C._GeneratorType):
            # The program draws from the device's default generator at each run, as eager does.
            if v is not None:
                raise _Unsupported("an explicit torch.Generator argument")
            return (_GENERATOR,)
        if v is None:
            return (_NONE,)
        if isinstance(v, torch.fx.Node):
            if isinstance(t, torch._C.TensorType):
                return (_TENSOR, self.tensor_id(v))
            raise _Unsupported(f"a symbolic {t} argument (dynamic shapes)")
        if isinstance(t, torch._C.TensorType) and isinstance(v, (bool, int, float)):
            return (_SCALAR, v)  # a Python number where a Tensor goes: a wrapped number, as in eager
        if isinstance(v, torch.dtype):
            return (_DTYPE, v)
        if isinstance(v, torch.layout):
            return (_LAYOUT, v)
        if isinstance(v, torch.memory_format):
            return (_MEMORY_FORMAT, v)
        if isinstance(v, torch.device):
            return (_NONE,)
        if isinstance(t, torch._C.NumberType):
            if not isinstance(v, (bool, int, float, complex)):
                raise _Unsupported(f"Scalar argument of type {type(v).__name__}")
            return (_SCALAR, v)
        if isinstance(t, (torch._C.IntType, torch._C.SymIntType)):
            return (_INT, int(v))
        if isinstance(t, torch._C.FloatType):
            return (_DOUBLE, float(v))
        if isinstance(t, torch._C.BoolType):
            return (_BOOL, bool(v))
        if isinstance(t, torch._C.StringType):
            return (_STR, str(v))
        if isinstance(t, torch._C.ListType):
            e = t.getElementType()
            e = e.getElementType() if isinstance(e, torch._C.OptionalType) else e
            if isinstance(e, torch._C.TensorType):
                return (_TENSORS, [-1 if x is None else self.tensor_id(x) for x in v])
            if any(isinstance(x, torch.fx.Node) for x in v):
                raise _Unsupported("a symbolic list argument (dynamic shapes)")
            if isinstance(e, (torch._C.IntType, torch._C.SymIntType)):
                return (_INTS, [int(x) for x in v])
            if isinstance(e, torch._C.FloatType):
                return (_DOUBLES, [float(x) for x in v])
            if isinstance(e, torch._C.BoolType):
                return (_BOOLS, [bool(x) for x in v])
            if isinstance(e, torch._C.NumberType):
                return (_SCALARS, list(v))
        if isinstance(t, torch._C.DeviceObjType):
            return (_NONE,)
        raise _Unsupported(f"an argument of type {t}")

    def encode_args(self, node):
        schema = node.target._schema
        out = []
        for i, a in enumerate(schema.arguments):
            if a.is_out:
                raise _Unsupported("an out= op")
            if a.alias_info is not None and a.alias_info.is_write and node.target is not torch.ops.aten.copy_.default:
                raise _Unsupported("an op that mutates its operand")
            if i < len(node.args) and not a.kwarg_only:
                v = node.args[i]
            elif a.name in node.kwargs:
                v = node.kwargs[a.name]
            elif a.has_default_value():
                v = a.default_value
            else:
                v = None
            out.append(self.encode(a.type, v))
        # Random ops without a Generator argument (native_dropout, rand_like, ...) draw from
        # the default generator: eager appends its state as a last argument, and so does this.
        if torch.Tag.nondeterministic_seeded in node.target.tags and not any(
                isinstance(a.type.getElementType() if isinstance(a.type, torch._C.OptionalType) else a.type,
                           torch._C._GeneratorType) for a in schema.arguments):
            out.append((_GENERATOR,))
        return out

    def add_values(self, node, types, multi):
        first = self.next_id
        self.next_id += len(types)
        for k, t in enumerate(types):
            if t is not None:
                self.valid.add(first + k)
        self.ids[node] = list(range(first, first + len(types))) if multi else first

    def call(self, node):
        if node.target is operator.getitem:
            src, index = node.args
            ids = self.ids.get(src)
            self.ids[node] = ids[index] if isinstance(ids, list) and isinstance(index, int) else None
            return
        val = _node_val(node)
        multi = isinstance(val, (tuple, list))
        hosted = self.hostable(node, val if multi else [val])
        try:
            op = _op_name(node.target)
            types = [_hosted_type(v) if hosted else _element_type(v) if multi else _tensor_type(v)
                     for v in (val if multi else [val])]
            if node.target is torch.ops.aten.copy_.default:
                target = node.args[0]
                if target.op != "placeholder":
                    raise _Unsupported("copy_ into a value that is not a graph input")
                self.copy_targets[node] = self.placeholders.index(target)
                if self.inputs[self.copy_targets[node]] is None or len(self.inputs[self.copy_targets[node]]) > 3:
                    raise _HostWork("copy_ into a CPU tensor")
            args = self.encode_args(node)
        except _Unsupported as e:
            kind = _SOFT if isinstance(e, _CpuOperand) else _HOST if isinstance(e, _HostWork) else _HARD
            self.bad[node] = (str(e), kind)
            op, args = "<eager>", []
            types = []
            for v in (val if multi else [val]):
                try:
                    types.append(_tensor_type(v))
                except _Unsupported:
                    types.append(None)
        self.nodes.append((node.name, op, args, types))
        self.order.append(node)
        self.add_values(node, types, multi)
        ids = self.ids[node] if multi else [self.ids[node]]
        if hosted and node not in self.bad:
            self.hosted.add(node)
            return
        for vid, v in zip(ids, val if multi else [val]):
            if isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dim() == 0:
                self.cpu_values.add(vid)

    def hostable(self, node, vals):
        if node in self.eager_cpu or not any(_is_cpu_scalar(v) for v in vals):
            return False
        if not all(v is None or _is_cpu_scalar(v) for v in vals):
            return False
        for user in _consumers(node):
            if user.op == "output" and not self.piece:
                return False
            if user.target is torch.ops.aten.copy_.default:
                return False
        return True

    def view_chain(self, node, computed):
        """The view ops from an input or a computed output to `node`, or None when `node` is not
        such a view. The program leaves those outputs out; they are replayed as views after it
        runs, so that they alias what they alias in eager (and cost no device copy)."""
        chain = []
        while (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and node.target.is_view
               and node.args and isinstance(node.args[0], torch.fx.Node)
               and not any(isinstance(a, torch.fx.Node) for a in (*node.args[1:], *node.kwargs.values()))):
            chain.append(node)
            node = node.args[0]
            if node in computed:
                return node, chain[::-1]
            if node.op == "placeholder":
                index = self.placeholders.index(node)
                mutated = index in self.copy_targets.values()
                t = self.inputs[index]
                # Only a dense input is sure to have its FX strides at run time (graph.cpp lays
                # out non-dense results contiguously), which the replayed views rely on.
                if t is not None and len(t) == 3 and _is_dense(t[1], t[2]) and not mutated:
                    return node, chain[::-1]
                return None
        return None

    def outputs(self, out_arg):
        items = list(out_arg) if isinstance(out_arg, (tuple, list)) else [out_arg]
        # Outputs computed by the program whose layout is exactly their FX layout (dense, from
        # offset 0): views of them can be replayed on the program's result.
        computed = {}
        for position, x in enumerate(items):
            if not isinstance(x, torch.fx.Node) or x.op != "call_function" or x in self.copy_targets:
                continue
            if isinstance(x.target, torch._ops.OpOverload) and x.target.is_view:
                continue
            val = _node_val(x)
            if isinstance(val, torch.Tensor) and val.storage_offset() == 0 and _is_dense(val.shape, val.stride()):
                computed.setdefault(x, position)
        encoded = []
        self.views = []  # (output position, ("input" | "output", index), view nodes)
        for position, x in enumerate(items):
            found = self.view_chain(x, computed) if isinstance(x, torch.fx.Node) and x not in computed else None
            if found is not None:
                base, chain = found
                source = ("output", computed[base]) if base in computed else ("input", self.placeholders.index(base))
                self.views.append((position, source, chain))
                encoded.append((_OUT_NONE, 0))
            elif x is None:
                encoded.append((_OUT_NONE, 0))
            elif not isinstance(x, torch.fx.Node):
                raise _Unsupported(f"a graph output that is not a tensor ({type(x).__name__})")
            elif x.op in ("placeholder", "get_attr") and x in self.placeholders:
                encoded.append((_OUT_INPUT, self.placeholders.index(x)))
            elif x in self.copy_targets:
                encoded.append((_OUT_INPUT, self.copy_targets[x]))
            else:
                encoded.append((_OUT_VALUE, self.tensor_id(x)))
        return encoded

    def describe(self, name):
        out_arg = None
        # Inputs take the first value ids (a fused piece may list its placeholders late).
        for node in self.gm.graph.find_nodes(op="placeholder"):
            self.placeholders.append(node)
            val = _node_val(node)
            try:
                t = _input_type(val) if isinstance(val, torch.Tensor) else None
            except _Unsupported:
                t = None
            self.inputs.append(t)
            self.add_values(node, [t], False)
        for node in self.gm.graph.find_nodes(op="get_attr"):
            val = _fetch_attr(self.gm, node.target)
            if not isinstance(val, torch.Tensor):
                continue
            try:
                t = _input_type(val)
            except _Unsupported:
                continue
            self.placeholders.append(node)
            self.constants.append(val)
            self.inputs.append(t)
            self.add_values(node, [t], False)
        for node in self.gm.graph.nodes:
            if node.op == "placeholder" or node in self.ids:
                continue
            if node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                out_arg = node.args[0]
            else:  # get_attr (constants, subgraphs), call_module: not values of a program
                self.ids[node] = None
                for user in node.users:
                    self.bad.setdefault(user, (f"uses '{node.name}' ({node.op})", _HARD))
        return (name, self.inputs, self.nodes, self.outputs(out_arg) if not self.bad else [])


# ---------------------------------------------------------------- programs
class _Program:
    """A lowered FX graph: runs the compiled program on the graph's inputs (a boxed call:
    one list of tensors), returning its outputs."""

    def __init__(self, graph, gm, name, single_output, constants=(), views=()):
        self.graph, self.gm, self.name, self.single = graph, gm, name, single_output
        self.constants = list(constants)
        # Outputs that are views: (position, (source kind, index), [(view op, args, kwargs)...])
        self.views = [(pos, src, [(n.target, n.args[1:], n.kwargs) for n in chain]) for pos, src, chain in views]
        self._boxed_call = True  # on the instance: wrappers copy the instance's __dict__
        self._warned = False

    def __call__(self, args):
        inputs = args + self.constants if self.constants else args
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
            t = inputs[index] if kind == "input" else out[index]
            for op, op_args, op_kwargs in chain:
                t = op(t, *op_args, **op_kwargs)
            out[position] = t
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
    return _Program(graph, gm, name, not isinstance(out_arg, (tuple, list)), d.constants, d.views), {}


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


def compile_fx(gm, example_inputs=None, kind="graph"):
    """Lowers one AOTAutograd graph of ATen ops; returns a boxed callable."""
    name = _fresh_name(kind)
    if not any(n.op == "call_function" for n in gm.graph.nodes):
        return _boxed(gm)
    program, bad = _lower_whole(gm, name)
    if program is not None:
        return program
    fused = _partition(gm, bad, name)
    return _boxed(fused if fused is not None else gm)


def _forward_compiler(gm, example_inputs):
    return compile_fx(gm, example_inputs, "forward")


def _backward_compiler(gm, example_inputs):
    return compile_fx(gm, example_inputs, "backward")


def _inference_compiler(gm, example_inputs):
    return compile_fx(gm, example_inputs, "inference")


# ---------------------------------------------------------------- decompositions
def _lowered():
    return set(_C._lowered_ops()) | set(_C._graph_only_ops())


def _foreach_decomposition(op):
    """_foreach_X(lists...) = [X(elements i...) for each i], for foreach ops without a lowering."""
    base = getattr(torch.ops.aten, op._schema.name.split("::")[1][len("_foreach_"):])
    arguments = op._schema.arguments

    def decompose(*args, **kwargs):
        values = [args[i] if i < len(args) else kwargs.get(a.name, a.default_value) for i, a in enumerate(arguments)]
        lists = [i for i, a in enumerate(arguments) if isinstance(a.type, torch._C.ListType)]
        n = len(values[lists[0]])
        return [base(*[values[j][i] if j in lists else values[j] for j in range(len(values))]) for i in range(n)]

    return decompose


# Composites that core ATen keeps but that decompose into ops with lowerings.
_EXTRA_DECOMPOSITIONS = [
    "_native_batch_norm_legit_functional.default", "_native_batch_norm_legit.default",
    "_native_batch_norm_legit.no_stats", "_native_batch_norm_legit_no_training.default", "native_batch_norm.default",
    "native_batch_norm_backward.default", "max_pool2d_with_indices.default", "max_pool2d_with_indices_backward.default",
]


def _decompositions():
    from torch._decomp import get_decompositions

    table = dict(core_aten_decompositions())
    lowered = _lowered()
    extra = []
    for name in _EXTRA_DECOMPOSITIONS:
        packet, overload = name.split(".")
        if f"aten::{packet}" + ("" if overload == "default" else f".{overload}") not in lowered:
            extra.append(getattr(getattr(torch.ops.aten, packet), overload))
    table.update(get_decompositions(extra))
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::_foreach_") or name.endswith("_") or ".out" in name or "_." in name:
            continue
        if name in lowered:
            continue
        packet_name, _, overload = name[len("aten::"):].partition(".")
        base = packet_name[len("_foreach_"):]
        packet = getattr(torch.ops.aten, packet_name, None)
        if packet is None or not hasattr(torch.ops.aten, base):
            continue
        op = getattr(packet, overload or "default", None)
        if op is None or not any(isinstance(a.type, torch._C.ListType) for a in op._schema.arguments):
            continue
        table[op] = _foreach_decomposition(op)
    return table


# ---------------------------------------------------------------- the Dynamo backend
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
    if not torch._dynamo.config.assume_static_by_default:
        raise RuntimeError(_DYNAMIC_MESSAGE)
    for x in example_inputs:
        if isinstance(x, (torch.SymInt, torch.SymFloat)) or (
                isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape)):
            raise RuntimeError(_DYNAMIC_MESSAGE)


_aot_backend = None


def _partition_fn():
    """How AOTAutograd splits the joint graph; TORCH_TPU_COMPILE_PARTITION=default|min_cut."""
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

    choice = os.environ.get("TORCH_TPU_COMPILE_PARTITION", "default")
    return min_cut_rematerialization_partition if choice == "min_cut" else default_partition


def backend(gm, example_inputs, **kwargs):
    """The "tpu" Dynamo backend: AOTAutograd with core ATen decompositions, each forward,
    backward and inference graph lowered to one program (csrc/aten/graph.cpp)."""
    global _aot_backend
    if kwargs.get("options"):
        warnings.warn(f"torch.compile(backend='tpu') ignores options {sorted(kwargs['options'])}")
    _check_static(gm, example_inputs)
    _note_compile()
    gm = _flex_attention.inline(gm)  # a higher-order op: its dense math, for AOTAutograd to trace
    if _aot_backend is None:
        _aot_backend = aot_autograd(
            fw_compiler=_forward_compiler,
            bw_compiler=_backward_compiler,
            inference_compiler=_inference_compiler,
            decompositions=_decompositions(),
            keep_inference_input_mutations=True,
            partition_fn=_partition_fn(),
        )
    return _aot_backend(gm, example_inputs)


# Static shapes by default: without this, Dynamo's automatic dynamic shapes would turn the
# second shape a function sees into a symbolic graph, which this backend refuses. As with
# torch.compile(dynamic=False), each new shape is then a recompilation with its own program.
torch._dynamo.config.automatic_dynamic_shapes = False

# `torch.compile(backend="tpu")` finds this module through the `torch_dynamo_backends` entry
# point; when it is imported directly first, register the name here.
from torch._dynamo.backends import registry as _registry  # noqa: E402

if "tpu" not in _registry._BACKENDS:
    _registry.register_backend(compiler_fn=backend, name="tpu")
