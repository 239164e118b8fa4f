// Selection and placement by index: gather-style reads (index_select, gather, take, advanced
// indexing) and scatter-style writes (scatter, index_add/copy/fill/reduce, index_put, put,
// masked_scatter). StableHLO clamps gather indices and drops out-of-range scatter updates;
// PyTorch raises instead, so every rule also reports out-of-range indices with ctx.AddCheck
// (a device-side assert, raised no later than the next synchronisation).
#include <cmath>
#include <cstdint>

#include "helpers.h"

namespace tpu::lowering {
namespace {

std::string OutOfBounds(const char* op, int64_t dim, int64_t size) {
  return std::string(op) + ": index out of range: an index is out of bounds for dimension " + std::to_string(dim) +
         " with size " + std::to_string(size);
}

// The CPU raises RuntimeError for these ops' bad indices, IndexError for the others.
bool RaisesRuntimeError(const std::string& op) {
  return op == "gather" || op == "index_add" || op.rfind("scatter", 0) == 0;
}

// Reports any index outside [0, size) (or [-size, size)) along `dim` of the operand.
void CheckIndex(Ctx& ctx, Value index, int64_t dim, int64_t size, bool allow_negative, const char* op) {
  if (index.type.numel() == 0) return;
  ctx.AddCheck(IndexOutOfRange(ctx, index, size, allow_negative), OutOfBounds(op, dim, size),
               RaisesRuntimeError(op) ? Ctx::ErrorKind::Runtime : Ctx::ErrorKind::Index);
}

// The CPU refuses an index tensor that is not int32/int64 (a float index would be truncated
// silently here, and their Meta kernels do not check).
void RequireIntIndex(const Value& index, const char* op) {
  if (index.type.elem != ElemType::S32 && index.type.elem != ElemType::S64)
    throw std::runtime_error(std::string(op) + "(): Expected dtype int32 or int64 for index");
}

// index_select(x, dim, index) = x gathered along dim.
std::vector<Value> LowerIndexSelect(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  int64_t r = x.type.rank();
  RequireIntIndex(a.tensor(2), "index_select");
  Value index = ConvertTo(ctx, a.tensor(2), ElemType::S64);
  if (r == 0) {
    CheckIndex(ctx, index, 0, 1, false, "index_select");
    return {ctx.b.Reshape(x, ctx.out().dims)};
  }
  int64_t dim = WrapDim(a.int_(1), r);
  CheckIndex(ctx, index, dim, x.type.dims[dim], false, "index_select");
  // An empty operand has no row to gather (every index fails the check): zeros stand in.
  if (ctx.out().numel() == 0 || x.type.numel() == 0) return {Splat(ctx, 0, ctx.out())};
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

// gather(self, dim, index): out[p] = self[p with coordinate dim replaced by index[p]].
std::vector<Value> LowerGather(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0), index = a.tensor(2);
  int64_t r = x.type.rank();
  int64_t dim = WrapDim(a.int_(1), r);
  CheckIndex(ctx, index, dim, r == 0 ? 1 : x.type.dims[dim], false, "gather");
  if (ctx.out().numel() == 0 || x.type.numel() == 0) return {Splat(ctx, 0, ctx.out())};
  if (r == 0) return {BroadcastTo(ctx, x, ctx.out().dims)};
  return {GatherPoints(ctx, x, CoordsAlongDim(ctx, index, dim, r))};
}

// take(self, index) = self.flatten()[index], negative indices counting from the end.
std::vector<Value> LowerTake(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0), index = a.tensor(1);
  int64_t n = x.type.numel();
  CheckIndex(ctx, index, 0, n, true, "take");
  if (ctx.out().numel() == 0 || n == 0) return {Splat(ctx, 0, ctx.out())};
  return {ctx.b.Gather1D(ctx.b.Reshape(x, {n}), WrapIndex(ctx, index, n))};
}

// The scatter combiner of a reduce name; bool adds as `or` and multiplies as `and`.
std::string Combiner(const std::string& reduce, ElemType elem) {
  bool pred = elem == ElemType::Pred;
  if (reduce == "add" || reduce == "sum") return pred ? "or" : "add";
  if (reduce == "multiply" || reduce == "prod") return pred ? "and" : "multiply";
  if (reduce == "amax") return pred ? "or" : "maximum";
  if (reduce == "amin") return pred ? "and" : "minimum";
  throw Unsupported("scatter reduce=" + reduce);
}

// Scatter of point updates with a combiner; maximum/minimum keep NaN as PyTorch does.
Value ScatterCombine(Ctx& ctx, Value x, Value coords, Value updates, const std::string& combine) {
  if (!IsFloat(x.type.elem) || (combine != "maximum" && combine != "minimum"))
    return ScatterPoints(ctx, x, coords, updates, combine);
  return ScatterPointsWith(ctx, x, coords, updates, [&](Value old, Value update) {
    Value m = ctx.b.Binary(combine, old, update);
    m = ctx.b.Select(IsNan(ctx, update), update, m);
    return ctx.b.Select(IsNan(ctx, old), old, m);
  });
}

// The identity of a reduction (the value an untouched include_self=False slot starts from).
Value ReduceIdentity(Ctx& ctx, const std::string& reduce, const TensorType& t) {
  if (reduce == "prod") return ctx.b.Constant(1, t);
  if (reduce == "amax") return ctx.b.Extreme(false, t);
  if (reduce == "amin") return ctx.b.Extreme(true, t);
  return ctx.b.Constant(0, t);
}

// Point scatter-reduce: self[coords[p]] = reduce(self[coords[p]], updates[p]) with PyTorch's
// include_self and mean (sum / count, floor division for integers).
Value ScatterReduce(Ctx& ctx, Value self, Value coords, Value updates, const std::string& reduce, bool include_self) {
  const TensorType& t = self.type;
  std::string combine = Combiner(reduce == "mean" ? "sum" : reduce, t.elem);
  Value base = self;
  Value pred_t = ctx.b.Constant(1, {ElemType::Pred, updates.type.dims});
  Value touched = ScatterPoints(ctx, ctx.b.Constant(0, {ElemType::Pred, t.dims}), coords, pred_t, "");
  if (!include_self) base = ctx.b.Select(touched, ReduceIdentity(ctx, reduce, t), self);
  Value r = ScatterCombine(ctx, base, coords, updates, combine);
  if (reduce != "mean") return r;
  TensorType ct{t.elem == ElemType::Pred ? ElemType::S64 : t.elem, t.dims};
  Value ones = ctx.b.Constant(1, {ct.elem, updates.type.dims});
  Value count = ScatterPoints(ctx, ctx.b.Constant(include_self ? 1 : 0, ct), coords, ones, "add");
  count = ctx.b.Select(ctx.b.Compare(Cmp::EQ, count, ctx.b.Constant(0, ct)), ctx.b.Constant(1, ct), count);
  Value sum = ConvertTo(ctx, r, ct.elem);
  Value mean;
  if (IsFloat(ct.elem)) {
    mean = Div(ctx, sum, count);
  } else {  // floor division, as PyTorch divides integer means
    Value q = Div(ctx, sum, count);
    Value fix = And(ctx, ctx.b.Compare(Cmp::NE, Mul(ctx, q, count), sum),
                    ctx.b.Compare(Cmp::LT, sum, ctx.b.Constant(0, ct)));
    mean = ctx.b.Select(fix, Sub(ctx, q, ctx.b.Constant(1, ct)), q);
  }
  return ConvertTo(ctx, mean, t.elem);
}

// scatter(self, dim, index, src|value, reduce?): self[... index[p] ...] = src[p] (or combine).
// Only the region of src covered by index is used; a Scalar value is broadcast to it.
std::vector<Value> ScatterRule(Ctx& ctx, const Args& a, const char* op, const std::string& reduce,
                               bool include_self = true) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t), index = a.tensor(2), src = a.tensor(3);
  int64_t dim = WrapDim(a.int_(1), t.rank());
  CheckIndex(ctx, index, dim, t.rank() == 0 ? 1 : t.dims[dim], false, op);
  if (index.type.numel() == 0 || t.numel() == 0) return {self};
  Value updates = ConvertTo(ctx, src, t.elem);
  if (t.rank() == 0) {
    // One point: the first element of src goes to the only element of self.
    Value u = ctx.b.Reshape(updates, {updates.type.numel()});
    u = ctx.b.Slice(u, {0}, {1}, {1});
    Value s1 = ctx.b.Reshape(self, {1});
    Value coords = ctx.b.Reshape(ConvertTo(ctx, ctx.b.Reshape(index, {1}), ElemType::S64), {1, 1});
    Value r = reduce.empty() ? ScatterPoints(ctx, s1, coords, u, "") : ScatterReduce(ctx, s1, coords, u, reduce, include_self);
    return {ctx.b.Reshape(r, {})};
  }
  if (updates.type.rank() == 0) {
    updates = BroadcastTo(ctx, updates, index.type.dims);
  } else if (updates.type.dims != index.type.dims) {
    std::vector<int64_t> zeros(t.rank(), 0), ones(t.rank(), 1);
    updates = ctx.b.Slice(updates, zeros, index.type.dims, ones);
  }
  Value coords = CoordsAlongDim(ctx, index, dim, t.rank());
  if (reduce.empty()) return {ScatterPoints(ctx, self, coords, updates, "")};
  return {ScatterReduce(ctx, self, coords, updates, reduce, include_self)};
}

