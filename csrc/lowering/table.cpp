#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>

#include "lowering.h"

namespace tpu::lowering {
namespace {

std::map<std::string, LowerFn>& Table() {
  static std::map<std::string, LowerFn> table;
  return table;
}

std::map<std::string, LowerFn>& GraphTable() {
  static std::map<std::string, LowerFn> table;
  return table;
}

std::vector<Registration>& RegistrationLog() {
  static std::vector<Registration> log;
  return log;
}

std::map<std::string, SpecialScalar>& SpecialScalars() {
  static std::map<std::string, SpecialScalar> table;
  return table;
}

const char* KindName(Arg::Kind k) {
  switch (k) {
    case Arg::Kind::None: return "None";
    case Arg::Kind::Tensor: return "Tensor";
    case Arg::Kind::Int: return "int";
    case Arg::Kind::Double: return "float";
    case Arg::Kind::Bool: return "bool";
    case Arg::Kind::IntList: return "int[]";
    case Arg::Kind::DoubleList: return "float[]";
    case Arg::Kind::BoolList: return "bool[]";
    case Arg::Kind::String: return "str";
    case Arg::Kind::TensorList: return "Tensor[]";
  }
  return "?";
}

}  // namespace

bool Register(const char* op, LowerFn fn, const char* file, int line) {
  Table()[op] = fn;
  RegistrationLog().push_back({op, file, line, false});
  return true;
}

bool RegisterGraphOnly(const char* op, LowerFn fn, const char* file, int line) {
  GraphTable()[op] = fn;
  RegistrationLog().push_back({op, file, line, true});
  return true;
}

std::vector<Registration> Registrations() { return RegistrationLog(); }
bool RegisterSpecialScalar(const char* op, const char* arg, SpecialScalarFn special) {
  SpecialScalars()[op] = SpecialScalar{arg, special};
  return true;
}

const SpecialScalar* FindSpecialScalar(const std::string& op) {
  auto it = SpecialScalars().find(op);
  return it == SpecialScalars().end() ? nullptr : &it->second;
}


size_t Args::index(std::string_view name) const {
  if (names_) {
    for (size_t i = 0; i < names_->size() && i < args_.size(); ++i)
      if ((*names_)[i] == name) return i;
  }
  throw std::invalid_argument("lowering reads argument '" + std::string(name) + "', which " +
                              (names_ ? "the op does not have" : "the caller did not name"));
}

LowerFn Find(const std::string& op) {
  auto it = Table().find(op);
  if (it != Table().end()) return it->second;
  auto g = GraphTable().find(op);
  return g == GraphTable().end() ? nullptr : g->second;
}

std::vector<std::string> RegisteredOps() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : Table()) names.push_back(name);
  return names;
}

std::vector<std::string> GraphOnlyOps() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : GraphTable())
    if (!Table().count(name)) names.push_back(name);
  return names;
}

const Arg& Args::at(size_t i, Arg::Kind kind, const char* what) const {
  if (i >= args_.size() || args_[i].kind != kind) {
    throw std::invalid_argument(std::string("lowering expected ") + what + " at argument " +
                                std::to_string(i) + ", got " +
                                (i < args_.size() ? KindName(args_[i].kind) : "nothing"));
  }
  return args_[i];
}

const Value& Args::tensor(size_t i) const { return at(i, Arg::Kind::Tensor, "a tensor").value; }
Value Args::optional_tensor(size_t i) const { return is_none(i) ? Value{} : tensor(i); }
const std::vector<Value>& Args::tensors(size_t i) const {
  return at(i, Arg::Kind::TensorList, "a tensor list").values;
}
int64_t Args::int_(size_t i) const {
  if (i < args_.size() && args_[i].kind == Arg::Kind::Bool) return args_[i].b;
  return at(i, Arg::Kind::Int, "an int").i;
}
double Args::double_(size_t i) const {
  if (i < args_.size() && args_[i].kind == Arg::Kind::Int) return static_cast<double>(args_[i].i);
  return at(i, Arg::Kind::Double, "a float").d;
}
bool Args::bool_(size_t i) const { return at(i, Arg::Kind::Bool, "a bool").b; }
const std::vector<int64_t>& Args::ints(size_t i) const {
  return at(i, Arg::Kind::IntList, "an int list").ints;
}
const std::string& Args::str(size_t i) const { return at(i, Arg::Kind::String, "a string").s; }

namespace {
// Float to integer as PyTorch's CPU kernels convert on x86 (a C cast, cvtt*2si): values in
// range truncate toward zero; NaN, +-inf and values out of range become the minimum of the
// 32-bit (or 64-bit) intermediate; narrower types keep its low bits ([-1., 300.] to uint8 is
// [255, 44]). XLA would saturate instead (NaN to 0).
Value FloatToInt(Ctx& ctx, Value v, ElemType elem) {
  if (elem == ElemType::U64) return ctx.b.Convert(v, elem);
  if (v.type.elem == ElemType::F16 || v.type.elem == ElemType::BF16) v = ctx.b.Convert(v, ElemType::F32);
  bool wide = elem == ElemType::S64 || elem == ElemType::U32;
  ElemType via = wide ? ElemType::S64 : ElemType::S32;
  double limit = wide ? 9223372036854775808.0 : 2147483648.0;
  Value in_range = ctx.b.Op1("stablehlo.and",
                             {ctx.b.Compare(Cmp::GE, v, ctx.b.Constant(-limit, v.type)),
                              ctx.b.Compare(Cmp::LT, v, ctx.b.Constant(limit, v.type))},
                             {ElemType::Pred, v.type.dims});
  TensorType via_type{via, v.type.dims};
  Value minimum = ctx.b.ConstantInt(wide ? INT64_MIN : INT32_MIN, via_type);
  Value r = ctx.b.Select(in_range, ctx.b.Convert(v, via), minimum);
  return elem == via ? r : ctx.b.Convert(r, elem);  // integer narrowing keeps the low bits
}
}  // namespace

Value ConvertTo(Ctx& ctx, Value v, ElemType elem) {
  if (v.type.elem == elem) return v;
  // PyTorch casts float to bool as `x != 0`, while stablehlo.convert is the same; integer to
  // bool likewise.
  if (IsFloat(v.type.elem) && !IsFloat(elem) && !IsComplex(elem) && elem != ElemType::Pred)
    return FloatToInt(ctx, v, elem);
  // bool goes to float through s32: XLA rewrites convert(pred) * y and x / convert(pred) as
  // selects, which turn False * inf and False / False into 0 where PyTorch gives NaN.
  if (v.type.elem == ElemType::Pred && IsFloat(elem)) v = ctx.b.Convert(v, ElemType::S32);
  return ctx.b.Convert(v, elem);
}

Value BroadcastTo(Ctx& ctx, Value v, const std::vector<int64_t>& dims) { return ctx.b.BroadcastTo(v, dims); }

Value CastTo(Ctx& ctx, Value v, const TensorType& t) { return BroadcastTo(ctx, ConvertTo(ctx, v, t.elem), t.dims); }

Value Splat(Ctx& ctx, double v, const TensorType& t) { return ctx.b.Constant(v, t); }

ElemType AccumulatorType(ElemType t) {
  return (t == ElemType::F16 || t == ElemType::BF16) ? ElemType::F32 : t;
}

int64_t WrapDim(int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r) throw std::out_of_range("Dimension out of range");
  return dim < 0 ? dim + r : dim;
}

std::vector<int64_t> WrapDims(const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t d : dims) out.push_back(WrapDim(d, rank));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (rank == 0) out.clear();
  return out;
}

}  // namespace tpu::lowering
