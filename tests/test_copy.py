"""Copies between host and device, between devices, with casts, broadcast and strides;
printing, item() and serialization."""
import io
import re

import pytest
import torch

from conftest import assert_same, last_device, needs_devices

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.uint8, torch.bool]


def sample(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=g, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_every_dtype(dtype):
    c = sample((5, 7), dtype)
    t = c.to("tpu")
    assert t.device == torch.device("tpu:0") and t.dtype == dtype
    back = t.cpu()
    assert back.dtype == dtype and torch.equal(back, c)
    # Extremes survive too.
    if dtype.is_floating_point:
        ext = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, torch.finfo(dtype).max,
                            torch.finfo(dtype).tiny], dtype=dtype)
        torch.testing.assert_close(ext.to("tpu").cpu(), ext, equal_nan=True, atol=0, rtol=0)
        assert torch.signbit(ext.to("tpu").cpu()[4])
    elif dtype != torch.bool:
        ext = torch.tensor([torch.iinfo(dtype).min, torch.iinfo(dtype).max, 0], dtype=dtype)
        assert torch.equal(ext.to("tpu").cpu(), ext)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_device_to_device_same_dtype(dtype):
    c = sample((4, 6), dtype, seed=1)
    t = c.to("tpu")
    d = torch.empty_like(t)
    d.copy_(t)
    assert_same(d, c)
    assert_same(t.clone(), c)
    assert_same(t.t().contiguous(), c.t().contiguous())


def test_non_contiguous_sources_and_destinations():
    c = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    # host non-contiguous -> device
    src = c.permute(2, 0, 1)[1:, :, ::2]
    t = src.to("tpu")
    assert_same(t, src)
    assert t.is_contiguous() == src.to("cpu", copy=True).is_contiguous()
    # device non-contiguous -> host
    tv = c.to("tpu").transpose(0, 2)[::2]
    assert torch.equal(tv.cpu(), c.transpose(0, 2)[::2])
    # host -> device non-contiguous destination
    cd = torch.zeros(5, 8)
    td = cd.to("tpu")
    cd[:, ::2].copy_(c[0].t())
    td[:, ::2].copy_(c[0].t())
    assert_same(td, cd)
    # device non-contiguous -> device non-contiguous destination
    cd.t()[1::2].copy_(c[1] * 2)
    td.t()[1::2].copy_(c[1].to("tpu") * 2)
    assert_same(td, cd)
    # device -> host into a non-contiguous CPU destination
    host = torch.zeros(8, 5)
    host.t()[:, 1:7].copy_(td[:, 1:7])
    expect = torch.zeros(8, 5)
    expect.t()[:, 1:7].copy_(cd[:, 1:7])
    assert torch.equal(host, expect)


@pytest.mark.parametrize(
    "src_dtype,dst_dtype",
    [(torch.float32, torch.int32), (torch.float32, torch.int64), (torch.float64, torch.float16),
     (torch.float32, torch.bfloat16), (torch.int64, torch.float32), (torch.int32, torch.bool),
     (torch.float32, torch.bool), (torch.bool, torch.float32), (torch.int64, torch.int8),
     (torch.bfloat16, torch.float16), (torch.float32, torch.uint8)],
    ids=str,
)
def test_dtype_casting_copies(src_dtype, dst_dtype):
    c = sample((6, 5), src_dtype, seed=2)
    if src_dtype.is_floating_point and dst_dtype == torch.uint8:
        c = c.abs()  # negative float -> uint8 is undefined behaviour in C++
    if src_dtype.is_floating_point and not dst_dtype.is_floating_point and dst_dtype != torch.bool:
        c = c.clamp(torch.iinfo(dst_dtype).min, torch.iinfo(dst_dtype).max)
    # tpu -> tpu (cast on the device)
    cd = torch.empty(6, 5, dtype=dst_dtype)
    td = cd.to("tpu")
    cd.copy_(c)
    td.copy_(c.to("tpu"))
    assert_same(td, cd)
    # cpu -> tpu (cast on the way)
    td2 = torch.empty(6, 5, dtype=dst_dtype, device="tpu")
    td2.copy_(c)
    assert_same(td2, cd)
    # tpu -> cpu (cast on the way back)
    host = torch.empty(6, 5, dtype=dst_dtype)
    host.copy_(c.to("tpu"))
    assert torch.equal(host, cd)
    # .to(dtype) on the device
    assert_same(c.to("tpu").to(dst_dtype), c.to(dst_dtype))


