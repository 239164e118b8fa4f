// Shared helpers of the ATen layer: dtype mapping, storages of tensors, errors.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "../lowering/lowering.h"
#include "../runtime/program.h"
#include "../runtime/runtime.h"

namespace tpu::aten {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// Throws TypeError naming the dtype when the device cannot hold it.
shlo::ElemType ToElemType(c10::ScalarType t);
c10::ScalarType ToScalarType(shlo::ElemType t);
bool IsSupportedDtype(c10::ScalarType t);

// The TpuStorage under a tensor. Its c10 storage usually is that TpuStorage (made by the tpu
// allocator); PyTorch also makes storages over tpu memory that start inside one
// (untyped_storage()[a:b] slices, from_blob in torch.save's legacy writer): StorageOffsetOf
// then counts from the TpuStorage's start, not the c10 storage's.
runtime::TpuStorage* StorageOf(const at::Tensor& t);
runtime::TpuStorage* StorageOf(const c10::StorageImpl& storage);  // null when it is not tpu memory
int64_t StorageOffsetOf(const at::Tensor& t);
lowering::ViewGeometry GeometryOf(const at::Tensor& t);
// lowering::HasRunTimeOffset(GeometryOf(t)) without building the geometry (signature hot path).
bool HasRunTimeOffset(const at::Tensor& t);
// The key of a view's offset: the offset itself, or where HasRunTimeOffset, -1 for a view read
// as a box of its shaped buffer at this offset (lowering::IsBufferBoxAt) and -2 for one read 1-D.
int64_t OffsetKey(const at::Tensor& t);
// GeometryOf with the dims of the storage's shaped buffer, where a view at a run-time offset is
// read as a box of it (OffsetKey -1).
lowering::ViewGeometry GeometryWithBufferOf(const at::Tensor& t);
bool IsTpuAllocation(const c10::DataPtr& p);

// Current device of this thread (the device guard's state).
c10::DeviceIndex CurrentDevice();
void SetCurrentDevice(c10::DeviceIndex index);
int DeviceCount() noexcept;
// Waits for every pending computation on `device` (all devices when -1).
void SynchronizeDevice(int device);

// Runs `fn`, turning runtime errors into PyTorch exceptions (OutOfMemoryError for
// exhausted device memory) that name `what`.
[[noreturn]] void RethrowAsTorchError(const std::exception& e, const std::string& what);
// A failed deferred device check as the Python exception the CPU raises (IndexError, ...).
[[noreturn]] void RaiseCheckFailure(const runtime::CheckFailed& failed);
// Raises the first failed check guarding the storage's value (runtime/device_checks.h).
void RaiseChecksOf(const runtime::TpuStorage* storage);
// Lets Python's signal handlers run while the main thread waits on the device
// (csrc/runtime/long_wait.h): a KeyboardInterrupt they raise abandons the wait and reaches the
// caller as itself. Called once, when torch_tpu._C is imported.
void InstallWaitInterruptCheck();

// The (seed, offset) a random op uses; advances the generator's offset by `increment`.
std::pair<uint64_t, uint64_t> NextPhiloxState(const std::optional<at::Generator>& gen, int device,
                                              uint64_t increment);

// Uploads raw host bytes as the whole storage of `dst` (a tpu tensor covering its storage).
// `dims`: the tensor shape the bytes fill (TpuStorage::dims); 1-D when not of rank >= 2.
void UploadWholeStorage(runtime::TpuStorage* storage, const void* data, shlo::ElemType elem,
                        const std::vector<int64_t>& dims = {});

using runtime::KeyHash;  // FNV-1a over a program signature

}  // namespace tpu::aten
