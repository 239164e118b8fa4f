#include "nn_util.h"

#include <cstdio>

namespace tpu::lowering::nn {

Value Bin(Ctx& ctx, const char* op, Value x, Value y) { return ctx.b.Binary(op, x, y); }

Value Scalar(Ctx& ctx, double v, const Value& like) { return ctx.b.Constant(v, like.type); }

namespace {
Value Dense(Ctx& ctx, const std::vector<std::string>& items, ElemType elem) {
  TensorType t{elem, {static_cast<int64_t>(items.size())}};
  std::string lit = "[";
  for (size_t i = 0; i < items.size(); ++i) lit += (i ? ", " : "") + items[i];
  lit += "]";
  return ctx.b.Op1("stablehlo.constant", {}, t, "value = dense<" + lit + "> : " + t.str());
}
}  // namespace

Value ConstI64(Ctx& ctx, const std::vector<int64_t>& v) {
  std::vector<std::string> items;
  for (int64_t x : v) items.push_back(std::to_string(x));
  return Dense(ctx, items, ElemType::S64);
}

Value ConstF32(Ctx& ctx, const std::vector<float>& v) {
  std::vector<std::string> items;
  char buf[32];
  for (float x : v) {
    std::snprintf(buf, sizeof(buf), "%.9e", static_cast<double>(x));  // round-trips every f32
    items.push_back(buf);
  }
  return Dense(ctx, items, ElemType::F32);
}

Value ConstFloats(Ctx& ctx, const std::vector<double>& v, ElemType elem) {
  if (elem == ElemType::F32 || elem == ElemType::F16 || elem == ElemType::BF16) {
    std::vector<float> f(v.begin(), v.end());
    return ConvertTo(ctx, ConstF32(ctx, f), elem);
  }
  std::vector<std::string> items;
  char buf[40];
  for (double x : v) {
    std::snprintf(buf, sizeof(buf), "%.17e", x);
    items.push_back(buf);
  }
  return Dense(ctx, items, elem);
}

Value ConstPred(Ctx& ctx, const std::vector<bool>& v) {
  std::vector<std::string> items;
  for (bool x : v) items.push_back(x ? "true" : "false");
  return Dense(ctx, items, ElemType::Pred);
}

Value Along(Ctx& ctx, Value v, const std::vector<int64_t>& dims, int64_t dim) {
  return ctx.b.BroadcastInDim(v, dims, {dim});
}

std::vector<int64_t> Iota(int64_t n, int64_t from) {
  std::vector<int64_t> v;
  for (int64_t i = from; i < n; ++i) v.push_back(i);
  return v;
}

Value SumOver(Ctx& ctx, Value x, const std::vector<int64_t>& dims) {
  return ctx.b.Reduce(x, ctx.b.Constant(0, {x.type.elem, {}}), dims, "add");
}

Value Unreduce(Ctx& ctx, Value r, const std::vector<int64_t>& full, const std::vector<int64_t>& reduced) {
  std::vector<int64_t> mapping;
  for (int64_t i = 0; i < static_cast<int64_t>(full.size()); ++i) {
    bool gone = false;
    for (int64_t d : reduced) gone |= d == i;
    if (!gone) mapping.push_back(i);
  }
  return ctx.b.BroadcastInDim(r, full, mapping);
}

Value SumToShape(Ctx& ctx, Value v, const std::vector<int64_t>& to) {
  int64_t lead = v.type.rank() - static_cast<int64_t>(to.size());
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < v.type.rank(); ++i)
    if (i < lead || (to[i - lead] == 1 && v.type.dims[i] != 1)) dims.push_back(i);
  return ctx.b.Reshape(SumOver(ctx, v, dims), to);
}

Value Take(Ctx& ctx, Value x, int64_t dim, Value idx) {
  int64_t r = x.type.rank(), n = idx.type.numel();
  std::vector<int64_t> offset_dims, slice_sizes = x.type.dims, out_dims = x.type.dims;
  for (int64_t i = 0; i < r; ++i)
    if (i != dim) offset_dims.push_back(i);
  slice_sizes[dim] = 1;
  out_dims[dim] = n;
  std::string attrs = "dimension_numbers = #stablehlo.gather<offset_dims = [" + shlo::JoinInts(offset_dims) +
                      "], collapsed_slice_dims = [" + std::to_string(dim) + "], start_index_map = [" +
                      std::to_string(dim) + "], index_vector_dim = 1>, slice_sizes = " + shlo::DenseI64(slice_sizes) +
                      ", indices_are_sorted = false";
  return ctx.b.Op1("stablehlo.gather", {x, ctx.b.Reshape(idx, {n, 1})}, {x.type.elem, out_dims}, attrs);
}

namespace {
// The step of `pos` when it is an arithmetic progression with a positive step (or one entry).
int64_t EvenStep(const std::vector<int64_t>& pos) {
  if (pos.size() == 1) return 1;
  int64_t step = pos[1] - pos[0];
  if (step <= 0) return 0;
  for (size_t i = 1; i < pos.size(); ++i)
    if (pos[i] - pos[i - 1] != step) return 0;
  return step;
}
}  // namespace

