#include "env.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace tpu::runtime {
namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

int64_t ParseInt(const std::string& name, const std::string& text, int64_t min, int64_t max) {
  std::string t = Trim(text);
  errno = 0;
  char* end = nullptr;
  long long v = t.empty() ? 0 : std::strtoll(t.c_str(), &end, 10);
  if (t.empty() || *end != '\0' || errno == ERANGE) {
    throw EnvError(name + "='" + text + "' is not an integer (expected a whole number from " + std::to_string(min) +
                   " to " + std::to_string(max) + ")");
  }
  if (v < min || v > max) {
    throw EnvError(name + "=" + t + " is out of range: expected a whole number from " + std::to_string(min) + " to " +
                   std::to_string(max));
  }
  return v;
}

int64_t ParseBytes(const std::string& name, const std::string& text) {
  std::string t = Trim(text);
  const char* start = t.c_str();
  char* end = nullptr;
  errno = 0;
  double number = t.empty() ? 0 : std::strtod(start, &end);
  std::string unit = end ? Lower(Trim(end)) : "";
  double scale = -1;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "tb") scale = 1e12;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  bool parsed = !t.empty() && end != start && errno != ERANGE && std::isfinite(number);
  // strtod also reads "inf", "nan" and hex floats: only plain decimal numbers are sizes.
  for (const char* p = start; parsed && p < end; ++p)
    parsed = std::isdigit(static_cast<unsigned char>(*p)) || *p == '.' || *p == 'e' || *p == 'E' || *p == '+' ||
             *p == '-';
  if (!parsed || scale < 0) {
    throw EnvError(name + "='" + text +
                   "' is not a byte size: expected a number of bytes, optionally with an exponent (1e9) or a unit "
                   "(B, KB, MB, GB, TB = powers of 1000; KiB, MiB, GiB, TiB = powers of 1024), e.g. 100MB or 2GiB");
  }
  double bytes = std::floor(number * scale);
  if (bytes < 0 || bytes > 9.2e18) {
    throw EnvError(name + "=" + t + " is out of range: expected a byte size from 0 to 8 EiB");
  }
  return static_cast<int64_t>(bytes);
}

double ParseSeconds(const std::string& name, const std::string& text) {
  std::string t = Trim(text);
  char* end = nullptr;
  errno = 0;
  double seconds = t.empty() ? 0 : std::strtod(t.c_str(), &end);
  bool parsed = !t.empty() && *end == '\0' && errno != ERANGE && std::isfinite(seconds) && seconds >= 0;
  // strtod also reads "inf", "nan" and hex floats: only plain decimal numbers are durations.
  for (const char* p = t.c_str(); parsed && p < end; ++p)
    parsed = std::isdigit(static_cast<unsigned char>(*p)) || *p == '.' || *p == 'e' || *p == 'E' || *p == '+' ||
             *p == '-';
  if (!parsed) {
    throw EnvError(name + "='" + text + "' is not a duration: expected a number of seconds from 0, e.g. 5 or 0.5");
  }
  return seconds;
}

std::optional<int64_t> EnvInt(const char* name, int64_t min, int64_t max) {
  const char* v = std::getenv(name);
  if (v == nullptr || Trim(v).empty()) return std::nullopt;
  return ParseInt(name, v, min, max);
}

std::optional<int64_t> EnvBytes(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || Trim(v).empty()) return std::nullopt;
  return ParseBytes(name, v);
}

std::optional<double> EnvSeconds(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || Trim(v).empty()) return std::nullopt;
  return ParseSeconds(name, v);
}

}  // namespace tpu::runtime
