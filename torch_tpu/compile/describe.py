"""Describing an FX graph of ATen ops as the tuple csrc/aten/compiled/compiled_graph.cpp lowers:
inputs, nodes (op, arguments, result types) and outputs. Each argument is encoded by the role
the C++ argument model gives it (_C._op_arguments); the kinds of the encoding are named by the
C++ side (_C._arg_kinds), not mirrored here."""
import functools
import operator

import torch
import torch.fx

from .. import _C


class _Unsupported(Exception):
    """A node (or graph) the compiled program cannot contain; it runs eagerly instead."""


class _HostWork(_Unsupported):
    """A node that works on CPU tensors or host values: it stays on the CPU, as in eager."""


class _CpuOperand(_HostWork):
    """A node reading a 0-d CPU tensor that another node computes: it can join a compiled
    piece of the graph, which then takes that tensor as a run-time scalar input."""


# Kinds of nodes left out of a program (the second item of each `bad` entry).
_SOFT, _HOST, _HARD = "soft", "host", "hard"


# Argument kinds of the description, as csrc/aten/compiled/compiled_graph.cpp names them.
_KIND = _C._arg_kinds()
# Output kinds: a value of the program, an input returned as is, or None.
_OUT_VALUE, _OUT_INPUT, _OUT_NONE = range(3)


