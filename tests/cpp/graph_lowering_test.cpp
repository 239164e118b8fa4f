// Lowerings that torch.compile graphs need beyond eager's table: views as values
// (csrc/lowering/view_ops.cpp), copies and factories (factories.cpp), x[indices] (indexing.cpp), and
// convolution (conv.cpp, shared with eager). Each program runs on the plugin and is checked
// against numbers computed here on the host.
#include <algorithm>

#include "lowering/lowering.h"
#include "lowering/replicas.h"
#include "lowering_call.h"
#include "test_util.h"

namespace tpu::test {
namespace {

using lowering::Arg;
using shlo::ElemType;
using shlo::TensorType;
using shlo::Value;

using Call = LoweringCall;

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(GraphLowering, ViewOpsAreGraphOnly) {
  std::vector<std::string> eager = lowering::RegisteredOps(), graph = lowering::GraphOnlyOps();
  for (const char* op : {"aten::view", "aten::permute", "aten::expand", "aten::slice.Tensor", "aten::select.int",
                         "aten::_to_copy", "aten::clone", "aten::full", "aten::index.Tensor"}) {
    EXPECT_NE(lowering::Find(op), nullptr) << op;
    EXPECT_EQ(std::count(eager.begin(), eager.end(), op), 0) << op << " must not get an eager kernel";
    EXPECT_EQ(std::count(graph.begin(), graph.end(), op), 1) << op;
  }
  EXPECT_EQ(std::count(eager.begin(), eager.end(), "aten::convolution"), 1);
}

// x[1:4:2, ::-] of a 4x3 array, then permuted and expanded.
TEST(GraphLowering, SlicePermuteExpand) {
  Call call;
  Arg x = call.Tensor(HostTensor::Of<float>(Iota(12), {4, 3}));
  auto sliced = call.Lower("aten::slice.Tensor", {x, Call::Int(0), Call::Int(1), Call::Int(100), Call::Int(2)},
                           {{ElemType::F32, {2, 3}}});
  EXPECT_EQ(sliced[0].As<float>(), (std::vector<float>{3, 4, 5, 9, 10, 11}));

  Call c2;
  Arg y = c2.Tensor(HostTensor::Of<float>(Iota(6), {2, 3}));
  auto permuted = c2.Lower("aten::permute", {y, Call::Ints({-1, 0})}, {{ElemType::F32, {3, 2}}});
  EXPECT_EQ(permuted[0].As<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));

  Call c3;
  Arg z = c3.Tensor(HostTensor::Of<float>({1, 2}, {2, 1}));
  auto expanded = c3.Lower("aten::expand", {z, Call::Ints({2, 2, 3}), Call::Bool(false)}, {{ElemType::F32, {2, 2, 3}}});
  EXPECT_EQ(expanded[0].As<float>(), (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2}));

  Call c4;
  Arg w = c4.Tensor(HostTensor::Of<float>(Iota(12), {3, 4}));
  auto selected = c4.Lower("aten::select.int", {w, Call::Int(1), Call::Int(-1)}, {{ElemType::F32, {3}}});
  EXPECT_EQ(selected[0].As<float>(), (std::vector<float>{3, 7, 11}));
}

// x[i, :, j] (indexed dims apart: the index dim goes first) and x[:, i] (in place), with a
// negative index.
TEST(GraphLowering, AdvancedIndexing) {
  Call call;
  Arg x = call.Tensor(HostTensor::Of<float>(Iota(24), {2, 3, 4}));
  Arg list = call.Tensors({HostTensor::Of<int64_t>({1, 0}, {2}), HostTensor::Of<int64_t>({2, -1}, {2})},
                          {true, false, true});
  auto apart = call.Lower("aten::index.Tensor", {x, list}, {{ElemType::F32, {2, 3}}});
  EXPECT_EQ(apart[0].As<float>(), (std::vector<float>{14, 18, 22, 3, 7, 11}));

  Call c2;
  Arg y = c2.Tensor(HostTensor::Of<float>(Iota(24), {2, 3, 4}));
  Arg second = c2.Tensors({HostTensor::Of<int64_t>({2, -3}, {2})}, {false, true});
  auto adjacent = c2.Lower("aten::index.Tensor", {y, second}, {{ElemType::F32, {2, 2, 4}}});
  EXPECT_EQ(adjacent[0].As<float>(),
            (std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15}));
}

// slice_scatter with a step puts src at every other position.
TEST(GraphLowering, StridedSliceScatter) {
  Call call;
  Arg x = call.Tensor(HostTensor::Of<float>(std::vector<float>(5, 0), {5}));
  Arg src = call.Tensor(HostTensor::Of<float>({7, 8}, {2}));
  auto r = call.Lower("aten::slice_scatter", {x, src, Call::Int(0), Call::Int(1), Call::None(), Call::Int(2)},
                      {{ElemType::F32, {5}}});
  EXPECT_EQ(r[0].As<float>(), (std::vector<float>{0, 7, 0, 8, 0}));
}