std::vector<Value> LowerScatter(Ctx& ctx, const Args& a) { return ScatterRule(ctx, a, "scatter", ""); }
std::vector<Value> LowerScatterAdd(Ctx& ctx, const Args& a) { return ScatterRule(ctx, a, "scatter_add", "sum"); }
// scatter.reduce / scatter.value_reduce: reduce is "add" or "multiply".
std::vector<Value> LowerScatterReduce(Ctx& ctx, const Args& a) {
  std::string r = a.str(4);
  return ScatterRule(ctx, a, "scatter", r == "add" ? "sum" : r == "multiply" ? "prod" : r);
}
// scatter_reduce.two(self, dim, index, src, reduce, include_self)
std::vector<Value> LowerScatterReduceTwo(Ctx& ctx, const Args& a) {
  return ScatterRule(ctx, a, "scatter_reduce", a.str(4), a.bool_or(5, true));
}

// Coordinates for index_* ops: every position of `source` with its coordinate `dim` replaced
// by index[that coordinate].
Value IndexCoords(Ctx& ctx, Value index, const std::vector<int64_t>& source_dims, int64_t dim) {
  Value flat = ctx.b.Reshape(ConvertTo(ctx, index, ElemType::S64), {index.type.numel()});
  Value full = ctx.b.BroadcastInDim(flat, source_dims, {dim});
  return CoordsAlongDim(ctx, full, dim, static_cast<int64_t>(source_dims.size()));
}