@functools.lru_cache(maxsize=None)
def _roles(op):
    """(names, roles) of `op`'s arguments from the C++ argument model (csrc/aten/dispatch/arguments.h)."""
    found = _C._op_arguments(op)
    return found if found is not None else ((), ())

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
    """Non-overlapping and dense in some dim order (compiled_graph.cpp lays such results out as is)."""
    expected = 1
    for size, stride in sorted(zip(sizes, strides), key=lambda p: p[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _is_whole_storage(val):
    """Contiguous from offset 0 of a storage it fills: its row-major array is its storage."""
    return (isinstance(val, torch.Tensor) and val.is_contiguous() and val.storage_offset() == 0
            and val.untyped_storage().nbytes() == val.numel() * val.element_size())


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


# Functional collectives a program can hold: the position of each one's group_name argument.
_COLLECTIVE_GROUP_ARG = {
    "_c10d_functional::all_reduce": 2,
    "_c10d_functional::all_to_all_single": 3,
    "_c10d_functional::all_gather_into_tensor": 2,
    "_c10d_functional::reduce_scatter_tensor": 3,
}


def _backend_name(group):
    """An in-process group's own name for its backend, else c10d's (ProcessGroup.name())."""
    return group.getBackendName() if hasattr(group, "getBackendName") else group.name()


def _collective_group(node, op):
    """(group name, size) of a functional collective node's group: an in-process one, or one of
    processes whose collectives run on the devices (its program then compiles for the group's
    devices and each process runs its replica). Collectives of other groups (Gloo) and other
    functional collectives run eagerly."""
    if op not in _COLLECTIVE_GROUP_ARG:
        raise _Unsupported(f"{op} is not lowered into programs (all_reduce, all_gather_into_tensor and "
                           "reduce_scatter_tensor are)")
    name = node.args[_COLLECTIVE_GROUP_ARG[op]] if len(node.args) > _COLLECTIVE_GROUP_ARG[op] else None
    if not isinstance(name, str):
        raise _Unsupported("a collective whose group is not a name")
    from ..distributed import IN_PROCESS_BACKEND

    group = torch.distributed.distributed_c10d._resolve_process_group(name)
    if _backend_name(group) != IN_PROCESS_BACKEND and not _C._runs_across_processes(name):
        raise _Unsupported(f"a collective of a {_backend_name(group)} group whose collectives run on the host "
                           "(only in-process groups' and those of processes on the devices run inside programs)")
    return (name, group.size())


def _world_span():
    """(name, size) of the world group, which a program holding the collectives of several
    groups is replicated over (a 2-D DeviceMesh's "dp" and "tp"): every rank of the world runs
    it, and each collective reduces over its own group's replicas."""
    from ..distributed import IN_PROCESS_BACKEND

    world = torch.distributed.distributed_c10d._get_default_group()
    if _backend_name(world) != IN_PROCESS_BACKEND and not _C._runs_across_processes(world.group_name):
        raise _Unsupported(f"collectives of several groups in a world of a {_backend_name(world)} group")
    return (world.group_name, world.size())


def _replication(groups):
    """The description's replication entry for a graph holding the collectives of `groups`
    ((name, size) each, in graph order): None without collectives, else (span name, span size,
    groups); the span is the one group, or the world (_world_span)."""
    if not groups:
        return None
    return (*(groups[0] if len(groups) == 1 else _world_span()), groups)


def _node_val(node):
    return node.meta.get("val", node.meta.get("example_value"))


def _opaque(val):
    """Whether a graph input is an object the program cannot take (a DTensor's DeviceMesh, as a
    script object), only pass on."""
    return isinstance(val, (torch.ScriptObject, torch._library.fake_class_registry.FakeScriptObject))


class _Describer:
    """Turns an FX graph of ATen ops into the tuple csrc/aten/compiled/compiled_graph.cpp reads."""

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
        self.view_bases = {}
        self.num_outputs = 0  # the graph's outputs; the program may return hidden ones after them
        self.bad = {}  # node -> (reason, kind)
        self.cpu_values = set()  # value ids of 0-d CPU tensors computed by nodes
        self.copy_targets = {}  # copy_ node -> placeholder index it writes
        self.next_id = 0
        self.collective_groups = []  # (group name, size) of the graph's collectives, by first use
        # Positions of the graph inputs the description lists (None: all); unused inputs that are
        # not tensors (DTensor's DeviceMesh) are left out.
        self.kept = None
        self.all_placeholders = []  # every placeholder, kept or not

    def tensor_id(self, node):
        vid = self.ids.get(node)
        if vid in self.cpu_values:
            raise _CpuOperand(f"operand '{node.name}' is a CPU scalar computed in the graph")
        if not isinstance(vid, int) or vid not in self.valid:
            raise _HostWork(f"operand '{node.name}' is not a tpu tensor in this graph")
        return vid

    def encode(self, role, jit_type, v):
        """(kind, payload) of one argument; `role` is the C++ argument model's."""
        t = jit_type.getElementType() if isinstance(jit_type, torch._C.OptionalType) else jit_type
        if role in ("generator", "implicit_rng"):
            # The program draws from the device's default generator at each run, as eager does.
            if v is not None:
                raise _Unsupported("an explicit torch.Generator argument")
            return (_KIND["generator"],)
        if v is None:
            return (_KIND["none"],)
        if isinstance(v, torch.fx.Node):
            if role in ("tensor", "inplace"):
                return (_KIND["tensor"], self.tensor_id(v))
            raise _Unsupported(f"a symbolic {t} argument (dynamic shapes)")
        if role == "tensor" and isinstance(v, (bool, int, float)):
            return (_KIND["scalar"], v)  # a Python number where a Tensor goes: a wrapped number, as in eager
        if role == "scalar":
            if not isinstance(v, (bool, int, float, complex)):
                raise _Unsupported(f"Scalar argument of type {type(v).__name__}")
            return (_KIND["scalar"], v)
        if role == "tensors":
            return (_KIND["tensors"], [-1 if x is None else self.tensor_id(x) for x in v])
        if role == "scalars":
            return (_KIND["scalars"], list(v))
        return self.encode_static(t, v)

    def encode_static(self, t, v):
        """A static argument: part of the program, converted by its schema type."""
        if isinstance(v, torch.dtype):
            return (_KIND["dtype"], v)
        if isinstance(v, torch.layout):
            return (_KIND["layout"], v)
        if isinstance(v, torch.memory_format):
            return (_KIND["memory_format"], v)
        if isinstance(v, torch.device) or isinstance(t, torch._C.DeviceObjType):
            return (_KIND["none"],)
        if isinstance(t, (torch._C.IntType, torch._C.SymIntType)):
            return (_KIND["int"], int(v))
        if isinstance(t, torch._C.FloatType):
            return (_KIND["double"], float(v))
        if isinstance(t, torch._C.BoolType):
            return (_KIND["bool"], bool(v))
        if isinstance(t, torch._C.StringType) or (isinstance(t, torch._C.AnyType) and isinstance(v, str)):
            return (_KIND["str"], str(v))  # Any: a functional collective's group_name
        if isinstance(t, torch._C.ListType):
            if any(isinstance(x, torch.fx.Node) for x in v):
                raise _Unsupported("a symbolic list argument (dynamic shapes)")
            e = t.getElementType()
            e = e.getElementType() if isinstance(e, torch._C.OptionalType) else e
            if isinstance(e, (torch._C.IntType, torch._C.SymIntType)):
                return (_KIND["ints"], [int(x) for x in v])
            if isinstance(e, torch._C.FloatType):
                return (_KIND["doubles"], [float(x) for x in v])
            if isinstance(e, torch._C.BoolType):
                return (_KIND["bools"], [bool(x) for x in v])
        raise _Unsupported(f"an argument of type {t}")

    def encode_args(self, node):
        schema = node.target._schema
        _, roles = _roles(_op_name(node.target))
        if len(roles) < len(schema.arguments):
            raise _Unsupported("an op the dispatcher does not know")
        out = []
        for i, a in enumerate(schema.arguments):
            if roles[i] == "out":
                raise _Unsupported("an out= op")
            if roles[i] == "inplace" and node.target is not torch.ops.aten.copy_.default:
                raise _Unsupported("an op that mutates its operand")
            if i < len(node.args) and not a.kwarg_only:
                v = node.args[i]
            elif a.name in node.kwargs:
                v = node.kwargs[a.name]
            elif a.has_default_value():
                v = a.default_value
            else:
                v = None
            out.append(self.encode(roles[i], a.type, v))
        # Random ops without a Generator argument (native_dropout, rand_like, ...) draw from
        # the default generator: the argument model gives them a trailing implicit RNG state.
        out.extend(self.encode(r, None, None) for r in roles[len(schema.arguments):])
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
            if op.startswith("_c10d_functional::") and op != "_c10d_functional::wait_tensor":
                group = _collective_group(node, op)
                if group not in self.collective_groups:
                    if self.collective_groups:
                        _world_span()
                    self.collective_groups.append(group)
            if (node.target is torch.ops.aten.as_strided_scatter.default
                    and not _is_whole_storage(_node_val(node.args[0]))):
                # The lowering takes self's logical array for its storage (view_ops.cpp).
                raise _Unsupported("as_strided_scatter of a tensor that is not its whole contiguous storage")
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

    def view_chain(self, node):
        """(root, the view ops from root to `node`) when `node` is a chain of view ops with static
        arguments over a node that is not a view; else None."""
        chain = []
        while (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and node.target.is_view
               and node.args and isinstance(node.args[0], torch.fx.Node)
               and not any(isinstance(a, torch.fx.Node) for a in (*node.args[1:], *node.kwargs.values()))):
            chain.append(node)
            node = node.args[0]
        return (node, chain[::-1]) if chain else None

    def replayable_input(self, node):
        """Whether views of input `node` can be replayed on it after the program runs: only a dense
        input is sure to have its FX strides at run time (compiled_graph.cpp lays out non-dense
        results contiguously), and a written one is not the value the views saw."""
        index = self.placeholders.index(node)
        t = self.inputs[index]
        return t is not None and len(t) == 3 and _is_dense(t[1], t[2]) and index not in self.copy_targets.values()

    def returnable(self, node):
        """Whether the program can return `node`'s value as it is (a dense tpu result from offset 0),
        so that views of it can be replayed on the program's result."""
        if node.op != "call_function" or node in self.copy_targets or self.ids.get(node) not in self.valid:
            return False
        if self.ids[node] in self.cpu_values or (isinstance(node.target, torch._ops.OpOverload) and node.target.is_view):
            return False
        val = _node_val(node)
        return isinstance(val, torch.Tensor) and val.storage_offset() == 0 and _is_dense(val.shape, val.stride())

    def outputs(self, out_arg):
        """The encoded outputs. Outputs that are views of an input or of a value the program computes
        are left out and replayed as views after it runs (partition._Program), so that they alias
        what they alias in eager and cost no device copy. A value that is not an output itself but
        has several outputs viewing it (the attention probabilities AOTAutograd saves as the
        softmax's result and as the batched matmul's operand) is returned once, as a hidden output
        after the graph's own, and each of those outputs is replayed on it."""
        items = list(out_arg) if isinstance(out_arg, (tuple, list)) else [out_arg]
        computed = {}
        for position, x in enumerate(items):
            if isinstance(x, torch.fx.Node) and self.returnable(x):
                computed.setdefault(x, position)
        chains = {}
        for position, x in enumerate(items):
            if isinstance(x, torch.fx.Node) and x not in computed:
                found = self.view_chain(x)
                if found is not None:
                    chains[position] = found
        viewers = {}
        for root, _ in chains.values():
            if root not in computed and self.returnable(root):
                viewers[root] = viewers.get(root, 0) + 1
        hidden = [root for root, n in viewers.items() if n > 1]
        for k, root in enumerate(hidden):
            computed[root] = len(items) + k
        # The values views are replayed on, by output index (the run's buffers have their shapes).
        self.view_bases = {index: root for root, index in computed.items()}
        encoded = []
        self.views = []  # (output position, ("input" | "output", index), view nodes)
        for position, x in enumerate(items):
            root, chain = chains.get(position, (None, None))
            if root is not None and root in computed:
                self.views.append((position, ("output", computed[root]), chain))
                encoded.append((_OUT_NONE, 0))
            elif root is not None and root.op == "placeholder" and self.replayable_input(root):
                self.views.append((position, ("input", self.placeholders.index(root)), chain))
                encoded.append((_OUT_NONE, 0))
            elif x is None:
                encoded.append((_OUT_NONE, 0))
            elif isinstance(x, torch.fx.Node) and x.op == "placeholder" and x not in self.placeholders:
                # An opaque input returned as it is (the DeviceMesh a DTensor forward saves for
                # its backward): handed from the call's arguments to its results, never to the program.
                self.views.append((position, ("arg", self.all_placeholders.index(x)), []))
                encoded.append((_OUT_NONE, 0))
            elif not isinstance(x, torch.fx.Node):
                raise _Unsupported(f"a graph output that is not a tensor ({type(x).__name__})")
            elif x.op in ("placeholder", "get_attr") and x in self.placeholders:
                encoded.append((_OUT_INPUT, self.placeholders.index(x)))
            elif x in self.copy_targets:
                encoded.append((_OUT_INPUT, self.copy_targets[x]))
            else:
                encoded.append((_OUT_VALUE, self.tensor_id(x)))
        self.num_outputs = len(items)
        encoded.extend((_OUT_VALUE, self.tensor_id(root)) for root in hidden)
        return encoded

    def describe(self, name):
        out_arg = None
        # Inputs take the first value ids (a fused piece may list its placeholders late).
        placeholders = list(self.gm.graph.find_nodes(op="placeholder"))
        self.all_placeholders = placeholders
        kept = [i for i, node in enumerate(placeholders)
                if isinstance(_node_val(node), torch.Tensor) or (node.users and not _opaque(_node_val(node)))]
        self.kept = kept if len(kept) < len(placeholders) else None
        for node in (placeholders[i] for i in kept):
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
                self.ids.setdefault(node, None)
                continue
            if node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                out_arg = node.args[0]
            else:  # get_attr (constants, subgraphs), call_module: not values of a program
                self.ids[node] = None
                for user in node.users:
                    self.bad.setdefault(user, (f"uses '{node.name}' ({node.op})", _HARD))
        outputs = self.outputs(out_arg) if not self.bad else []
        return (name, self.inputs, self.nodes, outputs, _replication(self.collective_groups))
