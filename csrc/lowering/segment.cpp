// Segment reductions (torch.segment_reduce): runs of `lengths[..., s]` consecutive elements
// along `axis` reduce to one value each. Segment boundaries are run-time values, so each
// segment is a mask over the axis: out[b, s] = reduce over d of (start_s <= d < end_s ? x[b, d]
// : identity), O(S * D) per row, which suits the short rows this op is used for.
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "helpers.h"

namespace tpu::lowering {
namespace {

// The geometry of one call: data viewed as (B, D, R) around `axis`, S segments per row.
struct Segments {
  int64_t b = 1, d = 0, r = 1, s = 0;
  Value start, end;  // (B, S) s64
  Value member;      // (B, S, D) pred: element d lies in segment s
};

// Segments from `lengths` (B..., S) or `offsets` (B..., S + 1).
Segments Segment(Ctx& ctx, const TensorType& data, Value lengths, Value offsets, int64_t axis) {
  Segments g;
  for (int64_t i = 0; i < axis; ++i) g.b *= data.dims[i];
  for (int64_t i = axis + 1; i < data.rank(); ++i) g.r *= data.dims[i];
  g.d = data.dims[axis];
  if (offsets.valid()) {
    g.s = offsets.type.dims.back() - 1;
    Value o = ctx.b.Reshape(ConvertTo(ctx, offsets, ElemType::S64), {g.b, g.s + 1});
    g.start = ctx.b.Slice(o, {0, 0}, {g.b, g.s}, {1, 1});
    g.end = ctx.b.Slice(o, {0, 1}, {g.b, g.s + 1}, {1, 1});
  } else {
    g.s = lengths.type.dims.back();
    Value len = ctx.b.Reshape(ConvertTo(ctx, lengths, ElemType::S64), {g.b, g.s});
    // start_s = sum of lengths before s: a masked sum over a (B, S, S) triangle.
    std::vector<int64_t> bss = {g.b, g.s, g.s};
    Value before = ctx.b.Compare(Cmp::LT, ctx.b.Iota({ElemType::S64, bss}, 2), ctx.b.Iota({ElemType::S64, bss}, 1));
    Value terms = ctx.b.Select(before, ctx.b.BroadcastInDim(len, bss, {0, 2}), ctx.b.ConstantInt(0, {ElemType::S64, bss}));
    g.start = ctx.b.Reduce(terms, ctx.b.ConstantInt(0, {ElemType::S64, {}}), {2}, "add");
    g.end = Add(ctx, g.start, len);
  }
  std::vector<int64_t> bsd = {g.b, g.s, g.d};
  Value d = ctx.b.Iota({ElemType::S64, bsd}, 2);
  g.member = And(ctx, ctx.b.Compare(Cmp::GE, d, ctx.b.BroadcastInDim(g.start, bsd, {0, 1})),
                 ctx.b.Compare(Cmp::LT, d, ctx.b.BroadcastInDim(g.end, bsd, {0, 1})));
  return g;
}

Value Lengths(Ctx& ctx, const Segments& g, ElemType t) { return ctx.b.Convert(Sub(ctx, g.end, g.start), t); }

// The value an empty segment gets, and the identity the reduction starts from.
Value Initial(Ctx& ctx, const std::string& reduce, Value initial, const TensorType& t) {
  if (initial.valid()) return CastTo(ctx, initial, t);
  if (reduce == "max") return ctx.b.Constant(-std::numeric_limits<double>::infinity(), t);
  if (reduce == "min") return ctx.b.Constant(std::numeric_limits<double>::infinity(), t);
  return ctx.b.Constant(reduce == "prod" ? 1 : 0, t);
}

// segment_reduce(data, reduce, lengths?, indices?, offsets?, axis, unsafe, initial?)
std::vector<Value> LowerSegmentReduce(Ctx& ctx, const Args& a) {
  Value data = a.tensor("data");
  const std::string& reduce = a.str("reduce");
  int64_t axis = WrapDim(a.int_("axis"), data.type.rank());
  Segments g = Segment(ctx, data.type, a.optional_tensor("lengths"), a.optional_tensor("offsets"), axis);
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value x = ctx.b.Reshape(ConvertTo(ctx, data, acc), {g.b, g.d, g.r});
  std::vector<int64_t> bsdr = {g.b, g.s, g.d, g.r}, bsr = {g.b, g.s, g.r};
  Value initial = Initial(ctx, reduce, a.optional_tensor("initial"), {acc, {}});
  // Elements outside a segment contribute the operation's identity; the reduction starts
  // from `initial` (an initial of a sum or product enters once).
  Value identity = reduce == "max" || reduce == "min" ? initial : ctx.b.Constant(reduce == "prod" ? 1 : 0, {acc, {}});
  Value in = ctx.b.BroadcastInDim(g.member, bsdr, {0, 1, 2});
  Value masked = ctx.b.Select(in, ctx.b.BroadcastInDim(x, bsdr, {0, 2, 3}), BroadcastTo(ctx, identity, bsdr));
  static const std::map<std::string, const char*> kOps = {
      {"sum", "add"}, {"mean", "add"}, {"max", "maximum"}, {"min", "minimum"}, {"prod", "multiply"}};
  auto op = kOps.find(reduce);
  if (op == kOps.end()) throw std::invalid_argument("segment_reduce: unsupported reduction " + reduce);
  Value y = ctx.b.Reduce(masked, initial, {2}, op->second);
  if (reduce == "mean") {
    // (initial + sum) / length; an empty segment keeps its initial value, or is 0/0 = NaN
    // without one, as on the CPU.
    Value len = ctx.b.BroadcastInDim(Lengths(ctx, g, acc), bsr, {0, 1});
    Value mean = Div(ctx, y, len);
    if (!a.is_none("initial")) y = ctx.b.Select(ctx.b.Compare(Cmp::EQ, len, ctx.b.Constant(0, len.type)), y, mean);
    else y = mean;
  }
  return {ctx.b.Reshape(ConvertTo(ctx, y, ctx.out().elem), ctx.out().dims)};
}

// _segment_reduce_backward(grad, output, data, reduce, lengths?, offsets?, axis, initial?):
// sum: grad of the segment; mean: divided by its length; max/min: to the elements equal to
// the result (or NaN), a positive gradient split among ties as the CPU kernel does; prod:
// grad * output / x, with the product of the other elements where x is 0 or NaN.
std::vector<Value> LowerSegmentReduceBackward(Ctx& ctx, const Args& a) {
  Value data = a.tensor("data");
  const std::string& reduce = a.str("reduce");
  int64_t axis = WrapDim(a.int_("axis"), data.type.rank());
  Segments g = Segment(ctx, data.type, a.optional_tensor("lengths"), a.optional_tensor("offsets"), axis);
  ElemType acc = AccumulatorType(ctx.out().elem);
  std::vector<int64_t> bsdr = {g.b, g.s, g.d, g.r}, bsr = {g.b, g.s, g.r}, bdr = {g.b, g.d, g.r};
  Value x = ctx.b.Reshape(ConvertTo(ctx, data, acc), bdr);
  Value grad = ctx.b.Reshape(ConvertTo(ctx, a.tensor("grad"), acc), bsr);
  Value out = ctx.b.Reshape(ConvertTo(ctx, a.tensor("output"), acc), bsr);
  Value in = ctx.b.BroadcastInDim(g.member, bsdr, {0, 1, 2});
  Value zero = ctx.b.Constant(0, {acc, bsdr});
  auto spread = [&](Value per_segment) {  // (B, S, R) -> each element's segment value (B, D, R)
    Value v = ctx.b.Select(in, ctx.b.BroadcastInDim(per_segment, bsdr, {0, 1, 3}), zero);
    return ctx.b.Reduce(v, ctx.b.Constant(0, {acc, {}}), {1}, "add");
  };
  Value len = ctx.b.BroadcastInDim(Lengths(ctx, g, acc), bsr, {0, 1});
  Value gx;
  if (reduce == "sum") {
    gx = spread(grad);
  } else if (reduce == "mean") {
    Value safe = ctx.b.Select(ctx.b.Compare(Cmp::EQ, len, ctx.b.Constant(0, len.type)), ctx.b.Constant(1, len.type), len);
    gx = spread(Div(ctx, grad, safe));
  } else if (reduce == "max" || reduce == "min") {
    Value hit = Or(ctx, ctx.b.Compare(Cmp::EQ, x, spread(out)), IsNan(ctx, x));
    Value one = ctx.b.Constant(1, x.type), zx = ctx.b.Constant(0, x.type);
    Value hits = ctx.b.Select(in, ctx.b.BroadcastInDim(ctx.b.Select(hit, one, zx), bsdr, {0, 2, 3}), zero);
    Value count = spread(ctx.b.Reduce(hits, ctx.b.Constant(0, {acc, {}}), {2}, "add"));
    gx = ctx.b.Select(hit, spread(grad), zx);
    Value split = And(ctx, ctx.b.Compare(Cmp::GE, count, ctx.b.Constant(2, count.type)), ctx.b.Compare(Cmp::GT, gx, zx));
    gx = ctx.b.Select(split, Div(ctx, gx, count), gx);
  } else if (reduce == "prod") {
    Value initial = Initial(ctx, reduce, a.optional_tensor("initial"), {acc, {}});
    Value general = Div(ctx, spread(Mul(ctx, grad, out)), x);
    // The product of the segment's other elements: (B, S, D, D') with d' != d.
    std::vector<int64_t> bsddr = {g.b, g.s, g.d, g.d, g.r};
    Value others = And(ctx, ctx.b.BroadcastInDim(g.member, bsddr, {0, 1, 3}),
                       ctx.b.Compare(Cmp::NE, ctx.b.Iota({ElemType::S64, bsddr}, 2), ctx.b.Iota({ElemType::S64, bsddr}, 3)));
    Value terms = ctx.b.Select(others, ctx.b.BroadcastInDim(x, bsddr, {0, 3, 4}), BroadcastTo(ctx, ctx.b.Constant(1, {acc, {}}), bsddr));
    Value exclusive = Mul(ctx, ctx.b.Reduce(terms, ctx.b.Constant(1, {acc, {}}), {3}, "multiply"),
                          BroadcastTo(ctx, initial, bsdr));  // (B, S, D, R)
    Value excl = ctx.b.Reduce(ctx.b.Select(in, Mul(ctx, exclusive, ctx.b.BroadcastInDim(grad, bsdr, {0, 1, 3})), zero),
                              ctx.b.Constant(0, {acc, {}}), {1}, "add");
    Value special = Or(ctx, ctx.b.Compare(Cmp::EQ, x, ctx.b.Constant(0, x.type)), IsNan(ctx, x));
    gx = ctx.b.Select(special, excl, general);
  } else {
    throw std::invalid_argument("segment_reduce: unsupported reduction " + reduce);
  }
  return {ctx.b.Reshape(ConvertTo(ctx, gx, ctx.out().elem), ctx.out().dims)};
}

}  // namespace

TPU_LOWERING("aten::_segment_reduce_backward", LowerSegmentReduceBackward);
TPU_LOWERING("aten::segment_reduce", LowerSegmentReduce);

}  // namespace tpu::lowering
