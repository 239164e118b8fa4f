#include "graph_description.h"

#include <complex>
#include <mutex>
#include <unordered_map>

#include "../torch_compat.h"

namespace py = pybind11;

namespace tpu::aten::graph {

using lowering::Arg;

c10::Scalar ScalarOf(const py::handle& h) {
  if (py::isinstance<py::bool_>(h)) return c10::Scalar(h.cast<bool>());
  if (py::isinstance<py::int_>(h)) return c10::Scalar(h.cast<int64_t>());
  if (PyComplex_Check(h.ptr())) return c10::Scalar(c10::complex<double>(h.cast<std::complex<double>>()));
  return c10::Scalar(h.cast<double>());
}

GType TypeOf(const py::handle& h) {
  GType t;
  if (h.is_none()) return t;
  auto tup = h.cast<py::tuple>();
  t.defined = true;
  t.dtype = tup[0].cast<at::ScalarType>();
  t.sizes = tup[1].cast<std::vector<int64_t>>();
  if (tup.size() > 2) t.strides = tup[2].cast<std::vector<int64_t>>();
  if (tup.size() > 3) t.cpu_scalar = tup[3].cast<bool>();
  return t;
}

GArg ArgOf(const py::handle& h) {
  auto tup = h.cast<py::tuple>();
  GArg g;
  g.kind = tup[0].cast<int>();
  py::object v = tup.size() > 1 ? py::object(tup[1]) : py::object(py::none());
  Arg& a = g.arg;
  switch (g.kind) {
    case kNoneArg: break;
    case kTensorArg: a.kind = Arg::Kind::Tensor; g.id = v.cast<int64_t>(); break;
    case kScalarArg: a.kind = Arg::Kind::Tensor; g.scalars.push_back(ScalarOf(v)); break;
    case kIntArg: a.kind = Arg::Kind::Int; a.i = v.cast<int64_t>(); break;
    case kDtypeArg: a.kind = Arg::Kind::Int; a.i = static_cast<int64_t>(v.cast<at::ScalarType>()); break;
    case kLayoutArg: a.kind = Arg::Kind::Int; a.i = static_cast<int64_t>(compat::LayoutFromPython(v)); break;
    case kMemoryFormatArg: a.kind = Arg::Kind::Int; a.i = static_cast<int64_t>(v.cast<at::MemoryFormat>()); break;
    case kDoubleArg: a.kind = Arg::Kind::Double; a.d = v.cast<double>(); break;
    case kBoolArg: a.kind = Arg::Kind::Bool; a.b = v.cast<bool>(); break;
    case kIntsArg: a.kind = Arg::Kind::IntList; a.ints = v.cast<std::vector<int64_t>>(); break;
    case kDoublesArg: a.kind = Arg::Kind::DoubleList; a.doubles = v.cast<std::vector<double>>(); break;
    case kBoolsArg:
      a.kind = Arg::Kind::BoolList;
      for (bool x : v.cast<std::vector<bool>>()) a.ints.push_back(x);
      break;
    case kStringArg: a.kind = Arg::Kind::String; a.s = v.cast<std::string>(); break;
    case kTensorsArg: a.kind = Arg::Kind::TensorList; g.ids = v.cast<std::vector<int64_t>>(); break;
    case kScalarsArg:
      a.kind = Arg::Kind::TensorList;
      for (py::handle s : v) g.scalars.push_back(ScalarOf(s));
      break;
    case kGeneratorArg: a.kind = Arg::Kind::Tensor; break;  // the default generator's state
    default: throw std::invalid_argument("unknown argument kind " + std::to_string(g.kind));
  }
  return g;
}

std::shared_ptr<const OpArguments> ArgumentsOf(const std::string& op) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const OpArguments>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(op);
  if (it != cache.end()) return it->second;
  auto dot = op.find('.');
  auto handle = c10::Dispatcher::singleton().findOp(
      c10::OperatorName(op.substr(0, dot), dot == std::string::npos ? "" : op.substr(dot + 1)));
  std::shared_ptr<const OpArguments> args;
  if (handle) args = std::make_shared<const OpArguments>(ClassifyArguments(*handle));
  cache[op] = args;
  return args;
}

}  // namespace tpu::aten::graph
