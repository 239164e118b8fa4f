// aten::_grouped_mm, the mixture-of-experts matmul: one product per group, where int32 `offs`
// (inclusive running ends) cut a ragged dimension into groups. One program with static shapes;
// the offsets are read on the device only.
//   2-D x 3-D: rows of a [M,K] in group g times b[g] [K,N]                  -> [M,N]
//   3-D x 2-D: a[g] [M,K] times the columns of b [K,N] in group g           -> [M,N]
//   2-D x 2-D: the contraction is ragged: a[:, ks] @ b[ks, :] per group     -> [G,M,N]
//   3-D x 3-D: bmm                                                          -> [G,M,N]
// Rows (columns) past the last offset are zeros (the CPU leaves them uninitialised), an empty
// group of the 2-D x 2-D layout gives zeros (as on the CPU).
//
// Two formulations, chosen once per process from the platform (SetRaggedDot):
// - chlo.ragged_dot, which TPU and GPU compilers run natively;
// - tiles, for the XLA CPU plugin (it rejects ragged-dot): the ragged dimension is cut into
//   tiles of T rows; each (tile, group) pair that overlaps is one work item, at most
//   ceil(L/T) + G - 1 of them. Each item multiplies its tile by its group's matrix (gathered),
//   rows outside the group masked to zero, and the items are summed back into place. The
//   work is about (L + G*T) rows instead of G*L for a dense one-hot over groups.
#include <algorithm>
#include <atomic>
#include <map>

#include "helpers.h"

