// Ops whose result size depends on the data (nonzero, masked_select, boolean-mask indexing,
// unique, repeat_interleave without output_size, least squares residuals). No Meta kernel can size their outputs, so they are
// native kernels here: a lowered op counts on the device, the host reads the count (a
// synchronisation point, as on CUDA), then lowered ops of known size compute the result.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "../common.h"
#include "dispatch.h"

namespace tpu::aten {
namespace {

// A device count read on the host: the synchronisation every data-dependent op needs.
int64_t CountNonzero(const at::Tensor& t) { return at::count_nonzero(t).item<int64_t>(); }

at::Tensor Nonzero(const at::Tensor& self) {
  TORCH_CHECK(self.numel() < std::numeric_limits<int>::max(), "nonzero is not supported for tensors with more than INT_MAX elements");
  return at::nonzero_static(self, CountNonzero(self), -1);
}

at::Tensor& OutOf(const at::Tensor& result, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == result.scalar_type(), "Expected out tensor to have dtype ", result.scalar_type(),
              ", but got ", out.scalar_type(), " instead");
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
  return out;
}

at::Tensor& NonzeroOut(const at::Tensor& self, at::Tensor& out) { return OutOf(Nonzero(self), out); }

// masked_select(self, mask): the elements of self (broadcast with mask) where mask is true,
// in row-major order, as a 1-D tensor.
at::Tensor MaskedSelect(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  TORCH_CHECK(self.device() == mask.device() || mask.dim() == 0,
              "Expected all tensors to be on the same device, but found at least two devices, ", self.device(), " and ",
              mask.device(), "!");
  auto shape = at::infer_size(self.sizes(), mask.sizes());
  at::Tensor m = mask.to(self.device()).expand(shape).reshape({-1});
  at::Tensor flat = at::nonzero_static(m, CountNonzero(m), -1).view({-1});
  return at::take(self.expand(shape), flat);
}

at::Tensor& MaskedSelectOut(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  return OutOf(MaskedSelect(self, mask), out);
}

// self[indices]: boolean masks become the integer indices of their true elements (one index
// tensor per mask dim), CPU index tensors move to the device, then the lowered _unsafe_index
// gathers (and checks the range of every index on the device).
at::Tensor Index(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", indices.size(), ")");
  c10::List<std::optional<at::Tensor>> converted;
  int64_t dim = 0;
  for (size_t i = 0; i < indices.size(); ++i) {
    std::optional<at::Tensor> index = indices.get(i);
    if (!index.has_value() || !index->defined()) {
      converted.push_back(std::nullopt);
      dim++;
      continue;
    }
    TORCH_CHECK(index->device() == self.device() || index->device().is_cpu(),
                "indices should be either on cpu or on the same device as the indexed tensor (", self.device(), ")");
    at::Tensor t = index->device() == self.device() ? *index : index->to(self.device());
    if (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte) {
      for (int64_t j = 0; j < t.dim(); ++j) {
        TORCH_CHECK_INDEX(dim + j < self.dim() && t.size(j) == self.size(dim + j), "The shape of the mask ",
                          t.sizes(), " at index ", j, " does not match the shape of the indexed tensor ", self.sizes(),
                          " at index ", dim + j);
      }
      at::Tensor nz = Nonzero(t);
      for (int64_t j = 0; j < t.dim(); ++j) converted.push_back(nz.select(1, j));
      dim += t.dim();
    } else {
      TORCH_CHECK_INDEX(at::isIntegralType(t.scalar_type(), false),
                        "tensors used as indices must be long, int, byte or bool tensors");
      converted.push_back(t);
      dim++;
    }
  }
  return at::_unsafe_index(self, converted);
}

at::Tensor& IndexOut(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices, at::Tensor& out) {
  return OutOf(Index(self, indices), out);
}

// repeat_interleave(repeats, output_size): index i repeated repeats[i] times; element j of the
// result is the number of running totals of repeats that are <= j.
at::Tensor RepeatInterleave(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
              "repeats has to be Long or Int tensor");
  int64_t total;
  if (output_size.has_value()) {
    total = output_size->guard_int(__FILE__, __LINE__);
  } else {
    TORCH_CHECK(repeats.numel() == 0 || !at::lt(repeats, 0).any().item<bool>(), "repeats can not be negative");
    total = repeats.numel() ? at::sum(repeats).item<int64_t>() : 0;
  }
  at::Tensor totals = at::cumsum(repeats, 0);
  at::Tensor positions = at::arange(total, repeats.options());
  return at::searchsorted(totals, positions, repeats.scalar_type() == at::kInt, /*right=*/true);
}

