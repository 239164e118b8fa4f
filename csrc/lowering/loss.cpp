// Losses over class scores with integer targets: negative log-likelihood (nll_loss, nll_loss2d),
// multi-class and multi-label margin losses, and CTC (connectionist temporal classification).
// Sums accumulate in f32 for half types; targets out of range raise through device checks, as
// the CPU kernels raise.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "helpers.h"

namespace tpu::lowering {
namespace {

// Scores as (N, C) in the accumulator type: a 1-D input is one sample.
Value Samples(Ctx& ctx, Value x, ElemType acc) {
  x = ConvertTo(ctx, x, acc);
  return x.type.rank() <= 1 ? ctx.b.Reshape(x, {1, x.type.rank() == 0 ? 1 : x.type.dims[0]}) : x;
}

// The per-sample incoming gradient of a reduced loss: g broadcast to (n), divided by n for mean.
Value PerSample(Ctx& ctx, Value g, int64_t reduction, int64_t n, ElemType acc) {
  g = ConvertTo(ctx, g, acc);
  if (reduction == kNone) return ctx.b.Reshape(g, {n});
  Value s = ctx.b.Reshape(g, {});
  if (reduction == kMean) s = Bin(ctx, "divide", s, ctx.b.Constant(static_cast<double>(n), s.type));
  return BroadcastTo(ctx, s, {n});
}

Value ReduceLoss(Ctx& ctx, Value per_sample, int64_t reduction) {
  Value r = Reduce(ctx, per_sample, reduction);
  return ctx.b.Reshape(ConvertTo(ctx, r, ctx.out(0).elem), ctx.out(0).dims);
}

// ---- multi_margin_loss ----

// The hinge terms of multi_margin_loss for (N, C) scores x and targets y:
// h[i, j] = max(0, margin - x[i, y_i] + x[i, j]) for j != y_i, before the power p.
struct MultiMargin {
  Value onehot;  // (N, C) pred: j == y_i
  Value z;       // (N, C) margin - x[y] + x[j], masked to 0 at j == y and where negative
  Value scale;   // (N, C) weight[y_i] / C
  Value square;  // scalar pred: p == 2
};

MultiMargin MultiMarginTerms(Ctx& ctx, Value x, const Args& a, size_t target, size_t p, size_t margin, size_t weight) {
  int64_t n = x.type.dims[0], c = x.type.dims[1];
  Value y = ctx.b.Reshape(ConvertTo(ctx, a.tensor(target), ElemType::S64), {n});
  ctx.AddCheck(IndexOutOfRange(ctx, y, c, false), "multi_margin_loss: target out of range", Ctx::ErrorKind::Runtime);
  TensorType nc{ElemType::S64, {n, c}};
  MultiMargin m;
  m.onehot = ctx.b.Compare(Cmp::EQ, ctx.b.Iota(nc, 1), ctx.b.BroadcastInDim(y, nc.dims, {0}));
  Value zero = ctx.b.Constant(0, x.type);
  Value picked = SumOver(ctx, ctx.b.Select(m.onehot, x, zero), {1});
  Value z = Bin(ctx, "add", Bin(ctx, "subtract", CastTo(ctx, a.tensor(margin), x.type),
                                 ctx.b.BroadcastInDim(picked, x.type.dims, {0})), x);
  Value positive = And(ctx, ctx.b.Compare(Cmp::GT, z, zero), Not(ctx, m.onehot));
  m.z = ctx.b.Select(positive, z, zero);
  Value scale = ctx.b.Constant(1.0 / static_cast<double>(c), {x.type.elem, {n}});
  Value w = a.optional_tensor(weight);
  if (w.valid()) {
    Value wy = Take(ctx, ConvertTo(ctx, w, x.type.elem), 0, ctx.b.Select(
        ctx.b.Compare(Cmp::LT, y, ctx.b.ConstantInt(c, y.type)), y, ctx.b.ConstantInt(0, y.type)));
    scale = Bin(ctx, "multiply", scale, wy);
  }
  m.scale = ctx.b.BroadcastInDim(scale, x.type.dims, {0});
  m.square = ctx.b.Compare(Cmp::EQ, ConvertTo(ctx, a.tensor(p), ElemType::F64), ctx.b.Constant(2, {ElemType::F64, {}}));
  return m;
}

// multi_margin_loss(x, target, p, margin, weight?, reduction):
// loss_i = sum_{j != y_i} max(0, margin - x[y_i] + x[j])^p * weight[y_i] / C, p in {1, 2}.
std::vector<Value> LowerMultiMarginLoss(Ctx& ctx, const Args& a) {
  Value x = Samples(ctx, a.tensor(0), AccumulatorType(ctx.out().elem));
  MultiMargin m = MultiMarginTerms(ctx, x, a, 1, 2, 3, 4);
  Value h = ctx.b.Select(BroadcastTo(ctx, m.square, x.type.dims), Bin(ctx, "multiply", m.z, m.z), m.z);
  return {ReduceLoss(ctx, SumOver(ctx, Bin(ctx, "multiply", h, m.scale), {1}), a.int_(5))};
}

// multi_margin_loss_backward(g, x, target, p, margin, weight?, reduction): each positive hinge
// adds d = g * (p == 2 ? 2 z : 1) * weight[y] / C to x[j] and subtracts it from x[y].
std::vector<Value> LowerMultiMarginLossBackward(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value x = Samples(ctx, a.tensor(1), acc);
  MultiMargin m = MultiMarginTerms(ctx, x, a, 2, 3, 4, 5);
  Value g = ctx.b.BroadcastInDim(PerSample(ctx, a.tensor(0), a.int_(6), x.type.dims[0], acc), x.type.dims, {0});
  Value zero = ctx.b.Constant(0, x.type);
  Value active = ctx.b.Select(ctx.b.Compare(Cmp::GT, m.z, zero), ctx.b.Constant(1, x.type), zero);
  Value slope = ctx.b.Select(BroadcastTo(ctx, m.square, x.type.dims), Bin(ctx, "multiply", m.z, Const(ctx, 2, m.z)), active);
  Value d = Bin(ctx, "multiply", Bin(ctx, "multiply", slope, m.scale), g);
  Value total = ctx.b.BroadcastInDim(SumOver(ctx, d, {1}), x.type.dims, {0});
  Value grad = ctx.b.Select(m.onehot, ctx.b.Unary("negate", total), d);
  return {ctx.b.Reshape(ConvertTo(ctx, grad, ctx.out().elem), ctx.out().dims)};
}

// ---- multilabel_margin_loss ----

// The pieces of multilabel_margin_loss for (N, C) scores: the targets of sample i are
// y[i, 0..k) up to the first negative entry.
struct MultiLabel {
  Value label;      // (N, K, J) pred: label k of sample i is class j
  Value is_target;  // (N, J) pred: j is one of the sample's labels
  Value z;          // (N, K, J) 1 - x[y_k] + x[j] where k is a label and j is not, and positive; else 0
};

MultiLabel MultiLabelTerms(Ctx& ctx, Value x, Value target) {
  int64_t n = x.type.dims[0], c = x.type.dims[1];
  Value y = ctx.b.Reshape(ConvertTo(ctx, target, ElemType::S64), {n, c});
  TensorType nk{ElemType::S64, {n, c}};
  // A label counts while no negative entry came before it: k < the first negative position.
  Value negative = ctx.b.Compare(Cmp::LT, y, ctx.b.ConstantInt(0, nk));
  Value first = ctx.b.Reduce(ctx.b.Select(negative, ctx.b.Iota(nk, 1), ctx.b.ConstantInt(c, nk)),
                             ctx.b.ConstantInt(c, {ElemType::S64, {}}), {1}, "minimum");
  Value valid = ctx.b.Compare(Cmp::LT, ctx.b.Iota(nk, 1), ctx.b.BroadcastInDim(first, nk.dims, {0}));
  ctx.AddCheck(AnyTrue(ctx, And(ctx, valid, ctx.b.Compare(Cmp::GE, y, ctx.b.ConstantInt(c, nk)))),
               "multilabel_margin_loss: target out of range", Ctx::ErrorKind::Runtime);
  std::vector<int64_t> nkj = {n, c, c};
  Value label = And(ctx, ctx.b.Compare(Cmp::EQ, ctx.b.BroadcastInDim(y, nkj, {0, 1}), ctx.b.Iota({ElemType::S64, nkj}, 2)),
                    ctx.b.BroadcastInDim(valid, nkj, {0, 1}));
  MultiLabel m;
  m.label = label;
  m.is_target = ctx.b.Reduce(label, ctx.b.Constant(0, {ElemType::Pred, {}}), {1}, "or");
  Value zero = ctx.b.Constant(0, {x.type.elem, nkj});
  Value xj = ctx.b.BroadcastInDim(x, nkj, {0, 2});
  Value xy = ctx.b.BroadcastInDim(SumOver(ctx, ctx.b.Select(label, xj, zero), {2}), nkj, {0, 1});
  Value z = Bin(ctx, "add", Bin(ctx, "subtract", ctx.b.Constant(1, zero.type), xy), xj);
  Value pair = And(ctx, ctx.b.BroadcastInDim(valid, nkj, {0, 1}), Not(ctx, ctx.b.BroadcastInDim(m.is_target, nkj, {0, 2})));
  m.z = ctx.b.Select(And(ctx, pair, ctx.b.Compare(Cmp::GT, z, zero)), z, zero);
  return m;
}

// multilabel_margin_loss_forward(x, target, reduction) -> (loss, is_target):
// loss_i = sum over labels k and non-labels j of max(0, 1 - (x[y_k] - x[j])) / C.
std::vector<Value> LowerMultiLabelMarginLoss(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value x = Samples(ctx, a.tensor(0), acc);
  MultiLabel m = MultiLabelTerms(ctx, x, a.tensor(1));
  Value loss = Bin(ctx, "divide", SumOver(ctx, m.z, {1, 2}), ctx.b.Constant(static_cast<double>(x.type.dims[1]), {acc, {x.type.dims[0]}}));
  Value is_target = ConvertTo(ctx, m.is_target, ctx.out(1).elem);
  return {ReduceLoss(ctx, loss, a.int_(2)), ctx.b.Reshape(is_target, ctx.out(1).dims)};
}

// multilabel_margin_loss_backward(g, x, target, reduction, is_target): each positive term
// adds g / C to x[j] and subtracts it from x[y_k].
std::vector<Value> LowerMultiLabelMarginLossBackward(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value x = Samples(ctx, a.tensor(1), acc);
  int64_t n = x.type.dims[0], c = x.type.dims[1];
  MultiLabel m = MultiLabelTerms(ctx, x, a.tensor(2));
  Value g = Bin(ctx, "divide", PerSample(ctx, a.tensor(0), a.int_(3), n, acc), ctx.b.Constant(static_cast<double>(c), {acc, {n}}));
  std::vector<int64_t> nkj = {n, c, c};
  Value zero = ctx.b.Constant(0, {acc, nkj}), one = ctx.b.Constant(1, zero.type);
  Value active = ctx.b.Select(ctx.b.Compare(Cmp::GT, m.z, zero), one, zero);
  Value to_j = SumOver(ctx, active, {1});                                       // (N, J)
  Value per_label = ctx.b.BroadcastInDim(SumOver(ctx, active, {2}), nkj, {0, 1});  // (N, K) terms of label k
  Value from_y = SumOver(ctx, ctx.b.Select(m.label, per_label, zero), {1});       // (N, J): at class y_k
  Value grad = Bin(ctx, "multiply", Bin(ctx, "subtract", to_j, from_y), ctx.b.BroadcastInDim(g, {n, c}, {0}));
  return {ctx.b.Reshape(ConvertTo(ctx, grad, ctx.out().elem), ctx.out().dims)};
}

// ---- ctc_loss ----
// Graves et al. 2006, in log space. The extended target l' of sample n is blank, y_1, blank,
// y_2, ..., blank (2 S_n + 1 states, padded to L = 2 max S + 1). Lengths are static lists.

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// x[i] along `dim` at the run-time index i (an s64 scalar), keeping the dim as size 1.
Value SliceAt(Ctx& ctx, Value x, Value i, int64_t dim) {
  std::vector<Value> operands = {x};
  std::vector<int64_t> sizes = x.type.dims;
  sizes[dim] = 1;
  for (int64_t d = 0; d < x.type.rank(); ++d) operands.push_back(d == dim ? i : ctx.b.ConstantInt(0, {ElemType::S64, {}}));
  return ctx.b.Op1("stablehlo.dynamic_slice", operands, {x.type.elem, sizes}, "slice_sizes = " + shlo::DenseI64(sizes));
}

Value UpdateAt(Ctx& ctx, Value x, Value update, Value i, int64_t dim) {
  std::vector<Value> operands = {x, update};
  for (int64_t d = 0; d < x.type.rank(); ++d) operands.push_back(d == dim ? i : ctx.b.ConstantInt(0, {ElemType::S64, {}}));
  return ctx.b.Op1("stablehlo.dynamic_update_slice", operands, x.type);
}

// log(sum(exp(terms))) elementwise over same-shaped terms; -inf when all are -inf.
Value LogSumExp(Ctx& ctx, const std::vector<Value>& terms) {
  Value m = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) m = ctx.b.Binary("maximum", m, terms[i]);
  Value neg_inf = ctx.b.Constant(kNegInf, m.type);
  Value finite = ctx.b.Compare(Cmp::NE, m, neg_inf);
  Value safe_m = ctx.b.Select(finite, m, ctx.b.Constant(0, m.type));
  Value sum;
  for (const Value& t : terms) {
    Value e = ctx.b.Unary("exponential", Sub(ctx, t, safe_m));
    sum = sum.valid() ? Add(ctx, sum, e) : e;
  }
  return ctx.b.Select(finite, Add(ctx, safe_m, ctx.b.Unary("log", sum)), neg_inf);
}

// The static and run-time pieces every CTC rule needs.
struct Ctc {
  int64_t t = 0, n = 0, c = 0, l = 0;
  std::vector<int64_t> in_len, tgt_len;
  Value lp;           // (T, N, C) log-probabilities in the compute type
  Value ext;          // (N, L) s64 extended target labels
  Value lp_ext;       // (T, N, L) lp[t, n, l'_s]
  Value skip;         // (N, L) pred: state s may be entered from s - 2
  Value states;       // (N, L) pred: s < 2 S_n + 1
  Value last_states;  // (N, L) pred: s is 2 S_n or 2 S_n - 1 (the accepting states)
  Value active(Ctx& ctx, Value step) const;  // (N, L) pred: step < T_n
};

Value Ctc::active(Ctx& ctx, Value step) const {
  Value len = ctx.b.BroadcastInDim(ConstI64(ctx, in_len), {n, l}, {0});
  return ctx.b.Compare(Cmp::LT, ctx.b.BroadcastInDim(step, {n, l}, {}), len);
}

Value StateTable(Ctx& ctx, int64_t n, int64_t l, const std::function<bool(int64_t, int64_t)>& f) {
  std::vector<bool> v;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t s = 0; s < l; ++s) v.push_back(f(i, s));
  return ctx.b.Reshape(ConstPred(ctx, v), {n, l});
}

