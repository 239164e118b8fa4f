// Sparse tensors on tpu. COO and compressed layouts (CSR, and the CSC that a CSR's transpose
// is) hold their indices and values as ordinary tpu tensors, so the basics models use are built
// here from native dense ops: the layout accessors, creation and copies (PyTorch's own
// device-generic kernels), to_dense, dense -> COO/CSR, coalesce, and sparse x dense products (a
// gather and a segment sum over the stored elements, never a dense copy of the sparse operand).
// Everything else on a sparse tpu tensor (COO: SparsePrivateUse1; CSR, CSC, BSR, BSC:
// SparseCsrPrivateUse1) lands in a fallback that refuses with one error naming the layout and
// the op, instead of the dispatcher's kernel listing; sparse tensors stay usable on the CPU.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/SparseCsrTensorUtils.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/_to_dense_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>
#include <torch/library.h>

namespace tpu::aten {
namespace {

using at::Tensor;

std::string PythonName(at::Layout layout) {
  switch (layout) {
    case at::kSparse: return "sparse_coo";
    case at::kSparseCsr: return "sparse_csr";
    case at::kSparseCsc: return "sparse_csc";
    case at::kSparseBsr: return "sparse_bsr";
    case at::kSparseBsc: return "sparse_bsc";
    default: return c10::str(layout);
  }
}

// The sparse layout among the op's arguments (a sparse tensor, or a `layout=` argument such as
// empty's), as Python prints it.
std::string SparseLayoutOf(const c10::OperatorHandle& op, const torch::jit::Stack& stack, const char* fallback) {
  const auto& args = op.schema().arguments();
  size_t first = stack.size() - std::min(args.size(), stack.size());
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().layout() != at::kStrided)
      return PythonName(v.toTensor().layout());
    if (v.isInt() && args[i - first].name() == "layout" && v.toInt() != static_cast<int64_t>(at::kStrided))
      return PythonName(static_cast<at::Layout>(v.toInt()));
  }
  return fallback;
}

[[noreturn]] void Refuse(const c10::OperatorHandle& op, const torch::jit::Stack& stack, const char* layout) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu: sparse tensors (layout torch.", SparseLayoutOf(op, stack, layout),
                              ") are not supported on tpu (", op.operator_name(),
                              "); keep them on the CPU, or use dense tensors on tpu (x.to_dense())");
}

void RefuseCoo(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  Refuse(op, *stack, "sparse_coo");
}

void RefuseCompressed(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  Refuse(op, *stack, "sparse_csr");
}

// The refusal from a kernel that handles only part of what its op accepts.
void RefuseUnless(bool supported, const char* op, const Tensor& sparse, const char* what) {
  TORCH_CHECK_NOT_IMPLEMENTED(supported, "tpu: ", op, " of a sparse tensor (layout torch.", PythonName(sparse.layout()),
                              ") is supported on tpu only for ", what, "; keep it on the CPU, or use dense tensors "
                              "on tpu (x.to_dense())");
}

bool IsCompressed(const Tensor& t) { return t.layout() == at::kSparseCsr || t.layout() == at::kSparseCsc; }
// A 2-D COO, CSR or CSC matrix without batch or dense dimensions.
bool IsPlainMatrix(const Tensor& t) {
  return (IsCompressed(t) || t.layout() == at::kSparse) && t.dim() == 2 && t.sparse_dim() == 2 && t.dense_dim() == 0;
}

// _convert_indices_from_csr_to_coo(crow, col, out_int32, transpose) -> [2, nnz] (row; col), or
// (col; row) when transposed: the row of stored element k is the last r with crow[r] <= k,
// one searchsorted over the compressed indices (empty rows repeat an entry and are skipped).
Tensor ConvertIndicesFromCsrToCoo(const Tensor& crow, const Tensor& col, bool out_int32, bool transpose) {
  TORCH_CHECK(crow.dim() == 1 && col.dim() == 1, "crow_indices and col_indices must be 1-D, got ", crow.dim(),
              "-D and ", col.dim(), "-D");
  at::ScalarType index = out_int32 ? at::kInt : at::kLong;
  Tensor k = at::arange(col.size(0), crow.options());
  Tensor row = at::searchsorted(crow.contiguous(), k, out_int32, /*right=*/true).sub(1);
  Tensor plain = col.to(index);
  return transpose ? at::stack({plain, row}) : at::stack({row, plain});
}

