// Selection and placement by index: index_select (gather), scatter and index_add (scatter
// with a combiner). Out-of-range indices are PyTorch errors; StableHLO clamps gathers and
// drops out-of-range scatter updates.
#include "lowering.h"

namespace tpu::lowering {
namespace {

// index_select(x, dim, index) = x gathered along dim.
std::vector<Value> LowerIndexSelect(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  int64_t r = x.type.rank();
  if (r == 0) return {ctx.b.Reshape(x, ctx.out().dims)};
  int64_t dim = WrapDim(a.int_(1), r);
  Value index = ConvertTo(ctx, a.tensor(2), ElemType::S64);
  int64_t n = index.type.numel();
  index = ctx.b.Reshape(index, {n, 1});
  std::vector<int64_t> offset_dims, slice_sizes = x.type.dims;
  for (int64_t i = 0; i < r; ++i)
    if (i != dim) offset_dims.push_back(i);
  slice_sizes[dim] = 1;
  std::vector<int64_t> out_dims = x.type.dims;
  out_dims[dim] = n;
  std::string attrs = "dimension_numbers = #stablehlo.gather<offset_dims = [" + shlo::JoinInts(offset_dims) +
                      "], collapsed_slice_dims = [" + std::to_string(dim) + "], start_index_map = [" +
                      std::to_string(dim) + "], index_vector_dim = 1>, slice_sizes = " + shlo::DenseI64(slice_sizes) +
                      ", indices_are_sorted = false";
  return {ctx.b.Reshape(ctx.b.Op1("stablehlo.gather", {x, index}, {x.type.elem, out_dims}, attrs), ctx.out().dims)};
}

// Point scatter into `self`: the element at position p of `updates` goes to position p of
// `self` with coordinate `dim` replaced by index[p] (`index` has the shape of `updates`).
// `combine` is "" (overwrite) or a StableHLO binary op ("add", "multiply").
Value ScatterAlongDim(Ctx& ctx, Value self, int64_t dim, Value index, Value updates, const std::string& combine) {
  int64_t r = self.type.rank();
  std::vector<int64_t> coord_dims = index.type.dims;
  coord_dims.push_back(1);
  std::vector<Value> coords;
  for (int64_t d = 0; d < r; ++d) {
    Value c = d == dim ? ConvertTo(ctx, index, ElemType::S64) : ctx.b.Iota({ElemType::S64, index.type.dims}, d);
    coords.push_back(ctx.b.Reshape(c, coord_dims));
  }
  Value indices = ctx.b.Concatenate(coords, r);
  TensorType scalar{self.type.elem, {}};
  int old_id = ctx.b.NewId(), new_id = ctx.b.NewId(), sum_id = ctx.b.NewId();
  std::string s = scalar.str(), ret = "%" + std::to_string(new_id), body;
  if (!combine.empty()) {
    body = "      %" + std::to_string(sum_id) + " = \"stablehlo." + combine + "\"(%" + std::to_string(old_id) + ", %" +
           std::to_string(new_id) + ") : (" + s + ", " + s + ") -> " + s + "\n";
    ret = "%" + std::to_string(sum_id);
  }
  std::string region = "{\n    ^bb0(%" + std::to_string(old_id) + ": " + s + ", %" + std::to_string(new_id) + ": " + s +
                       "):\n" + body + "      \"stablehlo.return\"(" + ret + ") : (" + s + ") -> ()\n    }";
  std::vector<int64_t> all(r);
  for (int64_t d = 0; d < r; ++d) all[d] = d;
  std::string attrs = "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [" + shlo::JoinInts(all) +
                      "], scatter_dims_to_operand_dims = [" + shlo::JoinInts(all) +
                      "], index_vector_dim = " + std::to_string(r) +
                      ">, indices_are_sorted = false, unique_indices = false";
  return ctx.b.Op1("stablehlo.scatter", {self, indices, updates}, self.type, attrs, region);
}

// The combiner of scatter's `reduce` argument; bool adds as `or` and multiplies as `and`.
std::string Combiner(const std::string& reduce, ElemType elem) {
  if (reduce == "add" || reduce == "sum") return elem == ElemType::Pred ? "or" : "add";
  if (reduce == "multiply" || reduce == "prod") return elem == ElemType::Pred ? "and" : "multiply";
  throw Unsupported("scatter reduce=" + reduce);
}

// scatter(self, dim, index, src|value, reduce?): self[... index[p] ...] = src[p] (or combine).
// Only the region of src covered by index is used; a Scalar value is broadcast to it.
std::vector<Value> ScatterRule(Ctx& ctx, const Args& a, const std::string& combine) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t), index = a.tensor(2), src = a.tensor(3);
  if (index.type.numel() == 0) return {self};
  if (t.rank() == 0) return {self.type.numel() ? CastTo(ctx, ctx.b.Reshape(src, {}), t) : self};
  Value updates = ConvertTo(ctx, src, t.elem);
  if (updates.type.rank() == 0) {
    updates = BroadcastTo(ctx, updates, index.type.dims);
  } else if (updates.type.dims != index.type.dims) {
    std::vector<int64_t> zeros(t.rank(), 0), ones(t.rank(), 1);
    updates = ctx.b.Slice(updates, zeros, index.type.dims, ones);
  }
  return {ScatterAlongDim(ctx, self, WrapDim(a.int_(1), t.rank()), index, updates, combine)};
}

std::vector<Value> LowerScatter(Ctx& ctx, const Args& a) { return ScatterRule(ctx, a, ""); }
std::vector<Value> LowerScatterAdd(Ctx& ctx, const Args& a) {
  return ScatterRule(ctx, a, Combiner("add", ctx.out().elem));
}
std::vector<Value> LowerScatterReduce(Ctx& ctx, const Args& a) {
  return ScatterRule(ctx, a, Combiner(a.str(4), ctx.out().elem));
}

// index_add(self, dim, index, source, alpha): self.select(dim, index[i]) += alpha * source.select(dim, i).
std::vector<Value> LowerIndexAdd(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t), source = ConvertTo(ctx, a.tensor(3), t.elem);
  if (a.tensor(2).type.numel() == 0) return {self};
  if (t.rank() == 0) source = ctx.b.Reshape(source, {});
  if (!a.is_none(4)) {
    Value alpha = CastTo(ctx, a.tensor(4), source.type);
    source = ctx.b.Binary(t.elem == ElemType::Pred ? "and" : "multiply", source, alpha);
  }
  if (t.rank() == 0) return {ctx.b.Binary(t.elem == ElemType::Pred ? "or" : "add", self, source)};
  int64_t dim = WrapDim(a.int_(1), t.rank());
  Value index = ctx.b.Reshape(a.tensor(2), {a.tensor(2).type.numel()});
  Value index_full = ctx.b.BroadcastInDim(index, source.type.dims, {dim});
  return {ScatterAlongDim(ctx, self, dim, index_full, source, Combiner("add", t.elem))};
}

}  // namespace

TPU_LOWERING("aten::index_add", LowerIndexAdd);
TPU_LOWERING("aten::index_select", LowerIndexSelect);
TPU_LOWERING("aten::scatter.reduce", LowerScatterReduce);
TPU_LOWERING("aten::scatter.src", LowerScatter);
TPU_LOWERING("aten::scatter.value", LowerScatter);
TPU_LOWERING("aten::scatter.value_reduce", LowerScatterReduce);
TPU_LOWERING("aten::scatter_add", LowerScatterAdd);

}  // namespace tpu::lowering
