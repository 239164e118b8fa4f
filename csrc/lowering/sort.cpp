// Order statistics: sort, topk, kthvalue, median, mode, searchsorted. All sort with
// stablehlo.sort (stable, NaN as the largest value, as PyTorch orders it) and pick positions.
#include <cmath>

#include "helpers.h"

namespace tpu::lowering {
namespace {

// (values, indices) of x sorted along dim.
std::pair<Value, Value> SortWithIndices(Ctx& ctx, Value x, int64_t dim, bool descending) {
  Value idx = ctx.b.Iota({ElemType::S64, x.type.dims}, dim);
  auto r = SortAlong(ctx, {x, idx}, dim, descending);
  return {r[0], r[1]};
}

// x[..., pos[...], ...] along dim, pos with x's shape except 1 at dim; result keeps that 1.
Value TakeAt(Ctx& ctx, Value x, int64_t dim, Value pos) {
  return GatherPoints(ctx, x, CoordsAlongDim(ctx, pos, dim, x.type.rank()));
}

// The first `k` entries along dim.
Value Head(Ctx& ctx, Value x, int64_t dim, int64_t k) {
  std::vector<int64_t> start(x.type.rank(), 0), limit = x.type.dims, ones(x.type.rank(), 1);
  limit[dim] = k;
  return ctx.b.Slice(x, start, limit, ones);
}

// sort(self, dim, descending) / sort.stable(self, stable, dim, descending)
std::vector<Value> SortRule(Ctx& ctx, Value x, int64_t dim, bool descending) {
  if (x.type.rank() == 0) return {x, ctx.b.ConstantInt(0, ctx.out(1))};
  auto [v, i] = SortWithIndices(ctx, x, WrapDim(dim, x.type.rank()), descending);
  return {v, i};
}
std::vector<Value> LowerSort(Ctx& ctx, const Args& a) {
  return SortRule(ctx, a.tensor(0), a.int_or(1, -1), a.bool_or(2, false));
}
std::vector<Value> LowerSortStable(Ctx& ctx, const Args& a) {
  return SortRule(ctx, a.tensor(0), a.int_or(2, -1), a.bool_or(3, false));
}

// topk(self, k, dim, largest, sorted): the k largest (smallest) along dim, in order.
std::vector<Value> LowerTopk(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  int64_t k = a.int_(1);
  if (x.type.rank() == 0) return {x, ctx.b.ConstantInt(0, ctx.out(1))};
  int64_t dim = WrapDim(a.int_or(2, -1), x.type.rank());
  auto [v, i] = SortWithIndices(ctx, x, dim, a.bool_or(3, true));
  return {Head(ctx, v, dim, k), Head(ctx, i, dim, k)};
}

// Positions `pos` (x's shape with 1 at dim) of the ascending sort of x: (values, indices)
// reshaped to the outputs (keepdim or not).
std::vector<Value> PickSorted(Ctx& ctx, Value sorted, Value idx, int64_t dim, Value pos) {
  Value v = TakeAt(ctx, sorted, dim, pos), i = TakeAt(ctx, idx, dim, pos);
  return {ctx.b.Reshape(v, ctx.out(0).dims), ctx.b.Reshape(i, ctx.out(1).dims)};
}

TensorType PosType(const Value& x, int64_t dim) {
  TensorType t{ElemType::S64, x.type.dims};
  t.dims[dim] = 1;
  return t;
}

// Non-NaN count along dim, shape with 1 at dim (s64).
Value CountNotNan(Ctx& ctx, Value x, int64_t dim) {
  Value ok = ctx.b.Convert(Not(ctx, IsNan(ctx, x)), ElemType::S64);
  Value c = ctx.b.Reduce(ok, ctx.b.ConstantInt(0, {ElemType::S64, {}}), {dim}, "add");
  return ctx.b.Reshape(c, PosType(x, dim).dims);
}

// kthvalue(self, k, dim, keepdim): the k-th smallest (1-based).
std::vector<Value> LowerKthvalue(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (x.type.rank() == 0) return {x, ctx.b.ConstantInt(0, ctx.out(1))};
  int64_t dim = WrapDim(a.int_or(2, -1), x.type.rank());
  auto [v, i] = SortWithIndices(ctx, x, dim, false);
  return PickSorted(ctx, v, i, dim, ctx.b.ConstantInt(a.int_(1) - 1, PosType(x, dim)));
}

// median.dim / nanmedian.dim: the lower median. median returns the first NaN of a row that
// has one (NaN sorts last, so it sits at the non-NaN count); nanmedian skips NaN.
template <bool kIgnoreNan>
std::vector<Value> LowerMedianDim(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (x.type.rank() == 0) return {x, ctx.b.ConstantInt(0, ctx.out(1))};
  int64_t dim = WrapDim(a.int_(1), x.type.rank());
  int64_t n = x.type.dims[dim];
  if (n == 0) throw Unsupported("median of an empty dimension");
  auto [v, i] = SortWithIndices(ctx, x, dim, false);
  Value c = CountNotNan(ctx, x, dim);
  Value one = ctx.b.ConstantInt(1, c.type), two = ctx.b.ConstantInt(2, c.type);
  Value pos;
  if (kIgnoreNan) {
    Value half = Div(ctx, Sub(ctx, c, one), two);
    pos = ctx.b.Select(ctx.b.Compare(Cmp::EQ, c, ctx.b.ConstantInt(0, c.type)), ctx.b.ConstantInt(0, c.type), half);
  } else {
    pos = ctx.b.Select(ctx.b.Compare(Cmp::EQ, c, ctx.b.ConstantInt(n, c.type)), ctx.b.ConstantInt((n - 1) / 2, c.type), c);
  }
  return PickSorted(ctx, v, i, dim, pos);
}

// median(self) / nanmedian(self) over all elements; NaN for an empty input.
template <bool kIgnoreNan>
std::vector<Value> LowerMedianAll(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (x.type.numel() == 0) return {ctx.b.Constant(NAN, ctx.out())};
  x = ctx.b.Reshape(x, {x.type.numel()});
  std::vector<Arg> args(2);
  args[0].kind = Arg::Kind::Tensor;
  args[0].value = x;
  args[1].kind = Arg::Kind::Int;
  Ctx sub{ctx.b, {ctx.out(), {ElemType::S64, {}}}, ctx.common};
  auto r = LowerMedianDim<kIgnoreNan>(sub, Args(args));
  for (auto& c : sub.checks) ctx.checks.push_back(c);
  return {r[0]};
}

// mode(self, dim, keepdim): the most frequent value (the smallest among equally frequent
// ones) and the last index where it occurs. Sorted runs: each position learns where its run
// started (a max-scan), run ends carry the run length, and the longest run wins.
std::vector<Value> LowerMode(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (x.type.rank() == 0) return {x, ctx.b.ConstantInt(0, ctx.out(1))};
  int64_t dim = WrapDim(a.int_or(1, -1), x.type.rank());
  int64_t n = x.type.dims[dim], r = x.type.rank();
  if (n == 0) throw Unsupported("mode of an empty dimension");
  auto [s, idx] = SortWithIndices(ctx, x, dim, false);
  TensorType pos_t{ElemType::S64, x.type.dims};
  Value iota = ctx.b.Iota(pos_t, dim);
  std::vector<int64_t> zeros(r, 0), ones(r, 1), lim = x.type.dims, start = zeros;
  // differs[i] = s[i] != s[i-1] (true at i == 0); differs_next[i] = s[i] != s[i+1] (true at n-1).
  std::vector<int64_t> low = zeros, high = zeros;
  lim[dim] = n - 1;
  Value prev = ctx.b.Slice(s, zeros, lim, ones);
  start[dim] = 1;
  Value next = ctx.b.Slice(s, start, x.type.dims, ones);
  Value t = ctx.b.Constant(1, {ElemType::Pred, {}});
  low[dim] = 1;
  Value starts = ctx.b.Pad(ctx.b.Compare(Cmp::NE, next, prev), t, low, high, zeros);
  low[dim] = 0;
  high[dim] = 1;
  Value ends = ctx.b.Pad(ctx.b.Compare(Cmp::NE, prev, next), t, low, high, zeros);
  Value minus1 = ctx.b.ConstantInt(-1, pos_t);
  Value run_start = Scan(ctx, {ctx.b.Select(starts, iota, minus1)}, dim, {ctx.b.ConstantInt(-1, {ElemType::S64, {}})},
                         [&](const std::vector<Value>& e, const std::vector<Value>& l) {
                           return std::vector<Value>{ctx.b.Binary("maximum", e[0], l[0])};
                         })[0];
  Value len = Add(ctx, Sub(ctx, iota, run_start), ctx.b.ConstantInt(1, pos_t));
  len = ctx.b.Select(ends, len, ctx.b.ConstantInt(0, pos_t));
  Value best = ctx.b.Reduce(len, ctx.b.ConstantInt(0, {ElemType::S64, {}}), {dim}, "maximum");
  Value hit = ctx.b.Compare(Cmp::EQ, len, Unreduce(ctx, best, x.type.dims, {dim}));
  Value cand = ctx.b.Select(hit, iota, ctx.b.ConstantInt(n, pos_t));
  Value pos = ctx.b.Reduce(cand, ctx.b.ConstantInt(n, {ElemType::S64, {}}), {dim}, "minimum");
  return PickSorted(ctx, s, idx, dim, ctx.b.Reshape(pos, PosType(x, dim).dims));
}

// searchsorted(sorted_sequence, values, out_int32, right, side, sorter): per value, the count
// of entries e of its row with !(e >= v) (left) or !(e > v) (right), which is where binary
// search lands in a sorted row. Rows are the last dim; a 1-D sequence serves every value.
Value SearchSorted(Ctx& ctx, Value seq, Value values, bool right, Value sorter) {
  int64_t n = seq.type.dims.back();
  if (sorter.valid()) seq = TakeAt(ctx, seq, seq.type.rank() - 1, sorter);
  ElemType e = ctx.common;
  seq = ConvertTo(ctx, seq, e);
  values = ConvertTo(ctx, values, e);
  std::vector<int64_t> dims = values.type.dims;
  dims.push_back(n);
  int64_t vr = values.type.rank();
  std::vector<int64_t> vmap(vr), smap;
  for (int64_t i = 0; i < vr; ++i) vmap[i] = i;
  if (seq.type.rank() == 1) {
    smap = {vr};
  } else {
    for (int64_t i = 0; i + 1 < seq.type.rank(); ++i) smap.push_back(i);
    smap.push_back(vr);
  }
  Value s = ctx.b.BroadcastInDim(seq, dims, smap), v = ctx.b.BroadcastInDim(values, dims, vmap);
  Value below = Not(ctx, ctx.b.Compare(right ? Cmp::GT : Cmp::GE, s, v));
  Value count = ctx.b.Reduce(ctx.b.Convert(below, ElemType::S64), ctx.b.ConstantInt(0, {ElemType::S64, {}}), {vr}, "add");
  return ConvertTo(ctx, count, ctx.out().elem);
}

std::vector<Value> LowerSearchSorted(Ctx& ctx, const Args& a) {
  if (a.tensor(0).type.numel() == 0 || a.tensor(0).type.dims.back() == 0) return {ctx.b.ConstantInt(0, ctx.out())};
  bool right = a.bool_or(3, false);
  std::string side = a.str_or(4, "");
  if (!side.empty()) right = side == "right";
  Value sorter = a.optional_tensor(5);
  if (sorter.valid()) {
    sorter = ConvertTo(ctx, sorter, ElemType::S64);
    if (sorter.type.numel() > 0) {
      int64_t n = a.tensor(0).type.dims.back();
      TensorType st = sorter.type;
      Value bad = ctx.b.Binary("or", ctx.b.Compare(Cmp::LT, sorter, ctx.b.ConstantInt(0, st)),
                               ctx.b.Compare(Cmp::GE, sorter, ctx.b.ConstantInt(n, st)));
      std::vector<int64_t> all(st.rank());
      for (int64_t i = 0; i < st.rank(); ++i) all[i] = i;
      ctx.AddCheck(ctx.b.Reduce(bad, ctx.b.Constant(0, {ElemType::Pred, {}}), all, "or"),
                   "torch.searchsorted(): sorter index out of range", Ctx::ErrorKind::Runtime);
    }
  }
  return {SearchSorted(ctx, a.tensor(0), a.tensor(1), right, sorter)};
}

// bucketize(values, boundaries, out_int32, right) = searchsorted(boundaries, values, right).
std::vector<Value> LowerBucketize(Ctx& ctx, const Args& a) {
  if (a.tensor(1).type.numel() == 0) return {ctx.b.ConstantInt(0, ctx.out())};
  return {SearchSorted(ctx, a.tensor(1), a.tensor(0), a.bool_or(3, false), Value{})};
}

}  // namespace

TPU_LOWERING("aten::bucketize.Scalar", LowerBucketize);
TPU_LOWERING("aten::bucketize.Tensor", LowerBucketize);
TPU_LOWERING("aten::kthvalue", LowerKthvalue);
TPU_LOWERING("aten::median", LowerMedianAll<false>);
TPU_LOWERING("aten::median.dim", LowerMedianDim<false>);
TPU_LOWERING("aten::mode", LowerMode);
TPU_LOWERING("aten::nanmedian", LowerMedianAll<true>);
TPU_LOWERING("aten::nanmedian.dim", LowerMedianDim<true>);
TPU_LOWERING("aten::searchsorted.Scalar", LowerSearchSorted);
TPU_LOWERING("aten::searchsorted.Tensor", LowerSearchSorted);
TPU_LOWERING("aten::sort", LowerSort);
TPU_LOWERING("aten::sort.stable", LowerSortStable);
TPU_LOWERING("aten::topk", LowerTopk);

}  // namespace tpu::lowering
