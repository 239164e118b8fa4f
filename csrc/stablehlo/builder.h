// A small typed builder that prints a StableHLO module as MLIR text (generic op syntax,
// which every plugin's parser accepts). No torch headers here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tpu::shlo {

enum class ElemType { Pred, S8, S16, S32, S64, U8, U16, U32, U64, F16, BF16, F32, F64, C64, C128 };

const char* MlirName(ElemType t);
size_t ByteSize(ElemType t);
bool IsFloat(ElemType t);
bool IsComplex(ElemType t);
bool IsSigned(ElemType t);   // signed integers
bool IsUnsigned(ElemType t); // unsigned integers (not pred)
bool IsInteger(ElemType t);  // signed or unsigned, not pred

// How an f32 product's operands are multiplied (the precision_config of dot_general,
// convolution and ragged_dot): HIGHEST is full f32 (a TPU emulates it in about 6 bf16
// passes), HIGH 3 bf16 passes on a TPU and TF32 on a GPU, DEFAULT one bf16 pass on a TPU and
// TF32 (or bf16, as XLA chooses) on a GPU. PyTorch's float32 matmul precision picks one.
enum class Precision { Default, High, Highest };
const char* PrecisionName(Precision p);  // "DEFAULT", "HIGH", "HIGHEST"
// The precision a product over `elem` asks for: f32 the given one, f64 always HIGHEST (the
// setting is about f32), other types DEFAULT (half types accumulate in f32 regardless).
Precision ProductPrecision(ElemType elem, Precision f32);

// Platform choice, set once before anything is lowered: libtpu cannot compile a dot_general
// over s64/u64 ("rewriting computation to not contain X64 ... not implemented"), so for TPU
// targets DotGeneral emits those as DotAsReduction.
void SetX64DotsAsReductions(bool on);
bool X64DotsAsReductions();

struct TensorType {
  ElemType elem = ElemType::F32;
  std::vector<int64_t> dims;
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t numel() const;
  std::string str() const;  // tensor<2x3xf32>
  bool operator==(const TensorType& o) const { return elem == o.elem && dims == o.dims; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
};

struct Value {
  int id = -1;
  TensorType type;
  int member = -1;  // index into a multi-result op's results, -1 for single results
  bool valid() const { return id >= 0; }
  std::string ref() const {
    return "%" + std::to_string(id) + (member < 0 ? "" : "#" + std::to_string(member));
  }
};

enum class Cmp { EQ, NE, LT, LE, GT, GE };

class Builder {
 public:
  // Function parameters are added in order; all parameters precede the body.
  Value Param(const TensorType& type);
  // Whether an op emitted so far reads `v` (a generator state a lowering left unread, as
  // attention without dropout does, must not advance the generator).
  bool Uses(const Value& v) const;
  // Emits one op in generic syntax. `attrs` is the text inside {...} (may be empty);
  // `region` is the text of one region including braces (may be empty).
  std::vector<Value> Op(const std::string& name, const std::vector<Value>& operands,
                        const std::vector<TensorType>& results, const std::string& attrs = "",
                        const std::string& region = "");
  Value Op1(const std::string& name, const std::vector<Value>& operands, const TensorType& result,
            const std::string& attrs = "", const std::string& region = "");
  // The whole module with `results` as the function results.
  // `aliases`: (parameter, result) pairs the module marks tf.aliasing_output (the result may
  // reuse the parameter's buffer when the caller donates it; types must be equal).
  std::string Module(const std::vector<Value>& results, const std::vector<std::pair<int, int>>& aliases = {}) const;
  // Just the function (`func.func public|private @name ...`), for modules that hold several.
  std::string Function(const std::string& name, const std::vector<Value>& results, bool is_public,
                       const std::vector<std::pair<int, int>>& aliases = {}) const;
  const std::vector<Value>& params() const { return params_; }
  // Private functions imported from elsewhere (a custom kernel's module, already renamed so
  // that its symbols are unique to it): Module() prints them before @main; callers that print
  // Function() alone carry imports() with it. Imported once per `name`.
  void Import(const std::string& name, const std::string& functions);
  const std::vector<std::pair<std::string, std::string>>& imports() const { return imports_; }

