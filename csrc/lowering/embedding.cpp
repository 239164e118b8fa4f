// embedding_bag: sums, means or maxima over bags of rows of weight [V, D]. indices [n] pick the
// rows, offsets [B'] start the bags (with include_last_offset the last offset ends the last
// bag, so B = B' - 1). The bag of index i is the number of bag starts at or before i, minus 1
// (a scatter of the starts and a running sum); indices equal to padding_idx join no bag and do
// not count in a mean. Bags are scatter-adds (scatter-maxima) of the gathered rows; gradients
// are scatter-adds into the weight. f16/bf16 accumulate in f32. Also embedding_renorm, the
// max_norm step of embedding and embedding_bag, and one_hot (rows of an identity matrix).
#include <cmath>
#include <tuple>

#include "helpers.h"

namespace tpu::lowering {
namespace {

enum Mode { kSum = 0, kMean = 1, kMax = 2 };

Value S64(Ctx& ctx, Value v) { return ConvertTo(ctx, v, ElemType::S64); }
Value Less(Ctx& ctx, Value x, Value y) { return ctx.b.Compare(Cmp::LT, x, y); }

// The bag of every index as offsets say (running count of starts at or before it, minus 1):
// [n] s64, -1 before the first start, and B' - 1 past the last offset of include_last_offset.
Value BagOf(Ctx& ctx, Value offsets, int64_t n) {
  Value starts = S64(ctx, offsets);
  starts = ctx.b.Select(Less(ctx, starts, ConstI(ctx, 0, starts)), ConstI(ctx, n, starts), starts);
  starts = ctx.b.Select(Less(ctx, starts, ConstI(ctx, n, starts)), starts, ConstI(ctx, n, starts));
  Value ones = ctx.b.ConstantInt(1, starts.type);
  Value marks = ScatterAddFlat(ctx, ones, starts, n + 1);
  Value zero = ctx.b.ConstantInt(0, {ElemType::S64, {}});
  Value running = Scan(ctx, {marks}, 0, {zero}, [&](const std::vector<Value>& e, const std::vector<Value>& l) {
    return std::vector<Value>{Add(ctx, e[0], l[0])};
  })[0];
  running = ctx.b.Slice(running, {0}, {n}, {1});
  return Sub(ctx, running, ConstI(ctx, 1, running));
}

// The bag each index adds to, or `bags` (a spare row) when it is padding or in no bag.
Value Member(Ctx& ctx, Value idx, Value bag, int64_t bags, int64_t padding_idx) {
  Value in = And(ctx, ctx.b.Compare(Cmp::GE, bag, ConstI(ctx, 0, bag)), Less(ctx, bag, ConstI(ctx, bags, bag)));
  if (padding_idx >= 0) in = And(ctx, in, ctx.b.Compare(Cmp::NE, idx, ConstI(ctx, padding_idx, idx)));
  return ctx.b.Select(in, bag, ConstI(ctx, bags, bag));
}

// Rows of x [m, D] summed into `rows` + 1 rows at `at` [m] (the spare last row is dropped).
Value SumRows(Ctx& ctx, Value x, Value at, int64_t rows) {
  Value s = ScatterAddAlong(ctx, x, 0, at, rows + 1);
  return ctx.b.Slice(s, {0, 0}, {rows, x.type.dims[1]}, {1, 1});
}

Value PerRow(Ctx& ctx, Value v, const Value& like) { return ctx.b.BroadcastInDim(v, like.type.dims, {0}); }

// Per-feature maxima of each bag and the index that gave each: of the bag's rows holding the
// maximum, the first, as on the CPU. An empty bag gives 0 and index 0, as on the CPU.
std::pair<Value, Value> BagMax(Ctx& ctx, Value rows, Value idx, Value member, int64_t bags) {
  int64_t n = rows.type.dims[0], d = rows.type.dims[1];
  Value coords = CoordsAlongDim(ctx, PerRow(ctx, member, rows), 0, 2);  // [n, D, 2]: (bag, feature)
  Value best = ScatterPoints(ctx, ctx.b.Extreme(false, {rows.type.elem, {bags + 1, d}}), coords, rows, "maximum");
  Value hit = ctx.b.Compare(Cmp::EQ, rows, Take(ctx, best, 0, member));
  Value pos = ctx.b.Iota({ElemType::S64, {n, d}}, 0);
  pos = ctx.b.Select(hit, pos, ConstI(ctx, n, pos));
  Value first = ScatterPoints(ctx, ctx.b.ConstantInt(n, {ElemType::S64, {bags + 1, d}}), coords, pos, "minimum");
  first = ctx.b.Slice(first, {0, 0}, {bags, d}, {1, 1});
  Value padded = ctx.b.Concatenate({idx, ctx.b.ConstantInt(0, {ElemType::S64, {1}})}, 0);  // [n] -> 0
  best = ctx.b.Slice(best, {0, 0}, {bags, d}, {1, 1});
  Value empty = ctx.b.Compare(Cmp::EQ, first, ConstI(ctx, n, first));
  return {ctx.b.Select(empty, Const(ctx, 0, best), best), ctx.b.Gather1D(padded, first)};
}

// Bag sums of the rows (times per-sample weights), or means: the sum rounded to the output
// type, then divided in it, as on the CPU. An empty bag gives 0.
Value BagSums(Ctx& ctx, Value rows, Value member, Value count, Value weights, bool mean, ElemType out_elem) {
  if (weights.valid()) rows = Mul(ctx, rows, PerRow(ctx, ConvertTo(ctx, weights, rows.type.elem), rows));
  Value out = ConvertTo(ctx, SumRows(ctx, rows, member, count.type.dims[0]), out_elem);
  if (!mean) return out;
  Value c = ConvertTo(ctx, count, out_elem);
  c = ctx.b.Select(ctx.b.Compare(Cmp::GT, c, Const(ctx, 0, c)), c, Const(ctx, 1, c));
  return Div(ctx, out, PerRow(ctx, c, out));
}

// _embedding_bag / _embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq,
// mode, sparse, per_sample_weights?, include_last_offset, padding_idx)
//   -> (output [B, D], offset2bag [n], bag_size [B'], max_indices [B, D] for max, else [0])
std::vector<Value> LowerEmbeddingBag(Ctx& ctx, const Args& a) {
  Value weight = a.tensor(0), indices = a.tensor(1);
  if (indices.type.rank() != 1) throw Unsupported("embedding_bag with 2-D indices");
  int64_t mode = a.int_(4), padding_idx = a.int_or(8, -1), v = weight.type.dims[0];
  int64_t n = indices.type.numel(), bags = ctx.out(0).dims[0];
  if (n) {
    ctx.AddCheck(IndexOutOfRange(ctx, indices, v, false),
                 "embedding_bag: index out of range: an index is out of bounds for dimension 0 with size " +
                     std::to_string(v),
                 Ctx::ErrorKind::Runtime);
  }
  Value offsets = S64(ctx, a.tensor(2));
  if (int64_t b = offsets.type.numel()) {
    // The CPU's checks of the bag starts.
    Value first = ctx.b.Reshape(ctx.b.Slice(offsets, {0}, {1}, {1}), {});
    ctx.AddCheck(ctx.b.Compare(Cmp::NE, first, ctx.b.ConstantInt(0, first.type)),
                 "embedding_bag: offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                 "from position 0",
                 Ctx::ErrorKind::Runtime);
    Value last = ctx.b.Reshape(ctx.b.Slice(offsets, {b - 1}, {b}, {1}), {});
    ctx.AddCheck(ctx.b.Compare(Cmp::GT, last, ctx.b.ConstantInt(n, last.type)),
                 "embedding_bag: offsets[-1] can not be greater than input's length " + std::to_string(n),
                 Ctx::ErrorKind::Runtime);
    // Decreasing offsets: the CPU's sum and mean kernels walk each bag from its start to the
    // next one and fail with this message; its max kernel bags by position and computes.
    if (mode != kMax && b > 1) {
      Value next = ctx.b.Slice(offsets, {1}, {b}, {1}), prev = ctx.b.Slice(offsets, {0}, {b - 1}, {1});
      ctx.AddCheck(AnyTrue(ctx, Less(ctx, next, prev)),
                   "Expected i < index_size to be true, but got false. (embedding_bag: offsets must be "
                   "non-decreasing in sum and mean mode)",
                   Ctx::ErrorKind::Runtime);
    }
  }
  Value idx = S64(ctx, indices), bag = BagOf(ctx, a.tensor(2), n);
  Value member = Member(ctx, idx, bag, bags, padding_idx);
  Value count = ScatterAddFlat(ctx, ctx.b.ConstantInt(1, idx.type), member, bags + 1);
  count = ctx.b.Slice(count, {0}, {bags}, {1});
  Value out = Splat(ctx, 0, ctx.out(0)), max_indices = Splat(ctx, 0, ctx.out(3));
  if (ctx.out(0).numel() > 0) {  // else no bags or no features: only offset2bag and bag_size
    Value rows = ConvertTo(ctx, Take(ctx, weight, 0, idx), AccumulatorType(ctx.out(0).elem));
    if (mode == kMax) std::tie(out, max_indices) = BagMax(ctx, rows, idx, member, bags);
    else out = BagSums(ctx, rows, member, count, a.optional_tensor(6), mode == kMean, ctx.out(0).elem);
  }
  int64_t extra = ctx.out(2).dims[0] - bags;  // include_last_offset: bag_size has B' entries
  Value bag_size = extra ? ctx.b.Concatenate({count, ctx.b.ConstantInt(0, {ElemType::S64, {extra}})}, 0) : count;
  return {out, bag, bag_size, max_indices};
}

// The arguments of the dense weight gradient, wherever they sit in the op's schema.
struct BagGrad {
  Value grad, idx, bag, bag_size, max_indices, per_sample_weights;
  int64_t num_weights, mode, padding_idx;
  bool by_freq;
};

// d weight of a bag reduction: every bag member's row receives its bag's gradient (times its
// per-sample weight, over the bag size for mean, over the index's frequency with
// scale_grad_by_freq); for max, the row that gave each feature's maximum receives it.
Value DenseBackward(Ctx& ctx, const BagGrad& g) {
  int64_t bags = g.grad.type.dims[0], v = g.num_weights;
  Value bag_size = ctx.b.Slice(S64(ctx, g.bag_size), {0}, {bags}, {1});
  if (g.mode == kMax) {
    Value which = S64(ctx, g.max_indices);
    Value ok = PerRow(ctx, ctx.b.Compare(Cmp::GT, bag_size, ConstI(ctx, 0, bag_size)), which);
    which = ctx.b.Select(ok, which, ConstI(ctx, v, which));  // out of range: dropped
    Value zeros = ctx.b.Constant(0, {g.grad.type.elem, {v, g.grad.type.dims[1]}});
    return ScatterPoints(ctx, zeros, CoordsAlongDim(ctx, which, 0, 2), g.grad, "add");
  }
  Value member = Member(ctx, g.idx, g.bag, bags, g.padding_idx);
  Value in = Less(ctx, member, ConstI(ctx, bags, member));
  Value at_bag = ctx.b.Select(in, member, ConstI(ctx, 0, member));
  ElemType e = g.grad.type.elem;
  Value scale = ctx.b.Constant(1, {e, g.idx.type.dims});
  if (g.per_sample_weights.valid()) scale = ConvertTo(ctx, g.per_sample_weights, e);
  if (g.by_freq) {
    Value freq = ScatterAddFlat(ctx, ctx.b.ConstantInt(1, g.idx.type), g.idx, v + 1);
    scale = Div(ctx, scale, ConvertTo(ctx, ctx.b.Gather1D(freq, g.idx), e));
  }
  if (g.mode == kMean) {
    Value size = ConvertTo(ctx, ctx.b.Gather1D(bag_size, at_bag), e);
    scale = ctx.b.Select(ctx.b.Compare(Cmp::EQ, size, Const(ctx, 0, size)), scale, Div(ctx, scale, size));
  }
  Value rows = Take(ctx, g.grad, 0, at_bag);
  rows = Mul(ctx, rows, PerRow(ctx, scale, rows));
  return SumRows(ctx, rows, ctx.b.Select(in, g.idx, ConstI(ctx, v, g.idx)), v);
}

// _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
// num_weights, scale_grad_by_freq, mode, per_sample_weights?, padding_idx) -> [V, D]
std::vector<Value> LowerEmbeddingBagDenseBackward(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  if (t.numel() == 0) return {Splat(ctx, 0, t)};
  BagGrad g{ConvertTo(ctx, a.tensor(0), AccumulatorType(t.elem)), S64(ctx, a.tensor(1)), S64(ctx, a.tensor(2)),
            a.tensor(3), a.tensor(4), a.optional_tensor(8), a.int_(5), a.int_(7), a.int_or(9, -1), a.bool_(6)};
  return {ConvertTo(ctx, DenseBackward(ctx, g), t.elem)};
}

// _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
// num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights?, padding_idx): the dense
// gradient; offset2bag comes from offsets when the forward left it empty (as the CPU's does).
std::vector<Value> LowerEmbeddingBagBackward(Ctx& ctx, const Args& a) {
  if (a.bool_(9)) throw Unsupported("sparse embedding_bag gradient");
  const TensorType& t = ctx.out();
  if (t.numel() == 0) return {Splat(ctx, 0, t)};
  Value idx = S64(ctx, a.tensor(1));
  int64_t n = idx.type.numel();
  Value bag = a.tensor(3).type.numel() == n ? S64(ctx, a.tensor(3)) : BagOf(ctx, a.tensor(2), n);
  BagGrad g{ConvertTo(ctx, a.tensor(0), AccumulatorType(t.elem)), idx, bag, a.tensor(4), a.tensor(5),
            a.optional_tensor(10), a.int_(6), a.int_(8), a.int_or(11, -1), a.bool_(7)};
  return {ConvertTo(ctx, DenseBackward(ctx, g), t.elem)};
}

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
// padding_idx) -> [n]: d output / d per_sample_weights[i] = grad[bag(i)] . weight[indices[i]].
std::vector<Value> LowerEmbeddingBagPerSampleWeightsBackward(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  if (t.numel() == 0) return {Splat(ctx, 0, t)};
  ElemType acc = AccumulatorType(t.elem);
  Value grad = ConvertTo(ctx, a.tensor(0), acc), weight = a.tensor(1), idx = S64(ctx, a.tensor(2));
  int64_t n = idx.type.numel(), bags = grad.type.dims[0];
  Value bag = a.tensor(4).type.numel() == n ? S64(ctx, a.tensor(4)) : BagOf(ctx, a.tensor(3), n);
  Value member = Member(ctx, idx, bag, bags, a.int_or(6, -1));
  Value in = Less(ctx, member, ConstI(ctx, bags, member));
  Value rows = ConvertTo(ctx, Take(ctx, weight, 0, idx), acc);
  Value g = Take(ctx, grad, 0, ctx.b.Select(in, member, ConstI(ctx, 0, member)));
  Value dot = SumOver(ctx, Mul(ctx, g, rows), {1});
  return {ConvertTo(ctx, ctx.b.Select(in, dot, Const(ctx, 0, dot)), t.elem)};
}

// The p-norm of every row of x [V, D].
Value RowNorms(Ctx& ctx, Value x, double p) {
  Value a = ctx.b.Unary("abs", x);
  Value zero = ctx.b.Constant(0, {x.type.elem, {}});
  if (std::isinf(p)) return ctx.b.Reduce(a, ctx.b.Extreme(p < 0, {x.type.elem, {}}), {1}, p > 0 ? "maximum" : "minimum");
  if (p == 0) return SumOver(ctx, ConvertTo(ctx, ctx.b.Compare(Cmp::NE, a, Const(ctx, 0, a)), x.type.elem), {1});
  if (p == 1) return SumOver(ctx, a, {1});
  if (p == 2) return ctx.b.Unary("sqrt", SumOver(ctx, Mul(ctx, a, a), {1}));
  Value s = ctx.b.Reduce(ctx.b.Binary("power", a, Const(ctx, p, a)), zero, {1}, "add");
  return ctx.b.Binary("power", s, Const(ctx, 1 / p, s));
}

// embedding_renorm(self [V, D], indices, max_norm, norm_type): each row that indices name and
// whose norm exceeds max_norm is scaled by max_norm / (norm + 1e-7). The norm is rounded to
// self's type first: the CPU reads it back from a tensor of that type.
std::vector<Value> LowerEmbeddingRenorm(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value w = a.tensor(0), idx = S64(ctx, a.tensor(1));
  int64_t v = t.dims[0], n = idx.type.numel();
  if (n) {
    ctx.AddCheck(IndexOutOfRange(ctx, idx, v, false),
                 "embedding_renorm: index out of range: an index is out of bounds for dimension 0 with size " +
                     std::to_string(v));
  }
  if (t.numel() == 0 || n == 0) return {w};
  ElemType acc = AccumulatorType(t.elem);
  Value x = ConvertTo(ctx, w, acc);
  Value named = ctx.b.Slice(ScatterAddFlat(ctx, ctx.b.ConstantInt(1, idx.type), idx, v + 1), {0}, {v}, {1});
  Value norm = ConvertTo(ctx, ConvertTo(ctx, RowNorms(ctx, x, a.double_(3)), t.elem), acc);
  Value max_norm = Const(ctx, a.double_(2), norm);
  Value scale = Div(ctx, max_norm, Add(ctx, norm, Const(ctx, 1e-7, norm)));
  Value apply = And(ctx, ctx.b.Compare(Cmp::GT, named, ConstI(ctx, 0, named)), ctx.b.Compare(Cmp::GT, norm, max_norm));
  Value scaled = ConvertTo(ctx, Mul(ctx, x, PerRow(ctx, scale, x)), t.elem);
  return {ctx.b.Select(PerRow(ctx, apply, w), scaled, w)};
}

// embedding(weight, indices) = weight[indices]: index_select of the flattened indices.
std::vector<Value> LowerEmbedding(Ctx& ctx, const Args& a) {
  static const LowerFn index_select = Find("aten::index_select");
  Value weight = a.tensor(0), indices = a.tensor(1);
  int64_t n = indices.type.numel();
  std::vector<int64_t> rows = weight.type.dims;
  rows[0] = n;
  std::vector<Arg> args(3);
  args[0].kind = Arg::Kind::Tensor;
  args[0].value = weight;
  args[1].kind = Arg::Kind::Int;
  args[2].kind = Arg::Kind::Tensor;
  args[2].value = ctx.b.Reshape(indices, {n});
  Ctx sub{ctx.b, {{ctx.out().elem, rows}}, ctx.common};
  Value rows_of = index_select(sub, Args(args)).at(0);
  for (auto& c : sub.checks) ctx.checks.push_back(c);  // index_select's range check guards the result
  return {ctx.b.Reshape(rows_of, ctx.out().dims)};
}

// torch_tpu::_one_hot(self, num_classes): out[..., c] = (self[...] == c) as int64, the rows of
// an identity matrix (csrc/aten/dispatch/nn_ops.cpp routes aten::one_hot here). A class value outside
// [0, num_classes) raises the CPU's message (negative ones first, as the CPU checks them first).
std::vector<Value> LowerOneHot(Ctx& ctx, const Args& a) {
  Value x = S64(ctx, a.tensor("self"));
  const TensorType& out = ctx.out();
  int64_t rank = x.type.rank();
  if (x.type.numel()) {
    ctx.AddCheck(AnyTrue(ctx, Less(ctx, x, ConstI(ctx, 0, x))), "Class values must be non-negative.",
                 Ctx::ErrorKind::Runtime);
    ctx.AddCheck(AnyTrue(ctx, ctx.b.Compare(Cmp::GE, x, ConstI(ctx, out.dims.back(), x))),
                 "Class values must be smaller than num_classes.", Ctx::ErrorKind::Runtime);
  }
  std::vector<int64_t> keep(rank);
  for (int64_t d = 0; d < rank; ++d) keep[d] = d;
  Value hot = ctx.b.Compare(Cmp::EQ, ctx.b.BroadcastInDim(x, out.dims, keep), ctx.b.Iota({ElemType::S64, out.dims}, rank));
  return {ConvertTo(ctx, hot, out.elem)};
}

}  // namespace

TPU_LOWERING("aten::_embedding_bag", LowerEmbeddingBag);
TPU_LOWERING("aten::_embedding_bag_backward", LowerEmbeddingBagBackward);
TPU_LOWERING("aten::_embedding_bag_dense_backward", LowerEmbeddingBagDenseBackward);
TPU_LOWERING("aten::_embedding_bag_forward_only", LowerEmbeddingBag);
TPU_LOWERING("aten::_embedding_bag_per_sample_weights_backward", LowerEmbeddingBagPerSampleWeightsBackward);
TPU_GRAPH_LOWERING("aten::embedding", LowerEmbedding);
TPU_LOWERING("aten::embedding_renorm", LowerEmbeddingRenorm);
TPU_LOWERING("torch_tpu::_one_hot", LowerOneHot);

}  // namespace tpu::lowering
