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
// - nn.LSTM / nn.GRU and their cells call _thnn_fused_lstm_cell / _thnn_fused_gru_cell and
//   their backward ops on every non-CPU device (lowered in csrc/lowering/rnn.cpp). The generic
//   kernel infers output types through Meta: PyTorch has none for the GRU ops (added here), and
//   its LSTM one fails without biases (nn.LSTM(bias=False)), so on tpu that op calls
//   torch_tpu::_lstm_cell, the same op under a Meta kernel that accepts them.
// - one_hot: ATen's kernel checks class values with a host read on the CPU only and lets
//   scatter's device check raise elsewhere (a scatter message, not the CPU's); on tpu it calls
//   torch_tpu::_one_hot (csrc/lowering/embedding.cpp), whose device checks carry the CPU's
//   messages and raise when the result is read. num_classes=-1 reads the largest class value,
//   as on every device.
// - The transformer fast paths (csrc/lowering/transformer.cpp): _masked_softmax and its backward
//   have no Meta kernel; _native_multi_head_attention returns undefined weights when
//   need_weights is false, which a program cannot, so it calls
//   torch_tpu::_native_multi_head_attention and drops them.
//   Nested tensors do not exist on tpu: nn.TransformerEncoder asks whether its padding mask is
//   left-aligned before converting to one, and hears no, so it takes the dense fast path with
//   the mask (the same values at every unpadded position; padded ones are not zeroed).
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
  // sym_size: under torch.compile with symbolic sizes, size() would specialize every dim.
  c10::SymInt hq = query.sym_size(-3), hk = key.sym_size(-3);
  if (hq != hk && (!enable_gqa || hk == 0 || hq % hk != 0 || value.sym_size(-3) != hk)) return math;
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> SdpaForwardMeta(const Tensor& q, const Tensor& k, const Tensor& v,
                                                           const std::optional<Tensor>&, double, bool, bool,
                                                           std::optional<double>, std::optional<at::Generator>) {
  // Symbolic sizes (a torch.compile graph with dynamic shapes) stay symbolic: no guard on them.
  auto out_sizes = q.sym_sizes().vec();
  out_sizes.back() = v.sym_size(-1);
  auto lse_sizes = q.sym_sizes().vec();
  lse_sizes.pop_back();
  auto word = q.options().dtype(at::kLong);
  return {at::empty_symint(out_sizes, q.options()), at::empty_symint(lse_sizes, q.options().dtype(at::kFloat)),
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
  return {out, lse, Tensor(), Tensor(), query.sym_size(-2), key.sym_size(-2), seed, offset, Tensor()};
}

// Shapes as CUDA's kernels: hy like hx, workspace [B, 5H] (r, z, n, hx, hn).
std::tuple<Tensor, Tensor> GruCellMeta(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& hx,
                                       const std::optional<Tensor>& input_bias,
                                       const std::optional<Tensor>& hidden_bias) {
  int64_t h = hx.size(-1);
  TORCH_CHECK(input_gates.dim() == 2 && hx.dim() == 2 && input_gates.sizes() == hidden_gates.sizes() &&
                  input_gates.size(1) == 3 * h && input_gates.size(0) == hx.size(0),
              "_thnn_fused_gru_cell: expected gates [B, 3H] and hx [B, H], got ", input_gates.sizes(), ", ",
              hidden_gates.sizes(), " and ", hx.sizes());
  for (const auto* bias : {&input_bias, &hidden_bias})
    TORCH_CHECK(!bias->has_value() || !(*bias)->defined() || (*bias)->sizes() == at::IntArrayRef{3 * h},
                "_thnn_fused_gru_cell: expected biases of size [", 3 * h, "]");
  return {at::empty_like(hx, at::MemoryFormat::Contiguous),
          at::empty({hx.size(0), 5 * h}, input_gates.options())};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> GruCellBackwardMeta(const Tensor& grad_hy, const Tensor& workspace,
                                                                       bool has_bias) {
  int64_t b = workspace.size(0), h = workspace.size(1) / 5;
  auto gates = at::empty({b, 3 * h}, workspace.options());
  auto bias = has_bias ? at::empty({3 * h}, workspace.options()) : Tensor();
  return {gates, at::empty_like(gates), at::empty({b, h}, workspace.options()), bias,
          has_bias ? at::empty_like(bias) : Tensor()};
}

std::tuple<Tensor, Tensor, Tensor> LstmCellMeta(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
                                                const std::optional<Tensor>& input_bias,
                                                const std::optional<Tensor>& hidden_bias) {
  int64_t h = cx.size(-1);
  TORCH_CHECK(input_gates.dim() == 2 && cx.dim() == 2 && input_gates.sizes() == hidden_gates.sizes() &&
                  input_gates.size(1) == 4 * h && input_gates.size(0) == cx.size(0),
              "_thnn_fused_lstm_cell: expected gates [B, 4H] and cx [B, H], got ", input_gates.sizes(), ", ",
              hidden_gates.sizes(), " and ", cx.sizes());
  for (const auto* bias : {&input_bias, &hidden_bias})
    TORCH_CHECK(!bias->has_value() || !(*bias)->defined() || (*bias)->sizes() == at::IntArrayRef{4 * h},
                "_thnn_fused_lstm_cell: expected biases of size [", 4 * h, "]");
  return {at::empty_like(cx, at::MemoryFormat::Contiguous), at::empty_like(cx, at::MemoryFormat::Contiguous),
          at::empty_like(input_gates, at::MemoryFormat::Contiguous)};
}

std::tuple<Tensor, Tensor, Tensor> LstmCell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx,
                                            const std::optional<Tensor>& input_bias,
                                            const std::optional<Tensor>& hidden_bias) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torch_tpu::_lstm_cell", "")
                       .typed<std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                                 const std::optional<Tensor>&,
                                                                 const std::optional<Tensor>&)>();
  return op.call(input_gates, hidden_gates, cx, input_bias, hidden_bias);
}

