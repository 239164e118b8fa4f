"""Ops an OpInfo sweep found without a lowering, against PyTorch CPU: activation backwards,
max_unpool, fractional max pooling, rrelu, margin and CTC losses, segment reductions,
anti-aliased bilinear resizing and special functions. `check` (tests/test_nn_ops.py) runs
each on CPU and on tpu and compares values and gradients, with no op allowed to fall back.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torch_tpu
from test_nn_ops import BF16, F32, check, native, randn

BOTH = [F32, BF16]


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("fn", [lambda x: F.hardtanh(x, -1.5, 2.0), F.relu6, lambda x: F.leaky_relu(x, 0.2)],
                         ids=["hardtanh", "relu6", "leaky_relu"])
def test_activation_backward(fn, dtype):
    x = randn(4, 5) * 4
    x[0, :5] = torch.tensor([-1.5, 2.0, 0.0, 6.0, math.nan])  # the kinks, and NaN
    check(fn, x, grad=True, dtype=dtype)


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("nd,shape", [(1, (2, 3, 10)), (2, (2, 3, 6, 7)), (2, (3, 6, 8)), (3, (2, 2, 4, 5, 6))])
def test_max_unpool(nd, shape, dtype):
    pool = getattr(F, f"max_pool{nd}d")
    unpool = getattr(F, f"max_unpool{nd}d")

    def fn(x):
        y, idx = pool(x, 3, stride=2, padding=1, return_indices=True)  # overlapping windows: repeated indices
        return unpool(y, idx, 3, stride=2, padding=1, output_size=x.shape[-nd:])

    check(fn, randn(*shape), grad=True, dtype=dtype)


def test_max_unpool_invalid_index_raises():
    x = torch.ones(1, 1, 2, 2, device="tpu")
    idx = torch.tensor([[[[0, 1], [2, 99]]]], device="tpu")
    with pytest.raises((RuntimeError, IndexError), match="invalid max index"):
        F.max_unpool2d(x, idx, 2).cpu()


@pytest.mark.parametrize("dtype", BOTH + [torch.float16])
@pytest.mark.parametrize("nd,shape,kernel,out", [(2, (2, 3, 11, 13), (3, 2), (5, 6)), (2, (3, 9, 9), 2, (4, 1)),
                                                  (3, (2, 2, 7, 8, 9), (2, 3, 2), (3, 4, 5))])
def test_fractional_max_pool(nd, shape, kernel, out, dtype):
    pool = getattr(F, f"fractional_max_pool{nd}d")
    planes = shape[:-nd] if len(shape) == nd + 2 else (1, shape[0])
    samples = torch.rand(*planes, nd, generator=torch.Generator().manual_seed(3))

    def fn(x, s):
        return pool(x, kernel, output_size=out, return_indices=True, _random_samples=s)

    x = randn(*shape)
    x.view(-1)[::7] = x.view(-1)[3]  # ties: the first maximum wins
    if dtype == F32:
        check(lambda x: fn(x, samples.to(x.device)), x, grad=True)
        return
    # The CPU places the windows with arithmetic in the half type itself, so the reference
    # runs in that type too (check() would compute it in float32); a max is exact.
    x, samples = x.to(dtype), samples.to(dtype)
    expected = fn(x, samples)
    with native():
        actual = fn(x.to("tpu"), samples.to("tpu"))
        for e, a in zip(expected, actual):
            assert_close(a.cpu(), e, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", BOTH)
def test_rrelu_training_draws_slopes_on_the_device(dtype):
    x = (randn(64, 32) * 2).to(dtype)
    with native():
        xt = x.to("tpu").requires_grad_()
        torch.manual_seed(5)
        y = F.rrelu(xt, 0.1, 0.3, training=True)
        y.backward(torch.ones_like(y))
        slopes = (y.detach() / xt.detach()).cpu().float()
        neg = x.float() < 0
        assert (slopes[~neg] == 1).all()
        assert slopes[neg].min() >= 0.1 - 1e-2 and slopes[neg].max() <= 0.3 + 1e-2
        assert slopes[neg].std() > 0.03  # drawn per element, not one slope
        assert_close(xt.grad.cpu().float(), slopes, **({} if dtype == F32 else dict(atol=1e-2, rtol=1e-2)))
        torch.manual_seed(5)
        again = F.rrelu(x.to("tpu"), 0.1, 0.3, training=True)
        assert_close(again.cpu(), y.detach().cpu())  # the device generator's seed reproduces them
        inplace = x.to("tpu")
        F.rrelu(inplace, 0.1, 0.3, training=True, inplace=True)
        assert ((inplace.cpu().float() / x.float())[neg] >= 0.1 - 1e-2).all()


def test_rrelu_eval_matches_cpu():
    check(lambda x: F.rrelu(x, 0.1, 0.3, training=False), randn(4, 6) * 3, grad=True)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss(p, reduction):
    x, target = randn(5, 7), torch.tensor([0, 6, 3, 3, 1])
    w = torch.rand(7, generator=torch.Generator().manual_seed(2)) + 0.5
    check(lambda x: F.multi_margin_loss(x, target.to(x.device), p=p, margin=0.7, reduction=reduction), x, grad=True)
    check(lambda x: F.multi_margin_loss(x, target.to(x.device), p=p, weight=w.to(x.device), reduction=reduction), x,
          grad=True)
    # One sample: a 0-dim target gives a 0-dim unreduced loss, a (1,) target a (1,) one (torch_tpu/_meta.py).
    check(lambda x: F.multi_margin_loss(x, torch.tensor(2, device=x.device), p=p, reduction=reduction), randn(7),
          grad=True)
    check(lambda x: F.multi_margin_loss(x, torch.tensor([2], device=x.device), p=p, reduction=reduction), randn(7),
          grad=True)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss(reduction):
    target = torch.tensor([[3, 0, -1, 1], [1, 2, 3, 0], [2, 2, -1, -1], [-1, 1, 2, 3]])
    check(lambda x: F.multilabel_margin_loss(x, target.to(x.device), reduction=reduction), randn(4, 4), grad=True)
    # One sample (1-D): the unreduced loss is 0-dim, as on the CPU (torch_tpu/_meta.py).
    check(lambda x: F.multilabel_margin_loss(x, torch.tensor([1, -1, 0, 0], device=x.device), reduction=reduction),
          randn(4), grad=True)


def test_margin_loss_bad_target_raises():
    with pytest.raises((RuntimeError, IndexError), match="out of range"):
        F.multi_margin_loss(torch.zeros(2, 3, device="tpu"), torch.tensor([0, 3], device="tpu")).cpu()


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("padded", [True, False])
def test_ctc_loss(padded, reduction):
    g = torch.Generator().manual_seed(4)
    T, N, C = 12, 4, 6
    logits = torch.randn(T, N, C, generator=g)
    input_lengths, target_lengths = [12, 9, 12, 5], [4, 3, 0, 2]
    targets = torch.randint(1, C, (N, 4), generator=g)
    targets[0, 1] = targets[0, 2]  # a repeated label needs a blank between
    if not padded:
        targets = torch.cat([targets[i, :n] for i, n in enumerate(target_lengths)])

    def fn(logits):
        lp = logits.log_softmax(-1)
        return F.ctc_loss(lp, targets.to(lp.device), torch.tensor(input_lengths), torch.tensor(target_lengths),
                          blank=0, reduction=reduction)

    check(fn, logits, grad=True, atol=1e-4, rtol=1e-4)


def test_ctc_loss_impossible_alignment():
    """A target longer than its input has zero likelihood: inf, or 0 with zero_infinity."""
    lp = randn(3, 1, 5).log_softmax(-1)
    targets, lengths = torch.tensor([[1, 2, 3, 4]]), (torch.tensor([3]), torch.tensor([4]))
    for zero_infinity in (False, True):
        check(lambda lp: F.ctc_loss(lp, targets.to(lp.device), *lengths, reduction="sum", zero_infinity=zero_infinity),
              lp, grad=zero_infinity)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", BOTH)
def test_segment_reduce(reduce, dtype):
    data = randn(3, 9, 2)
    data[0, 1, 0] = data[0, 2, 0]  # a tie inside a segment for max/min
    lengths = torch.tensor([[2, 0, 4, 3], [9, 0, 0, 0], [1, 1, 1, 6]])
    offsets = torch.cat([torch.zeros(3, 1, dtype=torch.long), lengths.cumsum(1)], 1)
    grad = dtype == F32
    check(lambda d: torch.segment_reduce(d, reduce, lengths=lengths.to(d.device), axis=1), data, grad=grad, dtype=dtype)
    check(lambda d: torch.segment_reduce(d, reduce, offsets=offsets.to(d.device), axis=1, initial=1.5), data,
          grad=grad, dtype=dtype)
    check(lambda d: torch.segment_reduce(d, reduce, lengths=torch.tensor([3, 0, 2], device=d.device)), randn(5, 3),
          grad=grad, dtype=dtype)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("size,align", [((5, 9), False), ((13, 4), True), ((3, 3), False)])
def test_antialiased_interpolation(mode, size, align):
    check(lambda x: F.interpolate(x, size=size, mode=mode, antialias=True, align_corners=align), randn(2, 3, 11, 7),
          grad=True)
    check(lambda x: F.interpolate(x, scale_factor=0.45, mode=mode, antialias=True), randn(1, 2, 10, 12), grad=True)


def _special_points(low):
    g = torch.Generator().manual_seed(6)
    regimes = [torch.rand(40, generator=g) * 2, 2 + torch.rand(60, generator=g) * 23, 25 + torch.rand(30, generator=g) * 200]
    x = torch.cat(regimes + [torch.tensor([0.0, 1e-3, 2.0, 25.0, math.inf, -math.inf, math.nan])])
    return torch.cat([x, -x]) if low else x


@pytest.mark.parametrize("name", ["bessel_y0", "bessel_y1"])
def test_bessel_y(name):
    fn = getattr(torch.special, name)
    check(fn, _special_points(low=True), atol=1e-5, rtol=2e-5)
    check(fn, torch.tensor([0, 1, 3, 30]), atol=1e-5, rtol=2e-5)  # integer inputs compute in float32


def test_airy_ai():
    x = torch.cat([torch.linspace(-30, 12, 421), torch.tensor([0.0, -2.0, 1.0, math.nan, math.inf, -math.inf])])
    check(torch.special.airy_ai, x, atol=1e-5, rtol=2e-5)
    check(torch.special.airy_ai, torch.tensor([-3, 0, 2], dtype=torch.int64), atol=1e-5, rtol=2e-5)


def test_rrelu_and_max_unpool_compiled():
    torch._dynamo.reset()
    x = randn(16, 16)
    with native():
        f = torch.compile(lambda x: F.rrelu(x, 0.1, 0.3, training=True), backend="tpu")
        slopes = (f(x.to("tpu")).cpu() / x)[x < 0]
        assert slopes.min() >= 0.1 and slopes.max() <= 0.3 and slopes.std() > 0.03
        g = torch.compile(lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2), backend="tpu")
        assert_close(g(x[None, None].to("tpu")).cpu(), F.max_unpool2d(*F.max_pool2d(x[None, None], 2, return_indices=True), 2))
        assert not torch_tpu.metrics()["compile_eager_nodes_by_op"]
