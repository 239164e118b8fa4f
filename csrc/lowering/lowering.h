// The lowering table: one free function per ATen op over typed operands, shared by eager
// (strict and fused) and compiled execution. No torch headers here: arguments arrive in a
// neutral form, output types come from the caller (Meta kernels or FX metadata).
#pragma once

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../stablehlo/builder.h"

namespace tpu::lowering {

using shlo::Builder;
using shlo::Cmp;
using shlo::ElemType;
using shlo::TensorType;
using shlo::Value;

// One argument of an ATen op as a lowering sees it. Tensors and run-time scalars are
// Values; shape-defining integers, flags and strings are static.
struct Arg {
  enum class Kind { None, Tensor, Int, Double, Bool, IntList, DoubleList, BoolList, String, TensorList };
  Kind kind = Kind::None;
  Value value;
  std::vector<Value> values;  // TensorList; an invalid Value stands for a None entry
  int64_t i = 0;
  double d = 0;
  bool b = false;
  std::vector<int64_t> ints;
  std::vector<double> doubles;
  std::string s;
};

// Thrown when a lowering cannot express a case: the caller falls back to the CPU.
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The arguments of one op, in schema order. Read them by name (the schema's argument names,
// "generator" for the state a seeded op without a Generator argument receives last) where the
// caller supplies names, as eager and compiled execution do; by position otherwise.
class Args {
 public:
  explicit Args(const std::vector<Arg>& args, const std::vector<std::string>* names = nullptr)
      : args_(args), names_(names) {}
  size_t size() const { return args_.size(); }
  // The position of the argument called `name`; throws std::invalid_argument when none is.
  size_t index(std::string_view name) const;
  bool is_none(size_t i) const { return i >= args_.size() || args_[i].kind == Arg::Kind::None; }
  bool is_none(std::string_view name) const { return is_none(index(name)); }
  const Value& tensor(std::string_view name) const { return tensor(index(name)); }
  Value optional_tensor(std::string_view name) const { return optional_tensor(index(name)); }
  const std::vector<Value>& tensors(std::string_view name) const { return tensors(index(name)); }
  int64_t int_(std::string_view name) const { return int_(index(name)); }
  int64_t int_or(std::string_view name, int64_t fallback) const { return int_or(index(name), fallback); }
  double double_(std::string_view name) const { return double_(index(name)); }
  bool bool_(std::string_view name) const { return bool_(index(name)); }
  bool bool_or(std::string_view name, bool fallback) const { return bool_or(index(name), fallback); }
  const std::vector<int64_t>& ints(std::string_view name) const { return ints(index(name)); }
  const std::string& str(std::string_view name) const { return str(index(name)); }
  const std::vector<std::string>* names() const { return names_; }
  const Arg& raw(size_t i) const { return args_.at(i); }
  const Value& tensor(size_t i) const;                  // required tensor or run-time scalar
  Value optional_tensor(size_t i) const;                // invalid Value when None
  const std::vector<Value>& tensors(size_t i) const;
  int64_t int_(size_t i) const;
  int64_t int_or(size_t i, int64_t fallback) const { return is_none(i) ? fallback : int_(i); }
  double double_(size_t i) const;
  bool bool_(size_t i) const;
  bool bool_or(size_t i, bool fallback) const { return is_none(i) ? fallback : bool_(i); }
  const std::vector<int64_t>& ints(size_t i) const;
  const std::string& str(size_t i) const;
  std::string str_or(size_t i, const std::string& fallback) const { return is_none(i) ? fallback : str(i); }

 private:
  const Arg& at(size_t i, Arg::Kind kind, const char* what) const;
  const std::vector<Arg>& args_;
  const std::vector<std::string>* names_;
};

struct Ctx {
  Builder& b;
  std::vector<TensorType> outputs;  // the op's result types, from Meta inference
  ElemType common = ElemType::F32;  // PyTorch's result_type over the op's inputs
  std::string op;  // the op lowered ("aten::add.Tensor"): custom kernels find their module by it
  // How f32 matrix products multiply (dots, convolutions, ragged dots): PyTorch's float32
  // matmul precision, read by the caller once per call and part of the program's key.
  shlo::Precision precision = shlo::Precision::Highest;
  const TensorType& out(size_t i = 0) const { return outputs.at(i); }

  // Device-side checks (like CUDA's device asserts): `failed` is a scalar i1 that is true
  // when the input was invalid (an index out of range). The values the op computes, and all
  // computed from them, raise `message` when read (runtime/device_checks.h); debug mode raises
  // at the op. Never clamp silently.
  // `kind` is the Python exception the CPU raises for the same input (IndexError for most
  // index checks, RuntimeError for gather/scatter, losses' own messages, ZeroDivisionError).
  enum class ErrorKind { Index, Runtime, Value };
  struct Check {
    Value failed;
    std::string message;
    ErrorKind kind = ErrorKind::Index;
  };
  std::vector<Check> checks;
  void AddCheck(Value failed, std::string message, ErrorKind kind = ErrorKind::Index) {
    checks.push_back({failed, std::move(message), kind});
  }

  // Writes into tensor arguments that an op mutates besides its results (batch norm's running
  // stats, GradScaler's found_inf and growth tracker): argument index -> the argument's new
  // value (its shape; converted to its dtype). Only callers that apply them set
  // `can_write_args` (the eager kernel); elsewhere WriteArg throws Unsupported.
  bool can_write_args = false;
  std::vector<std::pair<size_t, Value>> arg_writes;
  void WriteArg(size_t arg, Value v) {
    if (!can_write_args) throw Unsupported("the op writes into an argument");
    arg_writes.emplace_back(arg, v);
  }
};

using LowerFn = std::vector<Value> (*)(Ctx&, const Args&);

// Registers `fn` for the ATen overload `op` ("aten::add.Tensor") from the table line at
// file:line. Returns true so it can initialise a static.
bool Register(const char* op, LowerFn fn, const char* file = "", int line = 0);
// Graph-only lowerings: ops that eager runs without a program (views are metadata, factories
// and copies are kernels in csrc/aten) but that appear as nodes of torch.compile graphs.
// Find() sees them; RegisteredOps(), which eager registers kernels for, does not.
bool RegisterGraphOnly(const char* op, LowerFn fn, const char* file = "", int line = 0);
LowerFn Find(const std::string& op);
std::vector<std::string> RegisteredOps();
std::vector<std::string> GraphOnlyOps();
// Every table line as registered, in registration order (duplicates included), for the lint
// test that each op has one lowering and each file's table blocks are sorted.
struct Registration {
  std::string op;
  std::string file;
  int line;
  bool graph_only;
};
std::vector<Registration> Registrations();

// A Scalar argument that a lowering specialises on for a few values (pow's exponent 2 is x * x,
// not a power). When `special(value)` holds, the caller hands the value to the lowering as a
// static Double that is part of the program's identity in every mode (eager signatures, the
// constants of compiled graphs); every other value stays a run-time operand, so one program
// serves them all. Bool scalars count as 0 and 1; complex ones are never special.
using SpecialScalarFn = bool (*)(double);
struct SpecialScalar {
  std::string arg;  // the schema name of the Scalar argument
  SpecialScalarFn special = nullptr;
};
bool RegisterSpecialScalar(const char* op, const char* arg, SpecialScalarFn special);
// The special Scalar of `op` ("aten::pow.Tensor_Scalar"), or null when it has none.
const SpecialScalar* FindSpecialScalar(const std::string& op);

#define TPU_CONCAT_INNER(a, b) a##b
#define TPU_CONCAT(a, b) TPU_CONCAT_INNER(a, b)
#define TPU_LOWERING(op, fn) \
  static const bool TPU_CONCAT(tpu_lowering_registered_, __LINE__) = \
      ::tpu::lowering::Register(op, fn, __FILE__, __LINE__)
#define TPU_GRAPH_LOWERING(op, fn) \
  static const bool TPU_CONCAT(tpu_lowering_registered_, __LINE__) = \
      ::tpu::lowering::RegisterGraphOnly(op, fn, __FILE__, __LINE__)

#define TPU_SPECIAL_SCALAR(op, arg, special) \
  static const bool TPU_CONCAT(tpu_special_scalar_registered_, __LINE__) = \
      ::tpu::lowering::RegisterSpecialScalar(op, arg, special)

// Platform choices, made once by the runtime from the plugin's platform before anything is
// lowered. ragged_dot: chlo.ragged_dot compiles there (TPU, GPU); the XLA CPU plugin rejects
// it ("ragged-dot is not supported by XLA:CPU"), so aten::_grouped_mm then lowers to tiles.
void SetRaggedDot(bool supported);
bool RaggedDotInUse();
// aten::_grouped_mm programs lowered per formulation: {"ragged_dot": n, "tiled": n}.
std::map<std::string, int64_t> GroupedMmLowerings();
// tpu_target: programs are for a TPU (the platform is one, or the process also compiles for a
// TPU topology). Lowerings libtpu's compiler cannot take then take another form (s64 dots as
// sums: shlo::SetX64DotsAsReductions) or refuse at the op (RefuseOnTpu, tpu_refusals.cpp).
void SetTpuTarget(bool on);
bool TpuTarget();
// Where TpuTarget(), throws a clear error naming ctx.op and `what` (e.g. "FFT of float64"):
// the op has no lowering that libtpu compiles. README lists every such refusal.
void RefuseOnTpu(const Ctx& ctx, const std::string& what);

// Shared helpers (rule 6): every rule converts and broadcasts through these.
Value ConvertTo(Ctx& ctx, Value v, ElemType elem);
Value BroadcastTo(Ctx& ctx, Value v, const std::vector<int64_t>& dims);
// Converts to `t.elem` then broadcasts to `t.dims`.
Value CastTo(Ctx& ctx, Value v, const TensorType& t);
Value Splat(Ctx& ctx, double v, const TensorType& t);
// f16/bf16 accumulate in f32 (PyTorch's CPU and CUDA kernels do); other types keep theirs.
ElemType AccumulatorType(ElemType t);
// Normalises a possibly negative dim against `rank` (rank 0 counts as 1, as in PyTorch).
int64_t WrapDim(int64_t dim, int64_t rank);
std::vector<int64_t> WrapDims(const std::vector<int64_t>& dims, int64_t rank);

// ---- Storage views (shared by every execution mode) ----
// How a tensor lies in its 1-D storage: PyTorch's sizes, strides and offset.
struct ViewGeometry {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  int64_t storage_numel = 0;
  // The dims of the storage's buffer, where the caller knows them and they are of rank >= 2
  // (empty: read as 1-D). They let a view at a run-time offset be read as a box of the buffer.
  std::vector<int64_t> buffer_dims;
};
// True when the view covers its whole storage in row-major order.
bool IsWholeStorage(const ViewGeometry& g);
// Materialises the logical array of a strided view of a 1-D storage value.
Value ReadView(Builder& b, Value storage, const ViewGeometry& g);
// Returns the storage with the view's elements replaced by `value` (already of the view's
// shape and the storage's element type).
Value WriteView(Builder& b, Value storage, const ViewGeometry& g, Value value);
// A view that covers only part of its storage (numel > 0, span shorter than the storage)
// is read and written at a run-time offset, so its offset stays out of program keys: a
// loop over `timesteps[i]`, `x[t]` or a cache slot runs one program, not one per index.
// Decided by sizes, strides and storage size alone (csrc/aten keys by the same rule).
bool HasRunTimeOffset(const ViewGeometry& g);
// The extent, per buffer dim, of the box a view of these sizes and strides is in a row-major
// buffer of `buffer_dims` (each view dim within one buffer dim, in order, without a gap), or
// empty when it is none. At an offset the box fits when no extent crosses its dim's end.
std::vector<int64_t> BoxInBuffer(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                 const std::vector<int64_t>& buffer_dims);
bool BoxFitsAt(const std::vector<int64_t>& box, const std::vector<int64_t>& buffer_dims, int64_t offset);
// `buffer_dims` with each dim split where a view's stride falls inside it: the last position
// of every sequence, `logits[:, -1:]` of a [4*32, 32000] buffer (strides 32*32000, 32000, 1),
// is a box of it split to [4, 32, 32000]. Splitting a TPU buffer's outer dims is free (a
// bitcast while the tiled minor dims keep their tiles); reading 1-D would relayout it all.
std::vector<int64_t> SplitAtStrides(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                    const std::vector<int64_t>& buffer_dims);
// A view at a run-time offset is read and written as a box of its buffer, split at the view's
// strides (a dynamic_slice or dynamic_update_slice of the shaped buffer: no relayout of it to
// 1-D) when it is one at its offset and of the buffer's element type; csrc/aten keys on the
// same rule.
bool IsBufferBoxAt(const ViewGeometry& g);
// ReadView / WriteView with the offset given by the s64 scalar `offset` (g.offset unused).
// Reads take the view's span with dynamic_slice and read the view inside it; writes are a
// dynamic_update_slice (a contiguous run) or a scatter at offset-shifted indices.
Value ReadViewAt(Builder& b, Value storage, const ViewGeometry& g, Value offset);
Value WriteViewAt(Builder& b, Value storage, const ViewGeometry& g, Value offset, Value value);
// What eager and compiled programs both do with a view of a storage value: read it as its
// element type `elem`, or write `value` into it (the storage then holds value's type), at the
// view's own offset or, where HasRunTimeOffset (decided on the key's geometry, before any
// reinterpretation), at `offset()`: an s64 parameter the caller makes on first use.
Value ReadViewOf(Builder& b, Value storage, ElemType elem, const ViewGeometry& g,
                 const std::function<Value()>& offset);
Value WriteViewOf(Builder& b, Value storage, ViewGeometry g, Value value, const std::function<Value()>& offset);
// A storage's device buffer is shaped like the tensor that made it or last wrote it whole
// (TPUs tile arrays of rank >= 2: reshaping a flat buffer to a matrix is a relayout copy).
// Programs read a storage as a parameter of its buffer's dims flattened (StorageParam): a view
// that is the whole buffer reads it back unchanged, since shlo::Builder folds reshape chains.
// The buffer of a value: the value itself when of rank >= 2 and not empty, else 1-D.
Value AsBuffer(Builder& b, Value value);
// Lays a logical array out in a fresh storage with the given (dense, non-overlapping) strides:
// the buffer is the array transposed into memory order, in that shape (AsBuffer).
Value LayOut(Builder& b, Value value, const std::vector<int64_t>& strides);
// A storage parameter of `buffer_dims`, returned as the 1-D storage value views read.
Value StorageParam(Builder& b, ElemType elem, const std::vector<int64_t>& buffer_dims);
// The buffer a write of `value` into view `g` leaves, `updated` being the 1-D storage value
// after it (WriteViewOf): a write of the whole storage takes the written tensor's shape, a
// partial one keeps the storage's `buffer_dims` (1-D when the write changed the element type).
Value WrittenBuffer(Builder& b, const ViewGeometry& g, Value value, Value updated,
                    const std::vector<int64_t>& buffer_dims);
// The bytes of a 1-D storage value read as `elem` (a view(dtype), a bool tensor's untyped
// storage read as uint8): [n] of one type -> [n * size / size'] of the other. bool bytes are
// 0/1; complex numbers are their (real, imag) pairs.
Value Reinterpret(Builder& b, Value storage, ElemType elem);

}  // namespace tpu::lowering