// Reads (log_probs, targets, input_lengths, target_lengths, blank) from `first` on.
Ctc CtcPieces(Ctx& ctx, const Args& a, size_t first, int64_t blank, ElemType acc) {
  Ctc p;
  p.lp = ConvertTo(ctx, a.tensor(first), acc);
  if (p.lp.type.rank() == 2) p.lp = ctx.b.Reshape(p.lp, {p.lp.type.dims[0], 1, p.lp.type.dims[1]});
  p.t = p.lp.type.dims[0], p.n = p.lp.type.dims[1], p.c = p.lp.type.dims[2];
  p.in_len = a.ints(first + 2);
  p.tgt_len = a.ints(first + 3);
  if (static_cast<int64_t>(p.in_len.size()) != p.n || static_cast<int64_t>(p.tgt_len.size()) != p.n)
    throw std::invalid_argument("ctc_loss: input_lengths and target_lengths must have one entry per batch element");
  int64_t max_s = 0;
  for (int64_t s : p.tgt_len) max_s = std::max(max_s, s);
  p.l = 2 * max_s + 1;
  // Where label k of sample i sits in `targets`: padded (N, S) rows or one concatenated list.
  Value targets = ConvertTo(ctx, a.tensor(first + 1), ElemType::S64);
  bool padded = targets.type.rank() == 2;
  int64_t row = padded ? targets.type.dims[1] : 0, offset = 0;
  std::vector<int64_t> where;
  for (int64_t i = 0; i < p.n; ++i) {
    for (int64_t s = 0; s < p.l; ++s) {
      int64_t k = std::min((s - 1) / 2, std::max<int64_t>(p.tgt_len[i] - 1, 0));
      where.push_back(std::max<int64_t>(0, std::min(padded ? i * row + k : offset + k, targets.type.numel() - 1)));
    }
    offset += p.tgt_len[i];
  }
  Value labels = targets.type.numel() == 0 ? ctx.b.ConstantInt(blank, {ElemType::S64, {p.n * p.l}})
                                           : ctx.b.Gather1D(ctx.b.Reshape(targets, {targets.type.numel()}), ConstI64(ctx, where));
  Value odd = StateTable(ctx, p.n, p.l, [&](int64_t i, int64_t s) { return s % 2 == 1 && s < 2 * p.tgt_len[i] + 1; });
  p.ext = ctx.b.Select(odd, ctx.b.Reshape(labels, {p.n, p.l}), ctx.b.ConstantInt(blank, {ElemType::S64, {p.n, p.l}}));
  ctx.AddCheck(AnyTrue(ctx, And(ctx, odd, Or(ctx, ctx.b.Compare(Cmp::LT, p.ext, ctx.b.ConstantInt(0, p.ext.type)),
                                               ctx.b.Compare(Cmp::GE, p.ext, ctx.b.ConstantInt(p.c, p.ext.type))))),
               "ctc_loss: target label out of range");
  // skip: l'_s is a label different from l'_{s-2}.
  Value before = ctx.b.Pad(p.ext, ctx.b.ConstantInt(blank, {ElemType::S64, {}}), {0, 2}, {0, -2}, {0, 0});
  Value two = StateTable(ctx, p.n, p.l, [](int64_t, int64_t s) { return s >= 2; });
  p.skip = And(ctx, And(ctx, odd, two), ctx.b.Compare(Cmp::NE, p.ext, before));
  p.states = StateTable(ctx, p.n, p.l, [&](int64_t i, int64_t s) { return s < 2 * p.tgt_len[i] + 1; });
  p.last_states = StateTable(ctx, p.n, p.l, [&](int64_t i, int64_t s) {
    return s == 2 * p.tgt_len[i] || (p.tgt_len[i] > 0 && s == 2 * p.tgt_len[i] - 1);
  });
  std::vector<int64_t> tnl = {p.t, p.n, p.l};
  TensorType idx{ElemType::S64, tnl};
  std::vector<int64_t> coord_dims = {p.t, p.n, p.l, 1};
  // Labels clamped into [0, C) for the gather (a bad label raises above).
  Value label = ctx.b.Binary("maximum", ctx.b.Binary("minimum", p.ext, ctx.b.ConstantInt(p.c - 1, p.ext.type)),
                             ctx.b.ConstantInt(0, p.ext.type));
  Value coords = ctx.b.Concatenate({ctx.b.Reshape(ctx.b.Iota(idx, 0), coord_dims), ctx.b.Reshape(ctx.b.Iota(idx, 1), coord_dims),
                                    ctx.b.Reshape(ctx.b.BroadcastInDim(label, tnl, {1, 2}), coord_dims)}, 3);
  p.lp_ext = GatherPoints(ctx, p.lp, coords);
  return p;
}

