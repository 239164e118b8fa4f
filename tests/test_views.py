"""Views and aliasing on tpu behave exactly as on the CPU: same geometry, shared storage,
every write seen through every alias."""
import re
import textwrap

import pytest
import torch
import torch_tpu

from conftest import assert_same, run_python


def pair(*shape, dtype=torch.float32):
    c = torch.arange(int(torch.tensor(shape).prod().item()), dtype=dtype).reshape(shape)
    return c, c.to("tpu")


def same_geometry(t, c):
    assert t.shape == c.shape
    assert t.stride() == c.stride()
    assert t.storage_offset() == c.storage_offset()


def check_aliases(tpu_tensors, cpu_tensors):
    for t, c in zip(tpu_tensors, cpu_tensors):
        same_geometry(t, c)
        assert_same(t, c)


def test_write_through_transposed_slice():
    c, t = pair(4, 6)
    cv, tv = c.t()[1:4], t.t()[1:4]
    cw, tw = c[:, 2], t[:, 2]
    same_geometry(tv, cv)
    cv.add_(100)
    tv.add_(100)
    check_aliases([t, tv, tw], [c, cv, cw])
    assert tv._base is t and tv.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()


@pytest.mark.parametrize(
    "op",
    [
        lambda v: v.add_(3),
        lambda v: v.mul_(-2),
        lambda v: v.fill_(7),
        lambda v: v.zero_(),
        lambda v: v.copy_(torch.full(v.shape, 5.0)),
        lambda v: v.copy_(torch.full(v.shape, 5.0).to(v.device)),
        lambda v: v.sub_(v),
        lambda v: v.clamp_(min=10, max=20),
        lambda v: v.copy_(torch.tensor(2.5)),
    ],
    ids=["add_", "mul_", "fill_", "zero_", "copy_host", "copy_device", "sub_self", "clamp_", "copy_bcast"],
)
def test_inplace_on_views_seen_by_all_aliases(op):
    c, t = pair(3, 4, 5)
    views = [lambda x: x[1], lambda x: x[:, 1:3].transpose(0, 2), lambda x: x.select(2, 4),
             lambda x: x.view(12, 5)[::5]]
    for make in views:
        c, t = pair(3, 4, 5)
        cv, tv = make(c), make(t)
        op(cv)
        op(tv)
        others = [lambda x: x, lambda x: x.permute(2, 0, 1), lambda x: x.reshape(-1)]
        check_aliases([o(t) for o in others] + [tv], [o(c) for o in others] + [cv])


@pytest.mark.parametrize(
    "view",
    [
        lambda x: x.narrow(1, 1, 2),
        lambda x: x.select(0, 2),
        lambda x: x.select(-1, -1),
        lambda x: x.diagonal(),
        lambda x: x.diagonal(offset=1, dim1=1, dim2=2),
        lambda x: x[:, :1].expand(4, 3, 5),
        lambda x: x.unsqueeze(1),
        lambda x: x.unsqueeze(-1),
        lambda x: x.permute(2, 0, 1),
        lambda x: x.view(12, 5),
        lambda x: x.view(-1),
        lambda x: x.reshape(4, 15),
        lambda x: x.transpose(0, 2).reshape(5, 12),  # copies on both devices
        lambda x: x.unfold(2, 2, 1),
        lambda x: x.unfold(0, 2, 2),
        lambda x: x.as_strided((2, 3), (7, 2), 3),
        lambda x: x.as_strided((4, 4), (1, 4)),
        lambda x: x[1:, ::2, 1::3],
        lambda x: x[..., None, 2],
        lambda x: x.squeeze().t() if x.dim() == 2 else x.flatten(1),
        lambda x: x.split(2, dim=2)[1],
        lambda x: x.chunk(2, dim=0)[1],
        lambda x: x.unbind(1)[2],
        lambda x: x.movedim(0, -1),
        lambda x: x.view(torch.int32),
        lambda x: x.T if x.dim() == 2 else x.mT,
        lambda x: x.expand(2, 4, 3, 5),
        lambda x: x.flatten(),
        lambda x: x.unflatten(2, (5, 1)),
    ],
)
def test_view_ops_geometry_and_values(view):
    c, t = pair(4, 3, 5)
    cv, tv = view(c), view(t)
    same_geometry(tv, cv)
    assert_same(tv, cv)
    shares = cv.untyped_storage().data_ptr() == c.untyped_storage().data_ptr()
    assert (tv.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()) == shares
    if shares and tv.dtype == t.dtype:
        # Writing the base shows through the view.
        c.mul_(2).add_(1)
        t.mul_(2).add_(1)
        assert_same(tv, cv)


