// CompileOptionsProto bytes for PJRT_Client_Compile, written in the protobuf wire format by
// hand: the only protobuf this layer writes, so it takes no protobuf dependency.
#include "pjrt.h"

namespace tpu::pjrt {
namespace {

void AppendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void AppendTag(std::string& out, int field, int wire_type) {
  AppendVarint(out, (static_cast<uint64_t>(field) << 3) | wire_type);
}

// Protobuf wire format, written by hand (no protobuf dependency): an integer field, and a
// nested message or packed field given as its encoded bytes.
void AppendInt(std::string& out, int field, int64_t value) {
  AppendTag(out, field, 0);
  AppendVarint(out, static_cast<uint64_t>(value));
}

void AppendBytes(std::string& out, int field, const std::string& bytes) {
  AppendTag(out, field, 2);
  AppendVarint(out, bytes.size());
  out += bytes;
}

// ExecutableBuildOptionsProto: device_ordinal(1) = -1 (any), num_replicas(4),
// num_partitions(5), use_spmd_partitioning(6) where partitioned, device_assignment(9) if any.
std::string BuildOptions(int64_t num_replicas, int64_t num_partitions, const std::string& device_assignment) {
  std::string build;
  AppendInt(build, 1, -1);
  AppendInt(build, 4, num_replicas);
  AppendInt(build, 5, num_partitions);
  if (num_partitions > 1) AppendInt(build, 6, 1);
  if (!device_assignment.empty()) AppendBytes(build, 9, device_assignment);
  return build;
}

}  // namespace

std::string PortableCompileOptions() {
  // CompileOptionsProto: executable_build_options(3), compile_portable_executable(4) = true.
  std::string options;
  AppendBytes(options, 3, BuildOptions(1, 1, ""));
  AppendInt(options, 4, 1);
  return options;
}

void AppendOptionOverride(std::string& options, const std::string& name, int64_t value) {
  // CompileOptionsProto: env_option_overrides(7), a map<string, OptionOverrideProto> whose
  // entries are {key(1), value(2)}; OptionOverrideProto: int_field(3). A map field merges, so
  // the entry is appended to the encoded options.
  std::string override_value;
  AppendInt(override_value, 3, value);
  std::string entry;
  AppendBytes(entry, 1, name);
  AppendBytes(entry, 2, override_value);
  AppendBytes(options, 7, entry);
}

void AppendOptionOverride(std::string& options, const std::string& name, bool value) {
  std::string override_value;  // OptionOverrideProto: bool_field(2)
  AppendInt(override_value, 2, value ? 1 : 0);
  std::string entry;
  AppendBytes(entry, 1, name);
  AppendBytes(entry, 2, override_value);
  AppendBytes(options, 7, entry);
}

std::string CompileOptionsFor(int64_t num_replicas, int64_t num_partitions) {
  if (num_replicas == 1 && num_partitions == 1) return PortableCompileOptions();
  // DeviceAssignmentProto: replica_count(1), computation_count(2), one computation_devices(3)
  // per partition holding replica_device_ids(1).
  std::string assignment;
  AppendInt(assignment, 1, num_replicas);
  AppendInt(assignment, 2, num_partitions);
  for (int64_t p = 0; p < num_partitions; ++p) {
    std::string devices;
    for (int64_t r = 0; r < num_replicas; ++r) AppendInt(devices, 1, r * num_partitions + p);
    AppendBytes(assignment, 3, devices);
  }
  std::string options;  // CompileOptionsProto: executable_build_options(3)
  AppendBytes(options, 3, BuildOptions(num_replicas, num_partitions, assignment));
  return options;
}

std::string ReplicatedCompileOptions(const std::vector<int64_t>& device_ids) {
  // DeviceAssignmentProto: replica_count(1), computation_count(2) = 1, and one
  // computation_devices(3) { replica_device_ids(1), packed } holding the replicas' devices.
  std::string ids;
  for (int64_t id : device_ids) AppendVarint(ids, static_cast<uint64_t>(id));
  std::string computation;
  AppendBytes(computation, 1, ids);
  std::string assignment;
  AppendInt(assignment, 1, static_cast<int64_t>(device_ids.size()));
  AppendInt(assignment, 2, 1);
  AppendBytes(assignment, 3, computation);
  std::string options;  // CompileOptionsProto: executable_build_options(3)
  AppendBytes(options, 3, BuildOptions(static_cast<int64_t>(device_ids.size()), 1, assignment));
  return options;
}

}  // namespace tpu::pjrt