// Shifts (N, L) states toward higher s by k, filling with -inf.
Value ShiftUp(Ctx& ctx, Value v, int64_t k) {
  return ctx.b.Pad(v, ctx.b.Constant(kNegInf, {v.type.elem, {}}), {0, k}, {0, -k}, {0, 0});
}
Value ShiftDown(Ctx& ctx, Value v, int64_t k) {
  return ctx.b.Pad(v, ctx.b.Constant(kNegInf, {v.type.elem, {}}), {0, -k}, {0, k}, {0, 0});
}

Value Row(Ctx& ctx, Value tnl, Value step, const Ctc& p) {
  return ctx.b.Reshape(SliceAt(ctx, tnl, step, 0), {p.n, p.l});
}

// The forward variables alpha (N, T, L): alpha[0] starts in l'_0 or l'_1; then
// alpha[t, s] = lse(alpha[t-1, s], alpha[t-1, s-1], skip ? alpha[t-1, s-2]) + lp[t, l'_s].
// Steps at or past T_n and states past 2 S_n are -inf.
Value Alphas(Ctx& ctx, const Ctc& p) {
  TensorType nl{p.lp.type.elem, {p.n, p.l}};
  Value neg_inf = ctx.b.Constant(kNegInf, nl);
  Value first = StateTable(ctx, p.n, p.l, [&](int64_t i, int64_t s) { return p.in_len[i] > 0 && (s == 0 || (s == 1 && p.tgt_len[i] > 0)); });
  Value alpha0 = ctx.b.Select(first, Row(ctx, p.lp_ext, ctx.b.ConstantInt(0, {ElemType::S64, {}}), p), neg_inf);
  Value all = ctx.b.Constant(kNegInf, {nl.elem, {p.n, p.t, p.l}});
  all = UpdateAt(ctx, all, ctx.b.Reshape(alpha0, {p.n, 1, p.l}), ctx.b.ConstantInt(0, {ElemType::S64, {}}), 1);
  auto out = ForLoop(ctx, p.t - 1, {alpha0, all}, [&](Value i, const std::vector<Value>& v) {
    Value step = Add(ctx, i, ctx.b.ConstantInt(1, i.type));
    Value prev = v[0];
    Value next = Add(ctx, LogSumExp(ctx, {prev, ShiftUp(ctx, prev, 1), ctx.b.Select(p.skip, ShiftUp(ctx, prev, 2), neg_inf)}),
                     Row(ctx, p.lp_ext, step, p));
    next = ctx.b.Select(And(ctx, p.states, p.active(ctx, step)), next, neg_inf);
    return std::vector<Value>{next, UpdateAt(ctx, v[1], ctx.b.Reshape(next, {p.n, 1, p.l}), step, 1)};
  });
  return out[1];
}

