"""The layouts of bucketed values and the rules that keep padding out of each op family
(bucketing.py specializes a graph with symbolic sizes to its buckets; docs/buckets.md).

A layout gives each dim of a value its factors outer to inner, (physical extent, logical size)
each; the valid positions of a padded dim are a prefix of each factor. A rule, one per op family
in _RULES, returns a node's arguments with masks inserted (ATen nodes lowered by the same table),
its output layout, and optionally a replacement; a node along a padded dim without a rule raises
_Fallback, and the graph runs at exact sizes for that call.
"""
import math

import sympy
import torch
import torch.fx

from .describe import _node_val, _op_name

aten = torch.ops.aten
prims = torch.ops.prims


class _Fallback(Exception):
    """The graph cannot run padded for this bucket: its op (the message) runs it at exact sizes."""


def _is_sym(v):
    return isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _expr(size):
    """The sympy expression of a size (an int for a static one)."""
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(int(size))


def _eval(expr, bindings):
    v = expr.xreplace(bindings) if isinstance(expr, sympy.Basic) else expr
    if isinstance(v, sympy.Basic):
        v = v.subs(bindings)
        if not v.is_number:
            raise _Fallback(f"unbound size {expr}")
    return int(v)


def _has_syms(val):
    if isinstance(val, torch.Tensor):
        return any(isinstance(s, torch.SymInt) and s.node.expr.free_symbols for s in (*val.shape, *val.stride()))
    if isinstance(val, (tuple, list)):
        return any(_has_syms(v) for v in val)
    return isinstance(val, torch.SymInt) and bool(val.node.expr.free_symbols)


# ---- Layouts ---------------------------------------------------------------------------------
# A layout is a tuple (one per dim) of tuples of factors (phys: int, logical: sympy expr).
# A factor is exact when its logical expr has no free symbols.

def _exact(f):
    return not f[1].free_symbols


def _dim_padded(factors):
    return any(not _exact(f) for f in factors)


def _padded(layout):
    return layout is not None and any(_dim_padded(d) for d in layout)


def _normal_dim(factors):
    """A dim's factors with adjacent exact ones merged and 1s dropped: equal dims compare equal."""
    out = []
    for f in factors:
        if _exact(f) and f[0] == 1:
            continue
        if out and _exact(f) and _exact(out[-1]):
            n = out[-1][0] * f[0]
            out[-1] = (n, sympy.Integer(n))
        else:
            out.append(f)
    return tuple(out) or ((1, sympy.Integer(1)),)


def _normal(layout):
    if isinstance(layout, list):
        return [_normal(x) for x in layout]
    return None if layout is None else tuple(_normal_dim(d) for d in layout)


