"""Signed zeros and float32 subnormals against the CPU (issue #35).

The sign-sensitive ops give the CPU's sign of every zero (compared with signbit, which
assert_close does not look at). Subnormals are a property of the platform: the XLA CPU plugin
runs every program with flush-to-zero and denormals-are-zero set on its threads (XLA's CPU
client does so unconditionally), TPUs have no float32 subnormals, GPUs keep them. What each
platform does is pinned here and listed in README ("Where tpu differs from the CPU")."""
import pytest
import torch

from conftest import platform_under_test

INF, NAN = float("inf"), float("nan")
SPECIAL = torch.tensor([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, INF, -INF, NAN])


def assert_same_bits_as_cpu(cpu, tpu):
    tpu = tpu.cpu()
    torch.testing.assert_close(tpu, cpu, equal_nan=True, atol=0, rtol=2e-7)
    parts = (lambda t: (t.real, t.imag)) if cpu.is_complex() else (lambda t: (t,))
    for c, t in zip(parts(cpu), parts(tpu)):
        zero = (c == 0) & (t == 0)  # the sign of each zero, which assert_close ignores
        assert torch.equal(c.signbit()[zero], t.signbit()[zero]), (cpu, tpu)


@pytest.mark.parametrize("op", [torch.sign, torch.sgn, torch.abs, torch.neg, torch.trunc, torch.round,
                                torch.floor, torch.ceil, torch.relu, torch.sqrt, torch.reciprocal,
                                torch.tanh, torch.sin, torch.expm1, torch.log1p, torch.frac, torch.nan_to_num],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_unary_signed_zeros(op, dtype):
    x = SPECIAL.to(dtype)
    assert_same_bits_as_cpu(op(x), op(x.to("tpu")))


def test_sign_of_negative_zero_is_positive_zero():
    out = torch.sign(torch.tensor([-0.0, 0.0]).to("tpu")).cpu()
    assert out.tolist() == [0.0, 0.0] and not out.signbit().any()  # -0.0 on tpu before


@pytest.mark.parametrize("op", [torch.copysign, torch.div, torch.atan2, torch.mul, torch.sub, torch.fmod,
                                torch.remainder, torch.hypot, torch.fmax, torch.fmin,
                                lambda a, b: torch.div(a, b, rounding_mode="floor"),
                                lambda a, b: torch.div(a, b, rounding_mode="trunc")],
                         ids=["copysign", "div", "atan2", "mul", "sub", "fmod", "remainder", "hypot", "fmax", "fmin",
                              "floor_divide", "trunc_divide"])
def test_binary_signed_zeros(op):
    a, b = SPECIAL.repeat_interleave(len(SPECIAL)), SPECIAL.repeat(len(SPECIAL))  # every pair, ±0 both sides
    cpu = op(a, b)
    tpu = op(a.to("tpu"), b.to("tpu")).cpu()
    # atan2 rounds differently by an ulp at a few points (both are within float32's accuracy).
    torch.testing.assert_close(tpu, cpu, equal_nan=True, atol=0, rtol=3e-7)
    zero = (cpu == 0) & (tpu == 0)
    assert torch.equal(cpu.signbit()[zero], tpu.signbit()[zero])


def test_complex_sgn():
    re = SPECIAL.repeat_interleave(len(SPECIAL))
    z = torch.complex(re, SPECIAL.repeat(len(SPECIAL)))
    assert_same_bits_as_cpu(torch.sgn(z), torch.sgn(z.to("tpu")))


def test_deliberate_difference_max_min_of_signed_zeros():
    # The CPU's own answer for maximum(+0, -0) depends on where the element sits: its vector body
    # returns the second operand, its scalar tail the first (torch.maximum(zeros(17), -zeros(17))
    # is -0 at 0..15 and +0 at 16). tpu always returns the first, as the CPU's scalar path does.
    pos, neg = torch.zeros(17), -torch.zeros(17)
    cpu = torch.maximum(pos, neg).signbit()
    assert cpu[:16].all() and not cpu[16]
    for op in (torch.maximum, torch.minimum):
        assert not op(pos.to("tpu"), neg.to("tpu")).cpu().signbit().any()
        assert op(neg.to("tpu"), pos.to("tpu")).cpu().signbit().all()


SUBNORMALS = torch.tensor([1e-45, -1e-45, 1e-40, -3e-39, 1.0])


def test_deliberate_difference_subnormals_per_platform():
    x = SUBNORMALS.to("tpu")
    # Moving and copying never computes: the bits come back as they went.
    assert torch.equal(x.cpu(), SUBNORMALS) and torch.equal(x.clone().cpu(), SUBNORMALS)
    assert torch.equal(x[1:].contiguous().cpu(), SUBNORMALS[1:])
    platform = platform_under_test()
    arithmetic = [(x * 1).cpu(), (x + 0.0).cpu(), x.double().cpu().float()]
    if platform == "cuda":  # XLA's GPU backend keeps float32 subnormals (no flush-to-zero)
        for out in arithmetic:
            torch.testing.assert_close(out, SUBNORMALS, atol=0, rtol=0)
    else:  # the XLA CPU plugin (flush-to-zero, denormals-are-zero) and TPUs flush them to zero
        expected = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0])
        for out in arithmetic:
            assert torch.equal(out, expected), out
        # ... keeping the sign of the zero they flush to where the CPU's result would be that sign.
        assert (x * 1).cpu().signbit().tolist() == [False, True, False, True, False]
    # The CPU keeps them: the difference this test pins.
    assert (SUBNORMALS * 1)[0].item() == pytest.approx(1.4e-45, rel=0.01)
