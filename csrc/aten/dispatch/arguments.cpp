#include "arguments.h"

#include <algorithm>

namespace tpu::aten {

const char* RoleName(ArgRole role) {
  switch (role) {
    case ArgRole::kStatic: return "static";
    case ArgRole::kTensor: return "tensor";
    case ArgRole::kTensorList: return "tensors";
    case ArgRole::kScalar: return "scalar";
    case ArgRole::kScalarList: return "scalars";
    case ArgRole::kGenerator: return "generator";
    case ArgRole::kImplicitRng: return "implicit_rng";
    case ArgRole::kOutTarget: return "out";
    case ArgRole::kInplaceTarget: return "inplace";
  }
  return "?";
}

namespace {

c10::TypePtr Unwrapped(const c10::TypePtr& t) {
  return t->kind() == c10::TypeKind::OptionalType ? t->castRaw<c10::OptionalType>()->getElementType() : t;
}

ArgRole RoleOf(const c10::Argument& a) {
  c10::TypePtr t = Unwrapped(a.type());
  bool tensorish = t->kind() == c10::TypeKind::TensorType;
  if (t->kind() == c10::TypeKind::ListType) {
    c10::TypePtr e = Unwrapped(t->castRaw<c10::ListType>()->getElementType());
    if (e->kind() == c10::TypeKind::NumberType) return ArgRole::kScalarList;
    tensorish = e->kind() == c10::TypeKind::TensorType;
    if (tensorish && !a.is_out() && !(a.alias_info() && a.alias_info()->isWrite())) return ArgRole::kTensorList;
  }
  if (t->kind() == c10::TypeKind::NumberType) return ArgRole::kScalar;
  if (t->kind() == c10::TypeKind::GeneratorType) return ArgRole::kGenerator;
  if (tensorish && a.is_out()) return ArgRole::kOutTarget;
  if (tensorish && a.alias_info() && a.alias_info()->isWrite()) return ArgRole::kInplaceTarget;
  if (tensorish) return ArgRole::kTensor;
  return ArgRole::kStatic;
}

}  // namespace

OpArguments ClassifyArguments(const c10::OperatorHandle& op) {
  OpArguments out;
  for (const c10::Argument& a : op.schema().arguments()) {
    out.names.push_back(a.name());
    out.roles.push_back(RoleOf(a));
    out.num_outs += a.is_out() ? 1 : 0;
  }
  // A seeded op without a Generator argument (native_dropout, rand_like) draws from the
  // default generator: its state is passed to the lowering as one extra trailing argument.
  out.implicit_rng = op.hasTag(at::Tag::nondeterministic_seeded) &&
                     std::find(out.roles.begin(), out.roles.end(), ArgRole::kGenerator) == out.roles.end();
  if (out.implicit_rng) {
    out.names.push_back("generator");
    out.roles.push_back(ArgRole::kImplicitRng);
  }
  return out;
}

}  // namespace tpu::aten