def _canonical_dim(expr, phys):
    """The factors of a dim at a graph boundary or from a factory: a bare symbol (or an
    expression of one symbol) is one padded factor; c * s is (c, s), batch-major."""
    expr = sympy.sympify(expr)
    if not expr.free_symbols:
        return ((int(expr), expr),)
    coeff, rest = expr.as_coeff_Mul()
    if coeff != 1 and coeff.is_Integer and len(rest.free_symbols) == 1 and rest.is_Symbol:
        return ((int(coeff), sympy.Integer(int(coeff))), (phys // int(coeff), rest))
    if len(expr.free_symbols) == 1 and not expr.is_Mul:
        return ((phys, expr),)
    raise _Fallback(f"a size {expr} of several factors")



# ---- Rules -------------------------------------------------------------------------------------

def _shape_exprs(val):
    return [_expr(s) for s in val.shape]


def _broadcast_layout(sp, node, operands):
    """The output layout of a broadcasting op from its operands' layouts (aligned from the right)."""
    out = _node_val(node)
    exprs = _shape_exprs(out)
    layout = []
    for i, e in enumerate(exprs):
        found = None
        for a in operands:
            if not isinstance(a, torch.fx.Node) or not isinstance(_node_val(a), torch.Tensor):
                continue
            la, va = sp.lay(a), _node_val(a)
            j = i - (out.dim() - va.dim())
            if j < 0 or la is None:
                continue
            if _expr(va.shape[j]) != e:
                continue
            if _dim_padded(la[j]):
                if found is not None and _dim_padded(found) and found != la[j]:
                    raise _Fallback(f"{_op_name(node.target)} (operands padded differently)")
                found = la[j]
        if found is None:
            if e.free_symbols:
                found = _canonical_dim(e, _eval(e, sp.phys))
            else:
                found = ((int(e), e),)
        layout.append(found)
    return tuple(layout)


def _pointwise(sp, node, args, kwargs):
    return args, kwargs, _broadcast_layout(sp, node, list(node.args) + list(node.kwargs.values())), None


def _factory(sp, node, args, kwargs):
    val = _node_val(node)
    return args, kwargs, tuple(_canonical_dim(e, _eval(e, sp.phys)) for e in _shape_exprs(val)), None


def _same(sp, node, args, kwargs):
    """Same layout as the first operand (clone, alias, contiguous copies)."""
    return args, kwargs, sp.lay(node.args[0]), None


def _permute(sp, node, args, kwargs):
    lay = sp.lay(node.args[0])
    dims = [d % len(lay) for d in node.args[1]]
    return args, kwargs, tuple(lay[d] for d in dims), None


def _transpose(sp, node, args, kwargs):
    lay = list(sp.lay(node.args[0]))
    if node.target is aten.t.default:
        a, b = 0, len(lay) - 1
    else:
        a, b = node.args[1] % len(lay), node.args[2] % len(lay)
    lay[a], lay[b] = lay[b], lay[a]
    return args, kwargs, tuple(lay), None


def _unsqueeze(sp, node, args, kwargs):
    lay = list(sp.lay(node.args[0]))
    d = node.args[1] % (len(lay) + 1)
    lay.insert(d, ((1, sympy.Integer(1)),))
    return args, kwargs, tuple(lay), None


def _squeeze(sp, node, args, kwargs):
    lay = sp.lay(node.args[0])
    out = _node_val(node)
    kept = [f for f in lay if not (len(f) == 1 and f[0][0] == 1 and _exact(f[0]))]
    if len(kept) != out.dim():
        raise _Fallback("aten.squeeze (of a padded dim)")
    return args, kwargs, tuple(kept), None


def _expand(sp, node, args, kwargs):
    lay = sp.lay(node.args[0])
    out = _node_val(node)
    src = _node_val(node.args[0])
    res = []
    for i, e in enumerate(_shape_exprs(out)):
        j = i - (out.dim() - src.dim())
        if j >= 0 and _expr(src.shape[j]) == e:
            res.append(lay[j])
        else:
            res.append(_canonical_dim(e, _eval(e, sp.phys)) if e.free_symbols else ((int(e), e),))
    return args, kwargs, tuple(res), None


def _view(sp, node, args, kwargs):
    """A view or reshape keeps each padded factor whole; exact factors may split or merge."""
    lay = sp.lay(node.args[0])
    atoms = [f for d in lay for f in d]
    out = _node_val(node)
    res = []
    k = 0
    for e in _shape_exprs(out):
        target = _eval(e, sp.phys)
        dim, prod = [], 1
        while prod < target or (target == 1 and not dim and k < len(atoms) and atoms[k][0] == 1):
            if k >= len(atoms):
                raise _Fallback(f"{_op_name(node.target)} (a view that splits a padded dim)")
            phys, logical = atoms[k]
            if prod * phys > target:
                need = target // prod
                if not _exact(atoms[k]) or target % prod or phys % need:
                    raise _Fallback(f"{_op_name(node.target)} (a view that splits a padded dim)")
                dim.append((need, sympy.Integer(need)))
                atoms[k] = (phys // need, sympy.Integer(phys // need))
                prod *= need
                continue
            dim.append(atoms[k])
            prod *= phys
            k += 1
        if prod != target:
            raise _Fallback(f"{_op_name(node.target)} (a view that splits a padded dim)")
        if not dim:
            dim = [(1, sympy.Integer(1))]
        res.append(tuple(dim))
    if any(a[0] != 1 for a in atoms[k:]):
        raise _Fallback(f"{_op_name(node.target)} (a view that splits a padded dim)")
    return args, kwargs, tuple(res), None


def _slice(sp, node, args, kwargs):
    lay = list(sp.lay(node.args[0]))
    dim = node.args[1] % len(lay) if len(node.args) > 1 else 0
    start = node.args[2] if len(node.args) > 2 else 0
    step = node.args[4] if len(node.args) > 4 else 1
    out = _node_val(node)
    if _dim_padded(lay[dim]):
        if len(lay[dim]) != 1 or not isinstance(start, int) or start < 0 or step != 1:
            raise _Fallback("aten.slice.Tensor (a padded dim from a symbolic or negative start)")
        e = _expr(out.shape[dim])
        lay[dim] = ((_eval(e, sp.phys), e),)
    else:
        e = _expr(out.shape[dim])
        if e.free_symbols:
            raise _Fallback("aten.slice.Tensor (to a symbolic size)")
        lay[dim] = ((int(e), e),)
    return args, kwargs, tuple(lay), None


def _scatter_into(sp, node, args, kwargs):
    """slice_scatter / select_scatter (a slice's or select's backward) along an exact dim."""
    lay = sp.lay(node.args[0])
    dim = (node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)) % len(lay)
    if _dim_padded(lay[dim]):
        # A slice's backward that fills the rest of the dim: the source's padding lands in the
        # result's padding only when the slice ran to the logical end from a static start.
        start = node.args[3] if len(node.args) > 3 else node.kwargs.get("start", 0)
        step = node.args[5] if len(node.args) > 5 else node.kwargs.get("step", 1)
        src = _node_val(node.args[1])
        whole = _expr(_node_val(node.args[0]).shape[dim])
        if (node.target is not aten.slice_scatter.default or len(lay[dim]) != 1 or not isinstance(start, int)
                or start < 0 or step != 1 or sympy.simplify(_expr(src.shape[dim]) - (whole - start)) != 0):
            raise _Fallback(f"{_op_name(node.target)} (along a padded dim, not to its end)")
    return args, kwargs, lay, None


def _select(sp, node, args, kwargs):
    lay = list(sp.lay(node.args[0]))
    dim = node.args[1] % len(lay)
    if _dim_padded(lay[dim]) and (not isinstance(node.args[2], int) or node.args[2] < 0):
        raise _Fallback("aten.select.int (a padded dim at a symbolic or negative index)")
    del lay[dim]
    return args, kwargs, tuple(lay), None


def _cat(sp, node, args, kwargs):
    tensors = [t for t in node.args[0] if _node_val(t).numel() != 0 or _has_syms(_node_val(t))]
    dim = node.args[1] if len(node.args) > 1 else 0
    out = _node_val(node)
    dim %= out.dim()
    for t in tensors[:-1]:
        lt = sp.lay(t)
        if lt is not None and _dim_padded(lt[dim]):
            raise _Fallback("aten.cat.default (a padded operand before another along the padded dim)")
    layout = list(_broadcast_layout(sp, node, tensors))
    last = sp.lay(tensors[-1]) if tensors else None
    if last is not None and _dim_padded(last[dim]):
        if len(last[dim]) != 1:
            raise _Fallback("aten.cat.default (along a flattened padded dim)")
        e = _expr(out.shape[dim])
        layout[dim] = ((_eval(e, sp.phys), e),)
    else:
        e = _expr(out.shape[dim])
        layout[dim] = ((int(e), e),) if not e.free_symbols else _canonical_dim(e, _eval(e, sp.phys))
        if e.free_symbols:
            raise _Fallback("aten.cat.default (to a symbolic size)")
    return args, kwargs, tuple(layout), None


def _reduced_dims(node, rank):
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % max(rank, 1) for d in dims})


