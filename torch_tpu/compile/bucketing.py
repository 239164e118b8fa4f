"""Graphs with symbolic sizes (torch.compile(dynamic=True), mark_dynamic, automatic dynamic):
one program per bucket of their sizes, with exact values (docs/buckets.md).

At a call, each symbol of the graph is bound to its size (from the inputs), rounded up to its
bucket (torch_tpu.buckets), and the graph is specialized to the bucket sizes: every node's
symbolic FakeTensor becomes a static one of the bucket shape (its sizes and strides evaluated
with the symbols bound to the buckets), symbolic arguments become their bucket values, and the
static graph is lowered as any other (partition._lower_whole), once per bucket.

Each value of the graph has a layout: per dim, its factors outer to inner, (physical extent,
logical size) each; a dim of a bare symbol is one padded factor, a flattened [b, s] is two. The
valid positions of a padded dim are a prefix of each factor. The logical sizes reach the program
as run-time scalars (0-d CPU int64 inputs), one per distinct size expression. Ops that would let
the padding in get masks made of ATen nodes, lowered by the same table:
  reductions (sum, mean, amax, amin, var) along a padded dim: identity values, counts from the
  logical sizes; softmax / log_softmax: -inf; their backward: a zero gradient; mm / bmm / addmm
  contracting over a padded dim: zeros in both operands; attention: -inf in the bias at padded
  keys, a zero output gradient at padded queries; indices (embedding, index) read row 0 where
  they are padding; embedding's backward: a zero gradient.
The layouts and the rules per op family live in bucket_rules.py.
Elementwise ops, views that keep each padded factor whole, prefix slices, cumsum and cat with
the padded operand last need nothing. Any other op along a padded dim makes the graph run at
exact sizes for that call (a program per size, as before buckets), counted in
torch_tpu.metrics()["bucket_fallbacks_by_op"]: correctness never depends on coverage.

Inputs are padded with zeros to their bucket (counted as bucket_pads), outputs sliced back to
their logical sizes; returned sizes are the logical ones.
"""
import math
import operator

import sympy
import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode

from .. import _compile_stats as _stats
from .. import buckets as _buckets
from .describe import _node_val, _op_name
from .bucket_rules import (_ARANGES, _RULES, _SCALAR_TO_TENSOR, _Fallback, _Retargeted, _canonical_dim,
                           _dim_padded, _eval, _exact, _expr, _factory, _has_syms, _is_sym, _normal, _padded,
                           _pointwise)

aten = torch.ops.aten


def symbolic(gm):
    """Whether `gm` has symbolic sizes (its inputs or any node)."""
    return any(_has_syms(_node_val(n)) for n in gm.graph.nodes if n.op in ("placeholder", "call_function"))