def test_view_ops_never_fall_back():
    import torch_tpu

    torch_tpu.metrics.reset()
    c, t = pair(4, 3, 5)
    for v in [t.narrow(1, 1, 2), t.select(0, 1), t.diagonal(), t.expand(2, 4, 3, 5), t.unsqueeze(0),
              t.permute(1, 2, 0), t.view(60), t.reshape(12, 5), t.unfold(2, 2, 1), t.as_strided((2,), (3,)),
              t.t() if t.dim() == 2 else t.transpose(0, 1), t.view(torch.int32), t.squeeze(), torch.ops.aten.alias(t)]:
        assert v.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    assert torch_tpu.metrics()["cpu_fallbacks"] == 0
    assert torch_tpu.metrics()["host_syncs"] == 0


def test_complex_views_alias():
    c = torch.arange(8, dtype=torch.float32).reshape(4, 2)
    t = c.to("tpu")
    tc, cc = torch.view_as_complex(t), torch.view_as_complex(c)
    assert tc.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    same_geometry(tc, cc)
    tr, cr = torch.view_as_real(tc), torch.view_as_real(cc)
    same_geometry(tr, cr)
    assert_same(tr, cr)


def test_chained_views_and_writes():
    c, t = pair(6, 8)
    chain = lambda x: x[1:5].t()[::2].unsqueeze(0).narrow(2, 1, 2).squeeze(0)  # noqa: E731
    cv, tv = chain(c), chain(t)
    same_geometry(tv, cv)
    cv.mul_(10)
    tv.mul_(10)
    check_aliases([t, tv, t[2]], [c, cv, c[2]])
    cv2, tv2 = cv.diagonal(), tv.diagonal()
    cv2.fill_(-1)
    tv2.fill_(-1)
    check_aliases([t, tv], [c, cv])


def test_setitem_strided_value():
    c, t = pair(3, 8)
    c[..., ::2] = -5.0
    t[..., ::2] = -5.0
    assert_same(t, c)
    c[1] = 9
    t[1] = 9
    assert_same(t, c)
    c[:, 1:3] = torch.tensor([[1.0, 2.0]])
    t[:, 1:3] = torch.tensor([[1.0, 2.0]], device="tpu")
    assert_same(t, c)


def test_setitem_tensor_values():
    c, t = pair(4, 5)
    src = torch.arange(10, dtype=torch.float32).reshape(2, 5) * -1
    c[1:3] = src
    t[1:3] = src.to("tpu")
    assert_same(t, c)
    c[:, 4] = src[0, :4]
    t[:, 4] = src[0, :4].to("tpu")
    assert_same(t, c)
    # A value from the host is copied over too.
    c[3, ::2] = torch.tensor([7.0, 8.0, 9.0])
    t[3, ::2] = torch.tensor([7.0, 8.0, 9.0])
    assert_same(t, c)
    # Boolean-mask and integer-index assignment.
    mask = c > 10
    c[mask] = 0.5
    t[mask.to("tpu")] = 0.5
    assert_same(t, c)
    idx = torch.tensor([0, 2])
    c[idx] = 3.0
    t[idx.to("tpu")] = 3.0
    assert_same(t, c)


