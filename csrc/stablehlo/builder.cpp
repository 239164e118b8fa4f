#include "builder.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace tpu::shlo {

const char* MlirName(ElemType t) {
  switch (t) {
    case ElemType::Pred: return "i1";
    case ElemType::S8: return "i8";
    case ElemType::S16: return "i16";
    case ElemType::S32: return "i32";
    case ElemType::S64: return "i64";
    case ElemType::U8: return "ui8";
    case ElemType::U16: return "ui16";
    case ElemType::U32: return "ui32";
    case ElemType::U64: return "ui64";
    case ElemType::F16: return "f16";
    case ElemType::BF16: return "bf16";
    case ElemType::F32: return "f32";
    case ElemType::F64: return "f64";
    case ElemType::C64: return "complex<f32>";
    case ElemType::C128: return "complex<f64>";
  }
  return "?";
}

size_t ByteSize(ElemType t) {
  switch (t) {
    case ElemType::Pred: case ElemType::S8: case ElemType::U8: return 1;
    case ElemType::S16: case ElemType::U16: case ElemType::F16: case ElemType::BF16: return 2;
    case ElemType::S32: case ElemType::U32: case ElemType::F32: return 4;
    case ElemType::S64: case ElemType::U64: case ElemType::F64: case ElemType::C64: return 8;
    case ElemType::C128: return 16;
  }
  return 0;
}

bool IsFloat(ElemType t) {
  return t == ElemType::F16 || t == ElemType::BF16 || t == ElemType::F32 || t == ElemType::F64;
}
bool IsComplex(ElemType t) { return t == ElemType::C64 || t == ElemType::C128; }
bool IsSigned(ElemType t) {
  return t == ElemType::S8 || t == ElemType::S16 || t == ElemType::S32 || t == ElemType::S64;
}
bool IsUnsigned(ElemType t) {
  return t == ElemType::U8 || t == ElemType::U16 || t == ElemType::U32 || t == ElemType::U64;
}
bool IsInteger(ElemType t) { return IsSigned(t) || IsUnsigned(t); }

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string TensorType::str() const {
  std::string s = "tensor<";
  for (int64_t d : dims) s += std::to_string(d) + "x";
  return s + MlirName(elem) + ">";
}

std::string JoinInts(const std::vector<int64_t>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(v[i]);
  }
  return s;
}

std::string DenseI64(const std::vector<int64_t>& v) {
  return v.empty() ? "array<i64>" : "array<i64: " + JoinInts(v) + ">";
}

namespace {

std::string List(const std::vector<int64_t>& v) { return "[" + JoinInts(v) + "]"; }

std::string FunctionType(const std::vector<Value>& operands, const std::vector<TensorType>& results) {
  std::string s = "(";
  for (size_t i = 0; i < operands.size(); ++i) s += (i ? ", " : "") + operands[i].type.str();
  s += ") -> ";
  if (results.size() == 1) return s + results[0].str();
  s += "(";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + results[i].str();
  return s + ")";
}

// Hex bit patterns for infinities, which MLIR float literals cannot spell.
std::string InfinityLiteral(ElemType t, bool negative) {
  switch (t) {
    case ElemType::F16: return negative ? "0xFC00" : "0x7C00";
    case ElemType::BF16: return negative ? "0xFF80" : "0x7F80";
    case ElemType::F32: return negative ? "0xFF800000" : "0x7F800000";
    default: return negative ? "0xFFF0000000000000" : "0x7FF0000000000000";
  }
}

std::string NanLiteral(ElemType t) {
  switch (t) {
    case ElemType::F16: return "0x7E00";
    case ElemType::BF16: return "0x7FC0";
    case ElemType::F32: return "0x7FC00000";
    default: return "0x7FF8000000000000";
  }
}

std::string FloatLiteral(double v, ElemType t) {
  if (std::isnan(v)) return NanLiteral(t);
  if (std::isinf(v)) return InfinityLiteral(t, v < 0);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17e", v);
  return buf;
}

}  // namespace