// bincount(self, weights, minlength): counts (or summed weights) of each value in
// [0, max(self)]: the size is max(max(self) + 1, minlength), read on the host.
at::Tensor Bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength) {
  TORCH_CHECK(self.dim() == 1 && at::isIntegralType(self.scalar_type(), false),
              "bincount only supports 1-d non-negative integral inputs.");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  bool has_w = weights.has_value() && weights->defined();
  TORCH_CHECK(!has_w || (weights->dim() == 1 && weights->size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  int64_t n = minlength;
  if (self.numel() > 0) {
    auto [lo, hi] = at::aminmax(self);
    TORCH_CHECK(lo.item<int64_t>() >= 0, "bincount only supports 1-d non-negative integral inputs.");
    n = std::max(n, hi.item<int64_t>() + 1);
  }
  at::ScalarType dtype = has_w ? (weights->scalar_type() == at::kFloat ? at::kFloat : at::kDouble) : at::kLong;
  at::Tensor out = at::zeros({n}, self.options().dtype(dtype));
  if (self.numel() == 0) return out;
  at::Tensor src = has_w ? weights->to(dtype) : at::ones({self.size(0)}, out.options());
  return out.scatter_add(0, self.to(at::kLong), src);
}

// equal(self, other): same size and every element equal (a host bool, hence a sync).
bool Equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Expected all tensors to be on the same device, but found at least two devices, ",
              self.device(), " and ", other.device(), "!");
  if (!self.sizes().equals(other.sizes())) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

// The runs of a 1-D tensor whose equal elements are adjacent (sorted, or consecutive runs):
// (first element of each run, run index of every element, run lengths). NaN never equals
// NaN, so each NaN is its own run, as on the CPU.
std::tuple<at::Tensor, at::Tensor, at::Tensor> Runs(const at::Tensor& grouped) {
  int64_t n = grouped.numel();
  auto long_opts = grouped.options().dtype(at::kLong);
  if (n == 0) return {grouped.clone(), at::empty({0}, long_opts), at::empty({0}, long_opts)};
  at::Tensor first = at::ones({1}, grouped.options().dtype(at::kBool));
  if (n > 1) first = at::cat({first, at::ne(grouped.slice(0, 1), grouped.slice(0, 0, n - 1))});
  int64_t runs = CountNonzero(first);
  at::Tensor starts = at::nonzero_static(first, runs, -1).view({-1});
  at::Tensor run_id = at::sub(at::cumsum(first, 0), 1);
  at::Tensor ends = at::cat({starts.slice(0, 1), at::full({1}, n, long_opts)});
  return {grouped.index_select(0, starts), run_id, at::sub(ends, starts)};
}

// _unique2(self, sorted, return_inverse, return_counts): the distinct values in ascending
// order (the CPU sorts whatever `sorted` says), the index of each element's value, counts.
std::tuple<at::Tensor, at::Tensor, at::Tensor> Unique2(const at::Tensor& self, bool, bool return_inverse,
                                                       bool return_counts) {
  at::Tensor flat = self.reshape({-1});
  auto long_opts = self.options().dtype(at::kLong);
  auto [sorted, perm] = at::sort(flat, /*stable=*/true, 0, false);
  auto [values, run_id, counts] = Runs(sorted);
  at::Tensor inverse = at::empty({0}, long_opts);
  if (return_inverse) inverse = at::empty_like(run_id).scatter_(0, perm, run_id).view(self.sizes());
  return {values, inverse, return_counts ? counts : at::empty({0}, long_opts)};
}

std::tuple<at::Tensor, at::Tensor> Unique(const at::Tensor& self, bool sorted, bool return_inverse) {
  auto [values, inverse, counts] = Unique2(self, sorted, return_inverse, false);
  return {values, inverse};
}

// unique_consecutive(self, return_inverse, return_counts, dim): without dim, the runs of the
// flattened tensor; with dim (slices compared whole), the CPU fallback.
void UniqueConsecutiveBoxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  size_t first = stack->size() - 4;
  if (!(*stack)[first + 3].isNone()) return CpuFallback(op, stack);
  at::Tensor self = (*stack)[first].toTensor();
  bool return_inverse = (*stack)[first + 1].toBool(), return_counts = (*stack)[first + 2].toBool();
  auto long_opts = self.options().dtype(at::kLong);
  auto [values, run_id, counts] = Runs(self.reshape({-1}));
  torch::jit::drop(*stack, 4);
  stack->emplace_back(values);
  stack->emplace_back(return_inverse ? run_id.view(self.sizes()) : at::empty({0}, long_opts));
  stack->emplace_back(return_counts ? counts : at::empty({0}, long_opts));
}

