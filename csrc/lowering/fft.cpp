// Discrete Fourier transforms (the _fft_* primitives torch.fft decomposes into) through
// stablehlo.fft, which transforms up to three innermost dims: the transformed dims are moved
// last, transformed in groups of three, and moved back. XLA's inverse transforms divide by
// n; PyTorch's `normalization` (0: none, 1: 1/sqrt(n), 2: 1/n) is applied on top.
#include <cmath>

#include "helpers.h"

namespace tpu::lowering {
namespace {

ElemType RealOf(ElemType c) { return c == ElemType::C128 ? ElemType::F64 : ElemType::F32; }
ElemType ComplexOf(ElemType r) { return r == ElemType::F64 ? ElemType::C128 : ElemType::C64; }

// x with `dims` moved to the end (in order); `perm` receives the permutation.
Value MoveLast(Ctx& ctx, Value x, const std::vector<int64_t>& dims, std::vector<int64_t>& perm) {
  perm = KeptDims(x.type.rank(), dims);
  perm.insert(perm.end(), dims.begin(), dims.end());
  return ctx.b.Transpose(x, perm);
}

Value MoveBack(Ctx& ctx, Value x, const std::vector<int64_t>& perm) {
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return ctx.b.Transpose(x, inverse);
}

// One stablehlo.fft over the last `lengths.size()` dims.
Value Fft(Ctx& ctx, Value x, const char* type, const std::vector<int64_t>& lengths, const TensorType& result) {
  if (x.type.elem == ElemType::F64 || x.type.elem == ElemType::C128)  // "Unexpected operand type for FFT"
    RefuseOnTpu(ctx, std::string("FFT of ") + (x.type.elem == ElemType::F64 ? "float64" : "complex128"));
  std::string attrs = std::string("fft_type = #stablehlo<fft_type ") + type + ">, fft_length = " + shlo::DenseI64(lengths);
  return ctx.b.Op1("stablehlo.fft", {x}, result, attrs);
}

// Complex-to-complex transform of the trailing `k` dims of x, three at a time.
Value FftTrailing(Ctx& ctx, Value x, int64_t k, bool forward) {
  int64_t r = x.type.rank();
  for (int64_t end = r; end > r - k;) {
    int64_t begin = std::max(r - k, end - 3);
    std::vector<int64_t> group(x.type.dims.begin() + begin, x.type.dims.begin() + end);
    if (end == r) {
      x = Fft(ctx, x, forward ? "FFT" : "IFFT", group, x.type);
    } else {  // move the group last, transform, move back
      std::vector<int64_t> dims;
      for (int64_t d = begin; d < end; ++d) dims.push_back(d);
      std::vector<int64_t> perm;
      Value moved = MoveLast(ctx, x, dims, perm);
      x = MoveBack(ctx, Fft(ctx, moved, forward ? "FFT" : "IFFT", group, moved.type), perm);
    }
    end = begin;
  }
  return x;
}

// Multiplies by the real factor that turns XLA's normalisation into PyTorch's.
Value Normalize(Ctx& ctx, Value x, int64_t n, int64_t mode, bool inverse) {
  double want = mode == 0 ? 1.0 : mode == 1 ? 1.0 / std::sqrt(static_cast<double>(n)) : 1.0 / static_cast<double>(n);
  double have = inverse ? 1.0 / static_cast<double>(n) : 1.0;
  double f = want / have;
  if (f == 1.0) return x;
  return Mul(ctx, x, ctx.b.Constant(f, x.type));
}

int64_t SignalSize(const std::vector<int64_t>& dims_of, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= dims_of[d];
  return n;
}

// _fft_c2c(self, dim, normalization, forward)
std::vector<Value> LowerFftC2C(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t);
  std::vector<int64_t> dims = WrapDims(a.ints(1), t.rank());
  if (dims.empty() || t.numel() == 0) return {x};
  bool forward = a.bool_(3);
  std::vector<int64_t> perm;
  Value moved = MoveLast(ctx, x, dims, perm);
  Value y = MoveBack(ctx, FftTrailing(ctx, moved, static_cast<int64_t>(dims.size()), forward), perm);
  return {Normalize(ctx, y, SignalSize(t.dims, dims), a.int_(2), !forward)};
}

// _fft_r2c(self, dim, normalization, onesided): real to complex; onesided keeps the
// n/2 + 1 non-redundant outputs of the last transformed dim.
std::vector<Value> LowerFftR2C(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = a.tensor(0);
  x = ConvertTo(ctx, x, RealOf(t.elem));
  std::vector<int64_t> dims = WrapDims(a.ints(1), x.type.rank());
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  int64_t n = SignalSize(x.type.dims, dims);
  std::vector<int64_t> perm;
  Value moved = MoveLast(ctx, x, dims, perm);
  int64_t k = static_cast<int64_t>(dims.size()), r = moved.type.rank();
  Value y;
  if (!a.bool_(3)) {  // two-sided: a complex transform of the real input
    Value c = ctx.b.Op1("stablehlo.complex", {moved, ctx.b.Constant(0, moved.type)}, {t.elem, moved.type.dims});
    y = FftTrailing(ctx, c, k, true);
  } else {
    int64_t last = moved.type.dims.back();
    std::vector<int64_t> out_dims = moved.type.dims;
    out_dims.back() = last / 2 + 1;
    int64_t group = std::min<int64_t>(k, 3);
    std::vector<int64_t> lengths(moved.type.dims.end() - group, moved.type.dims.end());
    y = Fft(ctx, moved, "RFFT", lengths, {t.elem, out_dims});
    if (k > 3) {  // the remaining leading transformed dims as complex transforms
      std::vector<int64_t> rest;
      for (int64_t d = r - k; d < r - 3; ++d) rest.push_back(d);
      std::vector<int64_t> p2;
      Value m2 = MoveLast(ctx, y, rest, p2);
      y = MoveBack(ctx, FftTrailing(ctx, m2, k - 3, true), p2);
    }
  }
  return {Normalize(ctx, MoveBack(ctx, y, perm), n, a.int_(2), false)};
}

// _fft_c2r(self, dim, normalization, last_dim_size): complex (one-sided in the last dim) to
// real; the last dim is cropped or zero-padded to last_dim_size / 2 + 1 first.
std::vector<Value> LowerFftC2R(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = ConvertTo(ctx, a.tensor(0), ComplexOf(t.elem));
  std::vector<int64_t> dims = WrapDims(a.ints(1), x.type.rank());
  int64_t last_size = a.int_(3);
  if (t.numel() == 0) return {ctx.b.Constant(0, t)};
  std::vector<int64_t> perm;
  Value moved = MoveLast(ctx, x, dims, perm);
  int64_t k = static_cast<int64_t>(dims.size()), r = moved.type.rank();
  int64_t half = last_size / 2 + 1, have = moved.type.dims.back();
  if (have > half) {
    std::vector<int64_t> start(r, 0), limit = moved.type.dims, ones(r, 1);
    limit.back() = half;
    moved = ctx.b.Slice(moved, start, limit, ones);
  } else if (have < half) {
    std::vector<int64_t> low(r, 0), high(r, 0), interior(r, 0);
    high.back() = half - have;
    moved = ctx.b.Pad(moved, ctx.b.Constant(0, {moved.type.elem, {}}), low, high, interior);
  }
  if (k > 3) {  // leading transformed dims first, as inverse complex transforms
    std::vector<int64_t> rest;
    for (int64_t d = r - k; d < r - 3; ++d) rest.push_back(d);
    std::vector<int64_t> p2;
    Value m2 = MoveLast(ctx, moved, rest, p2);
    moved = MoveBack(ctx, FftTrailing(ctx, m2, k - 3, false), p2);
  }
  int64_t group = std::min<int64_t>(k, 3);
  std::vector<int64_t> lengths(moved.type.dims.end() - group, moved.type.dims.end());
  lengths.back() = last_size;
  std::vector<int64_t> out_dims = moved.type.dims;
  out_dims.back() = last_size;
  Value y = Fft(ctx, moved, "IRFFT", lengths, {t.elem, out_dims});
  int64_t n = 1;
  for (int64_t i = r - k; i < r - 1; ++i) n *= moved.type.dims[i];
  n *= last_size;
  // XLA divided by the product of the IRFFT lengths and (for k > 3) the IFFT lengths: all of n.
  return {Normalize(ctx, MoveBack(ctx, y, perm), n, a.int_(2), true)};
}

}  // namespace

TPU_LOWERING("aten::_fft_c2c", LowerFftC2C);
TPU_LOWERING("aten::_fft_c2r", LowerFftC2R);
TPU_LOWERING("aten::_fft_r2c", LowerFftR2C);

}  // namespace tpu::lowering
