"""nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell (and nn.RNN) on tpu against PyTorch CPU.

PyTorch runs recurrent layers on every non-CPU device through the fused cell ops
aten::_thnn_fused_lstm_cell / _thnn_fused_gru_cell and their backward ops (which have no CPU
kernel): each case checks outputs, final states and every gradient against the CPU with the
same weights, and that nothing ran on the CPU.
"""
import copy

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torch_tpu
from conftest import native

TPU = "tpu"




def _flat(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _flat(v)]
    if hasattr(x, "data") and hasattr(x, "batch_sizes"):  # PackedSequence
        return [x.data]
    return []


def _run(module, inputs, device, dtype):
    module = copy.deepcopy(module).to(device=device, dtype=dtype)
    leaves = []

    def leaf(t):
        t = t.detach().to(device=device, dtype=dtype).requires_grad_()
        leaves.append(t)
        return t

    args = [leaf(x) if isinstance(x, torch.Tensor) else tuple(leaf(t) for t in x) for x in inputs]
    outs = _flat(module(*args))
    loss = sum((o.float() * (i + 1)).sin().sum() for i, o in enumerate(outs))
    loss.backward()
    grads = [p.grad for p in module.parameters()] + [x.grad for x in leaves]
    return outs, grads


def check(module, *inputs, dtype=torch.float32, atol=None, rtol=None):
    """Runs module(*inputs) and a backward pass on CPU and tpu; compares outputs and gradients."""
    torch.manual_seed(0)
    if dtype == torch.bfloat16:
        atol, rtol = atol or 3e-2, rtol or 3e-2
        ref_dtype = torch.float32
        module = copy.deepcopy(module).to(torch.bfloat16).float()  # weights rounded to bf16
        inputs = [x.to(torch.bfloat16).float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                  for x in inputs]
    else:
        ref_dtype = dtype
    expected, expected_grads = _run(module, inputs, "cpu", ref_dtype)
    with native():
        got, got_grads = _run(module, inputs, TPU, dtype)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.device.type == "tpu"
        torch.testing.assert_close(g.cpu().to(e.dtype), e, atol=atol, rtol=rtol)
    for g, e in zip(got_grads, expected_grads):
        assert (g is None) == (e is None)
        if e is not None:
            torch.testing.assert_close(g.cpu().to(e.dtype), e, atol=atol, rtol=rtol)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN])
@pytest.mark.parametrize(
    "config",
    [
        dict(),
        dict(num_layers=2),
        dict(bidirectional=True),
        dict(num_layers=2, bidirectional=True, batch_first=True),
        dict(bias=False),
    ],
    ids=["plain", "two_layers", "bidirectional", "deep_bidir_batch_first", "no_bias"],
)
def test_recurrent_layer_matches_cpu(kind, config):
    torch.manual_seed(0)
    module = kind(4, 5, **config)
    x = torch.randn(2, 3, 4) if config.get("batch_first") else torch.randn(3, 2, 4)
    check(module, x)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_initial_state_and_bfloat16(kind):
    torch.manual_seed(1)
    module = kind(3, 4, num_layers=2)
    x = torch.randn(5, 2, 3)
    h0 = torch.randn(2, 2, 4)
    state = (h0, torch.randn(2, 2, 4)) if kind is nn.LSTM else h0
    check(module, x, state)
    check(module, x, state, dtype=torch.bfloat16)


def test_lstm_projections():
    torch.manual_seed(2)
    check(nn.LSTM(4, 6, num_layers=2, proj_size=3, bidirectional=True), torch.randn(4, 2, 4))


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_unbatched_input(kind):
    torch.manual_seed(3)
    check(kind(4, 5), torch.randn(3, 4))


@pytest.mark.parametrize("kind", [nn.LSTMCell, nn.GRUCell])
@pytest.mark.parametrize("bias", [True, False])
def test_cells_match_cpu(kind, bias):
    torch.manual_seed(4)
    cell = kind(4, 5, bias=bias)
    x = torch.randn(3, 4)
    h = torch.randn(3, 5)
    state = (h, torch.randn(3, 5)) if kind is nn.LSTMCell else h
    check(cell, x, state)
    check(cell, x)  # zero initial state
    check(cell, x, state, dtype=torch.bfloat16)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_packed_sequences(kind):
    torch.manual_seed(5)
    module = kind(3, 4, num_layers=2, bidirectional=True)
    x = torch.randn(5, 3, 3)
    lengths = torch.tensor([5, 3, 2])

    def run(device):
        m = copy.deepcopy(module).to(device)
        xs = x.detach().to(device).requires_grad_()
        packed = pack_padded_sequence(xs, lengths, enforce_sorted=True)
        out, state = m(packed)
        padded, out_lengths = pad_packed_sequence(out)
        loss = padded.sin().sum() + sum(s.cos().sum() for s in (state if isinstance(state, tuple) else (state,)))
        loss.backward()
        return [padded, *(state if isinstance(state, tuple) else (state,)), xs.grad] + [p.grad for p in m.parameters()]

    expected = run("cpu")
    with native():
        got = run(TPU)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.cpu(), e)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_dropout_between_layers(kind):
    torch.manual_seed(6)
    x = torch.randn(4, 2, 3)
    # p=0 in train mode and any p in eval mode are deterministic: they match the CPU.
    check(kind(3, 4, num_layers=3, dropout=0.0), x)
    module = kind(3, 4, num_layers=3, dropout=0.7).eval()
    with torch.no_grad():
        expected = module(x)[0]
        with native():
            got = copy.deepcopy(module).to(TPU)(x.to(TPU))[0]
    torch.testing.assert_close(got.cpu(), expected)
    # Train mode with p > 0: the device generator draws the mask, the same seed draws it again,
    # and outputs differ from the eval ones (dropout applied).
    m = copy.deepcopy(module).train().to(TPU)
    xt = x.to(TPU)
    with native():
        torch.manual_seed(7)
        a = m(xt)[0].cpu()
        torch.manual_seed(7)
        b = m(xt)[0].cpu()
        c = m(xt)[0].cpu()
    torch.testing.assert_close(a, b)
    assert not torch.equal(a, c)
    assert not torch.allclose(a, expected)


def test_lstm_model_training_step_matches_cpu():
    torch.manual_seed(8)

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(20, 8)
            self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True, bidirectional=True)
            self.gru = nn.GRU(32, 8, batch_first=True)
            self.head = nn.Linear(8, 5)

        def forward(self, tokens):
            h, _ = self.lstm(self.embed(tokens))
            h, _ = self.gru(h)
            return self.head(h)

    model = Tagger()
    tokens = torch.randint(0, 20, (3, 7))
    labels = torch.randint(0, 5, (3, 7))

    def step(device):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            logits = m(tokens.to(device))
            loss = nn.functional.cross_entropy(logits.reshape(-1, 5), labels.to(device).reshape(-1))
            loss.backward()
            opt.step()
        return [loss.detach()] + [p.grad for p in m.parameters()] + [p.detach() for p in m.parameters()]

    expected = step("cpu")
    with native():
        got = step(TPU)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.cpu(), e, atol=1e-5, rtol=1e-4)
