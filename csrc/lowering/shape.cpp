// Ops that move data between positions: concatenation, padding, masked selection.
#include "lowering.h"

namespace tpu::lowering {
namespace {

// cat(tensors, dim): operands promote to the output type; legacy 1-D empty tensors are skipped.
std::vector<Value> LowerCat(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  int64_t dim = WrapDim(a.int_(1), t.rank());
  std::vector<Value> parts;
  for (const Value& v : a.tensors(0)) {
    if (v.type.rank() == 1 && v.type.dims[0] == 0 && t.rank() != 1) continue;
    if (v.type.numel() == 0) continue;
    parts.push_back(ConvertTo(ctx, v, t.elem));
  }
  if (parts.empty()) return {ctx.b.Constant(0, t)};
  return {ctx.b.Concatenate(parts, dim)};
}

// constant_pad_nd(x, pad, value): pad pairs start at the last dim; negative pads crop.
std::vector<Value> LowerConstantPad(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  const auto& pad = a.ints(1);
  int64_t r = x.type.rank();
  std::vector<int64_t> low(r, 0), high(r, 0), interior(r, 0);
  for (size_t i = 0; i + 1 < pad.size() + 1 && i / 2 < static_cast<size_t>(r); i += 2) {
    int64_t d = r - 1 - static_cast<int64_t>(i / 2);
    low[d] = pad[i];
    high[d] = pad[i + 1];
  }
  Value value = a.is_none(2) ? ctx.b.Constant(0, {x.type.elem, {}}) : ConvertTo(ctx, a.tensor(2), x.type.elem);
  return {ctx.b.Pad(x, value, low, high, interior)};
}

// masked_fill(x, mask, value) = mask ? value : x
std::vector<Value> LowerMaskedFill(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value mask = BroadcastTo(ctx, ConvertTo(ctx, a.tensor(1), ElemType::Pred), t.dims);
  return {ctx.b.Select(mask, CastTo(ctx, a.tensor(2), t), CastTo(ctx, a.tensor(0), t))};
}

}  // namespace

TPU_LOWERING("aten::cat", LowerCat);
TPU_LOWERING("aten::constant_pad_nd", LowerConstantPad);
TPU_LOWERING("aten::masked_fill.Scalar", LowerMaskedFill);
TPU_LOWERING("aten::masked_fill.Tensor", LowerMaskedFill);

}  // namespace tpu::lowering
