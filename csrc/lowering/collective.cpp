// torch.distributed's functional collectives (_c10d_functional) inside compiled graphs: the
// graph's program is replicated over the devices of the in-process group's ranks (replica i =
// rank i, replicas.h), so each collective is a stablehlo collective over all its
// replicas. Elsewhere (no replicated program) they are refused and run eagerly.
#include "helpers.h"
#include "replicas.h"

namespace tpu::lowering {
namespace {

thread_local int replicas_lowered = 0;

int Replicas(const Ctx&) {
  int n = replicas_lowered;
  if (n < 1) throw Unsupported("a collective outside a program replicated over an in-process group");
  return n;
}

void CheckGroupSize(const Ctx& ctx, int64_t group_size) {
  if (group_size != Replicas(ctx))
    throw Unsupported("a collective over " + std::to_string(group_size) + " ranks in a program replicated over " +
                      std::to_string(Replicas(ctx)));
}

std::string ReplicaGroups(int n) {
  std::string ids;
  for (int i = 0; i < n; ++i) ids += (i ? "," : "") + std::to_string(i);
  return "replica_groups = dense<[[" + ids + "]]> : tensor<1x" + std::to_string(n) + "xi64>";
}

// The combiner of reduce_op ("sum", "avg", ...; booleans: sum and max are "or", product and min "and").
std::string Combiner(const std::string& reduce_op, ElemType elem) {
  bool pred = elem == ElemType::Pred;
  if (reduce_op == "sum" || reduce_op == "avg") return pred ? "or" : "add";
  if (reduce_op == "product") return pred ? "and" : "multiply";
  if (reduce_op == "min") return pred ? "and" : "minimum";
  if (reduce_op == "max") return pred ? "or" : "maximum";
  throw Unsupported("reduce_op '" + reduce_op + "' (sum, avg, product, min and max are supported)");
}

std::string ReduceRegion(Ctx& ctx, const std::string& reduce_op, ElemType elem) {
  std::string op = Combiner(reduce_op, elem);
  return ctx.b.Region({{elem, {}}, {elem, {}}},
                      [&](const std::vector<Value>& v) { return std::vector<Value>{ctx.b.Binary(op, v[0], v[1])}; });
}

// avg: the sum over the group, divided by its size (floating point only, as in eager).
Value Averaged(Ctx& ctx, const std::string& reduce_op, Value v) {
  if (reduce_op != "avg") return v;
  if (!shlo::IsFloat(v.type.elem)) throw Unsupported("reduce_op 'avg' of a tensor that is not floating point");
  return ctx.b.Binary("divide", v, Splat(ctx, Replicas(ctx), v.type));
}

// all_reduce(Tensor input, str reduce_op, str group_name)
std::vector<Value> LowerAllReduce(Ctx& ctx, const Args& a) {
  const std::string& reduce_op = a.str(1);
  Value x = ConvertTo(ctx, a.tensor(0), ctx.out().elem);
  Value r = ctx.b.Op1("stablehlo.all_reduce", {x}, x.type, ReplicaGroups(Replicas(ctx)),
                      ReduceRegion(ctx, reduce_op, x.type.elem));
  return {Averaged(ctx, reduce_op, r)};
}

// all_gather_into_tensor(Tensor input, int group_size, str group_name): along dim 0.
std::vector<Value> LowerAllGatherIntoTensor(Ctx& ctx, const Args& a) {
  CheckGroupSize(ctx, a.int_(1));
  const TensorType& out = ctx.out();
  if (out.dims.empty() || out.dims[0] % Replicas(ctx) != 0) throw Unsupported("all_gather of this shape");
  std::vector<int64_t> part = out.dims;
  part[0] /= Replicas(ctx);
  Value x = ctx.b.Reshape(ConvertTo(ctx, a.tensor(0), out.elem), part);  // a 0-d input gathers as [1]
  return {ctx.b.Op1("stablehlo.all_gather", {x}, out, "all_gather_dim = 0 : i64, " + ReplicaGroups(Replicas(ctx)))};
}

// reduce_scatter_tensor(Tensor input, str reduce_op, int group_size, str group_name): along dim 0.
std::vector<Value> LowerReduceScatterTensor(Ctx& ctx, const Args& a) {
  const std::string& reduce_op = a.str(1);
  CheckGroupSize(ctx, a.int_(2));
  Value x = ConvertTo(ctx, a.tensor(0), ctx.out().elem);
  if (x.type.dims.empty() || x.type.dims[0] % Replicas(ctx) != 0)
    throw Unsupported("reduce_scatter of a dim 0 that does not split evenly over the group");
  Value r = ctx.b.Op1("stablehlo.reduce_scatter", {x}, ctx.out(),
                      "scatter_dimension = 0 : i64, " + ReplicaGroups(Replicas(ctx)),
                      ReduceRegion(ctx, reduce_op, x.type.elem));
  return {Averaged(ctx, reduce_op, r)};
}

// Whether `splits` (an all_to_all_single's split sizes) are equal parts of `rows`: empty, or n
// times rows / n.
bool EqualSplits(const std::vector<int64_t>& splits, int64_t rows, int n) {
  if (splits.empty()) return true;
  if (static_cast<int>(splits.size()) != n) return false;
  for (int64_t s : splits)
    if (s * n != rows) return false;
  return true;
}

// all_to_all_single(Tensor input, SymInt[] output_split_sizes, SymInt[] input_split_sizes, str group_name):
// rank r's dim 0 in n equal parts, part j to rank j; its result is part r of every rank, by rank.
// Uneven parts give ranks results of different shapes, which one replicated program cannot
// have: those run eagerly (device_collectives.cpp pads them to the largest part).
std::vector<Value> LowerAllToAllSingle(Ctx& ctx, const Args& a) {
  int n = Replicas(ctx);
  Value x = ConvertTo(ctx, a.tensor(0), ctx.out().elem);
  int64_t rows = x.type.dims.empty() ? 1 : x.type.dims[0];
  if (x.type.dims.empty() || rows % n != 0 || x.type.dims != ctx.out().dims ||
      !EqualSplits(a.ints(1), rows, n) || !EqualSplits(a.ints(2), rows, n))
    throw Unsupported("an all_to_all_single whose parts are not equal across the group");
  return {ctx.b.Op1("stablehlo.all_to_all", {x}, ctx.out(),
                    "split_dimension = 0 : i64, concat_dimension = 0 : i64, split_count = " + std::to_string(n) +
                        " : i64, " + ReplicaGroups(n))};
}

// wait_tensor(Tensor tensor): inside one program the collective is complete where it is read.
std::vector<Value> LowerWaitTensor(Ctx& ctx, const Args& a) {
  Replicas(ctx);
  return {a.tensor(0)};
}

}  // namespace

ReplicatedLowering::ReplicatedLowering(int replicas) : outer_(replicas_lowered) { replicas_lowered = replicas; }
ReplicatedLowering::~ReplicatedLowering() { replicas_lowered = outer_; }
int LoweringReplicas() { return replicas_lowered; }

std::string WithReplicas(const std::string& module_text, int replicas) {
  const std::string one = "mhlo.num_replicas = 1 : i32";
  size_t at = module_text.find(one);
  if (replicas <= 1 || at == std::string::npos) return module_text;
  std::string text = module_text;
  return text.replace(at, one.size(), "mhlo.num_replicas = " + std::to_string(replicas) + " : i32");
}

TPU_GRAPH_LOWERING("_c10d_functional::all_gather_into_tensor", LowerAllGatherIntoTensor);
TPU_GRAPH_LOWERING("_c10d_functional::all_reduce", LowerAllReduce);
TPU_GRAPH_LOWERING("_c10d_functional::all_to_all_single", LowerAllToAllSingle);
TPU_GRAPH_LOWERING("_c10d_functional::reduce_scatter_tensor", LowerReduceScatterTensor);
TPU_GRAPH_LOWERING("_c10d_functional::wait_tensor", LowerWaitTensor);

}  // namespace tpu::lowering
