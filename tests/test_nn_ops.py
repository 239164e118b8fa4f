"""nn ops against PyTorch CPU: pooling, normalization, interpolation, grid sampling, attention,
dropout, activations, losses, embeddings and embedding bags, padding modes, autocast and
GradScaler, fold/unfold.

`check` runs `fn` on CPU tensors and on tpu copies and compares results and (grad=True)
the gradients of every floating input, asserting that no op fell back to the CPU. For
bfloat16 the inputs are rounded to bf16 and the CPU reference is computed in float32 from
the rounded values: PyTorch's CPU kernels accumulate some bf16 ops (avg/adaptive pooling,
interpolation, batch norm) in bf16, the device accumulates in f32 (DESIGN.md "Numerics").
"""
import math

import pytest
import torch
import torch.nn.functional as F
import torch_tpu
from conftest import native  # noqa: F401  (test_nn_coverage imports it from here)
from torch.testing import assert_close

pytestmark = pytest.mark.filterwarnings("ignore:reduction. .mean. divides the total loss")

TPU = "tpu"
F32, BF16 = torch.float32, torch.bfloat16
BF16_TOL = dict(atol=3e-2, rtol=2e-2)


def _leaves(args, device, dtype, grad):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            t = a.detach()
            if t.is_floating_point():
                t = t.to(dtype)
            t = t.to(device)
            if grad and t.is_floating_point():
                t.requires_grad_()
            out.append(t)
        else:
            out.append(a)
    return out


def _flat(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _flat(v)]
    return []


def check(fn, *args, grad=False, dtype=F32, allow=(), **tol):
    """fn on CPU (float32 reference for bf16) vs on tpu in `dtype`; gradients of the first result."""
    if dtype != F32:
        tol = {**BF16_TOL, **tol}
        args = [a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    ref_dtype = F32 if dtype == BF16 else dtype
    cpu_args = _leaves(args, "cpu", ref_dtype, grad)
    tpu_args = _leaves(args, TPU, dtype, grad)
    expected = fn(*cpu_args)
    with native(allow):
        actual = fn(*tpu_args)
        exp, act = _flat(expected), _flat(actual)
        assert len(act) == len(exp), f"{len(act)} results on tpu, {len(exp)} on the CPU"
        for e, a in zip(exp, act):
            assert a.device.type == TPU
            # The float32 reference of a bfloat16 run stands for a bfloat16 result; any other
            # dtype (indices, masks, an op that promotes) must be the CPU's.
            want = dtype if e.dtype == ref_dtype != dtype else e.dtype
            assert a.dtype == want, f"result dtype {a.dtype}, expected {want}"
            assert_close(a.cpu().to(e.dtype), e, equal_nan=True, **tol)
        if grad:
            out_cpu, out_tpu = _flat(expected)[0], _flat(actual)[0]
            g = torch.randn(out_cpu.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
            out_cpu.backward(g.to(out_cpu.dtype))
            out_tpu.backward(g.to(TPU))
            for c, t in zip(cpu_args, tpu_args):
                if isinstance(c, torch.Tensor) and c.requires_grad:
                    assert t.grad is not None, "missing gradient"
                    assert_close(t.grad.cpu().to(c.grad.dtype), c.grad, **tol)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


BOTH = [F32, BF16]

# ---------------------------------------------------------------- pooling


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=2, stride=1, dilation=2, ceil_mode=True),
                                dict(kernel_size=(2, 3), stride=(2, 1), padding=(1, 1), ceil_mode=True)])
def test_max_pool2d(kw, dtype):
    check(lambda x: F.max_pool2d(x, return_indices=True, **kw), randn(2, 3, 9, 10), grad=True, dtype=dtype)


def test_max_pool_1d_3d_unbatched():
    check(lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True), randn(2, 3, 11), grad=True)
    check(lambda x: F.max_pool3d(x, 2, return_indices=True), randn(2, 2, 5, 6, 7), grad=True)
    check(lambda x: F.max_pool3d(x, (2, 3, 2), (1, 2, 2), 1, ceil_mode=True, return_indices=True),
          randn(1, 2, 5, 6, 7), grad=True, dtype=BF16)
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), randn(3, 6, 6), grad=True)


