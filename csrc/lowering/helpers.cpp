// The helper vocabulary of the lowering families (helpers.h).
#include <cmath>
#include <cstdio>
#include <limits>

#include "helpers.h"

namespace tpu::lowering {

Value Add(Ctx& ctx, Value x, Value y) { return ctx.b.Binary("add", x, y); }
Value Sub(Ctx& ctx, Value x, Value y) { return ctx.b.Binary("subtract", x, y); }
Value Mul(Ctx& ctx, Value x, Value y) { return ctx.b.Binary("multiply", x, y); }
Value Div(Ctx& ctx, Value x, Value y) { return ctx.b.Binary("divide", x, y); }
Value And(Ctx& ctx, Value x, Value y) { return ctx.b.Binary("and", x, y); }
Value Or(Ctx& ctx, Value x, Value y) { return ctx.b.Binary("or", x, y); }
Value Not(Ctx& ctx, Value x) { return ctx.b.Unary("not", x); }
Value Bin(Ctx& ctx, const char* op, Value x, Value y) { return ctx.b.Binary(op, x, y); }
Value IsNan(Ctx& ctx, Value x) {
  if (!IsFloat(x.type.elem)) return ctx.b.Constant(0, {ElemType::Pred, x.type.dims});
  return ctx.b.Compare(Cmp::NE, x, x);
}
Value Apply(Ctx& ctx, const char* op, Value x) { return ctx.b.Op1(op, {x}, x.type); }
Value Apply(Ctx& ctx, const char* op, Value x, Value y) { return ctx.b.Op1(op, {x, y}, x.type); }
TensorType OpmathType(const TensorType& out) { return {AccumulatorType(out.elem), out.dims}; }
Value OpmathOperand(Ctx& ctx, const Args& a, size_t arg, size_t out) {
  return CastTo(ctx, a.tensor(arg), OpmathType(ctx.out(out)));
}
std::vector<Value> OpmathResult(Ctx& ctx, Value v, size_t out) { return {ConvertTo(ctx, v, ctx.out(out).elem)}; }
Value Const(Ctx& ctx, double v, const Value& like) { return ctx.b.Constant(v, like.type); }
Value ConstI(Ctx& ctx, int64_t v, const Value& like) { return ctx.b.ConstantInt(v, like.type); }

// reduce_precision models f16's exponent range but flushes its subnormals (below 2^-14) to zero;
// those lie on a fixed grid of 2^-24 and are rounded on it (scaling by a power of two is exact).
Value RoundToF16(Ctx& ctx, Value x) {
  Value normal = ctx.b.Op1("stablehlo.reduce_precision", {x}, x.type, "exponent_bits = 5 : i32, mantissa_bits = 10 : i32");
  Value grid = Mul(ctx, ctx.b.Unary("round_nearest_even", Mul(ctx, x, Const(ctx, 16777216.0, x))),
                   Const(ctx, 1.0 / 16777216.0, x));
  Value subnormal = ctx.b.Compare(Cmp::LT, ctx.b.Unary("abs", x), Const(ctx, 1.0 / 16384.0, x));
  return ctx.b.Select(subnormal, grid, normal);
}

// log(exp(a) + exp(b)) without overflow: max + log1p(exp(min - max)); an -inf operand leaves
// the other, +inf stays +inf, NaN propagates.
Value LogAddExp(Ctx& ctx, Value a, Value b) {
  Value mx = ctx.b.Select(ctx.b.Compare(Cmp::GT, a, b), a, b);
  Value mn = ctx.b.Select(ctx.b.Compare(Cmp::GT, a, b), b, a);
  Value r = Add(ctx, mx, ctx.b.Unary("log_plus_one", ctx.b.Unary("exponential", Sub(ctx, mn, mx))));
  Value inf = Const(ctx, INFINITY, a);
  Value keep = Or(ctx, ctx.b.Compare(Cmp::EQ, mn, Const(ctx, -INFINITY, a)), ctx.b.Compare(Cmp::EQ, mx, inf));
  r = ctx.b.Select(keep, mx, r);
  return ctx.b.Select(Or(ctx, IsNan(ctx, a), IsNan(ctx, b)), Add(ctx, a, b), r);
}

std::vector<int64_t> KeptDims(int64_t rank, const std::vector<int64_t>& dims) {
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < rank; ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced |= d == i;
    if (!reduced) kept.push_back(i);
  }
  return kept;
}

Value Unreduce(Ctx& ctx, Value v, const std::vector<int64_t>& dims_full, const std::vector<int64_t>& reduced) {
  return ctx.b.BroadcastInDim(v, dims_full, KeptDims(static_cast<int64_t>(dims_full.size()), reduced));
}

