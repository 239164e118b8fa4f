// Configuration read from environment variables, parsed strictly: a value that does not parse
// or lies out of range is an EnvError naming the variable and what it accepts, never a silent
// 0, 1 or default (std::atoll read "100MB" as 100 and "abc" as 0). Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace tpu::runtime {

class EnvError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// An integer in [min, max]; nullopt when the variable is unset or empty.
std::optional<int64_t> EnvInt(const char* name, int64_t min, int64_t max);
// A byte count: an integer or a number with an exponent (1e9), optionally followed by a unit:
// B, KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024); "2GiB", "100MB".
// Fractions round down to whole bytes. nullopt when unset or empty.
std::optional<int64_t> EnvBytes(const char* name);
// A duration in seconds: a non-negative decimal number (0.5, 5, 1e1). nullopt when unset or empty.
std::optional<double> EnvSeconds(const char* name);
// The same parsers over a given text (for tests and values that do not come from getenv).
int64_t ParseInt(const std::string& name, const std::string& text, int64_t min, int64_t max);
int64_t ParseBytes(const std::string& name, const std::string& text);
double ParseSeconds(const std::string& name, const std::string& text);

}  // namespace tpu::runtime
