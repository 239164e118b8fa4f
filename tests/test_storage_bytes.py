"""Byte-level access to tpu storages, as on CUDA: copy.deepcopy (untyped storage copies),
view(dtype) between element types of every width (bool and complex included), pickling,
torch.save in both formats, and slicing an untyped storage. Programs read and write a storage
through any element type natively (TORCH_TPU_STRICT-clean: no CPU fallback).
"""
import copy
import io
import pickle

import pytest
import torch

import torch_tpu
from conftest import native

TPU = "tpu"

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128]




def sample(dtype, n=8):
    g = torch.Generator().manual_seed(n)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(n, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        return torch.randn(n, generator=g).to(dtype)
    return torch.randint(-100 if dtype != torch.uint8 else 0, 100, (n,), generator=g).to(dtype)


def test_deepcopy_of_bool_tensor():
    t = torch.tensor([[5, 1, 7]], device=TPU).ne(1)
    with native():
        c = copy.deepcopy(t)
    assert c.device.type == "tpu" and c.dtype == torch.bool
    assert c.cpu().tolist() == [[True, False, True]]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_deepcopy_and_storage_copy(dtype):
    x = sample(dtype)
    t = x.to(TPU)
    c = copy.deepcopy(t[1:])
    assert c.storage_offset() == 1 and torch.equal(c.cpu(), x[1:])
    s = torch.UntypedStorage(t.untyped_storage().nbytes(), device=TPU)
    s.copy_(t.untyped_storage())
    back = torch.empty(0, dtype=dtype, device=TPU).set_(s)
    assert torch.equal(back.cpu(), x)


def raw(dtype, nbytes, zero_one):
    """Random bytes seen as `dtype` (bytes 0/1 where a bool view must read them)."""
    g = torch.Generator().manual_seed(nbytes)
    return torch.randint(0, 2 if zero_one else 256, (nbytes,), dtype=torch.uint8, generator=g).view(dtype)


def same_bytes(a, b):
    return torch.equal(a.cpu().contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.mark.parametrize("src", DTYPES, ids=str)
@pytest.mark.parametrize("dst", DTYPES, ids=str)
def test_view_dtype_every_pair(src, dst):
    # Bytes only move (gather, copy): no arithmetic that could canonicalise NaN payloads.
    x = raw(src, 64, zero_one=torch.bool in (src, dst))
    expected = x.view(dst)
    perm = torch.arange(expected.numel() - 1, -1, -1)
    t = x.to(TPU)
    with native():
        read = t.view(dst)[perm.to(TPU)]  # a program that reads the storage as `dst`
        w = x.to(TPU)
        w.view(dst)[1:3] = expected[2:4].to(TPU)  # writes `dst` elements into a `src` storage
        after = w[perm[: w.numel()].remainder(w.numel()).to(TPU)]  # and reads it back as `src`
    assert same_bytes(read, expected[perm])
    ref = x.clone()
    ref.view(dst)[1:3] = expected[2:4]
    assert same_bytes(w, ref)
    assert same_bytes(after, ref[perm[: ref.numel()].remainder(ref.numel())])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.bool, torch.int64, torch.complex64], ids=str)
def test_pickle_and_both_save_formats(dtype):
    x = sample(dtype).reshape(2, 4)
    t = x.to(TPU)[:, 1:]
    u = pickle.loads(pickle.dumps(t))
    assert u.device.type == "tpu" and u.dtype == dtype and torch.equal(u.cpu(), x[:, 1:])
    for new_format in (True, False):
        b = io.BytesIO()
        torch.save({"t": t, "p": torch.nn.Parameter(x.to(TPU).float())}, b, _use_new_zipfile_serialization=new_format)
        b.seek(0)
        loaded = torch.load(b)
        assert loaded["t"].device.type == "tpu" and torch.equal(loaded["t"].cpu(), x[:, 1:])
        assert isinstance(loaded["p"], torch.nn.Parameter) and torch.equal(loaded["p"].cpu(), x.float())


def test_untyped_storage_slice():
    x = torch.arange(8, dtype=torch.float32)
    t = x.to(TPU)
    s = t.untyped_storage()[:4]
    assert s.device.type == "tpu" and s.nbytes() == 4
    assert s.tolist() == x.untyped_storage()[:4].tolist()
    s2 = t.untyped_storage()[8:16]
    assert torch.equal(torch.empty(0, device=TPU).set_(s2).cpu(), x[2:4])
    # A slice shares memory, as on CUDA: a write through it shows in the tensor.
    torch.empty(0, device=TPU).set_(s2).fill_(-1)
    assert t.cpu().tolist() == [0, 1, -1, -1, 4, 5, 6, 7]
    assert s2.cpu().tolist() == torch.tensor([-1.0, -1.0]).untyped_storage().tolist()