// COO indices [sparse_dim, nnz] as the index list of an advanced index over the first
// `sparse_dim` dimensions (one row per dimension).
c10::List<std::optional<Tensor>> IndexRows(const Tensor& indices, int64_t sparse_dim) {
  c10::List<std::optional<Tensor>> rows;
  for (int64_t d = 0; d < sparse_dim; ++d) rows.push_back(indices[d]);
  return rows;
}

// The stored values, in storage order (a COO tensor need not be coalesced).
Tensor StoredValues(const Tensor& s) { return s.layout() == at::kSparse ? s._values() : s.values(); }

// The row and column of every stored element of a plain sparse matrix.
std::pair<Tensor, Tensor> RowsAndColumns(const Tensor& s) {
  if (s.layout() == at::kSparse) return {s._indices()[0], s._indices()[1]};
  bool csr = s.layout() == at::kSparseCsr;
  Tensor coo = at::_convert_indices_from_csr_to_coo(csr ? s.crow_indices() : s.ccol_indices(),
                                                    csr ? s.col_indices() : s.row_indices(), false, !csr);
  return {coo.select(0, 0), coo.select(0, 1)};
}

// to_dense: zeros with every stored value added at its (row, column). Batched and block layouts
// take PyTorch's generic conversion, which runs on the same native ops.
Tensor SparseCompressedToDense(const Tensor& self, std::optional<at::ScalarType> dtype,
                               std::optional<bool> masked_grad) {
  if (!IsPlainMatrix(self)) return at::native::sparse_compressed_to_dense(self, dtype, masked_grad);
  TORCH_CHECK(!dtype.has_value(), "dtype argument is not supported by sparse_csr_to_dense");
  auto [rows, cols] = RowsAndColumns(self);
  Tensor dense = at::zeros(self.sizes(), self.options().layout(at::kStrided));
  return dense.index_put_({rows, cols}, self.values(), /*accumulate=*/true);
}

// COO to_dense: zeros with every stored value (slice, for dense dimensions) added at its index;
// duplicates of an uncoalesced tensor add up, as on the CPU.
Tensor SparseCooToDense(const Tensor& self, std::optional<at::ScalarType> dtype, std::optional<bool> masked_grad) {
  TORCH_CHECK(!dtype.has_value(), "dtype argument is not supported by sparse_to_dense");
  RefuseUnless(self.sparse_dim() > 0, "aten::_to_dense", self, "tensors with sparse dimensions");
  Tensor dense = at::zeros(self.sizes(), self.options().layout(at::kStrided));
  return dense.index_put_(IndexRows(self._indices(), self.sparse_dim()), self._values(), /*accumulate=*/true);
}

// dense -> COO over the first `sparse_dim` dimensions: the indices where any value is nonzero
// (row-major, so coalesced; one host read of their count, as on CUDA) and the values there.
Tensor DenseToSparseCoo(const Tensor& self, int64_t sparse_dim) {
  TORCH_CHECK(sparse_dim >= 0 && sparse_dim <= self.dim(), "to_sparse: sparse_dim argument must be in [0,",
              self.dim(), "] range, but ", sparse_dim, " is given");
  TORCH_CHECK(sparse_dim > 0 || self.dim() == 0, "to_sparse: sparse_dim argument must be in >0 when self.dim()>0");
  TORCH_CHECK_NOT_IMPLEMENTED(sparse_dim > 0, "tpu: to_sparse of a 0-d tensor is not supported on tpu; convert on "
                              "the CPU");
  Tensor nonzero = self.ne(0);
  if (sparse_dim < self.dim()) nonzero = nonzero.flatten(sparse_dim).any(-1);
  Tensor indices = at::nonzero(nonzero).t().contiguous();
  Tensor values = at::index(self, IndexRows(indices, sparse_dim));
  return at::_sparse_coo_tensor_unsafe(indices, values, self.sizes(), values.options().layout(at::kSparse), true);
}

Tensor DenseToSparseDims(const Tensor& self, int64_t sparse_dim) { return DenseToSparseCoo(self, sparse_dim); }