def test_max_pool_ties_nan_inf():
    x = torch.zeros(1, 1, 6, 6)
    x[0, 0, 1, 1] = math.nan
    x[0, 0, 1, 0] = math.nan
    x[0, 0, 4, 4:6] = 5.0
    x[0, 0, 2:4, 0:2] = -math.inf
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), x)
    check(lambda x: F.max_pool2d(x, 3, 1, 1, return_indices=True), x)
    check(lambda x: F.adaptive_max_pool2d(x, 4, return_indices=True), x)


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
                                dict(kernel_size=(3, 2), stride=2, padding=(1, 0), ceil_mode=True, divisor_override=5)])
def test_avg_pool2d(kw, dtype):
    check(lambda x: F.avg_pool2d(x, **kw), randn(2, 3, 9, 10), grad=True, dtype=dtype)


@pytest.mark.parametrize("divisor_override", [None, 3, -2, -7])
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad", [False, True])
def test_avg_pool_every_divisor_combination(divisor_override, ceil_mode, count_include_pad):
    # Windows that reach into the padding and (ceil_mode) past the input: every combination
    # divides as the CPU does, forward and backward, a negative divisor_override included.
    kw = dict(ceil_mode=ceil_mode, count_include_pad=count_include_pad, divisor_override=divisor_override)
    check(lambda x: F.avg_pool2d(x, 3, 2, 1, **kw), randn(1, 2, 6, 7), grad=True)
    check(lambda x: F.avg_pool3d(x, (2, 3, 2), 2, (1, 1, 0), **kw), randn(1, 1, 5, 6, 5), grad=True)


def test_avg_pool_zero_divisor_raises():
    for x in (randn(1, 1, 4, 4), randn(1, 1, 4, 4).to(TPU)):
        with pytest.raises(RuntimeError, match="divisor must be not zero"):
            F.avg_pool2d(x, 2, divisor_override=0)


def test_avg_pool_1d_3d():
    check(lambda x: F.avg_pool1d(x, 3, 2, 1, count_include_pad=False), randn(2, 3, 11), grad=True)
    check(lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True), randn(2, 2, 5, 6, 7), grad=True)
    check(lambda x: F.avg_pool3d(x, 2, divisor_override=3), randn(1, 2, 4, 4, 4), grad=True, dtype=BF16)


@pytest.mark.parametrize("dtype", BOTH)
def test_adaptive_avg_pool(dtype):
    check(lambda x: F.adaptive_avg_pool1d(x, 4), randn(2, 3, 11), grad=True, dtype=dtype)
    check(lambda x: F.adaptive_avg_pool2d(x, (4, 3)), randn(2, 3, 9, 10), grad=True, dtype=dtype)
    check(lambda x: F.adaptive_avg_pool2d(x, 1), randn(2, 3, 7, 7), grad=True, dtype=dtype)
    check(lambda x: F.adaptive_avg_pool3d(x, (2, 4, 3)), randn(2, 2, 5, 6, 7), grad=True, dtype=dtype)


@pytest.mark.parametrize("dtype", BOTH)
def test_adaptive_max_pool(dtype):
    check(lambda x: F.adaptive_max_pool1d(x, 4, return_indices=True), randn(2, 3, 11), grad=True, dtype=dtype)
    check(lambda x: F.adaptive_max_pool2d(x, (4, 3), return_indices=True), randn(2, 3, 9, 10), grad=True, dtype=dtype)
    check(lambda x: F.adaptive_max_pool3d(x, (2, 4, 3), return_indices=True), randn(2, 2, 5, 6, 7), grad=True,
          dtype=dtype)


# ---------------------------------------------------------------- normalization


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_train_updates_running_stats(affine, dtype):
    torch.manual_seed(0)
    cpu = torch.nn.BatchNorm2d(3, affine=affine, momentum=0.3)
    if affine:
        with torch.no_grad():
            cpu.weight.normal_()
            cpu.bias.normal_()
    dev = torch.nn.BatchNorm2d(3, affine=affine, momentum=0.3).to(TPU)
    dev.load_state_dict(cpu.state_dict())
    dev.to(dtype)
    with torch.no_grad():  # the reference sees the same rounded parameters
        for p in cpu.parameters():
            p.copy_(p.to(dtype).float())
    x = randn(4, 3, 5, 6).to(dtype)
    tol = BF16_TOL if dtype == BF16 else {}
    with native():
        for _ in range(2):
            xc = x.float().clone().requires_grad_()
            xt = x.to(TPU).requires_grad_()
            yc, yt = cpu(xc), dev(xt)
            assert_close(yt.cpu().float(), yc, **tol)
            yc.square().sum().backward()
            yt.float().square().sum().backward()
            gx_tol = dict(atol=0.1, rtol=2e-2) if dtype == BF16 else dict(atol=1e-3, rtol=1e-4)
            assert_close(xt.grad.cpu().float(), xc.grad, **gx_tol)
        assert_close(dev.running_mean.cpu().float(), cpu.running_mean, **tol)
        assert_close(dev.running_var.cpu().float(), cpu.running_var, **tol)
        assert int(dev.num_batches_tracked.cpu()) == 2
        if affine:
            gtol = dict(atol=0.5, rtol=2e-2) if dtype == BF16 else dict(atol=1e-3, rtol=1e-4)
            assert_close(dev.weight.grad.cpu().float(), cpu.weight.grad, **gtol)
            assert_close(dev.bias.grad.cpu().float(), cpu.bias.grad, **gtol)
        cpu.eval()
        dev.eval()
        assert_close(dev(x.to(TPU)).cpu().float(), cpu(x.float()), **tol)


