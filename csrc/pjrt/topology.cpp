#include "topology.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace tpu::pjrt {
namespace {

template <typename T>
T Args() {
  T args;
  std::memset(&args, 0, sizeof(T));
  args.struct_size = sizeof(T);
  return args;
}

// A function is callable only if the plugin's table is long enough to hold it (pjrt.cpp's check).
bool Has(const PJRT_Api* api, size_t offset, const void* fn) { return offset < api->struct_size && fn != nullptr; }
#define TOPOLOGY_HAS(api, fn) Has(api, offsetof(PJRT_Api, fn), reinterpret_cast<const void*>((api)->fn))

// Owns an unloaded executable for the length of one Compile.
struct OwnedExecutable {
  const PJRT_Api* api;
  PJRT_Executable* raw = nullptr;
  ~OwnedExecutable() {
    if (raw == nullptr) return;
    auto args = Args<PJRT_Executable_Destroy_Args>();
    args.executable = raw;
    if (PJRT_Error* err = api->PJRT_Executable_Destroy(&args)) {
      auto d = Args<PJRT_Error_Destroy_Args>();
      d.error = err;
      api->PJRT_Error_Destroy(&d);
    }
  }
};

void ReadCostAnalysis(const Plugin& plugin, PJRT_Executable* exe, TopologyProgram* out) {
  const PJRT_Api* api = plugin.api();
  if (!TOPOLOGY_HAS(api, PJRT_Executable_GetCostAnalysis)) return;
  auto args = Args<PJRT_Executable_GetCostAnalysis_Args>();
  args.executable = exe;
  plugin.Check(api->PJRT_Executable_GetCostAnalysis(&args), "PJRT_Executable_GetCostAnalysis");
  for (size_t i = 0; i < args.num_properties; ++i) {
    const PJRT_NamedValue& p = args.properties[i];
    double value = p.type == PJRT_NamedValue_kFloat   ? p.float_value
                   : p.type == PJRT_NamedValue_kInt64 ? static_cast<double>(p.int64_value)
                                                      : NAN;
    if (std::isnan(value)) continue;
    std::string name(p.name, p.name_size);
    if (name == "flops") out->flops = value;
    if (name == "bytes accessed") out->bytes_accessed = value;
    if (name == "transcendentals") out->transcendentals = value;
    if (name == "optimal_seconds") {
      out->optimal_seconds = value;
      SplitOptimalSeconds(value, &out->modelled_seconds, &out->unmodelled_instructions);
    }
  }
}

void ReadMemoryStats(const Plugin& plugin, PJRT_Executable* exe, TopologyProgram* out) {
  const PJRT_Api* api = plugin.api();
  if (!TOPOLOGY_HAS(api, PJRT_Executable_GetCompiledMemoryStats)) return;
  auto args = Args<PJRT_Executable_GetCompiledMemoryStats_Args>();
  args.executable = exe;
  plugin.Check(api->PJRT_Executable_GetCompiledMemoryStats(&args), "PJRT_Executable_GetCompiledMemoryStats");
  out->argument_bytes = args.argument_size_in_bytes;
  out->output_bytes = args.output_size_in_bytes;
  out->alias_bytes = args.alias_size_in_bytes;
  out->temp_bytes = args.temp_size_in_bytes;
  out->generated_code_bytes = args.generated_code_size_in_bytes;
  // peak_memory_in_bytes came after the other fields (API 0.x): a shorter struct leaves it -1.
  if (args.struct_size >= offsetof(PJRT_Executable_GetCompiledMemoryStats_Args, peak_memory_in_bytes) + sizeof(int64_t))
    out->peak_bytes = args.peak_memory_in_bytes;
}

void ReadOptimizedProgram(const Plugin& plugin, PJRT_Executable* exe, TopologyProgram* out) {
  const PJRT_Api* api = plugin.api();
  if (!TOPOLOGY_HAS(api, PJRT_Executable_OptimizedProgram)) return;
  // Two calls: the first sets code_size (code null), the second fills a buffer of that size.
  auto program = Args<PJRT_Program>();
  auto args = Args<PJRT_Executable_OptimizedProgram_Args>();
  args.executable = exe;
  args.program = &program;
  plugin.Check(api->PJRT_Executable_OptimizedProgram(&args), "PJRT_Executable_OptimizedProgram");
  std::string code(program.code_size, '\0');
  program.code = code.data();
  plugin.Check(api->PJRT_Executable_OptimizedProgram(&args), "PJRT_Executable_OptimizedProgram");
  out->optimized_program = std::move(code);
  if (program.format != nullptr) out->optimized_format.assign(program.format, program.format_size);
}

// libtpu assumes a host of 2x2x1 chips and rejects a topology smaller than that ("v6e:1x1 is not
// divisible by chips_per_host_bounds 2x2x1"): such a topology is one host holding all its chips.
std::vector<int64_t> SmallTopologyHostBounds(const std::string& name) {
  size_t colon = name.find_last_of(":=_");
  if (colon == std::string::npos) return {};
  std::vector<int64_t> dims;
  std::string rest = name.substr(colon + 1);
  size_t start = 0;
  while (start <= rest.size()) {
    size_t x = rest.find('x', start);
    std::string part = rest.substr(start, x == std::string::npos ? std::string::npos : x - start);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) return {};
    dims.push_back(std::stoll(part));
    if (x == std::string::npos) break;
    start = x + 1;
  }
  while (dims.size() < 3) dims.push_back(1);
  if (dims.size() != 3) return {};
  bool smaller = dims[0] < 2 || dims[1] < 2;
  return smaller ? dims : std::vector<int64_t>{};
}

}  // namespace