def test_broadcast_copies():
    c = torch.zeros(3, 4, 5)
    t = c.to("tpu")
    row = torch.arange(5.0)
    c.copy_(row)
    t.copy_(row)
    assert_same(t, c)
    col = torch.arange(4.0).unsqueeze(1)
    c.copy_(col.to(torch.int64))
    t.copy_(col.to(torch.int64).to("tpu"))
    assert_same(t, c)
    c[1].copy_(torch.tensor(9.0))
    t[1].copy_(torch.tensor(9.0, device="tpu"))
    assert_same(t, c)
    with pytest.raises(RuntimeError):
        t.copy_(torch.zeros(2, 5, device="tpu"))
    with pytest.raises(RuntimeError):
        t.copy_(torch.zeros(2, 5))


@needs_devices(2)
def test_copy_across_devices_then_compute():
    c = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    t0 = c.to("tpu:0")
    t1 = t0.to("tpu:1")
    assert t1.device == torch.device("tpu:1")
    r = (t1 * 2 + 1).sum(0)
    assert r.device == torch.device("tpu:1")
    assert_same(r, (c * 2 + 1).sum(0))
    # A non-contiguous view across devices, and back.
    v1 = t0.t()[1:4].to("tpu:1")
    assert_same(v1, c.t()[1:4])
    back = (v1 - 1).to("tpu:0")
    assert back.device.index == 0
    assert_same(back, c.t()[1:4] - 1)
    # copy_ into a view of a tpu:1 tensor from tpu:0, with a cast.
    d = torch.zeros(4, 6, dtype=torch.float64, device="tpu:1")
    d[:, 2:4].copy_(t0[:, :2])
    e = torch.zeros(4, 6, dtype=torch.float64)
    e[:, 2:4].copy_(c[:, :2])
    assert_same(d, e)
    assert d.device.index == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
def test_to_device_and_dtype(dtype):
    c = torch.linspace(-3, 3, 12).reshape(3, 4)
    t = c.to("tpu", dtype)
    assert_same(t, c.to(dtype))
    t2 = c.to(device=last_device(), dtype=dtype)
    assert t2.device == last_device()
    assert_same(t2, c.to(dtype))
    assert t.to("tpu") is t  # no copy when nothing changes
    assert t.to("tpu", copy=True) is not t
    assert_same(t.to(torch.float64), c.to(dtype).to(torch.float64))
    back = t.to("cpu", torch.float64)
    assert back.device.type == "cpu" and torch.equal(back, c.to(dtype).to(torch.float64))
    assert_same(torch.ones(2, device="tpu").to(c.to("tpu")), torch.ones(2))  # .to(other)


def test_non_blocking_copies():
    c = torch.randn(64, 32)
    t = c.to("tpu", non_blocking=True)
    y = t * 2
    back = y.to("cpu", non_blocking=True)
    torch.tpu.synchronize()
    assert torch.equal(back, c * 2)
    t2 = torch.empty(64, 32, device="tpu")
    t2.copy_(c.pin_memory(), non_blocking=True)
    assert_same(t2, c)


def test_pin_memory():
    c = torch.randn(10)
    assert not c.is_pinned()
    p = c.pin_memory()
    assert p.is_pinned() and not c.is_pinned()
    assert torch.equal(p, c)
    assert_same(p.to("tpu", non_blocking=True), c)
    e = torch.empty(3, pin_memory=True)
    assert e.is_pinned()
    ds = torch.utils.data.TensorDataset(torch.arange(8.0))
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True)))[0]
    assert batch.is_pinned() and torch.equal(batch, torch.arange(4.0))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_item(dtype):
    c = sample((3,), dtype, seed=3)
    t = c.to("tpu")
    for i in range(3):
        assert t[i].item() == c[i].item()
        assert type(t[i].item()) is type(c[i].item())
    assert t.tolist() == c.tolist()
    if dtype.is_floating_point:
        assert float(t.sum()) == pytest.approx(float(c.sum()), rel=1e-2)
    # bool() of a one-element comparison on the device: true and false both come back.
    assert bool(t[0] == c[0].item()) is True
    assert bool(t[0] != c[0].item()) is False
    assert [bool(t[0] == t[i]) for i in range(3)] == [bool(c[0] == c[i]) for i in range(3)]
    with pytest.raises(RuntimeError):
        t.item()