Value Pick(Ctx& ctx, Value x, int64_t dim, const std::vector<int64_t>& pos) {
  int64_t step = EvenStep(pos);
  if (step == 0) return Take(ctx, x, dim, ConstI64(ctx, pos));
  int64_t r = x.type.rank();
  std::vector<int64_t> start(r, 0), limit = x.type.dims, strides(r, 1);
  start[dim] = pos.front();
  limit[dim] = pos.back() + 1;
  strides[dim] = step;
  return ctx.b.Slice(x, start, limit, strides);
}

Value PickTranspose(Ctx& ctx, Value g, int64_t dim, const std::vector<int64_t>& pos, int64_t size) {
  int64_t step = EvenStep(pos);
  if (step == 0) return ScatterAddAlong(ctx, g, dim, ConstI64(ctx, pos), size);
  int64_t r = g.type.rank();
  std::vector<int64_t> low(r, 0), high(r, 0), interior(r, 0);
  low[dim] = pos.front();
  high[dim] = size - 1 - pos.back();
  interior[dim] = step - 1;
  return ctx.b.Pad(g, ctx.b.Constant(0, {g.type.elem, {}}), low, high, interior);
}

namespace {
std::string AddRegion(Ctx& ctx, ElemType elem) {
  TensorType s{elem, {}};
  int a = ctx.b.NewId(), b = ctx.b.NewId(), r = ctx.b.NewId();
  auto id = [](int i) { return "%" + std::to_string(i); };
  return "{\n    ^bb0(" + id(a) + ": " + s.str() + ", " + id(b) + ": " + s.str() + "):\n      " + id(r) +
         " = \"stablehlo.add\"(" + id(a) + ", " + id(b) + ") : (" + s.str() + ", " + s.str() + ") -> " + s.str() +
         "\n      \"stablehlo.return\"(" + id(r) + ") : (" + s.str() + ") -> ()\n    }";
}
}  // namespace

Value ScatterAddAlong(Ctx& ctx, Value g, int64_t dim, Value idx, int64_t size) {
  int64_t r = g.type.rank(), n = idx.type.numel();
  std::vector<int64_t> window, dims = g.type.dims;
  for (int64_t i = 0; i < r; ++i)
    if (i != dim) window.push_back(i);
  dims[dim] = size;
  TensorType t{g.type.elem, dims};
  std::string attrs = "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [" +
                      shlo::JoinInts(window) + "], inserted_window_dims = [" + std::to_string(dim) +
                      "], scatter_dims_to_operand_dims = [" + std::to_string(dim) +
                      "], index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false";
  return ctx.b.Op1("stablehlo.scatter", {ctx.b.Constant(0, t), ctx.b.Reshape(idx, {n, 1}), g}, t, attrs,
                   AddRegion(ctx, g.type.elem));
}

Value ScatterAddFlat(Ctx& ctx, Value updates, Value idx, int64_t n) {
  int64_t m = idx.type.numel();
  TensorType t{updates.type.elem, {n}};
  std::string attrs =
      "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], scatter_dims_to_operand_dims = "
      "[0], index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false";
  return ctx.b.Op1("stablehlo.scatter", {ctx.b.Constant(0, t), ctx.b.Reshape(idx, {m, 1}), ctx.b.Reshape(updates, {m})},
                   t, attrs, AddRegion(ctx, updates.type.elem));
}

Value Uniform01(Ctx& ctx, Value state, const std::vector<int64_t>& dims) {
  TensorType bits_type{ElemType::U32, dims};
  Value bits = ctx.b.Op("stablehlo.rng_bit_generator", {state}, {state.type, bits_type},
                        "rng_algorithm = #stablehlo<rng_algorithm PHILOX>")[1];
  // The top 23 bits as the mantissa of a float in [1, 2), minus 1.
  Value mantissa = ctx.b.Binary("shift_right_logical", bits, ctx.b.ConstantInt(9, bits_type));
  Value one_bits = ctx.b.Binary("or", mantissa, ctx.b.ConstantInt(0x3F800000, bits_type));
  Value f = ctx.b.BitcastConvert(one_bits, {ElemType::F32, dims});
  return ctx.b.Binary("subtract", f, ctx.b.Constant(1, f.type));
}

Value IsNan(Ctx& ctx, Value x) { return ctx.b.Compare(Cmp::NE, x, x); }

Value Reduce(Ctx& ctx, Value loss, int64_t reduction) {
  if (reduction == kNone) return loss;
  Value s = SumOver(ctx, loss, Iota(loss.type.rank()));
  if (reduction == kMean) s = Bin(ctx, "divide", s, ctx.b.Constant(static_cast<double>(loss.type.numel()), s.type));
  return s;
}

}  // namespace tpu::lowering::nn
