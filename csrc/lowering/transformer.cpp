// The inference fast paths of nn.TransformerEncoderLayer and nn.MultiheadAttention (eval mode
// under no_grad): the whole layer or attention block is one op, lowered here as one program.
// Everything runs in f32 for f16/bf16 inputs (rule 10). Masks are boolean with True = masked
// out; a float mask is read as `mask != 0` (the CPU kernels convert it to bool so), which is
// how a canonical additive mask (0 / -inf) means the same thing. mask_type says how a 2-D mask
// lies against the [B, H, L, S] scores: 0 = [L, S] (attn_mask), 1 = [B, S] (key padding);
// any other mask has the scores' shape.
#include <cmath>
#include <optional>

#include "helpers.h"

namespace tpu::lowering {
namespace {

Value Acc(Ctx& ctx, Value v) { return ConvertTo(ctx, v, AccumulatorType(v.type.elem)); }

// True where an entry of `scores` is masked out, or an invalid Value when there is no mask.
Value MaskedEntries(Ctx& ctx, Value mask, const std::vector<int64_t>& scores, std::optional<int64_t> mask_type) {
  if (!mask.valid()) return {};
  Value m = mask.type.elem == ElemType::Pred ? mask
                                             : ctx.b.Compare(Cmp::NE, mask, ctx.b.Constant(0, mask.type));
  int64_t r = static_cast<int64_t>(scores.size());
  if (mask.type.rank() != 2 || r != 4) mask_type = 2;
  if (mask_type == 1) {
    if (m.type.dims != std::vector<int64_t>{scores[0], scores[3]}) throw Unsupported("key padding mask not [B, S]");
    return ctx.b.BroadcastInDim(m, scores, {0, 3});
  }
  if (mask_type == 0) {
    if (m.type.dims != std::vector<int64_t>{scores[2], scores[3]}) throw Unsupported("attention mask not [L, S]");
    return ctx.b.BroadcastInDim(m, scores, {2, 3});
  }
  if (m.type.dims != scores) throw Unsupported("mask not shaped like the scores");
  return m;
}

// softmax of `s` along `dim` over the entries `masked` leaves; a fully masked row is NaN, as on
// the CPU (its maximum is -inf).
Value MaskedSoftmax(Ctx& ctx, Value s, Value masked, int64_t dim) {
  if (masked.valid()) s = ctx.b.Select(masked, Const(ctx, -INFINITY, s), s);
  Value m = ctx.b.Reduce(s, ctx.b.Extreme(false, {s.type.elem, {}}), {dim}, "maximum");
  Value e = ctx.b.Unary("exponential", Bin(ctx, "subtract", s, Unreduce(ctx, m, s.type.dims, {dim})));
  return Bin(ctx, "divide", e, Unreduce(ctx, SumOver(ctx, e, {dim}), s.type.dims, {dim}));
}

std::optional<int64_t> OptionalInt(const Args& a, size_t i) {
  return a.is_none(i) ? std::nullopt : std::optional<int64_t>(a.int_(i));
}

// x [..., in] @ w[rows]^T + b[rows], w [out, in]: the rows [first, first + n) of a linear layer.
Value Linear(Ctx& ctx, Value x, Value w, Value b, int64_t first, int64_t n) {
  ElemType acc = x.type.elem;
  int64_t in = w.type.dims[1];
  w = ctx.b.Slice(ConvertTo(ctx, w, acc), {first, 0}, {first + n, in}, {1, 1});
  b = ctx.b.Slice(ConvertTo(ctx, b, acc), {first}, {first + n}, {1});
  int64_t r = x.type.rank();
  Value y = ctx.b.DotGeneral(x, w, {}, {}, {r - 1}, {1}, acc, ctx.precision);
  return Bin(ctx, "add", y, ctx.b.BroadcastInDim(b, y.type.dims, {r - 1}));
}
Value Linear(Ctx& ctx, Value x, Value w, Value b) { return Linear(ctx, x, w, b, 0, w.type.dims[0]); }

// layer_norm over the last dim: (x - mean) / sqrt(var + eps) * w + b, var biased.
Value LayerNorm(Ctx& ctx, Value x, Value w, Value b, double eps) {
  int64_t r = x.type.rank(), n = x.type.dims.back();
  auto mean_of = [&](Value v) {
    Value sum = SumOver(ctx, v, {r - 1});
    return Unreduce(ctx, Bin(ctx, "divide", sum, Const(ctx, static_cast<double>(n), sum)), v.type.dims, {r - 1});
  };
  Value centered = Bin(ctx, "subtract", x, mean_of(x));
  Value var = mean_of(Bin(ctx, "multiply", centered, centered));
  Value y = Bin(ctx, "multiply", centered, ctx.b.Unary("rsqrt", Bin(ctx, "add", var, Const(ctx, eps, var))));
  auto along_last = [&](Value p) { return ctx.b.BroadcastInDim(ConvertTo(ctx, p, x.type.elem), x.type.dims, {r - 1}); };
  return Bin(ctx, "add", Bin(ctx, "multiply", y, along_last(w)), along_last(b));
}

// [B, T, E] -> [B, H, T, E/H] and back.
Value SplitHeads(Ctx& ctx, Value x, int64_t heads) {
  const auto& d = x.type.dims;
  return ctx.b.Transpose(ctx.b.Reshape(x, {d[0], d[1], heads, d[2] / heads}), {0, 2, 1, 3});
}
Value MergeHeads(Ctx& ctx, Value x) {
  const auto& d = x.type.dims;
  return ctx.b.Reshape(ctx.b.Transpose(x, {0, 2, 1, 3}), {d[0], d[2], d[1] * d[3]});
}

struct AttentionResult {
  Value out;    // [B, T, E]
  Value probs;  // [B, H, T, S]
};

// Multi-head attention with packed in-projection weights [3E, E]: q, k, v projected, q scaled
// by 1/sqrt(E/H), masked softmax of q k^T, times v, heads merged, out-projected.
AttentionResult Attend(Ctx& ctx, Value query, Value key, Value value, int64_t heads, const Args& a, size_t w0,
                       Value mask, std::optional<int64_t> mask_type) {
  int64_t e = query.type.dims[2];
  Value qkv_w = a.tensor(w0), qkv_b = a.tensor(w0 + 1);
  Value q = Linear(ctx, query, qkv_w, qkv_b, 0, e), k = Linear(ctx, key, qkv_w, qkv_b, e, e);
  Value v = Linear(ctx, value, qkv_w, qkv_b, 2 * e, e);
  q = Bin(ctx, "multiply", q, Const(ctx, 1 / std::sqrt(static_cast<double>(e / heads)), q));
  q = SplitHeads(ctx, q, heads), k = SplitHeads(ctx, k, heads), v = SplitHeads(ctx, v, heads);
  Value s = ctx.b.DotGeneral(q, k, {0, 1}, {0, 1}, {3}, {3}, q.type.elem, ctx.precision);
  Value probs = MaskedSoftmax(ctx, s, MaskedEntries(ctx, mask, s.type.dims, mask_type), 3);
  Value attn = ctx.b.DotGeneral(probs, v, {0, 1}, {0, 1}, {3}, {2}, q.type.elem, ctx.precision);
  return {Linear(ctx, MergeHeads(ctx, attn), a.tensor(w0 + 2), a.tensor(w0 + 3)), probs};
}

// _masked_softmax(x, mask, dim?, mask_type?): softmax over the entries the mask leaves.
std::vector<Value> LowerMaskedSoftmax(Ctx& ctx, const Args& a) {
  Value x = Acc(ctx, a.tensor(0));
  int64_t r = x.type.rank();
  if (r == 0) throw Unsupported("masked softmax of a 0-d tensor");
  Value masked = MaskedEntries(ctx, a.tensor(1), x.type.dims, OptionalInt(a, 3));
  return {ConvertTo(ctx, MaskedSoftmax(ctx, x, masked, WrapDim(a.int_or(2, r - 1), r)), ctx.out().elem)};
}

// _masked_softmax_backward(grad_output, output, mask, dim?): the CPU kernel's
// y * (g - sum(g * y over the unmasked entries)), 0 where masked; mask has the gradient's shape.
std::vector<Value> LowerMaskedSoftmaxBackward(Ctx& ctx, const Args& a) {
  Value g = Acc(ctx, a.tensor("grad_output")), y = Acc(ctx, a.tensor("output"));
  int64_t r = g.type.rank();
  if (r == 0) throw Unsupported("masked softmax backward of a 0-d tensor");
  int64_t dim = WrapDim(a.int_or("dim", r - 1), r);
  Value masked = MaskedEntries(ctx, a.tensor("mask"), g.type.dims, 2), zero = Const(ctx, 0, g);
  Value gy = ctx.b.Select(masked, zero, Bin(ctx, "multiply", g, y));
  Value sum = Unreduce(ctx, SumOver(ctx, gy, {dim}), g.type.dims, {dim});
  Value gi = ctx.b.Select(masked, zero, Bin(ctx, "multiply", y, Bin(ctx, "subtract", g, sum)));
  return {ConvertTo(ctx, gi, ctx.out().elem)};
}

// _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
// proj_weight, proj_bias, mask?, need_weights, average_attn_weights, mask_type?) -> (out, weights):
// weights are the probabilities [B, H, T, S], averaged over heads when asked, else empty (eager
// runs it as torch_tpu::_native_multi_head_attention, which csrc/aten/dispatch/nn_ops.cpp turns into
// the undefined weights the CPU returns).
std::vector<Value> LowerNativeMultiHeadAttention(Ctx& ctx, const Args& a) {
  Value q = Acc(ctx, a.tensor(0));
  if (q.type.rank() != 3 || q.type.numel() == 0) throw Unsupported("attention of a non-3-D or empty query");
  ElemType acc = q.type.elem;
  AttentionResult r = Attend(ctx, q, ConvertTo(ctx, a.tensor(1), acc), ConvertTo(ctx, a.tensor(2), acc), a.int_(4), a,
                             5, a.optional_tensor(9), OptionalInt(a, 12));
  Value weights = ctx.b.Constant(0, ctx.out(1));
  if (a.bool_(10)) {
    weights = r.probs;
    if (a.bool_(11)) {
      Value sum = SumOver(ctx, weights, {1});
      weights = Bin(ctx, "divide", sum, Const(ctx, static_cast<double>(a.int_(4)), sum));
    }
    weights = ConvertTo(ctx, weights, ctx.out(1).elem);
  }
  return {ConvertTo(ctx, r.out, ctx.out(0).elem), weights};
}

// _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
// proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
// ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask?, mask_type?):
// post-norm: x = norm1(src + sa(src)); out = norm2(x + ff(x));
// norm_first: x = src + sa(norm1(src)); out = x + ff(norm2(x)); ff = linear2(act(linear1(.))).
std::vector<Value> LowerTransformerEncoderLayer(Ctx& ctx, const Args& a) {
  Value src = Acc(ctx, a.tensor(0));
  if (src.type.rank() != 3 || src.type.numel() == 0) throw Unsupported("encoder layer of a non-3-D or empty input");
  bool norm_first = a.bool_(8);
  double eps = a.double_(9);
  auto norm = [&](Value x, size_t w) { return LayerNorm(ctx, x, a.tensor(w), a.tensor(w + 1), eps); };
  auto self_attention = [&](Value x) {
    return Attend(ctx, x, x, x, a.int_(2), a, 3, a.optional_tensor(18), OptionalInt(a, 19)).out;
  };
  auto feed_forward = [&](Value x) {
    Value h = Linear(ctx, x, a.tensor(14), a.tensor(15));
    if (a.bool_(7))
      h = Bin(ctx, "multiply", Bin(ctx, "multiply", h, Const(ctx, 0.5, h)),
              ctx.b.Op1("chlo.erfc", {Bin(ctx, "multiply", h, Const(ctx, -M_SQRT1_2, h))}, h.type));
    else
      h = Bin(ctx, "maximum", h, Const(ctx, 0, h));
    return Linear(ctx, h, a.tensor(16), a.tensor(17));
  };
  Value x;
  if (norm_first) {
    x = Bin(ctx, "add", src, self_attention(norm(src, 10)));
    x = Bin(ctx, "add", x, feed_forward(norm(x, 12)));
  } else {
    x = norm(Bin(ctx, "add", src, self_attention(src)), 10);
    x = norm(Bin(ctx, "add", x, feed_forward(x)), 12);
  }
  return {ConvertTo(ctx, x, ctx.out().elem)};
}

}  // namespace

TPU_LOWERING("aten::_masked_softmax", LowerMaskedSoftmax);
TPU_LOWERING("aten::_masked_softmax_backward", LowerMaskedSoftmaxBackward);
TPU_GRAPH_LOWERING("aten::_native_multi_head_attention", LowerNativeMultiHeadAttention);
TPU_LOWERING("aten::_transformer_encoder_layer_fwd", LowerTransformerEncoderLayer);
TPU_LOWERING("torch_tpu::_native_multi_head_attention", LowerNativeMultiHeadAttention);

}  // namespace tpu::lowering
