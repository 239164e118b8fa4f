"""How opcheck compares an op's tpu result with the CPU's: the dtypes swept, how a CPU sample
moves to tpu (same storage, offset and strides), which results are compared by value, index
outputs among ties, and tolerances (PyTorch's, widened by its OpInfo tests' overrides and ours)."""
import torch

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}
ALL_DTYPES = ",".join(DTYPES)

# Ops whose values are random or unspecified: only shapes and dtypes are compared (the
# device draws from its own Philox stream, and empty memory holds anything). Their
# distributions are checked by tests/test_random.py.
_UNCOMPARABLE_PREFIXES = (
    "normal", "uniform", "bernoulli", "rand", "cauchy", "exponential", "geometric", "log_normal",
    "multinomial", "nn.functional.dropout", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
    "nn.functional.rrelu", "empty", "new_empty", "nn.functional.fractional_max_pool", "torch.empty",
)

# Ops that take index tensors on the CPU whatever the device of self (as on CUDA): only the
# sample's input moves to tpu.
_CPU_ARGS = {"tensor_split"}


# Ops whose index outputs are implementation-defined among equal values (PyTorch's CPU
# kernels use unstable selection): (position of `dim`, position of `keepdim`) in the sample
# args. Their indices are compared through the input values they point at.
_TIE_INDEX_OPS = {"sort": (0, None), "argsort": (0, None), "topk": (1, None), "kthvalue": (1, 2), "mode": (0, 1),
                  "median": (0, 1), "nanmedian": (0, 1)}


def _resolve_ties(op, sample, result):
    """The result with index outputs replaced by the input values they select."""
    spec = _TIE_INDEX_OPS.get(op.name)
    if spec is None or not isinstance(sample.input, torch.Tensor):
        return result
    args, kwargs = sample.args, sample.kwargs

    def arg(pos, name, default):
        if name in kwargs:
            return kwargs[name]
        return args[pos] if pos is not None and pos < len(args) else default

    default_dim = None if op.name in ("median", "nanmedian") else -1
    dim = arg(spec[0], "dim", default_dim)
    keepdim = arg(spec[1], "keepdim", False)
    if dim is None:
        return result
    x = sample.input.detach()

    def values_at(idx):
        idx, src = idx.detach().cpu(), x.cpu()
        if src.dim() == 0:
            return src.expand_as(idx).clone()
        i = idx if (keepdim or op.name in ("sort", "argsort", "topk")) else idx.unsqueeze(dim)
        v = torch.take_along_dim(src, i, dim)
        return v if (keepdim or op.name in ("sort", "argsort", "topk")) else v.squeeze(dim)

    if isinstance(result, torch.Tensor):
        return values_at(result) if result.dtype == torch.int64 else result
    if isinstance(result, (tuple, list)) and len(result) == 2 and result[1].dtype == torch.int64:
        return (result[0], values_at(result[1]))
    return result


def _uncomparable(op):
    return op.name.startswith(_UNCOMPARABLE_PREFIXES)


def _random_sample(op, sample):
    """A sample of a deterministic op that asks for dropout (attention with dropout_p > 0;
    multi_head_attention_forward with training=True, which it sets when dropout_p > 0): random
    like the ops above, so only its shapes and dtypes are compared. PyTorch's own
    test_compare_cpu skips such ops whole; their dropout-free samples are still compared here."""
    p = sample.kwargs.get("dropout_p", 0.0)
    if isinstance(p, (int, float)) and p > 0:
        return True
    return op.name == "nn.functional.multi_head_attention_forward" and sample.kwargs.get("training") is True


def entry_name(op):
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return _same_layout_on(value.detach(), device).requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    if isinstance(value, torch.device) or (isinstance(value, str) and value == "cpu"):
        return torch.device(device)
    return value


def _same_layout_on(t, device):
    """`t` on `device` with the same storage, offset and strides, as PyTorch's device tests
    create samples (as_strided and friends address the storage, not the view)."""
    plain = t.layout != torch.strided or t.device.type != "cpu" or t.is_conj() or t.is_neg()
    if plain or t.numel() == 0 or t.dim() == 0:
        return t.to(device)
    storage = t.untyped_storage()
    numel = storage.nbytes() // t.element_size()
    if t.storage_offset() == 0 and t.is_contiguous() and numel == t.numel():
        return t.to(device)
    base = torch.empty(0, dtype=t.dtype).set_(storage, 0, (numel,), (1,))
    return base.to(device).as_strided(t.size(), t.stride(), t.storage_offset())


