// csrc/lowering/custom_kernel.cpp: a registered kernel module is imported once into the
// builder's module and called in place, and the result compiles and runs on the CPU plugin;
// the plugin reports the StableHLO range imported modules are checked against.
#include <regex>

#include "lowering/custom_kernel.h"
#include "test_util.h"

namespace tpu::test {
namespace {

using shlo::Builder;
using shlo::ElemType;
using shlo::TensorType;
using shlo::Value;

const TensorType kF32x3{ElemType::F32, {3}};

// (a + b) * a through a private helper, as torch_tpu/kernels/_stablehlo.py leaves a module:
// functions private, symbols prefixed, in the pretty syntax JAX prints.
const char* kFunctions = R"(  func.func private @t_k_main(%arg0: tensor<3xf32>, %arg1: tensor<3xf32>) -> (tensor<3xf32>) {
    %0 = stablehlo.add %arg0, %arg1 : tensor<3xf32>
    %1 = call @t_k_helper(%0, %arg0) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    return %1 : tensor<3xf32>
  }
  func.func private @t_k_helper(%arg0: tensor<3xf32>, %arg1: tensor<3xf32>) -> (tensor<3xf32>) {
    %0 = stablehlo.multiply %arg0, %arg1 : tensor<3xf32>
    return %0 : tensor<3xf32>
  }
)";

std::vector<Value> CallKernel(Builder& b, const std::string& op, const std::string& statics, Value x, Value y) {
  std::vector<lowering::Arg> args(3);
  args[0].kind = args[1].kind = lowering::Arg::Kind::Tensor;
  args[0].value = x;
  args[1].value = y;
  args[2].kind = lowering::Arg::Kind::String;
  args[2].s = statics;
  lowering::Ctx ctx{b, {kF32x3}};
  ctx.op = op;
  return lowering::LowerCustomKernel(ctx, lowering::Args(args));
}

TEST(CustomKernel, ImportedOnceAndCalledInPlace) {
  lowering::AddKernelVariant("test::k", "(('eps', 1.0),)", {kFunctions, "t_k_main", {kF32x3, kF32x3}, {kF32x3}});
  Builder b;
  Value x = b.Param(kF32x3), y = b.Param(kF32x3);
  Value once = CallKernel(b, "test::k", "(('eps', 1.0),)", x, y)[0];
  Value twice = CallKernel(b, "test::k", "(('eps', 1.0),)", once, y)[0];
  std::string text = b.Module({twice});
  EXPECT_EQ(b.imports().size(), 1u);
  size_t first = text.find("func.func private @t_k_main");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find("func.func private @t_k_main", first + 1), std::string::npos) << text;
  EXPECT_NE(text.find("\"func.call\"(%0, %1) {callee = @t_k_main}"), std::string::npos) << text;
  auto out = RunModule(b, {twice}, {HostTensor::Of<float>({1, 2, 3}, {3}), HostTensor::Of<float>({1, 1, 0}, {3})});
  // once = (x + y) * x = {2, 6, 9}; twice = (once + y) * once = {6, 42, 81}
  EXPECT_EQ(out[0].As<float>(), (std::vector<float>{6, 42, 81}));
}

TEST(CustomKernel, UnknownVariantNamesOpAndTypes) {
  Builder b;
  Value x = b.Param(kF32x3), y = b.Param(kF32x3);
  try {
    CallKernel(b, "test::k", "(('eps', 2.0),)", x, y);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("custom kernel test::k has no module for inputs (tensor<3xf32>, tensor<3xf32>)"),
              std::string::npos) << what;
    EXPECT_NE(what.find("(('eps', 2.0),)"), std::string::npos) << what;
  }
}

TEST(CustomKernel, ElementTypesFromMlirNames) {
  EXPECT_EQ(lowering::ElemTypeFromMlir("bf16"), ElemType::BF16);
  EXPECT_EQ(lowering::ElemTypeFromMlir("ui8"), ElemType::U8);
  EXPECT_EQ(lowering::ElemTypeFromMlir("complex<f32>"), ElemType::C64);
  EXPECT_THROW(lowering::ElemTypeFromMlir("f8E4M3FN"), std::invalid_argument);
}

TEST(PjrtPlugin, ReportsStablehloRange) {
  auto attrs = TestPlugin()->Attributes();
  const std::regex version(R"(\d+\.\d+\.\d+)");
  ASSERT_TRUE(attrs.count("stablehlo_current_version")) << "the plugin reports no StableHLO version";
  EXPECT_TRUE(std::regex_match(attrs["stablehlo_current_version"], version)) << attrs["stablehlo_current_version"];
  EXPECT_TRUE(std::regex_match(attrs["stablehlo_minimum_version"], version)) << attrs["stablehlo_minimum_version"];
}

}  // namespace
}  // namespace tpu::test
