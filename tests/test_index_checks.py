"""Out-of-range indices raise, like CUDA's device-side asserts: an IndexError naming the op no
later than the next synchronisation point (here .cpu()), and at the op itself in debug mode.
StableHLO would clamp a gather and drop a scatter silently; the lowerings add a check
(ctx.AddCheck) that the runtime raises. Valid indices, negative ones included where PyTorch
accepts them, never raise."""
import pytest
import torch
import torch_tpu

TPU = "tpu"


def t(x):
    return x.to(TPU)


X = torch.arange(15.0).reshape(5, 3)
BAD_ROW = torch.tensor([0, 5])
CASES = {
    "index_select": lambda: t(X).index_select(0, t(BAD_ROW)),
    "gather": lambda: torch.gather(t(X), 0, t(torch.tensor([[0, 7, 1]]))),
    "gather_negative": lambda: torch.gather(t(X), 1, t(torch.tensor([[-1], [0], [0], [0], [0]]))),
    "scatter": lambda: t(X).scatter(0, t(torch.tensor([[6, 0, 0]])), 1.0),
    "scatter_add": lambda: t(X).scatter_add(1, t(torch.tensor([[3]])), t(torch.ones(1, 1))),
    "index_add": lambda: t(X).index_add(0, t(BAD_ROW), t(torch.ones(2, 3))),
    "index_copy": lambda: t(X).index_copy(0, t(BAD_ROW), t(torch.ones(2, 3))),
    "index_fill": lambda: t(X).index_fill(1, t(torch.tensor([3])), 0.0),
    "index": lambda: t(X)[t(BAD_ROW)],
    "index_negative": lambda: t(X)[t(torch.tensor([-6]))],
    "index_put": lambda: t(X).index_put_((t(BAD_ROW),), t(torch.ones(3))),
    "index_put_accumulate": lambda: t(X).index_put_((t(BAD_ROW),), t(torch.ones(3)), accumulate=True),
    "take": lambda: torch.take(t(X), t(torch.tensor([15]))),
    "put": lambda: t(X).put_(t(torch.tensor([-16])), t(torch.ones(1))),
    "embedding": lambda: torch.nn.functional.embedding(t(torch.tensor([[1, 5]])), t(X)),
    "embedding_bag": lambda: torch.nn.functional.embedding_bag(t(BAD_ROW), t(X), t(torch.tensor([0]))),
    "embedding_bag_max": lambda: torch.nn.functional.embedding_bag(t(torch.tensor([[1, -1]])), t(X), mode="max"),
    "embedding_max_norm": lambda: torch.nn.functional.embedding(t(BAD_ROW), t(X), max_norm=1.0),
}
NAMES = {"gather_negative": "gather", "index_negative": "index", "index_put_accumulate": "index_put",
         "embedding": "index_select", "embedding_bag_max": "embedding_bag", "embedding_max_norm": "embedding_renorm"}


@pytest.fixture(autouse=True)
def _strict_mode():
    mode = torch_tpu.get_eager_mode()
    yield
    torch_tpu.set_eager_mode(mode)
    torch.tpu.synchronize()  # nothing pending leaks into the next test


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_raises_by_next_sync(case, mode):
    torch_tpu.set_eager_mode(mode)
    name = NAMES.get(case, case)
    with pytest.raises(IndexError, match=name):
        y = CASES[case]()
        y.cpu()
    # The failure is reported once; the device keeps working.
    assert torch.equal(t(X).index_select(0, t(torch.tensor([4]))).cpu(), X[4:5])


@pytest.mark.parametrize("case", sorted(CASES))
def test_debug_mode_raises_at_the_op(case):
    torch_tpu.set_eager_mode("debug")
    name = NAMES.get(case, case)
    with pytest.raises(IndexError, match=name):
        CASES[case]()


def test_never_clamped_silently():
    """Even if nobody reads the bad result, the next sync point raises."""
    y = t(X).index_select(0, t(BAD_ROW))
    z = t(X) + 1
    with pytest.raises(IndexError, match="index_select"):
        z.cpu()
    del y


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