@pytest.mark.parametrize("dtype", BOTH)
def test_batch_norm_functional(dtype):
    rm, rv = randn(3, seed=1), randn(3, seed=2).abs() + 0.5
    w, b = randn(3, seed=3), randn(3, seed=4)
    check(lambda x, w, b: F.batch_norm(x, rm.to(x.device), rv.to(x.device), w, b, training=False), randn(4, 3, 5), w, b,
          grad=True, dtype=dtype)
    check(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), randn(4, 3), w, b, grad=True, dtype=dtype)
    check(lambda x: F.batch_norm(x, None, None, training=True), randn(2, 3, 2, 3, 2), grad=True, dtype=dtype)
    check(lambda x: F.instance_norm(x), randn(2, 3, 6, 5), grad=True, dtype=dtype)


def test_batch_norm_variants():
    x, w, b = randn(4, 3, 5), randn(3, seed=1), randn(3, seed=2)
    rm, rv = randn(3, seed=3), randn(3, seed=4).abs() + 0.5
    check(lambda x, w, b, rm, rv: torch.ops.aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5)[0],
          x, w, b, rm, rv)
    check(lambda x, w, b: torch.ops.aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5), x, w, b)
    for op in (torch.ops.aten._batch_norm_with_update, torch.ops.aten._native_batch_norm_legit):
        extra = () if op is torch.ops.aten._batch_norm_with_update else (True,)
        rmc, rvc, rmt, rvt = rm.clone(), rv.clone(), rm.to(TPU), rv.to(TPU)
        c = op(x, w, b, rmc, rvc, *extra, 0.2, 1e-5)
        with native():
            t = op(x.to(TPU), w.to(TPU), b.to(TPU), rmt, rvt, *extra, 0.2, 1e-5)
            for a, e in zip(t[:3], c[:3]):
                assert_close(a.cpu(), e)
            assert_close(rmt.cpu(), rmc)
            assert_close(rvt.cpu(), rvc)


@pytest.mark.parametrize("dtype", BOTH)
def test_group_norm(dtype):
    check(lambda x, w, b: F.group_norm(x, 3, w, b), randn(2, 6, 4, 5), randn(6, seed=1), randn(6, seed=2), grad=True,
          dtype=dtype)
    check(lambda x: F.group_norm(x, 2), randn(3, 4, 7), grad=True, dtype=dtype)


@pytest.mark.parametrize("dtype", BOTH)
def test_rms_norm(dtype):
    check(lambda x, w: F.rms_norm(x, [10], w), randn(2, 3, 10), randn(10, seed=1), grad=True, dtype=dtype)
    check(lambda x, w: F.rms_norm(x, [3, 10], w, eps=1e-3), randn(2, 3, 10), randn(3, 10, seed=1), grad=True, dtype=dtype)
    check(lambda x: F.rms_norm(x, [10]), randn(4, 10), grad=True, dtype=dtype)


# ---------------------------------------------------------------- interpolation


INTERP = [("nearest", (2, 3, 7)), ("nearest", (2, 3, 5, 6)), ("nearest", (1, 2, 3, 4, 5)),
          ("nearest-exact", (2, 3, 5, 6)), ("nearest-exact", (1, 2, 3, 4, 5)), ("linear", (2, 3, 7)),
          ("bilinear", (2, 3, 5, 6)), ("bicubic", (2, 3, 5, 6)), ("trilinear", (1, 2, 3, 4, 5))]


