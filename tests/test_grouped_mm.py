"""aten::_grouped_mm on tpu against PyTorch's CPU kernel: the four layouts, float32 / bfloat16 /
float16, empty groups and rows past the last offset, its backward, bad input, no host syncs
and no CPU fallback, and one program under torch.compile."""
import pytest
import torch

import torch_tpu

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.bfloat16: dict(atol=3e-2, rtol=2e-2),
       torch.float16: dict(atol=3e-3, rtol=2e-3)}


def tpu(t):
    return t.to("tpu")


def offsets(*ends):
    return torch.tensor(ends, dtype=torch.int32)


# (rows, offsets): empty groups, rows past the last offset, every row in one group. 64 rows
# over 4 groups cut into tiles of several rows (the CPU plugin's formulation); 8 rows over 8
# groups take one row per item.
ROW_CASES = [
    (16, offsets(2, 2, 7)),
    (64, offsets(5, 30, 30, 61)),
    (64, offsets(0, 0, 0, 64)),
    (8, offsets(1, 2, 2, 3, 5, 6, 6, 8)),
]


def check_rows(got, want, end, dtype):
    """Rows before the last offset match the CPU; the CPU leaves later rows uninitialised, tpu zeros them."""
    got = got.cpu()
    torch.testing.assert_close(got[:end].float(), want[:end].float(), **TOL[dtype])
    assert (got[end:] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,offs", ROW_CASES)
def test_2d_3d(dtype, rows, offs):
    g = offs.numel()
    a, b = torch.randn(rows, 16, dtype=dtype), torch.randn(g, 16, 24, dtype=dtype)
    got = torch._grouped_mm(tpu(a), tpu(b), tpu(offs))
    assert got.dtype == dtype and got.shape == (rows, 24)
    check_rows(got, torch._grouped_mm(a, b, offs), int(offs[-1]), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols,offs", ROW_CASES)
def test_3d_2d(dtype, cols, offs):
    g = offs.numel()
    a, b = torch.randn(g, 8, 16, dtype=dtype), torch.randn(16, cols, dtype=dtype)
    got = torch._grouped_mm(tpu(a), tpu(b), tpu(offs))
    end = int(offs[-1])
    check_rows(got.t(), torch._grouped_mm(a, b, offs).t(), end, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,offs", ROW_CASES)
def test_2d_2d(dtype, k, offs):
    """The weight gradient's layout: the contraction is ragged; an empty group gives zeros."""
    a, b = torch.randn(8, k, dtype=dtype), torch.randn(k, 16, dtype=dtype)
    got = torch._grouped_mm(tpu(a), tpu(b), tpu(offs))
    want = torch._grouped_mm(a, b, offs)
    torch.testing.assert_close(got.cpu().float(), want.float(), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_3d_3d(dtype):
    a, b = torch.randn(3, 8, 16, dtype=dtype), torch.randn(3, 16, 8, dtype=dtype)
    got = torch._grouped_mm(tpu(a), tpu(b))
    torch.testing.assert_close(got.cpu().float(), torch._grouped_mm(a, b).float(), **TOL[dtype])


def test_transposed_weight_and_functional_api():
    """Transformers passes weight.transpose(-2, -1) through torch.nn.functional.grouped_mm."""
    a, w, offs = torch.randn(12, 16), torch.randn(4, 24, 16), offsets(3, 3, 9, 12)
    got = torch.nn.functional.grouped_mm(tpu(a), tpu(w).transpose(-2, -1), offs=tpu(offs))
    torch.testing.assert_close(got.cpu(), torch.nn.functional.grouped_mm(a, w.transpose(-2, -1), offs=offs))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward(dtype):
    """The backward runs _grouped_mm again (2-D x 3-D for the input, 2-D x 2-D for the weight)."""
    offs = offsets(5, 5, 20, 30)
    a, b = torch.randn(32, 16, dtype=dtype), torch.randn(4, 16, 8, dtype=dtype)
    grad = torch.randn(32, 8, dtype=dtype)
    grad[30:] = 0  # rows the CPU leaves uninitialised carry no gradient
    results = []
    for device in ("cpu", "tpu"):
        x, w = a.to(device).detach().requires_grad_(), b.to(device).detach().requires_grad_()
        torch._grouped_mm(x, w, offs.to(device)).backward(grad.to(device))
        results.append((x.grad.cpu()[:30].float(), w.grad.cpu().float()))
    torch.testing.assert_close(results[1], results[0], **TOL[dtype])


def test_3d_2d_backward():
    offs = offsets(3, 8, 8, 16)
    a, b, grad = torch.randn(4, 8, 16), torch.randn(16, 16), torch.randn(8, 16)
    results = []
    for device in ("cpu", "tpu"):
        x, w = a.to(device).detach().requires_grad_(), b.to(device).detach().requires_grad_()
        torch._grouped_mm(x, w, offs.to(device)).backward(grad.to(device))
        results.append((x.grad.cpu(), w.grad.cpu()))
    torch.testing.assert_close(results[1], results[0])


def test_no_host_sync_and_no_fallback():
    """Offsets stay on the device: computing and consuming a result reads nothing on the host."""
    a, b, offs = tpu(torch.randn(16, 16)), tpu(torch.randn(4, 16, 8)), tpu(offsets(4, 8, 8, 16))
    torch.tpu.synchronize()
    torch_tpu.metrics.reset()
    out = torch._grouped_mm(a, b, offs)
    out2 = torch._grouped_mm(a, b, offs + 0)  # other values, same program
    (out + out2).sum()
    m = torch_tpu.metrics()
    assert m["host_syncs"] == 0 and m["cpu_fallbacks"] == 0
    assert m["grouped_mm_path"] == ("ragged_dot" if torch.tpu.get_device_name() != "cpu" else "tiled")


@pytest.mark.parametrize("ends,message", [
    ((5, 3, 10), "non-decreasing"),
    ((2, 5, 11), "non-decreasing"),
    ((-1, 5, 10), "non-decreasing"),
])
def test_bad_offset_values_raise_on_read(ends, message):
    a, b = tpu(torch.randn(10, 8)), tpu(torch.randn(3, 8, 8))
    out = torch._grouped_mm(a, b, tpu(offsets(*ends)))
    with pytest.raises(IndexError, match=message):  # a deferred device check, like an index out of range
        out.cpu()


@pytest.mark.parametrize("args", [
    lambda: (torch.randn(10, 8), torch.randn(3, 8, 8), torch.tensor([2, 5, 10])),  # int64 offsets
    lambda: (torch.randn(10, 8), torch.randn(3, 8, 8), offsets(5, 10)),  # one offset per group
    lambda: (torch.randn(10, 8), torch.randn(3, 16, 8), offsets(2, 5, 10)),  # contraction sizes
    lambda: (torch.randn(10, 8), torch.randn(3, 8, 8)),  # no offsets for a 2-D operand
    lambda: (torch.randn(3, 8, 8), torch.randn(3, 8, 8), offsets(2, 5, 8)),  # offsets for 3-D x 3-D
    lambda: (torch.randn(2, 8, 8), torch.randn(3, 8, 8)),  # batch sizes
    lambda: (torch.randn(10, 8).double(), torch.randn(3, 8, 8).double(), offsets(2, 5, 10)),  # dtype
    lambda: (torch.randn(10, 8), torch.randn(3, 8, 8).bfloat16(), offsets(2, 5, 10)),  # mixed dtypes
    lambda: (torch.randn(10, 8), torch.randn(3, 8, 8), offsets(2, 5, 10)[None]),  # 2-D offsets
])
def test_bad_arguments_raise_like_cpu(args):
    cpu_args = args()
    with pytest.raises(RuntimeError) as cpu_error:
        torch._grouped_mm(*cpu_args)
    with pytest.raises(RuntimeError) as tpu_error:
        torch._grouped_mm(*[tpu(t) for t in cpu_args])
    assert str(tpu_error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0]


def test_bias_and_out_dtype_raise_like_cpu():
    a, b, offs = torch.randn(10, 8), torch.randn(3, 8, 8), offsets(2, 5, 10)
    for kwargs in (dict(bias=torch.randn(3, 8)), dict(out_dtype=torch.float16)):
        with pytest.raises(RuntimeError, match="not supported|must match"):
            torch._grouped_mm(a, b, offs, **kwargs)
        with pytest.raises(RuntimeError, match="not supported|must match"):
            torch._grouped_mm(tpu(a), tpu(b), tpu(offs), **{k: tpu(v) if torch.is_tensor(v) else v
                                                            for k, v in kwargs.items()})
    got = torch._grouped_mm(tpu(a), tpu(b), tpu(offs), out_dtype=torch.float32)
    torch.testing.assert_close(got.cpu(), torch._grouped_mm(a, b, offs, out_dtype=torch.float32))


def test_compiled_one_program():
    """torch.compile(backend="tpu"): _grouped_mm is one node of one graph (no graph break)."""
    def f(x, w, offs):
        return torch.relu(torch._grouped_mm(x, w, offs)) * 2

    x, w, offs = torch.randn(12, 16), torch.randn(3, 16, 8), offsets(4, 4, 10)
    torch._dynamo.reset()
    torch_tpu.metrics.reset()
    compiled = torch.compile(f, backend="tpu", fullgraph=True)
    got = compiled(tpu(x), tpu(w), tpu(offs))
    check_rows(got, f(x, w, offs), 10, torch.float32)
    m = torch_tpu.metrics()
    assert (m["compile_graphs"], m["compile_programs"], m["compile_partitioned_graphs"]) == (1, 1, 0)


def test_routing_ops_native_without_sync():
    """The ops around Transformers' grouped_mm experts: sort, histc on int32 (the CPU takes only
    floats), cumsum to int32, the inverse permutation by index_put, gathers."""
    expert_ids = torch.randint(0, 8, (24,))
    hidden = torch.randn(6, 16)

    def route(ids, h, float_histc):
        ids_g, perm = torch.sort(ids, stable=True)  # ties in any order are valid; stable compares
        rows = h[perm // 4]
        counts = torch.histc(ids_g.float() if float_histc else ids_g.int(), bins=8, min=0, max=7)
        offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.size(0), device=perm.device)
        return ids_g, rows, counts.int(), offs, inv

    want = route(expert_ids, hidden, True)
    ids, h = tpu(expert_ids), tpu(hidden)
    torch.tpu.synchronize()
    torch_tpu.metrics.reset()
    got = route(ids, h, False)
    m = torch_tpu.metrics()
    assert m["host_syncs"] == 0 and m["cpu_fallbacks"] == 0
    assert got[2].dtype == torch.int32
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w)
