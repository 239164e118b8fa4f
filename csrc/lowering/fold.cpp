// im2col (nn.Unfold) and col2im (nn.Fold) over [N?, C, H, W] images, one strided slice or
// one interior-padded copy per kernel offset (kh * kw of them: kernels are small). Fold sums
// overlapping patches; f16/bf16 accumulate in f32.
#include "helpers.h"

namespace tpu::lowering {
namespace {

struct Window {
  int64_t k[2], dilation[2], padding[2], stride[2];
};

Window WindowAt(const Args& a, size_t first) {  // kernel_size, dilation, padding, stride
  Window w;
  for (int i = 0; i < 2; ++i) {
    w.k[i] = a.ints(first)[i];
    w.dilation[i] = a.ints(first + 1)[i];
    w.padding[i] = a.ints(first + 2)[i];
    w.stride[i] = a.ints(first + 3)[i];
  }
  return w;
}

// Positions of the sliding window along one spatial dim of size `size`.
int64_t Blocks(int64_t size, const Window& w, int i) {
  return (size + 2 * w.padding[i] - w.dilation[i] * (w.k[i] - 1) - 1) / w.stride[i] + 1;
}

Value Batched(Ctx& ctx, Value v, int64_t rank) {
  if (v.type.rank() == rank) return v;
  std::vector<int64_t> dims = {1};
  dims.insert(dims.end(), v.type.dims.begin(), v.type.dims.end());
  return ctx.b.Reshape(v, dims);
}

// im2col(self, kernel_size, dilation, padding, stride) -> [N?, C*kh*kw, L]
std::vector<Value> LowerIm2Col(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value x = Batched(ctx, ConvertTo(ctx, a.tensor(0), AccumulatorType(t.elem)), 4);
  Window w = WindowAt(a, 1);
  const auto& d = x.type.dims;  // [N, C, H, W]
  int64_t n = d[0], c = d[1], lh = Blocks(d[2], w, 0), lw = Blocks(d[3], w, 1);
  Value zero = ctx.b.Constant(0, {x.type.elem, {}});
  Value padded = ctx.b.Pad(x, zero, {0, 0, w.padding[0], w.padding[1]}, {0, 0, w.padding[0], w.padding[1]},
                           {0, 0, 0, 0});
  std::vector<Value> patches;
  for (int64_t i = 0; i < w.k[0]; ++i) {
    for (int64_t j = 0; j < w.k[1]; ++j) {
      int64_t r = i * w.dilation[0], s = j * w.dilation[1];
      Value p = ctx.b.Slice(padded, {0, 0, r, s},
                            {n, c, r + (lh - 1) * w.stride[0] + 1, s + (lw - 1) * w.stride[1] + 1},
                            {1, 1, w.stride[0], w.stride[1]});
      patches.push_back(ctx.b.Reshape(p, {n, c, 1, lh * lw}));
    }
  }
  Value cols = ctx.b.Reshape(ctx.b.Concatenate(patches, 2), {n, c * w.k[0] * w.k[1], lh * lw});
  return {ConvertTo(ctx, ctx.b.Reshape(cols, t.dims), t.elem)};
}

// col2im(self, output_size, kernel_size, dilation, padding, stride) -> [N?, C, H, W]
std::vector<Value> LowerCol2Im(Ctx& ctx, const Args& a) {
  const TensorType& t = ctx.out();
  Value cols = Batched(ctx, ConvertTo(ctx, a.tensor(0), AccumulatorType(t.elem)), 3);
  Window w = WindowAt(a, 2);
  int64_t h = a.ints(1)[0], wd = a.ints(1)[1];
  int64_t n = cols.type.dims[0], c = cols.type.dims[1] / (w.k[0] * w.k[1]);
  int64_t lh = Blocks(h, w, 0), lw = Blocks(wd, w, 1);
  Value x = ctx.b.Reshape(cols, {n, c, w.k[0], w.k[1], lh, lw});
  Value zero = ctx.b.Constant(0, {x.type.elem, {}});
  Value sum = ctx.b.Constant(0, {x.type.elem, {n, c, h, wd}});
  for (int64_t i = 0; i < w.k[0]; ++i) {
    for (int64_t j = 0; j < w.k[1]; ++j) {
      Value p = ctx.b.Reshape(ctx.b.Slice(x, {0, 0, i, j, 0, 0}, {n, c, i + 1, j + 1, lh, lw}, {1, 1, 1, 1, 1, 1}),
                              {n, c, lh, lw});
      // Block (bh, bw) of offset (i, j) lands at (bh * stride + i * dilation - padding, ...);
      // negative edge padding crops what falls outside the image.
      int64_t low_h = i * w.dilation[0] - w.padding[0], low_w = j * w.dilation[1] - w.padding[1];
      int64_t high_h = h - (low_h + (lh - 1) * w.stride[0] + 1), high_w = wd - (low_w + (lw - 1) * w.stride[1] + 1);
      p = ctx.b.Pad(p, zero, {0, 0, low_h, low_w}, {0, 0, high_h, high_w}, {0, 0, w.stride[0] - 1, w.stride[1] - 1});
      sum = ctx.b.Binary("add", sum, p);
    }
  }
  return {ConvertTo(ctx, ctx.b.Reshape(sum, t.dims), t.elem)};
}

}  // namespace

TPU_LOWERING("aten::col2im", LowerCol2Im);
TPU_LOWERING("aten::im2col", LowerIm2Col);

}  // namespace tpu::lowering