@pytest.mark.parametrize("mode,shape", INTERP)
def test_interpolate(mode, shape):
    x = randn(*shape)
    n = len(shape) - 2
    corners = [None] if "nearest" in mode else [False, True]
    for ac in corners:
        for kw in (dict(scale_factor=2), dict(scale_factor=1.7), dict(size=(3, 4, 2)[:n]), dict(size=(11, 9, 4)[:n])):
            check(lambda x: F.interpolate(x, mode=mode, align_corners=ac, **kw), x, grad=True)


@pytest.mark.parametrize("mode,shape", INTERP[1::2])
def test_interpolate_bf16(mode, shape):
    ac = None if "nearest" in mode else True
    check(lambda x: F.interpolate(x, mode=mode, align_corners=ac, scale_factor=1.7), randn(*shape), grad=True, dtype=BF16)


def test_interpolate_recompute_scale_and_uint8():
    x = randn(1, 2, 5, 6)
    check(lambda x: F.interpolate(x, scale_factor=1.3, mode="bilinear", recompute_scale_factor=True), x, grad=True)
    img = torch.randint(0, 255, (1, 3, 4, 5), dtype=torch.uint8)
    check(lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), img)


# ---------------------------------------------------------------- grid sampling

GRID_MODES = [(m, p) for m in ("bilinear", "nearest", "bicubic") for p in ("zeros", "border", "reflection")]


def _grid(*shape, seed=2):
    # Points up to 20% beyond [-1, 1] on every side exercise the padding modes.
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) * 2.4 - 1.2


@pytest.mark.parametrize("mode,padding_mode", GRID_MODES)
def test_grid_sample_2d(mode, padding_mode):
    for align in (False, True):
        check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=align),
              randn(2, 3, 5, 7), _grid(2, 4, 6, 2), grad=True, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("mode,padding_mode", [m for m in GRID_MODES if m[0] != "bicubic"])
def test_grid_sample_3d(mode, padding_mode):
    for align in (False, True):
        check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode, align_corners=align),
              randn(2, 3, 4, 5, 6), _grid(2, 3, 2, 4, 3), grad=True, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("dtype", [BF16, torch.float16])
@pytest.mark.parametrize("nd", [2, 3])
def test_grid_sample_half_rounds_like_cpu(nd, dtype):
    # In f16/bf16 PyTorch's CPU kernels round every step of the coordinate arithmetic, which
    # moves points by up to a pixel; the lowering repeats those steps, so the forward matches
    # the CPU exactly. Gradients accumulate in f32, the CPU's in the input type (scaled up by
    # the unnormalize factor for the grid): they agree to a few percent of the largest entry.
    x, g = (randn(2, 3, 5, 20), _grid(2, 13, 10, 2)) if nd == 2 else (randn(2, 3, 5, 7, 6), _grid(2, 4, 5, 3, 3))
    x, g = x.to(dtype), g.to(dtype)
    spread = 0.03 if dtype == BF16 else 0.004
    for mode, padding_mode in GRID_MODES if nd == 2 else GRID_MODES[:6]:
        for align in (False, True):
            kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align)
            cx, cg = x.clone().requires_grad_(), g.clone().requires_grad_()
            expected = F.grid_sample(cx, cg, **kw)
            expected.backward(torch.ones_like(expected))
            with native():
                tx, tg = x.to(TPU).requires_grad_(), g.to(TPU).requires_grad_()
                got = F.grid_sample(tx, tg, **kw)
                got.backward(torch.ones_like(got))
                assert_close(got.cpu(), expected, atol=0, rtol=0)
                for t, c in ((tx, cx), (tg, cg)):
                    assert_close(t.grad.cpu(), c.grad, atol=spread * c.grad.abs().max().item(), rtol=0)


def test_grid_sample_grid_grad_only():
    # grid_sampler_2d_backward with output_mask = [False, True]: no input gradient is made.
    x, g = randn(1, 2, 4, 5), _grid(1, 3, 3, 2)
    expected = g.clone().requires_grad_()
    F.grid_sample(x, expected, align_corners=False).sum().backward()
    with native():
        got = g.to(TPU).requires_grad_()
        F.grid_sample(x.to(TPU), got, align_corners=False).sum().backward()
        assert_close(got.grad.cpu(), expected.grad)


# ---------------------------------------------------------------- attention