Value Builder::Param(const TensorType& type) {
  Value v{NewId(), type};
  params_.push_back(v);
  return v;
}

std::vector<Value> Builder::Op(const std::string& name, const std::vector<Value>& operands,
                               const std::vector<TensorType>& results, const std::string& attrs,
                               const std::string& region) {
  std::vector<Value> out;
  std::string line = "    ";
  if (!results.empty()) {
    int id = NewId();
    if (results.size() == 1) {
      line += "%" + std::to_string(id) + " = ";
      out.push_back({id, results[0]});
    } else {
      line += "%" + std::to_string(id) + ":" + std::to_string(results.size()) + " = ";
      for (size_t i = 0; i < results.size(); ++i) out.push_back({id, results[i], static_cast<int>(i)});
    }
  }
  line += "\"" + name + "\"(";
  for (size_t i = 0; i < operands.size(); ++i) line += (i ? ", " : "") + operands[i].ref();
  line += ")";
  if (!region.empty()) line += " (" + region + ")";
  if (!attrs.empty()) line += " {" + attrs + "}";
  line += " : " + FunctionType(operands, results) + "\n";
  body_ += line;
  return out;
}

Value Builder::Op1(const std::string& name, const std::vector<Value>& operands,
                   const TensorType& result, const std::string& attrs, const std::string& region) {
  return Op(name, operands, {result}, attrs, region)[0];
}

std::string Builder::Function(const std::string& name, const std::vector<Value>& results, bool is_public,
                              const std::vector<std::pair<int, int>>& aliases) const {
  std::string s = std::string("  func.func ") + (is_public ? "public" : "private") + " @" + name + "(";
  for (size_t i = 0; i < params_.size(); ++i) {
    s += (i ? ", " : "") + params_[i].ref() + ": " + params_[i].type.str();
    for (const auto& [param, result] : aliases)
      if (param == static_cast<int>(i)) s += " {tf.aliasing_output = " + std::to_string(result) + " : i32}";
  }
  s += ") -> (";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + results[i].type.str();
  s += ") {\n" + body_ + "    \"func.return\"(";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + results[i].ref();
  s += ") : (";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + results[i].type.str();
  s += ") -> ()\n  }\n";
  return s;
}

void Builder::Import(const std::string& name, const std::string& functions) {
  for (const auto& [n, text] : imports_)
    if (n == name) return;
  imports_.emplace_back(name, functions);
}

std::string Builder::Module(const std::vector<Value>& results, const std::vector<std::pair<int, int>>& aliases) const {
  std::string imported;
  for (const auto& [name, text] : imports_) imported += text;
  return WrapModule(imported + Function("main", results, true, aliases));
}

std::string WrapModule(const std::string& functions) {
  return "module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n" +
         functions + "}\n";
}

Value Builder::Constant(double v, const TensorType& type) {
  std::string lit;
  if (type.elem == ElemType::Pred) {
    lit = v != 0 ? "true" : "false";
  } else if (IsFloat(type.elem)) {
    lit = FloatLiteral(v, type.elem);
  } else if (IsInteger(type.elem)) {
    lit = std::to_string(static_cast<int64_t>(v));
  } else {  // complex: (v, 0)
    ElemType part = type.elem == ElemType::C64 ? ElemType::F32 : ElemType::F64;
    TensorType scalar{type.elem, {}};
    Value re = Constant(v, {part, {}}), im = Constant(0, {part, {}});
    Value c = Op1("stablehlo.complex", {re, im}, scalar);
    return type.dims.empty() ? c : BroadcastInDim(c, type.dims, {});
  }
  TensorType scalar{type.elem, {}};
  Value c = Op1("stablehlo.constant", {}, scalar, "value = dense<" + lit + "> : " + scalar.str());
  return type.dims.empty() ? c : BroadcastInDim(c, type.dims, {});
}

