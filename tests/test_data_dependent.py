"""Ops whose result size depends on the data run natively: the device counts, the host reads
the count (one synchronisation, as on CUDA), then programs of known size compute the result.
Boolean-mask writes (x[mask] = v) need no count at all."""
import pytest
import torch
import torch_tpu

TPU = "tpu"


@pytest.fixture(autouse=True)
def _native_only():
    torch_tpu.metrics.reset()
    yield
    fallbacks = torch_tpu.metrics()["cpu_fallbacks_by_op"]
    assert not fallbacks, f"ran on the CPU: {fallbacks}"


def same(fn, *args):
    expected = fn(*args)
    actual = fn(*[a.to(TPU) if isinstance(a, torch.Tensor) else a for a in args])
    exp = expected if isinstance(expected, (tuple, list)) else (expected,)
    act = actual if isinstance(actual, (tuple, list)) else (actual,)
    assert len(act) == len(exp), f"{len(act)} results on tpu, {len(exp)} on the CPU"
    for a, e in zip(act, exp):
        assert a.device.type == TPU
        torch.testing.assert_close(a.cpu(), e, equal_nan=True)


X = torch.tensor([[0.0, 1.5, 0.0], [-2.0, float("nan"), 0.0]])
MASK = torch.tensor([[True, False, True], [False, True, True]])


@pytest.mark.parametrize("fn", [
    torch.nonzero, torch.argwhere, lambda x: torch.nonzero(x, as_tuple=True), lambda x: x[x != 0],
    lambda x: torch.masked_select(x, MASK.to(x.device)), lambda x: x[MASK.to(x.device)],
    lambda x: x[:, MASK[0].to(x.device)], lambda x: torch.unique(x[0]),
    lambda x: torch.unique(torch.tensor([3, 1, 3, 2, 1], device=x.device), return_inverse=True, return_counts=True),
    lambda x: torch.unique_consecutive(torch.tensor([1, 1, 2, 2, 1], device=x.device), return_counts=True),
    lambda x: torch.repeat_interleave(torch.tensor([2, 0, 3], device=x.device)),
    lambda x: torch.bincount(torch.tensor([4, 1, 1, 0], device=x.device)),
], ids=["nonzero", "argwhere", "nonzero_tuple", "bool_index", "masked_select", "mask_index", "dim_mask_index",
        "unique", "unique_inverse_counts", "unique_consecutive", "repeat_interleave", "bincount"])
def test_data_dependent_sizes(fn):
    same(fn, X)


def test_one_sync_for_the_count():
    x = X.to(TPU)
    torch_tpu.metrics.reset()
    y = torch.nonzero(x)
    assert torch_tpu.metrics()["host_syncs_by_cause"].get("item") == 1  # one count read on the host
    assert y.device.type == TPU


@pytest.mark.parametrize("accumulate", [False, True])
def test_mask_assignment_needs_no_sync(accumulate):
    cpu = X.clone()
    tpu = X.to(TPU)
    torch_tpu.metrics.reset()
    tpu.index_put_((MASK.to(TPU),), torch.tensor([1.0, 2.0, 3.0, 4.0], device=TPU), accumulate=accumulate)
    assert not torch_tpu.metrics()["host_syncs_by_cause"], "a mask write synchronised"
    tpu[MASK.to(TPU)] = tpu[MASK.to(TPU)] * 0 + 7 if not accumulate else tpu[MASK.to(TPU)]
    cpu.index_put_((MASK,), torch.tensor([1.0, 2.0, 3.0, 4.0]), accumulate=accumulate)
    cpu[MASK] = cpu[MASK] * 0 + 7 if not accumulate else cpu[MASK]
    torch.testing.assert_close(tpu.cpu(), cpu, equal_nan=True)


def test_mask_assignment_of_a_scalar():
    cpu, tpu = X.clone(), X.to(TPU)
    cpu[torch.isnan(cpu)] = 0.0
    tpu[torch.isnan(tpu)] = 0.0
    torch.testing.assert_close(tpu.cpu(), cpu)


def test_wrong_value_count_for_a_mask_raises():
    t = X.to(TPU)
    with pytest.raises((RuntimeError, IndexError), match="index_put|shape mismatch"):
        t.index_put_((MASK.to(TPU),), torch.tensor([1.0, 2.0], device=TPU))
        t.cpu()
    torch.tpu.synchronize()


def test_masked_select_backward_and_nonzero_static():
    x = torch.randn(3, 4, requires_grad=True)
    xt = x.detach().to(TPU).requires_grad_()
    m = x.detach() > 0
    torch.masked_select(x, m).sum().backward()
    torch.masked_select(xt, m.to(TPU)).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad)
    same(lambda t: torch.nonzero_static(t, size=6, fill_value=-1), X)


def test_indexed_assignment_with_slices_and_cpu_indices():
    # x[:, :, idx] = v puts `:` slices (undefined tensors) in index_put's Tensor?[] list; the
    # index may live on the CPU, as PyTorch allows on CUDA.
    x = torch.arange(30.0).reshape(2, 3, 5)
    idx = torch.tensor([0, 3])
    v = -torch.arange(12.0).reshape(2, 3, 2)
    mask = torch.tensor([True, False, True])
    for index_device in ("cpu", TPU):
        expected, actual = x.clone(), x.to(TPU)
        i = idx.to(index_device)
        expected[:, :, idx] = v
        actual[:, :, i] = v.to(TPU)
        expected[:, idx[:1]] += 1
        actual[:, i[:1]] += 1
        expected[:, mask] = 7.0
        actual[:, mask.to(index_device)] = 7.0
        torch.testing.assert_close(actual.cpu(), expected)
        torch.testing.assert_close(actual[:, :, i].cpu(), expected[:, :, idx])
        torch.testing.assert_close(actual[1, :, i].cpu(), expected[1, :, idx])
