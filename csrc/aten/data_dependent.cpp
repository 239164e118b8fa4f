// Ops whose result size depends on the data (nonzero, masked_select, boolean-mask indexing,
// unique, repeat_interleave without output_size). No Meta kernel can size their outputs, so they are
// native kernels here: a lowered op counts on the device, the host reads the count (a
// synchronisation point, as on CUDA), then lowered ops of known size compute the result.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "common.h"
#include "op_kernel.h"

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

at::Tensor& LogcumsumexpOutMeta(const at::Tensor& self, int64_t, at::Tensor& out) {
  at::native::resize_output(out, self.sizes());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("equal", Equal);
  m.impl("index.Tensor", Index);
  m.impl("index.Tensor_out", IndexOut);
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
  m.impl("geqrf.a", GeqrfOutMeta);
}

}  // namespace tpu::aten
