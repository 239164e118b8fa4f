"""Out-of-range indices raise, like CUDA's device-side asserts: the exception the CPU raises
for the same call (IndexError, or RuntimeError for gather/scatter/index_add/embedding_bag),
naming the op, whenever the bad result is read (here .cpu()), and at the op itself in debug
mode. StableHLO would clamp a gather and drop a scatter silently; the lowerings add a check
(ctx.AddCheck) that guards the op's results (runtime/device_checks.h). Valid indices, negative
ones included where PyTorch accepts them, never raise. tests/test_deferred_checks.py covers
how the error follows derived tensors and stays out of other threads.
"""
import pytest
import torch
import torch_tpu

TPU = "tpu"


X = torch.arange(15.0).reshape(5, 3)
BAD_ROW = torch.tensor([0, 5])
CASES = {  # each on device d
    "index_select": lambda d: X.to(d).index_select(0, BAD_ROW.to(d)),
    "gather": lambda d: torch.gather(X.to(d), 0, torch.tensor([[0, 7, 1]]).to(d)),
    "gather_negative": lambda d: torch.gather(X.to(d), 1, torch.tensor([[-1], [0], [0], [0], [0]]).to(d)),
    "scatter": lambda d: X.to(d).scatter(0, torch.tensor([[6, 0, 0]]).to(d), 1.0),
    "scatter_add": lambda d: X.to(d).scatter_add(1, torch.tensor([[3]]).to(d), torch.ones(1, 1).to(d)),
    "index_add": lambda d: X.to(d).index_add(0, BAD_ROW.to(d), torch.ones(2, 3).to(d)),
    "index_copy": lambda d: X.to(d).index_copy(0, BAD_ROW.to(d), torch.ones(2, 3).to(d)),
    "index_fill": lambda d: X.to(d).index_fill(1, torch.tensor([3]).to(d), 0.0),
    "index": lambda d: X.to(d)[BAD_ROW.to(d)],
    "index_negative": lambda d: X.to(d)[torch.tensor([-6]).to(d)],
    "index_put": lambda d: X.clone().to(d).index_put_((BAD_ROW.to(d),), torch.ones(3).to(d)),
    "index_put_accumulate": lambda d: X.clone().to(d).index_put_((BAD_ROW.to(d),), torch.ones(3).to(d),
                                                                 accumulate=True),
    "take": lambda d: torch.take(X.to(d), torch.tensor([15]).to(d)),
    "put": lambda d: X.clone().to(d).put_(torch.tensor([-16]).to(d), torch.ones(1).to(d)),
    "embedding": lambda d: torch.nn.functional.embedding(torch.tensor([[1, 5]]).to(d), X.to(d)),
    "embedding_bag": lambda d: torch.nn.functional.embedding_bag(BAD_ROW.to(d), X.to(d), torch.tensor([0]).to(d)),
    "embedding_bag_max": lambda d: torch.nn.functional.embedding_bag(torch.tensor([[1, -1]]).to(d), X.to(d),
                                                                     mode="max"),
    "embedding_max_norm": lambda d: torch.nn.functional.embedding(BAD_ROW.to(d), X.clone().to(d), max_norm=1.0),
}
NAMES = {"gather_negative": "gather", "index_negative": "index", "index_put_accumulate": "index_put",
         "embedding": "index_select", "embedding_bag_max": "embedding_bag", "embedding_max_norm": "embedding_renorm"}


@pytest.fixture(autouse=True)
def _strict_mode():
    mode = torch_tpu.get_eager_mode()
    yield
    torch_tpu.set_eager_mode(mode)
    torch.tpu.synchronize()  # nothing pending leaks into the next test


def cpu_error(case):
    """The exception type the CPU raises for the same call."""
    try:
        CASES[case]("cpu")
    except (IndexError, RuntimeError) as e:
        return type(e)
    raise AssertionError(f"{case}: the CPU accepts it")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_every_read_raises_like_the_cpu(case, mode):
    torch_tpu.set_eager_mode(mode)
    name = NAMES.get(case, case)
    error = cpu_error(case)
    y = CASES[case](TPU)
    for _ in range(2):  # a failure is not used up by the first read
        with pytest.raises(error, match=name) as info:
            y.cpu()
        assert info.type is error
    # The device keeps working, and other tensors are unaffected.
    assert torch.equal(X.to(TPU).index_select(0, torch.tensor([4]).to(TPU)).cpu(), X[4:5])


@pytest.mark.parametrize("case", sorted(CASES))
def test_debug_mode_raises_at_the_op(case):
    torch_tpu.set_eager_mode("debug")
    name = NAMES.get(case, case)
    with pytest.raises(cpu_error(case), match=name):
        CASES[case](TPU)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_never_clamped_silently(mode):
    """An unrelated read neither raises nor consumes the failure: the bad result, and what is
    computed from it, raise when read, with the op and its operands' shapes in the message."""
    torch_tpu.set_eager_mode(mode)
    y = X.to(TPU).index_select(0, BAD_ROW.to(TPU))
    z = X.to(TPU) + 1
    assert torch.equal(z.cpu(), X + 1)
    torch.tpu.synchronize()
    for v in (y, y * 2, y.sum()):
        with pytest.raises(IndexError, match=r"index_select.*\[5, 3\].*\[2\]"):
            v.cpu()


VALID = {
    "index_select": lambda d: X.to(d).index_select(0, torch.tensor([4, 0]).to(d)),
    "gather": lambda d: torch.gather(X.to(d), 1, torch.tensor([[2], [0], [1], [2], [0]]).to(d)),
    "scatter": lambda d: X.to(d).scatter(0, torch.tensor([[4, 0, 1]]).to(d), -1.0),
    "index_add": lambda d: X.to(d).index_add(0, torch.tensor([4, 4]).to(d), torch.ones(2, 3).to(d)),
    "index_negative": lambda d: X.to(d)[torch.tensor([-5, -1]).to(d)],
    "index_put_negative": lambda d: X.to(d).index_put((torch.tensor([-1]).to(d),), torch.zeros(3).to(d)),
    "take_negative": lambda d: torch.take(X.to(d), torch.tensor([-15, 14]).to(d)),
    "index_fill_negative": lambda d: X.to(d).index_fill(1, torch.tensor([-1]).to(d), 0.0),
    "embedding": lambda d: torch.nn.functional.embedding(torch.tensor([[4, 0]]).to(d), X.to(d)),
    "embedding_bag": lambda d: torch.nn.functional.embedding_bag(torch.tensor([[4, 0]]).to(d), X.to(d), mode="max"),
}


@pytest.mark.parametrize("case", sorted(VALID))
def test_valid_indices_do_not_raise(case):
    torch_tpu.set_eager_mode("debug")
    got = VALID[case](TPU).cpu()
    torch.testing.assert_close(got, VALID[case]("cpu"))