Value AnyTrue(Ctx& ctx, Value pred) {
  std::vector<int64_t> all(pred.type.rank());
  for (int64_t i = 0; i < pred.type.rank(); ++i) all[i] = i;
  return ctx.b.Reduce(pred, ctx.b.Constant(0, {ElemType::Pred, {}}), all, "or");
}

Value IndexOutOfRange(Ctx& ctx, Value index, int64_t size, bool allow_negative) {
  Value i = ConvertTo(ctx, index, ElemType::S64);
  Value low = ctx.b.ConstantInt(allow_negative ? -size : 0, i.type);
  Value bad = Or(ctx, ctx.b.Compare(Cmp::LT, i, low), ctx.b.Compare(Cmp::GE, i, ctx.b.ConstantInt(size, i.type)));
  return AnyTrue(ctx, bad);
}

Value WrapIndex(Ctx& ctx, Value index, int64_t size) {
  Value i = ConvertTo(ctx, index, ElemType::S64);
  Value neg = ctx.b.Compare(Cmp::LT, i, ctx.b.ConstantInt(0, i.type));
  return ctx.b.Select(neg, Add(ctx, i, ctx.b.ConstantInt(size, i.type)), i);
}

std::vector<Value> Scan(Ctx& ctx, std::vector<Value> xs, int64_t dim, const std::vector<Value>& identity,
                        const Combine& combine, bool reverse) {
  const std::vector<int64_t> dims = xs[0].type.dims;
  int64_t n = dims[dim], r = static_cast<int64_t>(dims.size());
  std::vector<int64_t> zeros(r, 0), ones(r, 1);
  for (int64_t k = 1; k < n; k *= 2) {
    std::vector<Value> shifted;
    for (size_t j = 0; j < xs.size(); ++j) {
      std::vector<int64_t> start = zeros, limit = dims, low = zeros, high = zeros;
      if (reverse) {
        start[dim] = k;
        high[dim] = k;
      } else {
        limit[dim] = n - k;
        low[dim] = k;
      }
      Value part = ctx.b.Slice(xs[j], start, limit, ones);
      shifted.push_back(ctx.b.Pad(part, identity[j], low, high, zeros));
    }
    xs = combine(shifted, xs);
  }
  return xs;
}

Value ExclusiveCount(Ctx& ctx, Value pred) {
  Value c = ctx.b.Convert(pred, ElemType::S64);
  Value zero = ctx.b.ConstantInt(0, {ElemType::S64, {}});
  Value inclusive = Scan(ctx, {c}, 0, {zero}, [&](const std::vector<Value>& a, const std::vector<Value>& b) {
    return std::vector<Value>{Add(ctx, a[0], b[0])};
  })[0];
  return Sub(ctx, inclusive, c);
}

std::vector<Value> While(Ctx& ctx, const std::vector<Value>& init,
                         const std::function<Value(const std::vector<Value>&)>& cond,
                         const std::function<std::vector<Value>(const std::vector<Value>&)>& body) {
  std::vector<TensorType> types;
  for (const Value& v : init) types.push_back(v.type);
  std::string c = ctx.b.Region(types, [&](const std::vector<Value>& args) { return std::vector<Value>{cond(args)}; });
  std::string b = ctx.b.Region(types, body);
  return ctx.b.Op("stablehlo.while", init, types, "", c + ", " + b);
}

std::vector<Value> ForLoop(Ctx& ctx, int64_t n, const std::vector<Value>& init,
                           const std::function<std::vector<Value>(Value i, const std::vector<Value>&)>& body) {
  TensorType s64{ElemType::S64, {}};
  std::vector<Value> state = {ctx.b.ConstantInt(0, s64)};
  state.insert(state.end(), init.begin(), init.end());
  auto out = While(
      ctx, state, [&](const std::vector<Value>& v) { return ctx.b.Compare(Cmp::LT, v[0], ctx.b.ConstantInt(n, s64)); },
      [&](const std::vector<Value>& v) {
        std::vector<Value> rest(v.begin() + 1, v.end());
        std::vector<Value> next = body(v[0], rest);
        next.insert(next.begin(), Add(ctx, v[0], ctx.b.ConstantInt(1, s64)));
        return next;
      });
  return std::vector<Value>(out.begin() + 1, out.end());
}