// linalg_lstsq(A, B, rcond, driver) -> (solution, residuals, rank, singular_values), as the
// CPU's LAPACK drivers shape them: gels solves through QR (full rank assumed) and reports no
// rank; gelsy also reports the rank; gelsd/gelss solve through the SVD (rcond cuts small
// singular values) and return them. Residuals (squared, per column) exist for tall A when
// the driver is not gelsy and every matrix has full rank: a data-dependent size (a sync).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> Lstsq(const at::Tensor& A, const at::Tensor& B,
                                                                 std::optional<double> rcond,
                                                                 std::optional<c10::string_view> driver_opt) {
  TORCH_CHECK(A.dim() >= 2, "torch.linalg.lstsq: input must have at least 2 dimensions.");
  std::string driver = driver_opt.has_value() ? std::string(*driver_opt) : "gelsy";
  TORCH_CHECK(driver == "gels" || driver == "gelsy" || driver == "gelsd" || driver == "gelss",
              "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  bool vector = B.dim() == A.dim() - 1;
  at::Tensor b = vector ? B.unsqueeze(-1) : B;
  int64_t m = A.size(-2), n = A.size(-1);
  auto batch = A.sizes().slice(0, A.dim() - 2).vec();
  auto opts = A.options();
  double cut = rcond.has_value() ? *rcond : std::numeric_limits<float>::epsilon() * std::max(m, n);
  if (A.scalar_type() == at::kDouble && !rcond.has_value()) cut = std::numeric_limits<double>::epsilon() * std::max(m, n);
  at::Tensor x, sv = at::empty({0}, opts), rank = at::empty({0}, opts.dtype(at::kLong));
  bool svd_driver = driver == "gelsd" || driver == "gelss";
  if (svd_driver) {
    auto [U, S, Vh] = at::linalg_svd(A, /*full_matrices=*/false);
    at::Tensor keep = at::gt(S, at::mul(S.amax(-1, true), cut));
    at::Tensor inv = at::where(keep, at::reciprocal(S), at::zeros_like(S));
    x = at::matmul(Vh.mH(), at::mul(inv.unsqueeze(-1), at::matmul(U.mH(), b)));
    sv = S;
    rank = keep.sum(-1);
  } else if (m >= n) {
    auto [Q, Rm] = at::linalg_qr(A, "reduced");
    x = at::linalg_solve_triangular(Rm, at::matmul(Q.mH(), b), /*upper=*/true);
  } else {  // minimum-norm solution from the QR of A^H
    auto [Q, Rm] = at::linalg_qr(A.mH(), "reduced");
    x = at::matmul(Q, at::linalg_solve_triangular(Rm.mH(), b, /*upper=*/false));
  }
  if (driver == "gelsy") rank = at::full(batch, std::min(m, n), opts.dtype(at::kLong));
  at::Tensor residuals = at::empty({0}, opts);
  bool full_rank = !svd_driver || at::all(at::eq(rank, n)).item<bool>();
  if (m > n && driver != "gelsy" && full_rank) {
    at::Tensor r = at::sub(at::matmul(A, x), b);
    residuals = at::mul(r, r).sum(-2);
    if (vector) residuals = residuals.squeeze(-1);
  }
  if (vector) x = x.squeeze(-1);
  return {x, residuals, rank, sv};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> LstsqOut(
    const at::Tensor& A, const at::Tensor& B, std::optional<double> rcond, std::optional<c10::string_view> driver,
    at::Tensor& solution, at::Tensor& residuals, at::Tensor& rank, at::Tensor& singular_values) {
  auto [x, res, rk, sv] = Lstsq(A, B, rcond, driver);
  OutOf(x, solution);
  OutOf(res, residuals);
  OutOf(rk, rank);
  OutOf(sv, singular_values);
  return {solution, residuals, rank, singular_values};
}

// Meta kernels PyTorch lacks for ops the lowering table covers: the generic kernel infers
// result types through Meta.
at::Tensor LogcumsumexpMeta(const at::Tensor& self, int64_t) { return at::empty_like(self); }
// geqrf(A) -> (a, tau): a column-major like LAPACK's, tau of size min(m, n).
std::tuple<at::Tensor, at::Tensor> GeqrfMeta(const at::Tensor& self) {
  TORCH_CHECK(self.dim() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
  auto a = at::empty_like(self.mT(), at::MemoryFormat::Contiguous).mT();
  auto tau_size = self.sizes().vec();
  tau_size.pop_back();
  tau_size.back() = std::min(self.size(-2), self.size(-1));
  return {a, at::empty(tau_size, self.options())};
}

std::tuple<at::Tensor&, at::Tensor&> GeqrfOutMeta(const at::Tensor& self, at::Tensor& a, at::Tensor& tau) {
  auto [ra, rtau] = GeqrfMeta(self);
  at::native::resize_output(a, ra.sizes());
  at::native::resize_output(tau, rtau.sizes());
  return {a, tau};
}

// Histograms: hist has one entry per bin, edges one more.
std::tuple<at::Tensor, at::Tensor> HistogramBinsMeta(const at::Tensor& self, int64_t bins, std::optional<at::ArrayRef<double>>,
                                                     const std::optional<at::Tensor>&, bool) {
  TORCH_CHECK(bins > 0, "histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  return {at::empty({bins}, self.options()), at::empty({bins + 1}, self.options())};
}
std::tuple<at::Tensor&, at::Tensor&> HistogramBinsOutMeta(const at::Tensor& self, int64_t bins,
                                                          std::optional<at::ArrayRef<double>> range,
                                                          const std::optional<at::Tensor>& weight, bool density,
                                                          at::Tensor& hist, at::Tensor& edges) {
  auto [h, e] = HistogramBinsMeta(self, bins, range, weight, density);
  at::native::resize_output(hist, h.sizes());
  at::native::resize_output(edges, e.sizes());
  return {hist, edges};
}
std::tuple<at::Tensor, at::Tensor> HistogramEdgesMeta(const at::Tensor& self, const at::Tensor& bins,
                                                      const std::optional<at::Tensor>&, bool) {
  return {at::empty({std::max<int64_t>(bins.numel() - 1, 0)}, self.options()), at::empty_like(bins)};
}
std::tuple<at::Tensor&, at::Tensor&> HistogramEdgesOutMeta(const at::Tensor& self, const at::Tensor& bins,
                                                           const std::optional<at::Tensor>& weight, bool density,
                                                           at::Tensor& hist, at::Tensor& edges) {
  auto [h, e] = HistogramEdgesMeta(self, bins, weight, density);
  at::native::resize_output(hist, h.sizes());
  at::native::resize_output(edges, e.sizes());
  return {hist, edges};
}
std::vector<at::Tensor> HistogramddEdgesMeta(const at::Tensor& self, at::IntArrayRef bins,
                                             std::optional<at::ArrayRef<double>>, const std::optional<at::Tensor>&, bool) {
  std::vector<at::Tensor> edges;
  for (int64_t b : bins) edges.push_back(at::empty({b + 1}, self.options()));
  return edges;
}
at::Tensor HistogramddCountsMeta(const at::Tensor& self, at::IntArrayRef bins, std::optional<at::ArrayRef<double>>,
                                 const std::optional<at::Tensor>&, bool) {
  return at::empty(bins, self.options());
}
at::Tensor HistogramddTensorsMeta(const at::Tensor& self, at::TensorList bins, const std::optional<at::Tensor>&, bool) {
  std::vector<int64_t> sizes;
  for (const at::Tensor& b : bins) sizes.push_back(std::max<int64_t>(b.numel() - 1, 0));
  return at::empty(sizes, self.options());
}

at::Tensor& LogcumsumexpOutMeta(const at::Tensor& self, int64_t, at::Tensor& out) {
  at::native::resize_output(out, self.sizes());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("bincount", Bincount);
  m.impl("equal", Equal);
  m.impl("index.Tensor", Index);
  m.impl("index.Tensor_out", IndexOut);
  m.impl("linalg_lstsq", Lstsq);
  m.impl("linalg_lstsq.out", LstsqOut);
  m.impl("masked_select", MaskedSelect);
  m.impl("masked_select.out", MaskedSelectOut);
  m.impl("nonzero", Nonzero);
  m.impl("nonzero.out", NonzeroOut);
  m.impl("repeat_interleave.Tensor", RepeatInterleave);
  m.impl("_unique", Unique);
  m.impl("_unique2", Unique2);
  m.impl("unique_consecutive", torch::CppFunction::makeFromBoxedFunction<&UniqueConsecutiveBoxed>());
}

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_logcumsumexp", LogcumsumexpMeta);
  m.impl("_logcumsumexp.out", LogcumsumexpOutMeta);
  m.impl("geqrf", GeqrfMeta);
  m.impl("histogram.bin_ct", HistogramBinsMeta);
  m.impl("histogram.bin_ct_out", HistogramBinsOutMeta);
  m.impl("histogram.bins_tensor", HistogramEdgesMeta);
  m.impl("histogram.bins_tensor_out", HistogramEdgesOutMeta);
  m.impl("_histogramdd_bin_edges", HistogramddEdgesMeta);
  m.impl("_histogramdd_from_bin_cts", HistogramddCountsMeta);
  m.impl("_histogramdd_from_bin_tensors", HistogramddTensorsMeta);
  m.impl("geqrf.a", GeqrfOutMeta);
}

}  // namespace tpu::aten