Value Builder::ConstantInt(int64_t v, const TensorType& type) {
  if (IsFloat(type.elem)) return Constant(static_cast<double>(v), type);
  TensorType scalar{type.elem, {}};
  std::string lit = type.elem == ElemType::Pred ? (v ? "true" : "false") : std::to_string(v);
  Value c = Op1("stablehlo.constant", {}, scalar, "value = dense<" + lit + "> : " + scalar.str());
  return type.dims.empty() ? c : BroadcastInDim(c, type.dims, {});
}

Value Builder::Extreme(bool largest, const TensorType& type) {
  if (IsFloat(type.elem)) {
    return Constant(largest ? std::numeric_limits<double>::infinity()
                            : -std::numeric_limits<double>::infinity(), type);
  }
  TensorType scalar{type.elem, {}};
  std::string lit;
  switch (type.elem) {
    case ElemType::Pred: lit = largest ? "true" : "false"; break;
    case ElemType::S8: lit = largest ? "127" : "-128"; break;
    case ElemType::S16: lit = largest ? "32767" : "-32768"; break;
    case ElemType::S32: lit = largest ? "2147483647" : "-2147483648"; break;
    case ElemType::S64: lit = largest ? "9223372036854775807" : "-9223372036854775808"; break;
    case ElemType::U8: lit = largest ? "255" : "0"; break;
    case ElemType::U16: lit = largest ? "65535" : "0"; break;
    case ElemType::U32: lit = largest ? "4294967295" : "0"; break;
    case ElemType::U64: lit = largest ? "18446744073709551615" : "0"; break;
    default: throw std::invalid_argument("no extreme value for this type");
  }
  Value c = Op1("stablehlo.constant", {}, scalar, "value = dense<" + lit + "> : " + scalar.str());
  return type.dims.empty() ? c : BroadcastInDim(c, type.dims, {});
}

Value Builder::Iota(const TensorType& type, int64_t dim) {
  return Op1("stablehlo.iota", {}, type, "iota_dimension = " + std::to_string(dim) + " : i64");
}

// A convert into complex<f64>, or between complex widths, is built from its parts: libtpu's
// compiler aborts the process on one stablehlo.convert from any type to c128 or from c128 to
// c64 ("Unsupported CVT X{64|128} expansion"); the parts convert on every platform.
Value Builder::Convert(Value v, ElemType to) {
  if (v.type.elem == to) return v;
  if (IsComplex(to) && (to == ElemType::C128 || IsComplex(v.type.elem))) {
    TensorType part{to == ElemType::C64 ? ElemType::F32 : ElemType::F64, v.type.dims};
    Value re, im;
    if (IsComplex(v.type.elem)) {
      TensorType from_part{v.type.elem == ElemType::C64 ? ElemType::F32 : ElemType::F64, v.type.dims};
      re = Convert(Op1("stablehlo.real", {v}, from_part), part.elem);
      im = Convert(Op1("stablehlo.imag", {v}, from_part), part.elem);
    } else {
      re = Convert(v, part.elem);
      im = Constant(0, part);
    }
    return Op1("stablehlo.complex", {re, im}, {to, v.type.dims});
  }
  return Op1("stablehlo.convert", {v}, {to, v.type.dims});
}

Value Builder::BitcastConvert(Value v, const TensorType& to) {
  return Op1("stablehlo.bitcast_convert", {v}, to);
}

Value Builder::Reshape(Value v, const std::vector<int64_t>& dims) {
  if (v.member < 0) {
    auto it = reshaped_from_.find(v.id);
    if (it != reshaped_from_.end()) v = it->second;
  }
  if (v.type.dims == dims) return v;
  Value r = Op1("stablehlo.reshape", {v}, {v.type.elem, dims});
  reshaped_from_[r.id] = v;
  return r;
}

Value Builder::Transpose(Value v, const std::vector<int64_t>& perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (identity) return v;
  std::vector<int64_t> dims;
  for (int64_t p : perm) dims.push_back(v.type.dims[p]);
  return Op1("stablehlo.transpose", {v}, {v.type.elem, dims}, "permutation = " + DenseI64(perm));
}

