"""The decomposition table AOTAutograd uses: core ATen decompositions, some composites core
ATen keeps, and foreach ops without a lowering as loops over their elements."""
import torch

from .. import _C


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


def _cia_ops(namespace, cia_names, export_utils):
    """The CompositeImplicitAutograd ops of `namespace` that export may preserve: PyTorch's
    _collect_all_valid_cia_ops_for_namespace, with its cheap tests first (is the op's name among
    the dispatcher's CIA kernels, `cia_names`, or has it a Python CIA kernel)."""
    cia = torch._C.DispatchKey.CompositeImplicitAutograd
    ops = []
    for packet_name in list(namespace):
        for op in getattr(namespace, packet_name).op_overloads():
            if ((op.name() in cia_names or cia in op.py_kernels) and torch._C._dispatch_has_kernel(op.name())
                    and export_utils._is_cia_op(op) and export_utils._check_valid_to_preserve(op)):
                ops.append(op)
    return ops


def _core_aten_table():
    """dict(torch._decomp.core_aten_decompositions()), built with one pass over the dispatcher.

    PyTorch's table tests every overload of every op with its slow "may export preserve it"
    check before the cheap "is it CompositeImplicitAutograd" one, and re-reads the dispatcher's
    whole CIA list once per op namespace (27 times): ~0.15 s of a fresh process's first compile.
    The same tests in the other order, with one read, give the same table in about half the time."""
    from torch._decomp import core_aten_decompositions

    try:
        from torch._decomp import _core_aten_decompositions_post_autograd
        from torch._export import utils as export_utils
        from torch.export.decomp_utils import PRESERVED_ATEN_CIA_OPS

        table = _core_aten_decompositions_post_autograd()
        export_utils._materialize_cpp_cia_ops()
        cia_names = set(torch._C._dispatch_get_registrations_for_dispatch_key("CompositeImplicitAutograd"))
        for op in _cia_ops(torch.ops.aten, cia_names, export_utils):
            if op not in PRESERVED_ATEN_CIA_OPS and op not in table:
                table[op] = export_utils._get_decomp_for_cia(op)
        for namespace_name in list(torch.ops._dir):
            namespace = getattr(torch.ops, namespace_name) if namespace_name != "aten" else None
            if not isinstance(namespace, torch._ops._OpNamespace):
                continue
            for op in _cia_ops(namespace, cia_names, export_utils):
                if op not in table:
                    table[op] = export_utils._get_decomp_for_cia(op)
        return table
    except (ImportError, AttributeError):  # these private helpers moved: PyTorch's own (slower) way
        return dict(core_aten_decompositions())


def _decompositions():
    from torch._decomp import get_decompositions

    table = _core_aten_table()
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