class _Specializer:
    """Builds the static graph of `gm` for one binding of its symbols to physical sizes."""

    def __init__(self, gm, phys, padded, known=None):
        self.gm, self.phys, self.padded = gm, phys, padded
        self.known = known or {}  # input name -> layout (a backward's saved tensors: the forward's)
        self.out_layouts = {}  # output node name -> layout
        self.fake = FakeTensorMode(allow_non_fake_inputs=True)
        self.graph = torch.fx.Graph()
        self.env = {}  # old node -> new node (or a constant for a size)
        self.layouts = {}  # old node -> layout (tensor) or list of layouts (multi-result)
        self.logical = {}  # logical size expr -> placeholder
        self.tensor_inputs = []  # positions of the original inputs the program takes
        self.input_layouts = {}  # position -> layout
        self.outputs = []  # per original output: ("tensor", k, layout) | ("size", expr) | ("value", v)

    # -- static values
    def static_val(self, val):
        if isinstance(val, torch.Tensor):
            sizes = [_eval(_expr(s), self.phys) for s in val.shape]
            strides = [_eval(_expr(s), self.phys) for s in val.stride()]
            with self.fake:
                return torch.empty_strided(sizes, strides, dtype=val.dtype, device=val.device)
        if isinstance(val, (tuple, list)):
            return type(val)(self.static_val(v) for v in val)
        if isinstance(val, torch.SymInt):
            return _eval(_expr(val), self.phys)
        if isinstance(val, (torch.SymFloat, torch.SymBool)):
            # a value computed from sizes (batch norm's n / (n - 1)): consumers that take it as a
            # value make a padded graph fall back (check_scalars); at exact sizes it is exact
            v = val.node.expr.xreplace(self.phys)
            if isinstance(v, sympy.Basic) and not v.is_number:
                raise _Fallback(f"unbound value {val.node.expr}")
            return float(v) if isinstance(val, torch.SymFloat) else bool(v)
        return val

    def const(self, v):
        """A node argument with every size evaluated at its physical value."""
        if isinstance(v, torch.fx.Node):
            new = self.env[v]
            return new
        if isinstance(v, (list, tuple)):
            return type(v)(self.const(x) for x in v)
        if isinstance(v, torch.SymInt):
            return _eval(_expr(v), self.phys)
        return v

    def emit(self, target, args, kwargs=None):
        """A new node computing target(args) (inserted masks), with its static FakeTensor."""
        node = self.graph.call_function(target, tuple(args), kwargs or {})

        def val(a):
            return a.meta["val"] if isinstance(a, torch.fx.Node) else a

        with self.fake:
            node.meta["val"] = target(*torch.utils._pytree.tree_map(val, tuple(args)),
                                      **torch.utils._pytree.tree_map(val, kwargs or {}))
        return node

    def logical_input(self, expr):
        """The 0-d CPU int64 placeholder that holds the logical value of `expr` at run time."""
        if expr not in self.logical:
            node = self.graph.placeholder(f"logical_{len(self.logical)}")
            with self.fake:
                node.meta["val"] = torch.empty((), dtype=torch.int64)
            self.logical[expr] = node
        return self.logical[expr]

    # -- masks
    def valid(self, factors, device):
        """A 1-D bool node over a dim's physical extent: true at its logical positions."""
        total = math.prod(p for p, _ in factors)
        iota = self.emit(aten.arange.start_step, (0, total), {"dtype": torch.int64, "device": device})
        ok, stride = None, total
        for phys, logical in factors:
            stride //= phys
            if _exact((phys, logical)):
                continue
            digit = iota
            if stride > 1:
                digit = self.emit(aten.div.Tensor_mode, (digit, stride), {"rounding_mode": "floor"})
            if stride * phys < total:
                digit = self.emit(aten.remainder.Scalar, (digit, phys))
            this = self.emit(aten.lt.Tensor, (digit, self.logical_input(logical)))
            ok = this if ok is None else self.emit(aten.logical_and.default, (ok, this))
        return ok

    def mask(self, node, layout, dims, fill):
        """where(valid along `dims`, node, fill): the padding of those dims holds `fill`."""
        val = node.meta["val"]
        cond = None
        for d in dims:
            if not _dim_padded(layout[d]):
                continue
            v = self.valid(layout[d], val.device)
            shape = [1] * val.dim()
            shape[d] = val.shape[d]
            v = self.emit(aten.view.default, (v, shape))
            cond = v if cond is None else self.emit(aten.logical_and.default, (cond, v))
        if cond is None:
            return node
        if val.dtype == torch.bool:
            fill = bool(fill) if not math.isinf(fill) else fill > 0
        elif not val.dtype.is_floating_point and math.isinf(fill):
            info = torch.iinfo(val.dtype)
            fill = info.max if fill > 0 else info.min
        other = self.emit(aten.scalar_tensor.default, (fill,), {"dtype": val.dtype, "device": val.device})
        return self.emit(aten.where.self, (cond, node, other))

    # -- the pass
    def run(self):
        placeholders = list(self.gm.graph.find_nodes(op="placeholder"))
        for i, node in enumerate(placeholders):
            val = _node_val(node)
            if isinstance(val, torch.Tensor):
                new = self.graph.placeholder(node.name)
                new.meta["val"] = self.static_val(val)
                self.env[node] = new
                layout = _normal(self.boundary_layout(val, self.known.get(node.name)))
                self.layouts[node] = layout
                self.tensor_inputs.append(i)
                self.input_layouts[i] = layout
            elif _is_sym(val) or isinstance(val, int):
                self.env[node] = self.static_val(val)
            else:
                raise _Fallback(f"an input of type {type(val).__name__}")
        for node in self.gm.graph.nodes:
            if node.op == "call_function":
                self.call(node)
            elif node.op == "get_attr":
                self.env[node] = self.graph.node_copy(node, lambda n: self.env[n])
                self.layouts[node] = None
            elif node.op == "output":
                self.output(node)
        for user_writes in self.gm.graph.find_nodes(op="call_function", target=aten.copy_.default):
            if _padded(self.layouts.get(user_writes.args[0])):
                raise _Fallback("aten.copy_ (a write into a padded input)")
        gm = torch.fx.GraphModule(self.gm, self.graph)
        return gm

    def boundary_layout(self, val, known=None):
        if not self.padded:
            return None
        if known is not None and len(known) == val.dim() and all(
                math.prod(p for p, _ in d) == _eval(_expr(s), self.phys) for d, s in zip(known, val.shape)):
            return known
        return tuple(_canonical_dim(_expr(s), _eval(_expr(s), self.phys)) for s in val.shape)

    def output(self, node):
        items = node.args[0]
        single = not isinstance(items, (tuple, list))
        items = [items] if single else list(items)
        new_items = []
        for x in items:
            val = _node_val(x) if isinstance(x, torch.fx.Node) else x
            if isinstance(x, torch.fx.Node) and isinstance(val, torch.Tensor):
                self.outputs.append(("tensor", len(new_items), self.layouts.get(x)))
                self.out_layouts[x.name] = self.layouts.get(x)
                new_items.append(self.env[x])
            elif isinstance(val, torch.SymInt) or (isinstance(x, torch.fx.Node) and _is_sym(val)):
                self.outputs.append(("size", _expr(val)))
            else:
                self.outputs.append(("value", x if not isinstance(x, torch.fx.Node) else val))
        self.graph.output(tuple(new_items))

    def call(self, node):
        val = _node_val(node)
        if not isinstance(val, (torch.Tensor, tuple, list)) or node.target is operator.getitem and not isinstance(
                val, torch.Tensor):
            if node.target is operator.getitem and isinstance(val, (torch.SymInt, int)):
                self.env[node] = self.static_val(val)
                return
            # a size computed on the host (sym_size, arithmetic on sizes): its bucket value
            if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)) or val is None:
                self.env[node] = self.static_val(val)
                return
            raise _Fallback(f"{node.target} computing a {type(val).__name__}")
        if node.target is operator.getitem:
            src, index = node.args
            self.env[node] = self.graph.call_function(operator.getitem, (self.env[src], index))
            self.env[node].meta["val"] = self.static_val(val)
            layouts = self.layouts.get(src)
            self.layouts[node] = layouts[index] if isinstance(layouts, list) else None
            return
        if not isinstance(node.target, torch._ops.OpOverload):
            raise _Fallback(f"{node.target}")
        orig = node
        args, kwargs = self.const(node.args), self.const(node.kwargs)
        if self.padded and node.target in _SCALAR_TO_TENSOR and isinstance(node.args[1], torch.fx.Node):
            # a size used as a value (mean's backward divides by the count): its logical value,
            # a run-time scalar, through the op's Tensor overload
            expr = _expr(_node_val(node.args[1]))
            node = _Retargeted(node, _SCALAR_TO_TENSOR[node.target])
            args = (args[0], self.logical_input(expr), *args[2:])
        if self.padded:
            self.check_scalars(node)
            args, kwargs, layout, replaced = self.rule(node, args, kwargs)
        else:
            layout, replaced = None, None
        if replaced is None:
            new = self.graph.call_function(node.target, args, kwargs)
            new.meta["val"] = self.static_val(val)
            replaced = new
        self.env[orig] = replaced
        self.layouts[orig] = _normal(layout)

    def check_scalars(self, node):
        """A size used as a value (a Scalar or Tensor argument) would read the bucket, not the size.
        arange's end is a size: arange(bucket) holds arange(size) as its valid prefix."""
        schema = node.target._schema
        for i, a in enumerate(schema.arguments):
            if node.target in _ARANGES and a.name == "end":
                continue
            v = node.args[i] if i < len(node.args) and not a.kwarg_only else node.kwargs.get(a.name)
            t = a.type
            if isinstance(v, torch.fx.Node) and not isinstance(_node_val(v), torch.Tensor) and not isinstance(
                    t, (torch._C.IntType, torch._C.SymIntType, torch._C.ListType, torch._C.OptionalType)):
                raise _Fallback(f"{_op_name(node.target)} (a size used as a value)")

    # -- per-op rules: (args, kwargs, output layout, replacement node or None)
    def lay(self, v):
        """The layout of tensor node `v`; an exact one where none was recorded (None: not a tensor)."""
        if not isinstance(v, torch.fx.Node):
            return None
        layout = self.layouts.get(v)
        val = _node_val(v)
        if layout is None and isinstance(val, torch.Tensor):
            layout = tuple(((n, sympy.Integer(n)),) for n in (_eval(_expr(d), self.phys) for d in val.shape))
        return layout

    def rule(self, node, args, kwargs):
        val = _node_val(node)
        tensor_args = [a for a in torch.utils._pytree.tree_leaves((node.args, node.kwargs))
                       if isinstance(a, torch.fx.Node) and isinstance(_node_val(a), torch.Tensor)]
        in_padded = any(_padded(self.layouts.get(a)) for a in tensor_args)
        out_sym = _has_syms(val)
        if not in_padded and not out_sym:
            return args, kwargs, None if isinstance(val, torch.Tensor) else [None] * len(val), None
        op = node.target
        rule = _RULES.get(op) or _RULES.get(op.overloadpacket)
        if rule is None and torch.Tag.pointwise in op.tags:
            rule = _pointwise
        if rule is None and not tensor_args and isinstance(val, torch.Tensor):
            rule = _factory
        if rule is None:
            raise _Fallback(_op_name(op))
        return rule(self, node, args, kwargs)