Value Builder::BroadcastInDim(Value v, const std::vector<int64_t>& dims,
                              const std::vector<int64_t>& mapping) {
  if (v.type.dims == dims && static_cast<int64_t>(mapping.size()) == v.type.rank()) {
    bool identity = true;
    for (size_t i = 0; i < mapping.size(); ++i) identity &= mapping[i] == static_cast<int64_t>(i);
    if (identity) return v;
  }
  return Op1("stablehlo.broadcast_in_dim", {v}, {v.type.elem, dims},
             "broadcast_dimensions = " + DenseI64(mapping));
}

Value Builder::BroadcastTo(Value v, const std::vector<int64_t>& dims) {
  if (v.type.dims == dims) return v;
  int64_t offset = static_cast<int64_t>(dims.size()) - v.type.rank();
  if (offset < 0) throw std::invalid_argument("cannot broadcast " + v.type.str() + " to fewer dims");
  std::vector<int64_t> mapping;
  std::vector<int64_t> squeezed;  // size-1 dims that must expand are dropped first
  bool needs_reshape = false;
  for (int64_t i = 0; i < v.type.rank(); ++i) {
    int64_t d = v.type.dims[i], target = dims[offset + i];
    if (d == target) {
      mapping.push_back(offset + i);
      squeezed.push_back(d);
    } else if (d == 1) {
      needs_reshape = true;
    } else {
      throw std::invalid_argument("cannot broadcast " + v.type.str() + " to shape [" + JoinInts(dims) + "]");
    }
  }
  if (needs_reshape) v = Reshape(v, squeezed);
  return BroadcastInDim(v, dims, mapping);
}

Value Builder::Slice(Value v, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
                     const std::vector<int64_t>& strides) {
  std::vector<int64_t> dims;
  bool identity = true;
  for (size_t i = 0; i < start.size(); ++i) {
    dims.push_back((limit[i] - start[i] + strides[i] - 1) / strides[i]);
    identity &= start[i] == 0 && limit[i] == v.type.dims[i] && strides[i] == 1;
  }
  if (identity) return v;
  return Op1("stablehlo.slice", {v}, {v.type.elem, dims},
             "start_indices = " + DenseI64(start) + ", limit_indices = " + DenseI64(limit) +
                 ", strides = " + DenseI64(strides));
}

Value Builder::Pad(Value v, Value pad_value, const std::vector<int64_t>& low,
                   const std::vector<int64_t>& high, const std::vector<int64_t>& interior) {
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < v.type.rank(); ++i) {
    int64_t d = v.type.dims[i];
    dims.push_back(low[i] + high[i] + d + (d > 0 ? (d - 1) * interior[i] : 0));
  }
  return Op1("stablehlo.pad", {v, pad_value}, {v.type.elem, dims},
             "edge_padding_low = " + DenseI64(low) + ", edge_padding_high = " + DenseI64(high) +
                 ", interior_padding = " + DenseI64(interior));
}

Value Builder::Concatenate(const std::vector<Value>& vs, int64_t dim) {
  if (vs.size() == 1) return vs[0];
  TensorType t = vs[0].type;
  t.dims[dim] = 0;
  for (const Value& v : vs) t.dims[dim] += v.type.dims[dim];
  return Op1("stablehlo.concatenate", vs, t, "dimension = " + std::to_string(dim) + " : i64");
}