  // Constants: a splat of `v` converted to `type`'s element type (bools: v != 0).
  Value Constant(double v, const TensorType& type);
  Value ConstantInt(int64_t v, const TensorType& type);
  // +inf / -inf (floats) or the largest / smallest value (integers) of `type`.
  Value Extreme(bool largest, const TensorType& type);
  Value Iota(const TensorType& type, int64_t dim);

  Value Convert(Value v, ElemType to);
  Value BitcastConvert(Value v, const TensorType& to);
  Value Reshape(Value v, const std::vector<int64_t>& dims);
  Value Transpose(Value v, const std::vector<int64_t>& perm);
  Value BroadcastInDim(Value v, const std::vector<int64_t>& dims, const std::vector<int64_t>& mapping);
  // NumPy-style broadcast of `v` to `dims` (trailing dims aligned).
  Value BroadcastTo(Value v, const std::vector<int64_t>& dims);
  Value Slice(Value v, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
              const std::vector<int64_t>& strides);
  Value Pad(Value v, Value pad_value, const std::vector<int64_t>& low,
            const std::vector<int64_t>& high, const std::vector<int64_t>& interior);
  Value Concatenate(const std::vector<Value>& vs, int64_t dim);
  Value Compare(Cmp dir, Value a, Value b);
  Value Select(Value pred, Value on_true, Value on_false);
  Value Binary(const std::string& op, Value a, Value b);  // op like "add" (no prefix)
  Value Unary(const std::string& op, Value a);
  // Reduces `v` over `dims` with the binary op `body_op` (e.g. "add", "maximum"), from `init`.
  Value Reduce(Value v, Value init, const std::vector<int64_t>& dims, const std::string& body_op);
  // f32 operands multiply at `f32` (matmul ops pass the lowering context's precision; the
  // default suits the inner products of algorithms, such as linalg's, that need all of f32).
  Value DotGeneral(Value lhs, Value rhs, const std::vector<int64_t>& lhs_batch,
                   const std::vector<int64_t>& rhs_batch, const std::vector<int64_t>& lhs_contract,
                   const std::vector<int64_t>& rhs_contract, ElemType result_elem,
                   Precision f32 = Precision::Highest);
  // DotGeneral as a broadcast multiply and a sum (what DotGeneral emits for s64/u64 where
  // X64DotsAsReductions()).
  Value DotAsReduction(Value lhs, Value rhs, const std::vector<int64_t>& lhs_batch,
                       const std::vector<int64_t>& rhs_batch, const std::vector<int64_t>& lhs_contract,
                       const std::vector<int64_t>& rhs_contract, ElemType result_elem);
  // 1-D gather: result[i...] = operand[indices[i...]] for a rank-1 operand.
  Value Gather1D(Value operand, Value indices);
  // 1-D scatter that overwrites operand[indices[i]] = updates[i] (rank-1 operand).
  Value Scatter1D(Value operand, Value indices, Value updates);
  Value DynamicUpdateSlice(Value operand, Value update, const std::vector<int64_t>& start);
  // The same with start indices computed at run time (s64 scalars, one per dim).
  Value DynamicUpdateSliceAt(Value operand, Value update, const std::vector<Value>& start);
  // operand[start[d] : start[d] + sizes[d]] per dim, start at run time (clamped into range by XLA).
  Value DynamicSlice(Value operand, const std::vector<Value>& start, const std::vector<int64_t>& sizes);

  // One region for Op's `region` argument: `body` emits ops with this builder on the block
  // arguments (one per type) and returns the values that stablehlo.return yields.
  std::string Region(const std::vector<TensorType>& arg_types,
                     const std::function<std::vector<Value>(const std::vector<Value>&)>& body);

  int NewId() { return next_id_++; }

 private:
  int next_id_ = 0;
  // The operand of each reshape emitted (by result id): a reshape of a reshape reads the
  // first operand, so a buffer flattened to read a view and shaped back costs nothing.
  std::unordered_map<int, Value> reshaped_from_;
  std::vector<Value> params_;
  std::string body_;
  std::vector<std::pair<std::string, std::string>> imports_;
};

// A module around already-printed functions (one of them public @main).
std::string WrapModule(const std::string& functions);

std::string JoinInts(const std::vector<int64_t>& v, const char* sep = ", ");
std::string DenseI64(const std::vector<int64_t>& v);  // array<i64: 1, 2>

}  // namespace tpu::shlo
