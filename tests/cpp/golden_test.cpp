// Golden StableHLO per lowering family: a few representative ops each, lowered as csrc/aten
// calls them (schema order, names, output types given), and the module text compared with
// tests/cpp/golden/<family>.mlir, so a lowering change shows as a readable diff. Run with
// TORCH_TPU_UPDATE_GOLDEN=1 to rewrite the files after an intended change, and review the diff.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lowering/lowering.h"

namespace tpu::test {
namespace {

using lowering::Arg;
using shlo::ElemType;
using shlo::TensorType;

// One op's lowering call: its arguments (tensors become parameters) and their schema names.
class Golden {
 public:
  Golden& Tensor(const char* name, TensorType t) {
    Arg a;
    a.kind = Arg::Kind::Tensor;
    a.value = b_.Param(t);
    return Add(name, a);
  }
  Golden& Tensors(const char* name, const std::vector<TensorType>& ts) {
    Arg a;
    a.kind = Arg::Kind::TensorList;
    for (const TensorType& t : ts) a.values.push_back(b_.Param(t));
    return Add(name, a);
  }
  Golden& Int(const char* name, int64_t v) {
    Arg a;
    a.kind = Arg::Kind::Int;
    a.i = v;
    return Add(name, a);
  }
  Golden& Bool(const char* name, bool v) {
    Arg a;
    a.kind = Arg::Kind::Bool;
    a.b = v;
    return Add(name, a);
  }
  Golden& Ints(const char* name, std::vector<int64_t> v) {
    Arg a;
    a.kind = Arg::Kind::IntList;
    a.ints = std::move(v);
    return Add(name, a);
  }
  Golden& Double(const char* name, double v) {
    Arg a;
    a.kind = Arg::Kind::Double;
    a.d = v;
    return Add(name, a);
  }
  Golden& Str(const char* name, std::string v) {
    Arg a;
    a.kind = Arg::Kind::String;
    a.s = std::move(v);
    return Add(name, a);
  }
  Golden& None(const char* name) { return Add(name, Arg{}); }

  // "// <op>" then the module text; `precision` is the float32 matmul precision csrc/aten reads.
  std::string Lower(const std::string& op, const std::vector<TensorType>& outputs, ElemType common = ElemType::F32,
                    shlo::Precision precision = shlo::Precision::Highest) {
    lowering::LowerFn fn = lowering::Find(op);
    if (!fn) return "// " + op + ": not in the lowering table\n";
    lowering::Ctx ctx{b_, outputs, common};
    ctx.precision = precision;
    std::vector<shlo::Value> results = fn(ctx, lowering::Args(args_, &names_));
    return "// " + op + (precision == shlo::Precision::Highest ? "" : std::string(", precision ") +
                         shlo::PrecisionName(precision)) + "\n" + b_.Module(results);
  }

