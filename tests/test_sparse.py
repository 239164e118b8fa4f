"""Sparse COO and CSR tensors on tpu: creation (from the CPU, from a dense tpu tensor, from index
tensors), the layout accessors, to_dense, coalesce, copies, and sparse x dense products, each
against PyTorch's CPU result and without a CPU fallback; what stays unsupported raises one short
error naming the layout and the op."""
import pytest
import torch

from conftest import assert_same, native

TPU = "tpu"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)  # the dense operands are drawn from torch.randn


def _matrix(rows=5, cols=4, dtype=torch.float32, seed=0):
    """A matrix with an empty row, a full row and scattered zeros."""
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(rows, cols, generator=g).mul(3).to(dtype)
    d[torch.rand(rows, cols, generator=g) < 0.5] = 0
    d[1] = 0
    d[2] = torch.arange(1, cols + 1).to(dtype)
    return d


def _assert_same_csr(got, expected):
    assert got.layout == expected.layout and got.device.type == "tpu"
    assert got.shape == expected.shape and got._nnz() == expected._nnz()
    assert got.sparse_dim() == expected.sparse_dim() and got.dense_dim() == expected.dense_dim()
    assert_same(got.crow_indices(), expected.crow_indices())
    assert_same(got.col_indices(), expected.col_indices())
    assert_same(got.values(), expected.values())


