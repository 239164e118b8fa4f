#include "compile_effort.h"

#include <cctype>
#include <set>
#include <string_view>

namespace tpu::runtime {
namespace {

// Operations that move or select values without computing new ones, and single correctly
// rounded conversions: their results never depend on the code generator. A scatter's combiner
// is checked line by line like any other operation.
bool MovesValues(std::string_view op) {
  static const std::set<std::string_view> kOps = {
      "bitcast_convert", "broadcast_in_dim", "compare",  "concatenate", "constant", "convert",
      "dynamic_slice",   "dynamic_update_slice", "gather", "iota",      "pad",      "reshape",
      "return",          "reverse",        "scatter",  "select",      "slice",    "transpose", "get_tuple_element",
      "tuple",           "and",            "or",       "not",         "xor"};
  return kOps.count(op) > 0;
}

// A float or complex element type anywhere on the line (tensor<4x8xf32>, tensor<bf16>, f8E4M3FN).
bool HasFloatType(std::string_view line) {
  for (std::string_view t : {"f16>", "f32>", "f64>", "xf8", "<f8", "complex<"})
    if (line.find(t) != std::string_view::npos) return true;
  return false;
}

}  // namespace

bool ExactAtAnyEffort(const std::string& module_text) {
  std::string_view text(module_text);
  if (text.find("custom_call") != std::string_view::npos || text.find("call @") != std::string_view::npos)
    return false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    bool float_line = HasFloatType(line);
    for (std::string_view dialect : {"stablehlo.", "chlo."}) {
      for (size_t at = line.find(dialect); at != std::string_view::npos; at = line.find(dialect, at + 1)) {
        if (at > 0 && line[at - 1] != ' ' && line[at - 1] != '"' && line[at - 1] != '(') continue;
        size_t start = at + dialect.size(), stop = start;
        while (stop < line.size() && (std::isalnum(static_cast<unsigned char>(line[stop])) || line[stop] == '_')) ++stop;
        std::string_view op = line.substr(start, stop - start);
        if (dialect == "chlo." || !MovesValues(op)) {
          if (float_line) return false;
        }
      }
    }
  }
  return true;
}

}  // namespace tpu::runtime