 private:
  Golden& Add(const char* name, Arg a) {
    names_.push_back(name);
    args_.push_back(std::move(a));
    return *this;
  }
  shlo::Builder b_;
  std::vector<Arg> args_;
  std::vector<std::string> names_;
};

const TensorType F32x4{ElemType::F32, {4}};
const TensorType F32s{ElemType::F32, {}};

void ExpectGolden(const std::string& family, const std::string& text) {
  std::string path = std::string(TORCH_TPU_GOLDEN_DIR) + "/" + family + ".mlir";
  const char* update = std::getenv("TORCH_TPU_UPDATE_GOLDEN");
  if (update && *update && std::string(update) != "0") {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " is missing: run with TORCH_TPU_UPDATE_GOLDEN=1 to write it";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(text, expected.str()) << "the StableHLO of the " << family << " lowerings changed; if intended, rerun "
                                  << "with TORCH_TPU_UPDATE_GOLDEN=1 and review the diff of " << path;
}

TEST(GoldenStableHlo, Elementwise) {
  std::string text = Golden().Tensor("self", F32x4).Tensor("other", F32x4).Tensor("alpha", F32s)
                         .Lower("aten::add.Tensor", {F32x4});
  text += Golden().Tensor("self", {ElemType::S64, {4}}).Tensor("other", {ElemType::S64, {4}}).Str("rounding_mode", "floor")
              .Lower("aten::div.Tensor_mode", {{ElemType::S64, {4}}}, ElemType::S64);
  text += Golden().Tensor("self", {ElemType::BF16, {4}}).Lower("aten::sigmoid", {{ElemType::BF16, {4}}}, ElemType::BF16);
  // pow: a special exponent (a static Double from csrc/aten) multiplies, bf16 rounding each
  // product as the CPU does; any other exponent is a run-time operand of stablehlo.power.
  text += Golden().Tensor("self", F32x4).Double("exponent", 2).Lower("aten::pow.Tensor_Scalar", {F32x4});
  const TensorType BF16x4{ElemType::BF16, {4}};
  text += Golden().Tensor("self", BF16x4).Double("exponent", 3).Lower("aten::pow.Tensor_Scalar", {BF16x4}, ElemType::BF16);
  text += Golden().Tensor("self", F32x4).Tensor("exponent", F32s).Lower("aten::pow.Tensor_Scalar", {F32x4});
  ExpectGolden("elementwise", text);
}

TEST(GoldenStableHlo, Math) {
  std::string text = Golden().Tensor("self", F32x4).Tensor("other", F32x4).Lower("aten::hypot", {F32x4});
  text += Golden().Tensor("self", F32x4).Tensor("other", F32x4).Lower("aten::copysign.Tensor", {F32x4});
  ExpectGolden("math", text);
}

TEST(GoldenStableHlo, Special) {
  std::string text = Golden().Tensor("self", F32x4).Lower("aten::digamma", {F32x4});
  text += Golden().Int("n", 1).Tensor("self", F32x4).Lower("aten::polygamma", {F32x4});
  ExpectGolden("special", text);
}

TEST(GoldenStableHlo, Reduction) {
  std::string text = Golden().Tensor("self", {ElemType::BF16, {2, 3}}).Ints("dim", {1}).Bool("keepdim", false)
                         .None("dtype").Lower("aten::sum.dim_IntList", {{ElemType::BF16, {2}}}, ElemType::BF16);
  text += Golden().Tensor("self", {ElemType::F32, {2, 3}}).Int("dim", 1).Bool("keepdim", true)
              .Lower("aten::max.dim", {{ElemType::F32, {2, 1}}, {ElemType::S64, {2, 1}}});
  ExpectGolden("reduction", text);
}

TEST(GoldenStableHlo, Linalg) {
  std::string text = Golden().Tensor("self", {ElemType::F32, {2, 3}}).Tensor("mat2", {ElemType::F32, {3, 4}})
                         .Lower("aten::mm", {{ElemType::F32, {2, 4}}});
  ExpectGolden("linalg", text);
}

// PyTorch's float32 matmul precision ("high" -> HIGH, "medium" -> DEFAULT) on the f32 products
// of matmuls, attention, convolutions and ragged dots; f64 stays HIGHEST and bf16 keeps no
// precision_config and its f32 accumulation, whatever the setting.
TEST(GoldenStableHlo, Precision) {
  using shlo::Precision;
  const TensorType f32_23{ElemType::F32, {2, 3}}, f32_34{ElemType::F32, {3, 4}}, f32_24{ElemType::F32, {2, 4}};
  std::string text = Golden().Tensor("self", f32_23).Tensor("mat2", f32_34)
                         .Lower("aten::mm", {f32_24}, ElemType::F32, Precision::High);
  text += Golden().Tensor("self", f32_23).Tensor("mat2", f32_34)
              .Lower("aten::mm", {f32_24}, ElemType::F32, Precision::Default);
  text += Golden().Tensor("self", {ElemType::F64, {2, 3}}).Tensor("mat2", {ElemType::F64, {3, 4}})
              .Lower("aten::mm", {{ElemType::F64, {2, 4}}}, ElemType::F64, Precision::Default);
  text += Golden().Tensor("self", {ElemType::BF16, {2, 2, 3}}).Tensor("mat2", {ElemType::BF16, {2, 3, 4}})
              .Lower("aten::bmm", {{ElemType::BF16, {2, 2, 4}}}, ElemType::BF16, Precision::Default);
  const TensorType qkv{ElemType::F32, {1, 1, 2, 2}};
  text += Golden().Tensor("query", qkv).Tensor("key", qkv).Tensor("value", qkv).None("attn_bias")
              .Double("dropout_p", 0).Bool("is_causal", false).Bool("return_debug_mask", false).None("scale")
              .None("generator")
              .Lower("torch_tpu::_sdpa_forward", {qkv, {ElemType::F32, {1, 1, 2}}, {ElemType::S64, {}}, {ElemType::S64, {}}},
                     ElemType::F32, Precision::High);
  text += Golden().Tensor("input", {ElemType::F32, {1, 1, 4}}).Tensor("weight", {ElemType::F32, {1, 1, 2}})
              .None("bias").Ints("stride", {1}).Ints("padding", {0}).Ints("dilation", {1}).Bool("transposed", false)
              .Ints("output_padding", {0}).Int("groups", 1)
              .Lower("aten::convolution", {{ElemType::F32, {1, 1, 3}}}, ElemType::F32, Precision::Default);
  lowering::SetRaggedDot(true);  // the TPU and GPU formulation (the CPU plugin runs tiles)
  text += Golden().Tensor("self", {ElemType::F32, {4, 2}}).Tensor("mat2", {ElemType::F32, {2, 2, 3}})
              .Tensor("offs", {ElemType::S32, {2}}).None("bias").None("out_dtype")
              .Lower("aten::_grouped_mm", {{ElemType::F32, {4, 3}}}, ElemType::F32, Precision::High);
  lowering::SetRaggedDot(false);
  ExpectGolden("precision", text);
}

TEST(GoldenStableHlo, Indexing) {
  std::string text = Golden().Tensor("self", {ElemType::F32, {4, 3}}).Int("dim", 0).Tensor("index", {ElemType::S64, {2}})
                         .Lower("aten::index_select", {{ElemType::F32, {2, 3}}});
  text += Golden().Tensor("self", {ElemType::F32, {4, 3}}).Tensors("indices", {{ElemType::S64, {2}}})
              .Lower("aten::index.Tensor", {{ElemType::F32, {2, 3}}});
  ExpectGolden("indexing", text);
}

TEST(GoldenStableHlo, Factories) {
  std::string text = Golden().Tensor("start", {ElemType::S64, {}}).Tensor("end", {ElemType::S64, {}})
                         .Tensor("step", {ElemType::S64, {}}).None("dtype").None("layout").None("device")
                         .None("pin_memory").Lower("aten::arange.start_step", {F32x4});
  text += Golden().Tensor("start", F32s).Tensor("end", F32s).Int("steps", 4).Lower("aten::linspace.out", {F32x4});
  ExpectGolden("factories", text);
}

TEST(GoldenStableHlo, Nn) {
  std::string text = Golden().Tensor("self", {ElemType::F32, {2, 3}}).Int("dim", 1).Bool("half_to_float", false)
                         .Lower("aten::_softmax", {{ElemType::F32, {2, 3}}});
  ExpectGolden("nn", text);
}

TEST(GoldenStableHlo, Views) {
  std::string text = Golden().Tensor("self", {ElemType::F32, {2, 3}}).Ints("dims", {1, 0})
                         .Lower("aten::permute", {{ElemType::F32, {3, 2}}});
  ExpectGolden("views", text);
}

TEST(GoldenStableHlo, Random) {
  std::string text = Golden().Tensor("self", F32x4).Double("from", 0).Double("to", 1)
                         .Tensor("generator", {ElemType::U64, {2}}).Lower("aten::uniform_", {F32x4});
  ExpectGolden("random", text);
}

TEST(GoldenStableHlo, Shape) {
  std::string text = Golden().Tensors("tensors", {{ElemType::F32, {2}}, {ElemType::F32, {3}}}).Int("dim", 0)
                         .Lower("aten::cat", {{ElemType::F32, {5}}});
  text += Golden().Tensor("self", {ElemType::F32, {2, 3}}).Int("dim", 1).None("dtype")
              .Lower("aten::cumsum", {{ElemType::F32, {2, 3}}});
  ExpectGolden("shape", text);
}

}  // namespace
}  // namespace tpu::test
