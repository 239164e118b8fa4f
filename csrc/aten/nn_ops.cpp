// Glue that routes nn functions to their tpu lowerings where the dispatcher alone would not:
// - F.scaled_dot_product_attention: _fused_sdp_choice (the op and its dispatch stub) picks the
//   overrideable backend, whose op returns SymInts that the generic kernel cannot produce, so
//   its kernel calls torch_tpu::_sdpa_forward (lowered in csrc/lowering/attention.cpp) and packs
//   the results; the backward op is lowered directly.
// - rms_norm is CompositeImplicitAutograd and would decompose into seven programs; on tpu it
//   calls _fused_rms_norm, whose autograd formula uses _fused_rms_norm_backward (both lowered).
// - Some backward ops have no Meta kernel in PyTorch (fractional_max_pool3d_backward, unlike its
//   2-d twin; the margin and CTC losses'), which the generic kernel needs for the result type:
//   each gradient has the geometry of the forward's input.
#include <ATen/ATen.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/SDPBackend.h>
#include <torch/library.h>

namespace tpu::aten {
namespace {

using at::Tensor;

// The overrideable backend unless the call is something it does not implement, which then
// takes the math path (and its errors, e.g. mismatched heads without enable_gqa).
int64_t FusedSdpChoice(const Tensor& query, const Tensor& key, const Tensor& value,
                       const std::optional<Tensor>& attn_mask, double dropout_p, bool is_causal,
                       std::optional<double> scale, bool enable_gqa) {
  auto math = static_cast<int64_t>(at::SDPBackend::math);
  if (query.is_nested() || key.is_nested() || value.is_nested()) return math;
  if (query.dim() < 3 || key.dim() != query.dim() || value.dim() != query.dim()) return math;
  if (!at::isFloatingType(query.scalar_type())) return math;
  int64_t hq = query.size(-3), hk = key.size(-3);
  if (hq != hk && (!enable_gqa || hk == 0 || hq % hk != 0 || value.size(-3) != hk)) return math;
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> SdpaForwardMeta(const Tensor& q, const Tensor& k, const Tensor& v,
                                                           const std::optional<Tensor>&, double, bool, bool,
                                                           std::optional<double>, std::optional<at::Generator>) {
  auto out_sizes = q.sizes().vec();
  out_sizes.back() = v.size(-1);
  auto lse_sizes = q.sizes().vec();
  lse_sizes.pop_back();
  auto word = q.options().dtype(at::kLong);
  return {at::empty(out_sizes, q.options()), at::empty(lse_sizes, q.options().dtype(at::kFloat)),
          at::empty({}, word), at::empty({}, word)};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor> SdpaOverrideable(
    const Tensor& query, const Tensor& key, const Tensor& value, const std::optional<Tensor>& attn_bias,
    double dropout_p, bool is_causal, bool return_debug_mask, std::optional<double> scale) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torch_tpu::_sdpa_forward", "")
                       .typed<std::tuple<Tensor, Tensor, Tensor, Tensor>(
                           const Tensor&, const Tensor&, const Tensor&, const std::optional<Tensor>&, double, bool,
                           bool, std::optional<double>, std::optional<at::Generator>)>();
  auto [out, lse, seed, offset] =
      op.call(query, key, value, attn_bias, dropout_p, is_causal, return_debug_mask, scale, std::nullopt);
  return {out, lse, Tensor(), Tensor(), c10::SymInt(query.size(-2)), c10::SymInt(key.size(-2)), seed, offset, Tensor()};
}

Tensor RmsNorm(const Tensor& input, c10::SymIntArrayRef normalized_shape, const std::optional<Tensor>& weight,
               std::optional<double> eps) {
  return std::get<0>(at::_fused_rms_norm(input, C10_AS_INTARRAYREF_SLOW(normalized_shape), weight, eps));
}

// The Meta kernel of a gradient shaped like the op's tensor argument `kLike`.
template <size_t kLike>
void GradientLikeMeta(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  size_t n = op.schema().arguments().size();
  Tensor like = (*stack)[stack->size() - n + kLike].toTensor();
  torch::jit::drop(*stack, n);
  stack->emplace_back(at::empty_like(like, at::MemoryFormat::Contiguous));
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(torch_tpu, m) {
  // Attention forward with the generator the dropout draws from; (philox_seed, philox_offset)
  // hold the Philox state it used.
  m.def("_sdpa_forward(Tensor query, Tensor key, Tensor value, Tensor? attn_bias, float dropout_p, bool is_causal, "
        "bool return_debug_mask, *, float? scale=None, Generator? generator=None) -> (Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(torch_tpu, Meta, m) { m.impl("_sdpa_forward", SdpaForwardMeta); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", FusedSdpChoice);
  m.impl("_scaled_dot_product_fused_attention_overrideable", SdpaOverrideable);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("rms_norm", RmsNorm); }

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_ctc_loss_backward", torch::CppFunction::makeFromBoxedFunction<&GradientLikeMeta<1>>());
  m.impl("fractional_max_pool3d_backward", torch::CppFunction::makeFromBoxedFunction<&GradientLikeMeta<1>>());
  m.impl("multi_margin_loss_backward", torch::CppFunction::makeFromBoxedFunction<&GradientLikeMeta<1>>());
  m.impl("multilabel_margin_loss_backward", torch::CppFunction::makeFromBoxedFunction<&GradientLikeMeta<1>>());
}

}  // namespace tpu::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &tpu::aten::FusedSdpChoice)
}  // namespace at::native