# ---- Calls -------------------------------------------------------------------------------------

def _bind(placeholders, args):
    """{symbol: size} from the inputs: SymInt inputs and tensor dims that are one symbol."""
    bound = {}
    for node, a in zip(placeholders, args):
        val = _node_val(node)
        if isinstance(val, torch.SymInt) and val.node.expr.is_Symbol:
            bound[val.node.expr] = int(a)
        elif isinstance(val, torch.Tensor) and isinstance(a, torch.Tensor):
            for s, n in zip(val.shape, a.shape):
                if isinstance(s, torch.SymInt) and s.node.expr.is_Symbol:
                    bound.setdefault(s.node.expr, int(n))
    return bound


def _pad(t, layout):
    """`t` (logical) in a zero buffer of its layout's physical shape."""
    phys = [math.prod(p for p, _ in d) for d in layout]
    if list(t.shape) == phys:
        return t
    _stats.count("bucket_pads")
    logical_factors = [int(v) for d in layout for _, v in d]
    phys_factors = [p for d in layout for p, _ in d]
    pads = []
    for n, p in reversed(list(zip(logical_factors, phys_factors))):
        pads += [0, p - n]
    # one op (constant_pad_nd) per input: zeros after each factor's logical end
    return torch.constant_pad_nd(t.reshape(logical_factors), pads, 0).view(phys)