def _strip_device(s):
    return re.sub(r",\s*device='tpu:\d'", "", s)


@pytest.mark.parametrize(
    "make",
    [lambda: torch.arange(6.0).reshape(2, 3) / 3, lambda: torch.tensor([1e10, 1e-10, -2.5]),
     lambda: torch.arange(10, dtype=torch.int64), lambda: torch.tensor([True, False]),
     lambda: torch.tensor([float("nan"), float("inf"), 1.0]), lambda: torch.zeros(0, 3),
     lambda: torch.tensor(3.25), lambda: torch.randn(2000, generator=torch.Generator().manual_seed(0)),
     lambda: torch.tensor([1.5, 2.0], dtype=torch.bfloat16), lambda: torch.ones(2, 2, dtype=torch.float16)],
    ids=["float", "sci", "int", "bool", "nonfinite", "empty", "scalar", "summarized", "bf16", "f16"],
)
def test_repr_matches_cpu(make):
    c = make()
    t = c.to("tpu")
    r = repr(t)
    assert "device='tpu:0'" in r
    assert _strip_device(r) == repr(c)
    last = str(last_device())
    assert str(t.to(last)).count(f"device='{last}'") == 1
    assert _strip_device(str(t.to(last)).replace(last, "tpu:0")) == str(c)


def test_save_and_load_map_location(tmp_path):
    c = {"w": torch.randn(3, 4), "b": torch.arange(5), "view": None}
    t = {k: (v.to("tpu") if v is not None else None) for k, v in c.items()}
    t["view"] = t["w"].t()[1:]  # shares storage with w
    path = tmp_path / "state.pt"
    torch.save(t, path)

    on_cpu = torch.load(path, map_location="cpu")
    assert on_cpu["w"].device.type == "cpu" and torch.equal(on_cpu["w"], c["w"])
    assert torch.equal(on_cpu["view"], c["w"].t()[1:])

    same = torch.load(path)
    assert same["w"].device == torch.device("tpu:0")
    assert_same(same["w"], c["w"])
    assert_same(same["b"], c["b"])
    # Aliasing is preserved by save/load.
    assert same["view"].untyped_storage().data_ptr() == same["w"].untyped_storage().data_ptr()
    same["w"].fill_(1)
    assert_same(same["view"], torch.ones(4, 3)[1:])

    to1 = torch.load(path, map_location=str(last_device()))
    assert to1["w"].device == last_device()
    assert_same(to1["w"], c["w"])
    mapped = torch.load(path, map_location={"tpu:0": str(last_device())})
    assert mapped["b"].device == last_device()
    assert_same(mapped["b"], c["b"])
    to_tpu = torch.load(path, map_location="tpu", weights_only=True)
    assert to_tpu["w"].device.type == "tpu"

    # A CPU checkpoint loads onto the device, through a buffer too.
    buf = io.BytesIO()
    torch.save(c["w"], buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location="tpu")
    assert_same(loaded, c["w"])
    buf2 = io.BytesIO()
    torch.save(torch.nn.Linear(4, 2).to("tpu").state_dict(), buf2)
    buf2.seek(0)
    sd = torch.load(buf2, map_location=lambda storage, loc: storage)  # stays on the host
    assert sd["weight"].device.type == "cpu"
    buf2.seek(0)
    sd = torch.load(buf2, map_location=lambda storage, loc: storage.tpu(last_device().index))
    assert sd["weight"].device == last_device()


