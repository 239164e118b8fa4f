// Losses over class scores with integer targets: multi-class and multi-label margin losses.
// Sums accumulate in f32 for half types; targets out of range raise through device checks, as
// the CPU kernels raise.
#include <cmath>

#include "helpers.h"
#include "nn_util.h"

namespace tpu::lowering {
namespace {
using nn::Bin;
using nn::Scalar;
using nn::SumOver;

// Scores as (N, C) in the accumulator type: a 1-D input is one sample.
Value Samples(Ctx& ctx, Value x, ElemType acc) {
  x = ConvertTo(ctx, x, acc);
  return x.type.rank() <= 1 ? ctx.b.Reshape(x, {1, x.type.rank() == 0 ? 1 : x.type.dims[0]}) : x;
}

// The per-sample incoming gradient of a reduced loss: g broadcast to (n), divided by n for mean.
Value PerSample(Ctx& ctx, Value g, int64_t reduction, int64_t n, ElemType acc) {
  g = ConvertTo(ctx, g, acc);
  if (reduction == nn::kNone) return ctx.b.Reshape(g, {n});
  Value s = ctx.b.Reshape(g, {});
  if (reduction == nn::kMean) s = Bin(ctx, "divide", s, ctx.b.Constant(static_cast<double>(n), s.type));
  return BroadcastTo(ctx, s, {n});
}

Value ReduceLoss(Ctx& ctx, Value per_sample, int64_t reduction) {
  Value r = nn::Reduce(ctx, per_sample, reduction);
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
  ctx.AddCheck(IndexOutOfRange(ctx, y, c, false), "multi_margin_loss: target out of range");
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
    Value wy = nn::Take(ctx, ConvertTo(ctx, w, x.type.elem), 0, ctx.b.Select(
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
  Value slope = ctx.b.Select(BroadcastTo(ctx, m.square, x.type.dims), Bin(ctx, "multiply", m.z, Scalar(ctx, 2, m.z)), active);
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
               "multilabel_margin_loss: target out of range");
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

}  // namespace

TPU_LOWERING("aten::multi_margin_loss", LowerMultiMarginLoss);
TPU_LOWERING("aten::multi_margin_loss_backward", LowerMultiMarginLossBackward);
TPU_LOWERING("aten::multilabel_margin_loss_backward", LowerMultiLabelMarginLossBackward);
TPU_LOWERING("aten::multilabel_margin_loss_forward", LowerMultiLabelMarginLoss);

}  // namespace tpu::lowering