void SplitOptimalSeconds(double optimal_seconds, double* modelled_seconds, int64_t* unmodelled_instructions) {
  int64_t n = 0;
  if (optimal_seconds < 0) n = static_cast<int64_t>(std::ceil(-optimal_seconds));
  // A modelled part of a whole second or more would be read as one more unmodelled
  // instruction; programs this size are far below a second, and the count is what is asked.
  *unmodelled_instructions = n;
  *modelled_seconds = optimal_seconds + static_cast<double>(n);
}

TopologyCompiler::TopologyCompiler(const std::string& plugin_path, const std::string& topology_name)
    : plugin_(Plugin::Load(plugin_path)), topology_name_(topology_name) {
  const PJRT_Api* api = plugin_->api();
  const char* missing = !TOPOLOGY_HAS(api, PJRT_TopologyDescription_Create)    ? "PJRT_TopologyDescription_Create"
                        : !TOPOLOGY_HAS(api, PJRT_TopologyDescription_Destroy) ? "PJRT_TopologyDescription_Destroy"
                        : !TOPOLOGY_HAS(api, PJRT_Compile)                     ? "PJRT_Compile"
                        : !TOPOLOGY_HAS(api, PJRT_Executable_Destroy)          ? "PJRT_Executable_Destroy"
                                                                               : nullptr;
  if (missing)
    throw Error("PJRT plugin '" + plugin_path + "' (PJRT API " + std::to_string(plugin_->api_major()) + "." +
                    std::to_string(plugin_->api_minor()) + ") cannot compile for a topology: its API table has no " +
                    missing,
                9);
  auto args = Args<PJRT_TopologyDescription_Create_Args>();
  args.topology_name = topology_name.data();
  args.topology_name_size = topology_name.size();
  std::vector<int64_t> host_bounds = SmallTopologyHostBounds(topology_name);
  PJRT_NamedValue option;
  std::memset(&option, 0, sizeof(option));
  static const char kHostBounds[] = "chips_per_host_bounds";
  if (!host_bounds.empty()) {
    option.struct_size = sizeof(option);
    option.name = kHostBounds;
    option.name_size = sizeof(kHostBounds) - 1;
    option.type = PJRT_NamedValue_kInt64List;
    option.int64_array_value = host_bounds.data();
    option.value_size = host_bounds.size();
    args.create_options = &option;
    args.num_options = 1;
  }
  plugin_->Check(api->PJRT_TopologyDescription_Create(&args),
                 ("creating TPU topology '" + topology_name + "' (names like v5e:2x2, v6e:1x1, v4:2x2x1)").c_str());
  topology_ = args.topology;
}

TopologyCompiler::~TopologyCompiler() {
  if (topology_ == nullptr) return;
  auto args = Args<PJRT_TopologyDescription_Destroy_Args>();
  args.topology = topology_;
  try {
    plugin_->Check(plugin_->api()->PJRT_TopologyDescription_Destroy(&args), "PJRT_TopologyDescription_Destroy");
  } catch (const Error&) {
    // Nothing to do about a topology that cannot be freed at exit.
  }
}

TopologyProgram TopologyCompiler::Compile(const std::string& mlir_text, int64_t num_replicas,
                                          int64_t num_partitions) const {
  TopologyProgram result;
  const PJRT_Api* api = plugin_->api();
  std::string options = CompileOptionsFor(num_replicas, num_partitions);
  static const char kFormat[] = "mlir";
  auto program = Args<PJRT_Program>();
  program.code = const_cast<char*>(mlir_text.data());
  program.code_size = mlir_text.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  auto args = Args<PJRT_Compile_Args>();
  args.topology = topology_;
  args.program = &program;
  args.compile_options = options.data();
  args.compile_options_size = options.size();
  args.client = nullptr;  // no TPU here: the topology alone says what to compile for
  OwnedExecutable exe{api};
  try {
    plugin_->Check(api->PJRT_Compile(&args), "PJRT_Compile");
  } catch (const Error& e) {
    result.error = e.what();
    return result;
  }
  exe.raw = args.executable;
  result.compiled = true;
  // A statistic the plugin cannot give leaves its field -1 instead of failing the program.
  try {
    ReadCostAnalysis(*plugin_, exe.raw, &result);
  } catch (const Error&) {
  }
  try {
    ReadMemoryStats(*plugin_, exe.raw, &result);
  } catch (const Error&) {
  }
  try {
    ReadOptimizedProgram(*plugin_, exe.raw, &result);
  } catch (const Error&) {
  }
  return result;
}

}  // namespace tpu::pjrt
