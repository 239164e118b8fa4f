// Lowering rules from the table (csrc/lowering), called as csrc/aten calls them: arguments
// in schema order, run-time scalars as 0-d tensors of the common dtype, output types set
// by the caller. Each program runs on the plugin and is checked against host numbers.
#include <algorithm>
#include <cmath>
#include <limits>

#include "lowering/helpers.h"
#include "lowering/lowering.h"
#include "lowering_call.h"
#include "test_util.h"

namespace tpu::test {
namespace {

using lowering::Arg;
using shlo::Builder;
using shlo::ElemType;
using shlo::TensorType;
using shlo::Value;

const float kNan = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();


template <typename T>
HostTensor Scalar(T v) {
  return HostTensor::Of<T>({v}, {});
}

// Same float, NaN equal to NaN, and the same sign of zero.
bool SameFloat(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

#define EXPECT_SAME_FLOATS(got, expect, inputs)                                                 \
  do {                                                                                          \
    ASSERT_EQ((got).size(), (expect).size());                                                   \
    for (size_t i_ = 0; i_ < (got).size(); ++i_)                                                \
      EXPECT_TRUE(SameFloat((got)[i_], (expect)[i_]))                                           \
          << "element " << i_ << " (" << (inputs) << "): got " << (got)[i_] << ", expected " << (expect)[i_]; \
  } while (0)

TEST(LoweringTable, FindAndList) {
  for (const char* op : {"aten::add.Tensor", "aten::div.Tensor_mode", "aten::sum.dim_IntList", "aten::max.dim",
                         "aten::_softmax", "aten::mm"})
    EXPECT_NE(lowering::Find(op), nullptr) << op;
  EXPECT_EQ(lowering::Find("aten::no_such_op"), nullptr);
  EXPECT_EQ(lowering::Find("aten::add"), nullptr);  // overload names are exact
  EXPECT_GT(lowering::RegisteredOps().size(), 50u);
}

TEST(LoweringArgs, KindMismatchIsAnError) {
  std::vector<Arg> args = {LoweringCall::Int(3), LoweringCall::None()};
  lowering::Args a(args);
  EXPECT_EQ(a.int_(0), 3);
  EXPECT_EQ(a.double_(0), 3.0);  // an int where a float is expected is promoted
  EXPECT_TRUE(a.is_none(1));
  EXPECT_TRUE(a.is_none(7));
  EXPECT_EQ(a.int_or(1, -1), -1);
  EXPECT_THROW(a.tensor(0), std::invalid_argument);
  EXPECT_THROW(a.str(1), std::invalid_argument);
  EXPECT_EQ(lowering::WrapDim(-1, 3), 2);
  EXPECT_EQ(lowering::WrapDim(0, 0), 0);
  EXPECT_THROW(lowering::WrapDim(3, 3), std::out_of_range);
  EXPECT_EQ(lowering::WrapDims({-1, 0, 2}, 3), (std::vector<int64_t>{0, 2}));
}

TEST(LoweringElementwise, AddWithAlphaBroadcasts) {
  LoweringCall call;
  Arg x = call.Tensor(HostTensor::Of<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  Arg y = call.Tensor(HostTensor::Of<float>({10, 20, 30}, {3}));
  Arg alpha = call.Tensor(Scalar<float>(2.5f));
  auto out = call.Lower("aten::add.Tensor", {x, y, alpha}, {{ElemType::F32, {2, 3}}});
  EXPECT_EQ(out[0].As<float>(), (std::vector<float>{26, 52, 78, 29, 55, 81}));
}

TEST(LoweringElementwise, SubWithIntegerAlpha) {
  LoweringCall call;
  Arg x = call.Tensor(HostTensor::Of<int64_t>({1, -2, 3}, {3}));
  Arg y = call.Tensor(HostTensor::Of<int64_t>({5, 5, int64_t{1} << 40}, {3}));
  Arg alpha = call.Tensor(Scalar<int64_t>(-3));
  auto out = call.Lower("aten::sub.Tensor", {x, y, alpha}, {{ElemType::S64, {3}}}, ElemType::S64);
  EXPECT_EQ(out[0].As<int64_t>(), (std::vector<int64_t>{16, 13, 3 + 3 * (int64_t{1} << 40)}));
}

TEST(LoweringElementwise, AddPromotesAndBoolIsOr) {
  LoweringCall promote;
  Arg i = promote.Tensor(HostTensor::Of<int32_t>({1, 2, 3}, {3}));
  Arg f = promote.Tensor(Scalar<float>(0.5f));
  auto out = promote.Lower("aten::add.Tensor", {i, f, LoweringCall::None()}, {{ElemType::F32, {3}}});
  EXPECT_EQ(out[0].As<float>(), (std::vector<float>{1.5, 2.5, 3.5}));

  LoweringCall logical;
  Arg p = logical.Tensor(HostTensor::Of<bool>({true, true, false, false}, {4}));
  Arg q = logical.Tensor(HostTensor::Of<bool>({true, false, true, false}, {4}));
  auto ored = logical.Lower("aten::add.Tensor", {p, q, LoweringCall::None()}, {{ElemType::Pred, {4}}}, ElemType::Pred);
  EXPECT_EQ(ored[0].As<bool>(), (std::vector<bool>{true, true, true, false}));
}

// PyTorch's div_floor_floating, written out for the host.
float FloorDivRef(float a, float b) {
  if (b == 0) return a / b;
  float mod = std::fmod(a, b);
  float div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  float floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5f) floordiv += 1;
  } else {
    floordiv = std::copysign(0.f, a / b);
  }
  return floordiv;
}

// RoundToF16 is what one f16 operation's result is, kept in f32: the host's own f32 -> f16 -> f32
// conversion over normal values, ties, f16 subnormals (which reduce_precision alone flushes),
// overflow to inf, NaN and signed zeros.
TEST(LoweringHelpers, RoundToF16IsTheHostsHalfConversion) {
  std::vector<float> x = {0.f, -0.f, 1.f, 1.0004883f, 1.00048828125f, 1.0014648f, 65504.f, 65519.f, 65520.f, -70000.f,
                          6.1035156e-05f, 6.0e-05f, 3.0e-05f, 5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, -1.0e-06f,
                          1.0e-09f, kNan, kInf, -kInf, 0.1f, -0.3333333f, 1234.5678f, 3.14159265f};
  for (int i = 0; i < 2000; ++i)  // a spread over every f16 binade, subnormals included
    x.push_back(std::ldexp(1.0f + (i % 97) / 97.0f, -26 + (i % 44)) * ((i & 1) ? -1.f : 1.f));
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> expect;
  for (float v : x) expect.push_back(static_cast<float>(static_cast<_Float16>(v)));
  Builder b;
  TensorType type{ElemType::F32, {n}};
  lowering::Ctx ctx{b, {type}};
  Value rounded = lowering::RoundToF16(ctx, b.Param(type));
  std::vector<float> got = RunModule(b, {rounded}, {HostTensor::Of(x, {n})})[0].As<float>();
  EXPECT_SAME_FLOATS(got, expect, "RoundToF16");
}

TEST(LoweringElementwise, DivFloorOnNegativeIntegers) {
  std::vector<int64_t> a = {-7, 7, -7, 7, 0, -1, -8, 9, INT64_MIN + 1};
  std::vector<int64_t> b = {2, -2, -2, 2, 3, 5, 2, 3, 2};
  std::vector<int64_t> floor, trunc;
  for (size_t i = 0; i < a.size(); ++i) {
    int64_t q = a[i] / b[i];
    trunc.push_back(q);
    floor.push_back((a[i] % b[i] != 0 && ((a[i] < 0) != (b[i] < 0))) ? q - 1 : q);
  }
  EXPECT_EQ(floor[0], -4);  // the reference itself: Python's -7 // 2
  for (const char* mode : {"floor", "trunc"}) {
    SCOPED_TRACE(mode);
    LoweringCall call;
    Arg x = call.Tensor(HostTensor::Of(a, {9}));
    Arg y = call.Tensor(HostTensor::Of(b, {9}));
    auto out = call.Lower("aten::div.Tensor_mode", {x, y, LoweringCall::Str(mode)}, {{ElemType::S64, {9}}}, ElemType::S64);
    EXPECT_EQ(out[0].As<int64_t>(), std::string(mode) == "floor" ? floor : trunc);
  }
  LoweringCall fd;
  Arg x = fd.Tensor(HostTensor::Of(a, {9}));
  Arg y = fd.Tensor(HostTensor::Of(b, {9}));
  EXPECT_EQ(fd.Lower("aten::floor_divide", {x, y}, {{ElemType::S64, {9}}}, ElemType::S64)[0].As<int64_t>(), floor);
}

TEST(LoweringElementwise, DivFloorOnFloats) {
  std::vector<float> a = {-7, 7, -7, 7, 0, -1, -1, 1, 5.5f, -5.5f, 1, -1, 0, kNan, kInf, -5, 5, 0.3f, -0.3f, 1e10f};
  std::vector<float> b = {2, -2, -2, 2, -3, -5, 5, 5, 0.5f, 0.1f, 0, 0, 0, 2, 2, kInf, kInf, 0.1f, 0.1f, 3};
  const int64_t n = static_cast<int64_t>(a.size());
  std::vector<float> expect;
  for (size_t i = 0; i < a.size(); ++i) expect.push_back(FloorDivRef(a[i], b[i]));
  EXPECT_EQ(expect[0], -4.f);  // the reference itself: Python's -7.0 // 2.0
  EXPECT_FALSE(std::signbit(expect[5]));  // -1 // -5 is +0, as in PyTorch
  LoweringCall call;
  Arg x = call.Tensor(HostTensor::Of(a, {n}));
  Arg y = call.Tensor(HostTensor::Of(b, {n}));
  auto out = call.Lower("aten::div.Tensor_mode", {x, y, LoweringCall::Str("floor")}, {{ElemType::F32, {n}}});
  std::vector<float> got = out[0].As<float>();
  EXPECT_SAME_FLOATS(got, expect, "a // b");
}

TEST(LoweringElementwise, DivTrueAndTrunc) {
  LoweringCall call;
  Arg x = call.Tensor(HostTensor::Of<int32_t>({-7, 7, 1, 0}, {4}));
  Arg y = call.Tensor(HostTensor::Of<int32_t>({2, 2, 0, 0}, {4}));
  auto out = call.Lower("aten::div.Tensor", {x, y}, {{ElemType::F32, {4}}}, ElemType::S32);  // int / int -> float
  std::vector<float> got = out[0].As<float>();
  EXPECT_EQ(got[0], -3.5f);
  EXPECT_EQ(got[1], 3.5f);
  EXPECT_EQ(got[2], kInf);
  EXPECT_TRUE(std::isnan(got[3]));

  LoweringCall trunc;
  Arg f = trunc.Tensor(HostTensor::Of<float>({-7, 7, -0.5f, 9}, {4}));
  Arg g = trunc.Tensor(Scalar<float>(2));
  auto t = trunc.Lower("aten::div.Tensor_mode", {f, g, LoweringCall::Str("trunc")}, {{ElemType::F32, {4}}});
  std::vector<float> tg = t[0].As<float>();
  EXPECT_SAME_FLOATS(tg, (std::vector<float>{-3, 3, -0.f, 4}), "trunc(a / 2)");
}

std::vector<float> Iota(int64_t n, float start = 0) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

TEST(LoweringReduction, SumOverDims) {
  std::vector<float> xs = Iota(24);
  // sum over dims 0 and 2 of a [2, 3, 4]: one value per middle index.
  std::vector<float> over02(3, 0), over_last(6, 0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        over02[j] += xs[i * 12 + j * 4 + k];
        over_last[i * 3 + j] += xs[i * 12 + j * 4 + k];
      }
  struct SumCase {
    std::vector<int64_t> dims;
    bool keepdim;
    std::vector<int64_t> out_dims;
    std::vector<float> expect;
  };
  const std::vector<SumCase> cases = {
      {{0, 2}, false, {3}, over02},
      {{2, 0}, true, {1, 3, 1}, over02},
      {{-1}, false, {2, 3}, over_last},
      {{}, false, {}, {276}},  // an empty list sums everything
  };
  for (const SumCase& c : cases) {
    SCOPED_TRACE(testing::PrintToString(c.dims));
    LoweringCall call;
    Arg x = call.Tensor(HostTensor::Of(xs, {2, 3, 4}));
    auto out = call.Lower("aten::sum.dim_IntList",
                          {x, LoweringCall::Ints(c.dims), LoweringCall::Bool(c.keepdim), LoweringCall::None()},
                          {{ElemType::F32, c.out_dims}});
    EXPECT_EQ(out[0].As<float>(), c.expect);
  }
}

TEST(LoweringReduction, SumOfBoolCountsInInt64) {
  LoweringCall call;
  Arg x = call.Tensor(HostTensor::Of<bool>({true, false, true, true, true, true}, {2, 3}));
  auto out = call.Lower("aten::sum.dim_IntList",
                        {x, LoweringCall::Ints({1}), LoweringCall::Bool(false), LoweringCall::None()},
                        {{ElemType::S64, {2}}}, ElemType::Pred);
  EXPECT_EQ(out[0].As<int64_t>(), (std::vector<int64_t>{2, 3}));
}

TEST(LoweringReduction, Bf16SumAccumulatesInF32) {
  // 1 + 256 * 2^-8 = 2. Accumulated in bf16 (8 significant bits) every 2^-8 is lost to rounding.
  std::vector<uint16_t> bits(257, 0x3B80);  // 2^-8
  bits[0] = 0x3F80;                         // 1.0
  HostTensor x{{ElemType::BF16, {257}}, std::vector<uint8_t>(257 * 2)};
  std::memcpy(x.bytes.data(), bits.data(), x.bytes.size());
  LoweringCall call;
  Arg a = call.Tensor(x);
  auto out = call.Lower("aten::sum", {a, LoweringCall::None()}, {{ElemType::BF16, {}}}, ElemType::BF16);
  uint16_t got = static_cast<uint16_t>(out[0].bytes[0] | (out[0].bytes[1] << 8));
  EXPECT_EQ(got, 0x4000) << "bf16 bits of the sum (0x4000 is 2.0)";
}

TEST(LoweringReduction, MaxDimTiesNanAndInfinity) {
  // Row 0 ties (first index wins), row 1 has NaNs (the first NaN wins), row 2 is all -inf.
  std::vector<float> xs = {1, 5, 5, 2, 1, kNan, 3, kNan, -kInf, -kInf, -kInf, -kInf};
  for (bool keepdim : {false, true}) {
    SCOPED_TRACE(keepdim);
    std::vector<int64_t> dims = keepdim ? std::vector<int64_t>{3, 1} : std::vector<int64_t>{3};
    LoweringCall call;
    Arg x = call.Tensor(HostTensor::Of(xs, {3, 4}));
    auto out = call.Lower("aten::max.dim", {x, LoweringCall::Int(-1), LoweringCall::Bool(keepdim)},
                          {{ElemType::F32, dims}, {ElemType::S64, dims}});
    ASSERT_EQ(out.size(), 2u);
    std::vector<float> values = out[0].As<float>();
    EXPECT_EQ(values[0], 5);
    EXPECT_TRUE(std::isnan(values[1]));
    EXPECT_EQ(values[2], -kInf);
    EXPECT_EQ(out[1].As<int64_t>(), (std::vector<int64_t>{1, 1, 0}));
  }
}

TEST(LoweringReduction, NanPropagatesThroughMaxAndMin) {
  // The NaN sits after larger and smaller numbers, so an operand-order-dependent max drops it.
  const std::vector<float> xs = {1, 7, kNan, -3, 2, 4};
  auto run = [&](const char* op, std::vector<Arg> extra, std::vector<int64_t> out_dims, ElemType out = ElemType::F32) {
    LoweringCall call;
    std::vector<Arg> args = {call.Tensor(HostTensor::Of(xs, {2, 3}))};
    args.insert(args.end(), extra.begin(), extra.end());
    return call.Lower(op, args, {{out, std::move(out_dims)}});
  };
  EXPECT_TRUE(std::isnan(run("aten::max", {}, {})[0].As<float>()[0]));
  EXPECT_TRUE(std::isnan(run("aten::min", {}, {})[0].As<float>()[0]));
  std::vector<float> amax = run("aten::amax", {LoweringCall::Ints({1}), LoweringCall::Bool(false)}, {2})[0].As<float>();
  EXPECT_TRUE(std::isnan(amax[0]));
  EXPECT_EQ(amax[1], 4);
  std::vector<float> amin = run("aten::amin", {LoweringCall::Ints({0}), LoweringCall::Bool(false)}, {3})[0].As<float>();
  EXPECT_EQ(amin[0], -3);
  EXPECT_EQ(amin[1], 2);
  EXPECT_TRUE(std::isnan(amin[2]));
  auto argmax = run("aten::argmax", {LoweringCall::None(), LoweringCall::Bool(false)}, {}, ElemType::S64);
  EXPECT_EQ(argmax[0].As<int64_t>()[0], 2);  // flattened: the NaN's index
  auto argmin = run("aten::argmin", {LoweringCall::Int(1), LoweringCall::Bool(true)}, {2, 1}, ElemType::S64);
  EXPECT_EQ(argmin[0].As<int64_t>(), (std::vector<int64_t>{2, 0}));
}

TEST(LoweringElementwise, MaximumReluAndClampKeepNan) {
  LoweringCall call;
  Arg x = call.Tensor(HostTensor::Of<float>({1, kNan, 3, kNan}, {4}));
  Arg y = call.Tensor(HostTensor::Of<float>({kNan, 1, 0, kNan}, {4}));
  auto m = call.Lower("aten::maximum", {x, y}, {{ElemType::F32, {4}}});
  std::vector<float> mv = m[0].As<float>();
  EXPECT_TRUE(std::isnan(mv[0]));  // NaN as either operand
  EXPECT_TRUE(std::isnan(mv[1]));
  EXPECT_EQ(mv[2], 3);
  EXPECT_TRUE(std::isnan(mv[3]));

  LoweringCall relu;
  Arg r = relu.Tensor(HostTensor::Of<float>({-1, kNan, 2, -0.f}, {4}));
  std::vector<float> got = relu.Lower("aten::relu", {r}, {{ElemType::F32, {4}}})[0].As<float>();
  EXPECT_EQ(got[0], 0);
  EXPECT_TRUE(std::isnan(got[1]));
  EXPECT_EQ(got[2], 2);

  LoweringCall clamp;
  Arg c = clamp.Tensor(HostTensor::Of<float>({-5, kNan, 5, 0.5f}, {4}));
  Arg lo = clamp.Tensor(Scalar<float>(0));
  Arg hi = clamp.Tensor(Scalar<float>(1));
  std::vector<float> cl = clamp.Lower("aten::clamp", {c, lo, hi}, {{ElemType::F32, {4}}})[0].As<float>();
  EXPECT_EQ(cl[0], 0);
  EXPECT_TRUE(std::isnan(cl[1]));
  EXPECT_EQ(cl[2], 1);
  EXPECT_EQ(cl[3], 0.5f);
}

TEST(LoweringReduction, MinDimOverFirstDimWithIntegers) {
  LoweringCall call;
  Arg x = call.Tensor(HostTensor::Of<int32_t>({3, -1, 7, 3, -1, 2, 0, 9, 2}, {3, 3}));
  auto out = call.Lower("aten::min.dim", {x, LoweringCall::Int(0), LoweringCall::Bool(false)},
                        {{ElemType::S32, {3}}, {ElemType::S64, {3}}}, ElemType::S32);
  EXPECT_EQ(out[0].As<int32_t>(), (std::vector<int32_t>{0, -1, 2}));
  EXPECT_EQ(out[1].As<int64_t>(), (std::vector<int64_t>{2, 0, 1}));  // ties: the first index
}

TEST(LoweringNn, SoftmaxRowsSumToOne) {
  // Large logits must not overflow: softmax subtracts the row maximum first.
  std::vector<float> xs = {0, 1, 2, 3, 4, 1000, 1001, 1002, 999, 998, -5, 0, 5, -kInf, 2};
  for (int64_t dim : {1, -1, 0}) {
    SCOPED_TRACE(dim);
    LoweringCall call;
    Arg x = call.Tensor(HostTensor::Of(xs, {3, 5}));
    auto out = call.Lower("aten::_softmax", {x, LoweringCall::Int(dim), LoweringCall::Bool(false)},
                          {{ElemType::F32, {3, 5}}});
    std::vector<float> y = out[0].As<float>();
    bool rows = dim != 0;
    for (int r = 0; r < (rows ? 3 : 5); ++r) {
      double total = 0, max = -INFINITY;
      for (int k = 0; k < (rows ? 5 : 3); ++k) max = std::max<double>(max, xs[rows ? r * 5 + k : k * 5 + r]);
      double denom = 0;
      for (int k = 0; k < (rows ? 5 : 3); ++k) denom += std::exp(xs[rows ? r * 5 + k : k * 5 + r] - max);
      for (int k = 0; k < (rows ? 5 : 3); ++k) {
        int i = rows ? r * 5 + k : k * 5 + r;
        EXPECT_NEAR(y[i], std::exp(xs[i] - max) / denom, 1e-6) << "element " << i;
        total += y[i];
      }
      EXPECT_NEAR(total, 1.0, 1e-6) << (rows ? "row " : "column ") << r;
    }
  }
}

TEST(LoweringLinalg, MmMatchesHost) {
  std::vector<float> a(6), b(12);
  for (int i = 0; i < 6; ++i) a[i] = static_cast<float>(i) * 0.5f - 1;
  for (int i = 0; i < 12; ++i) b[i] = static_cast<float>(i % 5) - 2;
  std::vector<float> expect(8, 0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) expect[i * 4 + j] += a[i * 3 + k] * b[k * 4 + j];
  LoweringCall call;
  Arg x = call.Tensor(HostTensor::Of(a, {2, 3}));
  Arg y = call.Tensor(HostTensor::Of(b, {3, 4}));
  auto out = call.Lower("aten::mm", {x, y}, {{ElemType::F32, {2, 4}}});
  EXPECT_EQ(out[0].As<float>(), expect);
}

TEST(LoweringLinalg, MmOnInt64) {
  LoweringCall call;
  Arg x = call.Tensor(HostTensor::Of<int64_t>({1, 2, 3, 4}, {2, 2}));
  Arg y = call.Tensor(HostTensor::Of<int64_t>({int64_t{1} << 40, 1, 0, -1}, {2, 2}));
  auto out = call.Lower("aten::mm", {x, y}, {{ElemType::S64, {2, 2}}}, ElemType::S64);
  EXPECT_EQ(out[0].As<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40, -1, 3 * (int64_t{1} << 40), -1}));
}

}  // namespace
}  // namespace tpu::test
