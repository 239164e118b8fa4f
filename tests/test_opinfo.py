"""PyTorch's OpInfo database on tpu against the CPU (a representative part, for CI).

Each test runs one (OpInfo, dtype) entry through torch_tpu.opcheck.check_op: every sample
input on both devices through the function, in-place and out= variants (compared with the
tolerances PyTorch's tests use for the dtype), and, for `grad` entries, the gradients. The
entry must pass natively (no CPU fallback) unless tests/opinfo_known_failures.txt lists it
with a reason; a listed entry that passes natively fails the test ("now passes, remove it").

The whole database is `make opcheck` (python -m torch_tpu.opcheck --grad --check-known);
TORCH_TPU_OPINFO_ALL=1 runs every entry through this module instead of the subset.
"""
import os

import pytest
import torch
from torch_tpu.testing import opcheck

pytestmark = [pytest.mark.filterwarnings("ignore")]

F, B, H, L, I, Z = "float32", "bfloat16", "float16", "int64", "int32", "bool"

# OpInfo name -> dtypes checked in CI; a representative of every lowering family.
SUBSET = {
    # elementwise
    "add": (F, B, L, Z), "sub": (F, I), "mul": (F, B, Z), "div.no_rounding_mode": (F, L), "div.floor_rounding": (F, L),
    "div.trunc_rounding": (L,), "floor_divide": (F, L), "remainder": (F, L), "fmod": (F, I), "pow": (F, L),
    "exp": (F, B), "exp2": (F,), "log": (F, H), "log2": (F,), "sin": (F,), "tanh": (F, B), "sigmoid": (F,),
    "erf": (F,), "erfc": (F,), "erfinv": (F,), "lgamma": (F,), "digamma": (B,), "round": (F, L),
    "round.decimals_3": (F,), "frac": (F,), "trunc": (F,), "clamp": (F, L), "where": (F, Z), "masked_fill": (F, Z),
    "maximum": (F, L), "fmax": (F,), "logical_and": (Z, L), "bitwise_xor": (L, Z), "copysign": (F,),
    "hypot": (F,), "logaddexp": (F,), "xlogy": (F,), "nan_to_num": (F, B), "signbit": (F, L), "isposinf": (F,),
    "heaviside": (F,), "sinc": (F,), "logit": (F,), "nextafter": (F,), "lerp": (F,), "addcdiv": (F,),
    "special.i0e": (F,), "polygamma.polygamma_n_2": (F,), "frexp": (F,),
    # reductions
    "sum": (F, B, L, Z), "mean": (F, B), "prod": (F, L), "amax": (F, L), "argmax": (F, L), "max.reduction_with_dim": (F,),
    "var_mean": (F, B), "std": (F,), "aminmax": (F, L), "nansum": (F,), "count_nonzero": (F, Z),
    "linalg.vector_norm": (F, B), "norm": (F,), "logsumexp": (F,), "any": (Z, F), "all": (L,), "histc": (F,),
    # cumulative, order statistics
    "cumsum": (F, B, L), "cumprod": (F, L), "cummax": (F, L), "logcumsumexp": (F,), "sort": (F, B, L, Z),
    "argsort": (F,), "topk": (F, L), "kthvalue": (F,), "median": (F, L), "nanmedian": (F,), "mode": (F, L),
    "searchsorted": (F, L), "bucketize": (F,),
    # indexing
    "gather": (F, L, Z), "scatter": (F, L), "scatter_add": (F,), "scatter_reduce.amax": (F, L),
    "scatter_reduce.mean": (F,), "index_select": (F, Z), "index_add": (F, L), "index_put": (F, Z),
    "index_fill": (F,), "index_copy": (F,), "index_reduce.prod": (F,), "take_along_dim": (F,), "take": (F,),
    "put": (F,), "masked_scatter": (F,), "masked_select": (F, Z), "nonzero": (F, Z), "__getitem__": (F, L),
    "unique": (F, L), "isin": (F, L),
    # shape and linear algebra
    "flip": (F, Z), "roll": (F, L), "rot90": (F,), "triu": (F, L), "tril": (B,), "cat": (F, B), "repeat": (F,),
    "linalg.cross": (F,), "trace": (F,), "mm": (F, B), "bmm": (F,), "addmm": (F,), "matmul": (F, B), "vdot": (F,),
    "fft.fft": (F,), "fft.rfft2": (F,), "fft.irfft": (F,),
    # random (shapes and dtypes; tests/test_random.py checks the distributions)
    "uniform": (F, B), "normal": (F,), "bernoulli": (F,), "multinomial": (F,), "randint": (L,),
    # nn (a few; the nn families have their own tests)
    "nn.functional.embedding": (F,), "softmax": (F, B), "nn.functional.relu": (F,), "nn.functional.gelu": (F,),
    "nn.functional.embedding_bag": (F, B), "nn.functional.grid_sample": (F, B),
}
GRAD = ["add", "mul", "div.no_rounding_mode", "pow", "exp", "tanh", "erfinv", "clamp", "where", "sum", "mean", "prod", "amax",
        "var_mean", "linalg.vector_norm", "logsumexp", "cumsum", "cumprod", "cummax", "logcumsumexp", "sort",
        "topk", "median", "gather", "scatter", "scatter_add", "index_select", "index_add", "index_put",
        "masked_select", "masked_scatter", "__getitem__", "take_along_dim", "flip", "roll", "triu", "cat",
        "linalg.cross", "mm", "bmm", "matmul", "fft.rfft2", "hypot", "logaddexp", "xlogy", "nn.functional.embedding",
        "softmax", "nn.functional.embedding_bag", "nn.functional.grid_sample"]

