// Convolution and its gradients through stablehlo.convolution (N-d, strided, padded,
// dilated, grouped, transposed). PyTorch lays inputs out as [N, C, spatial...] and weights
// as [Cout, Cin/groups, k...] ([Cin, Cout/groups, k...] when transposed). f16/bf16 compute in
// f32. The gradients are convolutions too (the transposes of the forward one).
#include <algorithm>

#include "lowering.h"

namespace tpu::lowering {
namespace {

struct ConvParams {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  bool transposed = false;
  int64_t groups = 1;
};

// stride, padding, dilation, transposed, output_padding and groups of convolution and
// convolution_backward, with 1-element lists repeated per spatial dim.
ConvParams ParamsOf(const Args& a, int64_t spatial) {
  auto spread = [&](const std::vector<int64_t>& v, int64_t fill) {
    if (v.empty()) return std::vector<int64_t>(spatial, fill);
    if (v.size() == 1) return std::vector<int64_t>(spatial, v[0]);
    return v;
  };
  ConvParams p;
  p.stride = spread(a.ints("stride"), 1);
  p.padding = spread(a.ints("padding"), 0);
  p.dilation = spread(a.ints("dilation"), 1);
  p.transposed = a.bool_("transposed");
  p.output_padding = spread(a.ints("output_padding"), 0);
  p.groups = a.int_("groups");
  return p;
}

// "[b, f, 0, 1]"-style layout strings: `first` and `second` name dims 0 and 1.
std::string Layout(const char* first, const char* second, int64_t spatial) {
  std::string s = std::string("[") + first + ", " + second;
  for (int64_t i = 0; i < spatial; ++i) s += ", " + std::to_string(i);
  return s + "]";
}

struct ConvSpec {
  std::string lhs = "bf", rhs = "oi", out = "bf";  // what dims 0 and 1 of each operand are
  std::vector<int64_t> strides, lhs_dilation, rhs_dilation;
  std::vector<std::pair<int64_t, int64_t>> padding;
  int64_t feature_groups = 1, batch_groups = 1;
};

Value Convolution(Ctx& ctx, Value lhs, Value rhs, const ConvSpec& s, const TensorType& result) {
  // "rewriting computation to not contain X64 ... not implemented" for convolution.
  if (lhs.type.elem == ElemType::S64 || lhs.type.elem == ElemType::U64) RefuseOnTpu(ctx, "convolution of int64");
  int64_t n = lhs.type.rank() - 2;
  auto layout = [&](const std::string& two) {
    return Layout(std::string(1, two[0]).c_str(), std::string(1, two[1]).c_str(), n);
  };
  std::string pad;
  for (const auto& [lo, hi] : s.padding)
    pad += std::string(pad.empty() ? "" : ", ") + "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  // Convolutions follow the float32 matmul precision (DESIGN.md, Numerics).
  std::string precision = shlo::PrecisionName(shlo::ProductPrecision(lhs.type.elem, ctx.precision));
  std::string attrs = "batch_group_count = " + std::to_string(s.batch_groups) +
                      " : i64, dimension_numbers = #stablehlo.conv<" +
                      layout(s.lhs) + "x" + layout(s.rhs) + "->" + layout(s.out) +
                      ">, feature_group_count = " + std::to_string(s.feature_groups) +
                      " : i64, lhs_dilation = " + shlo::DenseI64(s.lhs_dilation) + ", padding = dense<[" + pad +
                      "]> : tensor<" + std::to_string(n) + "x2xi64>, precision_config = [#stablehlo<precision " +
                      precision + ">, #stablehlo<precision " + precision + ">], rhs_dilation = " +
                      shlo::DenseI64(s.rhs_dilation) + ", window_strides = " + shlo::DenseI64(s.strides);
  return ctx.b.Op1("stablehlo.convolution", {lhs, rhs}, result, attrs);
}

Value Reverse(Ctx& ctx, Value v, int64_t from_dim) {
  std::vector<int64_t> dims;
  for (int64_t d = from_dim; d < v.type.rank(); ++d) dims.push_back(d);
  return ctx.b.Op1("stablehlo.reverse", {v}, v.type, "dimensions = " + shlo::DenseI64(dims));
}

// [A, B/g, k...] -> [B, A/g, k...]: swaps the two feature dims of a weight within each group.
Value SwapGroupedFeatures(Ctx& ctx, Value w, int64_t groups) {
  const auto& d = w.type.dims;
  std::vector<int64_t> split = {groups, d[0] / groups, d[1]};
  split.insert(split.end(), d.begin() + 2, d.end());
  std::vector<int64_t> perm = {0, 2, 1};
  for (size_t i = 3; i < split.size(); ++i) perm.push_back(static_cast<int64_t>(i));
  Value t = ctx.b.Transpose(ctx.b.Reshape(w, split), perm);
  std::vector<int64_t> merged = {d[1] * groups, d[0] / groups};
  merged.insert(merged.end(), d.begin() + 2, d.end());
  return ctx.b.Reshape(t, merged);
}

std::vector<int64_t> Spatial(const Value& v) { return {v.type.dims.begin() + 2, v.type.dims.end()}; }

// y = conv(x, w): the forward convolution (w is [Cout, Cin/g, k...]), sized as `result`. The
// high padding is what yields that size: less than `padding` when the last window does not
// fit, and negative (trailing inputs cut) for the input grad of a transposed convolution
// with output_padding, whose extra outputs no input reaches.
Value Forward(Ctx& ctx, Value x, Value w, const ConvParams& p, const TensorType& result) {
  std::vector<int64_t> k = Spatial(w), in = Spatial(x);
  ConvSpec s;
  s.strides = p.stride;
  s.rhs_dilation = p.dilation;
  s.lhs_dilation.assign(p.stride.size(), 1);
  for (size_t i = 0; i < k.size(); ++i) {
    int64_t lo = p.padding[i];
    int64_t hi = (result.dims[2 + i] - 1) * p.stride[i] + p.dilation[i] * (k[i] - 1) + 1 - in[i] - lo;
    if (hi < 0) {
      std::vector<int64_t> limit = x.type.dims;
      limit[2 + i] += hi;
      x = ctx.b.Slice(x, std::vector<int64_t>(limit.size(), 0), limit, std::vector<int64_t>(limit.size(), 1));
      hi = 0;
    }
    s.padding.emplace_back(lo, hi);
  }
  s.feature_groups = p.groups;
  return Convolution(ctx, x, w, s, result);
}

// The transpose of Forward with respect to x: given dy (shaped like y), the input-shaped
// result. Also the forward of a transposed convolution. `in_sizes` are x's spatial sizes.
Value InputGrad(Ctx& ctx, Value dy, Value w, const ConvParams& p, const TensorType& result) {
  std::vector<int64_t> k = Spatial(w), out = Spatial(dy), in(result.dims.begin() + 2, result.dims.end());
  ConvSpec s;
  s.strides.assign(k.size(), 1);
  s.lhs_dilation = p.stride;
  s.rhs_dilation = p.dilation;
  for (size_t i = 0; i < k.size(); ++i) {
    int64_t lo = p.dilation[i] * (k[i] - 1) - p.padding[i];
    int64_t hi = in[i] + p.dilation[i] * (k[i] - 1) - (out[i] - 1) * p.stride[i] - 1 - lo;
    s.padding.emplace_back(lo, hi);
  }
  s.feature_groups = p.groups;
  return Convolution(ctx, dy, Reverse(ctx, SwapGroupedFeatures(ctx, w, p.groups), 2), s, result);
}

// The transpose of Forward with respect to w:
// dw[o, i, k] = sum over n, pos of dy[n, o, pos] * x[n, i, pos * stride + k * dilation - pad].
Value WeightGrad(Ctx& ctx, Value x, Value dy, const ConvParams& p, const TensorType& result) {
  std::vector<int64_t> k(result.dims.begin() + 2, result.dims.end()), out = Spatial(dy), in = Spatial(x);
  ConvSpec s;
  s.lhs = "fb";  // x: dim 0 (N) is the contraction, dim 1 (Cin) the batch
  s.rhs = "io";  // dy: dim 0 (N) contracts, dim 1 (Cout) gives output features
  s.out = "fb";  // result [Cout, Cin/g, k...]
  s.strides = p.dilation;
  s.rhs_dilation = p.stride;
  s.lhs_dilation.assign(k.size(), 1);
  for (size_t i = 0; i < k.size(); ++i) {
    int64_t lo = p.padding[i];
    int64_t hi = (k[i] - 1) * p.dilation[i] + (out[i] - 1) * p.stride[i] + 1 - in[i] - lo;
    if (hi < 0) {  // trailing inputs no window reaches
      std::vector<int64_t> limit = x.type.dims;
      limit[2 + i] += hi;
      x = ctx.b.Slice(x, std::vector<int64_t>(limit.size(), 0), limit, std::vector<int64_t>(limit.size(), 1));
      hi = 0;
    }
    s.padding.emplace_back(lo, hi);
  }
  s.batch_groups = p.groups;
  return Convolution(ctx, x, dy, s, result);
}

TensorType Compute(const TensorType& t) { return {AccumulatorType(t.elem), t.dims}; }

Value AddBias(Ctx& ctx, Value y, Value bias) {
  return ctx.b.Binary("add", y, ctx.b.BroadcastInDim(ConvertTo(ctx, bias, y.type.elem), y.type.dims, {1}));
}

// convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups)
std::vector<Value> LowerConvolution(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  if (a.tensor("input").type.rank() < 3) throw Unsupported("convolution of an unbatched input");
  ElemType c = AccumulatorType(t.elem);
  Value x = ConvertTo(ctx, a.tensor("input"), c), w = ConvertTo(ctx, a.tensor("weight"), c);
  ConvParams p = ParamsOf(a, x.type.rank() - 2);
  Value y = p.transposed ? InputGrad(ctx, x, w, p, Compute(t)) : Forward(ctx, x, w, p, Compute(t));
  if (!a.is_none("bias")) y = AddBias(ctx, y, a.tensor("bias"));
  return {ConvertTo(ctx, y, t.elem)};
}

// convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation,
// transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias)
std::vector<Value> LowerConvolutionBackward(Ctx& ctx, const Args& a) {
  ElemType c = AccumulatorType(ctx.out(0).elem);
  Value dy = ConvertTo(ctx, a.tensor("grad_output"), c), x = ConvertTo(ctx, a.tensor("input"), c);
  Value w = ConvertTo(ctx, a.tensor("weight"), c);
  if (x.type.rank() < 3) throw Unsupported("convolution of an unbatched input");
  ConvParams p = ParamsOf(a, x.type.rank() - 2);
  const auto& mask = a.raw(a.index("output_mask")).ints;  // bool[3]
  std::vector<Value> out;
  auto want = [&](size_t i) { return i >= mask.size() || mask[i] != 0; };
  // For a transposed convolution the roles of input and output swap.
  if (want(0)) {
    TensorType r = Compute(ctx.out(0));
    Value dx = p.transposed ? Forward(ctx, dy, w, p, r) : InputGrad(ctx, dy, w, p, r);
    out.push_back(ConvertTo(ctx, dx, ctx.out(0).elem));
  } else {
    out.push_back(ctx.b.Constant(0, ctx.out(0)));
  }
  if (want(1)) {
    TensorType r = Compute(ctx.out(1));
    Value dw = p.transposed ? WeightGrad(ctx, dy, x, p, r) : WeightGrad(ctx, x, dy, p, r);
    out.push_back(ConvertTo(ctx, dw, ctx.out(1).elem));
  } else {
    out.push_back(ctx.b.Constant(0, ctx.out(1)));
  }
  if (want(2)) {
    std::vector<int64_t> dims = {0};
    for (int64_t d = 2; d < dy.type.rank(); ++d) dims.push_back(d);
    Value sum = ctx.b.Reduce(dy, ctx.b.Constant(0, {c, {}}), dims, "add");
    out.push_back(ConvertTo(ctx, ctx.b.Reshape(sum, ctx.out(2).dims), ctx.out(2).elem));
  } else {
    out.push_back(ctx.b.Constant(0, ctx.out(2)));
  }
  return out;
}

}  // namespace

TPU_LOWERING("aten::convolution", LowerConvolution);
TPU_LOWERING("aten::convolution_backward", LowerConvolutionBackward);

}  // namespace tpu::lowering
