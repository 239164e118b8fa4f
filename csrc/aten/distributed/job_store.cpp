// The PJRT client's key-value store is torch.distributed's c10d Store: under a launcher the
// processes of a job already share one (the process group's, or torchrun's agent store), so
// a multi-process GPU or TPU client exchanges its devices through it instead of a second
// rendezvous service (JAX runs its own coordinator for this).
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <thread>

#include "../../pjrt/key_value_store.h"
#include "../../runtime/runtime.h"

namespace py = pybind11;

namespace tpu::aten {
namespace {

class C10dKeyValueStore : public pjrt::KeyValueStore {
 public:
  explicit C10dKeyValueStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void Put(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }

  // Polls instead of the store's blocking wait: a TCPStore client holds its socket for the
  // whole wait, so a put from another plugin thread on the same store would wait behind it.
  std::string Get(const std::string& key, std::chrono::milliseconds timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::milliseconds(1);
    while (!store_->check({key})) {
      if (std::chrono::steady_clock::now() >= deadline)
        throw pjrt::KeyValueTimeout("no value after " + std::to_string(timeout.count()) + " ms");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
    std::vector<uint8_t> value = store_->get(key);
    return std::string(value.begin(), value.end());
  }

  std::optional<std::string> TryGet(const std::string& key) override {
    if (!store_->check({key})) return std::nullopt;
    std::vector<uint8_t> value = store_->get(key);
    return std::string(value.begin(), value.end());
  }

  std::string Describe() const override { return "torch.distributed store"; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

std::shared_ptr<pjrt::KeyValueStore> FromPython(const py::object& store) {
  return std::make_shared<C10dKeyValueStore>(py::cast<c10::intrusive_ptr<c10d::Store>>(store));
}

// The plugin's side of PJRT_CallbackError for the check below: the message becomes the error.
struct CallbackFailure {
  PJRT_Error_Code code;
  std::string message;
};

PJRT_Error* RecordFailure(PJRT_Error_Code code, const char* message, size_t size) {
  return reinterpret_cast<PJRT_Error*>(new CallbackFailure{code, std::string(message, size)});
}

// Calls the PJRT callbacks on `store` as a plugin would: ("put", key, value) -> None,
// ("get"/"try_get", key) -> the value; a failure raises RuntimeError "<code>: <message>".
// How the tests see the adapter work without a multi-process plugin.
py::object CallAsPlugin(const py::object& py_store, const std::string& call, const std::string& key,
                        const std::string& value, int timeout_ms) {
  std::shared_ptr<pjrt::KeyValueStore> store = FromPython(py_store);
  PJRT_CallbackError make_error = &RecordFailure;
  PJRT_Error* error = nullptr;
  std::string result;
  bool has_result = false;
  {
    py::gil_scoped_release release;  // a TCPStore may wait on another thread of this process
    if (call == "put") {
      PJRT_KeyValuePutCallback_Args args{};
      args.struct_size = sizeof(args);
      args.key = key.data();
      args.key_size = key.size();
      args.value = value.data();
      args.value_size = value.size();
      args.callback_error = &make_error;
      args.user_arg = store.get();
      error = pjrt::KeyValuePutCallback(&args);
    } else if (call == "get" || call == "try_get") {
      auto take = [&](auto& args, PJRT_Error* (*callback)(std::remove_reference_t<decltype(args)>*)) {
        args.struct_size = sizeof(args);
        args.key = key.data();
        args.key_size = key.size();
        args.callback_error = &make_error;
        args.user_arg = store.get();
        error = callback(&args);
        if (error == nullptr) {
          result.assign(args.value, args.value_size);
          args.value_deleter_callback(args.value);
          has_result = true;
        }
      };
      if (call == "get") {
        PJRT_KeyValueGetCallback_Args args{};
        args.timeout_in_ms = timeout_ms;
        take(args, &pjrt::KeyValueGetCallback);
      } else {
        PJRT_KeyValueTryGetCallback_Args args{};
        take(args, &pjrt::KeyValueTryGetCallback);
      }
    } else {
      throw std::invalid_argument("call must be 'put', 'get' or 'try_get', not '" + call + "'");
    }
  }
  if (error != nullptr) {
    std::unique_ptr<CallbackFailure> failure(reinterpret_cast<CallbackFailure*>(error));
    const char* code = failure->code == PJRT_Error_Code_DEADLINE_EXCEEDED ? "DEADLINE_EXCEEDED"
                       : failure->code == PJRT_Error_Code_NOT_FOUND       ? "NOT_FOUND"
                                                                          : "INTERNAL";
    throw std::runtime_error(std::string(code) + ": " + failure->message);
  }
  return has_result ? py::object(py::bytes(result)) : py::object(py::none());
}

}  // namespace

void RegisterJobStoreBindings(py::module_& m) {
  m.def("_set_job_store", [](const py::object& store) { return runtime::Runtime::SetKeyValueStore(FromPython(store)); },
        "The c10d Store the PJRT client shares with the job's other processes; False once the client has started.");
  m.def("_job_store_call_as_plugin", &CallAsPlugin, py::arg("store"), py::arg("call"), py::arg("key"),
        py::arg("value") = "", py::arg("timeout_ms") = 1000);
}

}  // namespace tpu::aten