def test_self_overlapping_copy():
    c, t = pair(10)
    c[1:].copy_(c[:-1].clone())
    t[1:].copy_(t[:-1].clone())
    assert_same(t, c)
    c, t = pair(10)
    c[2:8].copy_(c[0:6].flip(0))
    t[2:8].copy_(t[0:6].flip(0))
    assert_same(t, c)


def test_resize_keeps_contents():
    c, t = pair(2, 3)
    c.resize_(3, 4)
    t.resize_(3, 4)
    assert t.shape == (3, 4) and t.stride() == (4, 1)
    assert_same(t.view(-1)[:6], c.view(-1)[:6])
    c.resize_(2)
    t.resize_(2)
    assert_same(t, c)
    # Shrinking keeps the storage, so the old elements are still there.
    c.resize_(6)
    t.resize_(6)
    assert_same(t, c)
    e = torch.empty(0, device="tpu")
    e.resize_(5).fill_(1)
    assert_same(e, torch.ones(5))
    e.resize_as_(torch.empty(2, 2))
    assert e.shape == (2, 2)
    # Resizing a view grows the shared storage, seen by the base.
    base = torch.zeros(4, device="tpu")
    v = base[2:]
    v.resize_(4)
    v.fill_(3)
    assert base.untyped_storage().nbytes() >= 6 * 4
    assert_same(base, torch.tensor([0.0, 0.0, 3.0, 3.0]))


def test_untyped_storage_resize():
    c, t = pair(4)
    s = t.untyped_storage()
    s.resize_(32)
    assert s.nbytes() == 32 and t.untyped_storage().nbytes() == 32
    assert_same(t, c)  # contents kept
    s.resize_(0)
    assert s.nbytes() == 0
    s.resize_(16)
    t.set_(s, 0, (4,), (1,))
    t.copy_(c)
    assert_same(t, c)


def test_set_shares_storage():
    c, t = pair(3, 4)
    cc, tt = torch.empty(0), torch.empty(0, device="tpu")
    cc.set_(c)
    tt.set_(t)
    assert tt.is_set_to(t)
    same_geometry(tt, cc)
    tt.add_(1)
    cc.add_(1)
    assert_same(t, c)
    # set_ with a storage, offset, sizes and strides.
    cc.set_(c.untyped_storage(), 2, (2, 3), (1, 2))
    tt.set_(t.untyped_storage(), 2, (2, 3), (1, 2))
    same_geometry(tt, cc)
    assert_same(tt, cc)
    tt.zero_()
    cc.zero_()
    assert_same(t, c)
    # set_() with no argument empties the tensor.
    tt.set_()
    assert tt.numel() == 0 and tt.untyped_storage().nbytes() == 0
    # set_ across dtypes is rejected as on the CPU.
    with pytest.raises(RuntimeError):
        torch.empty(0, dtype=torch.int64, device="tpu").set_(t)


def test_data_ptr_offsets_match_cpu():
    for dtype in [torch.float32, torch.float64, torch.int16, torch.bfloat16, torch.uint8]:
        c, t = pair(4, 6, dtype=dtype)
        for view in [lambda x: x[1], lambda x: x[2:, 3:], lambda x: x.t()[5], lambda x: x.view(-1)[7:]]:
            cd = view(c).data_ptr() - c.data_ptr()
            td = view(t).data_ptr() - t.data_ptr()
            assert td == cd == view(c).storage_offset() * c.element_size()
    a = torch.empty(10, device="tpu")
    b = torch.empty(10, device="tpu")
    assert a.data_ptr() != b.data_ptr()
    assert a.data_ptr() != 0


def test_contiguous_and_clone_of_views():
    c, t = pair(4, 6)
    cv, tv = c.t()[1:, ::2], t.t()[1:, ::2]
    assert tv.is_contiguous() == cv.is_contiguous() is False
    tc = tv.contiguous()
    assert tc.is_contiguous() and tc.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    assert_same(tc, cv.contiguous(), )
    tcl = tv.clone()
    assert tcl.stride() == cv.clone().stride()
    tcl.fill_(0)
    assert_same(t, c)  # a clone does not alias