// The negative log-likelihood per sample from the alphas at t = T_n - 1.
Value CtcNll(Ctx& ctx, const Ctc& p, Value alphas) {
  std::vector<int64_t> last;
  for (int64_t i = 0; i < p.n; ++i) last.push_back(std::max<int64_t>(p.in_len[i] - 1, 0));
  std::vector<int64_t> coords;
  for (int64_t i = 0; i < p.n; ++i)
    for (int64_t s = 0; s < p.l; ++s) coords.insert(coords.end(), {i, last[i], s});
  Value at_end = GatherPoints(ctx, alphas, ctx.b.Reshape(ConstI64(ctx, coords), {p.n, p.l, 3}));
  Value ends = ctx.b.Select(p.last_states, at_end, ctx.b.Constant(kNegInf, at_end.type));
  Value m = ctx.b.Reduce(ends, ctx.b.Constant(kNegInf, {ends.type.elem, {}}), {1}, "maximum");
  Value finite = ctx.b.Compare(Cmp::NE, m, ctx.b.Constant(kNegInf, m.type));
  Value safe_m = ctx.b.Select(finite, m, ctx.b.Constant(0, m.type));
  Value sum = SumOver(ctx, ctx.b.Unary("exponential", Sub(ctx, ends, ctx.b.BroadcastInDim(safe_m, ends.type.dims, {0}))), {1});
  Value ll = ctx.b.Select(finite, Add(ctx, safe_m, ctx.b.Unary("log", sum)), ctx.b.Constant(kNegInf, m.type));
  return ctx.b.Unary("negate", ll);
}

