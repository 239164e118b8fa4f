// Helpers shared by the sort, cumulative, indexing and reduction rules.
#include <cmath>

#include "helpers.h"

namespace tpu::lowering {

Value Add(Ctx& ctx, Value x, Value y) { return ctx.b.Binary("add", x, y); }
Value Sub(Ctx& ctx, Value x, Value y) { return ctx.b.Binary("subtract", x, y); }
Value Mul(Ctx& ctx, Value x, Value y) { return ctx.b.Binary("multiply", x, y); }
Value Div(Ctx& ctx, Value x, Value y) { return ctx.b.Binary("divide", x, y); }
Value And(Ctx& ctx, Value x, Value y) { return ctx.b.Binary("and", x, y); }
Value Or(Ctx& ctx, Value x, Value y) { return ctx.b.Binary("or", x, y); }
Value Not(Ctx& ctx, Value x) { return ctx.b.Unary("not", x); }
Value IsNan(Ctx& ctx, Value x) {
  if (!IsFloat(x.type.elem)) return ctx.b.Constant(0, {ElemType::Pred, x.type.dims});
  return ctx.b.Compare(Cmp::NE, x, x);
}
Value Const(Ctx& ctx, double v, const Value& like) { return ctx.b.Constant(v, like.type); }
Value ConstI(Ctx& ctx, int64_t v, const Value& like) { return ctx.b.ConstantInt(v, like.type); }

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
  int64_t r = x.type.rank();
  TensorType scalar{x.type.elem, {}};
  std::string region = ctx.b.Region({scalar, scalar}, [&](const std::vector<Value>& args) {
    if (combine.empty()) return std::vector<Value>{args[1]};
    return std::vector<Value>{ctx.b.Binary(combine, args[0], args[1])};
  });
  std::vector<int64_t> all(r);
  for (int64_t d = 0; d < r; ++d) all[d] = d;
  std::string attrs = "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [" + shlo::JoinInts(all) +
                      "], scatter_dims_to_operand_dims = [" + shlo::JoinInts(all) +
                      "], index_vector_dim = " + std::to_string(coords.type.rank() - 1) +
                      ">, indices_are_sorted = false, unique_indices = false";
  return ctx.b.Op1("stablehlo.scatter", {x, coords, updates}, x.type, attrs, region);
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

}  // namespace tpu::lowering