// index_add/index_copy's source as the slices ScatterSlices takes: self's dims with the index's
// length at `dim` (PyTorch also accepts a source of one fewer dim where the index has one entry).
Value SlicesOf(Ctx& ctx, Value source, const TensorType& self, int64_t dim, Value index) {
  std::vector<int64_t> dims = self.dims;
  dims[dim] = index.type.numel();
  return source.type.dims == dims ? source : ctx.b.Reshape(source, dims);
}

// index_add(self, dim, index, source, alpha): self.select(dim, index[i]) += alpha * source.select(dim, i).
std::vector<Value> LowerIndexAdd(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t), source = ConvertTo(ctx, a.tensor(3), t.elem);
  int64_t dim = WrapDim(a.int_(1), t.rank());
  RequireIntIndex(a.tensor(2), "index_add_");
  CheckIndex(ctx, a.tensor(2), dim, t.rank() == 0 ? 1 : t.dims[dim], false, "index_add");
  if (a.tensor(2).type.numel() == 0 || t.numel() == 0) return {self};
  if (t.rank() == 0) source = ctx.b.Reshape(source, {});
  if (!a.is_none(4)) {
    Value alpha = CastTo(ctx, a.tensor(4), source.type);
    source = ctx.b.Binary(t.elem == ElemType::Pred ? "and" : "multiply", source, alpha);
  }
  if (t.rank() == 0) return {ctx.b.Binary(t.elem == ElemType::Pred ? "or" : "add", self, source)};
  return {ScatterSlices(ctx, self, dim, a.tensor(2), SlicesOf(ctx, source, t, dim, a.tensor(2)), Combiner("add", t.elem))};
}

// index_copy(self, dim, index, source): self.select(dim, index[i]) = source.select(dim, i).
std::vector<Value> LowerIndexCopy(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t), source = ConvertTo(ctx, a.tensor(3), t.elem);
  int64_t dim = WrapDim(a.int_(1), t.rank());
  CheckIndex(ctx, a.tensor(2), dim, t.rank() == 0 ? 1 : t.dims[dim], false, "index_copy");
  if (a.tensor(2).type.numel() == 0 || t.numel() == 0) return {self};
  if (t.rank() == 0) return {ctx.b.Reshape(source, {})};
  Value index = a.tensor(2);
  source = SlicesOf(ctx, source, t, dim, index);
  if (index.type.numel() == 1) {
    // One slice (a decode step's cache position): a dynamic_update_slice. It clamps an
    // out-of-range start where scatter would drop the slice; the check above raises either way.
    ElemType start_elem = t.dims[dim] <= INT32_MAX ? ElemType::S32 : ElemType::S64;  // TPUs emulate s64
    std::vector<Value> starts(t.rank(), ctx.b.ConstantInt(0, {start_elem, {}}));
    starts[dim] = ctx.b.Reshape(ConvertTo(ctx, index, start_elem), {});
    return {ctx.b.DynamicUpdateSliceAt(self, source, starts)};
  }
  return {ScatterSlices(ctx, self, dim, index, source, "")};
}

