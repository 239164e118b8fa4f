// Ops that move data between positions: concatenation, padding, flips, rolls, triangles.
#include "helpers.h"

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


// flip(self, dims): reversed along each dim.
std::vector<Value> LowerFlip(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (x.type.rank() == 0 || a.ints(1).empty()) return {x};
  std::vector<int64_t> dims = WrapDims(a.ints(1), x.type.rank());
  return {ctx.b.Op1("stablehlo.reverse", {x}, x.type, "dimensions = " + shlo::DenseI64(dims))};
}

// x rolled by `shift` along dim: the last `shift` entries move to the front.
Value RollDim(Ctx& ctx, Value x, int64_t shift, int64_t dim) {
  int64_t n = x.type.dims[dim];
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  int64_t r = x.type.rank();
  std::vector<int64_t> start(r, 0), limit = x.type.dims, ones(r, 1);
  start[dim] = n - s;
  Value tail = ctx.b.Slice(x, start, limit, ones);
  start[dim] = 0;
  limit[dim] = n - s;
  Value head = ctx.b.Slice(x, start, limit, ones);
  return ctx.b.Concatenate({tail, head}, dim);
}

// roll(self, shifts, dims): without dims, the flattened tensor rolls.
std::vector<Value> LowerRoll(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  const auto& shifts = a.ints(1);
  std::vector<int64_t> dims = a.is_none(2) ? std::vector<int64_t>{} : a.ints(2);
  if (dims.empty()) {
    Value flat = ctx.b.Reshape(x, {x.type.numel()});
    return {ctx.b.Reshape(RollDim(ctx, flat, shifts.at(0), 0), x.type.dims)};
  }
  if (shifts.size() != dims.size()) throw std::invalid_argument("roll: shifts and dims must align");
  for (size_t i = 0; i < dims.size(); ++i) x = RollDim(ctx, x, shifts[i], WrapDim(dims[i], x.type.rank()));
  return {x};
}

// triu / tril (self, diagonal): zero below (above) the diagonal of the last two dims.
template <bool kUpper>
std::vector<Value> LowerTri(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  int64_t r = x.type.rank();
  TensorType it{ElemType::S64, x.type.dims};
  Value col = ctx.b.Iota(it, r - 1), row = ctx.b.Iota(it, r - 2);
  Value diff = ctx.b.Binary("subtract", col, row);
  Value k = ctx.b.ConstantInt(a.int_or(1, 0), it);
  Value keep = ctx.b.Compare(kUpper ? Cmp::GE : Cmp::LE, diff, k);
  return {ctx.b.Select(keep, x, ctx.b.Constant(0, x.type))};
}

// linalg_cross(self, other, dim): the 3-vector cross product along dim.
std::vector<Value> LowerCross(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = CastTo(ctx, a.tensor(0), t), y = CastTo(ctx, a.tensor(1), t);
  int64_t r = t.rank(), dim = WrapDim(a.int_or(2, -1), r);
  auto part = [&](Value v, int64_t i) {
    std::vector<int64_t> start(r, 0), limit = t.dims, ones(r, 1);
    start[dim] = i;
    limit[dim] = i + 1;
    return ctx.b.Slice(v, start, limit, ones);
  };
  auto mul = [&](Value p, Value q) { return ctx.b.Binary("multiply", p, q); };
  auto sub = [&](Value p, Value q) { return ctx.b.Binary("subtract", p, q); };
  Value x0 = part(x, 0), x1 = part(x, 1), x2 = part(x, 2), y0 = part(y, 0), y1 = part(y, 1), y2 = part(y, 2);
  return {ctx.b.Concatenate({sub(mul(x1, y2), mul(x2, y1)), sub(mul(x2, y0), mul(x0, y2)), sub(mul(x0, y1), mul(x1, y0))}, dim)};
}

// channel_shuffle(self, groups): [N, g * c, ...] -> [N, c * g, ...] interleaving the groups.
std::vector<Value> LowerChannelShuffle(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  int64_t g = a.int_(1), c = x.type.dims[1];
  std::vector<int64_t> split = {x.type.dims[0], g, c / g};
  split.insert(split.end(), x.type.dims.begin() + 2, x.type.dims.end());
  std::vector<int64_t> perm(split.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[1], perm[2]);
  return {ctx.b.Reshape(ctx.b.Transpose(ctx.b.Reshape(x, split), perm), x.type.dims)};
}

// narrow_copy(self, dim, start, length)
std::vector<Value> LowerNarrowCopy(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  int64_t r = x.type.rank(), dim = WrapDim(a.int_(1), r), n = x.type.dims[dim];
  int64_t start = a.int_(2);
  if (start < 0) start += n;
  std::vector<int64_t> lo(r, 0), hi = x.type.dims, ones(r, 1);
  lo[dim] = start;
  hi[dim] = start + a.int_(3);
  return {ctx.b.Slice(x, lo, hi, ones)};
}

// unfold_backward(grad, input_sizes, dim, size, step): the windows of x.unfold(dim, size,
// step) summed back into x's shape (overlapping windows add).
std::vector<Value> LowerUnfoldBackward(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value g = ConvertTo(ctx, a.tensor(0), t.elem);
  int64_t r = t.rank(), dim = WrapDim(a.int_(2), r), step = a.int_(4);
  if (g.type.numel() == 0 || t.numel() == 0) return {ctx.b.Constant(0, t)};
  if (r == 0) return {ctx.b.Reshape(g, {})};  // a 0-d input has one window of one element
  std::vector<int64_t> gd = g.type.dims, cd = gd;  // grad: x's dims with windows at dim, window last
  cd.push_back(1);
  std::vector<Value> coords;
  for (int64_t d = 0; d < r; ++d) {
    Value c = ctx.b.Iota({ElemType::S64, gd}, d);
    if (d == dim) c = Add(ctx, Mul(ctx, c, ctx.b.ConstantInt(step, c.type)), ctx.b.Iota({ElemType::S64, gd}, r));
    coords.push_back(ctx.b.Reshape(c, cd));
  }
  Value idx = ctx.b.Concatenate(coords, r + 1);
  return {ScatterPoints(ctx, ctx.b.Constant(0, t), idx, g, t.elem == ElemType::Pred ? "or" : "add")};
}

}  // namespace

TPU_LOWERING("aten::cat", LowerCat);
TPU_LOWERING("aten::channel_shuffle", LowerChannelShuffle);
TPU_LOWERING("aten::constant_pad_nd", LowerConstantPad);
TPU_LOWERING("aten::flip", LowerFlip);
TPU_LOWERING("aten::linalg_cross", LowerCross);
TPU_LOWERING("aten::masked_fill.Scalar", LowerMaskedFill);
TPU_LOWERING("aten::masked_fill.Tensor", LowerMaskedFill);
TPU_LOWERING("aten::narrow_copy", LowerNarrowCopy);
TPU_LOWERING("aten::roll", LowerRoll);
TPU_LOWERING("aten::tril", LowerTri<false>);
TPU_LOWERING("aten::triu", LowerTri<true>);
TPU_LOWERING("aten::unfold_backward", LowerUnfoldBackward);

}  // namespace tpu::lowering
