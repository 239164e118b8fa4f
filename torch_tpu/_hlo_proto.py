"""Reads the optimised program libtpu returns (a serialized HloModuleProto, or HloModuleProtoWithConfig)
into HLO text, without protobuf or XLA: a minimal wire-format reader of the few fields the text shows.

The text is a simplified HLO: per computation, one line per instruction with its name, shape and layout
(tiles included, e.g. ``f32[512,128]{1,0:T(8,128)}``), opcode and operands; attributes are left out.
"""

_TYPES = {1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32", 9: "u64", 10: "f16",
          11: "f32", 12: "f64", 13: "tuple", 14: "opaque", 15: "c64", 16: "bf16", 17: "token", 18: "c128",
          19: "f8e5m2", 20: "f8e4m3fn", 21: "s4", 22: "u4"}


def _varint(data, i):
    value = shift = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def _fields(data):
    """Yields (field number, wire type, value): ints for varints, bytes for length-delimited."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            n, i = _varint(data, i)
            value, i = data[i:i + n], i + n
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield field, wire, value


def _ints(wire, value):
    """A repeated integer field: packed (bytes) or one varint."""
    if wire == 0:
        return [value]
    out, i = [], 0
    while i < len(value):
        v, i = _varint(value, i)
        out.append(v)
    return out


def _signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def _shape(data):
    etype, dims, tuple_shapes, layout = 0, [], [], ""
    for f, w, v in _fields(data):
        if f == 2:
            etype = v
        elif f == 3:
            dims += [_signed(d) for d in _ints(w, v)]
        elif f == 4:
            tuple_shapes.append(_shape(v))
        elif f == 5:
            layout = _layout(v)
    if etype == 13:
        return "(" + ", ".join(tuple_shapes) + ")"
    return f"{_TYPES.get(etype, f'type{etype}')}[{','.join(map(str, dims))}]" + (f"{{{layout}}}" if layout else "")


def _layout(data):
    minor_to_major, tiles = [], []
    for f, w, v in _fields(data):
        if f == 1:
            minor_to_major += _ints(w, v)
        elif f == 6:
            tile = [d for tf, tw, tv in _fields(v) if tf == 1 for d in _ints(tw, tv)]
            tiles.append("(" + ",".join(map(str, tile)) + ")")
    text = ",".join(map(str, minor_to_major))
    return text + (":T" + "".join(tiles) if tiles else "")


def _module_proto(data, fmt):
    if fmt == "hlo_with_config":  # HloModuleProtoWithConfig: hlo_module(1), config(2)
        for f, _, v in _fields(data):
            if f == 1:
                return v
        return b""
    return data


def hlo_text(data, fmt="hlo"):
    """The HLO text of a serialized HloModuleProto (fmt "hlo") or HloModuleProtoWithConfig."""
    lines = []
    for f, _, computation in _fields(_module_proto(data, fmt)):
        if f != 3:  # HloModuleProto.computations
            continue
        name, instructions = "", []
        for cf, _, cv in _fields(computation):
            if cf == 1:
                name = cv.decode()
            elif cf == 2:
                instructions.append(cv)
        names, rows = {}, []
        for ins in instructions:
            iname, opcode, shape, iid, operands = "", "", "", None, []
            for f2, w2, v2 in _fields(ins):
                if f2 == 1:
                    iname = v2.decode()
                elif f2 == 2:
                    opcode = v2.decode()
                elif f2 == 3:
                    shape = _shape(v2)
                elif f2 == 35:
                    iid = v2
                elif f2 == 36:
                    operands += _ints(w2, v2)
            names[iid] = iname
            rows.append((iname, shape, opcode, operands))
        lines.append(f"{name} {{")
        for iname, shape, opcode, operands in rows:
            args = ", ".join("%" + names.get(o, str(o)) for o in operands)
            lines.append(f"  %{iname} = {shape} {opcode}({args})")
        lines.append("}")
    return "\n".join(lines) + "\n"


def count_copies(text):
    """Instructions whose opcode is ``copy`` or ``copy-start`` in every computation of an HLO text
    (fused computations included): the relayout copies the TPU compiler inserted."""
    return sum(line.count(" copy(") + line.count(" copy-start(") for line in text.splitlines())
