// torch_tpu._tpu_compiler: the topology compiler (csrc/pjrt/topology.h) as a Python module for
// the TPU compile worker (torch_tpu/_tpu_compile_worker.py). It links no torch library, so the
// worker starts without importing torch; pybind11 comes from PyTorch's headers.
#include <pybind11/pybind11.h>

#include "../pjrt/topology.h"

namespace py = pybind11;
using tpu::pjrt::TopologyCompiler;
using tpu::pjrt::TopologyProgram;

namespace {

py::dict ProgramDict(const TopologyProgram& p) {
  py::dict d;
  d["compiled"] = p.compiled;
  d["error"] = p.error;
  d["flops"] = p.flops;
  d["bytes_accessed"] = p.bytes_accessed;
  d["transcendentals"] = p.transcendentals;
  d["optimal_seconds"] = p.optimal_seconds;
  d["modelled_seconds"] = p.modelled_seconds;
  d["unmodelled_instructions"] = p.unmodelled_instructions;
  d["argument_bytes"] = p.argument_bytes;
  d["output_bytes"] = p.output_bytes;
  d["alias_bytes"] = p.alias_bytes;
  d["temp_bytes"] = p.temp_bytes;
  d["generated_code_bytes"] = p.generated_code_bytes;
  d["peak_bytes"] = p.peak_bytes;
  d["optimized_program"] = py::bytes(p.optimized_program);
  d["optimized_format"] = p.optimized_format;
  return d;
}

}  // namespace

PYBIND11_MODULE(_tpu_compiler, m) {
  py::register_exception<tpu::pjrt::Error>(m, "Error", PyExc_RuntimeError);
  py::class_<TopologyCompiler>(m, "TopologyCompiler")
      .def(py::init<const std::string&, const std::string&>(), py::arg("plugin_path"), py::arg("topology"))
      .def_property_readonly("topology", &TopologyCompiler::topology_name)
      .def(
          "compile",
          [](const TopologyCompiler& self, const std::string& text, int64_t num_replicas, int64_t num_partitions) {
            TopologyProgram p;
            {
              py::gil_scoped_release release;
              p = self.Compile(text, num_replicas, num_partitions);
            }
            return ProgramDict(p);
          },
          py::arg("text"), py::arg("num_replicas") = 1, py::arg("num_partitions") = 1);
  m.def("split_optimal_seconds", [](double s) {
    double modelled;
    int64_t unmodelled;
    tpu::pjrt::SplitOptimalSeconds(s, &modelled, &unmodelled);
    return py::make_tuple(modelled, unmodelled);
  });
}
