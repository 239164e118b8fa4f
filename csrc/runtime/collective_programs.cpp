#include "collective_programs.h"

#include <sstream>
#include <stdexcept>

namespace tpu::runtime {
namespace {

const char* KindName(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kSendRecv: return "send/recv";
  }
  return "?";
}

const char* ReduceName(CollectiveReduce r) {
  switch (r) {
    case CollectiveReduce::kSum: return "sum";
    case CollectiveReduce::kAvg: return "avg";
    case CollectiveReduce::kProduct: return "product";
    case CollectiveReduce::kMin: return "min";
    case CollectiveReduce::kMax: return "max";
    case CollectiveReduce::kNone: return "";
  }
  return "?";
}

// The binary op combining two elements (booleans: sum and max are "or", product and min "and").
const char* Combiner(CollectiveReduce r, shlo::ElemType elem) {
  bool pred = elem == shlo::ElemType::Pred;
  switch (r) {
    case CollectiveReduce::kSum:
    case CollectiveReduce::kAvg: return pred ? "or" : "add";
    case CollectiveReduce::kProduct: return pred ? "and" : "multiply";
    case CollectiveReduce::kMin: return pred ? "and" : "minimum";
    case CollectiveReduce::kMax: return pred ? "or" : "maximum";
    case CollectiveReduce::kNone: break;
  }
  throw std::invalid_argument("collective: no reduction given");
}

std::string Tensor(const std::vector<int64_t>& dims, shlo::ElemType elem) {
  std::string t = "tensor<";
  for (int64_t d : dims) t += std::to_string(d) + "x";
  return t + shlo::MlirName(elem) + ">";
}

// `dims` with dim 0 multiplied by `times` (a gather) or divided by `parts` (a scatter).
std::vector<int64_t> Dim0Scaled(std::vector<int64_t> dims, int64_t times, int64_t parts = 1) {
  dims[0] = dims[0] * times / parts;
  return dims;
}

std::string I64Array(const std::vector<int64_t>& values) {
  std::string s = "array<i64";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : ": ") + std::to_string(values[i]);
  return s + ">";
}

std::string ReplicaGroups(int n) {
  std::string ids;
  for (int i = 0; i < n; ++i) ids += (i ? "," : "") + std::to_string(i);
  return "replica_groups = dense<[[" + ids + "]]> : tensor<1x" + std::to_string(n) + "xi64>";
}

std::string Region(CollectiveReduce r, shlo::ElemType elem) {
  std::string scalar = std::string("tensor<") + shlo::MlirName(elem) + ">";
  return std::string("({\n    ^bb0(%a: ") + scalar + ", %b: " + scalar + "):\n      %c = stablehlo." +
         Combiner(r, elem) + " %a, %b : " + scalar + "\n      stablehlo.return %c : " + scalar + "\n    })";
}

}  // namespace

std::string CollectiveSpec::Describe() const {
  std::ostringstream out;
  out << KindName(kind);
  if (reduce != CollectiveReduce::kNone) out << "(" << ReduceName(reduce) << ")";
  if (kind == CollectiveKind::kBroadcast) out << "(from rank " << root << ")";
  out << " " << shlo::MlirName(elem) << "[" << numel << "] over " << group_size << " ranks";
  return out.str();
}