std::tuple<Tensor, Tensor> MultiHeadAttentionMeta(const Tensor& query, const Tensor& key, const Tensor& value,
                                                  int64_t embed_dim, int64_t num_head, const Tensor& qkv_weight,
                                                  const Tensor& qkv_bias, const Tensor& proj_weight,
                                                  const Tensor& proj_bias, const std::optional<Tensor>& mask,
                                                  bool need_weights, bool average_attn_weights,
                                                  std::optional<int64_t> mask_type) {
  TORCH_CHECK(query.dim() == 3 && query.sizes() == key.sizes() && key.sizes() == value.sizes(),
              "expected `query`/`key`/`value` shapes to match");
  TORCH_CHECK(embed_dim % num_head == 0, "`embed_dim` must divide evenly by `num_heads`");
  int64_t b = query.size(0), t = query.size(1);
  auto out = at::empty({b, t, proj_weight.size(0)}, query.options());
  if (!need_weights) return {out, at::empty({0}, query.options())};
  if (average_attn_weights) return {out, at::empty({b, t, t}, query.options())};
  return {out, at::empty({b, num_head, t, t}, query.options())};
}

std::tuple<Tensor, Tensor> MultiHeadAttention(const Tensor& query, const Tensor& key, const Tensor& value,
                                              int64_t embed_dim, int64_t num_head, const Tensor& qkv_weight,
                                              const Tensor& qkv_bias, const Tensor& proj_weight,
                                              const Tensor& proj_bias, const std::optional<Tensor>& mask,
                                              bool need_weights, bool average_attn_weights,
                                              std::optional<int64_t> mask_type) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torch_tpu::_native_multi_head_attention", "")
                       .typed<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t,
                                                         const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                         const std::optional<Tensor>&, bool, bool,
                                                         std::optional<int64_t>)>();
  auto [out, weights] = op.call(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                mask, need_weights, average_attn_weights, mask_type);
  return {out, need_weights ? weights : Tensor()};
}

bool NestedFromMaskLeftAligned(const Tensor&, const Tensor&) { return false; }

Tensor MaskedSoftmaxMeta(const Tensor& input, const Tensor& mask, std::optional<int64_t> dim,
                         std::optional<int64_t> mask_type) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be a boolean tensor");
  return at::empty_like(input, at::MemoryFormat::Contiguous);
}

// The CPU kernel's checks: the backward takes a mask shaped like the gradient (mask_type 2).
Tensor MaskedSoftmaxBackwardMeta(const Tensor& grad_output, const Tensor& output, const Tensor& mask,
                                 std::optional<int64_t> dim) {
  TORCH_CHECK(grad_output.sizes() == mask.sizes(), "Mask shape should match grad shape");
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be a boolean tensor");
  return at::empty_like(grad_output, at::MemoryFormat::Contiguous);
}