// coalesce: one entry per index in row-major order, duplicates' values summed: unique of the
// linearized indices (one host read of their count) and an index_add (f32 for f16/bf16).
Tensor SparseCoalesce(const Tensor& self) {
  Tensor indices = self._indices(), values = self._values();
  int64_t sparse_dim = self.sparse_dim();
  Tensor linear = at::zeros({self._nnz()}, indices.options());
  for (int64_t d = 0; d < sparse_dim; ++d) linear = linear * self.size(d) + indices[d];
  auto [unique, inverse, counts] = at::_unique2(linear, /*sorted=*/true, /*return_inverse=*/true, false);
  std::vector<int64_t> shape = values.sizes().vec();
  shape[0] = unique.size(0);
  at::ScalarType acc = at::toOpMathType(values.scalar_type());
  Tensor summed = at::zeros(shape, values.options().dtype(acc)).index_add_(0, inverse, values.to(acc));
  std::vector<Tensor> rows(sparse_dim);
  for (int64_t d = sparse_dim - 1; d >= 0; --d) {
    rows[d] = unique.remainder(self.size(d));
    unique = unique.div(self.size(d), "floor");
  }
  Tensor coalesced = sparse_dim ? at::stack(rows) : at::zeros({0, unique.size(0)}, indices.options());
  return at::_sparse_coo_tensor_unsafe(coalesced, summed.to(values.scalar_type()), self.sizes(),
                                       values.options().layout(at::kSparse), true);
}

// sparse_mask(dense, mask): dense's values at mask's stored indices, in mask's layout (what
// autograd turns a dense gradient of a sparse result into).
Tensor SparseMask(const Tensor& self, const Tensor& mask) {
  TORCH_CHECK(self.sizes() == mask.sizes(), "sparse_mask(): operands have incompatible sizes; self has size ",
              self.sizes(), " but mask has size ", mask.sizes());
  RefuseUnless(self.layout() == at::kStrided && (mask.layout() == at::kSparse ? mask.sparse_dim() > 0
                                                                               : IsPlainMatrix(mask)),
               "aten::sparse_mask", mask, "a dense tensor masked by a COO tensor or a 2-D CSR/CSC matrix");
  if (mask.layout() == at::kSparse) {
    Tensor m = mask.is_coalesced() ? mask : mask.coalesce();
    Tensor indices = m._indices();
    Tensor values = at::index(self, IndexRows(indices, m.sparse_dim()));
    return at::_sparse_coo_tensor_unsafe(indices.clone(), values, m.sizes(), values.options().layout(at::kSparse),
                                         true);
  }
  auto [rows, cols] = RowsAndColumns(mask);
  auto [compressed, plain] = at::sparse_csr::getCompressedPlainIndices(mask);
  Tensor values = at::index(self, {rows, cols});
  return at::_sparse_compressed_tensor_unsafe(compressed.clone(), plain.clone(), values, mask.sizes(),
                                              values.options().layout(mask.layout()));
}

// dense -> CSR of a 2-D matrix: the nonzero entries in row-major order (one host read of their
// count, as on CUDA); crow[r] = how many of them lie in rows before r.
Tensor DenseToSparseCsr(const Tensor& self, std::optional<int64_t> dense_dim) {
  TORCH_CHECK(self.dim() >= 2, "to_sparse_csr: expected a tensor of at least 2 dimensions, got ", self.dim());
  TORCH_CHECK_NOT_IMPLEMENTED(self.dim() == 2 && dense_dim.value_or(0) == 0,
                              "tpu: to_sparse_csr is supported on tpu only for 2-D matrices without dense "
                              "dimensions (got a ", self.dim(), "-D tensor); convert on the CPU");
  Tensor nz = at::nonzero(self);
  Tensor rows = nz.select(1, 0).contiguous(), cols = nz.select(1, 1).contiguous();
  Tensor crow = at::searchsorted(rows, at::arange(self.size(0) + 1, rows.options()));
  Tensor values = at::index(self, {rows, cols});
  return at::_sparse_csr_tensor_unsafe(crow, cols, values, self.sizes(), values.options().layout(at::kSparseCsr));
}

// to_sparse(layout=...): COO and CSR here; the other layouts take their own ops.
Tensor DenseToSparse(const Tensor& self, std::optional<at::Layout> layout, at::OptionalIntArrayRef blocksize,
                     std::optional<int64_t> dense_dim) {
  at::Layout to = layout.value_or(at::kSparse);
  if (to == at::kSparse) {
    TORCH_CHECK(!blocksize.has_value(), "to_sparse: blocksize is not supported for the sparse_coo layout");
    return DenseToSparseCoo(self, self.dim() - dense_dim.value_or(0));
  }
  if (to == at::kSparseCsr) return DenseToSparseCsr(self, dense_dim);
  if (to == at::kSparseCsc) return self._to_sparse_csc(dense_dim);
  TORCH_CHECK(blocksize.has_value(), "to_sparse: blocksize needs to be given for the ", to, " layout");
  return to == at::kSparseBsr ? self._to_sparse_bsr(*blocksize, dense_dim)
                              : self._to_sparse_bsc(*blocksize, dense_dim);
}