KNOWN = opcheck.load_known_failures()
OPS = {opcheck.entry_name(o): o for o in opcheck.select_ops()}


def _entries():
    if os.environ.get("TORCH_TPU_OPINFO_ALL"):
        for name, op in OPS.items():
            for dtype in opcheck.DTYPES:
                if opcheck.DTYPES[dtype] in op.supported_dtypes("cpu"):
                    yield name, dtype, "forward"
            if op.supports_autograd and torch.float32 in op.supported_dtypes("cpu"):
                yield name, F, "grad"
        return
    for name, dtypes in SUBSET.items():
        for dtype in dtypes:
            yield name, dtype, "forward"
    for name in GRAD:
        yield name, F, "grad"


ENTRIES = list(_entries())


@pytest.mark.parametrize("name,dtype,kind", ENTRIES, ids=["-".join(e) for e in ENTRIES])
def test_opinfo(name, dtype, kind):
    op = OPS[name]
    if opcheck.DTYPES[dtype] not in op.supported_dtypes("cpu"):
        pytest.skip(f"{name} does not support {dtype}")
    r = opcheck.check_op(op, opcheck.DTYPES[dtype], max_samples=4, grad=kind == "grad", timeout=120)
    if r["status"] == "skip":
        pytest.skip("no valid sample")
    reason = opcheck.known_reason(KNOWN, r)
    if reason:
        if r["status"] == "native":
            pytest.fail(f"{name} {dtype} {kind} now passes natively: remove it from tests/opinfo_known_failures.txt")
        pytest.xfail(reason)
    detail = r["error"] or "ran on the CPU: " + ", ".join(r["fallback_ops"])
    assert r["status"] == "native", detail


def test_subset_names_exist():
    missing = [n for n in list(SUBSET) + GRAD if n not in OPS]
    assert not missing, missing


def test_known_failures_file_is_well_formed():
    assert KNOWN, "tests/opinfo_known_failures.txt is empty or missing"
    for (name, dtype, kind), reason in KNOWN.items():
        assert name in OPS, f"{name}: no such OpInfo"
        assert dtype == "*" or dtype in opcheck.DTYPES, f"{name}: unknown dtype {dtype}"
        assert kind in ("forward", "grad"), f"{name}: kind must be forward or grad"
        assert len(reason) > 10, f"{name}: give a reason"
