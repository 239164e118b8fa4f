// torch.distributed's functional collectives (_c10d_functional) inside compiled graphs: the
// graph's program is replicated over the devices of an in-process span group's ranks (replica
// i = rank i, replicas.h), so each collective is a stablehlo collective over the replica groups
// of its own group. Elsewhere (no replicated program) they are refused and run eagerly.
#include <stdexcept>

#include "helpers.h"
#include "replicas.h"

namespace tpu::lowering {
namespace {

thread_local const Replication* replication_lowered = nullptr;

// A collective's group as the program sees it: its size and its replica_groups attribute.
struct Group {
  int size = 0;
  std::string replica_groups;
};

// The group of a collective whose group_name is argument `name_arg`.
Group GroupOf(const Args& a, int name_arg) {
  const Replication* r = replication_lowered;
  if (!r || r->replicas < 1) throw Unsupported("a collective outside a program replicated over an in-process group");
  const std::string& name = a.str(name_arg);
  for (size_t k = 0; k < r->groups.size(); ++k) {
    const CollectiveGroup& g = r->groups[k];
    if (g.name != name) continue;
    if (g.size == r->replicas) {
      std::vector<int> all(g.size);
      for (int i = 0; i < g.size; ++i) all[i] = i;
      return {g.size, ReplicaGroupsAttr({all})};
    }
    return {g.size, ReplicaGroupsMarker(k)};
  }
  throw Unsupported("a collective of group '" + name + "', which the program is not replicated for");
}

void CheckGroupSize(const Group& group, int64_t group_size) {
  if (group_size != group.size)
    throw Unsupported("a collective over " + std::to_string(group_size) + " ranks of a group of " +
                      std::to_string(group.size));
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
Value Averaged(Ctx& ctx, const std::string& reduce_op, const Group& group, Value v) {
  if (reduce_op != "avg") return v;
  if (!shlo::IsFloat(v.type.elem)) throw Unsupported("reduce_op 'avg' of a tensor that is not floating point");
  return ctx.b.Binary("divide", v, Splat(ctx, group.size, v.type));
}

// all_reduce(Tensor input, str reduce_op, str group_name)
std::vector<Value> LowerAllReduce(Ctx& ctx, const Args& a) {
  const std::string& reduce_op = a.str(1);
  Group group = GroupOf(a, 2);
  Value x = ConvertTo(ctx, a.tensor(0), ctx.out().elem);
  Value r = ctx.b.Op1("stablehlo.all_reduce", {x}, x.type, group.replica_groups,
                      ReduceRegion(ctx, reduce_op, x.type.elem));
  return {Averaged(ctx, reduce_op, group, r)};
}

// all_gather_into_tensor(Tensor input, int group_size, str group_name): along dim 0.
std::vector<Value> LowerAllGatherIntoTensor(Ctx& ctx, const Args& a) {
  Group group = GroupOf(a, 2);
  CheckGroupSize(group, a.int_(1));
  const TensorType& out = ctx.out();
  if (out.dims.empty() || out.dims[0] % group.size != 0) throw Unsupported("all_gather of this shape");
  std::vector<int64_t> part = out.dims;
  part[0] /= group.size;
  Value x = ctx.b.Reshape(ConvertTo(ctx, a.tensor(0), out.elem), part);  // a 0-d input gathers as [1]
  return {ctx.b.Op1("stablehlo.all_gather", {x}, out, "all_gather_dim = 0 : i64, " + group.replica_groups)};
}

// reduce_scatter_tensor(Tensor input, str reduce_op, int group_size, str group_name): along dim 0.
std::vector<Value> LowerReduceScatterTensor(Ctx& ctx, const Args& a) {
  const std::string& reduce_op = a.str(1);
  Group group = GroupOf(a, 3);
  CheckGroupSize(group, a.int_(2));
  Value x = ConvertTo(ctx, a.tensor(0), ctx.out().elem);
  if (x.type.dims.empty() || x.type.dims[0] % group.size != 0)
    throw Unsupported("reduce_scatter of a dim 0 that does not split evenly over the group");
  Value r = ctx.b.Op1("stablehlo.reduce_scatter", {x}, ctx.out(),
                      "scatter_dimension = 0 : i64, " + group.replica_groups, ReduceRegion(ctx, reduce_op, x.type.elem));
  return {Averaged(ctx, reduce_op, group, r)};
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
  Group group = GroupOf(a, 3);
  int n = group.size;
  Value x = ConvertTo(ctx, a.tensor(0), ctx.out().elem);
  int64_t rows = x.type.dims.empty() ? 1 : x.type.dims[0];
  if (x.type.dims.empty() || rows % n != 0 || x.type.dims != ctx.out().dims ||
      !EqualSplits(a.ints(1), rows, n) || !EqualSplits(a.ints(2), rows, n))
    throw Unsupported("an all_to_all_single whose parts are not equal across the group");
  return {ctx.b.Op1("stablehlo.all_to_all", {x}, ctx.out(),
                    "split_dimension = 0 : i64, concat_dimension = 0 : i64, split_count = " + std::to_string(n) +
                        " : i64, " + group.replica_groups)};
}

// wait_tensor(Tensor tensor): inside one program the collective is complete where it is read.
std::vector<Value> LowerWaitTensor(Ctx&, const Args& a) {
  if (!replication_lowered || replication_lowered->replicas < 1)
    throw Unsupported("a collective outside a program replicated over an in-process group");
  return {a.tensor(0)};
}

}  // namespace

ReplicatedLowering::ReplicatedLowering(Replication replication)
    : outer_(replication_lowered), replication_(std::move(replication)) {
  replication_lowered = &replication_;
}
ReplicatedLowering::~ReplicatedLowering() { replication_lowered = outer_; }

std::string WithReplicas(const std::string& module_text, int replicas) {
  const std::string one = "mhlo.num_replicas = 1 : i32";
  size_t at = module_text.find(one);
  if (replicas <= 1 || at == std::string::npos) return module_text;
  std::string text = module_text;
  return text.replace(at, one.size(), "mhlo.num_replicas = " + std::to_string(replicas) + " : i32");
}

std::string ReplicaGroupsAttr(const std::vector<std::vector<int>>& groups) {
  std::string rows;
  for (size_t g = 0; g < groups.size(); ++g) {
    rows += g ? ", [" : "[";
    for (size_t i = 0; i < groups[g].size(); ++i) rows += (i ? ", " : "") + std::to_string(groups[g][i]);
    rows += "]";
  }
  size_t width = groups.empty() ? 0 : groups[0].size();
  return "replica_groups = dense<[" + rows + "]> : tensor<" + std::to_string(groups.size()) + "x" +
         std::to_string(width) + "xi64>";
}

// Not valid StableHLO, so a program holding one cannot compile before it is filled.
const char kMarkerPrefix[] = "replica_groups = @replica_groups_of_group_";

std::string ReplicaGroupsMarker(size_t group) { return kMarkerPrefix + std::to_string(group) + "@"; }

std::string FillReplicaGroups(const std::string& module_text,
                              const std::vector<std::vector<std::vector<int>>>& partitions) {
  const std::string prefix = kMarkerPrefix;
  std::string text;
  size_t from = 0;
  for (size_t at = module_text.find(prefix); at != std::string::npos; at = module_text.find(prefix, from)) {
    size_t end = module_text.find('@', at + prefix.size());
    if (end == std::string::npos) throw std::invalid_argument("a malformed replica groups marker");
    size_t group = std::stoul(module_text.substr(at + prefix.size(), end - at - prefix.size()));
    if (group >= partitions.size())
      throw std::invalid_argument("no replica groups for collective group " + std::to_string(group));
    text += module_text.substr(from, at - from) + ReplicaGroupsAttr(partitions[group]);
    from = end + 1;
  }
  return text + module_text.substr(from);
}

TPU_GRAPH_LOWERING("_c10d_functional::all_gather_into_tensor", LowerAllGatherIntoTensor);
TPU_GRAPH_LOWERING("_c10d_functional::all_reduce", LowerAllReduce);
TPU_GRAPH_LOWERING("_c10d_functional::all_to_all_single", LowerAllToAllSingle);
TPU_GRAPH_LOWERING("_c10d_functional::reduce_scatter_tensor", LowerReduceScatterTensor);
TPU_GRAPH_LOWERING("_c10d_functional::wait_tensor", LowerWaitTensor);

}  // namespace tpu::lowering
