// csrc/stablehlo: the exact text the builder prints, and that what it prints compiles and
// computes the right numbers on the CPU plugin.
#include <cmath>
#include <limits>

#include "test_util.h"

namespace tpu::test {
namespace {

using shlo::Builder;
using shlo::Cmp;
using shlo::ElemType;
using shlo::TensorType;
using shlo::Value;

#define EXPECT_HAS(text, piece) \
  EXPECT_NE((text).find(piece), std::string::npos) << "missing: " << (piece) << "\nin:\n" << (text)

const TensorType kF32x4{ElemType::F32, {4}};

TEST(StablehloTypes, Names) {
  EXPECT_EQ((TensorType{ElemType::F32, {2, 3}}.str()), "tensor<2x3xf32>");
  EXPECT_EQ((TensorType{ElemType::Pred, {}}.str()), "tensor<i1>");
  EXPECT_EQ((TensorType{ElemType::U8, {0}}.str()), "tensor<0xui8>");
  EXPECT_EQ((TensorType{ElemType::BF16, {1}}.str()), "tensor<1xbf16>");
  EXPECT_EQ((TensorType{ElemType::C64, {2}}.str()), "tensor<2xcomplex<f32>>");
  EXPECT_EQ((TensorType{ElemType::S64, {2, 0, 3}}.numel()), 0);
  EXPECT_EQ((TensorType{ElemType::S64, {}}.numel()), 1);
  EXPECT_EQ(shlo::ByteSize(ElemType::BF16), 2u);
  EXPECT_EQ(shlo::ByteSize(ElemType::C128), 16u);
  EXPECT_TRUE(shlo::IsFloat(ElemType::BF16));
  EXPECT_FALSE(shlo::IsInteger(ElemType::Pred));
  EXPECT_TRUE(shlo::IsUnsigned(ElemType::U64));
  EXPECT_EQ(shlo::DenseI64({}), "array<i64>");
  EXPECT_EQ(shlo::DenseI64({1, -2}), "array<i64: 1, -2>");
}

TEST(StablehloBuilder, ParamsOpAndModule) {
  Builder b;
  Value x = b.Param(kF32x4);
  Value y = b.Param(kF32x4);
  Value z = b.Op1("stablehlo.add", {x, y}, kF32x4);
  EXPECT_EQ(z.ref(), "%2");
  std::string text = b.Module({z});
  EXPECT_HAS(text, "module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {");
  EXPECT_HAS(text, "func.func public @main(%0: tensor<4xf32>, %1: tensor<4xf32>) -> (tensor<4xf32>) {");
  EXPECT_HAS(text, "    %2 = \"stablehlo.add\"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n");
  EXPECT_HAS(text, "\"func.return\"(%2) : (tensor<4xf32>) -> ()");
  auto out = RunModule(b, {z}, {HostTensor::Of<float>({1, 2, 3, 4}, {4}), HostTensor::Of<float>({.5, .5, -3, 0}, {4})});
  EXPECT_EQ(out[0].As<float>(), (std::vector<float>{1.5, 2.5, 0, 4}));
}

TEST(StablehloBuilder, OpWithAttrsAndNoOperands) {
  Builder b;
  Value i = b.Iota({ElemType::S32, {2, 3}}, 1);
  std::string text = b.Module({i});
  EXPECT_HAS(text, "%0 = \"stablehlo.iota\"() {iota_dimension = 1 : i64} : () -> tensor<2x3xi32>");
  EXPECT_HAS(text, "func.func public @main() -> (tensor<2x3xi32>)");
  EXPECT_EQ(RunModule(b, {i}, {})[0].As<int32_t>(), (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
}

TEST(StablehloBuilder, ConstantsFiniteAndSplat) {
  Builder b;
  Value c = b.Constant(1.5, {ElemType::F32, {2}});
  Value n = b.Constant(-7, {ElemType::S32, {}});
  Value t = b.Constant(2, {ElemType::Pred, {}});
  Value f = b.Constant(3.75, {ElemType::S64, {}});  // truncated toward zero
  std::string text = b.Module({c, n, t, f});
  EXPECT_HAS(text, "%0 = \"stablehlo.constant\"() {value = dense<1.50000000000000000e+00> : tensor<f32>} : () -> tensor<f32>");
  EXPECT_HAS(text, "%1 = \"stablehlo.broadcast_in_dim\"(%0) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> tensor<2xf32>");
  EXPECT_HAS(text, "{value = dense<-7> : tensor<i32>}");
  EXPECT_HAS(text, "{value = dense<true> : tensor<i1>}");
  EXPECT_HAS(text, "{value = dense<3> : tensor<i64>}");
  auto out = RunModule(b, {c, n, t, f}, {});
  EXPECT_EQ(out[0].As<float>(), (std::vector<float>{1.5, 1.5}));
  EXPECT_EQ(out[1].As<int32_t>(), (std::vector<int32_t>{-7}));
  EXPECT_EQ(out[2].As<bool>(), (std::vector<bool>{true}));
  EXPECT_EQ(out[3].As<int64_t>(), (std::vector<int64_t>{3}));
}

TEST(StablehloBuilder, ConstantLiteralsAreExact) {
  // %.17e round-trips every double: 0.1 and 1/3 come back bit for bit.
  Builder b;
  Value a = b.Constant(0.1, {ElemType::F64, {}});
  Value c = b.Constant(1.0 / 3.0, {ElemType::F64, {}});
  Value tiny = b.Constant(std::numeric_limits<double>::denorm_min(), {ElemType::F64, {}});
  auto out = RunModule(b, {a, c, tiny}, {});
  EXPECT_EQ(out[0].As<double>()[0], 0.1);
  EXPECT_EQ(out[1].As<double>()[0], 1.0 / 3.0);
  EXPECT_EQ(out[2].As<double>()[0], std::numeric_limits<double>::denorm_min());
}

TEST(StablehloBuilder, InfinityAndNanAreHexLiterals) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Builder b;
  std::vector<Value> vs = {
      b.Constant(inf, {ElemType::F32, {}}),  b.Constant(-inf, {ElemType::F32, {}}),
      b.Constant(nan, {ElemType::F32, {}}),  b.Constant(inf, {ElemType::BF16, {}}),
      b.Constant(-inf, {ElemType::BF16, {}}), b.Constant(nan, {ElemType::BF16, {}}),
      b.Constant(inf, {ElemType::F16, {}}),  b.Constant(nan, {ElemType::F16, {}}),
      b.Constant(-inf, {ElemType::F64, {}}), b.Constant(nan, {ElemType::F64, {}}),
  };
  std::string text = b.Module(vs);
  EXPECT_HAS(text, "dense<0x7F800000> : tensor<f32>");
  EXPECT_HAS(text, "dense<0xFF800000> : tensor<f32>");
  EXPECT_HAS(text, "dense<0x7FC00000> : tensor<f32>");
  EXPECT_HAS(text, "dense<0x7F80> : tensor<bf16>");
  EXPECT_HAS(text, "dense<0xFF80> : tensor<bf16>");
  EXPECT_HAS(text, "dense<0x7FC0> : tensor<bf16>");
  EXPECT_HAS(text, "dense<0x7C00> : tensor<f16>");
  EXPECT_HAS(text, "dense<0x7E00> : tensor<f16>");
  EXPECT_HAS(text, "dense<0xFFF0000000000000> : tensor<f64>");
  EXPECT_HAS(text, "dense<0x7FF8000000000000> : tensor<f64>");

  auto out = RunModule(b, vs, {});
  auto bits16 = [](const HostTensor& h) { return static_cast<uint16_t>(h.bytes[0] | (h.bytes[1] << 8)); };
  EXPECT_EQ(out[0].As<float>()[0], INFINITY);
  EXPECT_EQ(out[1].As<float>()[0], -INFINITY);
  EXPECT_TRUE(std::isnan(out[2].As<float>()[0]));
  EXPECT_EQ(bits16(out[3]), 0x7F80);
  EXPECT_EQ(bits16(out[4]), 0xFF80);
  EXPECT_EQ(bits16(out[5]) & 0x7FC0, 0x7FC0);
  EXPECT_EQ(bits16(out[6]), 0x7C00);
  EXPECT_EQ(bits16(out[7]) & 0x7E00, 0x7E00);
  EXPECT_EQ(out[8].As<double>()[0], -inf);
  EXPECT_TRUE(std::isnan(out[9].As<double>()[0]));
}

TEST(StablehloBuilder, ExtremesOfEveryIntegerType) {
  Builder b;
  Value lo64 = b.Extreme(false, {ElemType::S64, {}});
  Value hi64 = b.Extreme(true, {ElemType::S64, {2}});
  Value lo32 = b.Extreme(false, {ElemType::S32, {}});
  Value hi_u8 = b.Extreme(true, {ElemType::U8, {}});
  Value hi_u64 = b.Extreme(true, {ElemType::U64, {}});
  Value neg_inf = b.Extreme(false, {ElemType::F32, {}});
  std::string text = b.Module({lo64, hi64, lo32, hi_u8, hi_u64, neg_inf});
  EXPECT_HAS(text, "dense<-9223372036854775808> : tensor<i64>");
  EXPECT_HAS(text, "dense<18446744073709551615> : tensor<ui64>");
  auto out = RunModule(b, {lo64, hi64, lo32, hi_u8, hi_u64, neg_inf}, {});
  EXPECT_EQ(out[0].As<int64_t>()[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(out[1].As<int64_t>(), (std::vector<int64_t>(2, std::numeric_limits<int64_t>::max())));
  EXPECT_EQ(out[2].As<int32_t>()[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(out[3].bytes, (std::vector<uint8_t>{255}));
  EXPECT_EQ(out[4].bytes, (std::vector<uint8_t>(8, 0xFF)));
  EXPECT_EQ(out[5].As<float>()[0], -INFINITY);
  Builder c;
  EXPECT_THROW(c.Extreme(true, {ElemType::C64, {}}), std::invalid_argument);
}

TEST(StablehloBuilder, BroadcastTo) {
  Builder b;
  Value row = b.Param({ElemType::F32, {3}});
  Value col = b.Param({ElemType::F32, {2, 1}});
  Value r = b.BroadcastTo(row, {2, 3});
  Value c = b.BroadcastTo(col, {4, 2, 3});
  EXPECT_EQ(b.BroadcastTo(row, {3}).id, row.id);  // no-op when the shape matches
  std::string text = b.Module({r, c});
  EXPECT_HAS(text, "%2 = \"stablehlo.broadcast_in_dim\"(%0) {broadcast_dimensions = array<i64: 1>} : (tensor<3xf32>) -> tensor<2x3xf32>");
  // A size-1 dim that expands is reshaped away first.
  EXPECT_HAS(text, "%3 = \"stablehlo.reshape\"(%1) : (tensor<2x1xf32>) -> tensor<2xf32>");
  EXPECT_HAS(text, "%4 = \"stablehlo.broadcast_in_dim\"(%3) {broadcast_dimensions = array<i64: 1>} : (tensor<2xf32>) -> tensor<4x2x3xf32>");
  auto out = RunModule(b, {r, c}, {HostTensor::Of<float>({1, 2, 3}, {3}), HostTensor::Of<float>({7, 8}, {2, 1})});
  EXPECT_EQ(out[0].As<float>(), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  std::vector<float> expect;
  for (int i = 0; i < 4; ++i)
    for (float v : {7.f, 8.f})
      for (int k = 0; k < 3; ++k) expect.push_back(v);
  EXPECT_EQ(out[1].As<float>(), expect);
  EXPECT_THROW(b.BroadcastTo(row, {4}), std::invalid_argument);
  EXPECT_THROW(b.BroadcastTo(col, {2}), std::invalid_argument);
}

TEST(StablehloBuilder, IdentityOpsEmitNothing) {
  Builder b;
  Value x = b.Param({ElemType::F32, {2, 3}});
  EXPECT_EQ(b.Reshape(x, {2, 3}).id, x.id);
  EXPECT_EQ(b.Transpose(x, {0, 1}).id, x.id);
  EXPECT_EQ(b.Convert(x, ElemType::F32).id, x.id);
  EXPECT_EQ(b.Slice(x, {0, 0}, {2, 3}, {1, 1}).id, x.id);
  EXPECT_EQ(b.BroadcastInDim(x, {2, 3}, {0, 1}).id, x.id);
  EXPECT_EQ(b.Concatenate({x}, 0).id, x.id);
  EXPECT_EQ(b.Module({x}).find("stablehlo."), std::string::npos);
}

TEST(StablehloBuilder, ReduceRegion) {
  Builder b;
  Value x = b.Param({ElemType::F32, {2, 3}});
  Value init = b.Constant(0, {ElemType::F32, {}});
  Value r = b.Reduce(x, init, {1}, "add");
  EXPECT_EQ(r.type, (TensorType{ElemType::F32, {2}}));
  std::string text = b.Module({r});
  EXPECT_HAS(text,
             "    %5 = \"stablehlo.reduce\"(%0, %1) ({\n"
             "    ^bb0(%2: tensor<f32>, %3: tensor<f32>):\n"
             "      %4 = \"stablehlo.add\"(%2, %3) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
             "      \"stablehlo.return\"(%4) : (tensor<f32>) -> ()\n"
             "    }) {dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>\n");
  auto out = RunModule(b, {r}, {HostTensor::Of<float>({1, 2, 3, 4, 5, 6}, {2, 3})});
  EXPECT_EQ(out[0].As<float>(), (std::vector<float>{6, 15}));
}

TEST(StablehloBuilder, ReduceOverSeveralDimsAndMaximum) {
  Builder b;
  Value x = b.Param({ElemType::S32, {2, 3, 2}});
  Value s = b.Reduce(x, b.Constant(0, {ElemType::S32, {}}), {0, 2}, "add");
  Value m = b.Reduce(x, b.Extreme(false, {ElemType::S32, {}}), {0, 1, 2}, "maximum");
  EXPECT_EQ(b.Reduce(x, s, {}, "add").id, x.id);  // nothing to reduce
  auto out = RunModule(b, {s, m}, {HostTensor::Of<int32_t>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -12}, {2, 3, 2})});
  EXPECT_EQ(out[0].As<int32_t>(), (std::vector<int32_t>{1 + 2 + 7 + 8, 3 + 4 + 9 + 10, 5 + 6 + 11 - 12}));
  EXPECT_EQ(out[1].As<int32_t>(), (std::vector<int32_t>{11}));
}

TEST(StablehloBuilder, DotGeneralAttributes) {
  Builder b;
  Value x = b.Param({ElemType::F32, {2, 3, 4}});
  Value y = b.Param({ElemType::F32, {2, 4, 5}});
  Value z = b.DotGeneral(x, y, {0}, {0}, {2}, {1}, ElemType::F32);
  EXPECT_EQ(z.type, (TensorType{ElemType::F32, {2, 3, 5}}));
  std::string text = b.Module({z});
  EXPECT_HAS(text,
             "\"stablehlo.dot_general\"(%0, %1) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], "
             "rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>, "
             "precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]} : "
             "(tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>");
  std::vector<float> xs(24), ys(40);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 7) - 3;
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<float>(i % 5) * 0.5f;
  auto out = RunModule(b, {z}, {HostTensor::Of(xs, {2, 3, 4}), HostTensor::Of(ys, {2, 4, 5})});
  std::vector<float> got = out[0].As<float>(), expect(30, 0);
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j)
        for (int k = 0; k < 4; ++k) expect[n * 15 + i * 5 + j] += xs[n * 12 + i * 4 + k] * ys[n * 20 + k * 5 + j];
  EXPECT_EQ(got, expect);
}

TEST(StablehloBuilder, DotGeneralIntegerHasNoPrecision) {
  Builder b;
  Value x = b.Param({ElemType::S32, {2, 3}});
  Value y = b.Param({ElemType::S32, {3}});
  Value z = b.DotGeneral(x, y, {}, {}, {1}, {0}, ElemType::S32);
  std::string text = b.Module({z});
  EXPECT_HAS(text, "{dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>}");
  EXPECT_EQ(text.find("precision"), std::string::npos);
  auto out = RunModule(b, {z}, {HostTensor::Of<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3}), HostTensor::Of<int32_t>({1, 0, -1}, {3})});
  EXPECT_EQ(out[0].As<int32_t>(), (std::vector<int32_t>{-2, -2}));
}

// Emits a stable sort of `vals` by `keys`: one op with two results.
std::vector<Value> SortByKeys(Builder& b, Value keys, Value vals) {
  int k0 = b.NewId(), k1 = b.NewId(), v0 = b.NewId(), v1 = b.NewId(), lt = b.NewId();
  auto ref = [](int id) { return "%" + std::to_string(id); };
  std::string region = "{\n    ^bb0(" + ref(k0) + ": tensor<f32>, " + ref(k1) + ": tensor<f32>, " + ref(v0) +
                       ": tensor<i32>, " + ref(v1) + ": tensor<i32>):\n      " + ref(lt) +
                       " = \"stablehlo.compare\"(" + ref(k0) + ", " + ref(k1) +
                       ") {comparison_direction = #stablehlo<comparison_direction LT>} : (tensor<f32>, tensor<f32>) -> tensor<i1>\n"
                       "      \"stablehlo.return\"(" + ref(lt) + ") : (tensor<i1>) -> ()\n    }";
  return b.Op("stablehlo.sort", {keys, vals}, {keys.type, vals.type}, "dimension = 0 : i64, is_stable = true", region);
}

TEST(StablehloBuilder, MultiResultNaming) {
  TensorType keys_t{ElemType::F32, {4}}, vals_t{ElemType::S32, {4}};
  Builder b;
  Value keys = b.Param(keys_t);
  Value vals = b.Param(vals_t);
  std::vector<Value> sorted = SortByKeys(b, keys, vals);  // region ids %2..%6, the op %7
  ASSERT_EQ(sorted.size(), 2u);
  EXPECT_EQ(sorted[0].ref(), "%7#0");
  EXPECT_EQ(sorted[1].ref(), "%7#1");
  EXPECT_EQ(sorted[1].type, vals_t);
  Value doubled = b.Binary("add", sorted[1], sorted[1]);
  std::string text = b.Module({sorted[1], sorted[0], doubled});
  EXPECT_HAS(text, "    %7:2 = \"stablehlo.sort\"(%0, %1) ({");
  EXPECT_HAS(text, "}) {dimension = 0 : i64, is_stable = true} : (tensor<4xf32>, tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi32>)\n");
  EXPECT_HAS(text, "%8 = \"stablehlo.add\"(%7#1, %7#1)");
  EXPECT_HAS(text, "\"func.return\"(%7#1, %7#0, %8) : (tensor<4xi32>, tensor<4xf32>, tensor<4xi32>) -> ()");
  EXPECT_HAS(text, "-> (tensor<4xi32>, tensor<4xf32>, tensor<4xi32>) {");
  auto out = RunModule(b, {sorted[1], sorted[0], doubled},
                       {HostTensor::Of<float>({3, -1, 2, 0.5}, {4}), HostTensor::Of<int32_t>({30, 10, 20, 5}, {4})});
  EXPECT_EQ(out[0].As<int32_t>(), (std::vector<int32_t>{10, 5, 20, 30}));
  EXPECT_EQ(out[1].As<float>(), (std::vector<float>{-1, 0.5, 2, 3}));
  EXPECT_EQ(out[2].As<int32_t>(), (std::vector<int32_t>{20, 10, 40, 60}));
}

TEST(StablehloBuilder, CompareAttributes) {
  Builder b;
  Value f = b.Param({ElemType::F32, {4}});
  Value g = b.Param({ElemType::F32, {4}});
  Value i = b.Param({ElemType::S64, {4}});
  Value u = b.Param({ElemType::U32, {4}});
  Value p = b.Param({ElemType::Pred, {4}});
  Value lt = b.Compare(Cmp::LT, f, g);
  Value ne = b.Compare(Cmp::NE, f, f);
  Value ge = b.Compare(Cmp::GE, i, b.Constant(0, i.type));
  Value gt = b.Compare(Cmp::GT, u, b.Constant(1, u.type));
  Value eq = b.Compare(Cmp::EQ, p, b.Constant(1, p.type));
  EXPECT_EQ(lt.type, (TensorType{ElemType::Pred, {4}}));
  std::string text = b.Module({lt, ne, ge, gt, eq});
  EXPECT_HAS(text,
             "%5 = \"stablehlo.compare\"(%0, %1) {comparison_direction = #stablehlo<comparison_direction LT>, "
             "compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>");
  EXPECT_HAS(text, "comparison_direction = #stablehlo<comparison_direction NE>, compare_type = #stablehlo<comparison_type FLOAT>");
  EXPECT_HAS(text, "comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type SIGNED>");
  EXPECT_HAS(text, "comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type UNSIGNED>");
  EXPECT_HAS(text, "comparison_direction = #stablehlo<comparison_direction EQ>, compare_type = #stablehlo<comparison_type UNSIGNED>");

  HostTensor uh{{ElemType::U32, {4}}, std::vector<uint8_t>(16, 0)};
  uh.bytes[0] = 2;       // 2 > 1
  uh.bytes[7] = 0x80;    // 2^31: > 1 only if compared unsigned
  uh.bytes[8] = 1;       // 1
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto out = RunModule(b, {lt, ne, ge, gt, eq},
                 {HostTensor::Of<float>({1, 2, nan, -INFINITY}, {4}), HostTensor::Of<float>({2, 2, 0, 0}, {4}),
                  HostTensor::Of<int64_t>({-1, 0, 5, INT64_MIN}, {4}), uh,
                  HostTensor::Of<bool>({true, false, true, false}, {4})});
  EXPECT_EQ(out[0].As<bool>(), (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(out[1].As<bool>(), (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(out[2].As<bool>(), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(out[3].As<bool>(), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(out[4].As<bool>(), (std::vector<bool>{true, false, true, false}));
}

TEST(StablehloBuilder, SliceTransposeConcatPad) {
  Builder b;
  Value x = b.Param({ElemType::S32, {3, 4}});
  Value s = b.Slice(x, {0, 1}, {3, 4}, {2, 2});
  Value t = b.Transpose(x, {1, 0});
  Value c = b.Concatenate({s, s}, 1);
  Value p = b.Pad(s, b.Constant(-1, {ElemType::S32, {}}), {1, 0}, {0, 1}, {0, 1});
  EXPECT_EQ(s.type.dims, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(p.type.dims, (std::vector<int64_t>{3, 4}));
  std::string text = b.Module({s, t, c, p});
  EXPECT_HAS(text, "{start_indices = array<i64: 0, 1>, limit_indices = array<i64: 3, 4>, strides = array<i64: 2, 2>}");
  EXPECT_HAS(text, "{permutation = array<i64: 1, 0>} : (tensor<3x4xi32>) -> tensor<4x3xi32>");
  EXPECT_HAS(text, "{dimension = 1 : i64} : (tensor<2x2xi32>, tensor<2x2xi32>) -> tensor<2x4xi32>");
  EXPECT_HAS(text, "{edge_padding_low = array<i64: 1, 0>, edge_padding_high = array<i64: 0, 1>, interior_padding = array<i64: 0, 1>}");
  std::vector<int32_t> xs(12);
  for (int i = 0; i < 12; ++i) xs[i] = i;
  auto out = RunModule(b, {s, t, c, p}, {HostTensor::Of(xs, {3, 4})});
  EXPECT_EQ(out[0].As<int32_t>(), (std::vector<int32_t>{1, 3, 9, 11}));
  EXPECT_EQ(out[1].As<int32_t>(), (std::vector<int32_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  EXPECT_EQ(out[2].As<int32_t>(), (std::vector<int32_t>{1, 3, 1, 3, 9, 11, 9, 11}));
  EXPECT_EQ(out[3].As<int32_t>(), (std::vector<int32_t>{-1, -1, -1, -1, 1, -1, 3, -1, 9, -1, 11, -1}));
}

TEST(StablehloBuilder, ConvertAndBitcast) {
  Builder b;
  Value x = b.Param({ElemType::F32, {4}});
  Value i = b.Convert(x, ElemType::S32);
  Value p = b.Convert(x, ElemType::Pred);
  Value bits = b.BitcastConvert(x, {ElemType::S32, {4}});
  auto out = RunModule(b, {i, p, bits}, {HostTensor::Of<float>({-2.7f, 0.f, 0.5f, 1.f}, {4})});
  EXPECT_EQ(out[0].As<int32_t>(), (std::vector<int32_t>{-2, 0, 0, 1}));  // toward zero
  EXPECT_EQ(out[1].As<bool>(), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(out[2].As<int32_t>()[3], 0x3F800000);
}

TEST(StablehloBuilder, GatherScatterDynamicUpdateSlice) {
  Builder b;
  Value x = b.Param({ElemType::F32, {6}});
  Value idx = b.Param({ElemType::S64, {2, 2}});
  Value upd = b.Param({ElemType::F32, {2, 2}});
  Value g = b.Gather1D(x, idx);
  Value s = b.Scatter1D(x, b.Reshape(idx, {4}), b.Reshape(upd, {4}));
  Value d = b.DynamicUpdateSlice(x, b.Reshape(upd, {4}), {1});
  EXPECT_EQ(g.type, (TensorType{ElemType::F32, {2, 2}}));
  std::string text = b.Module({g, s, d});
  EXPECT_HAS(text, "\"stablehlo.reshape\"(%1) : (tensor<2x2xi64>) -> tensor<2x2x1xi64>");
  EXPECT_HAS(text, "collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, slice_sizes = array<i64: 1>");
  EXPECT_HAS(text, "inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>");
  auto out = RunModule(b, {g, s, d},
                 {HostTensor::Of<float>({0, 10, 20, 30, 40, 50}, {6}), HostTensor::Of<int64_t>({5, 0, 2, 2}, {2, 2}),
                  HostTensor::Of<float>({-1, -2, -3, -4}, {2, 2})});
  EXPECT_EQ(out[0].As<float>(), (std::vector<float>{50, 0, 20, 20}));
  std::vector<float> scattered = out[1].As<float>();
  EXPECT_EQ(scattered[5], -1);
  EXPECT_EQ(scattered[0], -2);
  EXPECT_TRUE(scattered[2] == -3 || scattered[2] == -4);  // duplicate index: either update
  EXPECT_EQ(scattered[1], 10);
  EXPECT_EQ(out[2].As<float>(), (std::vector<float>{0, -1, -2, -3, -4, 50}));
}

TEST(StablehloBuilder, ModuleRunsOnSecondDevice) {
  Builder b;
  Value x = b.Param({ElemType::S64, {3}});
  Value y = b.Binary("multiply", x, b.ConstantInt(int64_t{1} << 40, x.type));
  auto out = RunModule(b, {y}, {HostTensor::Of<int64_t>({1, -2, 3}, {3})}, 1);
  EXPECT_EQ(out[0].As<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40, -(int64_t{2} << 40), int64_t{3} << 40}));
}

}  // namespace
}  // namespace tpu::test
