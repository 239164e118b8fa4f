// csrc/pjrt on the CPU plugin: loading, clients and devices, transfers, compile and
// execute, serialization, errors, and that nothing leaks.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <cstdio>
#include <fstream>

#include "test_util.h"

namespace tpu::test {
namespace {

using pjrt::Error;

// out = a + b, and a second result a * b, over two tensor<4xf32> parameters.
const char kAddMul[] = R"(module @add attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4xf32>, %1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
    %2 = "stablehlo.add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %3 = "stablehlo.multiply"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%2, %3) : (tensor<4xf32>, tensor<4xf32>) -> ()
  }
}
)";

const shlo::TensorType kF32x4{shlo::ElemType::F32, {4}};

std::vector<float> ReadF32(const pjrt::Buffer& b) { return FromDevice(b, kF32x4).As<float>(); }

// Runs kAddMul on `device` and checks both results.
void CheckAddMul(const pjrt::Executable& exe, size_t device) {
  auto a = ToDevice(HostTensor::Of<float>({1, 2, 3, 4}, {4}), device);
  auto b = ToDevice(HostTensor::Of<float>({10, 20, 30, -4}, {4}), device);
  auto outs = exe.Execute(TestClient().device(device), {a->raw(), b->raw()});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(ReadF32(*outs[0]), (std::vector<float>{11, 22, 33, 0}));
  EXPECT_EQ(ReadF32(*outs[1]), (std::vector<float>{10, 40, 90, -16}));
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

TEST(PjrtPlugin, LoadsAndReportsApiVersion) {
  auto plugin = TestPlugin();
  ASSERT_NE(plugin->api(), nullptr);
  EXPECT_EQ(plugin->api_major(), PJRT_API_MAJOR);
  EXPECT_GE(plugin->api_minor(), 0);
  EXPECT_EQ(plugin->path(), PluginPath());
}

TEST(PjrtPlugin, MissingFileNamesPathAndReason) {
  const std::string path = "/nonexistent/dir/not_a_plugin.so";
  try {
    pjrt::Plugin::Load(path);
    FAIL() << "loading a missing plugin did not throw";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;  // dlerror's reason
  }
}

TEST(PjrtPlugin, LibraryWithoutGetPjrtApiIsRejected) {
  try {
    pjrt::Plugin::Load("libm.so.6");
    FAIL() << "a library without GetPjrtApi loaded as a plugin";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("libm.so.6"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GetPjrtApi"), std::string::npos) << msg;
  }
}

TEST(PjrtClient, TwoCpuDevices) {
  pjrt::Client& client = TestClient();
  EXPECT_EQ(client.platform_name(), "cpu");
  EXPECT_FALSE(client.platform_version().empty());
  ASSERT_EQ(client.devices().size(), 2u);
  EXPECT_NE(client.device(0), client.device(1));
  EXPECT_FALSE(client.device_kind(0).empty());
  EXPECT_THROW(client.device(2), Error);
}

TEST(PjrtClient, DeviceCountOptionIsPassed) {
  pjrt::Client three(TestPlugin(), CpuDevices(3));
  EXPECT_EQ(three.devices().size(), 3u);
  pjrt::Client one(TestPlugin(), CpuDevices(1));
  EXPECT_EQ(one.devices().size(), 1u);
}

// A store in memory, as the c10d Store is above: the callbacks a plugin calls reach it, and
// its failures come back as the plugin's errors with their codes.
class MemoryStore : public pjrt::KeyValueStore {
 public:
  void Put(const std::string& key, const std::string& value) override { values_[key] = value; }
  std::string Get(const std::string& key, std::chrono::milliseconds) override {
    auto it = values_.find(key);
    if (it == values_.end()) throw pjrt::KeyValueTimeout("not there");
    return it->second;
  }
  std::optional<std::string> TryGet(const std::string& key) override {
    auto it = values_.find(key);
    return it == values_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  std::string Describe() const override { return "memory"; }

 private:
  std::map<std::string, std::string> values_;
};

PJRT_Error_Code g_callback_code;
PJRT_Error* RecordCode(PJRT_Error_Code code, const char*, size_t) {
  g_callback_code = code;
  return reinterpret_cast<PJRT_Error*>(&g_callback_code);  // any non-null error
}

TEST(PjrtClient, KeyValueCallbacksReachTheStore) {
  MemoryStore store;
  PJRT_Client_Create_Args create{};
  pjrt::AttachKeyValueStore(create, &store);
  PJRT_CallbackError make_error = &RecordCode;
  std::string value("a\0b", 3);
  PJRT_KeyValuePutCallback_Args put{};
  put.key = "k";
  put.key_size = 1;
  put.value = value.data();
  put.value_size = value.size();
  put.callback_error = &make_error;
  put.user_arg = create.kv_put_user_arg;
  ASSERT_EQ(create.kv_put_callback(&put), nullptr);
  PJRT_KeyValueGetCallback_Args get{};
  get.key = "k";
  get.key_size = 1;
  get.timeout_in_ms = 10;
  get.callback_error = &make_error;
  get.user_arg = create.kv_get_user_arg;
  ASSERT_EQ(create.kv_get_callback(&get), nullptr);
  EXPECT_EQ(std::string(get.value, get.value_size), value);
  get.value_deleter_callback(get.value);
  get.key = "missing";
  get.key_size = 7;
  EXPECT_NE(create.kv_get_callback(&get), nullptr);
  EXPECT_EQ(g_callback_code, PJRT_Error_Code_DEADLINE_EXCEEDED);
  PJRT_KeyValueTryGetCallback_Args try_get{};
  try_get.key = "missing";
  try_get.key_size = 7;
  try_get.callback_error = &make_error;
  try_get.user_arg = create.kv_try_get_user_arg;
  EXPECT_NE(create.kv_try_get_callback(&try_get), nullptr);
  EXPECT_EQ(g_callback_code, PJRT_Error_Code_NOT_FOUND);
}

TEST(PjrtClient, MemoryStatsCountBuffersOrSayUnsupported) {
  pjrt::DeviceMemoryStats before{-7, -7, -7};
  if (!TestClient().MemoryStats(0, &before)) {
    // The CPU plugin has no memory statistics: "unsupported", and nothing is written.
    EXPECT_EQ(TestClient().platform_name(), "cpu");
    EXPECT_EQ(before.bytes_in_use, -7);
    EXPECT_EQ(before.peak_bytes_in_use, -7);
    EXPECT_EQ(before.bytes_limit, -7);
    return;
  }
  std::vector<float> data(1 << 18, 1.0f);  // 1 MiB
  auto buffer = TestClient().FromHost(data.data(), PJRT_Buffer_Type_F32, {1 << 18}, 0);
  pjrt::DeviceMemoryStats after;
  ASSERT_TRUE(TestClient().MemoryStats(0, &after));
  EXPECT_GE(after.bytes_in_use, before.bytes_in_use + (1 << 20));
  if (after.peak_bytes_in_use >= 0) EXPECT_GE(after.peak_bytes_in_use, after.bytes_in_use);
}

// Writes `bytes` of `type` to device 1, checks the buffer's metadata, reads it back.
void RoundTrip(PJRT_Buffer_Type type, const std::vector<int64_t>& dims, const std::vector<uint8_t>& bytes) {
  auto buffer = TestClient().FromHost(bytes.data(), type, dims, 1);
  EXPECT_EQ(buffer->dims(), dims);
  EXPECT_EQ(buffer->element_type(), type);
  std::vector<uint8_t> back(bytes.size(), 0xAB);
  buffer->ToHost(back.data(), back.size());
  EXPECT_EQ(back, bytes);
}

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(PjrtBuffer, HostRoundTripF32) {
  RoundTrip(PJRT_Buffer_Type_F32, {2, 3},
            Bytes<float>({1.5f, -2.25f, 0.f, INFINITY, -0.f, 3.4e38f}));
  EXPECT_EQ(pjrt::ElementSize(PJRT_Buffer_Type_F32), 4u);
}

TEST(PjrtBuffer, HostRoundTripI64) {
  RoundTrip(PJRT_Buffer_Type_S64, {3}, Bytes<int64_t>({INT64_MIN, -1, INT64_MAX}));
  EXPECT_EQ(pjrt::ElementSize(PJRT_Buffer_Type_S64), 8u);
}

TEST(PjrtBuffer, HostRoundTripBf16) {
  // 1.0, -2.0, +inf, NaN, the smallest subnormal as raw bf16 bits.
  RoundTrip(PJRT_Buffer_Type_BF16, {5}, Bytes<uint16_t>({0x3F80, 0xC000, 0x7F80, 0x7FC0, 0x0001}));
  EXPECT_EQ(pjrt::ElementSize(PJRT_Buffer_Type_BF16), 2u);
}

TEST(PjrtBuffer, HostRoundTripPred) {
  RoundTrip(PJRT_Buffer_Type_PRED, {2, 2}, {1, 0, 0, 1});
  EXPECT_EQ(pjrt::ElementSize(PJRT_Buffer_Type_PRED), 1u);
}

TEST(PjrtBuffer, ScalarAndEmpty) {
  RoundTrip(PJRT_Buffer_Type_F32, {}, Bytes<float>({42.f}));
  auto empty = TestClient().FromHost(nullptr, PJRT_Buffer_Type_F32, {0, 3}, 0);
  EXPECT_EQ(empty->dims(), (std::vector<int64_t>{0, 3}));
}

TEST(PjrtBuffer, HostMemoryIsFreeAfterFromHost) {
  std::vector<float> host = {1, 2, 3, 4};
  auto buffer = TestClient().FromHost(host.data(), PJRT_Buffer_Type_F32, {4}, 0);
  host.assign(4, -1.f);  // the plugin copied during the call
  EXPECT_EQ(ReadF32(*buffer), (std::vector<float>{1, 2, 3, 4}));
}

TEST(PjrtBuffer, CopyToDevice) {
  auto src = ToDevice(HostTensor::Of<float>({5, 6, 7, 8}, {4}), 0);
  auto dst = TestClient().CopyToDevice(*src, 1);
  EXPECT_NE(dst->raw(), src->raw());
  EXPECT_EQ(ReadF32(*dst), (std::vector<float>{5, 6, 7, 8}));
  // The copy lives on device 1: a program on device 1 accepts it.
  auto exe = CompileText(kAddMul);
  auto outs = exe->Execute(TestClient().device(1), {dst->raw(), dst->raw()});
  EXPECT_EQ(ReadF32(*outs[0]), (std::vector<float>{10, 12, 14, 16}));
  src.reset();  // the copy does not depend on its source
  EXPECT_EQ(ReadF32(*dst), (std::vector<float>{5, 6, 7, 8}));
}

TEST(PjrtExecutable, PortableCompileOptionsEncoding) {
  // CompileOptionsProto{executable_build_options(3): {device_ordinal(1): -1, num_replicas(4): 1,
  // num_partitions(5): 1}, compile_portable_executable(4): true}, byte for byte.
  std::string build = "\x08" + std::string(9, '\xff') + "\x01" + "\x20\x01\x28\x01";
  std::string expect = "\x1a" + std::string(1, static_cast<char>(build.size())) + build + "\x20\x01";
  EXPECT_EQ(pjrt::PortableCompileOptions(), expect);
}

TEST(PjrtExecutable, CompileAndRunOnBothDevices) {
  auto exe = CompileText(kAddMul);
  EXPECT_EQ(exe->num_outputs(), 2u);
  CheckAddMul(*exe, 0);
  CheckAddMul(*exe, 1);
}

TEST(PjrtExecutable, InputsAreNotDonated) {
  auto exe = CompileText(kAddMul);
  auto a = ToDevice(HostTensor::Of<float>({1, 2, 3, 4}, {4}));
  auto outs = exe->Execute(TestClient().device(0), {a->raw(), a->raw()});
  outs[0]->Await();
  EXPECT_EQ(ReadF32(*a), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ReadF32(*outs[0]), (std::vector<float>{2, 4, 6, 8}));
}

TEST(PjrtExecutable, CompileErrorCarriesMessage) {
  try {
    CompileText("module { this is not mlir }");
    FAIL() << "bad MLIR compiled";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("PJRT_Client_Compile"), std::string::npos) << msg;
    EXPECT_GT(msg.size(), std::string("PJRT_Client_Compile: ").size() + 5) << msg;
    EXPECT_NE(e.code(), 0);
  }
}

TEST(PjrtExecutable, TypeErrorInModuleIsReported) {
  // Well-formed MLIR whose add mixes f32 and i32: rejected by the verifier.
  std::string bad = kAddMul;
  bad.replace(bad.find("%1: tensor<4xf32>"), 17, "%1: tensor<4xi32>");
  EXPECT_THROW(CompileText(bad), Error);
}

TEST(PjrtExecutable, WrongArgumentCountIsAnError) {
  auto exe = CompileText(kAddMul);
  auto a = ToDevice(HostTensor::Of<float>({1, 2, 3, 4}, {4}));
  EXPECT_THROW(
      {
        auto outs = exe->Execute(TestClient().device(0), {a->raw()});
        for (auto& o : outs) o->Await();
      },
      Error);
}

TEST(PjrtExecutable, SerializeDeserializeRoundTrip) {
  auto exe = CompileText(kAddMul);
  std::string bytes = exe->Serialize();
  ASSERT_FALSE(bytes.empty());
  auto loaded = TestClient().Deserialize(bytes);
  EXPECT_EQ(loaded->num_outputs(), 2u);
  CheckAddMul(*loaded, 0);
  CheckAddMul(*loaded, 1);
  EXPECT_EQ(TestClient().Deserialize("definitely not an executable"), nullptr);  // the caller compiles instead
}

TEST(PjrtExecutable, NoLeakOverManyBuffersAndExecutables) {
  auto exe = CompileText(kAddMul);
  std::string bytes = exe->Serialize();
  std::vector<float> host(65536, 1.f);  // 256 KB: leaking it 2000 times shows
  auto iteration = [&](int i) {
    auto loaded = (i % 10 == 0) ? TestClient().Deserialize(bytes) : exe;
    auto a = TestClient().FromHost(host.data(), PJRT_Buffer_Type_F32, {4}, i % 2);
    auto big = TestClient().FromHost(host.data(), PJRT_Buffer_Type_F32, {65536}, i % 2);
    auto copy = TestClient().CopyToDevice(*a, (i + 1) % 2);
    auto outs = loaded->Execute(TestClient().device(i % 2), {a->raw(), a->raw()});
    float back[4];
    outs[1]->ToHost(back, sizeof(back));
    ASSERT_EQ(back[0], 1.f);
  };
  for (int i = 0; i < 200; ++i) iteration(i);  // warm up allocators and caches
  int64_t before = ResidentBytes();
  for (int i = 0; i < 2000; ++i) iteration(i);
  int64_t grown = ResidentBytes() - before;
  // Leaking the 256 KB buffer, or any of the 200 deserialized executables, exceeds this by far.
  EXPECT_LT(grown, 50ll << 20) << "RSS grew by " << grown << " bytes";
}

// x = x @ x + 1e-3, 400 times, over a 256x256 f32 parameter: long enough (about 0.1 to 2 s) for
// a wait on it to be observed; the i32 result counts the iterations.
const char kLongLoop[] = R"(module @loop attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%x0: tensor<256x256xf32>) -> (tensor<i32>, tensor<256x256xf32>) {
    %zero = "stablehlo.constant"() {value = dense<0> : tensor<i32>} : () -> tensor<i32>
    %r:2 = "stablehlo.while"(%zero, %x0) ({
    ^bb0(%i: tensor<i32>, %x: tensor<256x256xf32>):
      %n = "stablehlo.constant"() {value = dense<400> : tensor<i32>} : () -> tensor<i32>
      %lt = "stablehlo.compare"(%i, %n) {comparison_direction = #stablehlo<comparison_direction LT>} : (tensor<i32>, tensor<i32>) -> tensor<i1>
      "stablehlo.return"(%lt) : (tensor<i1>) -> ()
    }, {
    ^bb0(%i: tensor<i32>, %x: tensor<256x256xf32>):
      %one = "stablehlo.constant"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>
      %eps = "stablehlo.constant"() {value = dense<1.0e-03> : tensor<256x256xf32>} : () -> tensor<256x256xf32>
      %next = "stablehlo.add"(%i, %one) : (tensor<i32>, tensor<i32>) -> tensor<i32>
      %d = "stablehlo.dot_general"(%x, %x) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
      %y = "stablehlo.add"(%d, %eps) : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
      "stablehlo.return"(%next, %y) : (tensor<i32>, tensor<256x256xf32>) -> ()
    }) : (tensor<i32>, tensor<256x256xf32>) -> (tensor<i32>, tensor<256x256xf32>)
    "func.return"(%r#0, %r#1) : (tensor<i32>, tensor<256x256xf32>) -> ()
  }
}
)";

// A wait observer that throws abandons the wait; the execution runs on, its outputs stay
// valid, and a later wait (and a transfer) returns the value.
TEST(PjrtWait, ObserverAbandonsAWaitAndTheValueStaysReadable) {
  auto exe = CompileText(kLongLoop);
  std::vector<float> zeros(256 * 256, 0.0f);
  auto x = ToDevice(HostTensor::Of<float>(zeros, {256, 256}));
  auto outs = exe->Execute(TestClient().device(0), {x->raw()});
  struct Abandoned {};
  int calls = 0;
  std::string what;
  TestPlugin()->set_wait_observer([&](double seconds, const char* w) {
    ++calls;
    what = w;
    EXPECT_GE(seconds, 0.04);
    throw Abandoned{};
  });
  bool abandoned = false;
  try {
    outs[0]->Await();
  } catch (const Abandoned&) {
    abandoned = true;
  }
  TestPlugin()->set_wait_observer(nullptr);
  if (!abandoned) GTEST_SKIP() << "the loop finished before the first poll (50 ms)";
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(what, "device computation");
  EXPECT_EQ(FromDevice(*outs[0], {shlo::ElemType::S32, {}}).As<int32_t>(), std::vector<int32_t>{400});
  EXPECT_TRUE(outs[1]->IsReady());
}

TEST(PjrtExecutable, NoLeakOverManyCompiles) {
  auto iteration = [] {
    auto exe = CompileText(kAddMul);
    auto a = ToDevice(HostTensor::Of<float>({1, 2, 3, 4}, {4}));
    auto outs = exe->Execute(TestClient().device(0), {a->raw(), a->raw()});
    outs[0]->Await();
  };
  for (int i = 0; i < 20; ++i) iteration();
  int64_t before = ResidentBytes();
  for (int i = 0; i < 200; ++i) iteration();
  int64_t grown = ResidentBytes() - before;
  EXPECT_LT(grown, 50ll << 20) << "RSS grew by " << grown << " bytes";
}

}  // namespace
}  // namespace tpu::test