def _qkv(b, hq, hk, l, s, e, ev=None, seed=0):
    return randn(b, hq, l, e, seed=seed), randn(b, hk, s, e, seed=seed + 1), randn(b, hk, s, ev or e, seed=seed + 2)


@pytest.mark.parametrize("dtype", BOTH)
def test_sdpa(dtype):
    q, k, v = _qkv(2, 4, 4, 5, 7, 8, ev=6)
    sdpa = F.scaled_dot_product_attention
    check(lambda q, k, v: sdpa(q, k, v), q, k, v, grad=True, dtype=dtype)
    check(lambda q, k, v: sdpa(q, k, v, is_causal=True, scale=0.3), q, k, v, grad=True, dtype=dtype)
    bool_mask = randn(5, 7, seed=9) > 0
    check(lambda q, k, v: sdpa(q, k, v, attn_mask=bool_mask.to(q.device)), q, k, v, grad=True, dtype=dtype)
    check(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m), q, k, v, randn(2, 1, 5, 7, seed=8), grad=True, dtype=dtype)
    check(lambda q, k, v: sdpa(q, k, v), q[0], k[0], v[0], grad=True, dtype=dtype)  # 3-d


def test_sdpa_gqa_and_backend_choice():
    q, k, v = _qkv(2, 6, 2, 5, 7, 8)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=True), q, k, v, grad=True)
    qt, kt, vt = q.to(TPU), k.to(TPU), v.to(TPU)
    assert torch._fused_sdp_choice(qt, kt, vt, enable_gqa=True) == int(torch.nn.attention.SDPBackend.OVERRIDEABLE)
    with pytest.raises(RuntimeError):  # mismatched heads without enable_gqa: the math path's error, as on CPU
        F.scaled_dot_product_attention(qt, kt, vt)


def test_sdpa_fully_masked_rows():
    q, k, v = _qkv(1, 2, 2, 4, 5, 8)
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[1] = False
    additive = torch.zeros(4, 5).masked_fill(~mask, -math.inf)
    for m in (mask, additive):
        check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=m.to(q.device)), q, k, v, grad=True)


def test_sdpa_dropout():
    q, k, v = (t.double() for t in _qkv(2, 2, 2, 5, 6, 4))
    qt, kt, vt = q.to(TPU).requires_grad_(), k.to(TPU).requires_grad_(), v.to(TPU)

    def f(q):
        torch.tpu.manual_seed(5)
        return F.scaled_dot_product_attention(q, kt, vt, dropout_p=0.4)

    with native():
        out = f(qt)
        assert_close(f(qt), out)  # a seed reproduces the mask
        torch.tpu.manual_seed(6)
        assert not torch.allclose(F.scaled_dot_product_attention(qt, kt, vt, dropout_p=0.4), out)
        w = torch.randn(out.shape, dtype=torch.float64).to(TPU)
        (out * w).sum().backward()
        # The backward redraws the forward's mask: a directional derivative agrees with it.
        d = torch.randn(q.shape, dtype=torch.float64).to(TPU)
        eps = 1e-6
        with torch.no_grad():
            numeric = ((f(qt + eps * d) - f(qt - eps * d)) * w).sum() / (2 * eps)
        assert_close((qt.grad * d).sum().cpu(), numeric.cpu(), rtol=1e-5, atol=1e-6)
        # Uniform attention over ones: each output averages the kept 1 / (1 - p) factors.
        ones = torch.ones(64, 1, 32, 1, dtype=torch.float64, device=TPU)
        mean = F.scaled_dot_product_attention(torch.zeros_like(ones), torch.zeros_like(ones), ones, dropout_p=0.4).mean()
        assert abs(float(mean) - 1) < 0.05


# ---------------------------------------------------------------- dropout


def test_native_dropout():
    x = randn(64, 64).to(TPU).requires_grad_()
    with native():
        torch.tpu.manual_seed(3)
        y = F.dropout(x, 0.25)
        torch.tpu.manual_seed(3)
        assert_close(F.dropout(x, 0.25), y)
        kept = y != 0
        assert abs(kept.float().mean().item() - 0.75) < 0.03
        assert_close(y[kept], (x / 0.75)[kept])
        y.sum().backward()
        assert_close(x.grad, kept.to(x.dtype) / 0.75)
        assert_close(F.dropout(x, 0.25, training=False), x)
        out, mask = torch.native_dropout(x.detach().bfloat16(), 0.5, True)
        assert mask.dtype == torch.bool and out.dtype == BF16
        assert_close(out.float(), (x.detach().bfloat16() * mask * 2).float())