Value Builder::Compare(Cmp dir, Value a, Value b) {
  static const char* kNames[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  std::string attrs = std::string("comparison_direction = #stablehlo<comparison_direction ") +
                      kNames[static_cast<int>(dir)] + ">";
  if (IsFloat(a.type.elem)) attrs += ", compare_type = #stablehlo<comparison_type FLOAT>";
  else if (IsUnsigned(a.type.elem) || a.type.elem == ElemType::Pred)
    attrs += ", compare_type = #stablehlo<comparison_type UNSIGNED>";
  else if (IsSigned(a.type.elem)) attrs += ", compare_type = #stablehlo<comparison_type SIGNED>";
  return Op1("stablehlo.compare", {a, b}, {ElemType::Pred, a.type.dims}, attrs);
}

Value Builder::Select(Value pred, Value on_true, Value on_false) {
  return Op1("stablehlo.select", {pred, on_true, on_false}, on_true.type);
}

Value Builder::Binary(const std::string& op, Value a, Value b) {
  return Op1("stablehlo." + op, {a, b}, a.type);
}

Value Builder::Unary(const std::string& op, Value a) { return Op1("stablehlo." + op, {a}, a.type); }

Value Builder::Reduce(Value v, Value init, const std::vector<int64_t>& dims, const std::string& body_op) {
  TensorType scalar{v.type.elem, {}};
  int a = NewId(), b = NewId(), r = NewId();
  std::string region = "{\n    ^bb0(%" + std::to_string(a) + ": " + scalar.str() + ", %" +
                       std::to_string(b) + ": " + scalar.str() + "):\n      %" + std::to_string(r) +
                       " = \"stablehlo." + body_op + "\"(%" + std::to_string(a) + ", %" +
                       std::to_string(b) + ") : (" + scalar.str() + ", " + scalar.str() + ") -> " +
                       scalar.str() + "\n      \"stablehlo.return\"(%" + std::to_string(r) + ") : (" +
                       scalar.str() + ") -> ()\n    }";
  std::vector<int64_t> out_dims;
  for (int64_t i = 0; i < v.type.rank(); ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced |= d == i;
    if (!reduced) out_dims.push_back(v.type.dims[i]);
  }
  if (dims.empty()) return v;
  return Op1("stablehlo.reduce", {v, init}, {v.type.elem, out_dims}, "dimensions = " + DenseI64(dims), region);
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::Default: return "DEFAULT";
    case Precision::High: return "HIGH";
    case Precision::Highest: return "HIGHEST";
  }
  return "HIGHEST";
}

Precision ProductPrecision(ElemType elem, Precision f32) {
  if (elem == ElemType::F32) return f32;
  return elem == ElemType::F64 ? Precision::Highest : Precision::Default;
}

namespace {
bool x64_dots_as_reductions = false;
bool IsX64Integer(ElemType t) { return t == ElemType::S64 || t == ElemType::U64; }
bool Contains(const std::vector<int64_t>& v, int64_t x) {
  for (int64_t y : v) if (y == x) return true;
  return false;
}
}  // namespace

void SetX64DotsAsReductions(bool on) { x64_dots_as_reductions = on; }
bool X64DotsAsReductions() { return x64_dots_as_reductions; }

