// The device-side events of a PJRT profiler session (the PJRT profiler extension's collect_data
// returns a serialized tensorflow.profiler.XSpace), decoded without a protobuf library: each
// timed event of each line of each plane, named by its event metadata. Plugins that have the
// extension (libtpu on a TPU, the CUDA plugin) time the ops inside a program this way; the CPU
// plugin has none (profiler_events.h: PluginHasDeviceProfiler). Not yet called by the profiler
// session: starting the plugin's profiler needs the extension's header, which the CPU plugin's
// wheel does not ship.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpu::runtime::profiler {

struct DeviceOp {
  std::string plane;  // XPlane.name, e.g. "/device:TPU:0"
  std::string line;   // XLine.display_name, else its name ("XLA Ops", "XLA Modules", ...)
  std::string name;   // the event's metadata display_name, else its name
  int64_t start_ns = 0;  // Unix-epoch ns: line timestamp_ns + offset_ps / 1000
  int64_t end_ns = 0;
};

// Throws std::runtime_error naming what is malformed. Aggregated events (num_occurrences,
// no offset) are left out.
std::vector<DeviceOp> XSpaceEvents(const std::string& bytes);

}  // namespace tpu::runtime::profiler