# ---------------------------------------------------------------- activations


ACTIVATIONS = [
    ("elu", lambda x: F.elu(x, alpha=0.7)), ("celu", lambda x: F.celu(x, alpha=1.3)), ("selu", F.selu),
    ("hardswish", F.hardswish), ("hardsigmoid", F.hardsigmoid), ("mish", F.mish),
    ("softplus", lambda x: F.softplus(x, beta=2, threshold=3)), ("logsigmoid", F.logsigmoid),
    ("glu", lambda x: F.glu(x, 1)), ("hardshrink", lambda x: F.hardshrink(x, 0.6)),
    ("softshrink", lambda x: F.softshrink(x, 0.4)),
    ("prelu", lambda x: F.prelu(x, torch.tensor([0.1, -0.3, 0.5, 0.2], device=x.device, dtype=x.dtype))),
    ("prelu1", lambda x: F.prelu(x, torch.tensor([0.25], device=x.device, dtype=x.dtype))),
]


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("name,fn", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation(name, fn, dtype):
    x = randn(3, 4, 5) * 3
    x[0, 0, :3] = torch.tensor([3.0, -3.0, 0.0])  # the kinks of hardswish / hardsigmoid
    check(fn, x, grad=True, dtype=dtype)
    if name not in ("glu", "prelu"):
        check(fn, torch.tensor([math.inf, -math.inf, math.nan, 30.0, -30.0]))


def test_prelu_weight_grad():
    check(lambda x, w: F.prelu(x, w), randn(3, 4, 5), torch.tensor([0.1, -0.3, 0.5, 0.2]), grad=True)
    check(lambda x, w: F.prelu(x, w), randn(3, 4, 5), torch.tensor([0.25]), grad=True)


# ---------------------------------------------------------------- losses


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_losses(reduction):
    x, t = randn(4, 5), randn(4, 5, seed=1)
    p, tp = torch.sigmoid(x), torch.sigmoid(t)
    w = randn(5, seed=2).abs()
    check(lambda p, t: F.binary_cross_entropy(p, t, reduction=reduction), p, tp, grad=True)
    check(lambda p, t: F.binary_cross_entropy(p, t, w.to(p.device), reduction=reduction), p, tp, grad=True)
    check(lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction=reduction), x, tp, grad=True)
    pw = randn(5, seed=3).abs()
    check(lambda x, t: F.binary_cross_entropy_with_logits(x, t, w.to(x.device), pos_weight=pw.to(x.device),
                                                          reduction=reduction), x, tp, grad=True)
    check(lambda x, t: F.binary_cross_entropy_with_logits(x, t, w.to(x.device), reduction=reduction), x, tp, grad=True)
    for beta in (1.0, 0.5, 0.0):
        check(lambda x, t: F.smooth_l1_loss(x, t, reduction=reduction, beta=beta), x, t, grad=True)
    for delta in (1.0, 0.3):
        check(lambda x, t: F.huber_loss(x, t, reduction=reduction, delta=delta), x, t, grad=True)
    lx = F.log_softmax(x, -1)
    for log_target in (False, True):
        tgt = F.log_softmax(t, -1) if log_target else F.softmax(t, -1)
        check(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=log_target), lx, tgt, grad=True)


def test_loss_edges():
    p = torch.tensor([0.0, 1.0, 0.5, 1e-30])
    t = torch.tensor([1.0, 0.0, 0.5, 1.0])
    check(lambda p, t: F.binary_cross_entropy(p, t, reduction="none"), p, t)
    check(lambda x, t: F.huber_loss(x, t), randn(3, 4).bfloat16(), randn(3, 4, seed=1).bfloat16(), grad=True, dtype=BF16)


# ---------------------------------------------------------------- embedding, padding


@pytest.mark.parametrize("kw", [{}, dict(padding_idx=1), dict(scale_grad_by_freq=True),
                                dict(padding_idx=0, scale_grad_by_freq=True)])
def test_embedding_backward(kw):
    idx = torch.tensor([[0, 1, 3, 1], [3, 3, 2, 0]])
    check(lambda w: F.embedding(idx.to(w.device), w, **kw), randn(5, 3), grad=True)
    check(lambda w: F.embedding(idx.to(w.device), w, **kw), randn(5, 3), grad=True, dtype=BF16)


