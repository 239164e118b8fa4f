// Factories and whole-value copies: ranges, fills, constants, eye, triangle indices, and the
// graph forms of copies (eager runs copies and most factories as kernels in csrc/aten; they
// appear as nodes of torch.compile graphs after core ATen decomposition).
#include "helpers.h"

namespace tpu::lowering {
namespace {

// _to_copy, clone, copy(self, src), lift_fresh_copy: the value converted to the output type.
std::vector<Value> LowerCopyOf0(Ctx& ctx, const Args& a) { return {CastTo(ctx, a.tensor(0), ctx.out())}; }
std::vector<Value> LowerCopyOf1(Ctx& ctx, const Args& a) { return {CastTo(ctx, a.tensor(1), ctx.out())}; }

// full(size, v), scalar_tensor(v), full_like(x, v), new_full(x, size, v): v everywhere.
template <size_t kValueArg>
std::vector<Value> LowerFill(Ctx& ctx, const Args& a) {
  return {CastTo(ctx, a.tensor(kValueArg), ctx.out())};
}

// zeros, ones, empty (uninitialised in PyTorch; zeros here) and their _like / new_ forms.
template <int kValue>
std::vector<Value> LowerConstant(Ctx& ctx, const Args&) { return {ctx.b.Constant(kValue, ctx.out())}; }

// arange(start, end, step)[i] = start + i * step, computed in f32 (half types) or the
// output type (s64 for integers), as PyTorch's kernels do.
std::vector<Value> ArangeFrom(Ctx& ctx, Value start, Value step) {
  const TensorType& t = ctx.out();
  TensorType c{IsFloat(t.elem) ? AccumulatorType(t.elem) : ElemType::S64, t.dims};
  Value i = ctx.b.Iota(c, 0);
  Value offsets = ctx.b.Binary("multiply", i, CastTo(ctx, step, c));
  return {ConvertTo(ctx, ctx.b.Binary("add", CastTo(ctx, start, c), offsets), t.elem)};
}
Value ConstS64(Ctx& ctx, int64_t v) { return ctx.b.ConstantInt(v, {ElemType::S64, {}}); }
// arange(end), arange.start(start, end), arange.start_step / arange.start_out(start, end, step).
std::vector<Value> LowerArange(Ctx& ctx, const Args&) { return ArangeFrom(ctx, ConstS64(ctx, 0), ConstS64(ctx, 1)); }
std::vector<Value> LowerArangeStart(Ctx& ctx, const Args& a) { return ArangeFrom(ctx, a.tensor("start"), ConstS64(ctx, 1)); }
std::vector<Value> LowerArangeStartStep(Ctx& ctx, const Args& a) {
  return ArangeFrom(ctx, a.tensor("start"), a.tensor("step"));
}

// linspace(start, end, steps) in `compute`: the first half counts up from start, the second
// half down from end, as PyTorch does, so both ends are exact.
Value Linspace(Ctx& ctx, const Args& a, const TensorType& ct) {
  int64_t steps = a.int_("steps");
  Value start = CastTo(ctx, a.tensor("start"), ct), end = CastTo(ctx, a.tensor("end"), ct);
  if (steps <= 1) return start;
  Value last = ctx.b.Constant(static_cast<double>(steps - 1), ct);
  Value step = ctx.b.Binary("divide", ctx.b.Binary("subtract", end, start), last);
  Value i = ctx.b.Convert(ctx.b.Iota({ElemType::S64, ct.dims}, 0), ct.elem);
  Value up = ctx.b.Binary("add", start, ctx.b.Binary("multiply", i, step));
  Value down = ctx.b.Binary("subtract", end, ctx.b.Binary("multiply", ctx.b.Binary("subtract", last, i), step));
  Value first_half = ctx.b.Compare(Cmp::LT, i, ctx.b.Constant(static_cast<double>(steps / 2), ct));
  return ctx.b.Select(first_half, up, down);
}
// Float results compute in their accumulator type, integer ones in f64 and truncate.
TensorType LinspaceType(const TensorType& t) { return {IsFloat(t.elem) ? AccumulatorType(t.elem) : ElemType::F64, t.dims}; }

// linspace.out(start, end, steps, out)
std::vector<Value> LowerLinspace(Ctx& ctx, const Args& a) {
  return {ConvertTo(ctx, Linspace(ctx, a, LinspaceType(ctx.out())), ctx.out().elem)};
}

// logspace.out(start, end, steps, base, out) = base ^ linspace(start, end, steps), computed
// in double precision for integer results (as the CPU kernel).
std::vector<Value> LowerLogspace(Ctx& ctx, const Args& a) {
  TensorType ct = LinspaceType(ctx.out());
  Value base = ctx.b.Constant(a.double_("base"), ct);
  return {ConvertTo(ctx, ctx.b.Binary("power", base, Linspace(ctx, a, ct)), ctx.out().elem)};
}

// eye: ones on the main diagonal.
std::vector<Value> LowerEye(Ctx& ctx, const Args&) {
  const TensorType& t = ctx.out();
  TensorType idx{ElemType::S64, t.dims};
  Value diag = ctx.b.Compare(Cmp::EQ, ctx.b.Iota(idx, 0), ctx.b.Iota(idx, 1));
  return {ConvertTo(ctx, diag, t.elem)};
}

// triu_indices / tril_indices(row, col, offset): the coordinates (2 x count) of the upper
// (lower) triangle of a row x col matrix in row-major order.
template <bool kUpper>
std::vector<Value> LowerTriIndices(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  int64_t rows = a.int_(0), cols = a.int_(1), offset = a.int_or(2, 0), count = t.dims[1];
  if (count == 0) return {ctx.b.Constant(0, t)};
  TensorType grid{ElemType::S64, {rows, cols}};
  Value diff = ctx.b.Binary("subtract", ctx.b.Iota(grid, 1), ctx.b.Iota(grid, 0));
  Value mask = ctx.b.Compare(kUpper ? Cmp::GE : Cmp::LE, diff, ctx.b.ConstantInt(offset, grid));
  Value flat = ctx.b.Reshape(mask, {rows * cols});
  Value pos = ctx.b.Select(flat, ExclusiveCount(ctx, flat), ctx.b.ConstantInt(count, {ElemType::S64, {rows * cols}}));
  std::vector<Value> coords = {ctx.b.Reshape(ctx.b.Iota(grid, 0), {1, rows * cols}), ctx.b.Reshape(ctx.b.Iota(grid, 1), {1, rows * cols})};
  Value updates = ctx.b.Concatenate(coords, 0);  // [2, n]
  TensorType scalar{ElemType::S64, {}};
  std::string region = ctx.b.Region({scalar, scalar}, [](const std::vector<Value>& v) { return std::vector<Value>{v[1]}; });
  std::string attrs =
      "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0], inserted_window_dims = [1], "
      "scatter_dims_to_operand_dims = [1], index_vector_dim = 1>, indices_are_sorted = true, unique_indices = false";
  Value out = ctx.b.Op1("stablehlo.scatter", {ctx.b.ConstantInt(0, {ElemType::S64, t.dims}), ctx.b.Reshape(pos, {rows * cols, 1}), updates},
                        {ElemType::S64, t.dims}, attrs, region);
  return {ConvertTo(ctx, out, t.elem)};
}

}  // namespace

TPU_GRAPH_LOWERING("aten::_to_copy", LowerCopyOf0);
TPU_GRAPH_LOWERING("aten::arange", LowerArange);
TPU_GRAPH_LOWERING("aten::arange.start", LowerArangeStart);
TPU_LOWERING("aten::arange.start_out", LowerArangeStartStep);
TPU_GRAPH_LOWERING("aten::arange.start_step", LowerArangeStartStep);
TPU_GRAPH_LOWERING("aten::clone", LowerCopyOf0);
TPU_GRAPH_LOWERING("aten::copy", LowerCopyOf1);
TPU_GRAPH_LOWERING("aten::empty.memory_format", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::empty_like", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::empty_permuted", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::empty_strided", LowerConstant<0>);
TPU_LOWERING("aten::eye.m_out", LowerEye);
TPU_LOWERING("aten::eye.out", LowerEye);
TPU_GRAPH_LOWERING("aten::full", LowerFill<1>);
TPU_GRAPH_LOWERING("aten::full_like", LowerFill<1>);
TPU_GRAPH_LOWERING("aten::lift_fresh_copy", LowerCopyOf0);
TPU_LOWERING("aten::linspace.out", LowerLinspace);
TPU_LOWERING("aten::logspace.out", LowerLogspace);
TPU_GRAPH_LOWERING("aten::new_empty", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::new_empty_strided", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::new_full", LowerFill<2>);
TPU_GRAPH_LOWERING("aten::new_ones", LowerConstant<1>);
TPU_GRAPH_LOWERING("aten::new_zeros", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::ones", LowerConstant<1>);
TPU_GRAPH_LOWERING("aten::ones_like", LowerConstant<1>);
TPU_GRAPH_LOWERING("aten::scalar_tensor", LowerFill<0>);
TPU_LOWERING("aten::tril_indices", LowerTriIndices<false>);
TPU_LOWERING("aten::triu_indices", LowerTriIndices<true>);
TPU_GRAPH_LOWERING("aten::zeros", LowerConstant<0>);
TPU_GRAPH_LOWERING("aten::zeros_like", LowerConstant<0>);

}  // namespace tpu::lowering
