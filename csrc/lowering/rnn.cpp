// The fused LSTM and GRU cells PyTorch calls for every non-CPU device (nn.LSTM, nn.GRU,
// nn.LSTMCell, nn.GRUCell: RNN.cpp computes the gate matmuls, the cell does the rest), and their
// backward ops. The workspace layouts are CUDA's: LSTM keeps the activated gates (i, f, g, o),
// GRU keeps (r, z, n, hx, hn). f16/bf16 compute in f32 (rule 10), as CUDA's accscalar_t does.
#include "helpers.h"

namespace tpu::lowering {
namespace {

Value Acc(Ctx& ctx, Value v) { return ConvertTo(ctx, v, AccumulatorType(v.type.elem)); }

// Chunk `k` of `n` equal chunks of x [B, n*H] along dim 1.
Value Chunk(Ctx& ctx, Value x, int64_t n, int64_t k) {
  int64_t h = x.type.dims[1] / n;
  return ctx.b.Slice(x, {0, k * h}, {x.type.dims[0], (k + 1) * h}, {1, 1});
}

// gates [B, G] + bias [G] (broadcast over the batch); no bias leaves the gates as they are.
Value AddBias(Ctx& ctx, Value gates, Value bias) {
  if (!bias.valid()) return gates;
  return Bin(ctx, "add", gates, ctx.b.BroadcastInDim(ConvertTo(ctx, bias, gates.type.elem), gates.type.dims, {1}));
}

Value Sigmoid(Ctx& ctx, Value x) { return ctx.b.Unary("logistic", x); }
Value Tanh(Ctx& ctx, Value x) { return ctx.b.Unary("tanh", x); }
Value OneMinus(Ctx& ctx, Value x) { return Sub(ctx, Const(ctx, 1, x), x); }

// The gradient of a bias: the gate gradients summed over the batch; an empty placeholder for the
// undefined result when the cell had no bias.
Value BiasGrad(Ctx& ctx, Value grad_gates, bool has_bias, size_t out) {
  if (!has_bias) return ctx.b.Constant(0, ctx.out(out));
  return ConvertTo(ctx, SumOver(ctx, grad_gates, {0}), ctx.out(out).elem);
}

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?) -> (hy, cy, workspace)
// (eager runs it as torch_tpu::_lstm_cell, see csrc/aten/dispatch/nn_ops.cpp):
// (i, f, g, o) = (sigmoid, sigmoid, tanh, sigmoid) of the summed gates; cy = f cx + i g; hy = o tanh(cy).
std::vector<Value> LowerLstmCell(Ctx& ctx, const Args& a) {
  Value gates = Bin(ctx, "add", Acc(ctx, a.tensor("input_gates")), Acc(ctx, a.tensor("hidden_gates")));
  gates = AddBias(ctx, AddBias(ctx, gates, a.optional_tensor("input_bias")), a.optional_tensor("hidden_bias"));
  Value i = Sigmoid(ctx, Chunk(ctx, gates, 4, 0)), f = Sigmoid(ctx, Chunk(ctx, gates, 4, 1));
  Value g = Tanh(ctx, Chunk(ctx, gates, 4, 2)), o = Sigmoid(ctx, Chunk(ctx, gates, 4, 3));
  Value cy = Bin(ctx, "add", Mul(ctx, f, ConvertTo(ctx, a.tensor("cx"), i.type.elem)), Mul(ctx, i, g));
  Value hy = Mul(ctx, o, Tanh(ctx, cy));
  return {ConvertTo(ctx, hy, ctx.out(0).elem), ConvertTo(ctx, cy, ctx.out(1).elem),
          ConvertTo(ctx, ctx.b.Concatenate({i, f, g, o}, 1), ctx.out(2).elem)};
}

// _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//   -> (grad_gates, grad_cx, grad_bias?): with dc = grad_hy o (1 - tanh(cy)^2) + grad_cy,
// d(i, f, g, o) = (dc g i(1-i), dc cx f(1-f), dc i (1-g^2), grad_hy tanh(cy) o(1-o)); grad_cx = dc f.
std::vector<Value> LowerLstmCellBackward(Ctx& ctx, const Args& a) {
  if (a.is_none("grad_hy") && a.is_none("grad_cy"))  // no gradient flows: three undefined results
    return {ctx.b.Constant(0, ctx.out(0)), ctx.b.Constant(0, ctx.out(1)), ctx.b.Constant(0, ctx.out(2))};
  Value ws = Acc(ctx, a.tensor("workspace"));
  Value i = Chunk(ctx, ws, 4, 0), f = Chunk(ctx, ws, 4, 1), g = Chunk(ctx, ws, 4, 2), o = Chunk(ctx, ws, 4, 3);
  Value cx = ConvertTo(ctx, a.tensor("cx"), i.type.elem), tanh_cy = Tanh(ctx, ConvertTo(ctx, a.tensor("cy"), i.type.elem));
  Value zero = Const(ctx, 0, i);
  Value ghy = a.is_none("grad_hy") ? zero : ConvertTo(ctx, a.tensor("grad_hy"), i.type.elem);
  Value gcy = a.is_none("grad_cy") ? zero : ConvertTo(ctx, a.tensor("grad_cy"), i.type.elem);
  Value dc = Bin(ctx, "add", Mul(ctx, Mul(ctx, ghy, o), OneMinus(ctx, Mul(ctx, tanh_cy, tanh_cy))), gcy);
  Value di = Mul(ctx, Mul(ctx, dc, g), Mul(ctx, i, OneMinus(ctx, i)));
  Value df = Mul(ctx, Mul(ctx, dc, cx), Mul(ctx, f, OneMinus(ctx, f)));
  Value dg = Mul(ctx, Mul(ctx, dc, i), OneMinus(ctx, Mul(ctx, g, g)));
  Value dO = Mul(ctx, Mul(ctx, ghy, tanh_cy), Mul(ctx, o, OneMinus(ctx, o)));
  Value grad_gates = ctx.b.Concatenate({di, df, dg, dO}, 1);
  return {ConvertTo(ctx, grad_gates, ctx.out(0).elem), ConvertTo(ctx, Mul(ctx, dc, f), ctx.out(1).elem),
          BiasGrad(ctx, grad_gates, a.bool_("has_bias"), 2)};
}

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?) -> (hy, workspace):
// r = sigmoid(i_r + h_r), z = sigmoid(i_z + h_z), n = tanh(i_n + r h_n), hy = n + z (hx - n).
std::vector<Value> LowerGruCell(Ctx& ctx, const Args& a) {
  Value ig = AddBias(ctx, Acc(ctx, a.tensor("input_gates")), a.optional_tensor("input_bias"));
  Value hg = AddBias(ctx, Acc(ctx, a.tensor("hidden_gates")), a.optional_tensor("hidden_bias"));
  Value hx = ConvertTo(ctx, a.tensor("hx"), ig.type.elem);
  auto sum = [&](int64_t k) { return Bin(ctx, "add", Chunk(ctx, ig, 3, k), Chunk(ctx, hg, 3, k)); };
  Value r = Sigmoid(ctx, sum(0)), z = Sigmoid(ctx, sum(1)), hn = Chunk(ctx, hg, 3, 2);
  Value n = Tanh(ctx, Bin(ctx, "add", Chunk(ctx, ig, 3, 2), Mul(ctx, r, hn)));
  Value hy = Bin(ctx, "add", n, Mul(ctx, z, Sub(ctx, hx, n)));
  return {ConvertTo(ctx, hy, ctx.out(0).elem), ConvertTo(ctx, ctx.b.Concatenate({r, z, n, hx, hn}, 1), ctx.out(1).elem)};
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//   -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias?, grad_hidden_bias?):
// dz = gh (hx - n) z(1-z), dn = gh (1-z)(1-n^2), dr = dn hn r(1-r), grad_hx = gh z;
// the input gates get (dr, dz, dn), the hidden gates (dr, dz, dn r).
std::vector<Value> LowerGruCellBackward(Ctx& ctx, const Args& a) {
  Value ws = Acc(ctx, a.tensor("workspace"));
  Value r = Chunk(ctx, ws, 5, 0), z = Chunk(ctx, ws, 5, 1), n = Chunk(ctx, ws, 5, 2);
  Value hx = Chunk(ctx, ws, 5, 3), hn = Chunk(ctx, ws, 5, 4);
  Value gh = ConvertTo(ctx, a.tensor("grad_hy"), r.type.elem);
  Value dz = Mul(ctx, Mul(ctx, gh, Sub(ctx, hx, n)), Mul(ctx, z, OneMinus(ctx, z)));
  Value dn = Mul(ctx, Mul(ctx, gh, OneMinus(ctx, z)), OneMinus(ctx, Mul(ctx, n, n)));
  Value dr = Mul(ctx, Mul(ctx, dn, hn), Mul(ctx, r, OneMinus(ctx, r)));
  Value d_input = ctx.b.Concatenate({dr, dz, dn}, 1), d_hidden = ctx.b.Concatenate({dr, dz, Mul(ctx, dn, r)}, 1);
  bool has_bias = a.bool_("has_bias");
  return {ConvertTo(ctx, d_input, ctx.out(0).elem), ConvertTo(ctx, d_hidden, ctx.out(1).elem),
          ConvertTo(ctx, Mul(ctx, gh, z), ctx.out(2).elem), BiasGrad(ctx, d_input, has_bias, 3),
          BiasGrad(ctx, d_hidden, has_bias, 4)};
}

}  // namespace

TPU_LOWERING("aten::_thnn_fused_gru_cell", LowerGruCell);
TPU_LOWERING("aten::_thnn_fused_gru_cell_backward", LowerGruCellBackward);
TPU_GRAPH_LOWERING("aten::_thnn_fused_lstm_cell", LowerLstmCell);
TPU_LOWERING("aten::_thnn_fused_lstm_cell_backward_impl", LowerLstmCellBackward);
TPU_LOWERING("torch_tpu::_lstm_cell", LowerLstmCell);

}  // namespace tpu::lowering