// The dot as a broadcast multiply over [batch, lhs free, rhs free, contracting] summed over
// the contracting dims: the same wrapping 64-bit sums, in ops libtpu compiles.
Value Builder::DotAsReduction(Value lhs, Value rhs, const std::vector<int64_t>& lhs_batch,
                              const std::vector<int64_t>& rhs_batch, const std::vector<int64_t>& lhs_contract,
                              const std::vector<int64_t>& rhs_contract, ElemType result_elem) {
  std::vector<int64_t> lhs_perm = lhs_batch, rhs_perm = rhs_batch, lhs_free, rhs_free;
  for (int64_t i = 0; i < lhs.type.rank(); ++i)
    if (!Contains(lhs_batch, i) && !Contains(lhs_contract, i)) lhs_free.push_back(i);
  for (int64_t i = 0; i < rhs.type.rank(); ++i)
    if (!Contains(rhs_batch, i) && !Contains(rhs_contract, i)) rhs_free.push_back(i);
  lhs_perm.insert(lhs_perm.end(), lhs_free.begin(), lhs_free.end());
  lhs_perm.insert(lhs_perm.end(), lhs_contract.begin(), lhs_contract.end());
  rhs_perm.insert(rhs_perm.end(), rhs_free.begin(), rhs_free.end());
  rhs_perm.insert(rhs_perm.end(), rhs_contract.begin(), rhs_contract.end());
  Value l = Convert(Transpose(lhs, lhs_perm), result_elem), r = Convert(Transpose(rhs, rhs_perm), result_elem);
  int64_t nb = lhs_batch.size(), nl = lhs_free.size(), nr = rhs_free.size(), nc = lhs_contract.size();
  std::vector<int64_t> dims, lhs_map, rhs_map, contract;
  for (int64_t i = 0; i < nb + nl; ++i) dims.push_back(l.type.dims[i]);
  for (int64_t i = 0; i < nr; ++i) dims.push_back(r.type.dims[nb + i]);
  for (int64_t i = 0; i < nc; ++i) dims.push_back(l.type.dims[nb + nl + i]);
  for (int64_t i = 0; i < nb + nl; ++i) lhs_map.push_back(i);
  for (int64_t i = 0; i < nb; ++i) rhs_map.push_back(i);
  for (int64_t i = 0; i < nr; ++i) rhs_map.push_back(nb + nl + i);
  for (int64_t i = 0; i < nc; ++i) {
    lhs_map.push_back(nb + nl + nr + i);
    rhs_map.push_back(nb + nl + nr + i);
    contract.push_back(nb + nl + nr + i);
  }
  Value product = Binary("multiply", BroadcastInDim(l, dims, lhs_map), BroadcastInDim(r, dims, rhs_map));
  if (contract.empty()) return product;
  return Reduce(product, Constant(0, {result_elem, {}}), contract, "add");
}

Value Builder::DotGeneral(Value lhs, Value rhs, const std::vector<int64_t>& lhs_batch,
                          const std::vector<int64_t>& rhs_batch, const std::vector<int64_t>& lhs_contract,
                          const std::vector<int64_t>& rhs_contract, ElemType result_elem, Precision f32) {
  if (x64_dots_as_reductions && (IsX64Integer(lhs.type.elem) || IsX64Integer(result_elem)))
    return DotAsReduction(lhs, rhs, lhs_batch, rhs_batch, lhs_contract, rhs_contract, result_elem);
  std::vector<int64_t> dims;
  auto contains = Contains;
  for (int64_t d : lhs_batch) dims.push_back(lhs.type.dims[d]);
  for (int64_t i = 0; i < lhs.type.rank(); ++i)
    if (!contains(lhs_batch, i) && !contains(lhs_contract, i)) dims.push_back(lhs.type.dims[i]);
  for (int64_t i = 0; i < rhs.type.rank(); ++i)
    if (!contains(rhs_batch, i) && !contains(rhs_contract, i)) dims.push_back(rhs.type.dims[i]);
  std::string nums;
  auto field = [&](const char* name, const std::vector<int64_t>& v) {
    if (v.empty()) return;
    if (!nums.empty()) nums += ", ";
    nums += std::string(name) + " = " + List(v);
  };
  field("lhs_batching_dimensions", lhs_batch);
  field("rhs_batching_dimensions", rhs_batch);
  field("lhs_contracting_dimensions", lhs_contract);
  field("rhs_contracting_dimensions", rhs_contract);
  std::string attrs = "dot_dimension_numbers = #stablehlo.dot<" + nums + ">";
  // f32 and f64 products say how to multiply: a TPU otherwise takes one bf16 pass for f32.
  if (lhs.type.elem == ElemType::F32 || lhs.type.elem == ElemType::F64) {
    std::string p = PrecisionName(ProductPrecision(lhs.type.elem, f32));
    attrs += ", precision_config = [#stablehlo<precision " + p + ">, #stablehlo<precision " + p + ">]";
  }
  return Op1("stablehlo.dot_general", {lhs, rhs}, {result_elem, dims}, attrs);
}