std::vector<Value> SortAlong(Ctx& ctx, const std::vector<Value>& operands, int64_t dim, bool descending) {
  std::vector<TensorType> arg_types, result_types;
  for (const Value& v : operands) {
    TensorType scalar{v.type.elem, {}};
    arg_types.push_back(scalar);
    arg_types.push_back(scalar);
    result_types.push_back(v.type);
  }
  std::string region = ctx.b.Region(arg_types, [&](const std::vector<Value>& args) {
    Value a = args[0], b = args[1];
    // descending: a before b when a > b; NaN counts as the largest value in both orders.
    Value before = ctx.b.Compare(descending ? Cmp::GT : Cmp::LT, a, b);
    if (IsFloat(a.type.elem)) {
      Value a_nan = ctx.b.Compare(Cmp::NE, a, a), b_nan = ctx.b.Compare(Cmp::NE, b, b);
      Value nan_first = descending ? And(ctx, a_nan, Not(ctx, b_nan)) : And(ctx, Not(ctx, a_nan), b_nan);
      before = Or(ctx, before, nan_first);
    }
    return std::vector<Value>{before};
  });
  std::string attrs = "dimension = " + std::to_string(dim) + " : i64, is_stable = true";
  return ctx.b.Op("stablehlo.sort", operands, result_types, attrs, region);
}

Value GatherPoints(Ctx& ctx, Value x, Value coords) {
  int64_t r = x.type.rank();
  std::vector<int64_t> out_dims(coords.type.dims.begin(), coords.type.dims.end() - 1);
  std::vector<int64_t> all(r), ones(r, 1);
  for (int64_t d = 0; d < r; ++d) all[d] = d;
  std::string attrs = "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [" + shlo::JoinInts(all) +
                      "], start_index_map = [" + shlo::JoinInts(all) +
                      "], index_vector_dim = " + std::to_string(coords.type.rank() - 1) +
                      ">, slice_sizes = " + shlo::DenseI64(ones) + ", indices_are_sorted = false";
  return ctx.b.Op1("stablehlo.gather", {x, coords}, {x.type.elem, out_dims}, attrs);
}

Value ScatterPoints(Ctx& ctx, Value x, Value coords, Value updates, const std::string& combine) {
  return ScatterPointsWith(ctx, x, coords, updates, [&](Value old, Value update) {
    return combine.empty() ? update : ctx.b.Binary(combine, old, update);
  });
}

Value ScatterPointsWith(Ctx& ctx, Value x, Value coords, Value updates, const Combiner& combine) {
  int64_t r = x.type.rank();
  TensorType scalar{x.type.elem, {}};
  std::string region = ctx.b.Region({scalar, scalar}, [&](const std::vector<Value>& args) {
    return std::vector<Value>{combine(args[0], args[1])};
  });
  std::vector<int64_t> all(r);
  for (int64_t d = 0; d < r; ++d) all[d] = d;
  std::string attrs = "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [" + shlo::JoinInts(all) +
                      "], scatter_dims_to_operand_dims = [" + shlo::JoinInts(all) +
                      "], index_vector_dim = " + std::to_string(coords.type.rank() - 1) +
                      ">, indices_are_sorted = false, unique_indices = false";
  return ctx.b.Op1("stablehlo.scatter", {x, coords, updates}, x.type, attrs, region);
}

Value ScatterSlices(Ctx& ctx, Value x, int64_t dim, Value index, Value updates, const std::string& combine) {
  int64_t r = x.type.rank(), n = index.type.numel();
  // s32 indices where the dim allows: TPUs emulate s64 arithmetic.
  ElemType index_elem = x.type.dims[dim] <= std::numeric_limits<int32_t>::max() ? ElemType::S32 : ElemType::S64;
  Value idx = ctx.b.Reshape(ConvertTo(ctx, index, index_elem), {n, 1});
  TensorType scalar{x.type.elem, {}};
  std::string region = ctx.b.Region({scalar, scalar}, [&](const std::vector<Value>& args) {
    return std::vector<Value>{combine.empty() ? args[1] : ctx.b.Binary(combine, args[0], args[1])};
  });
  std::vector<int64_t> window;
  for (int64_t d = 0; d < r; ++d)
    if (d != dim) window.push_back(d);
  std::string attrs = "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [" + shlo::JoinInts(window) +
                      "], inserted_window_dims = [" + std::to_string(dim) + "], scatter_dims_to_operand_dims = [" +
                      std::to_string(dim) + "], index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false";
  return ctx.b.Op1("stablehlo.scatter", {x, idx, updates}, x.type, attrs, region);
}

Value CoordsAlongDim(Ctx& ctx, Value index, int64_t dim, int64_t rank) {
  std::vector<int64_t> coord_dims = index.type.dims;
  coord_dims.push_back(1);
  std::vector<Value> coords;
  for (int64_t d = 0; d < rank; ++d) {
    Value c = d == dim ? ConvertTo(ctx, index, ElemType::S64) : ctx.b.Iota({ElemType::S64, index.type.dims}, d);
    coords.push_back(ctx.b.Reshape(c, coord_dims));
  }
  return ctx.b.Concatenate(coords, rank);
}