Tensor RmsNorm(const Tensor& input, c10::SymIntArrayRef normalized_shape, const std::optional<Tensor>& weight,
               std::optional<double> eps) {
  return std::get<0>(at::_fused_rms_norm(input, C10_AS_INTARRAYREF_SLOW(normalized_shape), weight, eps));
}

Tensor OneHotMeta(const Tensor& self, int64_t num_classes) {
  std::vector<int64_t> shape = self.sizes().vec();
  shape.push_back(num_classes);
  return at::empty(shape, self.options().dtype(at::kLong));
}

Tensor OneHot(const Tensor& self, int64_t num_classes) {
  TORCH_CHECK(self.scalar_type() == at::kLong, "one_hot is only applicable to index tensor of type LongTensor.");
  if (self.numel() == 0) {
    TORCH_CHECK(num_classes > 0, "Can not infer total number of classes from empty tensor.");
    return OneHotMeta(self, num_classes);  // no values to check
  }
  if (num_classes == -1) {
    int64_t largest = self.max().item<int64_t>();
    TORCH_CHECK(largest >= 0, "Class values must be non-negative.");
    num_classes = largest + 1;
  }
  // Every class value is at least 0 (checked on the device) or raises that it is negative.
  TORCH_CHECK(num_classes > 0, "Class values must be smaller than num_classes.");
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torch_tpu::_one_hot", "")
                       .typed<Tensor(const Tensor&, int64_t)>();
  return op.call(self, num_classes);
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
  // aten::_thnn_fused_lstm_cell under a Meta kernel that accepts a cell without biases.
  m.def("_lstm_cell(Tensor input_gates, Tensor hidden_gates, Tensor cx, Tensor? input_bias=None, "
        "Tensor? hidden_bias=None) -> (Tensor, Tensor, Tensor)");
  // aten::_native_multi_head_attention with empty weights where need_weights is false.
  m.def("_native_multi_head_attention(Tensor query, Tensor key, Tensor value, int embed_dim, int num_head, "
        "Tensor qkv_weight, Tensor qkv_bias, Tensor proj_weight, Tensor proj_bias, Tensor? mask=None, "
        "bool need_weights=True, bool average_attn_weights=True, int? mask_type=None) -> (Tensor, Tensor)");
  // aten::one_hot with a known number of classes, checking class values on the device.
  m.def("_one_hot(Tensor self, int num_classes) -> Tensor");
}

TORCH_LIBRARY_IMPL(torch_tpu, Meta, m) {
  m.impl("_sdpa_forward", SdpaForwardMeta);
  m.impl("_lstm_cell", LstmCellMeta);
  m.impl("_native_multi_head_attention", MultiHeadAttentionMeta);
  m.impl("_one_hot", OneHotMeta);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", FusedSdpChoice);
  m.impl("_scaled_dot_product_fused_attention_overrideable", SdpaOverrideable);
  m.impl("_thnn_fused_lstm_cell", LstmCell);
  m.impl("_native_multi_head_attention", MultiHeadAttention);
  m.impl("_nested_tensor_from_mask_left_aligned", NestedFromMaskLeftAligned);
  m.impl("one_hot", OneHot);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("rms_norm", RmsNorm); }

TORCH_LIBRARY_IMPL(aten, Meta, m) {
  m.impl("_masked_softmax", MaskedSoftmaxMeta);
  m.impl("_masked_softmax_backward", MaskedSoftmaxBackwardMeta);
  m.impl("_thnn_fused_gru_cell", GruCellMeta);
  m.impl("_thnn_fused_gru_cell_backward", GruCellBackwardMeta);
  m.impl("_ctc_loss_backward", torch::CppFunction::makeFromBoxedFunction<&GradientLikeMeta<1>>());
  m.impl("fractional_max_pool3d_backward", torch::CppFunction::makeFromBoxedFunction<&GradientLikeMeta<1>>());
  m.impl("multi_margin_loss_backward", torch::CppFunction::makeFromBoxedFunction<&GradientLikeMeta<1>>());
  m.impl("multilabel_margin_loss_backward", torch::CppFunction::makeFromBoxedFunction<&GradientLikeMeta<1>>());
}

}  // namespace tpu::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &tpu::aten::FusedSdpChoice)
}  // namespace at::native