# indices, offsets, options: an empty bag, include_last_offset, padding (one bag of padding
# only), 2-D input (offsets implied), int32 indices.
EMBEDDING_BAGS = {
    "offsets": ([5, 1, 6, 5, 6, 2, 2, 9], [0, 3, 3, 5], {}),
    "last_offset": ([5, 1, 6, 5, 6, 2, 2, 9], [0, 3, 3, 8], dict(include_last_offset=True)),
    "padding": ([5, 1, 6, 6, 6, 2, 2, 9], [0, 2, 5, 5], dict(padding_idx=6)),
    "2d": ([[5, 1, 6, 5], [6, 2, 2, 9]], None, dict(padding_idx=-1)),
    "int32": (torch.tensor([3, 3, 1, 0], dtype=torch.int32), torch.tensor([0, 1], dtype=torch.int32), {}),
}


@pytest.mark.parametrize("dtype", BOTH)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("case", sorted(EMBEDDING_BAGS))
def test_embedding_bag(case, mode, dtype):
    idx, offsets, kw = (torch.as_tensor(v) if v is not None and not isinstance(v, dict) else v
                        for v in EMBEDDING_BAGS[case])
    if offsets is None:
        fn = lambda w, i: F.embedding_bag(i, w, mode=mode, **kw)  # noqa: E731
        args = (randn(10, 6), idx)
    else:
        fn = lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, **kw)  # noqa: E731
        args = (randn(10, 6), idx, offsets)
    check(fn, *args, grad=True, dtype=dtype)  # _embedding_bag and its backward
    check(fn, *args, dtype=dtype)  # _embedding_bag_forward_only


@pytest.mark.parametrize("dtype", BOTH)
def test_embedding_bag_per_sample_weights(dtype):
    idx, offsets = torch.tensor([5, 1, 6, 5, 6, 2, 2, 9]), torch.tensor([0, 3, 3, 5])
    check(lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p), randn(10, 6), idx, offsets,
          randn(8, seed=1), grad=True, dtype=dtype)
    check(lambda w, i, p: F.embedding_bag(i, w, mode="sum", per_sample_weights=p, padding_idx=2), randn(10, 6), idx.view(2, 4),
          randn(2, 4, seed=1), grad=True, dtype=dtype)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_scale_grad_by_freq(mode):
    # Each row's gradient is divided by how often its index occurs. (PyTorch's CPU kernel
    # divides by the count of another index, so the reference is the unscaled gradient.)
    idx, offsets = torch.tensor([5, 1, 6, 5, 6, 2, 2, 9, 5]), torch.tensor([0, 2, 6])
    w, g = randn(10, 6), randn(3, 6, seed=1)
    ref = w.clone().requires_grad_()
    F.embedding_bag(idx, ref, offsets, mode=mode).backward(g)
    expected = ref.grad / torch.bincount(idx, minlength=10).clamp(min=1).unsqueeze(1)
    with native():
        got = w.to(TPU).requires_grad_()
        F.embedding_bag(idx.to(TPU), got, offsets.to(TPU), mode=mode, scale_grad_by_freq=True).backward(g.to(TPU))
        assert_close(got.grad.cpu(), expected)


@pytest.mark.parametrize("dtype", BOTH)
def test_embedding_max_norm(dtype):
    # embedding_renorm_ rescales, in place, the rows that indices name whose norm exceeds max_norm.
    idx, offsets = torch.tensor([5, 1, 6, 5, 6, 2, 9]), torch.tensor([0, 3])
    check(lambda w, i, o: F.embedding_bag(i, w, o, max_norm=1.5, mode="mean"), randn(10, 6) * 2, idx, offsets,
          dtype=dtype)
    for p in (2.0, 1.0, 3.0, math.inf):
        w = (randn(10, 6) * 2).to(dtype)
        expected, got = w.clone(), w.to(TPU)
        torch.embedding_renorm_(expected, idx, 1.5, p)
        with native():
            torch.embedding_renorm_(got, idx.to(TPU), 1.5, p)
        assert_close(got.cpu(), expected, **({} if dtype == F32 else BF16_TOL))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 6), (2, 3)), ((2, 3, 5, 6), (1, 2, 3, 1)),
                                       ((1, 2, 4, 5, 6), (1, 1, 2, 0, 1, 3)), ((3, 5, 6), (2, 2, 1, 1))])
def test_pad_modes(mode, shape, pad):
    check(lambda x: F.pad(x, pad, mode=mode), randn(*shape), grad=True)