Value ZeroInfinite(Ctx& ctx, Value v, Value reference) {
  Value inf = ctx.b.Compare(Cmp::EQ, ctx.b.Unary("abs", reference), ctx.b.Constant(std::numeric_limits<double>::infinity(), reference.type));
  return ctx.b.Select(BroadcastTo(ctx, inf, v.type.dims), ctx.b.Constant(0, v.type), v);
}

// _ctc_loss(log_probs (T, N, C), targets, input_lengths, target_lengths, blank, zero_infinity)
//   -> (nll (N), log_alpha (N, T, L)), as the CPU kernel returns them
std::vector<Value> LowerCtcLoss(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out(0).elem);
  Ctc p = CtcPieces(ctx, a, 0, a.int_(4), acc);
  Value alphas = Alphas(ctx, p);
  Value nll = CtcNll(ctx, p, alphas);  // inf even with zero_infinity: ctc_loss zeroes it, the backward reads it
  return {ctx.b.Reshape(ConvertTo(ctx, nll, ctx.out(0).elem), ctx.out(0).dims),
          ctx.b.Reshape(ConvertTo(ctx, alphas, ctx.out(1).elem), ctx.out(1).dims)};
}

// The backward variables beta (T, N, L), by the mirrored recursion from t = T_n - 1.
Value Betas(Ctx& ctx, const Ctc& p) {
  TensorType nl{p.lp.type.elem, {p.n, p.l}};
  Value neg_inf = ctx.b.Constant(kNegInf, nl);
  Value skip_from = ShiftDown(ctx, ctx.b.Select(p.skip, ctx.b.Constant(0, nl), neg_inf), 2);  // s + 2 may skip to s
  Value all = ctx.b.Constant(kNegInf, {nl.elem, {p.t, p.n, p.l}});
  auto out = ForLoop(ctx, p.t, {neg_inf, all}, [&](Value i, const std::vector<Value>& v) {
    Value step = Sub(ctx, ctx.b.ConstantInt(p.t - 1, i.type), i);
    Value prev = v[0];
    Value lp = Row(ctx, p.lp_ext, step, p);
    Value next = Add(ctx, LogSumExp(ctx, {prev, ShiftDown(ctx, prev, 1), Add(ctx, ShiftDown(ctx, prev, 2), skip_from)}), lp);
    Value len = ctx.b.BroadcastInDim(ConstI64(ctx, p.in_len), {p.n, p.l}, {0});
    Value last = ctx.b.Compare(Cmp::EQ, ctx.b.BroadcastInDim(Add(ctx, step, ctx.b.ConstantInt(1, step.type)), {p.n, p.l}, {}), len);
    next = ctx.b.Select(last, ctx.b.Select(p.last_states, lp, neg_inf), next);
    next = ctx.b.Select(And(ctx, p.states, p.active(ctx, step)), next, neg_inf);
    return std::vector<Value>{next, UpdateAt(ctx, v[1], ctx.b.Reshape(next, {1, p.n, p.l}), step, 0)};
  });
  return out[1];
}