def _tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


# ---- tolerances ----

_TOL_CLASSES = {None, "TestCommon", "TestUnaryUfuncs", "TestBinaryUfuncs", "TestBinaryUfuncsDevice", "TestReductions",
                "TestConsistency"}
_TOL_SKIP_TESTS = {"test_complex_half_reference_testing"}


# Tolerances of our own, (entry name, dtype, kind) -> (atol, rtol), where PyTorch's defaults
# are tighter than float32 arithmetic allows. Each was measured against the float64 result on
# the same inputs: tpu and the CPU are both as far off it as the arithmetic permits, rounded
# differently (which of the two differs more depends on whether fused mode compiled the graph
# whole, so the entry passed in one run and failed in the next).
TOLERANCES = {
    # 1/sqrt(1 - x^2) near |x| = 1 is ill-conditioned: the CPU's gradient is 6.8e-5 off the
    # float64 one at x = 0.9989 (value 21.3), tpu's compiled-whole gradient 1.2e-6; they
    # differ by 2.8e-6 relative.
    ("asin", "float32", "grad"): (1e-5, 1e-5),
    # Each gradient element is a sum of 200 products (|terms| ~ 700 in all): an element of
    # value -0.65 is 2.1e-5 off the float64 one on tpu and 4.5e-6 on the CPU, both within
    # float32 rounding of that sum in a different order (eps * 700 ~ 8e-5).
    ("kron", "float32", "grad"): (1e-4, 1.3e-6),
    # The bias gradient sums the output gradient over every output position (18,392 terms per
    # channel in the largest sample, sum of |terms| 14,600, value 229): tpu's XLA reduction is
    # 5.4e-4 off the float64 sum and the CPU's 3e-5, both within float32 rounding of that sum
    # (2^-24 * 14,600 = 8.7e-4). The input and weight gradients agree to 2e-5.
    ("nn.functional.conv_transpose3d", "float32", "grad"): (1e-3, 1.3e-6),
}


def tolerance(op, dtype, kind="forward"):
    """(atol, rtol) or None: the widest toleranceOverride PyTorch's tests apply to op at dtype
    in device-vs-reference comparisons (TestCommon, the ufunc and reduction tests, and
    TestConsistency, which compares another accelerator with the CPU), widened by ours
    (TOLERANCES) for the entry `kind` (forward or grad)."""
    from torch.testing._internal.common_device_type import toleranceOverride

    best = TOLERANCES.get((entry_name(op), str(dtype).replace("torch.", ""), kind))
    for info in getattr(op, "decorators", ()) or ():
        if getattr(info, "cls_name", None) not in _TOL_CLASSES or getattr(info, "test_name", None) in _TOL_SKIP_TESTS:
            continue
        if getattr(info, "dtypes", None) and dtype not in info.dtypes:
            continue
        for dec in getattr(info, "decorators", ()):
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                t = dec.d[dtype]
                best = (t.atol, t.rtol) if best is None else (max(best[0], t.atol), max(best[1], t.rtol))
    return best


def _assert_close(x, y, tol):
    if tol is None or not (x.dtype.is_floating_point or x.dtype.is_complex):
        torch.testing.assert_close(x, y, equal_nan=True, check_stride=False)
        return
    try:
        torch.testing.assert_close(x, y, equal_nan=True, check_stride=False)
    except AssertionError:
        torch.testing.assert_close(x, y, equal_nan=True, check_stride=False, atol=tol[0], rtol=tol[1])


def _compare(actual, expected, tol, values=True):
    a, e = _tensors(actual), _tensors(expected)
    if len(a) != len(e):
        raise AssertionError(f"{len(a)} outputs on tpu, {len(e)} on cpu")
    if not a and not isinstance(expected, (list, tuple, dict)):
        if values and actual != expected and not (actual != actual and expected != expected):
            raise AssertionError(f"{actual!r} vs {expected!r}")
        return
    for x, y in zip(a, e):
        if x.device.type != "tpu" and not (y.device.type == "cpu" and x.device.type == "cpu"):
            raise AssertionError(f"result on {x.device}")
        x = x.detach().cpu()
        y = y.detach()
        if x.shape != y.shape:
            raise AssertionError(f"shape {tuple(x.shape)} vs {tuple(y.shape)}")
        if x.dtype != y.dtype:
            raise AssertionError(f"dtype {x.dtype} vs {y.dtype}")
        if values:
            _assert_close(x, y, tol)
