"""Where the CPU raises, tpu raises the same exception class, in strict and fused mode; where
the CPU computes a value for odd input (NaN, out-of-range conversions), tpu computes the same.
Checks only the device can make (a target or divisor read from a tensor) raise when the result
is read, like CUDA's device-side asserts (tests/test_deferred_checks.py covers that mechanism)."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu

from conftest import needs_devices


@pytest.fixture(params=["strict", "fused"], autouse=True)
def mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


def same_error(fn, match=None):
    """fn(device) raises the same exception class on CPU and tpu (the tpu result is read)."""
    with pytest.raises(Exception) as cpu:
        fn("cpu")
    with pytest.raises(type(cpu.value), match=match) as tpu:
        r = fn("tpu")
        for t in r if isinstance(r, tuple) else (r,):
            t.cpu()
    assert type(tpu.value) is type(cpu.value), (tpu.value, cpu.value)
    return tpu.value


LOGITS = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
LOGITS_2D = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("target", [3, -1, 7], ids=["C", "minus1", "far"])
def test_loss_target_out_of_range(reduction, target):
    tgt = torch.tensor([0, target, 1, 2])
    for loss in (F.cross_entropy, lambda x, t, reduction: F.nll_loss(x.log_softmax(1), t, reduction=reduction)):
        same_error(lambda d: loss(LOGITS.to(d), tgt.to(d), reduction=reduction), match="[Tt]arget")
    # 1-d input (one sample), and the spatial form (nll_loss2d).
    same_error(lambda d: F.cross_entropy(LOGITS[0].to(d), torch.tensor(target).to(d), reduction=reduction))
    tgt2d = torch.zeros(2, 4, 4, dtype=torch.long)
    tgt2d[1, 2, 3] = target
    same_error(lambda d: F.cross_entropy(LOGITS_2D.to(d), tgt2d.to(d), reduction=reduction))


def test_loss_gradient_of_a_bad_target_raises_too():
    x = LOGITS.to("tpu").requires_grad_()
    loss = F.cross_entropy(x, torch.tensor([0, 3, 1, 2]).to("tpu"))
    loss.backward()
    with pytest.raises(IndexError, match="[Tt]arget"):
        x.grad.cpu()


def test_ignore_index_is_not_out_of_range():
    tgt = torch.tensor([0, -100, 1, -100])
    r = F.cross_entropy(LOGITS.to("tpu"), tgt.to("tpu"))
    torch.testing.assert_close(r.cpu(), F.cross_entropy(LOGITS, tgt))
    r = F.cross_entropy(LOGITS.to("tpu"), torch.tensor([0, 5, 1, 2]).to("tpu"), ignore_index=5)
    torch.testing.assert_close(r.cpu(), F.cross_entropy(LOGITS, torch.tensor([0, 5, 1, 2]), ignore_index=5))


AUDIT = {
    "multi_margin": lambda d: F.multi_margin_loss(LOGITS.to(d), torch.tensor([0, 3, 1, 2]).to(d)),
    "multilabel_margin": lambda d: F.multilabel_margin_loss(LOGITS.to(d), torch.tensor([[3, -1, 0]] * 4).to(d)),
    "embedding_bag_first_offset": lambda d: F.embedding_bag(torch.tensor([0, 1]).to(d), LOGITS.to(d),
                                                            torch.tensor([1, 0]).to(d)),
    "embedding_bag_last_offset": lambda d: F.embedding_bag(torch.tensor([0, 1]).to(d), LOGITS.to(d),
                                                           torch.tensor([0, 3]).to(d)),
    "embedding_bag_decreasing_offsets_sum": lambda d: F.embedding_bag(torch.tensor([0, 1, 2, 3]).to(d), LOGITS.to(d),
                                                                      torch.tensor([0, 3, 1]).to(d), mode="sum"),
    "embedding_bag_decreasing_offsets_mean": lambda d: F.embedding_bag(
        torch.tensor([0, 1, 2, 3]).to(d), LOGITS.to(d), torch.tensor([0, 3, 1, 4]).to(d), mode="mean",
        include_last_offset=True),
    "bincount_negative": lambda d: torch.bincount(torch.tensor([-1, 2]).to(d)),
    "repeat_interleave_negative": lambda d: torch.repeat_interleave(torch.tensor([1, -1]).to(d)),
    "searchsorted_sorter": lambda d: torch.searchsorted(torch.tensor([1.0, 2.0, 3.0]).to(d), torch.tensor([2.0]).to(d),
                                                        sorter=torch.tensor([0, 5, 1]).to(d)),
    "scatter_reduce": lambda d: torch.zeros(3).to(d).scatter_reduce(0, torch.tensor([5]).to(d), torch.ones(1).to(d),
                                                                    "sum"),
    "index_reduce": lambda d: torch.zeros(3).to(d).index_reduce(0, torch.tensor([5]).to(d), torch.ones(1).to(d),
                                                                "prod"),
    "histc_min_above_max": lambda d: torch.histc(torch.ones(3).to(d), bins=3, min=2, max=1),
    "histc_infinite_range": lambda d: torch.histc(torch.tensor([1.0, float("inf")]).to(d), bins=3),
    "take": lambda d: torch.take(LOGITS.to(d), torch.tensor([12]).to(d)),
    "put": lambda d: LOGITS.clone().to(d).put_(torch.tensor([-13]).to(d), torch.ones(1).to(d)),
    "index_add": lambda d: LOGITS.to(d).index_add(0, torch.tensor([4]).to(d), torch.ones(1, 3).to(d)),
    "index_copy": lambda d: LOGITS.to(d).index_copy(0, torch.tensor([4]).to(d), torch.ones(1, 3).to(d)),
    "index_fill": lambda d: LOGITS.to(d).index_fill(1, torch.tensor([3]).to(d), 0.0),
    "gather": lambda d: LOGITS.to(d).gather(1, torch.tensor([[3]] * 4).to(d)),
    "scatter": lambda d: LOGITS.to(d).scatter(1, torch.tensor([[3]]).to(d), 1.0),
    "scatter_add": lambda d: LOGITS.to(d).scatter_add(0, torch.tensor([[4]]).to(d), torch.ones(1, 1).to(d)),
}


@pytest.mark.parametrize("case", sorted(AUDIT))
def test_index_validating_ops_raise_like_the_cpu(case):
    same_error(AUDIT[case])


@pytest.mark.parametrize("case", [
    lambda d: LOGITS.to(d).index_select(0, torch.tensor([0.0]).to(d)),
    lambda d: LOGITS.to(d).index_select(0, torch.tensor([0], dtype=torch.uint8).to(d)),
    lambda d: LOGITS.to(d).index_add(0, torch.tensor([0.0]).to(d), torch.ones(1, 3).to(d)),
], ids=["index_select_float", "index_select_uint8", "index_add_float"])
def test_index_of_a_non_integer_dtype_raises(case):
    same_error(case, match="int32")


@pytest.mark.parametrize("case", [
    lambda d: torch.ones(0, device=d).max(),
    lambda d: torch.ones(0, device=d).min(),
    lambda d: torch.ones(0, 3, device=d).max(0),
    lambda d: torch.ones(0, 3, device=d).min(0),
    lambda d: torch.ones(0, 3, device=d).argmax(0),
    lambda d: torch.ones(0, device=d).argmin(),
    lambda d: torch.ones(0, 3, device=d).amax(0),
], ids=["max", "min", "max_dim", "min_dim", "argmax_dim", "argmin", "amax_dim"])
def test_empty_reductions_raise(case):
    same_error(case)


@pytest.mark.parametrize("case", [
    lambda d: torch.tensor([5, 3], device=d) // torch.tensor([0, 1], device=d),
    lambda d: torch.tensor([5, 3], device=d) % torch.tensor([0, 1], device=d),
    lambda d: torch.tensor([5, 3], device=d) // 0,
    lambda d: torch.fmod(torch.tensor([5, 3], device=d), 0),
    lambda d: torch.div(torch.tensor([5, 3], device=d), torch.tensor([0, 1], device=d), rounding_mode="trunc"),
    lambda d: torch.remainder(torch.tensor([5, 3], dtype=torch.int32, device=d), 0),
], ids=["floordiv", "mod", "floordiv_scalar", "fmod", "div_trunc", "remainder_int32"])
def test_integer_division_by_zero_raises(case):
    err = same_error(case)
    assert "ZeroDivisionError" in str(err)


def test_float_division_by_zero_is_not_an_error():
    for d in ["cpu", "tpu"]:
        r = torch.tensor([5.0, -3.0, 0.0], device=d) // torch.tensor([0.0, 0.0, 0.0], device=d)
        assert torch.equal(r.cpu().isnan(), torch.tensor([False, False, True]))


@pytest.mark.parametrize("case", [
    lambda d: torch.ones(2, 2, device=d) @ torch.ones(2, 2, device=d, dtype=torch.float64),
    lambda d: torch.mm(torch.ones(2, 2, device=d, dtype=torch.float64), torch.ones(2, 2, device=d)),
    lambda d: torch.addmm(torch.ones(2, 2, device=d), torch.ones(2, 2, device=d),
                          torch.ones(2, 2, device=d, dtype=torch.float64)),
    lambda d: torch.dot(torch.ones(2, device=d), torch.ones(2, device=d, dtype=torch.float64)),
    lambda d: torch.ones(1, 2, 2, device=d) @ torch.ones(1, 2, 2, device=d, dtype=torch.float64),
], ids=["matmul", "mm", "addmm", "dot", "bmm"])
def test_matmul_of_two_dtypes_raises(case):
    err = same_error(case)
    assert "dtype" in str(err) or "scalar type" in str(err)


def test_sign_of_nan_is_zero():
    x = torch.tensor([float("nan"), -2.0, 0.0, -0.0, 3.0, float("inf")])
    for fn in (torch.sign, torch.sgn):
        torch.testing.assert_close(fn(x.to("tpu")).cpu(), fn(x), equal_nan=True)


FLOATS = torch.tensor([-1.0, 300.0, float("nan"), 1e10, -1e10, float("inf"), float("-inf"), 2.9, -2.9, 70000.0,
                       3e9, -3e9, 1e19, -1e19, 127.5, -128.7])


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64],
                         ids=str)
@pytest.mark.parametrize("source", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_float_to_integer_conversion_matches_the_cpu(source, dtype):
    x = FLOATS.to(source)
    assert torch.equal(x.to("tpu").to(dtype).cpu(), x.to(dtype))
    # Inside a program too (a conversion the lowering emits, not only the copy).
    assert torch.equal((x.to("tpu") * 1).to(dtype).cpu(), (x * 1).to(dtype))


OVERLAP = {
    "expand_add_": lambda d: torch.zeros(1, 3, device=d).expand(2, 3).add_(1),
    "expand_mul_tensor": lambda d: torch.ones(1, 3, device=d).expand(2, 3).mul_(torch.ones(2, 3, device=d)),
    "out_overlaps_input": lambda d: (lambda x: torch.add(x[:3], 1, out=x[1:]))(torch.arange(4.0, device=d)),
    "partial_overlap_iadd": lambda d: (lambda x: x[1:3].__iadd__(x[0:2]))(torch.arange(4.0, device=d)),
    "out_internal_overlap": lambda d: torch.exp(torch.ones(4, device=d),
                                                out=torch.zeros(1, device=d).expand(4)),
}


@pytest.mark.parametrize("case", sorted(OVERLAP))
def test_overlapping_writes_raise_like_the_cpu(case):
    err = same_error(OVERLAP[case])
    assert "single memory location" in str(err)


def test_overlap_is_checked_when_only_the_view_offset_changes():
    # Views shorter than their storage take their offset at run time (outside the signature):
    # a disjoint call first must not let a later overlapping call of the same shapes through.
    for d in ["cpu", "tpu"]:
        x = torch.arange(8.0, device=d)
        x[4:6] += x[0:2]
        with pytest.raises(RuntimeError, match="single memory location"):
            x[1:3] += x[0:2]
        with pytest.raises(RuntimeError, match="single memory location"):
            torch.add(x[0:2], 1, out=x[1:3])
        assert torch.equal(x.cpu(), torch.tensor([0.0, 1, 2, 3, 4, 6, 6, 7]))


def test_full_overlap_and_disjoint_views_are_fine():
    for d in ["cpu", "tpu"]:
        x = torch.arange(4.0, device=d)
        torch.add(x, 1, out=x)  # exactly the same memory: allowed
        x[2:].add_(x[:2])       # disjoint halves of one storage
        assert torch.equal(x.cpu(), torch.tensor([1.0, 2.0, 4.0, 6.0]))


def test_indexing_a_zero_size_dim_raises_index_error_only_there():
    keep = torch.arange(6.0, device="tpu").reshape(2, 3) * 2  # same deferred graph in fused mode
    with pytest.raises(IndexError):
        torch.ones(0, 3, device="tpu")[torch.tensor([0]).to("tpu")].cpu()
    assert torch.equal(keep.cpu(), torch.arange(6.0).reshape(2, 3) * 2)
    with pytest.raises(IndexError):
        torch.ones(0, 3, device="tpu").index_select(0, torch.tensor([0]).to("tpu")).cpu()
    # An empty index of an empty dim is fine, as on the CPU.
    assert torch.ones(0, 3, device="tpu")[torch.tensor([], dtype=torch.long).to("tpu")].shape == (0, 3)


@pytest.mark.parametrize("fn", ["memory_allocated", "max_memory_allocated", "memory_reserved", "memory_stats",
                                "reset_peak_memory_stats", "mem_get_info", "synchronize", "get_device_name",
                                "get_device_properties", "set_device", "get_device_capability"])
def test_device_index_that_does_not_exist_raises(fn):
    f = getattr(torch.tpu, fn, None)
    if f is None:
        pytest.skip(f"torch.tpu has no {fn}")
    missing = torch.tpu.device_count() + 5  # an index no host has
    with pytest.raises((RuntimeError, ValueError, AssertionError), match=str(missing)):
        f(missing)
    with pytest.raises((RuntimeError, ValueError, AssertionError)):
        f(-2)
    f(torch.tpu.device_count() - 1)  # the last device is fine
    torch.tpu.set_device(0)


@needs_devices(2)
def test_index_on_another_device_raises_like_cuda():
    x = torch.ones(3, device="tpu:0")
    with pytest.raises(RuntimeError, match="same device"):
        x[torch.tensor([0]).to("tpu:1")]
    with pytest.raises(RuntimeError, match="same device"):
        x.index_put_((torch.tensor([0]).to("tpu:1"),), torch.ones(1, device="tpu:0"))
    assert torch.equal(x[torch.tensor([0])].cpu(), torch.ones(1))  # CPU indices are fine, as on CUDA


def test_embedding_bag_max_with_decreasing_offsets_computes_like_the_cpu():
    # The CPU's max kernel bags indices by position (not by offset order) and raises nothing.
    idx, offsets = torch.tensor([0, 1, 2, 3, 1]), torch.tensor([0, 3, 1])
    for w in (LOGITS, LOGITS.double()):
        expected = F.embedding_bag(idx, w, offsets, mode="max")
        torch.testing.assert_close(F.embedding_bag(idx.to("tpu"), w.to("tpu"), offsets.to("tpu"), mode="max").cpu(),
                                   expected)


@pytest.mark.parametrize("classes,num_classes", [([0, 3], 3), ([0, -1], 3), ([-2], -1), ([[1, 5], [2, -3]], 4),
                                                 ([2, 0], 0), ([1], -5), ([], -1)])
def test_one_hot_out_of_range_raises_the_cpus_message(classes, num_classes):
    err = same_error(lambda d: F.one_hot(torch.tensor(classes).to(d), num_classes))
    with pytest.raises(RuntimeError) as cpu:
        F.one_hot(torch.tensor(classes), num_classes)
    if num_classes > 0 or num_classes == -1:  # else the CPU's message depends on the values
        assert str(cpu.value) in str(err), (err, cpu.value)
    assert "scatter" not in str(err)


@pytest.mark.parametrize("classes,num_classes", [([0, 2, 1], 3), ([0, 2, 1], -1), ([[1, 0], [3, 3]], 5),
                                                 ([], 4), (5, 7)])
def test_one_hot_of_valid_classes_matches_the_cpu(classes, num_classes):
    x = torch.tensor(classes, dtype=torch.long)
    assert torch.equal(F.one_hot(x.to("tpu"), num_classes).cpu(), F.one_hot(x, num_classes))


def test_deliberate_difference_ctc_loss_target_out_of_range_raises():
    # README "Where tpu differs from the CPU": the CPU reads log_probs at the label unchecked
    # (another sample's value, or memory past the tensor: -1.9e34 for label 100 in one run).
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(6, 2, 4, generator=g).log_softmax(2)
    lengths, target_lengths = torch.tensor([6, 6]), torch.tensor([3, 3])
    for bad in (4, 100, -1):
        targets = torch.tensor([[1, 2, bad], [1, 1, 2]])
        for reduction in ("none", "mean"):
            with pytest.raises(IndexError, match="target label out of range"):
                F.ctc_loss(lp.to("tpu"), targets.to("tpu"), lengths, target_lengths, reduction=reduction).cpu()
    targets = torch.tensor([[1, 2, 3], [1, 1, 2]])
    torch.testing.assert_close(F.ctc_loss(lp.to("tpu"), targets.to("tpu"), lengths, target_lengths).cpu(),
                               F.ctc_loss(lp, targets, lengths, target_lengths))


def test_deliberate_difference_embedding_bag_float64_decreasing_offsets_raise():
    # README "Where tpu differs from the CPU": the CPU's float64 sum/mean kernel has no such
    # check (its mean divides by a negative bag size); tpu raises as the CPU does for float32.
    with pytest.raises(RuntimeError, match="non-decreasing"):
        F.embedding_bag(torch.tensor([0, 1, 2, 3]).to("tpu"), LOGITS.double().to("tpu"),
                        torch.tensor([0, 3, 1]).to("tpu"), mode="mean").cpu()


def _ints(d):
    return torch.arange(3, device=d)


def _floats(d):
    return torch.ones(3, device=d)


# PyTorch's Meta kernels for add/sub let these through; the CPU kernels raise (alpha_check).
@pytest.mark.parametrize("case", [
    ("add_float_bool_alpha", lambda d: torch.add(_floats(d), _floats(d), alpha=True), "Boolean alpha"),
    ("add__float_bool_alpha", lambda d: _floats(d).add_(_floats(d), alpha=True), "Boolean alpha"),
    ("sub_int_alpha_1.0", lambda d: torch.sub(_ints(d), _ints(d), alpha=1.0), "must not be a floating point"),
    ("add_int_alpha_1.0", lambda d: torch.add(_ints(d), _ints(d), alpha=1.0), "must not be a floating point"),
    ("rsub_int_alpha_1.0", lambda d: torch.rsub(_ints(d), _ints(d), alpha=1.0), "must not be a floating point"),
    ("add_int_scalar_alpha_0.5", lambda d: torch.add(_ints(d), 2, alpha=0.5), "must not be a floating point"),
    ("add_float_complex_alpha", lambda d: torch.add(_floats(d), _floats(d), alpha=1j), "must not be a complex"),
], ids=lambda c: c[0])
def test_add_sub_alpha_of_the_wrong_kind_raises_the_cpus_message(case):
    _, fn, message = case
    same_error(fn, match=message)


@pytest.mark.parametrize("case", [
    ("int_plus_float_scalar_alpha_0.5", lambda d: torch.add(_ints(d), 2.5, alpha=0.5)),
    ("int_plus_float_tensor_alpha_0.5", lambda d: torch.add(_ints(d), _floats(d), alpha=0.5)),
    ("float_alpha_1.0", lambda d: torch.sub(_floats(d), _ints(d), alpha=1.0)),
    ("bool_alpha_true", lambda d: torch.add(_ints(d) > 0, _ints(d) > 1, alpha=True)),
    ("int_alpha_int", lambda d: torch.sub(_ints(d), _ints(d), alpha=3)),
], ids=lambda c: c[0])
def test_add_sub_alpha_that_suits_the_result_type_computes_like_the_cpu(case):
    _, fn = case
    expected = fn("cpu")
    got = fn("tpu").cpu()
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected)