// _ctc_loss_backward(grad (N), log_probs, targets, input_lengths, target_lengths, nll, log_alpha,
// blank, zero_infinity): d/d lp[t, n, c] = (exp(lp) - exp(lse_{s: l'_s = c}(alpha + beta)
// + nll - lp)) * grad[n], zero for t >= T_n (and for an infinite loss under zero_infinity).
std::vector<Value> LowerCtcLossBackward(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Ctc p = CtcPieces(ctx, a, 1, a.int_(7), acc);
  std::vector<int64_t> tnl = {p.t, p.n, p.l}, tnlc = {p.t, p.n, p.l, p.c}, tnc = {p.t, p.n, p.c};
  Value alphas = ctx.b.Transpose(ConvertTo(ctx, a.tensor(6), acc), {1, 0, 2});
  Value ab = Add(ctx, alphas, Betas(ctx, p));
  Value is_c = ctx.b.Compare(Cmp::EQ, ctx.b.BroadcastInDim(p.ext, tnlc, {1, 2}), ctx.b.Iota({ElemType::S64, tnlc}, 3));
  Value terms = ctx.b.Select(is_c, ctx.b.BroadcastInDim(ab, tnlc, {0, 1, 2}), ctx.b.Constant(kNegInf, {acc, tnlc}));
  Value m = ctx.b.Reduce(terms, ctx.b.Constant(kNegInf, {acc, {}}), {2}, "maximum");
  Value finite = ctx.b.Compare(Cmp::NE, m, ctx.b.Constant(kNegInf, m.type));
  Value safe_m = ctx.b.Select(finite, m, ctx.b.Constant(0, m.type));
  Value sum = SumOver(ctx, ctx.b.Unary("exponential", Sub(ctx, terms, ctx.b.BroadcastInDim(safe_m, tnlc, {0, 1, 3}))), {2});
  Value lse = ctx.b.Select(finite, Add(ctx, safe_m, ctx.b.Unary("log", sum)), ctx.b.Constant(kNegInf, m.type));
  Value nll = ctx.b.BroadcastInDim(ctx.b.Reshape(ConvertTo(ctx, a.tensor(5), acc), {p.n}), tnc, {1});
  Value grad = ctx.b.BroadcastInDim(ctx.b.Reshape(ConvertTo(ctx, a.tensor(0), acc), {p.n}), tnc, {1});
  Value d = Sub(ctx, ctx.b.Unary("exponential", p.lp), ctx.b.Unary("exponential", Sub(ctx, Add(ctx, lse, nll), p.lp)));
  d = Mul(ctx, d, grad);
  std::vector<bool> live;
  for (int64_t t = 0; t < p.t; ++t)
    for (int64_t i = 0; i < p.n; ++i) live.push_back(t < p.in_len[i]);
  Value zero = ctx.b.Constant(0, d.type);
  d = ctx.b.Select(ctx.b.BroadcastInDim(ctx.b.Reshape(ConstPred(ctx, live), {p.t, p.n}), tnc, {0, 1}), d, zero);
  if (a.bool_(8)) d = ZeroInfinite(ctx, d, nll);
  return {ctx.b.Reshape(ConvertTo(ctx, d, ctx.out().elem), ctx.out().dims)};
}

