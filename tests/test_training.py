"""A few training steps on tpu and on CPU from the same initial weights: the losses of every
step and the final parameters agree to float32 tolerance, and no op falls back to the CPU.
AdamW and SGD run their default multi-tensor (foreach) path on tpu and their single-tensor
path on CPU, so the two sides also cross-check those implementations."""
import copy

import pytest
import torch
import torch.nn.functional as F
import torch_tpu
from torch import nn
from torch.optim.optimizer import _default_to_fused_or_foreach
from torch.testing import assert_close

STEPS = 10


def mlp():
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 4))


def mlp_layernorm():
    return nn.Sequential(nn.Linear(8, 32), nn.LayerNorm(32), nn.GELU(approximate="tanh"), nn.Linear(32, 4))


MODELS = {"mlp": (mlp, "mse"), "mlp_layernorm": (mlp_layernorm, "cross_entropy")}
OPTIMIZERS = {
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1),
    "sgd_momentum": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3),
}


def train(model, optimizer, x, y, loss_name):
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        out = model(x)
        loss = F.mse_loss(out, y) if loss_name == "mse" else F.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)


@pytest.mark.parametrize("opt_name", OPTIMIZERS)
@pytest.mark.parametrize("model_name", MODELS)
def test_training_matches_cpu(model_name, opt_name):
    torch.manual_seed(0)
    make, loss_name = MODELS[model_name]
    cpu_model = make()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    x = torch.randn(16, 8)
    y = torch.randn(16, 4) if loss_name == "mse" else torch.randint(0, 4, (16,))
    cpu_opt = OPTIMIZERS[opt_name](cpu_model.parameters())
    tpu_opt = OPTIMIZERS[opt_name](tpu_model.parameters())
    # The tpu runs the optimizers' foreach path (as CUDA does).
    assert _default_to_fused_or_foreach(list(tpu_model.parameters()), False, False) == (False, True)

    cpu_losses = train(cpu_model, cpu_opt, x, y, loss_name)
    torch_tpu.metrics.reset()
    tpu_losses = train(tpu_model, tpu_opt, x.to("tpu"), y.to("tpu"), loss_name)
    torch.tpu.synchronize()
    assert torch_tpu.metrics()["cpu_fallbacks_by_op"] == {}

    assert cpu_losses[-1] < cpu_losses[0]  # it learns
    assert_close(tpu_losses.cpu(), cpu_losses)
    for (name, p_tpu), p_cpu in zip(tpu_model.named_parameters(), cpu_model.parameters()):
        assert p_tpu.device.type == "tpu"
        assert_close(p_tpu.detach().cpu(), p_cpu.detach(), msg=lambda m: f"{name}: {m}")
    # The optimizer state lives on the device too.
    for state in tpu_opt.state.values():
        for key, value in state.items():
            if key != "step" and isinstance(value, torch.Tensor):
                assert value.device.type == "tpu", key
