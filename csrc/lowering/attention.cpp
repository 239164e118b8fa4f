// Scaled dot-product attention, the backend behind F.scaled_dot_product_attention on tpu
// (csrc/aten/dispatch/nn_ops.cpp picks it through _fused_sdp_choice). Scores, softmax and both matmuls
// run in f32 (rule 10). Masks: a boolean mask keeps True, an additive one is added, is_causal
// keeps the lower triangle (top-left aligned, as PyTorch's tril). A fully masked row gives
// zeros (output and gradients), as the CPU kernels do. GQA: fewer key/value heads than query
// heads are shared by consecutive groups of query heads (repeat_interleave). Dropout draws
// from the device generator; the state is returned as (philox_seed, philox_offset) so the
// backward redraws the same mask.
#include <cmath>

#include "helpers.h"

namespace tpu::lowering {
namespace {

struct Attention {
  Value q, k, v;              // f32, k and v expanded to the query heads
  int64_t groups = 1;         // query heads per key/value head
  std::vector<int64_t> batch; // leading dims (batch, heads)
  double scale = 1;
  int64_t r = 0;
};

// k or v [..., Hkv, S, D] -> [..., Hkv * groups, S, D], each head repeated `groups` times.
Value ExpandHeads(Ctx& ctx, Value x, int64_t groups) {
  if (groups == 1) return x;
  int64_t r = x.type.rank();
  std::vector<int64_t> dims = x.type.dims, split = x.type.dims, mapping;
  split.insert(split.begin() + (r - 2), groups);
  for (int64_t i = 0; i < r; ++i) mapping.push_back(i < r - 2 ? i : i + 1);
  dims[r - 3] *= groups;
  return ctx.b.Reshape(ctx.b.BroadcastInDim(x, split, mapping), dims);
}

// The transpose of ExpandHeads: sums each group of query-head gradients.
Value SumHeads(Ctx& ctx, Value g, int64_t groups) {
  if (groups == 1) return g;
  int64_t r = g.type.rank();
  std::vector<int64_t> split = g.type.dims;
  split[r - 3] /= groups;
  split.insert(split.begin() + (r - 2), groups);
  return SumOver(ctx, ctx.b.Reshape(g, split), {r - 2});
}

Attention Prepare(Ctx& ctx, Value q, Value k, Value v, const Args& a) {
  Attention at;
  at.r = q.type.rank();
  if (at.r < 3 || k.type.rank() != at.r || v.type.rank() != at.r) throw Unsupported("attention of unbatched inputs");
  at.q = ConvertTo(ctx, q, AccumulatorType(q.type.elem));
  ElemType acc = at.q.type.elem;
  int64_t hq = q.type.dims[at.r - 3], hk = k.type.dims[at.r - 3];
  if (hq % hk != 0) throw Unsupported("query heads not a multiple of key/value heads");
  at.groups = hq / hk;
  at.k = ExpandHeads(ctx, ConvertTo(ctx, k, acc), at.groups);
  at.v = ExpandHeads(ctx, ConvertTo(ctx, v, acc), at.groups);
  for (int64_t i = 0; i < at.r - 2; ++i) at.batch.push_back(i);
  at.scale = a.is_none("scale") ? 1.0 / std::sqrt(static_cast<double>(q.type.dims.back())) : a.double_("scale");
  return at;
}

// scale * q @ k^T + mask, [..., L, S]; masked entries are -inf.
Value Scores(Ctx& ctx, const Attention& at, Value bias, bool causal) {
  int64_t r = at.r;
  Value s = ctx.b.DotGeneral(at.q, at.k, at.batch, at.batch, {r - 1}, {r - 1}, at.q.type.elem, ctx.precision);
  s = Bin(ctx, "multiply", s, Const(ctx, at.scale, s));
  Value ninf = Const(ctx, -INFINITY, s);
  if (bias.valid()) {
    if (bias.type.elem == ElemType::Pred) s = ctx.b.Select(BroadcastTo(ctx, bias, s.type.dims), s, ninf);
    else s = Bin(ctx, "add", s, CastTo(ctx, bias, s.type));
  }
  if (causal) {
    TensorType idx{ElemType::S64, s.type.dims};
    Value keep = ctx.b.Compare(Cmp::LE, ctx.b.Iota(idx, r - 1), ctx.b.Iota(idx, r - 2));
    s = ctx.b.Select(keep, s, ninf);
  }
  return s;
}

// The generator advances its offset by the op's output size, less than the L x S draws of
// the mask when S is large: the offset is folded into the key word, so that consecutive calls
// draw from distinct Philox streams rather than overlapping counter ranges of one.
Value DistinctStream(Ctx& ctx, Value state) {
  TensorType word{ElemType::U64, {1}};
  Value seed = ctx.b.Slice(state, {0}, {1}, {1}), offset = ctx.b.Slice(state, {1}, {2}, {1});
  Value mixed = ctx.b.Binary("xor", seed, ctx.b.Binary("multiply", offset, ctx.b.ConstantInt(6364136223846793005, word)));
  return ctx.b.Concatenate({mixed, offset}, 0);
}

// 1 / (1 - p) where the mask keeps an entry, else 0: the dropout factor of each probability.
Value DropoutFactor(Ctx& ctx, Value state, const TensorType& t, double p) {
  Value u = Uniform01(ctx, DistinctStream(ctx, state), t.dims);
  Value keep = ctx.b.Compare(Cmp::GE, u, ctx.b.Constant(p, {ElemType::F32, t.dims}));
  return ctx.b.Select(keep, ctx.b.Constant(p < 1 ? 1 / (1 - p) : 0, t), ctx.b.Constant(0, t));
}

// The state words as two 0-d s64 tensors (philox_seed, philox_offset) and back.
std::pair<Value, Value> StateWords(Ctx& ctx, Value state) {
  auto word = [&](int64_t i) {
    Value w = ctx.b.Reshape(ctx.b.Slice(state, {i}, {i + 1}, {1}), {});
    return ctx.b.BitcastConvert(w, {ElemType::S64, {}});
  };
  return {word(0), word(1)};
}
Value StateOf(Ctx& ctx, Value seed, Value offset) {
  auto word = [&](Value w) { return ctx.b.Reshape(ctx.b.BitcastConvert(ctx.b.Reshape(w, {}), {ElemType::U64, {}}), {1}); };
  return ctx.b.Concatenate({word(seed), word(offset)}, 0);
}

// Softmax over the last dim that is 0 on fully masked rows; also log-sum-exp (-inf there).
std::pair<Value, Value> SafeSoftmax(Ctx& ctx, Value s) {
  int64_t r = s.type.rank();
  Value m = ctx.b.Reduce(s, ctx.b.Extreme(false, {s.type.elem, {}}), {r - 1}, "maximum");
  Value masked = ctx.b.Compare(Cmp::EQ, m, Const(ctx, -INFINITY, m));
  m = ctx.b.Select(masked, Const(ctx, 0, m), m);
  Value e = ctx.b.Unary("exponential", Bin(ctx, "subtract", s, Unreduce(ctx, m, s.type.dims, {r - 1})));
  Value l = SumOver(ctx, e, {r - 1});
  Value l_safe = ctx.b.Select(masked, Const(ctx, 1, l), l);
  Value p = Bin(ctx, "divide", e, Unreduce(ctx, l_safe, s.type.dims, {r - 1}));
  return {p, Bin(ctx, "add", m, ctx.b.Unary("log", l))};
}

// torch_tpu::_sdpa_forward(q, k, v, attn_bias?, dropout_p, is_causal, return_debug_mask, *,
// scale?, generator?) -> (output, logsumexp, philox_seed, philox_offset)
std::vector<Value> LowerSdpaForward(Ctx& ctx, const Args& a) {
  Attention at = Prepare(ctx, a.tensor("query"), a.tensor("key"), a.tensor("value"), a);
  double p = a.double_("dropout_p");
  Value s = Scores(ctx, at, a.optional_tensor("attn_bias"), a.bool_("is_causal"));
  auto [probs, lse] = SafeSoftmax(ctx, s);
  Value seed = ctx.b.ConstantInt(0, ctx.out(2)), offset = ctx.b.ConstantInt(0, ctx.out(3));
  if (p > 0) {
    if (a.is_none("generator")) throw Unsupported("attention dropout without a generator state");
    probs = Bin(ctx, "multiply", probs, DropoutFactor(ctx, a.tensor("generator"), probs.type, p));
    std::tie(seed, offset) = StateWords(ctx, a.tensor("generator"));
  }
  int64_t r = at.r;
  Value out = ctx.b.DotGeneral(probs, at.v, at.batch, at.batch, {r - 1}, {r - 2}, probs.type.elem, ctx.precision);
  return {ConvertTo(ctx, out, ctx.out(0).elem), ConvertTo(ctx, ctx.b.Reshape(lse, ctx.out(1).dims), ctx.out(1).elem),
          seed, offset};
}

// _scaled_dot_product_fused_attention_overrideable_backward(grad_out, q, k, v, attn_bias,
// grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
// philox_seed, philox_offset, *, scale?) -> (grad_q, grad_k, grad_v, grad_attn_bias).
// P = softmax(S), dV = P'^T dO, dP = dO V^T (times the dropout factor), dS = P (dP - rowsum(P dP)),
// dQ = scale dS K, dK = scale dS^T Q, d(bias) = dS.
std::vector<Value> LowerSdpaBackward(Ctx& ctx, const Args& a) {
  Attention at = Prepare(ctx, a.tensor("query"), a.tensor("key"), a.tensor("value"), a);
  int64_t r = at.r;
  Value bias = a.optional_tensor("attn_bias");
  // The probabilities are recomputed with the row maximum rather than from logsumexp: with
  // large scores, exp(s - lse) loses the bits of lse's rounding (CPU's math path does the same).
  Value s = Scores(ctx, at, bias, a.bool_("is_causal"));
  Value probs = SafeSoftmax(ctx, s).first;
  Value g = ConvertTo(ctx, a.tensor("grad_out"), s.type.elem);
  double p = a.double_("dropout_p");
  Value factor;
  if (p > 0) factor = DropoutFactor(ctx, StateOf(ctx, a.tensor("philox_seed"), a.tensor("philox_offset")), probs.type, p);
  Value dropped = factor.valid() ? Bin(ctx, "multiply", probs, factor) : probs;
  Value dv = ctx.b.DotGeneral(dropped, g, at.batch, at.batch, {r - 2}, {r - 2}, s.type.elem, ctx.precision);
  Value dp = ctx.b.DotGeneral(g, at.v, at.batch, at.batch, {r - 1}, {r - 1}, s.type.elem, ctx.precision);
  if (factor.valid()) dp = Bin(ctx, "multiply", dp, factor);
  Value rowdot = Unreduce(ctx, SumOver(ctx, Bin(ctx, "multiply", probs, dp), {r - 1}), s.type.dims, {r - 1});
  Value ds = Bin(ctx, "multiply", probs, Bin(ctx, "subtract", dp, rowdot));
  Value dsc = Bin(ctx, "multiply", ds, Const(ctx, at.scale, ds));
  Value dq = ctx.b.DotGeneral(dsc, at.k, at.batch, at.batch, {r - 1}, {r - 2}, s.type.elem, ctx.precision);
  Value dk = ctx.b.DotGeneral(dsc, at.q, at.batch, at.batch, {r - 2}, {r - 2}, s.type.elem, ctx.precision);
  std::vector<Value> out = {ConvertTo(ctx, dq, ctx.out(0).elem), ConvertTo(ctx, SumHeads(ctx, dk, at.groups), ctx.out(1).elem),
                            ConvertTo(ctx, SumHeads(ctx, dv, at.groups), ctx.out(2).elem)};
  if (bias.valid() && IsFloat(ctx.out(3).elem) && ctx.out(3).dims == bias.type.dims)
    out.push_back(ConvertTo(ctx, SumToShape(ctx, ds, bias.type.dims), ctx.out(3).elem));
  else
    out.push_back(ctx.b.Constant(0, ctx.out(3)));
  return out;
}

// _scaled_dot_product_fused_attention_overrideable(q, k, v, attn_bias?, dropout_p, is_causal,
// return_debug_mask, *, scale?) -> (out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
// philox_seed, philox_offset, debug_attn_mask): eager's kernel (csrc/aten/dispatch/nn_ops.cpp) calls
// torch_tpu::_sdpa_forward; a graph calls its lowering. The slots eager leaves empty (and the
// two sizes) are not values of the program.
std::vector<Value> LowerSdpaOverrideable(Ctx& ctx, const Args& a) {
  static const std::vector<std::string> names = {"query",   "key",       "value",
                                                 "attn_bias", "dropout_p", "is_causal",
                                                 "return_debug_mask", "scale", "generator"};
  std::vector<Arg> args;
  for (size_t i = 0; i + 1 < names.size(); ++i) args.push_back(a.raw(a.index(names[i])));
  args.push_back(Arg{});  // generator: none (dropout then runs eagerly)
  Ctx sub{ctx.b, {ctx.out(0), ctx.out(1), ctx.out(6), ctx.out(7)}, ctx.common};
  sub.precision = ctx.precision;
  std::vector<Value> r = LowerSdpaForward(sub, Args(args, &names));
  for (auto& c : sub.checks) ctx.checks.push_back(c);
  std::vector<Value> out;
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    if (i == 0 || i == 1) out.push_back(r[i]);
    else if (i == 6 || i == 7) out.push_back(r[i - 4]);
    else out.push_back(ctx.b.Constant(0, ctx.out(i)));
  }
  return out;
}

}  // namespace

TPU_GRAPH_LOWERING("aten::_scaled_dot_product_fused_attention_overrideable", LowerSdpaOverrideable);
TPU_LOWERING("aten::_scaled_dot_product_fused_attention_overrideable_backward", LowerSdpaBackward);
TPU_LOWERING("torch_tpu::_sdpa_forward", LowerSdpaForward);

}  // namespace tpu::lowering