// Shared by nll_loss forward and backward: a [N, C] one-hot of the targets and the
// per-sample weights (0 where target == ignore_index).
struct NllPieces {
  Value onehot;   // pred [N, C]
  Value weights;  // acc [N]
};
NllPieces Nll(Ctx& ctx, Value target, Value weight, int64_t ignore_index, int64_t n, int64_t c, ElemType acc) {
  target = ctx.b.Reshape(ConvertTo(ctx, target, ElemType::S64), {n});
  TensorType nc{ElemType::S64, {n, c}};
  Value onehot = ctx.b.Compare(Cmp::EQ, ctx.b.Iota(nc, 1), ctx.b.BroadcastInDim(target, {n, c}, {0}));
  Value w;
  if (weight.valid()) {
    Value wb = ctx.b.BroadcastInDim(ConvertTo(ctx, weight, acc), {n, c}, {1});
    w = SumOver(ctx, ctx.b.Select(onehot, wb, ctx.b.Constant(0, {acc, {n, c}})), {1});
  } else {
    w = ctx.b.Constant(1, {acc, {n}});
  }
  Value valid = ctx.b.Compare(Cmp::NE, target, ctx.b.ConstantInt(ignore_index, {ElemType::S64, {n}}));
  w = ctx.b.Select(valid, w, ctx.b.Constant(0, {acc, {n}}));
  // A target outside [0, C) that is not ignore_index raises, as on the CPU (the one-hot
  // would drop it: a silent zero loss and gradient row).
  if (n > 0) {
    TensorType pred{ElemType::Pred, {n}};
    Value out_of_range = ctx.b.Op1("stablehlo.or",
                                   {ctx.b.Compare(Cmp::LT, target, ctx.b.ConstantInt(0, {ElemType::S64, {n}})),
                                    ctx.b.Compare(Cmp::GE, target, ctx.b.ConstantInt(c, {ElemType::S64, {n}}))},
                                   pred);
    Value bad = ctx.b.Op1("stablehlo.and", {valid, out_of_range}, pred);
    ctx.AddCheck(ctx.b.Reduce(bad, ctx.b.Constant(0, {ElemType::Pred, {}}), {0}, "or"),
                 "Target is out of bounds (a class index outside [0, " + std::to_string(c) + "))");
  }
  return {onehot, w};
}

// The class dim of an nll input: 0 for [C], else 1 ([N, C] or nll_loss2d's [N, C, H, W]).
int64_t ClassDim(const Value& x) { return x.type.rank() == 1 ? 0 : 1; }

// The permutation that moves the class dim last: [N, C, H, W] -> [N, H, W, C].
std::vector<int64_t> ClassesLast(int64_t rank) {
  std::vector<int64_t> perm = {0};
  for (int64_t i = 2; i < rank; ++i) perm.push_back(i);
  if (rank > 1) perm.push_back(1);
  return perm;
}