namespace tpu::lowering {
namespace {

std::atomic<bool> use_ragged_dot{false};
std::atomic<int64_t> lowered_ragged_dot{0}, lowered_tiled{0};

ElemType Acc(Ctx& ctx) { return AccumulatorType(ctx.out().elem); }

Value S64(Ctx& ctx, int64_t v) { return ctx.b.ConstantInt(v, {ElemType::S64, {}}); }
Value Row(Ctx& ctx, int64_t v, int64_t n) { return ctx.b.ConstantInt(v, {ElemType::S64, {n}}); }
// An s64 index array clamped to [0, hi].
Value ClampIndex(Ctx& ctx, Value v, int64_t hi) {
  return ctx.b.Binary("minimum", ctx.b.Binary("maximum", v, ConstI(ctx, 0, v)), ConstI(ctx, hi, v));
}

// Group boundaries as s64: start[g] = offs[g-1] (0 for g = 0), end[g] = offs[g].
std::pair<Value, Value> Bounds(Ctx& ctx, Value offs) {
  int64_t g = offs.type.dims[0];
  Value end = ConvertTo(ctx, offs, ElemType::S64);
  Value start = ctx.b.Pad(end, S64(ctx, 0), {1}, {-1}, {0});
  return {start, end};
}

// Offsets the CPU kernel would read out of bounds or as negative sizes raise at the next sync.
void CheckOffsets(Ctx& ctx, Value start, Value end, int64_t length) {
  if (end.type.numel() == 0) return;
  Value bad = Or(ctx, ctx.b.Compare(Cmp::LT, end, start), ctx.b.Compare(Cmp::GT, end, Const(ctx, length, end)));
  bad = Or(ctx, bad, ctx.b.Compare(Cmp::LT, end, Const(ctx, 0, end)));
  ctx.AddCheck(AnyTrue(ctx, bad), "_grouped_mm: offs must be non-decreasing and within [0, " + std::to_string(length) +
                                      "] (the length of the ragged dimension)");
}

// Takes slices of x along dim 0: result[i...] = x[index[i...]] (index s64, clamped by gather).
Value Take0(Ctx& ctx, Value x, Value index) {
  int64_t r = x.type.rank(), ir = index.type.rank();
  std::vector<int64_t> offset_dims, slice = x.type.dims, dims = index.type.dims;
  for (int64_t d = 1; d < r; ++d) {
    offset_dims.push_back(ir + d - 1);
    dims.push_back(x.type.dims[d]);
  }
  slice[0] = 1;
  std::string attrs = "dimension_numbers = #stablehlo.gather<offset_dims = [" + shlo::JoinInts(offset_dims) +
                      "], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = " +
                      std::to_string(ir) + ">, slice_sizes = " + shlo::DenseI64(slice) + ", indices_are_sorted = false";
  return ctx.b.Op1("stablehlo.gather", {x, index}, {x.type.elem, dims}, attrs);
}

// Adds slices along dim 0: x[index[i]] += updates[i]; out-of-range indices are dropped.
Value ScatterAdd0(Ctx& ctx, Value x, Value index, Value updates) {
  int64_t r = x.type.rank();
  std::vector<int64_t> window;
  for (int64_t d = 1; d < r; ++d) window.push_back(d);
  TensorType scalar{x.type.elem, {}};
  std::string region = ctx.b.Region({scalar, scalar}, [&](const std::vector<Value>& v) {
    return std::vector<Value>{ctx.b.Binary("add", v[0], v[1])};
  });
  std::string attrs = "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [" + shlo::JoinInts(window) +
                      "], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, "
                      "indices_are_sorted = false, unique_indices = false";
  return ctx.b.Op1("stablehlo.scatter", {x, ctx.b.Reshape(index, {index.type.dims[0], 1}), updates}, x.type, attrs,
                   region);
}

// How many of `bounds` are <= each of `points` ([n] s64): the group of a position is the count
// of group ends at or before it.
Value CountAtOrBelow(Ctx& ctx, Value bounds, Value points) {
  int64_t n = points.type.dims[0], g = bounds.type.dims[0];
  std::vector<int64_t> d = {n, g};
  Value le = ctx.b.Compare(Cmp::LE, ctx.b.BroadcastInDim(bounds, d, {1}), ctx.b.BroadcastInDim(points, d, {0}));
  return ctx.b.Reduce(ctx.b.Convert(le, ElemType::S64), S64(ctx, 0), {1}, "add");
}

// The tile size for a ragged length `length` over `groups`: items cost their T rows of work
// plus a gathered group matrix (worth about 16 rows); T = 1 needs no tile boundaries.
int64_t TileRows(int64_t length, int64_t groups) {
  int64_t best = 1;
  double best_cost = 17.0 * static_cast<double>(length);
  for (int64_t t = 2; t <= 256 && t < 2 * length; t *= 2) {
    double items = static_cast<double>((length + t - 1) / t + groups - 1);
    double cost = items * static_cast<double>(t + 16);
    if (cost < best_cost) best = t, best_cost = cost;
  }
  return best;
}

// The work items over a ragged length cut into tiles of `t`: per item its tile, its group
// (G when past the last item) and, per row of the tile, whether the row lies in that group.
struct Items {
  int64_t t = 1, tiles = 0, count = 0;
  Value tile, group, row_in_group;  // [P] s64, [P] s64, [P, t] i1
};

Items PlanItems(Ctx& ctx, Value start, Value end, int64_t length) {
  Items it;
  int64_t g = end.type.dims[0];
  it.t = TileRows(length, g);
  it.tiles = (length + it.t - 1) / it.t;
  if (it.t == 1) {
    // One row per item: its group is the number of group ends at or before it.
    it.count = length;
    it.tile = ctx.b.Iota({ElemType::S64, {length}}, 0);
    it.group = CountAtOrBelow(ctx, end, it.tile);
  } else {
    // Items of group g cover tiles first[g]..last[g]; items are numbered group by group.
    it.count = it.tiles + g - 1;
    Value tt = Row(ctx, it.t, g);
    Value first = Div(ctx, start, tt);
    Value last = Div(ctx, Sub(ctx, end, Row(ctx, 1, g)), tt);
    Value n = ctx.b.Select(ctx.b.Compare(Cmp::GT, end, start), Add(ctx, Sub(ctx, last, first), Row(ctx, 1, g)),
                           Row(ctx, 0, g));
    TensorType gg{ElemType::S64, {g, g}};
    Value upto = ctx.b.Compare(Cmp::LE, ctx.b.Iota(gg, 1), ctx.b.Iota(gg, 0));  // [g, h]: h <= g
    Value cum = ctx.b.Reduce(ctx.b.Select(upto, ctx.b.BroadcastInDim(n, {g, g}, {1}), ctx.b.ConstantInt(0, gg)),
                             S64(ctx, 0), {1}, "add");
    Value p = ctx.b.Iota({ElemType::S64, {it.count}}, 0);
    it.group = CountAtOrBelow(ctx, cum, p);
    Value gc = ClampIndex(ctx, it.group, g - 1);
    Value item0 = Sub(ctx, cum, n);
    it.tile = Add(ctx, ctx.b.Gather1D(first, gc), Sub(ctx, p, ctx.b.Gather1D(item0, gc)));
    it.tile = ClampIndex(ctx, it.tile, it.tiles - 1);
  }
  // Row r of item p is position tile*t + r; it belongs to the item when inside its group.
  std::vector<int64_t> pt = {it.count, it.t};
  Value gc = ClampIndex(ctx, it.group, g - 1);
  Value pos = Add(ctx, ctx.b.BroadcastInDim(Mul(ctx, it.tile, Row(ctx, it.t, it.count)), pt, {0}),
                  ctx.b.Iota({ElemType::S64, pt}, 1));
  Value lo = ctx.b.BroadcastInDim(ctx.b.Gather1D(start, gc), pt, {0});
  Value hi = ctx.b.BroadcastInDim(ctx.b.Gather1D(end, gc), pt, {0});
  Value valid = ctx.b.BroadcastInDim(ctx.b.Compare(Cmp::LT, it.group, Row(ctx, g, it.count)), pt, {0});
  it.row_in_group = And(ctx, valid, And(ctx, ctx.b.Compare(Cmp::GE, pos, lo), ctx.b.Compare(Cmp::LT, pos, hi)));
  return it;
}

// x [L, C] as tiles [tiles, t, C] (zero rows padded at the end).
Value Tiles(Ctx& ctx, Value x, const Items& it) {
  int64_t l = x.type.dims[0], c = x.type.dims[1];
  Value padded = ctx.b.Pad(x, ctx.b.Constant(0, {x.type.elem, {}}), {0, 0}, {it.tiles * it.t - l, 0}, {0, 0});
  return ctx.b.Reshape(padded, {it.tiles, it.t, c});
}

Value ZeroOutside(Ctx& ctx, Value v, Value in_group) {
  Value mask = ctx.b.BroadcastInDim(in_group, v.type.dims, {0, 1});
  return ctx.b.Select(mask, v, ctx.b.Constant(0, v.type));
}

// Ragged rows: out[i] = x[i] @ w[group of i] for x [L,K], w [G,K,N]; [L,N] in the accumulator.
Value TiledRows(Ctx& ctx, Value x, Value w, Value start, Value end) {
  int64_t l = x.type.dims[0], n = w.type.dims[2];
  Items it = PlanItems(ctx, start, end, l);
  Value wg = Take0(ctx, w, ClampIndex(ctx, it.group, w.type.dims[0] - 1));  // [P,K,N]
  Value xt = it.t == 1 ? ctx.b.Reshape(x, {l, 1, x.type.dims[1]}) : Take0(ctx, Tiles(ctx, x, it), it.tile);
  Value y = ctx.b.DotGeneral(xt, wg, {0}, {0}, {2}, {1}, Acc(ctx), ctx.precision);  // [P,t,N]
  y = ZeroOutside(ctx, y, it.row_in_group);
  if (it.t == 1) return ctx.b.Reshape(y, {l, n});
  Value sum = ScatterAdd0(ctx, ctx.b.Constant(0, {Acc(ctx), {it.tiles, it.t, n}}), it.tile, y);
  return ctx.b.Slice(ctx.b.Reshape(sum, {it.tiles * it.t, n}), {0, 0}, {l, n}, {1, 1});
}

// Ragged contraction: out[g] = a[:, ks of g] @ b[ks of g, :] for a [M,L], b [L,N]; [G,M,N].
Value TiledContraction(Ctx& ctx, Value a, Value b, Value start, Value end) {
  int64_t m = a.type.dims[0], l = a.type.dims[1], n = b.type.dims[1], g = end.type.dims[0];
  Items it = PlanItems(ctx, start, end, l);
  Value at = ZeroOutside(ctx, Take0(ctx, Tiles(ctx, ctx.b.Transpose(a, {1, 0}), it), it.tile), it.row_in_group);
  Value bt = Take0(ctx, Tiles(ctx, b, it), it.tile);
  Value y = ctx.b.DotGeneral(at, bt, {0}, {0}, {1}, {1}, Acc(ctx), ctx.precision);  // [P,M,N]
  return ScatterAdd0(ctx, ctx.b.Constant(0, {Acc(ctx), {g, m, n}}), ClampIndex(ctx, it.group, g - 1), y);
}

std::string Precision(Ctx& ctx, ElemType t) {
  std::string p = t == ElemType::F32 ? shlo::PrecisionName(ctx.precision) : "DEFAULT";
  return "precision_config = [#chlo<precision " + p + ">, #chlo<precision " + p + ">]";
}

Value RaggedDot(Ctx& ctx, Value lhs, Value rhs, Value sizes, const std::string& dims, std::vector<int64_t> out_dims) {
  std::string attrs = "ragged_dot_dimension_numbers = #chlo.ragged_dot<" + dims + ">, " + Precision(ctx, lhs.type.elem);
  return ctx.b.Op1("chlo.ragged_dot", {lhs, rhs, sizes}, {Acc(ctx), std::move(out_dims)}, attrs);
}

// x [L,K] with ragged rows times w [G,K,N] -> [L,N] in the accumulator type.
Value RaggedRows(Ctx& ctx, Value x, Value w, Value start, Value end) {
  if (!use_ragged_dot) return TiledRows(ctx, x, w, start, end);
  return RaggedDot(ctx, x, w, Sub(ctx, end, start),
                   "lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], "
                   "rhs_contracting_dimensions = [1], lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]",
                   {x.type.dims[0], w.type.dims[2]});
}

// a [M,L] times b [L,N] with the contraction ragged -> [G,M,N] in the accumulator type.
Value RaggedContraction(Ctx& ctx, Value a, Value b, Value start, Value end) {
  if (!use_ragged_dot) return TiledContraction(ctx, a, b, start, end);
  return RaggedDot(ctx, a, b, Sub(ctx, end, start),
                   "lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], "
                   "rhs_contracting_dimensions = [0], lhs_ragged_dimensions = [1], rhs_group_dimensions = []",
                   {end.type.dims[0], a.type.dims[0], b.type.dims[1]});
}

// _grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None); the layouts are listed above.
// Half types accumulate in f32 and round once.
std::vector<Value> LowerGroupedMm(Ctx& ctx, const Args& args) {
  Value a = args.tensor(0), b = args.tensor(1), offs = args.optional_tensor(2);
  if (!args.is_none(3)) throw Unsupported("_grouped_mm with a bias");  // the CPU kernel rejects it too
  const TensorType& out = ctx.out();
  bool a2 = a.type.rank() == 2, b2 = b.type.rank() == 2;
  if (!a2 && !b2) return {ConvertTo(ctx, ctx.b.DotGeneral(a, b, {0}, {0}, {2}, {1}, Acc(ctx), ctx.precision), out.elem)};
  int64_t length = a2 && b2 ? a.type.dims[1] : a2 ? a.type.dims[0] : b.type.dims[1];
  auto [start, end] = Bounds(ctx, offs);
  CheckOffsets(ctx, start, end, length);
  if (out.numel() == 0) return {Splat(ctx, 0, out)};
  if (end.type.dims[0] == 0 || (a2 && b2 ? false : a.type.dims[a.type.rank() - 1] == 0)) return {Splat(ctx, 0, out)};
  (use_ragged_dot ? lowered_ragged_dot : lowered_tiled)++;
  Value r;
  if (a2 && b2) r = RaggedContraction(ctx, a, b, start, end);
  else if (a2) r = RaggedRows(ctx, a, b, start, end);
  else r = ctx.b.Transpose(RaggedRows(ctx, ctx.b.Transpose(b, {1, 0}), ctx.b.Transpose(a, {0, 2, 1}), start, end), {1, 0});
  return {ConvertTo(ctx, r, out.elem)};
}

TPU_LOWERING("aten::_grouped_mm", LowerGroupedMm);

}  // namespace

void SetRaggedDot(bool supported) { use_ragged_dot = supported; }
bool RaggedDotInUse() { return use_ragged_dot; }
std::map<std::string, int64_t> GroupedMmLowerings() {
  return {{"ragged_dot", lowered_ragged_dot.load()}, {"tiled", lowered_tiled.load()}};
}

}  // namespace tpu::lowering