def _keepdim(node, position=2):
    return bool(node.args[position]) if len(node.args) > position else bool(node.kwargs.get("keepdim", False))


def _reduce_layout(lay, dims, keep):
    return tuple(((1, sympy.Integer(1)),) if d in dims else f for d, f in enumerate(lay) if keep or d not in dims)


def _reduction(fill):
    def rule(sp, node, args, kwargs):
        src = node.args[0]
        lay = sp.lay(src)
        dims = _reduced_dims(node, len(lay))
        masked = sp.mask(sp.env[src], lay, dims, fill)
        args = (masked, *args[1:])
        return args, kwargs, _reduce_layout(lay, dims, _keepdim(node)), None
    return rule


def _mean(sp, node, args, kwargs):
    """mean = sum of the valid values / the logical count (one division per padded factor)."""
    src = node.args[0]
    lay = sp.lay(src)
    dims = _reduced_dims(node, len(lay))
    keep = _keepdim(node)
    dtype = kwargs.get("dtype") if node.target is not aten.mean.default else None
    masked = sp.mask(sp.env[src], lay, dims, 0.0)
    if masked is sp.env[src]:
        return args, kwargs, _reduce_layout(lay, dims, keep), None
    total = sp.emit(aten.sum.dim_IntList, (masked, dims, keep), {"dtype": dtype} if dtype else {})
    count = sympy.Mul(*[f[1] for d in dims for f in lay[d]])
    if not count.free_symbols:  # no padded dim reduced: the op as it is
        return args, kwargs, _reduce_layout(lay, dims, keep), None
    mean = sp.emit(aten.div.Tensor, (total, sp.logical_input(count)))
    return args, kwargs, _reduce_layout(lay, dims, keep), mean


