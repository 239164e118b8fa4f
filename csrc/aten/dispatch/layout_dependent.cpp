// Ops whose results depend on the memory layout of an input, which lowerings never see:
// _linalg_det and _linalg_slogdet factor A^T when A is row-major contiguous (det A = det A^T,
// and LAPACK wants column-major), and their backward formulas expect exactly that LU. These
// kernels make the same choice and compose lowered ops (LU, diagonal products).
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "../common.h"

namespace tpu::aten {
namespace {

// The factored matrix PyTorch's CPU kernel uses.
at::Tensor FactoredInput(const at::Tensor& A) { return A.is_contiguous() && !A.is_complex() ? A.mH() : A; }

// (-1)^(number of row swaps) from LAPACK pivots.
at::Tensor PivotSign(const at::Tensor& pivots, const at::TensorOptions& opts) {
  int64_t k = pivots.size(-1);
  at::Tensor expected = at::arange(1, k + 1, pivots.options());
  at::Tensor swaps = at::ne(pivots, expected).sum(-1);
  return at::rsub(at::mul(at::remainder(swaps, 2), 2), 1).to(opts);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> LinalgDet(const at::Tensor& A) {
  TORCH_CHECK(A.dim() >= 2 && A.size(-1) == A.size(-2), "linalg.det: A must be batches of square matrices, but they are ",
              A.size(-2), " by ", A.size(-1), " matrices");
  auto [LU, pivots, info] = at::linalg_lu_factor_ex(FactoredInput(A));
  at::Tensor det = A.size(-1) == 0 ? at::ones(A.sizes().slice(0, A.dim() - 2), A.options())
                                   : at::mul(LU.diagonal(0, -2, -1).prod(-1), PivotSign(pivots, A.options()));
  return {det, LU, pivots};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> LinalgSlogdet(const at::Tensor& A) {
  TORCH_CHECK(A.dim() >= 2 && A.size(-1) == A.size(-2), "linalg.slogdet: A must be batches of square matrices, but they are ",
              A.size(-2), " by ", A.size(-1), " matrices");
  auto [LU, pivots, info] = at::linalg_lu_factor_ex(FactoredInput(A));
  auto batch = A.sizes().slice(0, A.dim() - 2);
  if (A.size(-1) == 0) return {at::ones(batch, A.options()), at::zeros(batch, A.options()), LU, pivots};
  at::Tensor diag = LU.diagonal(0, -2, -1);
  at::Tensor sign = at::mul(at::sgn(diag).prod(-1), PivotSign(pivots, A.options()));
  at::Tensor logabsdet = at::log(at::abs(diag)).sum(-1);
  return {sign, logabsdet, LU, pivots};
}

void Into(const at::Tensor& value, const at::Tensor& out) {
  at::native::resize_output(out, value.sizes());
  const_cast<at::Tensor&>(out).copy_(value);
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> LinalgDetOut(const at::Tensor& A, at::Tensor& result, at::Tensor& LU,
                                                               at::Tensor& pivots) {
  auto [d, lu, p] = LinalgDet(A);
  Into(d, result);
  Into(lu, LU);
  Into(p, pivots);
  return {result, LU, pivots};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> LinalgSlogdetOut(const at::Tensor& A, at::Tensor& sign,
                                                                                at::Tensor& logabsdet, at::Tensor& LU,
                                                                                at::Tensor& pivots) {
  auto [s, l, lu, p] = LinalgSlogdet(A);
  Into(s, sign);
  Into(l, logabsdet);
  Into(lu, LU);
  Into(p, pivots);
  return {sign, logabsdet, LU, pivots};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_linalg_det", LinalgDet);
  m.impl("_linalg_det.result", LinalgDetOut);
  m.impl("_linalg_slogdet", LinalgSlogdet);
  m.impl("_linalg_slogdet.sign", LinalgSlogdetOut);
}

}  // namespace tpu::aten