// mat1 @ mat2 with one operand a COO/CSR/CSC matrix and the other dense: each stored (r, c, v) adds
// v * mat2[c, :] to row r (sparse on the left), or mat1[:, r] * v to column c (on the right).
// A gather and a segment sum (index_add), in f32 for f16/bf16 (rule 10): the caller rounds once.
Tensor SparseProduct(const Tensor& mat1, const Tensor& mat2) {
  TORCH_CHECK(mat1.dim() == 2 && mat2.dim() == 2, "tensors must be 2-D, got ", mat1.dim(), "-D and ", mat2.dim(),
              "-D");
  TORCH_CHECK(mat1.size(1) == mat2.size(0), "mat1 and mat2 shapes cannot be multiplied (", mat1.size(0), "x",
              mat1.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  TORCH_CHECK(mat1.scalar_type() == mat2.scalar_type(), "expected mat1 and mat2 to have the same dtype, but got: ",
              mat1.scalar_type(), " != ", mat2.scalar_type());
  bool left = mat1.layout() != at::kStrided;
  const Tensor& sparse = left ? mat1 : mat2;
  const Tensor& dense = left ? mat2 : mat1;
  RefuseUnless(IsPlainMatrix(sparse) && dense.layout() == at::kStrided, "aten::mm", sparse,
               "a 2-D COO, CSR or CSC matrix without batch or dense dimensions times a dense matrix");
  auto [rows, cols] = RowsAndColumns(sparse);
  at::ScalarType acc = at::toOpMathType(dense.scalar_type());
  Tensor values = StoredValues(sparse).to(acc);
  Tensor out = at::zeros({mat1.size(0), mat2.size(1)}, dense.options().dtype(acc));
  if (left)
    out.index_add_(0, rows, dense.index_select(0, cols).to(acc) * values.unsqueeze(1));
  else
    out.index_add_(1, cols, dense.index_select(1, rows).to(acc) * values.unsqueeze(0));
  return out;
}

Tensor SparseMm(const Tensor& mat1, const Tensor& mat2) { return SparseProduct(mat1, mat2).to(mat1.scalar_type()); }

// beta * self + alpha * (mat1 @ mat2), rounded once; self is ignored when beta is 0, as on the CPU.
Tensor SparseAddmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  RefuseUnless(self.layout() == at::kStrided, "aten::addmm", self, "a dense input to add the product to");
  Tensor product = SparseProduct(mat1, mat2);
  Tensor sum = beta.toComplexDouble() == 0.0 ? at::mul(product, alpha)
                                             : at::add(at::mul(self.to(product.scalar_type()), beta), product, alpha);
  return sum.to(mat1.scalar_type());
}

