"""A check only the device can make (an index in range) belongs to the outputs it guards and to
everything computed from them (csrc/runtime/device_checks.h): reading any of them raises,
every time, naming the op and its argument shapes; other tensors and other threads are
unaffected; debug mode raises at the op. The same in strict, fused and compiled execution."""
import threading

import pytest
import torch

import torch_tpu

TPU = "tpu"


@pytest.fixture(params=["strict", "fused"])
def mode(request):
    with torch_tpu.eager_mode(request.param):
        yield request.param


def bad_index():
    return torch.tensor([10]).to(TPU)


def test_every_read_raises(mode):
    x = torch.arange(10.0).to(TPU)
    b = x[bad_index()]
    for _ in range(3):
        with pytest.raises(IndexError, match="index"):
            b.cpu()
    with pytest.raises(IndexError):
        b.item()
    with pytest.raises(IndexError):
        repr(b)
    if torch.tpu.device_count() > 1:
        with pytest.raises(IndexError):
            b.to("tpu:1")
    with pytest.raises(IndexError):
        b.tolist()


def test_message_names_the_op_and_its_shapes(mode):
    x = torch.arange(12.0).reshape(4, 3).to(TPU)
    g = x.gather(0, torch.tensor([[0, 7, 1]]).to(TPU))
    with pytest.raises(RuntimeError, match=r"gather.*\[4, 3\].*\[1, 3\]"):
        g.cpu()


def test_unrelated_reads_do_not_raise_and_do_not_use_it_up(mode):
    x = torch.arange(10.0).to(TPU)
    b = x[bad_index()]
    torch.testing.assert_close((x + 1).cpu(), torch.arange(10.0) + 1)  # no error here
    torch.tpu.synchronize()
    with pytest.raises(IndexError):
        b.cpu()  # still raises after the unrelated sync


def test_everything_computed_from_a_failed_output_raises(mode):
    x = torch.arange(12.0).reshape(4, 3).to(TPU)
    g = x.gather(0, torch.tensor([[0, 7, 1]]).to(TPU))
    h = (g * 2).sum()
    k = torch.cat([h.reshape(1), torch.ones(1, device=TPU)])
    for t in (g, h, k):
        with pytest.raises(RuntimeError, match="gather"):
            t.cpu()
    torch.testing.assert_close(x.cpu(), torch.arange(12.0).reshape(4, 3))  # its input is fine


def test_in_place_write_into_a_parameter_is_not_left_looking_valid(mode):
    w = torch.ones(4, 3).to(TPU)
    w.index_add_(0, torch.tensor([9]).to(TPU), torch.ones(1, 3).to(TPU))
    with pytest.raises(RuntimeError, match="index_add"):
        w.cpu()
    w.mul_(2)  # a later update keeps it guarded
    with pytest.raises(RuntimeError, match="index_add"):
        w[0].cpu()
    w.copy_(torch.zeros(4, 3))  # overwritten whole: a new, valid value
    assert torch.equal(w.cpu(), torch.zeros(4, 3))


def test_training_step_with_a_bad_index_poisons_what_it_updates(mode):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(5, 3).to(TPU)
    other = torch.nn.Linear(3, 3).to(TPU)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    loss = emb(torch.tensor([1, 7]).to(TPU)).sum()
    loss.backward()
    opt.step()
    with pytest.raises(IndexError):
        emb.weight.cpu()
    other(torch.ones(2, 3, device=TPU)).sum().cpu()  # unrelated parameters are fine


def test_threads_get_only_their_own_errors(mode):
    x = torch.arange(10.0).to(TPU)
    results = {}

    def bad(name):
        outcome = []
        for i in range(30):
            try:
                v = x[torch.tensor([10 + i]).to(TPU)].cpu()
                outcome.append(("value", v.item()))
            except IndexError:
                outcome.append(("raised",))
        results[name] = outcome

    def good(name):
        outcome = []
        for i in range(30):
            try:
                v = (x[torch.tensor([i % 10]).to(TPU)] * 2).cpu()
                outcome.append(("ok",) if v.item() == 2 * (i % 10) else ("wrong", v.item()))
            except Exception as e:  # noqa: BLE001
                outcome.append(("raised", type(e).__name__))
        results[name] = outcome

    threads = [threading.Thread(target=bad, args=("A",))] + [
        threading.Thread(target=good, args=(n,)) for n in "BCD"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["A"] == [("raised",)] * 30, results["A"]  # never a clamped value
    for n in "BCD":
        assert results[n] == [("ok",)] * 30, (n, results[n])  # never A's error


def test_debug_mode_raises_at_the_op():
    with torch_tpu.eager_mode("debug"):
        x = torch.arange(10.0).to(TPU)
        with pytest.raises(IndexError):
            x[bad_index()]
        w = torch.ones(3).to(TPU)
        with pytest.raises(IndexError):
            w.index_copy_(0, torch.tensor([5]).to(TPU), torch.ones(1).to(TPU))
        with pytest.raises(IndexError):
            w.cpu()  # the in-place target stays guarded


def test_compiled_programs_guard_their_outputs():
    def fn(x, i):
        return x[i] * 2, x + 1

    compiled = torch.compile(fn, backend="tpu")
    x = torch.arange(10.0).to(TPU)
    good, _ = compiled(x, torch.tensor([3]).to(TPU))
    assert good.cpu().item() == 6
    bad, other = compiled(x, bad_index())
    with pytest.raises(IndexError):
        bad.cpu()
    # The whole compiled program failed its check: its other outputs are not trusted either.
    with pytest.raises(IndexError):
        other.cpu()
    torch.testing.assert_close(x.cpu(), torch.arange(10.0))
