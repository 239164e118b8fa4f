// Tensor-op lowerings (sort, scans, indexing, factorizations) run on the plugin without torch:
// the orderings PyTorch specifies (NaN last, stable ties), the device-side index checks, and
// the loops (stablehlo.while) behind LU and the Jacobi eigensolver.
#include <cmath>
#include <limits>

#include "lowering/helpers.h"
#include "lowering_call.h"
#include "test_util.h"

namespace tpu::test {
namespace {

using lowering::Arg;
using shlo::ElemType;
using shlo::TensorType;
using shlo::Value;

const float kNan = std::numeric_limits<float>::quiet_NaN();

using Call = LoweringCall;

bool SameFloat(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

TEST(TensorOps, SortPutsNanLastAscendingFirstDescendingAndIsStable) {
  for (bool descending : {false, true}) {
    Call c;
    Arg x = c.Tensor(HostTensor::Of<float>({3, kNan, 1, 3, -2, kNan}, {6}));
    auto out = c.LowerWithChecks("aten::sort.stable", {x, Call::Bool(true), Call::Int(0), Call::Bool(descending)},
                       {{ElemType::F32, {6}}, {ElemType::S64, {6}}});
    std::vector<float> want = descending ? std::vector<float>{kNan, kNan, 3, 3, 1, -2} : std::vector<float>{-2, 1, 3, 3, kNan, kNan};
    std::vector<int64_t> idx = descending ? std::vector<int64_t>{1, 5, 0, 3, 2, 4} : std::vector<int64_t>{4, 2, 0, 3, 1, 5};
    auto got = out[0].As<float>();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(SameFloat(got[i], want[i])) << i << " descending=" << descending;
    EXPECT_EQ(out[1].As<int64_t>(), idx);
  }
}

TEST(TensorOps, CumsumOfIntsAndCummaxWithNan) {
  Call c;
  Arg x = c.Tensor(HostTensor::Of<int32_t>({1, 2, 3, 4, 5, 6, 7}, {7}));
  auto sum = c.LowerWithChecks("aten::cumsum", {x, Call::Int(0), Call::None()}, {{ElemType::S64, {7}}});
  EXPECT_EQ(sum[0].As<int64_t>(), (std::vector<int64_t>{1, 3, 6, 10, 15, 21, 28}));
  Call m;
  Arg y = m.Tensor(HostTensor::Of<float>({1, 3, 3, 2, kNan, 5, kNan}, {7}));
  auto out = m.LowerWithChecks("aten::cummax", {y, Call::Int(0)}, {{ElemType::F32, {7}}, {ElemType::S64, {7}}});
  auto v = out[0].As<float>();
  std::vector<float> want = {1, 3, 3, 3, kNan, kNan, kNan};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(SameFloat(v[i], want[i])) << i;
  EXPECT_EQ(out[1].As<int64_t>(), (std::vector<int64_t>{0, 1, 2, 2, 4, 4, 6}));  // ties and NaN move to the later index
}

TEST(TensorOps, IndexSelectReportsOutOfRangeIndices) {
  for (int64_t bad : {3, -1}) {
    Call c;
    Arg x = c.Tensor(HostTensor::Of<float>({10, 11, 12}, {3}));
    Arg i = c.Tensor(HostTensor::Of<int64_t>({2, bad}, {2}));
    auto out = c.LowerWithChecks("aten::index_select", {x, Call::Int(0), i}, {{ElemType::F32, {2}}});
    ASSERT_EQ(c.checks, 1u);
    EXPECT_EQ(out.back().As<bool>(), std::vector<bool>{true}) << bad;
  }
  Call ok;
  Arg x = ok.Tensor(HostTensor::Of<float>({10, 11, 12}, {3}));
  Arg i = ok.Tensor(HostTensor::Of<int64_t>({2, 0}, {2}));
  auto out = ok.LowerWithChecks("aten::index_select", {x, Call::Int(0), i}, {{ElemType::F32, {2}}});
  EXPECT_EQ(out[0].As<float>(), (std::vector<float>{12, 10}));
  EXPECT_EQ(out.back().As<bool>(), std::vector<bool>{false});
}

TEST(TensorOps, IndexPutWithBooleanMaskNeedsNoCount) {
  Call c;
  Arg x = c.Tensor(HostTensor::Of<float>({0, 0, 0, 0}, {4}));
  Arg v = c.Tensor(HostTensor::Of<float>({7, 8}, {2}));
  Arg mask = c.Tensor(HostTensor::Of<bool>({false, true, false, true}, {4}));
  Arg indices;
  indices.kind = Arg::Kind::TensorList;
  indices.values = {mask.value};
  auto out = c.LowerWithChecks("aten::index_put", {x, indices, v, Call::Bool(false)}, {{ElemType::F32, {4}}});
  EXPECT_EQ(out[0].As<float>(), (std::vector<float>{0, 7, 0, 8}));
  EXPECT_EQ(out.back().As<bool>(), std::vector<bool>{false});  // two selected, two values
}

TEST(TensorOps, NonzeroStaticFillsPastTheCount) {
  Call c;
  Arg x = c.Tensor(HostTensor::Of<int32_t>({0, 5, 0, 7}, {2, 2}));
  auto out = c.LowerWithChecks("aten::nonzero_static", {x, Call::Int(3), Call::Int(-1)}, {{ElemType::S64, {3, 2}}});
  EXPECT_EQ(out[0].As<int64_t>(), (std::vector<int64_t>{0, 1, 1, 1, -1, -1}));
}

TEST(TensorOps, SolveThroughPivotedLu) {
  Call c;  // needs a row swap: A[0][0] == 0
  Arg a = c.Tensor(HostTensor::Of<float>({0, 2, 1, 3, 1, 0, 1, 1, 1}, {3, 3}));
  Arg b = c.Tensor(HostTensor::Of<float>({5, 5, 4}, {3, 1}));
  auto out = c.LowerWithChecks("aten::_linalg_solve_ex", {a, b, Call::Bool(true), Call::Bool(false)},
                     {{ElemType::F32, {3, 1}}, {ElemType::F32, {3, 3}}, {ElemType::S32, {3}}, {ElemType::S32, {}}});
  auto x = out[0].As<float>();  // the solution of A x = b is (1, 2, 1)
  EXPECT_NEAR(x[0], 1, 1e-5);
  EXPECT_NEAR(x[1], 2, 1e-5);
  EXPECT_NEAR(x[2], 1, 1e-5);
  EXPECT_EQ(out[2].As<int32_t>()[0], 2);  // LAPACK pivot: row 1 (1-based 2) swapped in first
  EXPECT_EQ(out[3].As<int32_t>(), std::vector<int32_t>{0});
}

TEST(TensorOps, JacobiEighOfASymmetricMatrix) {
  Call c;
  Arg a = c.Tensor(HostTensor::Of<float>({2, 1, 0, 1, 2, 0, 0, 0, 5}, {3, 3}));
  auto out = c.LowerWithChecks("aten::_linalg_eigh", {a, Arg{}, Call::Bool(true)}, {{ElemType::F32, {3}}, {ElemType::F32, {3, 3}}});
  auto w = out[0].As<float>();
  EXPECT_NEAR(w[0], 1, 1e-5);
  EXPECT_NEAR(w[1], 3, 1e-5);
  EXPECT_NEAR(w[2], 5, 1e-5);
}

}  // namespace
}  // namespace tpu::test