def _var(sp, node, args, kwargs):
    """var(x, dims, correction) over padded dims: a masked mean, then masked squared deviations
    over the logical count minus the correction."""
    src = node.args[0]
    lay = sp.lay(src)
    dims = _reduced_dims(node, len(lay))
    keep = bool(node.kwargs.get("keepdim", False))
    if not any(_dim_padded(lay[d]) for d in dims):
        return args, kwargs, _reduce_layout(lay, dims, keep), None
    correction = node.kwargs.get("correction")
    correction = 1 if correction is None else correction
    x = sp.mask(sp.env[src], lay, dims, 0.0)
    count = sp.logical_input(sympy.Mul(*[f[1] for d in dims for f in lay[d]]))
    mean = sp.emit(aten.div.Tensor, (sp.emit(aten.sum.dim_IntList, (x, dims, True)), count))
    dev = sp.mask(sp.emit(aten.sub.Tensor, (sp.env[src], mean)), lay, dims, 0.0)
    squares = sp.emit(aten.sum.dim_IntList, (sp.emit(aten.mul.Tensor, (dev, dev)), dims, keep))
    denom = sp.emit(aten.sub.Tensor, (count, correction)) if correction else count
    return args, kwargs, _reduce_layout(lay, dims, keep), sp.emit(aten.div.Tensor, (squares, denom))


def _softmax(fill_input):
    def rule(sp, node, args, kwargs):
        src = node.args[0]
        lay = sp.lay(src)
        dim = node.args[1] % len(lay)
        args = (sp.mask(sp.env[src], lay, [dim], fill_input), *args[1:])
        return args, kwargs, lay, None
    return rule


def _softmax_backward(sp, node, args, kwargs):
    grad = node.args[0]
    lay = _broadcast_layout(sp, node, [node.args[0], node.args[1]])
    dim = node.args[2] % len(lay)
    args = (sp.mask(sp.env[grad], sp.lay(grad), [dim], 0.0), *args[1:])
    return args, kwargs, lay, None


def _cumsum(sp, node, args, kwargs):
    lay = sp.lay(node.args[0])
    dim = node.args[1] % max(len(lay), 1)
    if _dim_padded(lay[dim]) and len(lay[dim]) != 1:
        raise _Fallback("aten.cumsum.default (along a flattened padded dim)")
    return args, kwargs, lay, None  # a prefix sum: valid positions read valid positions only


def _mm(sp, node, args, kwargs):
    """Contractions: both operands hold zeros along a padded contracted dim (0 * garbage could
    be NaN, so both)."""
    op = node.target
    if op is aten.addmm.default:
        bias, a, b = node.args[:3]
    else:
        bias, (a, b) = None, node.args[:2]
    la, lb = sp.lay(a), sp.lay(b)
    ka, kb = len(la) - 1, len(lb) - 2
    if la[ka] != lb[kb] and (_dim_padded(la[ka]) or _dim_padded(lb[kb])):
        raise _Fallback(f"{_op_name(op)} (contracted dims padded differently)")
    new_a = sp.mask(sp.env[a], la, [ka], 0.0)
    new_b = sp.mask(sp.env[b], lb, [kb], 0.0)
    if op is aten.bmm.default and la[0] != lb[0] and (_dim_padded(la[0]) or _dim_padded(lb[0])):
        raise _Fallback("aten.bmm.default (batch dims padded differently)")
    if op is aten.addmm.default:
        args = (args[0], new_a, new_b, *args[3:])
    else:
        args = (new_a, new_b, *args[2:])
    out = list(la[:-1]) + [lb[-1]]
    layout = tuple(out)
    if bias is not None:
        lbias = sp.lay(bias)
        if _padded(lbias):
            layout = _broadcast_layout(sp, node, [a, bias])
            layout = tuple(list(layout[:-1]) + [lb[-1]])
    return args, kwargs, layout, None