def test_csr_to_tpu_and_back():
    csr = _matrix().to_sparse_csr()
    with native():
        x = csr.to(TPU)
        _assert_same_csr(x, csr)
        back = x.cpu()
    assert back.layout == torch.sparse_csr and torch.equal(back.to_dense(), csr.to_dense())
    assert "sparse_csr" in repr(x) and "tpu" in repr(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_to_dense_matches_cpu(dtype):
    csr = _matrix(dtype=dtype).to_sparse_csr()
    with native():
        assert_same(csr.to(TPU).to_dense(), csr.to_dense())
        # A CSR's transpose is CSC: the same arrays read column-first.
        assert_same(csr.to(TPU).t().to_dense(), csr.t().to_dense())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dense_to_sparse_csr_matches_cpu(dtype):
    d = _matrix(dtype=dtype)
    d[0, 0] = float("nan")  # NaN is a stored value, as on the CPU
    with native():
        _assert_same_csr(d.to(TPU).to_sparse_csr(), d.to_sparse_csr())
        _assert_same_csr(torch.zeros(3, 2, device=TPU).to_sparse_csr(), torch.zeros(3, 2).to_sparse_csr())


def test_sparse_csr_tensor_on_tpu():
    crow, col, values = torch.tensor([0, 1, 1, 3]), torch.tensor([2, 0, 1]), torch.tensor([1.0, 2.0, 3.0])
    expected = torch.sparse_csr_tensor(crow, col, values, (3, 3))
    with native():
        x = torch.sparse_csr_tensor(crow.to(TPU), col.to(TPU), values.to(TPU), (3, 3))
        _assert_same_csr(x, expected)
        assert_same(x.to_dense(), expected.to_dense())
        y = torch.sparse_csr_tensor(crow, col, values, (3, 3), device=TPU)
        _assert_same_csr(y, expected)


def test_clone_copy_and_scale():
    csr = _matrix().to_sparse_csr()
    with native():
        x = csr.to(TPU)
        _assert_same_csr(x.clone(), csr)
        target = torch.empty_like(x)
        target.copy_(csr)
        _assert_same_csr(target, csr)
        _assert_same_csr(x * 2.5, csr * 2.5)
        _assert_same_csr(torch.tensor(-3.0, device=TPU) * x, torch.tensor(-3.0) * csr)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sparse_dense_products_match_cpu(dtype):
    a = _matrix(dtype=dtype).to_sparse_csr()
    b, left, bias, v = (torch.randn(*s).to(dtype) for s in [(4, 3), (2, 5), (5, 3), (4,)])
    nan_bias = torch.full((5, 3), float("nan"), dtype=dtype)  # ignored when beta is 0

    def cpu(fn, *args):
        # The CPU has no bf16 sparse product: its f32 result, rounded (we accumulate in f32 too).
        return fn(*(t.float() for t in args)).to(dtype)

    x = a.to(TPU)
    with native():
        assert_same(x @ b.to(TPU), cpu(torch.matmul, a, b))
        assert_same(torch.mm(x, b.to(TPU)), cpu(torch.mm, a, b))
        assert_same(torch.sparse.mm(x, b.to(TPU)), cpu(torch.sparse.mm, a, b))
        assert_same(x @ v.to(TPU), cpu(torch.matmul, a, v))
        csc = a.to_dense().to_sparse_csc()
        assert_same(csc.to(TPU) @ b[:, :1].to(TPU).expand(4, 2), cpu(torch.matmul, csc, b[:, :1].expand(4, 2)))
        assert_same(left.to(TPU) @ x, cpu(torch.matmul, left, a.to_dense()))
        assert_same(torch.addmm(bias.to(TPU), x, b.to(TPU), beta=0.5, alpha=2.0),
                    cpu(lambda *t: torch.addmm(*t, beta=0.5, alpha=2.0), bias, a, b))
        assert_same(torch.addmm(nan_bias.to(TPU), x, b.to(TPU), beta=0.0),
                    cpu(lambda *t: torch.addmm(*t, beta=0.0), nan_bias, a, b))


def test_gradient_of_the_dense_operand():
    a = _matrix().to_sparse_csr()
    b = torch.randn(4, 3, requires_grad=True)
    tb = b.detach().to(TPU).requires_grad_()
    with native():
        (a.to(TPU) @ tb).sin().sum().backward()
    (a @ b).sin().sum().backward()
    assert_same(tb.grad, b.grad)


def test_shape_errors_match_cpu():
    a = _matrix().to_sparse_csr()
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        a.to(TPU) @ torch.randn(3, 2, device=TPU)


def _short(message):
    return len(str(message).splitlines()) <= 2 and "Could not run" not in str(message)


@pytest.mark.parametrize("op, name", [
    (lambda x: x.to_dense().to_sparse().sum(), "sparse_coo"),
    (lambda x: x.to_dense().to_sparse() @ x.to_dense().t().to_sparse(), "sparse_coo"),
    (lambda x: x.sum(), "sparse_csr"),
    (lambda x: x.abs(), "sparse_csr"),
    (lambda x: x @ x.t(), "sparse_csr"),
    (lambda x: x.to_dense().to_sparse_bsr((1, 1)) @ torch.ones(4, 1, device=TPU), "sparse_bsr"),
])
def test_unsupported_ops_refused_with_the_layout(op, name):
    x = _matrix().to_sparse_csr().to(TPU)
    with pytest.raises(NotImplementedError, match=rf"layout torch.{name}\)") as e:
        op(x)
    assert _short(e.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
def test_sparse_mm_reduce_matches_cpu(reduce, dtype):
    a, b = _matrix(dtype=dtype).to_sparse_csr(), torch.randn(4, 3).to(dtype)
    with native():
        got = torch.sparse.mm(a.to(TPU), b.to(TPU), reduce)
    assert_same(got, torch.sparse.mm(a, b, reduce))  # row 1 is empty: 0 for every reduction


def test_sparse_sampled_addmm_matches_cpu():
    a = _matrix().to_sparse_csr()
    m1, m2 = torch.randn(5, 6), torch.randn(6, 4)
    with native():
        got = torch.sparse.sampled_addmm(a.to(TPU), m1.to(TPU), m2.to(TPU), beta=0.5, alpha=-2.0)
    _assert_same_csr(got, torch.sparse.sampled_addmm(a, m1, m2, beta=0.5, alpha=-2.0))


def _assert_same_coo(got, expected):
    assert got.layout == torch.sparse_coo and got.device.type == "tpu"
    assert got.shape == expected.shape and got.is_coalesced() == expected.is_coalesced()
    assert got.sparse_dim() == expected.sparse_dim() and got.dense_dim() == expected.dense_dim()
    assert_same(got._indices(), expected._indices())
    assert_same(got._values(), expected._values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_dense_to_sparse_coo_matches_cpu(dtype):
    d = _matrix(dtype=dtype)
    with native():
        _assert_same_coo(d.to(TPU).to_sparse(), d.to_sparse())
        _assert_same_coo(d.to(TPU).to_sparse(1), d.to_sparse(1))  # rows with any nonzero, dense rows
        assert_same(d.to(TPU).to_sparse().to_dense(), d)
        assert_same(d.to(TPU).to_sparse(1).to_dense(), d)


def test_sparse_coo_tensor_on_tpu_and_coalesce():
    indices, values = torch.tensor([[0, 1, 1, 0], [2, 0, 0, 2]]), torch.tensor([3.0, 4.0, 5.0, -1.0])
    expected = torch.sparse_coo_tensor(indices, values, (2, 3))
    with native():
        x = torch.sparse_coo_tensor(indices, values, (2, 3), device=TPU)
        _assert_same_coo(x, expected)
        assert_same(x.to_dense(), expected.to_dense())  # duplicates add up
        _assert_same_coo(x.coalesce(), expected.coalesce())
        _assert_same_coo(expected.to(TPU), expected)
    back = x.cpu()
    assert back.layout == torch.sparse_coo and torch.equal(back.to_dense(), expected.to_dense())


def test_sparse_coo_products_and_gradients():
    a = _matrix().to_sparse()
    b = torch.randn(4, 3, requires_grad=True)
    tb = b.detach().to(TPU).requires_grad_()
    with native():
        x = a.to(TPU)
        got = x @ tb
        assert_same(torch.sparse.mm(x, tb.detach()), torch.sparse.mm(a, b.detach()))
        assert_same(torch.addmm(torch.ones(5, 3, device=TPU), x, tb.detach(), beta=0.5),
                    torch.addmm(torch.ones(5, 3), a, b.detach(), beta=0.5))
        assert_same(x @ tb[:, 0].detach(), a @ b[:, 0].detach())
        _assert_same_coo(x * 3, a * 3)
        got.sin().sum().backward()
        # to_sparse's own gradient: autograd masks the dense gradient with the result's indices.
        d = _matrix().requires_grad_()
        td = d.detach().to(TPU).requires_grad_()
        td.to_sparse().to_dense().mul(torch.arange(4.0, device=TPU)).sum().backward()
    expected = a @ b
    assert_same(got, expected)
    expected.sin().sum().backward()
    assert_same(tb.grad, b.grad)
    d.to_sparse().to_dense().mul(torch.arange(4.0)).sum().backward()
    assert_same(td.grad, d.grad)


@pytest.mark.parametrize("layout", ["to_sparse", "to_sparse_csr"])
def test_gradient_of_the_sparse_values(layout):
    """Learnable edge weights (GNN style): the gradient of a sparse operand's values, as a
    sparse tensor with its indices (autograd's sparse_mask)."""
    d, b = _matrix(), torch.randn(4, 3)
    a = getattr(d, layout)().requires_grad_()
    torch.sparse.mm(a, b).sin().sum().backward()
    with native():
        x = getattr(d.to(TPU), layout)().requires_grad_()
        torch.sparse.mm(x, b.to(TPU)).sin().sum().backward()
        assert x.grad.layout == a.grad.layout
        assert_same(x.grad.to_dense(), a.grad.to_dense())