def test_detach_and_data_alias():
    c, t = pair(5)
    d = t.detach()
    d.add_(1)
    c.add_(1)
    assert_same(t, c)
    t.data[0] = 42
    c.data[0] = 42
    assert_same(t, c)


def test_inplace_metadata_ops():
    c, t = pair(2, 3)
    for f in [lambda x: x.t_(), lambda x: x.unsqueeze_(0), lambda x: x.squeeze_(0),
              lambda x: x.transpose_(0, 1), lambda x: x.as_strided_((3,), (2,), 1)]:
        f(c)
        f(t)
        same_geometry(t, c)
        assert_same(t, c)


def test_dtype_views_read_and_write():
    c, t = pair(4)
    c.view(torch.int32).add_(1)
    t.view(torch.int32).add_(1)
    assert_same(t, c)
    # Views with another element size share the bytes too.
    c.view(torch.uint8)[1] = 5
    t.view(torch.uint8)[1] = 5
    assert torch.equal(t.cpu(), c)
    c.view(torch.int16)[::3].fill_(7)
    t.view(torch.int16)[::3].fill_(7)
    assert torch.equal(t.cpu(), c)
    assert_same(t.view(torch.uint8), c.view(torch.uint8))
    assert_same(t.view(torch.int16) + 1, c.view(torch.int16) + 1)
    same_geometry(t.view(torch.uint8)[3:], c.view(torch.uint8)[3:])


def _view_overloads():
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        op, _, overload = name[len("aten::"):].partition(".")
        try:
            packet = getattr(torch.ops.aten, op)
            schema = getattr(packet, overload or "default")._schema
        except (AttributeError, RuntimeError):
            continue
        if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
            yield name


def test_every_dense_view_op_has_a_tpu_kernel():
    # A view op without a kernel would reach the CPU fallback, which can only return a copy.
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    missing = [
        n for n in _view_overloads()
        if not any(has(n, k) for k in ["PrivateUse1", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                                       "CompositeExplicitAutogradNonFunctional"])
        and not any(s in n for s in ["nested", "sparse", "_values", "_indices"])
    ]
    assert missing == []
    # The lowered ops (programs) never include a view op.
    import torch_tpu

    assert set(torch_tpu.native_ops()).isdisjoint(_view_overloads())
    # And a view op that still reaches the fallback fails loudly instead of copying.
    with pytest.raises(NotImplementedError, match="view op aten::_sparse_broadcast_to"):
        torch.ops.aten._sparse_broadcast_to(torch.ones(2, device="tpu"), [2])


def test_compare_fixture_checks_results_and_mutated_inputs(compare):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    out = compare(lambda x: x.t()[1:4:2].mul_(3), base, check_stride=True)
    assert out.is_tpu
    compare(lambda x, y: x[:, ::3].copy_(y), base, torch.ones(4, 2) * -1)
    compare(lambda x: x.unfold(1, 3, 2).sum(-1), base)


