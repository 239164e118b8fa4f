"""Optimizers on tpu give the same parameters as on the CPU after 20 training steps.

A small MLP is trained on fixed data with the same initial weights on both devices; the
optimizers run their multi-tensor (foreach) path on tpu, and everything must run natively."""
import copy

import pytest
import torch
import torch.nn.functional as F
import torch_tpu

TPU = "tpu"
STEPS = 20


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def train(model, make_opt, device, steps=STEPS):
    model = copy.deepcopy(model).to(device)
    opt = make_opt(model.parameters())
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(32, 8, generator=g), torch.randn(32, 4, generator=g)) for _ in range(4)]
    for step in range(steps):
        x, y = data[step % len(data)]
        opt.zero_grad()
        loss = F.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
    return model, opt


OPTIMIZERS = {
    "sgd": lambda p, **kw: torch.optim.SGD(p, lr=0.05, **kw),
    "sgd_momentum": lambda p, **kw: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3, **kw),
    "sgd_nesterov": lambda p, **kw: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, **kw),
    "adam": lambda p, **kw: torch.optim.Adam(p, lr=1e-2, **kw),
    "adam_amsgrad": lambda p, **kw: torch.optim.Adam(p, lr=1e-2, amsgrad=True, weight_decay=1e-2, **kw),
    "adamw": lambda p, **kw: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, **kw),
}


@pytest.mark.parametrize("foreach", [True, None], ids=["foreach", "default"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_cpu(name, foreach):
    make = OPTIMIZERS[name]
    model = make_model()
    cpu_model, _ = train(model, lambda p: make(p, foreach=False), "cpu")
    torch_tpu.metrics.reset()
    tpu_model, opt = train(model, lambda p: make(p, foreach=foreach), TPU)
    fallbacks = torch_tpu.metrics(wait=True)["cpu_fallbacks_by_op"]
    assert not fallbacks, f"ran on the CPU: {fallbacks}"
    for (n, a), (_, b) in zip(tpu_model.named_parameters(), cpu_model.named_parameters()):
        assert a.device.type == TPU
        torch.testing.assert_close(a.detach().cpu(), b.detach(), atol=2e-5, rtol=1e-4, msg=lambda m: f"{n}: {m}")
    for state in opt.state.values():  # optimizer state lives on the device too
        for v in state.values():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                assert v.device.type == TPU


def _ops_per_step(foreach):
    """Ops one Adam step dispatches (the step alone: forward and backward not counted)."""
    model = make_model().to(TPU)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach)
    for _ in range(2):  # the first step creates the state
        model(torch.randn(2, 8, device=TPU)).sum().backward()
        if _:
            torch_tpu.metrics.reset()
        opt.step()
    return torch_tpu.metrics(wait=True)["ops_dispatched"], len(list(model.parameters()))


def test_foreach_path_is_taken():
    """Adam with foreach=True calls the _foreach_* ops, each once per step for all params:
    the step dispatches as many ops as the per-parameter loop does for one parameter. The
    default (foreach=None) takes that path on tpu."""
    foreach, params = _ops_per_step(True)
    loop, _ = _ops_per_step(False)
    assert params == 4 and loop > 0
    assert foreach * params <= loop, (foreach, loop)
    assert _ops_per_step(None)[0] == foreach


def test_lr_change_does_not_recompile():
    # Per-op programs (strict mode): lr is a run-time scalar. Fused graphs with changing
    # scalars are covered in test_modes.py.
    with torch_tpu.eager_mode("strict"):
        _lr_change_does_not_recompile()


def _lr_change_does_not_recompile():
    model = make_model().to(TPU)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    for lr in (0.1, 0.05):
        for group in opt.param_groups:
            group["lr"] = lr
        model(torch.randn(2, 8, device=TPU)).sum().backward()
        opt.step()
        if lr == 0.1:
            torch_tpu.metrics.reset()
    assert torch_tpu.metrics(wait=True)["programs_compiled"] == 0