def test_module_to_and_parameters():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    expected = m(x)
    m.to("tpu")
    assert all(p.device.type == "tpu" for p in m.parameters())
    assert_same(m(x.to("tpu")), expected, atol=1e-5, rtol=1e-5)
    # param.data = tensor from another device (shallow copy types are compatible).
    p = torch.nn.Parameter(torch.zeros(3))
    p.data = torch.ones(3, device="tpu")
    assert p.device.type == "tpu"
    assert_same(p.detach(), torch.ones(3))


def test_copies_resolve_conj_and_neg_bits():
    c = torch.tensor([1 + 2j, 3 - 4j, -5 + 0.5j])
    t = c.to("tpu")
    assert t.conj().is_conj()
    assert torch.equal(t.conj().cpu(), c.conj())
    assert torch.equal(torch.view_as_real(t.conj().resolve_conj()).cpu(), torch.view_as_real(c.conj().resolve_conj()))
    d = torch.zeros(3, dtype=torch.complex64).to("tpu")
    d.copy_(t.conj())  # device to device, conj source
    assert torch.equal(d.cpu(), c.conj())
    d.conj().copy_(c)  # host to device, conj destination
    assert torch.equal(d.cpu(), c.conj())
    d.conj().copy_(t.to(last_device()))  # across devices (where there are two), conj destination
    assert torch.equal(d.cpu(), c.conj())
    x = torch.tensor([1.0, -2.0, 3.0])
    n = torch._neg_view(x.to("tpu"))
    assert n.is_neg()
    assert torch.equal(n.cpu(), torch._neg_view(x).clone())
    assert torch.equal(n.clone().cpu(), -x)
    host = torch.zeros(3)
    host.copy_(n)
    assert torch.equal(host, -x)


def test_overlapping_copies_raise_like_cpu():
    for device in ["cpu", "tpu"]:
        t = torch.arange(5.0, device=device)
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            t[1:].copy_(t[:-1])
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            torch.zeros(2, device=device).expand(3, 2).copy_(torch.ones(3, 2))
        t.copy_(t)  # copying onto itself is a no-op
        assert torch.equal(t.cpu(), torch.arange(5.0))


def test_loaded_tensors_run_natively():
    import torch_tpu

    buf = io.BytesIO()
    torch.save({"w": torch.arange(12.0).reshape(3, 4).to("tpu"), "i": torch.arange(5).to("tpu")}, buf)
    buf.seek(0)
    sd = torch.load(buf)
    before = torch_tpu.metrics(wait=True)["cpu_fallbacks"]
    sd["w"].add_(1)
    r = sd["i"] * 2
    assert torch_tpu.metrics(wait=True)["cpu_fallbacks"] == before  # the byte storages took their tensors' types
    assert_same(sd["w"], torch.arange(12.0).reshape(3, 4) + 1)
    assert_same(r, torch.arange(5) * 2)


def test_printing_formats_a_host_copy():
    import torch_tpu

    t = torch.randn(13, 7, 3).to("tpu")  # a shape no other test prints
    before = torch_tpu.metrics(wait=True)
    r = repr(t)
    after = torch_tpu.metrics(wait=True)
    assert after["programs_compiled"] == before["programs_compiled"]
    assert after["cpu_fallbacks"] == before["cpu_fallbacks"]
    assert after["device_to_host_bytes"] - before["device_to_host_bytes"] == t.numel() * 4
    assert _strip_device(r) == repr(t.cpu())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device beside tpu")
def test_copies_between_cuda_and_tpu():
    """A CUDA tensor .to("tpu") went through the host-to-device path with its CUDA data pointer
    read as host memory: a segfault (Transformers' Trainer does this when Accelerate puts batches
    on cuda and TrainingArguments picks tpu). Both directions now go through the host."""
    labels = torch.randint(-100, 50, (2, 8), device="cuda")
    count = labels[..., 1:].ne(-100).sum()  # Trainer._get_num_items_in_batch
    on_tpu = count.to("tpu")
    assert on_tpu.device.type == "tpu" and on_tpu.cpu() == count.cpu()
    x = torch.randn(3, 5, device="cuda")
    assert_same(x.t().to("tpu", torch.float64), x.t().cpu().double())
    t = torch.empty(3, 5, device="tpu")
    t.copy_(x)
    assert torch.equal(t.to("cuda").cpu(), x.cpu())
