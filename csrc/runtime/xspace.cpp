#include "xspace.h"

#include <map>
#include <stdexcept>
#include <string_view>

namespace tpu::runtime::profiler {
namespace {

// One protobuf message's fields, read in order (wire types 0, 1, 2, 5; groups are not used).
class Fields {
 public:
  explicit Fields(std::string_view data) : data_(data) {}
  // Advances to the next field: false at the end.
  bool Next() {
    if (pos_ >= data_.size()) return false;
    uint64_t tag = Varint();
    field_ = static_cast<int>(tag >> 3);
    wire_ = static_cast<int>(tag & 7);
    switch (wire_) {
      case 0: value_ = Varint(); break;
      case 1: value_ = Fixed(8); break;
      case 5: value_ = Fixed(4); break;
      case 2: {
        uint64_t n = Varint();
        if (n > data_.size() - pos_) throw std::runtime_error("XSpace: a field runs past the end of its message");
        bytes_ = data_.substr(pos_, n);
        pos_ += n;
        break;
      }
      default: throw std::runtime_error("XSpace: unsupported wire type " + std::to_string(wire_));
    }
    return true;
  }
  int field() const { return field_; }
  bool is_int() const { return wire_ == 0; }
  bool is_bytes() const { return wire_ == 2; }
  int64_t int_value() const { return static_cast<int64_t>(value_); }
  std::string_view bytes() const { return bytes_; }

 private:
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) throw std::runtime_error("XSpace: truncated varint");
      uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("XSpace: varint longer than 10 bytes");
  }
  uint64_t Fixed(size_t n) {
    if (n > data_.size() - pos_) throw std::runtime_error("XSpace: truncated fixed-width field");
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    pos_ += n;
    return v;
  }
  std::string_view data_;
  size_t pos_ = 0;
  int field_ = 0;
  int wire_ = 0;
  uint64_t value_ = 0;
  std::string_view bytes_;
};

// XEventMetadata: id = 1, name = 2, display_name = 4.
std::pair<int64_t, std::string> EventMetadata(std::string_view data) {
  int64_t id = 0;
  std::string name, display;
  for (Fields f(data); f.Next();) {
    if (f.field() == 1 && f.is_int()) id = f.int_value();
    if (f.field() == 2 && f.is_bytes()) name = f.bytes();
    if (f.field() == 4 && f.is_bytes()) display = f.bytes();
  }
  return {id, display.empty() ? name : display};
}

struct RawEvent {
  int64_t metadata_id = 0;
  bool timed = false;
  int64_t offset_ps = 0, duration_ps = 0;
};

// XLine: name = 2, timestamp_ns = 3, events = 4, display_name = 11.
// XEvent: metadata_id = 1, offset_ps = 2 (or num_occurrences = 5), duration_ps = 3.
void Line(std::string_view data, const std::string& plane, const std::map<int64_t, std::string>& names,
          std::vector<DeviceOp>& out) {
  std::string name, display;
  int64_t timestamp_ns = 0;
  std::vector<RawEvent> events;
  for (Fields f(data); f.Next();) {
    if (f.field() == 2 && f.is_bytes()) name = f.bytes();
    if (f.field() == 11 && f.is_bytes()) display = f.bytes();
    if (f.field() == 3 && f.is_int()) timestamp_ns = f.int_value();
    if (f.field() == 4 && f.is_bytes()) {
      RawEvent e;
      for (Fields g(f.bytes()); g.Next();) {
        if (!g.is_int()) continue;
        if (g.field() == 1) e.metadata_id = g.int_value();
        if (g.field() == 2) e.timed = true, e.offset_ps = g.int_value();
        if (g.field() == 3) e.duration_ps = g.int_value();
      }
      events.push_back(e);
    }
  }
  for (const RawEvent& e : events) {
    if (!e.timed) continue;
    auto it = names.find(e.metadata_id);
    DeviceOp op;
    op.plane = plane;
    op.line = display.empty() ? name : display;
    op.name = it == names.end() ? "event " + std::to_string(e.metadata_id) : it->second;
    op.start_ns = timestamp_ns + e.offset_ps / 1000;
    op.end_ns = op.start_ns + e.duration_ps / 1000;
    out.push_back(std::move(op));
  }
}

}  // namespace

std::vector<DeviceOp> XSpaceEvents(const std::string& bytes) {
  std::vector<DeviceOp> out;
  // XSpace: planes = 1. XPlane: name = 2, lines = 3, event_metadata = 4 (map entries: key = 1,
  // value = 2). Lines are decoded once the plane's metadata is known (fields come in any order).
  for (Fields space(bytes); space.Next();) {
    if (space.field() != 1 || !space.is_bytes()) continue;
    std::string plane;
    std::map<int64_t, std::string> names;
    std::vector<std::string_view> lines;
    for (Fields f(space.bytes()); f.Next();) {
      if (f.field() == 2 && f.is_bytes()) plane = f.bytes();
      if (f.field() == 3 && f.is_bytes()) lines.push_back(f.bytes());
      if (f.field() == 4 && f.is_bytes()) {
        int64_t key = 0;
        std::pair<int64_t, std::string> value;
        for (Fields entry(f.bytes()); entry.Next();) {
          if (entry.field() == 1 && entry.is_int()) key = entry.int_value();
          if (entry.field() == 2 && entry.is_bytes()) value = EventMetadata(entry.bytes());
        }
        names[key] = value.second;
      }
    }
    for (std::string_view line : lines) Line(line, plane, names, out);
  }
  return out;
}

}  // namespace tpu::runtime::profiler