def _embedding(sp, node, args, kwargs):
    weight, indices = node.args[:2]
    if _padded(sp.lay(weight)):
        raise _Fallback("aten.embedding.default (a padded table)")
    li = sp.lay(indices)
    idx = sp.mask(sp.env[indices], li, range(len(li)), 0)
    width = int(_node_val(node).shape[-1])
    return (args[0], idx, *args[2:]), kwargs, tuple(li) + (((width, sympy.Integer(width)),),), None


def _embedding_backward(sp, node, args, kwargs):
    grad, indices = node.args[:2]
    li = sp.lay(indices)
    lg = sp.lay(grad)
    g = sp.mask(sp.env[grad], lg, range(len(li)), 0.0)
    idx = sp.mask(sp.env[indices], li, range(len(li)), 0)
    return (g, idx, *args[2:]), kwargs, None, None


def _index(sp, node, args, kwargs):
    src, indices = node.args[:2]
    ls = sp.lay(src)
    if any(i is None for i in indices):
        raise _Fallback("aten.index.Tensor (indices after a skipped dim)")
    for d in range(len(indices)):
        if _dim_padded(ls[d]) and len(ls[d]) != 1:
            raise _Fallback("aten.index.Tensor (into a flattened padded dim)")
    new_idx = []
    for i in indices:
        li = sp.lay(i)
        new_idx.append(sp.mask(sp.env[i], li, range(len(li)), 0) if _padded(li) else sp.env[i])
    idx_layout = _broadcast_layout(sp, _Stub(_index_shape(node, len(indices))), indices)
    layout = tuple(idx_layout) + tuple(ls[len(indices):])
    return (args[0], new_idx, *args[2:]), kwargs, layout, None


_ARANGES = (aten.arange.default, aten.arange.start, aten.arange.start_step)

_SCALAR_TO_TENSOR = {
    aten.div.Scalar: aten.div.Tensor, aten.mul.Scalar: aten.mul.Tensor,
    aten.add.Scalar: aten.add.Tensor, aten.sub.Scalar: aten.sub.Tensor,
}


class _Retargeted:
    """`node` seen with another target (its Tensor overload) and its symbolic scalar as a tensor."""

    def __init__(self, node, target):
        self._node, self.target = node, target
        self.args = (node.args[0], None, *node.args[2:])
        self.kwargs, self.meta, self.name = node.kwargs, node.meta, node.name


def _index_put(sp, node, args, kwargs):
    """index_put(self, indices, values, accumulate=True) (index's backward): padded index
    positions add a zero gradient to row 0; indexed dims of one padded factor take logical positions."""
    dst, indices, values = node.args[:3]
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    ld = sp.lay(dst)
    if any(i is None for i in indices):
        raise _Fallback("aten.index_put.default (indices after a skipped dim)")
    if any(_dim_padded(ld[d]) and len(ld[d]) != 1 for d in range(len(indices))):
        raise _Fallback("aten.index_put.default (into a flattened padded dim)")
    padded_idx = [_padded(sp.lay(i)) for i in indices]
    if any(padded_idx) and not accumulate:
        raise _Fallback("aten.index_put.default (padded indices without accumulate)")
    new_idx = [sp.mask(sp.env[i], sp.lay(i), range(len(sp.lay(i))), 0) if p else sp.env[i]
               for i, p in zip(indices, padded_idx)]
    lv = sp.lay(values)
    n_idx = len(lv) - (len(ld) - len(indices))
    new_values = sp.mask(sp.env[values], lv, range(max(n_idx, 0)), 0.0) if any(padded_idx) else sp.env[values]
    return (args[0], new_idx, new_values, *args[3:]), kwargs, ld, None


class _Stub:
    """A stand-in node whose value is `val` (for _broadcast_layout over index tensors)."""

    def __init__(self, val):
        self.meta = {"val": val}
        self.target = aten.index.Tensor