// ---- nn families
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


Value Reduce(Ctx& ctx, Value loss, int64_t reduction) {
  if (reduction == kNone) return loss;
  Value s = SumOver(ctx, loss, Iota(loss.type.rank()));
  if (reduction == kMean) s = Bin(ctx, "divide", s, ctx.b.Constant(static_cast<double>(loss.type.numel()), s.type));
  return s;
}

// ---- matrices
namespace matrix {

int64_t R(const Value& v) { return v.type.rank(); }
std::vector<int64_t> Batch(const Value& v) { return std::vector<int64_t>(v.type.dims.begin(), v.type.dims.end() - 2); }
std::vector<int64_t> WithBatch(const std::vector<int64_t>& batch, std::initializer_list<int64_t> tail) {
  std::vector<int64_t> d = batch;
  d.insert(d.end(), tail);
  return d;
}
TensorType S64(const std::vector<int64_t>& dims) { return {ElemType::S64, dims}; }
Value Scalar64(Ctx& ctx, int64_t v) { return ctx.b.ConstantInt(v, S64({})); }
Value Zeros(Ctx& ctx, const Value& like) { return ctx.b.Constant(0, like.type); }

// The compute type of a linalg result: f32 for half types.
ElemType Compute(ElemType e) { return AccumulatorType(e); }

Value RowIota(Ctx& ctx, const Value& a) { return ctx.b.Iota(S64(a.type.dims), R(a) - 2); }
Value ColIota(Ctx& ctx, const Value& a) { return ctx.b.Iota(S64(a.type.dims), R(a) - 1); }
// A scalar or per-batch s64 index broadcast to `dims` (batch dims leading).
Value Bcast(Ctx& ctx, Value idx, const std::vector<int64_t>& dims) {
  std::vector<int64_t> map(idx.type.rank());
  for (int64_t i = 0; i < idx.type.rank(); ++i) map[i] = i;
  return ctx.b.BroadcastInDim(idx, dims, map);
}
// Column j of a [.., m, n] (j a scalar or per-batch index): [.., m].
Value Column(Ctx& ctx, Value a, Value j) {
  Value hit = ctx.b.Compare(Cmp::EQ, ColIota(ctx, a), Bcast(ctx, j, a.type.dims));
  return ctx.b.Reduce(ctx.b.Select(hit, a, Zeros(ctx, a)), ctx.b.Constant(0, {a.type.elem, {}}), {R(a) - 1}, "add");
}
// Row i of a: [.., n].
Value Row(Ctx& ctx, Value a, Value i) {
  Value hit = ctx.b.Compare(Cmp::EQ, RowIota(ctx, a), Bcast(ctx, i, a.type.dims));
  return ctx.b.Reduce(ctx.b.Select(hit, a, Zeros(ctx, a)), ctx.b.Constant(0, {a.type.elem, {}}), {R(a) - 2}, "add");
}
// [.., m] as every column / [.., n] as every row of a [.., m, n] array.
Value AsColumns(Ctx& ctx, Value v, const std::vector<int64_t>& dims) {
  std::vector<int64_t> map(v.type.rank());
  for (int64_t i = 0; i < v.type.rank(); ++i) map[i] = i;
  return ctx.b.BroadcastInDim(v, dims, map);
}
Value AsRows(Ctx& ctx, Value v, const std::vector<int64_t>& dims) {
  std::vector<int64_t> map(v.type.rank());
  for (int64_t i = 0; i + 1 < v.type.rank(); ++i) map[i] = i;
  map.back() = static_cast<int64_t>(dims.size()) - 1;
  return ctx.b.BroadcastInDim(v, dims, map);
}
Value Outer(Ctx& ctx, Value u, Value v) {
  std::vector<int64_t> dims = u.type.dims;
  dims.push_back(v.type.dims.back());
  return Mul(ctx, AsColumns(ctx, u, dims), AsRows(ctx, v, dims));
}
Value SumLast(Ctx& ctx, Value v) {
  return ctx.b.Reduce(v, ctx.b.Constant(0, {v.type.elem, {}}), {R(v) - 1}, "add");
}
Value Swap(Ctx& ctx, Value a) {
  std::vector<int64_t> perm(R(a));
  for (int64_t i = 0; i < R(a); ++i) perm[i] = i;
  std::swap(perm[R(a) - 1], perm[R(a) - 2]);
  return ctx.b.Transpose(a, perm);
}
Value MatMul(Ctx& ctx, Value a, Value b) {
  std::vector<int64_t> batch;
  for (int64_t i = 0; i + 2 < R(a); ++i) batch.push_back(i);
  return ctx.b.DotGeneral(a, b, batch, batch, {R(a) - 1}, {R(b) - 2}, a.type.elem);
}
Value Identity(Ctx& ctx, const TensorType& t) {
  TensorType it = S64(t.dims);
  int64_t r = t.rank();
  return ctx.b.Convert(ctx.b.Compare(Cmp::EQ, ctx.b.Iota(it, r - 2), ctx.b.Iota(it, r - 1)), t.elem);
}
Value Diagonal(Ctx& ctx, Value a) {
  Value eq = ctx.b.Compare(Cmp::EQ, RowIota(ctx, a), ColIota(ctx, a));
  return ctx.b.Reduce(ctx.b.Select(eq, a, Zeros(ctx, a)), ctx.b.Constant(0, {a.type.elem, {}}), {R(a) - 1}, "add");
}
// Keeps the part of a with col - row >= k (upper) or <= k (lower).
Value Triangle(Ctx& ctx, Value a, bool upper, int64_t k) {
  Value diff = Sub(ctx, ColIota(ctx, a), RowIota(ctx, a));
  Value keep = ctx.b.Compare(upper ? Cmp::GE : Cmp::LE, diff, ctx.b.ConstantInt(k, diff.type));
  return ctx.b.Select(keep, a, Zeros(ctx, a));
}
Value SliceMat(Ctx& ctx, Value a, int64_t rows, int64_t cols) {
  std::vector<int64_t> start(R(a), 0), limit = a.type.dims, ones(R(a), 1);
  limit[R(a) - 2] = rows;
  limit[R(a) - 1] = cols;
  return ctx.b.Slice(a, start, limit, ones);
}
// Broadcasts the batch dims of a and b to each other's (matrix dims kept).
void BroadcastBatch(Ctx& ctx, Value& a, Value& b) {
  std::vector<int64_t> ba = Batch(a), bb = Batch(b), out;
  size_t n = std::max(ba.size(), bb.size());
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i + ba.size() >= n ? ba[i + ba.size() - n] : 1, y = i + bb.size() >= n ? bb[i + bb.size() - n] : 1;
    out.push_back(x == 1 ? y : x);
  }
  auto expand = [&](Value v) {
    std::vector<int64_t> d = out;
    d.push_back(v.type.dims[R(v) - 2]);
    d.push_back(v.type.dims[R(v) - 1]);
    return BroadcastTo(ctx, v, d);
  };
  a = expand(a);
  b = expand(b);
}

