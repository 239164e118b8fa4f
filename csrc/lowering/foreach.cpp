// _foreach_* ops (the optimizers' multi-tensor path): one program applies the per-tensor
// lowering of the matching ATen op to element i of every list argument, so an optimizer step
// costs one program per foreach op instead of one per parameter and op. Scalar[] arguments
// arrive as lists of 0-d run-time operands; single tensors and Scalars are shared by all.
#include "elementwise.h"
#include "lowering.h"

namespace tpu::lowering {
namespace {

template <const char* kOp>
std::vector<Value> LowerForeach(Ctx& ctx, const Args& a) {
  static const LowerFn per_tensor = Find(kOp);
  if (!per_tensor) throw Unsupported(std::string("no lowering for ") + kOp);
  std::vector<Value> results;
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    std::vector<Arg> element;
    for (size_t j = 0; j < a.size(); ++j) {
      Arg arg = a.raw(j);
      if (arg.kind == Arg::Kind::TensorList) {
        if (i >= arg.values.size() || !arg.values[i].valid()) throw Unsupported("foreach list with a None entry");
        arg.kind = Arg::Kind::Tensor;
        arg.value = arg.values[i];
        arg.values.clear();
      }
      element.push_back(std::move(arg));
    }
    // Each element promotes on its own; its result type is the best stand-in for `common`.
    Ctx sub{ctx.b, {ctx.out(i)}, ctx.out(i).elem};
    sub.precision = ctx.precision;
    results.push_back(per_tensor(sub, Args(element)).at(0));
    for (auto& c : sub.checks) ctx.checks.push_back(c);
  }
  return results;
}

constexpr char kAdd[] = "aten::add.Tensor";
constexpr char kSub[] = "aten::sub.Tensor";
constexpr char kMul[] = "aten::mul.Tensor";
constexpr char kDiv[] = "aten::div.Tensor";
constexpr char kLerp[] = "aten::lerp.Tensor";
constexpr char kAddcmul[] = "aten::addcmul";
constexpr char kAddcdiv[] = "aten::addcdiv";
constexpr char kMaximum[] = "aten::maximum";
constexpr char kClampMin[] = "aten::clamp_min.Tensor";
constexpr char kClampMax[] = "aten::clamp_max.Tensor";
constexpr char kPow[] = "aten::pow.Tensor_Tensor";
constexpr char kSqrt[] = "aten::sqrt";
constexpr char kRsqrt[] = "aten::rsqrt";
constexpr char kExp[] = "aten::exp";
constexpr char kNeg[] = "aten::neg";
constexpr char kAbs[] = "aten::abs";
constexpr char kSign[] = "aten::sign";
constexpr char kZero[] = "aten::zero";

}  // namespace

TPU_LOWERING("aten::_foreach_abs", LowerForeach<kAbs>);
TPU_LOWERING("aten::_foreach_add.List", LowerForeach<kAdd>);
TPU_LOWERING("aten::_foreach_add.Scalar", LowerForeach<kAdd>);
TPU_LOWERING("aten::_foreach_add.ScalarList", LowerForeach<kAdd>);
TPU_LOWERING("aten::_foreach_add.Tensor", LowerForeach<kAdd>);
TPU_LOWERING("aten::_foreach_addcdiv.Scalar", LowerForeach<kAddcdiv>);
TPU_LOWERING("aten::_foreach_addcdiv.ScalarList", LowerForeach<kAddcdiv>);
TPU_LOWERING("aten::_foreach_addcmul.Scalar", LowerForeach<kAddcmul>);
TPU_LOWERING("aten::_foreach_addcmul.ScalarList", LowerForeach<kAddcmul>);
TPU_LOWERING("aten::_foreach_clamp_max.List", LowerForeach<kClampMax>);
TPU_LOWERING("aten::_foreach_clamp_max.Scalar", LowerForeach<kClampMax>);
TPU_LOWERING("aten::_foreach_clamp_max.ScalarList", LowerForeach<kClampMax>);
TPU_LOWERING("aten::_foreach_clamp_min.List", LowerForeach<kClampMin>);
TPU_LOWERING("aten::_foreach_clamp_min.Scalar", LowerForeach<kClampMin>);
TPU_LOWERING("aten::_foreach_clamp_min.ScalarList", LowerForeach<kClampMin>);
TPU_LOWERING("aten::_foreach_div.List", LowerForeach<kDiv>);
TPU_LOWERING("aten::_foreach_div.Scalar", LowerForeach<kDiv>);
TPU_LOWERING("aten::_foreach_div.ScalarList", LowerForeach<kDiv>);
TPU_LOWERING("aten::_foreach_div.Tensor", LowerForeach<kDiv>);
TPU_LOWERING("aten::_foreach_exp", LowerForeach<kExp>);
TPU_LOWERING("aten::_foreach_lerp.List", LowerForeach<kLerp>);
TPU_LOWERING("aten::_foreach_lerp.Scalar", LowerForeach<kLerp>);
TPU_LOWERING("aten::_foreach_lerp.ScalarList", LowerForeach<kLerp>);
TPU_LOWERING("aten::_foreach_maximum.List", LowerForeach<kMaximum>);
TPU_LOWERING("aten::_foreach_mul.List", LowerForeach<kMul>);
TPU_LOWERING("aten::_foreach_mul.Scalar", LowerForeach<kMul>);
TPU_LOWERING("aten::_foreach_mul.ScalarList", LowerForeach<kMul>);
TPU_LOWERING("aten::_foreach_mul.Tensor", LowerForeach<kMul>);
TPU_LOWERING("aten::_foreach_neg", LowerForeach<kNeg>);
TPU_LOWERING("aten::_foreach_pow.List", LowerForeach<kPow>);
TPU_LOWERING("aten::_foreach_pow.Scalar", LowerForeach<kPow>);
TPU_LOWERING("aten::_foreach_pow.ScalarList", LowerForeach<kPow>);
TPU_SPECIAL_SCALAR("aten::_foreach_pow.Scalar", "exponent", IsSpecialExponent);  // x ** 2 multiplies
TPU_LOWERING("aten::_foreach_rsqrt", LowerForeach<kRsqrt>);
TPU_LOWERING("aten::_foreach_sign", LowerForeach<kSign>);
TPU_LOWERING("aten::_foreach_sqrt", LowerForeach<kSqrt>);
TPU_LOWERING("aten::_foreach_sub.List", LowerForeach<kSub>);
TPU_LOWERING("aten::_foreach_sub.Scalar", LowerForeach<kSub>);
TPU_LOWERING("aten::_foreach_sub.ScalarList", LowerForeach<kSub>);
TPU_LOWERING("aten::_foreach_zero", LowerForeach<kZero>);

}  // namespace tpu::lowering