// index_reduce(self, dim, index, source, reduce, include_self): prod, mean, amax or amin.
std::vector<Value> LowerIndexReduce(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t), source = ConvertTo(ctx, a.tensor(3), t.elem);
  int64_t dim = WrapDim(a.int_(1), t.rank());
  CheckIndex(ctx, a.tensor(2), dim, t.rank() == 0 ? 1 : t.dims[dim], false, "index_reduce");
  if (a.tensor(2).type.numel() == 0 || t.numel() == 0) return {self};
  if (t.rank() == 0) {  // one element: treat as 1-D
    Value coords = ctx.b.Reshape(ConvertTo(ctx, ctx.b.Reshape(a.tensor(2), {1}), ElemType::S64), {1, 1});
    Value r = ScatterReduce(ctx, ctx.b.Reshape(self, {1}), coords, ctx.b.Reshape(source, {1}), a.str(4), a.bool_or(5, true));
    return {ctx.b.Reshape(r, {})};
  }
  Value coords = IndexCoords(ctx, a.tensor(2), source.type.dims, dim);
  return {ScatterReduce(ctx, self, coords, source, a.str(4), a.bool_or(5, true))};
}

// index_fill(self, dim, index, value): positions whose coordinate dim is in index take value.
std::vector<Value> LowerIndexFill(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t), value = CastTo(ctx, a.tensor(3), t);
  int64_t r = t.rank();
  int64_t dim = WrapDim(a.int_(1), r);
  int64_t size = r == 0 ? 1 : t.dims[dim];
  Value index = a.tensor(2);
  CheckIndex(ctx, index, dim, size, true, "index_fill");
  if (index.type.numel() == 0 || t.numel() == 0) return {self};
  Value flat = WrapIndex(ctx, ctx.b.Reshape(index, {index.type.numel()}), size);
  std::vector<int64_t> grid = {index.type.numel(), size};
  Value hit = ctx.b.Compare(Cmp::EQ, ctx.b.BroadcastInDim(flat, grid, {0}), ctx.b.Iota({ElemType::S64, grid}, 1));
  Value any = ctx.b.Reduce(hit, ctx.b.Constant(0, {ElemType::Pred, {}}), {0}, "or");
  Value mask = r == 0 ? ctx.b.Reshape(any, {}) : ctx.b.BroadcastInDim(any, t.dims, {dim});
  return {ctx.b.Select(mask, value, self)};
}

// put(self, index, source, accumulate): self.flatten()[index] = source (or +=).
std::vector<Value> LowerPut(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t);
  Value index = a.tensor(1);
  int64_t n = t.numel();
  CheckIndex(ctx, index, 0, n, true, "put");
  if (index.type.numel() == 0 || n == 0) return {self};
  Value flat = ctx.b.Reshape(self, {n});
  Value idx = ctx.b.Reshape(WrapIndex(ctx, index, n), {index.type.numel(), 1});
  Value src = ctx.b.Reshape(ConvertTo(ctx, a.tensor(2), t.elem), {index.type.numel()});
  bool acc = a.bool_or(3, false);
  return {ctx.b.Reshape(ScatterPoints(ctx, flat, idx, src, acc ? Combiner("add", t.elem) : ""), t.dims)};
}

// ---- advanced indexing: self[indices] with a list of optional index tensors ----

bool IsMask(const Value& v) { return v.valid() && (v.type.elem == ElemType::Pred || v.type.elem == ElemType::U8); }

std::vector<int64_t> BroadcastShape(const std::vector<Value>& vs) {
  std::vector<int64_t> out;
  for (const Value& v : vs) {
    const auto& d = v.type.dims;
    if (d.size() > out.size()) out.insert(out.begin(), d.size() - out.size(), 1);
    for (size_t i = 0; i < d.size(); ++i) {
      int64_t& o = out[out.size() - d.size() + i];
      if (o == 1) o = d[i];
      else if (d[i] != 1 && d[i] != o) throw std::invalid_argument("shape mismatch: indexing tensors could not be broadcast together");
    }
  }
  return out;
}

// The gather/scatter geometry of self[indices] for integer index tensors.
struct AdvancedIndex {
  std::vector<int64_t> positions;    // dims of self indexed by tensors
  std::vector<int64_t> batch;        // broadcast shape of the index tensors
  std::vector<int64_t> result_dims;  // shape of self[indices]
  std::vector<int64_t> offset_dims;  // positions of self's other dims in result_dims
  Value coords;                      // batch + [k] s64 coordinates, negatives wrapped
};