def _index_shape(node, n):
    out = _node_val(node)
    src = _node_val(node.args[0])
    rank = out.dim() - (src.dim() - n)
    return _ShapeOnly(out.shape[:rank])


class _ShapeOnly:
    def __init__(self, shape):
        self.shape = tuple(shape)

    def dim(self):
        return len(self.shape)


def _sdpa(backward):
    def rule(sp, node, args, kwargs):
        if backward:
            grad_out, q, k, v, bias = node.args[:5]
            causal = node.args[11] if len(node.args) > 11 else node.kwargs.get("is_causal", False)
        else:
            q, k, v = node.args[:3]
            bias = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_bias")
            causal = node.args[5] if len(node.args) > 5 else node.kwargs.get("is_causal", False)
        lq, lk, lv = sp.lay(q), sp.lay(k), sp.lay(v)
        # Batch dims may be padded alike (rows of their own); head dims (GQA) and features are exact.
        batch_ok = all(not any(_dim_padded(x[i]) for x in (lq, lk, lv)) or lq[i] == lk[i] == lv[i]
                       for i in range(len(lq) - 3)) and not any(_dim_padded(x[-3]) for x in (lq, lk, lv))
        if lk[-2] != lv[-2] or not batch_ok or any(_dim_padded(x[-1]) for x in (lq, lk, lv)):
            raise _Fallback(f"{_op_name(node.target)} (padded dims other than the sequences and batch)")
        new = list(args)
        pos = 4 if backward else 3
        if _dim_padded(lk[-2]):
            if bias is not None:
                lb = sp.lay(bias)
                if lb is None or len(lb) < 2:
                    raise _Fallback(f"{_op_name(node.target)} (a bias without the key dim)")
                new[pos] = sp.mask(sp.env[bias], lb, [len(lb) - 1], -math.inf)
            elif not (causal and lq[-2] == lk[-2]):
                raise _Fallback(f"{_op_name(node.target)} (padded keys without a mask)")
        if backward:
            lg = sp.lay(grad_out)
            new[0] = sp.mask(sp.env[grad_out], lg, [len(lg) - 2], 0.0)
            outs = [lq, lk, lv, sp.lay(bias) if bias is not None else None]
        else:
            lse = tuple(lq[:-1])
            outs = [lq[:-1] + (lv[-1],), lse] + [None] * 7
        return tuple(new), kwargs, list(outs), None
    return rule


_RULES = {
    aten.clone.default: _same, aten.alias.default: _same, aten._to_copy.default: _same,
    aten.lift_fresh_copy.default: _same, prims.convert_element_type.default: _same,
    aten.permute.default: _permute, aten.transpose.int: _transpose, aten.t.default: _transpose,
    aten.unsqueeze.default: _unsqueeze, aten.squeeze.dim: _squeeze, aten.squeeze.dims: _squeeze,
    aten.squeeze.default: _squeeze, aten.expand.default: _expand,
    aten.view.default: _view, aten._unsafe_view.default: _view, aten.reshape.default: _view,
    aten.slice.Tensor: _slice, aten.select.int: _select, aten.cat.default: _cat,
    aten.slice_scatter.default: _scatter_into, aten.select_scatter.default: _scatter_into,
    aten.sum.dim_IntList: _reduction(0.0), aten.sum.default: _reduction(0.0),
    aten.amax.default: _reduction(-math.inf), aten.amin.default: _reduction(math.inf),
    aten.mean.dim: _mean, aten.mean.default: _mean, aten.var.correction: _var,
    aten._softmax.default: _softmax(-math.inf), aten._log_softmax.default: _softmax(-math.inf),
    aten._softmax_backward_data.default: _softmax_backward,
    aten._log_softmax_backward_data.default: _softmax_backward,
    aten.cumsum.default: _cumsum,
    aten.mm.default: _mm, aten.bmm.default: _mm, aten.addmm.default: _mm,
    aten.embedding.default: _embedding, aten.embedding_dense_backward.default: _embedding_backward,
    aten.index.Tensor: _index, aten.index_put.default: _index_put,
    aten._scaled_dot_product_fused_attention_overrideable.default: _sdpa(False),
    aten._scaled_dot_product_fused_attention_overrideable_backward.default: _sdpa(True),
}
