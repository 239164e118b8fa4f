// The persistent compilation cache: one file per compiled program under a folder named by
// the plugin's platform, version and PJRT API version. Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace tpu::runtime {

// "" when disabled (TORCH_TPU_CACHE_DIR set to an empty string or the folder can't be made).
std::string DiskCacheDir(const std::string& platform, const std::string& platform_version, int api_major,
                         int api_minor);
// Hex key of a module and its compile options.
std::string DiskCacheKey(const std::string& module_text, const std::string& compile_options);
// True with the executable bytes when a complete, undamaged entry exists.
bool DiskCacheRead(const std::string& dir, const std::string& key, std::string* bytes);
// Atomic: written to a temp file, then renamed; evicts least recently used entries beyond
// TORCH_TPU_CACHE_MAX_BYTES (default 4 GiB).
void DiskCacheWrite(const std::string& dir, const std::string& key, const std::string& bytes);
// Removes every entry under the cache root; returns the number of files removed.
int64_t DiskCacheClear(const std::string& root);
std::string DiskCacheRoot();
uint64_t Fingerprint64(const std::string& data, uint64_t seed);

}  // namespace tpu::runtime