// op(a) x = b (left) or x op(a) = b, a triangular.
Value TriSolve(Ctx& ctx, Value a, Value b, bool left, bool lower, bool unit, bool transpose) {
  std::string attrs = std::string("left_side = ") + (left ? "true" : "false") + ", lower = " + (lower ? "true" : "false") +
                      ", unit_diagonal = " + (unit ? "true" : "false") + ", transpose_a = #stablehlo<transpose " +
                      (transpose ? "TRANSPOSE" : "NO_TRANSPOSE") + ">";
  return ctx.b.Op1("stablehlo.triangular_solve", {a, b}, b.type, attrs);
}

// Sets entry j of a [.., k] vector to `value` [..].
Value SetAt(Ctx& ctx, Value vec, Value j, Value value) {
  Value idx = ctx.b.Iota(S64(vec.type.dims), R(vec) - 1);
  return ctx.b.Select(ctx.b.Compare(Cmp::EQ, idx, Bcast(ctx, j, vec.type.dims)), AsColumns(ctx, value, vec.type.dims), vec);
}
Value GetAt(Ctx& ctx, Value vec, Value j) {
  Value idx = ctx.b.Iota(S64(vec.type.dims), R(vec) - 1);
  return SumLast(ctx, ctx.b.Select(ctx.b.Compare(Cmp::EQ, idx, Bcast(ctx, j, vec.type.dims)), vec, Zeros(ctx, vec)));
}

// Rows of b [.., n, c] picked by perm [.., n]: result[j] = b[perm[j]].
Value PermuteRows(Ctx& ctx, Value b, Value perm) {
  std::vector<int64_t> map(R(perm));
  for (int64_t i = 0; i < R(perm); ++i) map[i] = i;
  Value full = ctx.b.BroadcastInDim(perm, b.type.dims, map);
  return GatherPoints(ctx, b, CoordsAlongDim(ctx, full, R(b) - 2, R(b)));
}

}  // namespace matrix

}  // namespace tpu::lowering