def test_one_element_views_share_one_program_whatever_their_offset():
    """A schedule's `timesteps[i]` / `sigmas[i].expand(n)`: the offset of a one-element view is a
    run-time parameter, so a loop over i compiles each op once (a denoising loop would otherwise
    compile a program per step). Reads, broadcast reads and writes at every offset match the CPU."""
    import torch_tpu

    c, t = pair(8, dtype=torch.float32)
    cx, tx = torch.full((3,), 2.0), torch.full((3,), 2.0, device="tpu")
    misses = []
    for i in range(8):
        assert_same(tx * t[i], cx * c[i])
        assert_same(t[i].expand(3) + tx, c[i].expand(3) + cx)
        assert_same(t.view(2, 4)[i // 4, i % 4:i % 4 + 1] - 1, c.view(2, 4)[i // 4, i % 4:i % 4 + 1] - 1)
        t[i] += 10 * i
        c[i] += 10 * i
        t[i:i + 1].fill_(t[i] * 3)
        c[i:i + 1].fill_(c[i] * 3)
        assert_same(t, c)
        misses.append(torch_tpu.metrics()["signature_cache_misses"])
    assert len(set(misses[1:])) == 1, misses  # everything after the first offset reuses its programs


def test_views_at_any_offset_share_one_program():
    """Any view that covers part of its storage is read and written at a run-time offset: a loop
    over rows (an RNN's `x[t]`), strided columns (written through a scatter) and a cache slot
    compiles each op once, and every read and in-place write matches the CPU."""
    import torch_tpu

    c, t = pair(6, 4, 5)
    cw, tw = torch.ones(4, 5), torch.ones(4, 5, device="tpu")
    misses = []
    for i in range(6):
        assert_same(t[i] @ tw.T, c[i] @ cw.T)               # a contiguous block
        assert_same(t[:, i % 4, 1:4] * 2, c[:, i % 4, 1:4] * 2)  # strided, nested
        t[i].add_(tw)                                      # dense write (dynamic_update_slice)
        c[i].add_(cw)
        t[:, i % 4, i % 5].mul_(-1)                        # strided write (scatter)
        c[:, i % 4, i % 5].mul_(-1)
        t[:, :, i % 5].copy_(t[:, :, (i + 1) % 5])          # source and target: one storage
        c[:, :, i % 5].copy_(c[:, :, (i + 1) % 5])
        assert_same(t, c)
        misses.append(torch_tpu.metrics()["signature_cache_misses"])
    assert len(set(misses[1:])) == 1, misses


def test_compiled_graph_over_views_at_any_offset():
    """A torch.compile(backend="tpu") graph takes views at a run-time offset too: called on each
    row and each column of one storage, mutating it, it builds one program per geometry and its
    writes land where the CPU's do."""
    import torch_tpu

    def scale_and_add(x, y):
        x.mul_(2)
        return x + y

    compiled = torch.compile(scale_and_add, backend="tpu")
    c, t = pair(6, 4)
    built = []
    for i in range(6):
        assert_same(compiled(t[i], torch.ones(4, device="tpu")), scale_and_add(c[i], torch.ones(4)))
        assert_same(compiled(t[:, i % 4], torch.ones(6, device="tpu")), scale_and_add(c[:, i % 4], torch.ones(6)))
        assert_same(t, c)
        built.append(torch_tpu.metrics()["compile_programs_built"])
    assert len(set(built)) == 1, built


# as_strided_scatter addresses self's storage: PyTorch's composite (clone keeping self's
# strides, as_strided, copy_) runs natively in eager, for any self.
@pytest.mark.parametrize("self_view,size,stride,offset", [
    (lambda x: x, (2, 2), (3, 1), 1),
    (lambda x: x, (3, 2), (6, 2), None),
    (lambda x: x.t(), (2, 3), (1, 6), 2),  # self transposed: the clone keeps its strides
    (lambda x: x[1:, ::2], (2, 2), (6, 1), None),  # offset None: self's own, 6
    (lambda x: x[:, 1], (3,), (7,), 1),  # writes partly outside self, which keeps its values
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_as_strided_scatter(self_view, size, stride, offset, dtype):
    from conftest import native
    c, t = pair(4, 6, dtype=dtype)
    src = -torch.arange(1, torch.Size(size).numel() + 1, dtype=dtype).reshape(size)
    expected = torch.as_strided_scatter(self_view(c), src, size, stride, offset)
    with native():
        got = torch.as_strided_scatter(self_view(t), src.to("tpu"), size, stride, offset)
    same_geometry(got, expected)
    assert_same(got, expected)
    assert_same(t, c)  # self is not written


@pytest.mark.parametrize("size,stride,offset,src_size", [
    ((2, 2), (3, 1), 1, (2, 3)),  # src is not the view's shape
    ((2, 2), (6, 1), 20, (2, 2)),  # past the end of self's storage
    ((2, 2), (0, 1), 0, (2, 2)),  # the view writes one element twice
])
def test_as_strided_scatter_errors(size, stride, offset, src_size):
    errors = []
    for device in ["cpu", "tpu"]:
        with pytest.raises(RuntimeError) as info:
            torch.as_strided_scatter(torch.zeros(4, 6, device=device), torch.ones(src_size, device=device),
                                     size, stride, offset)
        errors.append(str(info.value))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("offset_of", [
    lambda w: w.chunk(2, -1)[1],  # GEGLU's gate: a [..., 1024] half of each row
    lambda w: w[:, 3],  # one column
    lambda w: w[2:5, 1:4],  # an inner window
    lambda w: w.view(2, 4, 8)[1, :, 2:6],  # a window of the buffer's rows, reshaped
    lambda w: w.view(2, 4, 8)[:, -1:],  # every group's last row: a box of the buffer split to [2, 4, 8]
    lambda w: w.view(4, 2, 8)[:, 1, 3:7],  # a window of every other row
    lambda w: w.view(2, 4, 2, 4).transpose(1, 2)[..., 2:],  # RoPE's second half of q.view(...).transpose(1, 2)
])
def test_views_at_run_time_offsets_read_boxes_of_the_shaped_buffer(offset_of):
    """A view that is a box of its storage's 2-D buffer reads it with one dynamic_slice of that buffer
    (no relayout of it to 1-D) at any offset, one program for all offsets; a view of the same geometry
    at an offset where it is no box (it wraps across rows) is read as before, by another program."""
    base = torch.arange(64.0).reshape(8, 8)
    dev = base.to("tpu")
    with torch_tpu.eager_mode("strict"):
        assert_same(torch.nn.functional.gelu(offset_of(dev)), torch.nn.functional.gelu(offset_of(base)))
        assert_same(offset_of(dev) * 2, offset_of(base) * 2)
    # Every offset of a [3, 2] window: those whose columns cross a row's end wrap in PyTorch.
    flat, flat_cpu = dev.view(-1), base.view(-1)
    for offset in range(0, 64 - 2 * 8 - 2):
        got = flat.as_strided((3, 2), (8, 1), offset) + 1
        assert_same(got, flat_cpu.as_strided((3, 2), (8, 1), offset) + 1)


def test_box_view_program_reads_the_buffer_unflattened(tmp_path):
    code = textwrap.dedent("""
        import torch, torch_tpu
        w = torch.randn(16, 256).to("tpu")
        torch_tpu.set_eager_mode("strict")
        for half in w.chunk(2, -1):
            print(torch.nn.functional.gelu(half).sum().item())
    """)
    r = run_python(code, env={"TORCH_TPU_DUMP_DIR": str(tmp_path), "TORCH_TPU_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    (gelu,) = [p for p in tmp_path.glob("*aten__gelu.mlir")]  # both halves: one program
    text = gelu.read_text()
    # One dynamic_slice of the 2-D buffer, starts in s32; no 1-D window of it, no padding.
    assert text.count('"stablehlo.dynamic_slice"') == 1, text
    assert "(tensor<16x256xf32>, tensor<i32>, tensor<i32>) -> tensor<16x128xf32>" in text, text
    assert '"stablehlo.pad"' not in text, text


def _one_program_text(tmp_path, code, op):
    """Runs `code` (which prints "ok" once its values match the CPU's) with programs dumped; the
    text of the one program of `op` it compiled (every offset it ran shares that program)."""
    r = run_python(textwrap.dedent(code), env={"TORCH_TPU_DUMP_DIR": str(tmp_path),
                                               "TORCH_TPU_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    (program,) = [p for p in tmp_path.glob(f"*{op}.mlir")]
    return program.read_text()


def test_last_position_of_every_sequence_reads_a_box_of_the_split_buffer(tmp_path):
    # `logits[:, -1:]` of [4, 32, V] logits made by a [128, V] matmul: every 32nd row of the buffer.
    # It is a box of the buffer split to [4, 32, V] (free on a TPU: the tiled minor dims stay), read
    # with one dynamic_slice, not a relayout of the whole buffer to 1-D, a window of it and a pad.
    text = _one_program_text(tmp_path, """
        import torch, torch_tpu
        torch_tpu.set_eager_mode("strict")
        x, w = torch.randn(128, 64), torch.randn(64, 300)
        logits = (x.to("tpu") @ w.to("tpu")).view(4, 32, 300)
        want = (x @ w).view(4, 32, 300)
        for t in (-1, 7):
            got = logits[:, t:t + 1 if t != -1 else None].argmax(-1).cpu()
            assert torch.equal(got, want[:, t:t + 1 if t != -1 else None].argmax(-1)), t
        print("ok")
    """, "aten__argmax")
    assert "(tensor<128x300xf32>) -> tensor<4x32x300xf32>" in text, text
    assert text.count('"stablehlo.dynamic_slice"') == 1, text
    assert "-> tensor<4x1x300xf32>" in text, text
    assert '"stablehlo.pad"' not in text, text


def test_half_of_a_transposed_view_reads_a_box_then_transposes(tmp_path):
    # RoPE's rotate_half on q = q_proj(x).view(b, s, h, d).transpose(1, 2): q[..., d // 2:] is a box
    # of the [b * s, h * d] buffer split to [b, s, h, d], read with one dynamic_slice and transposed.
    text = _one_program_text(tmp_path, """
        import torch, torch_tpu
        torch_tpu.set_eager_mode("strict")
        x = torch.randn(2 * 16, 4 * 32)
        q, qc = x.to("tpu").view(2, 16, 4, 32).transpose(1, 2), x.view(2, 16, 4, 32).transpose(1, 2)
        for half in (slice(16, None), slice(None, 16)):
            assert torch.equal((-q[..., half]).cpu(), -qc[..., half])
        print("ok")
    """, "aten__neg")
    assert "(tensor<32x128xf32>) -> tensor<2x16x4x32xf32>" in text, text
    assert text.count('"stablehlo.dynamic_slice"') == 1, text
    assert "-> tensor<2x16x4x16xf32>" in text, text
    assert '"stablehlo.pad"' not in text, text


@pytest.mark.parametrize("offset_of", [
    lambda w: w.chunk(2, -1)[1],
    lambda w: w[:, 3],
    lambda w: w[2:5, 1:4],
    lambda w: w.view(2, 4, 8)[1, :, 2:6],
    lambda w: w.view(2, 4, 8)[:, -1:],
    lambda w: w.view(4, 2, 8)[:, 1, 3:7],
    lambda w: w.view(2, 4, 2, 4).transpose(1, 2)[..., 2:],
])
def test_writes_at_run_time_offsets_into_boxes_of_the_shaped_buffer(offset_of):
    """In-place ops, copy_ and out= into a view that is a box of its storage's 2-D buffer write that
    box in place; every other element, and views of the storage, see the CPU's values."""
    base = torch.arange(64.0).reshape(8, 8)
    dev = base.clone().to("tpu")
    alias = dev.view(-1)
    with torch_tpu.eager_mode("strict"):
        offset_of(dev).mul_(3)
        offset_of(base).mul_(3)
        assert_same(dev, base)
        src = torch.randn(offset_of(base).shape)
        offset_of(dev).copy_(src.to("tpu"))
        offset_of(base).copy_(src)
        assert_same(dev, base)
        torch.add(offset_of(dev), 1, out=offset_of(dev))
        torch.add(offset_of(base), 1, out=offset_of(base))
        assert_same(alias, base.view(-1))
    # Every offset of a [3, 2] window, the wrapping ones included (those are no box).
    for offset in range(0, 64 - 2 * 8 - 2):
        dev.view(-1).as_strided((3, 2), (8, 1), offset).sub_(offset)
        base.view(-1).as_strided((3, 2), (8, 1), offset).sub_(offset)
    assert_same(dev, base)


def test_box_view_write_program_updates_the_buffer_unflattened(tmp_path):
    code = textwrap.dedent("""
        import torch, torch_tpu
        cache = torch.zeros(4, 16, 256).to("tpu")
        torch_tpu.set_eager_mode("strict")
        for step in range(3):  # a cache slot per step: one program for every slot
            cache[:, step].copy_(torch.full((4, 256), float(step + 1)).to("tpu"))
        print(cache[:, :4, 0].tolist())
    """)
    r = run_python(code, env={"TORCH_TPU_DUMP_DIR": str(tmp_path), "TORCH_TPU_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str([[1.0, 2.0, 3.0, 0.0]] * 4), r.stdout
    texts = [p.read_text() for p in tmp_path.glob("*.mlir") if '"stablehlo.dynamic_update_slice"' in p.read_text()]
    assert len(texts) == 1, [p.name for p in tmp_path.glob("*.mlir")]
    text = texts[0]
    # One dynamic_update_slice of the 3-D buffer parameter itself (no 1-D copy of it), starts in s32,
    # its result returned as the buffer.
    assert text.count('"stablehlo.dynamic_update_slice"') == 1, text
    (buffer,) = re.findall(r"(%\d+): tensor<4x16x256xf32>", text)
    (updated,) = re.findall(r'(%\d+) = "stablehlo.dynamic_update_slice"\(' + buffer + r", %\d+, %\d+, %\d+, %\d+\) : "
                            r"\(tensor<4x16x256xf32>, tensor<4x1x256xf32>, tensor<i32>, tensor<i32>, tensor<i32>\)", text)
    assert f'"func.return"({updated})' in text, text
    assert '"stablehlo.scatter"' not in text, text


def test_compiled_graph_reads_and_writes_box_views_of_the_shaped_buffer(tmp_path):
    """A compiled graph's input that is a box view at a run-time offset (a cache slot per step) is read
    with a dynamic_slice and written with a dynamic_update_slice of its 3-D buffer; the values are
    the CPU's and every step runs the same program."""
    code = textwrap.dedent("""
        import torch, torch_tpu
        def read(v, x): return v * 2 + x
        def write(v, x): v.add_(x)
        compiled_read = torch.compile(read, backend="tpu")
        compiled_write = torch.compile(write, backend="tpu")
        cache_cpu = torch.randn(4, 16, 256)
        cache = cache_cpu.to("tpu")
        for step in range(3):
            x = torch.randn(4, 256)
            assert torch.equal(compiled_read(cache[:, step], x.to("tpu")).cpu(), read(cache_cpu[:, step], x))
            compiled_write(cache[:, step], x.to("tpu"))
            write(cache_cpu[:, step], x)
        assert torch.equal(cache.cpu(), cache_cpu)
    """)
    r = run_python(code, env={"TORCH_TPU_DUMP_DIR": str(tmp_path), "TORCH_TPU_CACHE_DIR": str(tmp_path / "cache"),
                              "TORCH_TPU_COMPILE_AHEAD": "0"})
    assert r.returncode == 0, r.stderr
    texts = [p.read_text() for p in sorted(tmp_path.glob("*compiled*.mlir"))]
    assert len(texts) == 2, [p.name for p in tmp_path.glob("*.mlir")]  # one program per graph
    box_read = ("(tensor<4x16x256xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<4x1x256xf32>")
    box_write = ("(tensor<4x16x256xf32>, tensor<4x1x256xf32>, tensor<i32>, tensor<i32>, tensor<i32>)"
                 " -> tensor<4x16x256xf32>")
    assert all(box_read in t for t in texts), texts
    assert sum('"stablehlo.dynamic_update_slice"' in t for t in texts) == 1, texts
    assert any(box_write in t for t in texts), texts