// _sparse_mm_reduce_impl(csr, dense, reduce) -> (out, arg_out), behind torch.sparse.mm(a, b,
// reduce): row r of out reduces v * dense[c, :] over the stored (r, c, v) of row r (sum, mean,
// amax, amin), and an empty row is 0, as in the CPU kernel; f16/bf16 accumulate in f32.
// arg_out (which entry won amax/amin) only feeds the backward, which tpu does not have: it is
// empty, as on the CPU without gradients.
std::tuple<Tensor, Tensor> SparseMmReduce(const Tensor& self, const Tensor& other, c10::string_view reduce) {
  TORCH_CHECK(self.layout() == at::kSparseCsr, "sparse_mm_reduce: expect self to be SparseCsr, got ", self.layout());
  TORCH_CHECK(self.dense_dim() == 0, "sparse_mm_reduce: expected non-hybrid self tensor.");
  TORCH_CHECK(self.dim() == 2, "sparse_mm_reduce: expected self to be a 2-D tensor, got ", self.dim(), "-D tensor.");
  TORCH_CHECK(other.layout() == at::kStrided && other.dim() == 2 && self.size(1) == other.size(0),
              "sparse_mm_reduce: expected other to be a 2-D strided tensor of ", self.size(1), " rows");
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), "sparse_mm_reduce: expected self and other to have the "
              "same dtype, got ", self.scalar_type(), " and ", other.scalar_type());
  bool extreme = reduce == "amax" || reduce == "amin";
  TORCH_CHECK(extreme || reduce == "sum" || reduce == "mean", "sparse_mm_reduce: reduce type ", reduce,
              " is not supported (sum, mean, amax, amin)");
  RefuseUnless(!(extreme && at::GradMode::is_enabled() && (self.requires_grad() || other.requires_grad())),
               "aten::_sparse_mm_reduce_impl", self, "sum and mean, and amax/amin without gradients");
  auto [rows, cols] = RowsAndColumns(self);
  at::ScalarType acc = at::toOpMathType(other.scalar_type());
  Tensor products = other.index_select(0, cols).to(acc) * self.values().to(acc).unsqueeze(1);
  Tensor out = at::zeros({self.size(0), other.size(1)}, other.options().dtype(acc));
  if (extreme) {
    out.index_reduce_(0, rows, products, reduce, /*include_self=*/false);
  } else {
    out.index_add_(0, rows, products);
    if (reduce == "mean") {
      Tensor count = at::zeros({self.size(0)}, out.options()).index_add_(0, rows, at::ones_like(rows, out.options()));
      out.div_(count.clamp_min(1).unsqueeze(1));
    }
  }
  return {out.to(other.scalar_type()), at::empty({0}, self.col_indices().options())};
}

// sparse_sampled_addmm(self, mat1, mat2, beta, alpha): beta * self + alpha * (mat1 @ mat2) at
// self's stored entries only: stored (r, c) takes mat1[r, :] . mat2[:, c]; self is ignored when
// beta is 0. f16/bf16 accumulate in f32.
Tensor SparseSampledAddmm(const Tensor& self, const Tensor& mat1, const Tensor& mat2, const at::Scalar& beta,
                          const at::Scalar& alpha) {
  RefuseUnless(IsPlainMatrix(self) && self.layout() == at::kSparseCsr && mat1.layout() == at::kStrided &&
                   mat2.layout() == at::kStrided && mat1.dim() == 2 && mat2.dim() == 2,
               "aten::sparse_sampled_addmm", self, "a 2-D CSR matrix without batch or dense dimensions");
  TORCH_CHECK(mat1.size(1) == mat2.size(0) && self.size(0) == mat1.size(0) && self.size(1) == mat2.size(1),
              "sparse_sampled_addmm: self ", self.sizes(), " does not fit mat1 ", mat1.sizes(), " @ mat2 ",
              mat2.sizes());
  auto [rows, cols] = RowsAndColumns(self);
  at::ScalarType acc = at::toOpMathType(self.scalar_type());
  Tensor dots = (mat1.index_select(0, rows).to(acc) * mat2.t().index_select(0, cols).to(acc)).sum(-1);
  Tensor values = beta.toComplexDouble() == 0.0 ? dots.mul(alpha)
                                                : at::add(self.values().to(acc).mul(beta), dots, alpha);
  return at::_sparse_csr_tensor_unsafe(self.crow_indices().clone(), self.col_indices().clone(),
                                       values.to(self.scalar_type()), self.sizes(),
                                       self.values().options().layout(at::kSparseCsr));
}

Tensor& SparseSampledAddmmOut(const Tensor& self, const Tensor& mat1, const Tensor& mat2, const at::Scalar& beta,
                              const at::Scalar& alpha, Tensor& out) {
  Tensor result = SparseSampledAddmm(self, mat1, mat2, beta, alpha);
  RefuseUnless(out.layout() == at::kSparseCsr, "aten::sparse_sampled_addmm.out", out, "a CSR out= tensor");
  at::native::resize_as_sparse_compressed_(out, result);
  out.copy_(result);
  return out;
}