// `op` names the op in the out-of-range message; nullptr skips the check.
AdvancedIndex MakeIndex(Ctx& ctx, const TensorType& self, const std::vector<Value>& indices, const char* op) {
  AdvancedIndex ix;
  std::vector<Value> used;
  for (size_t p = 0; p < indices.size(); ++p) {
    if (!indices[p].valid()) continue;
    if (IsMask(indices[p])) throw Unsupported("boolean mask index");
    ix.positions.push_back(static_cast<int64_t>(p));
    used.push_back(indices[p]);
  }
  ix.batch = BroadcastShape(used);
  int64_t r = self.rank(), rb = static_cast<int64_t>(ix.batch.size());
  bool adjacent = ix.positions.back() - ix.positions.front() + 1 == static_cast<int64_t>(ix.positions.size());
  std::vector<int64_t> rest;
  for (int64_t d = 0; d < r; ++d) {
    bool indexed = false;
    for (int64_t p : ix.positions) indexed |= p == d;
    if (!indexed) rest.push_back(d);
  }
  if (adjacent) {
    int64_t first = ix.positions.front();
    for (int64_t d = 0; d < first; ++d) {
      ix.offset_dims.push_back(d);
      ix.result_dims.push_back(self.dims[d]);
    }
    ix.result_dims.insert(ix.result_dims.end(), ix.batch.begin(), ix.batch.end());
    for (int64_t d = ix.positions.back() + 1; d < r; ++d) {
      ix.offset_dims.push_back(static_cast<int64_t>(ix.result_dims.size()));
      ix.result_dims.push_back(self.dims[d]);
    }
  } else {
    ix.result_dims = ix.batch;
    for (int64_t d : rest) {
      ix.offset_dims.push_back(static_cast<int64_t>(ix.result_dims.size()));
      ix.result_dims.push_back(self.dims[d]);
    }
  }
  std::vector<int64_t> coord_dims = ix.batch;
  coord_dims.push_back(1);
  std::vector<Value> parts;
  for (size_t i = 0; i < used.size(); ++i) {
    int64_t p = ix.positions[i];
    if (op) CheckIndex(ctx, used[i], p, self.dims[p], true, op);
    Value w = WrapIndex(ctx, used[i], self.dims[p]);
    parts.push_back(ctx.b.Reshape(BroadcastTo(ctx, w, ix.batch), coord_dims));
  }
  ix.coords = ctx.b.Concatenate(parts, rb);
  return ix;
}

std::vector<int64_t> SliceSizes(const TensorType& self, const AdvancedIndex& ix) {
  std::vector<int64_t> sizes = self.dims;
  for (int64_t p : ix.positions) sizes[p] = 1;
  return sizes;
}

Value IndexGather(Ctx& ctx, Value self, const AdvancedIndex& ix) {
  std::string attrs = "dimension_numbers = #stablehlo.gather<offset_dims = [" + shlo::JoinInts(ix.offset_dims) +
                      "], collapsed_slice_dims = [" + shlo::JoinInts(ix.positions) + "], start_index_map = [" +
                      shlo::JoinInts(ix.positions) + "], index_vector_dim = " + std::to_string(ix.batch.size()) +
                      ">, slice_sizes = " + shlo::DenseI64(SliceSizes(self.type, ix)) + ", indices_are_sorted = false";
  return ctx.b.Op1("stablehlo.gather", {self, ix.coords}, {self.type.elem, ix.result_dims}, attrs);
}

Value IndexScatter(Ctx& ctx, Value self, const AdvancedIndex& ix, Value updates, const std::string& combine) {
  TensorType scalar{self.type.elem, {}};
  std::string region = ctx.b.Region({scalar, scalar}, [&](const std::vector<Value>& v) {
    return std::vector<Value>{combine.empty() ? v[1] : ctx.b.Binary(combine, v[0], v[1])};
  });
  std::string attrs = "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [" +
                      shlo::JoinInts(ix.offset_dims) + "], inserted_window_dims = [" + shlo::JoinInts(ix.positions) +
                      "], scatter_dims_to_operand_dims = [" + shlo::JoinInts(ix.positions) +
                      "], index_vector_dim = " + std::to_string(ix.batch.size()) +
                      ">, indices_are_sorted = false, unique_indices = false";
  return ctx.b.Op1("stablehlo.scatter", {self, ix.coords, updates}, self.type, attrs, region);
}

bool AllNone(const std::vector<Value>& indices) {
  for (const Value& v : indices)
    if (v.valid()) return false;
  return true;
}

// _unsafe_index(self, indices) (index.Tensor reaches it with integer indices only: boolean
// masks become integer indices in csrc/aten, which needs their count).
std::vector<Value> LowerIndex(Ctx& ctx, const Args& a) {
  Value self = a.tensor(0);
  const auto& indices = a.tensors(1);
  if (AllNone(indices)) return {self};
  AdvancedIndex ix = MakeIndex(ctx, self.type, indices, "index");
  // Indexing a zero-size dim: every index fails the check, and a gather could not be typed.
  if (ctx.out().numel() == 0 || self.type.numel() == 0) return {Splat(ctx, 0, ctx.out())};
  return {ctx.b.Reshape(IndexGather(ctx, self, ix), ctx.out().dims)};
}

