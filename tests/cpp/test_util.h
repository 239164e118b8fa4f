// Shared helpers of the C++ unit tests: the plugin and a two-device client (one per
// process), host tensors, and "compile this module, run it, read the results back".
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pjrt/pjrt.h"
#include "stablehlo/builder.h"

namespace tpu::test {

// TORCH_TPU_PJRT_PLUGIN wins over the CPU plugin found when CMake configured the tests.
inline std::string PluginPath() {
  const char* env = std::getenv("TORCH_TPU_PJRT_PLUGIN");
  return env && *env ? env : TORCH_TPU_TEST_PLUGIN;
}

inline std::shared_ptr<pjrt::Plugin> TestPlugin() {
  static std::shared_ptr<pjrt::Plugin> plugin = pjrt::Plugin::Load(PluginPath());
  return plugin;
}

// Two CPU devices, so device placement and cross-device copies are tested on one machine.
// The CPU plugin's client options for `count` devices.
inline pjrt::ClientOptions CpuDevices(int64_t count) { return {{{"cpu_device_count", count}}, nullptr}; }

inline pjrt::Client& TestClient() {
  static pjrt::Client* client = new pjrt::Client(TestPlugin(), CpuDevices(2));  // lives until exit
  return *client;
}

inline PJRT_Buffer_Type BufferType(shlo::ElemType t) {
  switch (t) {
    case shlo::ElemType::Pred: return PJRT_Buffer_Type_PRED;
    case shlo::ElemType::S8: return PJRT_Buffer_Type_S8;
    case shlo::ElemType::S16: return PJRT_Buffer_Type_S16;
    case shlo::ElemType::S32: return PJRT_Buffer_Type_S32;
    case shlo::ElemType::S64: return PJRT_Buffer_Type_S64;
    case shlo::ElemType::U8: return PJRT_Buffer_Type_U8;
    case shlo::ElemType::U16: return PJRT_Buffer_Type_U16;
    case shlo::ElemType::U32: return PJRT_Buffer_Type_U32;
    case shlo::ElemType::U64: return PJRT_Buffer_Type_U64;
    case shlo::ElemType::F16: return PJRT_Buffer_Type_F16;
    case shlo::ElemType::BF16: return PJRT_Buffer_Type_BF16;
    case shlo::ElemType::F32: return PJRT_Buffer_Type_F32;
    case shlo::ElemType::F64: return PJRT_Buffer_Type_F64;
    case shlo::ElemType::C64: return PJRT_Buffer_Type_C64;
    case shlo::ElemType::C128: return PJRT_Buffer_Type_C128;
  }
  return PJRT_Buffer_Type_INVALID;
}

template <typename T> shlo::ElemType ElemOf();
template <> inline shlo::ElemType ElemOf<float>() { return shlo::ElemType::F32; }
template <> inline shlo::ElemType ElemOf<double>() { return shlo::ElemType::F64; }
template <> inline shlo::ElemType ElemOf<int32_t>() { return shlo::ElemType::S32; }
template <> inline shlo::ElemType ElemOf<int64_t>() { return shlo::ElemType::S64; }
template <> inline shlo::ElemType ElemOf<bool>() { return shlo::ElemType::Pred; }

// A row-major host array with its StableHLO type.
struct HostTensor {
  shlo::TensorType type;
  std::vector<uint8_t> bytes;

  template <typename T>
  static HostTensor Of(const std::vector<T>& values, std::vector<int64_t> dims) {
    HostTensor h{{ElemOf<T>(), std::move(dims)}, std::vector<uint8_t>(values.size() * sizeof(T))};
    EXPECT_EQ(h.type.numel(), static_cast<int64_t>(values.size()));
    for (size_t i = 0; i < values.size(); ++i) {
      T v = values[i];
      std::memcpy(h.bytes.data() + i * sizeof(T), &v, sizeof(T));
    }
    return h;
  }
  template <typename T>
  std::vector<T> As() const {
    EXPECT_EQ(type.elem, ElemOf<T>()) << type.str();
    std::vector<T> out(bytes.size() / sizeof(T));
    for (size_t i = 0; i < out.size(); ++i) {
      T v;  // through a temporary: std::vector<bool> has no element addresses
      std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
      out[i] = v;
    }
    return out;
  }
};

inline pjrt::BufferPtr ToDevice(const HostTensor& h, size_t device = 0) {
  return TestClient().FromHost(h.bytes.data(), BufferType(h.type.elem), h.type.dims, device);
}

inline HostTensor FromDevice(const pjrt::Buffer& buffer, const shlo::TensorType& type) {
  HostTensor h{type, std::vector<uint8_t>(type.numel() * shlo::ByteSize(type.elem))};
  EXPECT_EQ(buffer.dims(), type.dims);
  EXPECT_EQ(buffer.element_type(), BufferType(type.elem));
  buffer.ToHost(h.bytes.data(), h.bytes.size());
  return h;
}

inline pjrt::ExecutablePtr CompileText(const std::string& mlir) {
  return TestClient().Compile(mlir, pjrt::PortableCompileOptions());
}

// Compiles `mlir`, runs it on `device` with `inputs`, and reads back results of `result_types`.
inline std::vector<HostTensor> RunMlir(const std::string& mlir, const std::vector<HostTensor>& inputs,
                                       const std::vector<shlo::TensorType>& result_types, size_t device = 0) {
  pjrt::ExecutablePtr exe = CompileText(mlir);
  EXPECT_EQ(exe->num_outputs(), result_types.size());
  std::vector<pjrt::BufferPtr> args;
  std::vector<PJRT_Buffer*> raw;
  for (const HostTensor& h : inputs) {
    args.push_back(ToDevice(h, device));
    raw.push_back(args.back()->raw());
  }
  std::vector<pjrt::BufferPtr> outs = exe->Execute(TestClient().device(device), raw);
  std::vector<HostTensor> results;
  for (size_t i = 0; i < outs.size() && i < result_types.size(); ++i)
    results.push_back(FromDevice(*outs[i], result_types[i]));
  return results;
}

// Builds the module of `b` returning `results`, then runs it as above.
inline std::vector<HostTensor> RunModule(const shlo::Builder& b, const std::vector<shlo::Value>& results,
                                   const std::vector<HostTensor>& inputs, size_t device = 0) {
  std::vector<shlo::TensorType> types;
  for (const shlo::Value& v : results) types.push_back(v.type);
  return RunMlir(b.Module(results), inputs, types, device);
}

}  // namespace tpu::test