// sparse * scalar (a 0-d dense tensor, or a Python number): the values scale, the indices stay.
Tensor SparseMul(const Tensor& self, const Tensor& other) {
  bool left = self.layout() != at::kStrided;
  const Tensor& sparse = left ? self : other;
  const Tensor& scalar = left ? other : self;
  RefuseUnless(scalar.layout() == at::kStrided && scalar.dim() == 0, "aten::mul", sparse, "a product with a scalar");
  Tensor values = StoredValues(sparse).mul(scalar);
  if (sparse.layout() == at::kSparse)
    return at::_sparse_coo_tensor_unsafe(sparse._indices().clone(), values, sparse.sizes(),
                                         values.options().layout(at::kSparse), sparse.is_coalesced());
  auto [compressed, plain] = at::sparse_csr::getCompressedPlainIndices(sparse);
  return at::_sparse_compressed_tensor_unsafe(compressed.clone(), plain.clone(), values, sparse.sizes(),
                                              values.options().layout(sparse.layout()));
}

// empty(layout=sparse_csr, ...): PyTorch's kernel, except for the size-0 results that
// CompositeExplicitAutograd ops (abs, sum, ...) allocate before calling their out= form, which
// no compressed tensor can have; those ops are not supported, and say so.
Tensor EmptySparseCompressed(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                             std::optional<at::Layout> layout, std::optional<at::Device> device,
                             std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK_NOT_IMPLEMENTED(size.size() >= 2, "tpu: sparse tensors (layout torch.",
                              PythonName(layout.value_or(at::kSparseCsr)), ") of ", size.size(),
                              " dimensions cannot be made on tpu (aten::empty.memory_format, as an elementwise or "
                              "reduction op on a sparse tensor makes them); keep them on the CPU, or use dense "
                              "tensors on tpu (x.to_dense())");
  return at::native::empty_sparse_compressed(size, dtype, layout, device, pin_memory, memory_format);
}

Tensor SparseMv(const Tensor& self, const Tensor& vec) {
  TORCH_CHECK(vec.dim() == 1, "vector + matrix @ vector expected, got ", self.dim(), ", ", vec.dim());
  return SparseMm(self, vec.unsqueeze(1)).squeeze(1);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&RefuseCoo>()); }
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&RefuseCompressed>());
}

// PyTorch's kernels for these only touch the member tensors through other ops, so they serve
// every device.
TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
  m.impl("_sparse_mm_reduce_impl", TORCH_FN(SparseMmReduce));
  m.impl("_to_dense", TORCH_FN(SparseCompressedToDense));
  m.impl("addmm", TORCH_FN(SparseAddmm));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("clone", TORCH_FN(at::native::clone_sparse_compressed));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_compressed_));
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
  m.impl("empty.memory_format", TORCH_FN(EmptySparseCompressed));
  m.impl("empty_like", TORCH_FN(at::native::empty_like_sparse_csr));
  m.impl("mm", TORCH_FN(SparseMm));
  m.impl("mul.Scalar", TORCH_FN(at::native::mul_scalar_sparse_csr));
  m.impl("mul.Tensor", TORCH_FN(SparseMul));
  m.impl("mul_.Scalar", TORCH_FN(at::native::mul__scalar_sparse_csr));
  m.impl("mv", TORCH_FN(SparseMv));
  m.impl("resize_as_sparse_", TORCH_FN(at::native::resize_as_sparse_compressed_));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("sparse_mask", TORCH_FN(SparseMask));
  m.impl("sparse_sampled_addmm", TORCH_FN(SparseSampledAddmm));
  m.impl("sparse_sampled_addmm.out", TORCH_FN(SparseSampledAddmmOut));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("zero_", TORCH_FN(at::native::zero_sparse_csr_));
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("_coalesce", TORCH_FN(SparseCoalesce));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(at::native::new_with_dims_sparse));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", TORCH_FN(at::native::new_with_dims_and_tensor_sparse_symint));
  m.impl("_to_dense", TORCH_FN(SparseCooToDense));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("addmm", TORCH_FN(SparseAddmm));
  m.impl("clone", TORCH_FN(at::native::clone_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("mm", TORCH_FN(SparseMm));
  m.impl("mul.Tensor", TORCH_FN(SparseMul));
  m.impl("mv", TORCH_FN(SparseMv));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("sparse_mask", TORCH_FN(SparseMask));
  m.impl("values", TORCH_FN(at::native::values_sparse));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_convert_indices_from_csr_to_coo", TORCH_FN(ConvertIndicesFromCsrToCoo));
  m.impl("_to_sparse", TORCH_FN(DenseToSparse));
  m.impl("_to_sparse.sparse_dim", TORCH_FN(DenseToSparseDims));
  m.impl("_to_sparse_csr", TORCH_FN(DenseToSparseCsr));
}

}  // namespace tpu::aten