// x as [samples, classes]: every position of a spatial input is one sample.
Value AsSamples(Ctx& ctx, Value x) {
  if (x.type.rank() > 2) x = ctx.b.Transpose(x, ClassesLast(x.type.rank()));
  int64_t c = x.type.dims.back();
  return ctx.b.Reshape(x, {x.type.numel() / c, c});
}

// nll_loss_forward / nll_loss2d_forward(x, target, weight?, reduction, ignore_index)
//   -> (output, total_weight)
std::vector<Value> LowerNllLoss(Ctx& ctx, const Args& a) {
  ElemType acc = AccumulatorType(ctx.out().elem);
  Value x = AsSamples(ctx, ConvertTo(ctx, a.tensor(0), acc));
  int64_t n = x.type.dims[0], c = x.type.dims[1];
  NllPieces p = Nll(ctx, a.tensor(1), a.optional_tensor(2), a.int_(4), n, c, acc);
  Value picked = SumOver(ctx, ctx.b.Select(p.onehot, x, ctx.b.Constant(0, x.type)), {1});
  Value loss = ctx.b.Unary("negate", Bin(ctx, "multiply", picked, p.weights));
  Value total = SumOver(ctx, p.weights, {0});
  int64_t reduction = a.int_(3);
  Value out;
  if (reduction == kNone) out = loss;
  else if (reduction == kSum) out = SumOver(ctx, loss, {0});
  else out = Bin(ctx, "divide", SumOver(ctx, loss, {0}), total);
  return {ctx.b.Reshape(ConvertTo(ctx, out, ctx.out(0).elem), ctx.out(0).dims),
          ctx.b.Reshape(ConvertTo(ctx, total, ctx.out(1).elem), ctx.out(1).dims)};
}

// nll_loss_backward / nll_loss2d_backward(g, x, target, weight?, reduction, ignore_index, total_weight)
std::vector<Value> LowerNllLossBackward(Ctx& ctx, const Args& a) {
  Value x = a.tensor(1);
  ElemType acc = AccumulatorType(ctx.out().elem);
  int64_t c = x.type.dims[ClassDim(x)], n = x.type.numel() / c;
  NllPieces p = Nll(ctx, a.tensor(2), a.optional_tensor(3), a.int_(5), n, c, acc);
  Value g = ConvertTo(ctx, a.tensor(0), acc);
  int64_t reduction = a.int_(4);
  Value per_sample;
  if (reduction == kNone) {
    per_sample = ctx.b.Reshape(g, {n});
  } else {
    Value scalar = ctx.b.Reshape(g, {});
    if (reduction == kMean) scalar = Bin(ctx, "divide", scalar, ctx.b.Reshape(ConvertTo(ctx, a.tensor(6), acc), {}));
    per_sample = ctx.b.BroadcastInDim(scalar, {n}, {});
  }
  Value coef = ctx.b.Unary("negate", Bin(ctx, "multiply", per_sample, p.weights));
  Value grad = ctx.b.Select(p.onehot, ctx.b.BroadcastInDim(coef, {n, c}, {0}), ctx.b.Constant(0, {acc, {n, c}}));
  grad = ConvertTo(ctx, grad, ctx.out().elem);
  if (x.type.rank() <= 2) return {ctx.b.Reshape(grad, ctx.out().dims)};
  // Back from [samples, C] to [N, H, W, C], then to [N, C, H, W].
  std::vector<int64_t> perm = ClassesLast(x.type.rank()), last_dims, inverse(perm.size());
  for (int64_t d : perm) last_dims.push_back(x.type.dims[d]);
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return {ctx.b.Transpose(ctx.b.Reshape(grad, last_dims), inverse)};
}


}  // namespace

TPU_LOWERING("aten::_ctc_loss", LowerCtcLoss);
TPU_LOWERING("aten::_ctc_loss_backward", LowerCtcLossBackward);
TPU_LOWERING("aten::multi_margin_loss", LowerMultiMarginLoss);
TPU_LOWERING("aten::multi_margin_loss_backward", LowerMultiMarginLossBackward);
TPU_LOWERING("aten::multilabel_margin_loss_backward", LowerMultiLabelMarginLossBackward);
TPU_LOWERING("aten::multilabel_margin_loss_forward", LowerMultiLabelMarginLoss);
TPU_LOWERING("aten::nll_loss2d_backward", LowerNllLossBackward);
TPU_LOWERING("aten::nll_loss2d_forward", LowerNllLoss);
TPU_LOWERING("aten::nll_loss_backward", LowerNllLossBackward);
TPU_LOWERING("aten::nll_loss_forward", LowerNllLoss);

}  // namespace tpu::lowering
