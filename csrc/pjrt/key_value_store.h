// The key-value store a PJRT client shares with the other processes of a job (the
// PJRT_Client_Create kv callbacks): multi-process GPU and TPU clients exchange their devices
// through it, so every process sees the global device ids that collectives name. The store
// itself lives above (csrc/aten: torch.distributed's c10d Store); this layer only adapts the C
// callbacks to it. No torch headers.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "pjrt_c_api.h"

namespace tpu::pjrt {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void Put(const std::string& key, const std::string& value) = 0;
  // Blocks until the key exists; throws KeyValueTimeout once `timeout` has passed.
  virtual std::string Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual std::optional<std::string> TryGet(const std::string& key) = 0;
  // For error messages and metrics: "torch.distributed store", ...
  virtual std::string Describe() const = 0;
};

class KeyValueTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The callbacks of PJRT_Client_Create_Args, each with `user_arg` a KeyValueStore*. A store's
// exception becomes the plugin's error through args->callback_error (DEADLINE_EXCEEDED for a
// timeout, NOT_FOUND for a missing key in try-get, INTERNAL otherwise): nothing throws
// through the plugin's C frames.
PJRT_Error* KeyValueGetCallback(PJRT_KeyValueGetCallback_Args* args);
PJRT_Error* KeyValueTryGetCallback(PJRT_KeyValueTryGetCallback_Args* args);
PJRT_Error* KeyValuePutCallback(PJRT_KeyValuePutCallback_Args* args);

// Sets the three callbacks of `create` to `store` (which must outlive the client).
void AttachKeyValueStore(PJRT_Client_Create_Args& create, KeyValueStore* store);

}  // namespace tpu::pjrt