// A strided, padded 1-D convolution and its gradients against direct sums.
TEST(GraphLowering, Conv1dAndGradients) {
  const int64_t n = 1, cin = 2, cout = 3, len = 5, k = 3, stride = 2, pad = 1;
  const int64_t out_len = (len + 2 * pad - k) / stride + 1;
  std::vector<float> x(n * cin * len), w(cout * cin * k), dy(n * cout * out_len);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i) - 2;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 7) % 5) - 2;
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<float>(i % 3) + 1;
  auto X = [&](int64_t c, int64_t p) { return p < 0 || p >= len ? 0.f : x[c * len + p]; };
  std::vector<float> y(cout * out_len, 0), dx(cin * len, 0), dw(w.size(), 0);
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t t = 0; t < out_len; ++t)
      for (int64_t c = 0; c < cin; ++c)
        for (int64_t j = 0; j < k; ++j) {
          int64_t p = t * stride + j - pad;
          y[o * out_len + t] += w[(o * cin + c) * k + j] * X(c, p);
          if (p >= 0 && p < len) dx[c * len + p] += w[(o * cin + c) * k + j] * dy[o * out_len + t];
          dw[(o * cin + c) * k + j] += X(c, p) * dy[o * out_len + t];
        }
  std::vector<Arg> params = {Call::Ints({stride}), Call::Ints({pad}), Call::Ints({1}), Call::Bool(false),
                             Call::Ints({0}), Call::Int(1)};
  Call fwd;
  std::vector<Arg> args = {fwd.Tensor(HostTensor::Of<float>(x, {n, cin, len})),
                           fwd.Tensor(HostTensor::Of<float>(w, {cout, cin, k})), Call::None()};
  args.insert(args.end(), params.begin(), params.end());
  const std::vector<std::string> params_names = {"stride", "padding", "dilation", "transposed", "output_padding", "groups"};
  std::vector<std::string> names = {"input", "weight", "bias"};
  names.insert(names.end(), params_names.begin(), params_names.end());
  EXPECT_EQ(fwd.LowerNamed("aten::convolution", args, names, {{ElemType::F32, {n, cout, out_len}}})[0].As<float>(), y);

  Call bwd;
  std::vector<Arg> bargs = {bwd.Tensor(HostTensor::Of<float>(dy, {n, cout, out_len})),
                            bwd.Tensor(HostTensor::Of<float>(x, {n, cin, len})),
                            bwd.Tensor(HostTensor::Of<float>(w, {cout, cin, k})), Call::Ints({cout})};
  bargs.insert(bargs.end(), params.begin(), params.end());
  bargs.push_back(Call::Ints({1, 1, 1}, Arg::Kind::BoolList));
  std::vector<std::string> bnames = {"grad_output", "input", "weight", "bias_sizes"};
  bnames.insert(bnames.end(), params_names.begin(), params_names.end());
  bnames.push_back("output_mask");
  auto grads = bwd.LowerNamed("aten::convolution_backward", bargs, bnames,
                              {{ElemType::F32, {n, cin, len}}, {ElemType::F32, {cout, cin, k}}, {ElemType::F32, {cout}}});
  EXPECT_EQ(grads[0].As<float>(), dx);
  EXPECT_EQ(grads[1].As<float>(), dw);
  std::vector<float> db(cout, 0);
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t t = 0; t < out_len; ++t) db[o] += dy[o * out_len + t];
  EXPECT_EQ(grads[2].As<float>(), db);
}

// A program over two groups of a 2x2 mesh: each collective's replica groups are filled in
// once every rank's own group is known (replicas.h), marker by marker.
TEST(GraphLowering, ReplicaGroupsMarkersAreFilledPerGroup) {
  std::string text = "a = all_reduce(" + lowering::ReplicaGroupsMarker(1) + ") b = all_gather(" +
                     lowering::ReplicaGroupsMarker(0) + ") c = all_reduce(" + lowering::ReplicaGroupsMarker(1) + ")";
  std::string filled = lowering::FillReplicaGroups(text, {{{0, 2}, {1, 3}}, {{0, 1}, {2, 3}}});
  const std::string tp = "replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>";
  const std::string dp = "replica_groups = dense<[[0, 2], [1, 3]]> : tensor<2x2xi64>";
  EXPECT_EQ(filled, "a = all_reduce(" + tp + ") b = all_gather(" + dp + ") c = all_reduce(" + tp + ")");
  EXPECT_EQ(lowering::ReplicaGroupsAttr({{0, 1, 2, 3}}), "replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>");
  EXPECT_THROW(lowering::FillReplicaGroups(text, {{{0, 1, 2, 3}}}), std::invalid_argument);
}

}  // namespace
}  // namespace tpu::test
