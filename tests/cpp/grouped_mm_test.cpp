// aten::_grouped_mm's two formulations: the tiles the CPU plugin runs (checked against host
// products) and chlo.ragged_dot for TPU/GPU plugins, which this plugin parses but cannot
// compile, so its text is checked and the compiler must reject only the op itself.
#include <string>

#include "lowering/lowering.h"
#include "lowering_call.h"
#include "test_util.h"

namespace tpu::test {
namespace {

using lowering::Arg;
using shlo::ElemType;
using shlo::TensorType;

std::vector<float> Iota(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 7) * scale - 1.0f;
  return v;
}

// The module text of one _grouped_mm call (x [m,k] by w [g,k,n], offsets `ends`).
std::string RaggedRowsText(bool ragged_dot, std::vector<int64_t> x_dims, std::vector<int64_t> w_dims,
                           std::vector<int64_t> out_dims, int64_t groups) {
  lowering::SetRaggedDot(ragged_dot);
  shlo::Builder b;
  std::vector<Arg> args(5);
  args[0].kind = args[1].kind = args[2].kind = Arg::Kind::Tensor;
  args[0].value = b.Param({ElemType::BF16, x_dims});
  args[1].value = b.Param({ElemType::BF16, w_dims});
  args[2].value = b.Param({ElemType::S32, {groups}});
  lowering::Ctx ctx{b, {{ElemType::BF16, out_dims}}};
  auto results = lowering::Find("aten::_grouped_mm")(ctx, lowering::Args(args));
  lowering::SetRaggedDot(false);
  return b.Module(results);
}

TEST(GroupedMm, TiledRowsMatchPerGroupProducts) {
  // 40 rows over 3 groups (one empty), rows 37.. past the last offset: tiles of several rows.
  const int64_t m = 40, k = 4, n = 3;
  std::vector<int32_t> ends = {10, 10, 37};
  HostTensor x = HostTensor::Of<float>(Iota(m * k, 0.25f), {m, k});
  HostTensor w = HostTensor::Of<float>(Iota(3 * k * n, 0.5f), {3, k, n});
  LoweringCall call;
  auto out = call.LowerWithChecks("aten::_grouped_mm",
                                  {call.Tensor(x), call.Tensor(w), call.Tensor(HostTensor::Of<int32_t>(ends, {3})),
                                   LoweringCall::None(), LoweringCall::None()},
                                  {{ElemType::F32, {m, n}}});
  ASSERT_EQ(out.size(), 2u);
  std::vector<float> got = out[0].As<float>(), xs = x.As<float>(), ws = w.As<float>();
  for (int64_t i = 0; i < m; ++i) {
    int64_t g = i < 10 ? 0 : i < 37 ? 2 : -1;
    for (int64_t j = 0; j < n; ++j) {
      float want = 0;
      for (int64_t c = 0; g >= 0 && c < k; ++c) want += xs[i * k + c] * ws[(g * k + c) * n + j];
      EXPECT_NEAR(got[i * n + j], want, 1e-4) << "row " << i << " col " << j;
    }
  }
  EXPECT_FALSE(out[1].As<bool>()[0]);  // valid offsets pass the device check
}

TEST(GroupedMm, RaggedDotText) {
  std::string rows = RaggedRowsText(true, {16, 8}, {4, 8, 6}, {16, 6}, 4);
  EXPECT_NE(rows.find("\"chlo.ragged_dot\""), std::string::npos) << rows;
  EXPECT_NE(rows.find("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1], "
                      "lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]>"),
            std::string::npos)
      << rows;
  // bf16 operands, f32 accumulation, one rounding.
  EXPECT_NE(rows.find("(tensor<16x8xbf16>, tensor<4x8x6xbf16>, tensor<4xi64>) -> tensor<16x6xf32>"), std::string::npos)
      << rows;
  std::string contraction = RaggedRowsText(true, {8, 16}, {16, 6}, {4, 8, 6}, 4);
  EXPECT_NE(contraction.find("lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0], "
                             "lhs_ragged_dimensions = [1], rhs_group_dimensions = []>"),
            std::string::npos)
      << contraction;
  EXPECT_EQ(RaggedRowsText(false, {16, 8}, {4, 8, 6}, {16, 6}, 4).find("ragged_dot"), std::string::npos);
}

TEST(GroupedMm, RaggedDotIsValidTextThatOnlyXlaCpuRejects) {
  // The CPU plugin parses and verifies the module, then refuses the HLO op itself.
  for (auto text : {RaggedRowsText(true, {16, 8}, {4, 8, 6}, {16, 6}, 4),
                    RaggedRowsText(true, {8, 16}, {16, 6}, {4, 8, 6}, 4)}) {
    try {
      CompileText(text);
      SUCCEED() << "this plugin compiles ragged_dot";
    } catch (const pjrt::Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("`ragged-dot` is not supported"), std::string::npos) << msg << "\n" << text;
    }
  }
}

}  // namespace
}  // namespace tpu::test
