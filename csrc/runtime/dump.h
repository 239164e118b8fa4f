// TORCH_TPU_DUMP_DIR: the StableHLO text of every program this process compiles (or loads from
// the disk cache), one file each, with a header of `//` comments saying what it is, where it
// came from and how it is compiled. MLIR ignores the comments, so a file is fed to XLA's own
// tools as it is. Torch-free.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tpu::runtime {

// The dump folder, made on first call; "" when TORCH_TPU_DUMP_DIR is unset or empty. Throws
// EnvError when the folder cannot be made.
const std::string& DumpDir();

// What a dump file records besides the module.
struct DumpRecord {
  std::string name;             // the op or graph ("aten::mm", "fused graph of 12 ops", "compiled graph 3")
  std::string detail;           // more about it (a fused graph's functions and their ops); may be empty
  bool from_disk = false;       // loaded from the disk cache, not compiled now
  std::string platform;         // "cpu 0.0.1, PJRT API 0.90"
  std::string compile_options;  // the serialized CompileOptionsProto handed to the plugin
  std::string disk_key;         // the disk cache key ("" when the cache is off)
};

// Writes one file into DumpDir() (which must be non-empty) and returns its path. Names sort by
// time and say what they hold: <UTC time>-p<pid>-<sequence>-<kind>[-cached]-<name>.mlir, kind
// one of op (a per-op program, strict or run op by op in fused mode), fused (a fused whole
// graph), compiled (a torch.compile graph), collective (a collective of in-process ranks,
// replicated over their devices). Never throws: a dump that cannot be written warns
// once on stderr, and compiling goes on.
std::string DumpProgram(const DumpRecord& record, const std::string& module_text);
// Appends how the compile ended (its wall time; the plugin's message when it failed) to a file
// DumpProgram wrote before the compile started; nothing when `path` is "".
void DumpCompileEnd(const std::string& path, int64_t microseconds, const std::string& error = "");
// The same, timed from `start`.
void DumpCompileEnd(const std::string& path, std::chrono::steady_clock::time_point start,
                    const std::string& error = "");

// The CompileOptionsProto in protobuf text-like form, field numbers for names
// ("3 { 1: -1 4: 1 5: 1 } 4: 1"), for the header.
std::string DescribeProto(const std::string& bytes);

}  // namespace tpu::runtime