Value Builder::Gather1D(Value operand, Value indices) {
  std::vector<int64_t> idx_dims = indices.type.dims;
  idx_dims.push_back(1);
  Value idx = Reshape(indices, idx_dims);
  return Op1("stablehlo.gather", {operand, idx}, {operand.type.elem, indices.type.dims},
             "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], start_index_map = [0], "
             "index_vector_dim = " + std::to_string(indices.type.rank()) +
                 ">, slice_sizes = array<i64: 1>, indices_are_sorted = false");
}

Value Builder::Scatter1D(Value operand, Value indices, Value updates) {
  std::vector<int64_t> idx_dims = indices.type.dims;
  idx_dims.push_back(1);
  Value idx = Reshape(indices, idx_dims);
  TensorType scalar{operand.type.elem, {}};
  int a = NewId(), b = NewId();
  std::string region = "{\n    ^bb0(%" + std::to_string(a) + ": " + scalar.str() + ", %" +
                       std::to_string(b) + ": " + scalar.str() + "):\n      \"stablehlo.return\"(%" +
                       std::to_string(b) + ") : (" + scalar.str() + ") -> ()\n    }";
  return Op1("stablehlo.scatter", {operand, idx, updates}, operand.type,
             "scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], "
             "scatter_dims_to_operand_dims = [0], index_vector_dim = " +
                 std::to_string(indices.type.rank()) + ">, indices_are_sorted = false, unique_indices = false",
             region);
}

std::string Builder::Region(const std::vector<TensorType>& arg_types,
                            const std::function<std::vector<Value>(const std::vector<Value>&)>& body) {
  std::string outer;
  outer.swap(body_);
  std::vector<Value> args;
  std::string head = "{\n    ^bb0(";
  for (size_t i = 0; i < arg_types.size(); ++i) {
    args.push_back({NewId(), arg_types[i]});
    head += (i ? ", " : "") + args.back().ref() + ": " + arg_types[i].str();
  }
  std::vector<Value> results;
  try {
    results = body(args);
  } catch (...) {
    body_.swap(outer);
    throw;
  }
  std::string inner;
  inner.swap(body_);
  body_.swap(outer);
  std::string refs, types;
  for (size_t i = 0; i < results.size(); ++i) {
    refs += (i ? ", " : "") + results[i].ref();
    types += (i ? ", " : "") + results[i].type.str();
  }
  return head + "):\n" + inner + "      \"stablehlo.return\"(" + refs + ") : (" + types + ") -> ()\n    }";
}

Value Builder::DynamicUpdateSlice(Value operand, Value update, const std::vector<int64_t>& start) {
  std::vector<Value> operands = {operand, update};
  for (int64_t s : start) operands.push_back(ConstantInt(s, {ElemType::S64, {}}));
  return Op1("stablehlo.dynamic_update_slice", operands, operand.type);
}

Value Builder::DynamicUpdateSliceAt(Value operand, Value update, const std::vector<Value>& start) {
  std::vector<Value> operands = {operand, update};
  operands.insert(operands.end(), start.begin(), start.end());
  return Op1("stablehlo.dynamic_update_slice", operands, operand.type);
}

Value Builder::DynamicSlice(Value operand, const std::vector<Value>& start, const std::vector<int64_t>& sizes) {
  std::vector<Value> operands = {operand};
  operands.insert(operands.end(), start.begin(), start.end());
  return Op1("stablehlo.dynamic_slice", operands, {operand.type.elem, sizes}, "slice_sizes = " + DenseI64(sizes));
}

bool Builder::Uses(const Value& v) const {
  const std::string ref = v.ref();
  for (size_t at = body_.find(ref); at != std::string::npos; at = body_.find(ref, at + 1)) {
    char next = at + ref.size() < body_.size() ? body_[at + ref.size()] : ' ';
    if (!std::isdigit(static_cast<unsigned char>(next)) && next != '#') return true;
  }
  return false;
}

}  // namespace tpu::shlo
