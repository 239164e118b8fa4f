#include "key_value_store.h"

#include <cstring>

namespace tpu::pjrt {
namespace {

PJRT_Error* Fail(PJRT_CallbackError* make_error, PJRT_Error_Code code, const std::string& message) {
  return (*make_error)(code, message.data(), message.size());
}

// The plugin frees a value with the deleter we hand back, so it is allocated here.
char* CopyOut(const std::string& value) {
  char* out = new char[value.size() + 1];
  std::memcpy(out, value.data(), value.size());
  out[value.size()] = '\0';
  return out;
}

void DeleteValue(char* value) { delete[] value; }

// Runs `body`, turning what a store throws into the plugin's error.
template <typename Body>
PJRT_Error* Guarded(PJRT_CallbackError* make_error, const std::string& key, Body body) {
  try {
    return body();
  } catch (const KeyValueTimeout& e) {
    return Fail(make_error, PJRT_Error_Code_DEADLINE_EXCEEDED, "key-value store: waiting for '" + key + "': " + e.what());
  } catch (const std::exception& e) {
    return Fail(make_error, PJRT_Error_Code_INTERNAL, "key-value store: '" + key + "': " + e.what());
  } catch (...) {
    return Fail(make_error, PJRT_Error_Code_INTERNAL, "key-value store: '" + key + "': unknown error");
  }
}

}  // namespace

PJRT_Error* KeyValueGetCallback(PJRT_KeyValueGetCallback_Args* args) {
  std::string key(args->key, args->key_size);
  return Guarded(args->callback_error, key, [&]() -> PJRT_Error* {
    auto* store = static_cast<KeyValueStore*>(args->user_arg);
    std::string value = store->Get(key, std::chrono::milliseconds(args->timeout_in_ms));
    args->value = CopyOut(value);
    args->value_size = value.size();
    args->value_deleter_callback = &DeleteValue;
    return nullptr;
  });
}

PJRT_Error* KeyValueTryGetCallback(PJRT_KeyValueTryGetCallback_Args* args) {
  std::string key(args->key, args->key_size);
  return Guarded(args->callback_error, key, [&]() -> PJRT_Error* {
    auto* store = static_cast<KeyValueStore*>(args->user_arg);
    std::optional<std::string> value = store->TryGet(key);
    if (!value) return Fail(args->callback_error, PJRT_Error_Code_NOT_FOUND, "key-value store: no key '" + key + "'");
    args->value = CopyOut(*value);
    args->value_size = value->size();
    args->value_deleter_callback = &DeleteValue;
    return nullptr;
  });
}

PJRT_Error* KeyValuePutCallback(PJRT_KeyValuePutCallback_Args* args) {
  std::string key(args->key, args->key_size);
  return Guarded(args->callback_error, key, [&]() -> PJRT_Error* {
    static_cast<KeyValueStore*>(args->user_arg)->Put(key, std::string(args->value, args->value_size));
    return nullptr;
  });
}

void AttachKeyValueStore(PJRT_Client_Create_Args& create, KeyValueStore* store) {
  create.kv_get_callback = &KeyValueGetCallback;
  create.kv_get_user_arg = store;
  create.kv_put_callback = &KeyValuePutCallback;
  create.kv_put_user_arg = store;
  create.kv_try_get_callback = &KeyValueTryGetCallback;
  create.kv_try_get_user_arg = store;
}

}  // namespace tpu::pjrt
