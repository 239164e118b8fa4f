"""index_copy and index_add move whole slices: one dynamic_update_slice for a single index (a decode
step's KV cache position), one windowed scatter otherwise, never a scatter of one point per element
(libtpu's cost model priced a static cache's point scatter at 280x the bytes it changes)."""
import textwrap

import pytest
import torch
import torch_tpu
from conftest import assert_same, run_python


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("n", [1, 3])
def test_index_copy_and_add_match_cpu(dim, n):
    g = torch.Generator().manual_seed(n * 10 + dim)
    self_cpu = torch.randn(4, 5, 6, generator=g)
    size = list(self_cpu.shape)
    size[dim] = n
    source = torch.randn(size, generator=g)
    index = torch.randperm(self_cpu.shape[dim], generator=g)[:n]
    for mode in ["strict", "fused"]:
        with torch_tpu.eager_mode(mode):
            dev = self_cpu.to("tpu")
            dev.index_copy_(dim, index.to("tpu"), source.to("tpu"))
            assert_same(dev, self_cpu.clone().index_copy_(dim, index, source))
            dev = self_cpu.to("tpu")
            dev.index_add_(dim, index.to("tpu"), source.to("tpu"), alpha=2)
            assert_same(dev, self_cpu.clone().index_add_(dim, index, source, alpha=2))


def test_index_add_with_repeated_indices_sums_every_slice():
    """MoE routing: several tokens add into the same row."""
    out_cpu = torch.zeros(4, 8)
    rows = torch.tensor([1, 3, 1, 1, 0])
    src = torch.randn(5, 8)
    dev = out_cpu.to("tpu").index_add_(0, rows.to("tpu"), src.to("tpu"))
    torch.testing.assert_close(dev.cpu(), out_cpu.index_add_(0, rows, src), rtol=1e-6, atol=1e-6)


def test_index_copy_out_of_range_raises():
    dev = torch.zeros(2, 4, 8, device="tpu")
    with pytest.raises(IndexError, match="out of"):
        dev.index_copy_(1, torch.tensor([4], device="tpu"), torch.ones(2, 1, 8, device="tpu"))
        dev.cpu()


def test_static_cache_write_is_one_slice(tmp_path):
    code = textwrap.dedent("""
        import torch, torch_tpu
        torch_tpu.set_eager_mode("strict")
        keys = torch.zeros(2, 4, 32, 16).to("tpu")  # batch, heads, cache positions, head dim
        for pos in range(3):
            keys.index_copy_(2, torch.tensor([pos]).to("tpu"), torch.full((2, 4, 1, 16), pos + 1.0).to("tpu"))
        keys.index_copy_(2, torch.tensor([5, 7]).to("tpu"), torch.ones(2, 4, 2, 16).to("tpu"))
        print(keys[0, 0, :8, 0].tolist())
    """)
    r = run_python(code, env={"TORCH_TPU_DUMP_DIR": str(tmp_path), "TORCH_TPU_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[-2] == str([1.0, 2.0, 3.0, 0.0, 0.0, 1.0, 0.0, 1.0]), r.stdout
    texts = [p.read_text() for p in sorted(tmp_path.glob("*index_copy*.mlir"))]
    assert len(texts) == 2, [p.name for p in tmp_path.glob("*.mlir")]  # one index, and two
    one, two = texts
    assert '"stablehlo.dynamic_update_slice"' in one and '"stablehlo.scatter"' not in one, one
    assert "(tensor<2x4x32x16xf32>, tensor<2x4x1x16xf32>, tensor<i32>, tensor<i32>, tensor<i32>, tensor<i32>)" in one
    # Two slices: one scatter of [1]-wide windows at s32 row indices, no coordinates per element.
    assert "update_window_dims = [0, 1, 3], inserted_window_dims = [2]" in two, two
    assert "tensor<2x1xi32>" in two and '"stablehlo.iota"' not in two, two
