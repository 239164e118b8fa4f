#include "dump.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "env.h"

namespace tpu::runtime {
namespace fs = std::filesystem;
namespace {

void WarnOnce(const std::string& why) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  std::fprintf(stderr, "torch_tpu: warning: TORCH_TPU_DUMP_DIR: %s; programs are no longer dumped.\n", why.c_str());
}

// The kind of program, from the name its caller gives it (Program::name, FusedGraph::Flush,
// CompiledGraph::Build), and what is left of the name once the kind is said.
std::pair<std::string, std::string> KindOf(const std::string& name) {
  for (const char* prefix : {"fused graph of ", "fused graph "})
    if (name.rfind(prefix, 0) == 0) return {"fused", name.substr(std::string(prefix).size())};
  if (name.rfind("compiled graph ", 0) == 0) return {"compiled", name.substr(15)};
  if (name.rfind("collective ", 0) == 0) return {"collective", name.substr(11)};
  return {"op", name};
}

// Letters, digits, '.', '-' and '_' only, so a name is safe in every shell and file system.
std::string FileSafe(const std::string& text) {
  std::string out;
  for (char c : text) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    out += ok ? c : '_';
    if (out.size() >= 100) break;
  }
  return out;
}

// 20261204T201502.123Z: UTC to the millisecond, so names sort by time across processes.
std::string Timestamp() {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d%02d%02dT%02d%02d%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

bool ReadVarint(const std::string& b, size_t& i, uint64_t* v) {
  *v = 0;
  for (int shift = 0; i < b.size() && shift < 64; shift += 7) {
    uint8_t byte = static_cast<uint8_t>(b[i++]);
    *v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

// Appends the fields of one message to *out; false when `b` is not a well-formed message.
bool DescribeMessage(const std::string& b, std::string* out) {
  size_t i = 0;
  std::string text;
  while (i < b.size()) {
    uint64_t tag, v;
    if (!ReadVarint(b, i, &tag) || tag >> 3 == 0) return false;
    std::string field = std::to_string(tag >> 3);
    if (!text.empty()) text += ' ';
    switch (tag & 7) {
      case 0:
        if (!ReadVarint(b, i, &v)) return false;
        text += field + ": " + std::to_string(static_cast<int64_t>(v));
        break;
      case 2: {
        if (!ReadVarint(b, i, &v) || v > b.size() - i) return false;
        std::string inner = b.substr(i, v), nested;
        i += v;
        if (!inner.empty() && DescribeMessage(inner, &nested)) text += field + " { " + nested + " }";
        else text += field + ": \"" + inner + "\"";
        break;
      }
      case 1:
      case 5: {
        size_t n = (tag & 7) == 1 ? 8 : 4;
        if (b.size() - i < n) return false;
        i += n;
        text += field + ": <" + std::to_string(n * 8) + "-bit>";
        break;
      }
      default:
        return false;
    }
  }
  *out = text;
  return true;
}

}  // namespace

const std::string& DumpDir() {
  static const std::string dir = [] {
    const char* value = std::getenv("TORCH_TPU_DUMP_DIR");
    if (!value || !*value) return std::string();
    std::error_code ec;
    fs::create_directories(value, ec);
    if (ec || !fs::is_directory(value))
      throw EnvError(std::string("TORCH_TPU_DUMP_DIR=") + value + ": cannot make that folder (" +
                     (ec ? ec.message() : "not a folder") + "); set it to a writable folder, or unset it");
    return std::string(value);
  }();
  return dir;
}

std::string DescribeProto(const std::string& bytes) {
  std::string text;
  return DescribeMessage(bytes, &text) ? text : "(not a protobuf message)";
}

std::string DumpProgram(const DumpRecord& r, const std::string& module_text) {
  static std::atomic<int64_t> sequence{0};
  auto [kind, label] = KindOf(r.name);
  char seq[16];
  std::snprintf(seq, sizeof seq, "%06lld", static_cast<long long>(++sequence));
  std::string time = Timestamp();
  std::string base = time + "-p" + std::to_string(getpid()) + "-" + seq + "-" + kind + (r.from_disk ? "-cached" : "") +
                     "-" + FileSafe(label) + ".mlir";
  std::string path = (fs::path(DumpDir()) / base).string();
  std::string header = "// torch_tpu program dump\n// " + kind + ": " + r.name + "\n";
  if (!r.detail.empty()) {
    size_t start = 0;
    while (start < r.detail.size()) {
      size_t end = r.detail.find('\n', start);
      if (end == std::string::npos) end = r.detail.size();
      header += "//   " + r.detail.substr(start, end - start) + "\n";
      start = end + 1;
    }
  }
  header += r.from_disk ? "// loaded from the disk cache (compiled by an earlier process), not compiled now\n"
                        : "// compile started " + time + "\n";
  header += "// process " + std::to_string(getpid()) + ", dump " + seq + "\n";
  header += "// platform: " + r.platform + "\n";
  char size[32];
  std::snprintf(size, sizeof size, "%zu", r.compile_options.size());
  std::string hex;
  for (unsigned char c : r.compile_options) {
    char h[3];
    std::snprintf(h, sizeof h, "%02x", c);
    hex += h;
  }
  header += "// compile options (CompileOptionsProto, " + std::string(size) + " bytes): " +
            DescribeProto(r.compile_options) + "\n// compile options hex: " + hex + "\n";
  for (const char* name : {"XLA_FLAGS", "LIBTPU_INIT_ARGS"}) {
    const char* value = std::getenv(name);
    header += "// " + std::string(name) + "=" + (value ? value : "") + "\n";
  }
  header += "// disk cache key: " + (r.disk_key.empty() ? std::string("(cache off)") : r.disk_key) + "\n";
  // Written whole under a temporary name, then renamed: a reader of the folder never sees half.
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << header << module_text;
    if (!module_text.empty() && module_text.back() != '\n') f << '\n';
    if (!f) {
      WarnOnce("cannot write " + tmp);
      return "";
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    WarnOnce("cannot rename " + tmp + " (" + ec.message() + ")");
    return "";
  }
  return path;
}

void DumpCompileEnd(const std::string& path, std::chrono::steady_clock::time_point start, const std::string& error) {
  DumpCompileEnd(path,
                 std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count(),
                 error);
}

void DumpCompileEnd(const std::string& path, int64_t microseconds, const std::string& error) {
  if (path.empty()) return;
  std::ofstream f(path, std::ios::app);
  char line[64];
  std::snprintf(line, sizeof line, "%.1f ms", microseconds / 1000.0);
  if (error.empty()) f << "// compiled in " << line << "\n";
  else f << "// compile failed after " << line << ": " << error.substr(0, error.find('\n')) << "\n";
}

}  // namespace tpu::runtime
