// ReadView / WriteView / LayOut (csrc/lowering/view.cpp) run on the plugin against a host
// reference computed from (sizes, strides, offset) alone, for every geometry PyTorch views
// produce: slices, transposes, steps, diagonals, expands, size-1 dims, overlapping windows.
#include <algorithm>
#include <numeric>

#include "lowering/lowering.h"
#include "test_util.h"

namespace tpu::test {
namespace {

using lowering::ViewGeometry;
using shlo::Builder;
using shlo::ElemType;
using shlo::TensorType;
using shlo::Value;

struct Case {
  const char* name;
  std::vector<int64_t> sizes, strides;
  int64_t offset;
  int64_t storage_numel;
  // The program may reshape/slice/transpose but must not gather (a gather per read is slow).
  bool expect_gather;
};

ViewGeometry Geometry(const Case& c) { return {c.sizes, c.strides, c.offset, c.storage_numel}; }

int64_t Numel(const std::vector<int64_t>& sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<int64_t>());
}

// Storage index of every element of the view, in row-major order of the view.
std::vector<int64_t> HostIndices(const ViewGeometry& g) {
  std::vector<int64_t> out;
  int64_t n = Numel(g.sizes);
  std::vector<int64_t> idx(g.sizes.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t flat = g.offset;
    for (size_t d = 0; d < idx.size(); ++d) flat += idx[d] * g.strides[d];
    out.push_back(flat);
    for (int64_t d = static_cast<int64_t>(idx.size()) - 1; d >= 0; --d) {
      if (++idx[d] < g.sizes[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

template <typename T>
std::vector<T> Iota(int64_t n, T start = 0) {
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(start + static_cast<T>(i));
  return v;
}

// Reads the view on the device; also returns the module text for path checks.
template <typename T>
std::vector<T> DeviceRead(const std::vector<T>& storage, const ViewGeometry& g, std::string* text = nullptr) {
  Builder b;
  Value s = b.Param({ElemOf<T>(), {static_cast<int64_t>(storage.size())}});
  Value v = lowering::ReadView(b, s, g);
  EXPECT_EQ(v.type, (TensorType{ElemOf<T>(), g.sizes}));
  if (text) *text = b.Module({v});
  return RunModule(b, {v}, {HostTensor::Of(storage, {static_cast<int64_t>(storage.size())})})[0].template As<T>();
}

const std::vector<Case> kReadCases = {
    {"whole_2d", {4, 6}, {6, 1}, 0, 24, false},
    {"whole_3d", {2, 3, 4}, {12, 4, 1}, 0, 24, false},
    {"whole_flat", {24}, {1}, 0, 24, false},
    {"prefix", {2, 6}, {6, 1}, 0, 24, false},
    {"offset_slice", {2, 3}, {6, 1}, 8, 24, false},
    {"offset_slice_past_end", {2, 2}, {6, 1}, 14, 24, false},  // window runs past the storage
    {"tail_row", {5}, {1}, 19, 24, false},
    {"transpose", {6, 4}, {1, 6}, 0, 24, false},
    {"permute_3d", {4, 2, 3}, {1, 12, 4}, 0, 24, false},
    {"transposed_slice", {3, 2}, {1, 6}, 2, 24, false},
    {"step2_cols", {4, 3}, {6, 2}, 0, 24, false},
    {"step_rows_and_cols", {2, 2}, {12, 3}, 7, 24, false},
    {"step_flat", {8}, {3}, 1, 24, false},
    {"diagonal", {4}, {5}, 0, 16, false},
    {"offset_diagonal", {4}, {6}, 1, 20, false},
    {"expand_rows", {3, 4}, {0, 1}, 0, 4, false},
    {"expand_middle", {2, 3, 4}, {4, 0, 1}, 0, 8, false},
    {"expand_scalar", {2, 3}, {0, 0}, 5, 8, false},
    {"expand_and_step", {3, 2}, {0, 3}, 0, 6, false},
    {"size1_dims", {1, 3, 1}, {99, 1, 7}, 5, 24, false},
    {"size1_between", {2, 1, 3}, {6, 1, 2}, 1, 24, false},
    {"scalar_view", {}, {}, 7, 24, false},
    {"single_element", {1, 1}, {1, 1}, 23, 24, false},
    {"empty", {0, 3}, {3, 1}, 0, 24, false},
    {"sliding_window", {3, 3}, {1, 1}, 0, 5, true},
    {"overlapping_rows", {4, 4}, {2, 1}, 1, 24, true},
    {"non_nested_strides", {2, 3}, {3, 2}, 0, 24, true},
    {"equal_strides", {2, 2}, {4, 4}, 0, 24, true},
};

TEST(ReadView, MatchesHostForEveryGeometry) {
  std::vector<float> storage(64);
  for (size_t i = 0; i < storage.size(); ++i) storage[i] = static_cast<float>(i * 3 % 64) - 20.f;
  for (const Case& c : kReadCases) {
    SCOPED_TRACE(c.name);
    ViewGeometry g = Geometry(c);
    std::vector<float> s(storage.begin(), storage.begin() + c.storage_numel);
    std::vector<float> expect;
    for (int64_t i : HostIndices(g)) expect.push_back(s[i]);
    std::string text;
    EXPECT_EQ(DeviceRead(s, g, &text), expect);
    bool gathers = text.find("stablehlo.gather") != std::string::npos;
    EXPECT_EQ(gathers, c.expect_gather) << text;
  }
}

TEST(ReadView, WholeStorageIsAReshape) {
  ViewGeometry g{{4, 6}, {6, 1}, 0, 24};
  EXPECT_TRUE(lowering::IsWholeStorage(g));
  EXPECT_TRUE(lowering::IsWholeStorage({{2, 1, 3}, {3, 100, 1}, 0, 6}));  // a size-1 dim's stride is free
  EXPECT_FALSE(lowering::IsWholeStorage({{4, 6}, {6, 1}, 0, 25}));        // shorter than its storage
  EXPECT_FALSE(lowering::IsWholeStorage({{4, 6}, {6, 1}, 1, 25}));        // offset
  EXPECT_FALSE(lowering::IsWholeStorage({{6, 4}, {1, 6}, 0, 24}));        // transposed
  std::string text;
  DeviceRead(Iota<float>(24), g, &text);
  EXPECT_EQ(text.find("stablehlo.slice"), std::string::npos) << text;
  EXPECT_NE(text.find("stablehlo.reshape"), std::string::npos) << text;
}

TEST(ReadView, OtherElementTypes) {
  // i64 beyond 2^53, and bool, through the slice path and the gather path.
  std::vector<int64_t> big(24);
  for (int i = 0; i < 24; ++i) big[i] = (int64_t{1} << 60) + i;
  std::vector<bool> flags(24);
  for (int i = 0; i < 24; ++i) flags[i] = i % 3 == 0;
  for (const Case& c : kReadCases) {
    if (c.storage_numel > 24) continue;
    SCOPED_TRACE(c.name);
    ViewGeometry g = Geometry(c);
    std::vector<int64_t> bi(big.begin(), big.begin() + c.storage_numel);
    std::vector<bool> fi(flags.begin(), flags.begin() + c.storage_numel);
    std::vector<int64_t> expect_i;
    std::vector<bool> expect_f;
    for (int64_t i : HostIndices(g)) {
      expect_i.push_back(bi[i]);
      expect_f.push_back(fi[i]);
    }
    EXPECT_EQ(DeviceRead(bi, g), expect_i);
    EXPECT_EQ(DeviceRead(fi, g), expect_f);
  }
}

// Writes `values` (the view's shape) into the storage on the device.
std::vector<float> DeviceWrite(const std::vector<float>& storage, const ViewGeometry& g,
                               const std::vector<float>& values, std::string* text) {
  Builder b;
  Value s = b.Param({ElemType::F32, {static_cast<int64_t>(storage.size())}});
  Value v = b.Param({ElemType::F32, g.sizes});
  Value out = lowering::WriteView(b, s, g, v);
  EXPECT_EQ(out.type, s.type);
  *text = b.Module({out});
  return RunModule(b, {out},
                   {HostTensor::Of(storage, {static_cast<int64_t>(storage.size())}), HostTensor::Of(values, g.sizes)})[0]
      .As<float>();
}

enum class WritePath { Whole, UpdateSlice, Scatter, Nothing };

struct WriteCase {
  const char* name;
  std::vector<int64_t> sizes, strides;
  int64_t offset;
  WritePath path;
};

TEST(WriteView, MatchesHostForEveryGeometry) {
  const std::vector<WriteCase> cases = {
      {"whole", {4, 6}, {6, 1}, 0, WritePath::Whole},
      {"contiguous_at_offset", {2, 3}, {3, 1}, 5, WritePath::UpdateSlice},
      {"row_with_size1_dim", {1, 6}, {99, 1}, 12, WritePath::UpdateSlice},
      {"tail", {4}, {1}, 20, WritePath::UpdateSlice},
      {"prefix", {2, 6}, {6, 1}, 0, WritePath::UpdateSlice},
      {"scalar", {}, {}, 9, WritePath::UpdateSlice},
      {"offset_slice", {2, 3}, {6, 1}, 8, WritePath::Scatter},
      {"transpose", {6, 4}, {1, 6}, 0, WritePath::Scatter},
      {"permute_3d", {4, 2, 3}, {1, 12, 4}, 0, WritePath::Scatter},
      {"step2_cols", {4, 3}, {6, 2}, 1, WritePath::Scatter},
      {"diagonal", {4}, {7}, 0, WritePath::Scatter},
      {"size1_dims_scattered", {2, 1, 2}, {12, 5, 2}, 1, WritePath::Scatter},
      {"non_nested_strides", {2, 3}, {3, 2}, 0, WritePath::Scatter},
      {"empty", {3, 0}, {1, 1}, 4, WritePath::Nothing},
  };
  std::vector<float> storage = Iota<float>(24, 100.f);
  for (const WriteCase& c : cases) {
    SCOPED_TRACE(c.name);
    ViewGeometry g{c.sizes, c.strides, c.offset, 24};
    std::vector<float> values = Iota<float>(Numel(c.sizes), -50.f);
    std::vector<float> expect = storage;
    std::vector<int64_t> idx = HostIndices(g);
    for (size_t i = 0; i < idx.size(); ++i) expect[idx[i]] = values[i];
    std::string text;
    EXPECT_EQ(DeviceWrite(storage, g, values, &text), expect);
    bool dus = text.find("stablehlo.dynamic_update_slice") != std::string::npos;
    bool scatter = text.find("stablehlo.scatter") != std::string::npos;
    EXPECT_EQ(dus, c.path == WritePath::UpdateSlice) << text;
    EXPECT_EQ(scatter, c.path == WritePath::Scatter) << text;
  }
}

TEST(ViewAt, ReadAndWriteAtARunTimeOffsetMatchTheHost) {
  // A view shorter than its storage takes its offset as an s64 parameter: the same program
  // reads and writes it wherever it starts (csrc/aten keys such views without their offset).
  EXPECT_FALSE(lowering::HasRunTimeOffset({{4, 6}, {6, 1}, 0, 24}));  // whole storage
  EXPECT_FALSE(lowering::HasRunTimeOffset({{6, 4}, {1, 6}, 0, 24}));  // spans it, transposed
  EXPECT_FALSE(lowering::HasRunTimeOffset({{0, 3}, {3, 1}, 0, 24}));  // empty
  EXPECT_TRUE(lowering::HasRunTimeOffset({{}, {}, 0, 24}));           // timesteps[i]
  EXPECT_TRUE(lowering::HasRunTimeOffset({{3}, {0}, 5, 8}));          // sigmas[i].expand(3)
  std::vector<float> storage = Iota<float>(64, -20.f);
  int checked = 0;
  for (const Case& c : kReadCases) {
    ViewGeometry g = Geometry(c);
    if (!lowering::HasRunTimeOffset(g)) continue;
    SCOPED_TRACE(c.name);
    std::vector<float> s(storage.begin(), storage.begin() + c.storage_numel);
    std::vector<float> values = Iota<float>(Numel(c.sizes), 500.f);
    std::vector<float> expect_read, expect_written = s;
    std::vector<int64_t> idx = HostIndices(g);
    for (size_t i = 0; i < idx.size(); ++i) {
      expect_read.push_back(s[idx[i]]);
      expect_written[idx[i]] = values[i];
    }
    if (c.expect_gather) expect_written.clear();  // overlapping views are never written
    Builder b;
    Value st = b.Param({ElemType::F32, {c.storage_numel}});
    Value v = b.Param({ElemType::F32, c.sizes});
    Value offset = b.Param({ElemType::S64, {}});
    std::vector<Value> outs = {lowering::ReadViewAt(b, st, g, offset)};
    if (!expect_written.empty()) outs.push_back(lowering::WriteViewAt(b, st, g, offset, v));
    auto got = RunModule(b, outs,
                         {HostTensor::Of(s, {c.storage_numel}), HostTensor::Of(values, c.sizes),
                          HostTensor::Of(std::vector<int64_t>{c.offset}, {})});
    EXPECT_EQ(got[0].As<float>(), expect_read);
    if (!expect_written.empty()) EXPECT_EQ(got[1].As<float>(), expect_written);
    ++checked;
  }
  EXPECT_GT(checked, 15);
}

TEST(WriteView, ThenReadSeesTheWrite) {
  // An in-place op on a view followed by a read of another view of the same storage.
  ViewGeometry col{{4}, {6}, 2, 24};         // x[:, 2]
  ViewGeometry block{{2, 3}, {6, 1}, 6, 24};  // x[1:3, 0:3]
  Builder b;
  Value s = b.Param({ElemType::F32, {24}});
  Value v = b.Param({ElemType::F32, {4}});
  Value written = lowering::WriteView(b, s, col, v);
  Value read = lowering::ReadView(b, written, block);
  auto out = RunModule(b, {read}, {HostTensor::Of(Iota<float>(24), {24}), HostTensor::Of<float>({-1, -2, -3, -4}, {4})});
  EXPECT_EQ(out[0].As<float>(), (std::vector<float>{6, 7, -2, 12, 13, -3}));
}

// Lays `value` (logical shape `sizes`) out with `strides`; returns the storage.
std::vector<float> DeviceLayOut(const std::vector<float>& value, const std::vector<int64_t>& sizes,
                                const std::vector<int64_t>& strides) {
  Builder b;
  Value v = b.Param({ElemType::F32, sizes});
  Value out = lowering::LayOut(b, v, strides);
  // The buffer keeps the array's shape in memory order (dims sorted by falling stride) when of
  // rank >= 2, as TPUs tile such arrays; otherwise it is 1-D.
  std::vector<int64_t> perm(sizes.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t c) { return strides[a] > strides[c]; });
  std::vector<int64_t> memory_order;
  for (int64_t d : perm) memory_order.push_back(sizes[d]);
  if (memory_order.size() < 2 || Numel(sizes) == 0) memory_order = {Numel(sizes)};
  EXPECT_EQ(out.type.dims, memory_order);
  return RunModule(b, {out}, {HostTensor::Of(value, sizes)})[0].As<float>();
}

TEST(LayOut, DenseStridesMatchHostAndReadBack) {
  struct LayoutCase {
    const char* name;
    std::vector<int64_t> sizes, strides;
  };
  const std::vector<LayoutCase> cases = {
      {"contiguous", {2, 3, 4}, {12, 4, 1}},
      {"channels_last", {2, 3, 4}, {12, 1, 3}},
      {"column_major", {2, 3}, {1, 2}},
      {"reversed_3d", {2, 3, 4}, {1, 2, 6}},
      {"size1_free_stride", {2, 1, 3}, {3, 100, 1}},
      {"size1_permuted", {2, 1, 3}, {1, 1, 2}},
      {"channels_last_4d", {2, 3, 2, 2}, {12, 1, 6, 3}},
      {"scalar", {}, {}},
      {"flat", {5}, {1}},
  };
  for (const LayoutCase& c : cases) {
    SCOPED_TRACE(c.name);
    int64_t n = Numel(c.sizes);
    std::vector<float> value = Iota<float>(n, 1.f);
    ViewGeometry g{c.sizes, c.strides, 0, n};
    std::vector<float> expect(n, 0);
    std::vector<int64_t> idx = HostIndices(g);
    for (size_t i = 0; i < idx.size(); ++i) expect[idx[i]] = value[i];
    std::vector<float> laid = DeviceLayOut(value, c.sizes, c.strides);
    EXPECT_EQ(laid, expect);
    EXPECT_EQ(DeviceRead(laid, g), value);  // reading the layout back gives the value
  }
}

}  // namespace
}  // namespace tpu::test
