// Running reductions along one dim (cumsum, cumprod, cummax, cummin, logcumsumexp) as
// associative scans. f16/bf16 accumulate in f32, as PyTorch's CPU kernels do.
#include <cmath>

#include "helpers.h"

namespace tpu::lowering {
namespace {

Value ScanWith(Ctx& ctx, Value x, int64_t dim, double identity, const char* op) {
  Value id = ctx.b.Constant(identity, {x.type.elem, {}});
  return Scan(ctx, {x}, dim, {id}, [&](const std::vector<Value>& e, const std::vector<Value>& l) {
    return std::vector<Value>{ctx.b.Binary(op, e[0], l[0])};
  })[0];
}

// cumsum / cumprod (self, dim, dtype?): in the accumulator type of the result.
template <bool kProd>
std::vector<Value> LowerCumulative(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  ElemType acc = AccumulatorType(t.elem);
  if (acc == ElemType::Pred) acc = ElemType::S64;
  Value x = ConvertTo(ctx, a.tensor(0), acc);
  if (x.type.rank() == 0) return {ConvertTo(ctx, x, t.elem)};
  int64_t dim = WrapDim(a.int_(1), x.type.rank());
  return {ConvertTo(ctx, ScanWith(ctx, x, dim, kProd ? 1 : 0, kProd ? "multiply" : "add"), t.elem)};
}

// _logcumsumexp(self, dim)
std::vector<Value> LowerLogcumsumexp(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = ConvertTo(ctx, a.tensor(0), AccumulatorType(t.elem));
  if (x.type.rank() == 0) return {ConvertTo(ctx, x, t.elem)};
  int64_t dim = WrapDim(a.int_(1), x.type.rank());
  Value id = ctx.b.Constant(-INFINITY, {x.type.elem, {}});
  Value r = Scan(ctx, {x}, dim, {id}, [&](const std::vector<Value>& e, const std::vector<Value>& l) {
    return std::vector<Value>{LogAddExp(ctx, e[0], l[0])};
  })[0];
  return {ConvertTo(ctx, r, t.elem)};
}

// cummax / cummin (self, dim) -> (values, indices). A later element replaces the running
// extreme when it ties or beats it, and a NaN always replaces it (PyTorch's CPU rule).
template <bool kMax>
std::vector<Value> LowerCumExtreme(Ctx& ctx, const Args& a) {
  Value x = a.tensor(0);
  if (x.type.rank() == 0) return {x, ctx.b.ConstantInt(0, ctx.out(1))};
  bool is_bool = x.type.elem == ElemType::Pred;
  if (is_bool) x = ctx.b.Convert(x, ElemType::U8);
  int64_t dim = WrapDim(a.int_(1), x.type.rank());
  Value idx = ctx.b.Iota({ElemType::S64, x.type.dims}, dim);
  Value ident = ctx.b.Extreme(!kMax, {x.type.elem, {}});
  auto r = Scan(ctx, {x, idx}, dim, {ident, ctx.b.ConstantInt(-1, {ElemType::S64, {}})},
                [&](const std::vector<Value>& e, const std::vector<Value>& l) {
                  Value take = ctx.b.Compare(kMax ? Cmp::GE : Cmp::LE, l[0], e[0]);
                  if (IsFloat(x.type.elem)) {
                    Value e_nan = IsNan(ctx, e[0]);
                    take = Or(ctx, IsNan(ctx, l[0]), And(ctx, Not(ctx, e_nan), take));
                  }
                  return std::vector<Value>{ctx.b.Select(take, l[0], e[0]), ctx.b.Select(take, l[1], e[1])};
                });
  Value v = is_bool ? ctx.b.Convert(r[0], ElemType::Pred) : r[0];
  return {v, r[1]};
}

}  // namespace

TPU_LOWERING("aten::_logcumsumexp", LowerLogcumsumexp);
TPU_LOWERING("aten::cummax", LowerCumExtreme<true>);
TPU_LOWERING("aten::cummin", LowerCumExtreme<false>);
TPU_LOWERING("aten::cumprod", LowerCumulative<true>);
TPU_LOWERING("aten::cumsum", LowerCumulative<false>);

}  // namespace tpu::lowering
