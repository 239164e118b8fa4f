#include "disk_cache.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <system_error>
#include <vector>

namespace tpu::runtime {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'T', 'P', 'U', 'C', 'A', 'C', 'H', '1'};

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

int64_t MaxBytes() {
  const char* env = std::getenv("TORCH_TPU_CACHE_MAX_BYTES");
  return env ? std::atoll(env) : int64_t{4} << 30;
}

void Evict(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> entries;
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec) || e.path().extension() != ".bin") continue;
    total += static_cast<int64_t>(e.file_size(ec));
    entries.emplace_back(e.last_write_time(ec), e.path());
  }
  int64_t limit = MaxBytes();
  if (total <= limit) return;
  std::sort(entries.begin(), entries.end());
  for (const auto& [time, path] : entries) {
    if (total <= limit) break;
    int64_t size = static_cast<int64_t>(fs::file_size(path, ec));
    if (fs::remove(path, ec)) total -= size;
  }
}

}  // namespace

uint64_t Fingerprint64(const std::string& data, uint64_t seed) {
  // FNV-1a with a final avalanche (splitmix64): stable across processes and builds.
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

std::string DiskCacheRoot() {
  if (const char* env = std::getenv("TORCH_TPU_CACHE_DIR")) return env;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/torch_tpu";
  const char* home = std::getenv("HOME");
  return home ? std::string(home) + "/.cache/torch_tpu" : "";
}

std::string DiskCacheDir(const std::string& platform, const std::string& platform_version, int api_major,
                         int api_minor) {
  std::string root = DiskCacheRoot();
  if (root.empty()) return "";
  std::string name = platform + "-" + Hex(Fingerprint64(platform_version, 0)).substr(0, 12) + "-api" +
                     std::to_string(api_major) + "." + std::to_string(api_minor);
  std::error_code ec;
  fs::path dir = fs::path(root) / name;
  fs::create_directories(dir, ec);
  if (ec) return "";
  return dir.string();
}

std::string DiskCacheKey(const std::string& module_text, const std::string& compile_options) {
  std::string all = module_text + '\0' + compile_options;
  return Hex(Fingerprint64(all, 0)) + Hex(Fingerprint64(all, 0x9e3779b97f4a7c15ull));
}

bool DiskCacheRead(const std::string& dir, const std::string& key, std::string* bytes) {
  fs::path path = fs::path(dir) / (key + ".bin");
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  char magic[8];
  uint64_t size = 0, checksum = 0;
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return false;
  if (!in.read(reinterpret_cast<char*>(&size), 8) || !in.read(reinterpret_cast<char*>(&checksum), 8)) return false;
  if (size > (uint64_t{1} << 34)) return false;
  bytes->resize(size);
  if (!in.read(bytes->data(), static_cast<std::streamsize>(size))) return false;
  if (Fingerprint64(*bytes, 0) != checksum) return false;  // truncated or damaged: recompile
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // recency for LRU eviction
  return true;
}

void DiskCacheWrite(const std::string& dir, const std::string& key, const std::string& bytes) {
  fs::path final_path = fs::path(dir) / (key + ".bin");
  std::random_device rd;
  fs::path tmp = fs::path(dir) / (key + ".tmp." + std::to_string(getpid()) + "." + Hex(rd()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    uint64_t size = bytes.size(), checksum = Fingerprint64(bytes, 0);
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&size), 8);
    out.write(reinterpret_cast<const char*>(&checksum), 8);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      out.close();
      std::error_code ec;
      fs::remove(tmp, ec);
      return;
    }
  }
  // rename() is atomic: a concurrent reader sees the old file or the new one, never a part.
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  if (ec) fs::remove(tmp, ec);
  static std::atomic<int> writes{0};
  if (writes++ % 32 == 0) Evict(dir);  // a directory scan per 32 writes keeps compiles cheap
}

int64_t DiskCacheClear(const std::string& root) {
  std::error_code ec;
  int64_t removed = 0;
  if (root.empty() || !fs::exists(root, ec)) return 0;
  for (const auto& e : fs::recursive_directory_iterator(root, ec)) {
    if (e.is_regular_file(ec) && (e.path().extension() == ".bin" || e.path().string().find(".tmp.") != std::string::npos))
      removed += fs::remove(e.path(), ec) ? 1 : 0;
  }
  return removed;
}

}  // namespace tpu::runtime