// self[..., mask, ...] = values with one boolean mask (after leading None entries) and no
// other index: each selected element takes the values entry of its rank among the selected
// ones (an exclusive running count), so no data-dependent shape is needed.
Value MaskedIndexPut(Ctx& ctx, Value self, const std::vector<Value>& indices, Value values, bool accumulate) {
  size_t lead = 0;
  while (lead < indices.size() && !indices[lead].valid()) ++lead;
  for (size_t i = lead + 1; i < indices.size(); ++i)
    if (indices[i].valid()) throw Unsupported("boolean mask mixed with other indices");
  Value mask = indices[lead];
  if (mask.type.elem != ElemType::Pred) mask = ctx.b.Compare(Cmp::NE, mask, ctx.b.Constant(0, mask.type));
  const TensorType& t = self.type;
  int64_t m = mask.type.rank(), j = static_cast<int64_t>(lead), r = t.rank();
  // values broadcast to self.dims[:j] + [nnz] + self.dims[j+m:] (nnz at position j).
  std::vector<int64_t> vdims(t.dims.begin(), t.dims.begin() + j);
  int64_t vr = values.type.rank();
  int64_t tail = r - j - m;
  int64_t nnz_vdim = vr - tail - 1;  // the dim of values that runs over the selected elements
  int64_t nnz = nnz_vdim >= 0 ? values.type.dims[nnz_vdim] : 1;
  vdims.push_back(nnz);
  vdims.insert(vdims.end(), t.dims.begin() + j + m, t.dims.end());
  Value v = BroadcastTo(ctx, ConvertTo(ctx, values, t.elem), vdims);
  Value bmask = ctx.b.BroadcastInDim(mask, t.dims, [&] {
    std::vector<int64_t> map(m);
    for (int64_t i = 0; i < m; ++i) map[i] = j + i;
    return map;
  }());
  Value spread;
  if (nnz == 1) {
    std::vector<int64_t> squeezed = vdims;
    squeezed.erase(squeezed.begin() + j);
    std::vector<int64_t> map;
    for (int64_t d = 0; d < r; ++d)
      if (d < j || d >= j + m) map.push_back(d);
    spread = ctx.b.BroadcastInDim(ctx.b.Reshape(v, squeezed), t.dims, map);
  } else {
    Value flat = ctx.b.Reshape(mask, {mask.type.numel()});
    Value count = ctx.b.Reduce(ctx.b.Convert(flat, ElemType::S64), ctx.b.ConstantInt(0, {ElemType::S64, {}}), {0}, "add");
    ctx.AddCheck(ctx.b.Compare(Cmp::NE, count, ctx.b.ConstantInt(nnz, count.type)),
                 "index_put: shape mismatch: value tensor cannot be broadcast to the indexing result (mask selects a "
                 "different number of elements)");
    Value pos = ctx.b.Reshape(ExclusiveCount(ctx, flat), mask.type.dims);
    pos = ctx.b.Select(ctx.b.Compare(Cmp::GE, pos, ctx.b.ConstantInt(nnz, pos.type)), ctx.b.ConstantInt(nnz - 1, pos.type), pos);
    // spread[d] = v[d[:j], pos[d[j:j+m]], d[j+m:]]
    std::vector<Value> coords;
    std::vector<int64_t> cd = t.dims;
    cd.push_back(1);
    for (int64_t d = 0; d < j; ++d) coords.push_back(ctx.b.Reshape(ctx.b.Iota({ElemType::S64, t.dims}, d), cd));
    std::vector<int64_t> map(m);
    for (int64_t i = 0; i < m; ++i) map[i] = j + i;
    coords.push_back(ctx.b.Reshape(ctx.b.BroadcastInDim(pos, t.dims, map), cd));
    for (int64_t d = j + m; d < r; ++d) coords.push_back(ctx.b.Reshape(ctx.b.Iota({ElemType::S64, t.dims}, d), cd));
    spread = GatherPoints(ctx, v, ctx.b.Concatenate(coords, r));
  }
  if (!accumulate) return ctx.b.Select(bmask, spread, self);
  Value add = ctx.b.Select(bmask, spread, ctx.b.Constant(0, t));
  return ctx.b.Binary(t.elem == ElemType::Pred ? "or" : "add", self, add);
}

// index_put(self, indices, values, accumulate) and _index_put_impl_(..., unsafe).
std::vector<Value> LowerIndexPut(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t);
  const auto& indices = a.tensors(1);
  bool accumulate = a.bool_or(3, false);
  if (AllNone(indices)) {
    Value v = CastTo(ctx, a.tensor(2), t);
    return {accumulate ? ctx.b.Binary(t.elem == ElemType::Pred ? "or" : "add", self, v) : v};
  }
  for (const Value& v : indices)
    if (IsMask(v)) return {MaskedIndexPut(ctx, self, indices, a.tensor(2), accumulate)};
  AdvancedIndex ix = MakeIndex(ctx, t, indices, "index_put");
  int64_t n = 1;
  for (int64_t d : ix.result_dims) n *= d;
  if (n == 0 || t.numel() == 0) return {self};
  Value updates = BroadcastTo(ctx, ConvertTo(ctx, a.tensor(2), t.elem), ix.result_dims);
  return {IndexScatter(ctx, self, ix, updates, accumulate ? Combiner("add", t.elem) : "")};
}