std::string CollectiveModule(const CollectiveSpec& s) {
  const int n = s.group_size;
  if (s.reduce == CollectiveReduce::kAvg && !shlo::IsFloat(s.elem))
    throw std::invalid_argument("collective: ReduceOp.AVG needs a floating-point tensor, got " +
                                std::string(shlo::MlirName(s.elem)));
  if ((s.kind == CollectiveKind::kReduceScatter || s.kind == CollectiveKind::kAllToAll) && s.numel % n != 0)
    throw std::invalid_argument(std::string(KindName(s.kind)) + ": the input's " + std::to_string(s.numel) +
                                " elements do not split evenly over " + std::to_string(n) + " ranks");
  const std::vector<int64_t> dims = s.dims.empty() ? std::vector<int64_t>{s.numel} : s.dims;
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  if (count != s.numel || !KeepsShape(s.kind, dims, n))
    throw std::invalid_argument(std::string(KindName(s.kind)) + ": an operand of " + std::to_string(s.numel) +
                                " elements cannot take this shape");
  const std::string in = Tensor(dims, s.elem);
  std::string out = in;
  std::ostringstream body;
  switch (s.kind) {
    case CollectiveKind::kAllReduce:
      body << "    %r = \"stablehlo.all_reduce\"(%x) " << Region(s.reduce, s.elem) << " {" << ReplicaGroups(n)
           << "} : (" << in << ") -> " << in << "\n";
      if (s.reduce == CollectiveReduce::kAvg)
        body << "    %n = stablehlo.constant dense<" << n << ".0> : " << in << "\n"
             << "    %y = stablehlo.divide %r, %n : " << in << "\n";
      break;
    case CollectiveKind::kAllGather:
      out = Tensor(Dim0Scaled(dims, n), s.elem);
      body << "    %r = \"stablehlo.all_gather\"(%x) {all_gather_dim = 0 : i64, " << ReplicaGroups(n) << "} : ("
           << in << ") -> " << out << "\n";
      break;
    case CollectiveKind::kReduceScatter:
      out = Tensor(Dim0Scaled(dims, 1, n), s.elem);
      body << "    %r = \"stablehlo.reduce_scatter\"(%x) " << Region(s.reduce, s.elem)
           << " {scatter_dimension = 0 : i64, " << ReplicaGroups(n) << "} : (" << in << ") -> " << out << "\n";
      if (s.reduce == CollectiveReduce::kAvg)
        body << "    %n = stablehlo.constant dense<" << n << ".0> : " << out << "\n"
             << "    %y = stablehlo.divide %r, %n : " << out << "\n";
      break;
    case CollectiveKind::kBroadcast: {
      // Exact for every value (a sum with zeros would turn -0.0 into 0.0): gather, keep the root's.
      std::string all = Tensor(Dim0Scaled(dims, n), s.elem);
      std::vector<int64_t> start(dims.size(), 0), limit = dims, strides(dims.size(), 1);
      start[0] = s.root * dims[0];
      limit[0] = (s.root + 1) * dims[0];
      body << "    %g = \"stablehlo.all_gather\"(%x) {all_gather_dim = 0 : i64, " << ReplicaGroups(n) << "} : ("
           << in << ") -> " << all << "\n"
           << "    %r = \"stablehlo.slice\"(%g) {start_indices = " << I64Array(start)
           << ", limit_indices = " << I64Array(limit) << ", strides = " << I64Array(strides) << "} : (" << all
           << ") -> " << in << "\n";
      break;
    }
    case CollectiveKind::kAllToAll:
      body << "    %r = \"stablehlo.all_to_all\"(%x) {split_dimension = 0 : i64, concat_dimension = 0 : i64, "
           << "split_count = " << n << " : i64, " << ReplicaGroups(n) << "} : (" << in << ") -> " << in << "\n";
      break;
    case CollectiveKind::kSendRecv:
      // No channel handle: the permute is between replicas (one device each), not partitions.
      if (n != 2) throw std::invalid_argument("send/recv: a program of 2 replicas, not " + std::to_string(n));
      body << "    %r = \"stablehlo.collective_permute\"(%x) {source_target_pairs = dense<[[0, 1]]> : tensor<1x2xi64>} : ("
           << in << ") -> " << in << "\n";
      break;
  }
  const char* result = s.reduce == CollectiveReduce::kAvg ? "%y" : "%r";
  std::ostringstream m;
  m << "module @collective attributes {mhlo.num_replicas = " << n << " : i32, mhlo.num_partitions = 1 : i32} {\n"
    << "  func.func public @main(%x: " << in << ") -> " << out << " {\n"
    << body.str() << "    return " << result << " : " << out << "\n  }\n}\n";
  return m.str();
}

std::string FlattenModule(const CollectiveSpec& s) {
  const std::string in = Tensor(s.dims, s.elem), out = Tensor({s.numel}, s.elem);
  std::ostringstream m;
  m << "module @flatten attributes {mhlo.num_replicas = 1 : i32, mhlo.num_partitions = 1 : i32} {\n"
    << "  func.func public @main(%x: " << in << ") -> " << out << " {\n"
    << "    %r = stablehlo.reshape %x : (" << in << ") -> " << out << "\n"
    << "    return %r : " << out << "\n  }\n}\n";
  return m.str();
}

bool KeepsShape(CollectiveKind kind, const std::vector<int64_t>& dims, int group_size) {
  if (dims.empty()) return false;
  if (kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllToAll)
    return group_size > 0 && dims[0] % group_size == 0;
  return true;
}

}  // namespace tpu::runtime
