#include "disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <system_error>
#include <vector>

#include "env.h"

namespace tpu::runtime {
namespace fs = std::filesystem;
namespace {

// An entry: magic, the key it was written for (length, bytes), the executable's size and
// checksum, the executable. A file whose recorded key is not the one looked up (copied or
// renamed over another entry) is refused, so a program is never served for another.
constexpr char kMagic[8] = {'T', 'P', 'U', 'C', 'A', 'C', 'H', '2'};

// The cache cannot be used (a folder that cannot be made or written): said once per process
// on stderr, since compiling every program again in every process is slow and surprising.
void WarnUnusable(const std::string& what, const std::string& why) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  std::fprintf(stderr,
               "torch_tpu: warning: the compilation cache %s is unusable (%s); compiled programs are not kept for "
               "later processes. Set TORCH_TPU_CACHE_DIR to a writable folder, or to an empty value to turn the "
               "cache off.\n",
               what.c_str(), why.c_str());
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

int64_t MaxBytes() {
  static int64_t max = EnvBytes("TORCH_TPU_CACHE_MAX_BYTES").value_or(int64_t{4} << 30);
  return max;
}

int64_t FolderBytes(const fs::path& dir) {
  std::error_code ec;
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && e.path().extension() == ".bin") total += static_cast<int64_t>(e.file_size(ec));
  return total;
}

// Removes the least recently used entries until the folder holds at most
// TORCH_TPU_CACHE_MAX_BYTES; returns the bytes left.
int64_t Evict(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> entries;
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec) || e.path().extension() != ".bin") continue;
    total += static_cast<int64_t>(e.file_size(ec));
    entries.emplace_back(e.last_write_time(ec), e.path());
  }
  int64_t limit = MaxBytes();
  if (total <= limit) return total;
  std::sort(entries.begin(), entries.end());
  for (const auto& [time, path] : entries) {
    if (total <= limit) break;
    int64_t size = static_cast<int64_t>(fs::file_size(path, ec));
    if (fs::remove(path, ec)) total -= size;
  }
  return total;
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
  if (const char* env = std::getenv("TORCH_TPU_CACHE_DIR")) return env;  // "" turns the cache off
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
  if (ec) {
    WarnUnusable("folder " + dir.string(), ec.message());
    return "";
  }
  return dir.string();
}

std::string DiskCacheKey(const std::string& module_text, const std::string& compile_options) {
  std::string all = module_text + '\0' + compile_options;
  return Hex(Fingerprint64(all, 0)) + Hex(Fingerprint64(all, 0x9e3779b97f4a7c15ull));
}

bool DiskCacheRead(const std::string& dir, const std::string& key, std::string* bytes) {
  fs::path path = fs::path(dir) / (key + ".bin");
  // Opened without blocking and read only if it is a regular file: a FIFO or device planted
  // under an entry's name would otherwise block or feed the loader endless bytes.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return false;
  }
  FILE* f = ::fdopen(fd, "rb");
  if (f == nullptr) {
    ::close(fd);
    return false;
  }
  auto read = [&](void* dst, size_t n) { return std::fread(dst, 1, n, f) == n; };
  char magic[8];
  uint64_t key_size = 0, size = 0, checksum = 0;
  bool ok = read(magic, 8) && std::memcmp(magic, kMagic, 8) == 0 && read(&key_size, 8) && key_size == key.size();
  std::string recorded(ok ? key_size : 0, '\0');
  ok = ok && read(recorded.data(), key_size) && recorded == key;  // an entry written for another key
  ok = ok && read(&size, 8) && read(&checksum, 8) && size <= (uint64_t{1} << 34) &&
       size + 32 + key_size == static_cast<uint64_t>(st.st_size);
  if (ok) {
    bytes->resize(size);
    ok = read(bytes->data(), size);
  }
  std::fclose(f);
  if (!ok || Fingerprint64(*bytes, 0) != checksum) return false;  // truncated or damaged: recompile
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
    if (!out) {
      WarnUnusable("folder " + dir, std::string("cannot write ") + tmp.filename().string() + ": " + std::strerror(errno));
      return;
    }
    uint64_t key_size = key.size(), size = bytes.size(), checksum = Fingerprint64(bytes, 0);
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(&key_size), 8);
    out.write(key.data(), static_cast<std::streamsize>(key.size()));
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
  // The folder's size is scanned once, then followed by what this process writes: the scan
  // (and eviction) runs again only when the limit may be passed, so compiles stay cheap.
  static std::mutex mu;
  static int64_t estimate = -1;
  std::lock_guard<std::mutex> lock(mu);
  if (estimate < 0) estimate = FolderBytes(dir);
  else estimate += static_cast<int64_t>(bytes.size() + key.size() + 32);
  if (estimate > MaxBytes()) estimate = Evict(dir);
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