// _unsafe_masked_index(self, mask, indices, fill) = mask ? self[indices] : fill
std::vector<Value> LowerUnsafeMaskedIndex(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = a.tensor(0);
  Value gathered = self;
  if (!AllNone(a.tensors(2))) {
    AdvancedIndex ix = MakeIndex(ctx, self.type, a.tensors(2), nullptr);  // masked-off positions hold any index
    if (t.numel() == 0) return {Splat(ctx, 0, t)};
    gathered = ctx.b.Reshape(IndexGather(ctx, self, ix), t.dims);
  }
  Value mask = BroadcastTo(ctx, ConvertTo(ctx, a.tensor(1), ElemType::Pred), t.dims);
  return {ctx.b.Select(mask, CastTo(ctx, gathered, t), CastTo(ctx, a.tensor(3), t))};
}

// _unsafe_masked_index_put_accumulate(self, mask, indices, values) = self.index_put(indices, mask ? values : 0, True)
std::vector<Value> LowerUnsafeMaskedIndexPutAccumulate(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t);
  AdvancedIndex ix = MakeIndex(ctx, t, a.tensors(2), nullptr);
  int64_t n = 1;
  for (int64_t d : ix.result_dims) n *= d;
  if (n == 0 || t.numel() == 0) return {self};
  Value values = BroadcastTo(ctx, ConvertTo(ctx, a.tensor(3), t.elem), ix.result_dims);
  Value mask = BroadcastTo(ctx, ConvertTo(ctx, a.tensor(1), ElemType::Pred), ix.result_dims);
  values = ctx.b.Select(mask, values, ctx.b.Constant(0, values.type));
  return {IndexScatter(ctx, self, ix, values, Combiner("add", t.elem))};
}

// masked_scatter(self, mask, source): the selected positions, in row-major order, take
// consecutive elements of source.
std::vector<Value> LowerMaskedScatter(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t);
  if (t.numel() == 0) return {self};
  Value mask = BroadcastTo(ctx, ConvertTo(ctx, a.tensor(1), ElemType::Pred), t.dims);
  Value source = ConvertTo(ctx, a.tensor(2), t.elem);
  int64_t n = t.numel(), s = source.type.numel();
  Value flat_mask = ctx.b.Reshape(mask, {n});
  Value count = ctx.b.Reduce(ctx.b.Convert(flat_mask, ElemType::S64), ctx.b.ConstantInt(0, {ElemType::S64, {}}), {0}, "add");
  ctx.AddCheck(ctx.b.Compare(Cmp::GT, count, ctx.b.ConstantInt(s, count.type)),
               "masked_scatter: Number of elements of source < number of ones in mask");
  if (s == 0) return {self};
  Value pos = ExclusiveCount(ctx, flat_mask);
  pos = ctx.b.Select(ctx.b.Compare(Cmp::GE, pos, ctx.b.ConstantInt(s, pos.type)), ctx.b.ConstantInt(s - 1, pos.type), pos);
  Value picked = ctx.b.Reshape(ctx.b.Gather1D(ctx.b.Reshape(source, {s}), pos), t.dims);
  return {ctx.b.Select(mask, picked, self)};
}

// nonzero_static(self, size, fill_value): the coordinates of the first `size` nonzero
// elements in row-major order, rows past the count filled with fill_value.
std::vector<Value> LowerNonzeroStatic(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  const TensorType& t = ctx.out();
  int64_t size = t.dims[0], r = t.dims[1], n = x.type.numel();
  Value out = ctx.b.ConstantInt(a.int_or(2, -1), t);
  if (size == 0 || r == 0 || n == 0) return {out};
  Value flat = ctx.b.Reshape(ctx.b.Compare(Cmp::NE, x, ctx.b.Constant(0, x.type)), {n});
  Value pos = ExclusiveCount(ctx, flat);
  pos = ctx.b.Select(flat, pos, ctx.b.ConstantInt(size, pos.type));  // unselected rows fall out of range
  std::vector<Value> cols;
  for (int64_t d = 0; d < r; ++d)
    cols.push_back(ctx.b.Reshape(ctx.b.Iota({ElemType::S64, x.type.dims}, d), {n, 1}));
  Value coords = ctx.b.Concatenate(cols, 1);  // [n, r]
  TensorType scalar{ElemType::S64, {}};
  std::string region = ctx.b.Region({scalar, scalar}, [](const std::vector<Value>& v) { return std::vector<Value>{v[1]}; });
  std::string attrs =
      "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], "
      "scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, indices_are_sorted = true, unique_indices = false";
  return {ctx.b.Op1("stablehlo.scatter", {out, ctx.b.Reshape(pos, {n, 1}), coords}, t, attrs, region)};
}

