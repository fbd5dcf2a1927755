"""The ctypes structures of flashattn._capi against the C library's own layout (fa_abi_layout,
core/abi_layout.c: sizeof and offsetof as the library was compiled, not restated here): every
structure's size, every field's offset and size, and no structure or field on one side only."""
import ctypes

from flashattn import _capi


def python_structures():
    """_c_name_ -> the ctypes Structure of _capi that declares it."""
    found = {}
    for value in vars(_capi).values():
        if isinstance(value, type) and issubclass(value, ctypes.Structure) and value is not ctypes.Structure:
            assert hasattr(value, "_c_name_"), f"_capi.{value.__name__} names no C structure (_c_name_)"
            found[value._c_name_] = value
    return found


def c_layout():
    """struct name -> (size, {field: (offset, size)}) from the library, fields in declaration order."""
    layout = {}
    for struct, field, offset, size in _capi.abi_layout():
        if field is None:
            assert struct not in layout, f"{struct} listed twice"
            layout[struct] = (size, {})
        else:
            assert struct in layout, f"{struct}.{field} before its structure's entry"
            layout[struct][1][field] = (offset, size)
    return layout


def test_every_c_structure_is_declared_in_python():
    missing = sorted(set(c_layout()) - set(python_structures()))
    assert not missing, f"public C structures without a ctypes declaration in _capi: {missing}"


def test_every_python_structure_exists_in_c():
    extra = sorted(set(python_structures()) - set(c_layout()))
    assert not extra, f"_capi declares structures the library does not list: {extra}"


def test_sizes_and_offsets_match_the_library():
    layout, structures = c_layout(), python_structures()
    problems = []
    for name, (size, fields) in layout.items():
        cls = structures.get(name)
        if cls is None:
            continue  # reported by test_every_c_structure_is_declared_in_python
        if ctypes.sizeof(cls) != size:
            problems.append(f"sizeof({name}): C {size}, ctypes {ctypes.sizeof(cls)}")
        py_fields = [f[0] for f in cls._fields_]
        if py_fields != list(fields):
            problems.append(f"{name} fields: C {list(fields)}, ctypes {py_fields}")
        for field, (offset, fsize) in fields.items():
            if field not in py_fields:
                continue  # the list comparison above names it
            desc = getattr(cls, field)
            if (desc.offset, desc.size) != (offset, fsize):
                problems.append(f"{name}.{field}: C offset {offset} size {fsize}, "
                                f"ctypes offset {desc.offset} size {desc.size}")
    assert not problems, "\n".join(problems)


def test_the_table_covers_the_structures_the_calls_take():
    # the structures passed to fa_forward / fa_backward / fa_forward_kvcache are in the table (a
    # table that lost them would make the tests above vacuous for them)
    layout = c_layout()
    for name in ("fa_tensor", "fa_options", "fa_varlen", "fa_block_mask", "fa_fwd_args", "fa_bwd_args",
                 "fa_kvcache_args"):
        assert name in layout and layout[name][1], name


def test_varlen_carries_the_block_table():
    # the paged varlen forward (fa_varlen.block_table, block_table_stride, last) is in the table and
    # the mirror: a library or a _capi without them would pass the comparisons above only together
    fields = list(c_layout()["fa_varlen"][1])
    assert fields[-2:] == ["block_table", "block_table_stride"], fields
    assert [f[0] for f in _capi.Varlen._fields_][-2:] == ["block_table", "block_table_stride"]