def test_pad_bf16():
    check(lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"), randn(2, 3, 5, 6), grad=True, dtype=BF16)


# ---------------------------------------------------------------- autocast and GradScaler


def test_autocast_policies():
    a, b = randn(4, 4).to(TPU), randn(4, 4, seed=1).to(TPU)
    with native(), torch.autocast(TPU, dtype=torch.bfloat16):
        assert (a @ b).dtype == BF16
        assert F.linear(a, b).dtype == BF16
        assert torch.softmax(a, 0).dtype == F32  # an f32 op
        assert F.layer_norm(a.bfloat16(), [4]).dtype == F32
        assert (a.bfloat16() + b).dtype == F32  # promote
        assert F.scaled_dot_product_attention(a[None, None], a[None, None], b[None, None]).dtype == BF16
        with pytest.raises(RuntimeError, match="unsafe to autocast"):  # as on CUDA
            F.binary_cross_entropy(torch.sigmoid(a), torch.sigmoid(b))
    assert torch.tpu.get_amp_supported_dtype() and BF16 in torch.tpu.get_amp_supported_dtype()


def test_amp_ops_match_cpu():
    grads = [torch.tensor([1.0, 2.0]), torch.tensor([[3.0, math.inf]]), randn(3).bfloat16()]
    for with_inf in (False, True):
        cpu = [g.clone() for g in (grads if with_inf else [grads[0], grads[2]])]
        dev = [g.to(TPU) for g in cpu]
        found_c, found_t = torch.zeros(1), torch.zeros(1, device=TPU)
        inv_c = torch.full((1,), 0.25)
        torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_c, inv_c)
        with native():
            torch._amp_foreach_non_finite_check_and_unscale_(dev, found_t, inv_c.to(TPU))
        for a, e in zip(dev, cpu):
            assert_close(a.cpu(), e)
        assert_close(found_t.cpu(), found_c)
    for found, tracker, interval in ((0.0, 1, 2), (0.0, 0, 3), (1.0, 1, 2)):
        sc, tc = torch.full((1,), 1024.0), torch.full((1,), tracker, dtype=torch.int32)
        st, tt = sc.to(TPU), tc.to(TPU)
        torch._amp_update_scale_(sc, tc, torch.full((1,), found), 2.0, 0.5, interval)
        with native():
            torch._amp_update_scale_(st, tt, torch.full((1,), found, device=TPU), 2.0, 0.5, interval)
        assert_close(st.cpu(), sc)
        assert_close(tt.cpu(), tc)


def test_grad_scaler_training():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(TPU)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler(TPU, init_scale=2.0**8, growth_interval=2)
    x, y = torch.randn(16, 8).to(TPU), torch.randn(16, 1).to(TPU)
    scales = []
    with native():
        for step in range(5):
            opt.zero_grad()
            with torch.autocast(TPU, dtype=torch.bfloat16):
                loss = F.mse_loss(model(x).float(), y)
            if step == 2:
                loss = loss * math.inf  # an overflow: the step is skipped, the scale backs off
            before = [p.detach().clone() for p in model.parameters()]
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
            unchanged = all(torch.equal(p.detach().cpu(), b.cpu()) for p, b in zip(model.parameters(), before))
            assert unchanged == (step == 2)
    assert scales == [256.0, 512.0, 256.0, 256.0, 512.0]


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_fold_and_unfold(dtype):
    # col2im (nn.Fold) sums overlapping patches; im2col (nn.Unfold) extracts them. Kernel,
    # dilation, padding and stride differ per dim; windows cropped by padding must vanish.
    kw = dict(kernel_size=(2, 3), dilation=(1, 2), padding=(1, 0), stride=(2, 1))
    x = torch.randn(2, 3, 5, 7)
    blocks = F.unfold(x, **kw).shape[-1]
    cols = torch.randn(2, 3 * 6, blocks)
    check(lambda c: F.fold(c, output_size=(5, 7), **kw), cols, dtype=dtype, grad=True)
    check(lambda c: F.fold(c, output_size=(5, 7), **kw), cols[0], dtype=dtype, grad=True)  # unbatched
    check(lambda t: F.unfold(t, **kw), x, dtype=dtype, grad=True)
    check(lambda c: F.fold(c, output_size=(4, 4), kernel_size=2, stride=2), torch.randn(1, 8, 4), dtype=dtype)