// slice_scatter(self, src, dim, start, end, step): self with self[start:end:step] = src.
// The strided case pads src into place (interior padding = step - 1) and selects it.
std::vector<Value> LowerSliceScatter(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t), src = ConvertTo(ctx, a.tensor(1), t.elem);
  if (t.rank() == 0 || src.type.numel() == 0) return {self};
  int64_t dim = WrapDim(a.int_or(2, 0), t.rank()), size = t.dims[dim];
  int64_t start = a.is_none(3) ? 0 : a.int_(3);
  if (start < 0) start += size;
  start = std::min(std::max<int64_t>(start, 0), size);
  int64_t step = a.int_or(5, 1), n = src.type.dims[dim];
  if (step == 1) {
    std::vector<int64_t> at(t.rank(), 0);
    at[dim] = start;
    return {ctx.b.DynamicUpdateSlice(self, src, at)};
  }
  int64_t last = start + (n - 1) * step;
  std::vector<int64_t> lo(t.rank(), 0), hi(t.rank(), 0), interior(t.rank(), 0);
  lo[dim] = start;
  hi[dim] = size - last - 1;
  interior[dim] = step - 1;
  Value placed = ctx.b.Pad(src, ctx.b.Constant(0, {t.elem, {}}), lo, hi, interior);
  TensorType it{ElemType::S64, t.dims};
  Value i = ctx.b.Binary("subtract", ctx.b.Iota(it, dim), ctx.b.ConstantInt(start, it));
  Value in_range = ctx.b.Binary("and", ctx.b.Compare(Cmp::GE, i, ctx.b.ConstantInt(0, it)),
                                ctx.b.Compare(Cmp::LE, i, ctx.b.ConstantInt(last - start, it)));
  Value on_step = ctx.b.Compare(Cmp::EQ, ctx.b.Binary("remainder", i, ctx.b.ConstantInt(step, it)),
                                ctx.b.ConstantInt(0, it));
  return {ctx.b.Select(ctx.b.Binary("and", in_range, on_step), placed, self)};
}

// select_scatter(self, src, dim, index): self with self.select(dim, index) = src.
std::vector<Value> LowerSelectScatter(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value self = CastTo(ctx, a.tensor(0), t);
  int64_t dim = WrapDim(a.int_(2), t.rank()), index = a.int_(3);
  if (index < 0) index += t.dims[dim];
  std::vector<int64_t> dims = t.dims, at(t.rank(), 0);
  dims[dim] = 1;
  at[dim] = index;
  Value src = ctx.b.Reshape(ConvertTo(ctx, a.tensor(1), t.elem), dims);
  return {ctx.b.DynamicUpdateSlice(self, src, at)};
}

}  // namespace

TPU_LOWERING("aten::_index_put_impl_", LowerIndexPut);
TPU_LOWERING("aten::_unsafe_index.Tensor", LowerIndex);
TPU_LOWERING("aten::_unsafe_masked_index", LowerUnsafeMaskedIndex);
TPU_LOWERING("aten::_unsafe_masked_index_put_accumulate", LowerUnsafeMaskedIndexPutAccumulate);
TPU_LOWERING("aten::gather", LowerGather);
TPU_GRAPH_LOWERING("aten::index.Tensor", LowerIndex);
TPU_LOWERING("aten::index_add", LowerIndexAdd);
TPU_LOWERING("aten::index_copy", LowerIndexCopy);
TPU_LOWERING("aten::index_fill.int_Scalar", LowerIndexFill);
TPU_LOWERING("aten::index_fill.int_Tensor", LowerIndexFill);
TPU_LOWERING("aten::index_put", LowerIndexPut);
TPU_LOWERING("aten::index_reduce", LowerIndexReduce);
TPU_LOWERING("aten::index_select", LowerIndexSelect);
TPU_LOWERING("aten::masked_scatter", LowerMaskedScatter);
TPU_LOWERING("aten::nonzero_static", LowerNonzeroStatic);
TPU_LOWERING("aten::put", LowerPut);
TPU_LOWERING("aten::scatter.reduce", LowerScatterReduce);
TPU_LOWERING("aten::scatter.src", LowerScatter);
TPU_LOWERING("aten::scatter.value", LowerScatter);
TPU_LOWERING("aten::scatter.value_reduce", LowerScatterReduce);
TPU_LOWERING("aten::scatter_add", LowerScatterAdd);
TPU_LOWERING("aten::scatter_reduce.two", LowerScatterReduceTwo);
TPU_LOWERING("aten::select_scatter", LowerSelectScatter);
TPU_LOWERING("aten::slice_scatter", LowerSliceScatter);
TPU_LOWERING("aten::take", LowerTake);

}  // namespace tpu::lowering