def _unpad(t, layout):
    """The logical tensor of a physical result."""
    logical = [math.prod(int(v) for _, v in d) for d in layout]
    if list(t.shape) == logical:
        return t
    phys_factors = [p for d in layout for p, _ in d]
    logical_factors = [int(v) for d in layout for _, v in d]
    return t.reshape(phys_factors)[tuple(slice(0, n) for n in logical_factors)].reshape(logical)


def _logical_layout(layout, actual):
    return None if layout is None else tuple(tuple((p, _eval(l, actual)) for p, l in d) for d in layout)


class Bucketed:
    """The callable torch.compile runs for a graph with symbolic sizes: one lowered program per
    bucket (or, where an op is not bucket-aware, per exact size)."""

    def __init__(self, gm, name, lower, forward=None):
        self.gm, self.name, self.lower = gm, name, lower
        self.forward = forward  # a backward's forward: the layouts of the tensors it saved
        self.placeholders = list(gm.graph.find_nodes(op="placeholder"))
        self.entries = {}  # (padded?, physical sizes) -> (program, specializer)
        self._boxed_call = True

    def build(self, actual, padded):
        phys = {s: _buckets.bucket(v) for s, v in actual.items()} if padded else dict(actual)
        key = (padded, tuple(sorted((str(s), v) for s, v in phys.items())))
        entry = self.entries.get(key)
        if entry is None:
            sp = _Specializer(self.gm, phys, padded, self.saved_layouts(phys) if padded else None)
            gm = sp.run()
            program = self.lower(gm, f"{self.name}_{'b' if padded else 'x'}{len(self.entries)}")
            entry = self.entries[key] = (program, sp)
            _stats.count("bucket_programs" if padded else "bucket_exact_programs")
        return entry

    def saved_layouts(self, phys):
        """The layouts the forward gave its outputs at these sizes (the backward's saved inputs)."""
        if self.forward is None:
            return None
        for (padded, key), (_, sp) in self.forward.entries.items():
            fwd = dict(key)
            if padded and all(fwd.get(str(s), v) == v for s, v in phys.items()):
                return sp.out_layouts
        return None

    def __call__(self, args):
        args = list(args)
        actual = _bind(self.placeholders, args)
        padded = _buckets.enabled() and not getattr(self, "_exact_only", False)
        entry = None
        if padded:
            key = tuple(sorted((str(s), _buckets.bucket(v)) for s, v in actual.items()))
            if key in getattr(self, "_fallen", set()):
                padded = False
            else:
                try:
                    entry = self.build(actual, True)
                except Exception as e:  # noqa: BLE001 (a rule's own error must not cost the call: exact sizes)
                    reason = str(e) if isinstance(e, _Fallback) else f"internal: {type(e).__name__}: {e}"
                    _stats.count_keyed("bucket_fallbacks_by_op", reason[:160])
                    self.__dict__.setdefault("_fallen", set()).add(key)
                    padded = False
        if entry is None:
            try:
                entry = self.build(actual, False)
            except Exception as e:  # noqa: BLE001 (the graph as Dynamo gave it, run eagerly)
                _stats.count_keyed("bucket_fallbacks_by_op", f"eager: {type(e).__name__}: {e}"[:160])
                return list(self.gm(*args))
        program, sp = entry
        inputs = []
        for i in sp.tensor_inputs:
            layout = _logical_layout(sp.input_layouts[i], actual)
            inputs.append(_pad(args[i], layout) if padded and _padded(sp.input_layouts[i]) else args[i])
        for expr in sp.logical:
            inputs.append(torch.tensor(_eval(expr, actual), dtype=torch.int64))
        out = program(inputs)
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        result = []
        for plan in sp.outputs:
            if plan[0] == "tensor":
                t = out[plan[1]]
                if padded and _padded(plan[2]) and t is not None:
                    t = _unpad(t, _logical_layout(plan[2], actual))
                result.append(t)
            elif plan[0] == "size":
                result.append(_eval(plan[1], actual))
            else:
                result.append(plan[1])
        return result
