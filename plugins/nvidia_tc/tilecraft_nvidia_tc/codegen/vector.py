"""Vector loops: 128-bit accesses where provably legal, unrolled scalar code else.

A ``vector`` loop whose lanes fill 16 bytes (4 float32, 8 float16 / bfloat16, 16 int8) and
whose body is one store becomes, per group of lanes, one 128-bit load of every operand that
walks memory with the loop variable, the lane computations and one 128-bit store: ``float4``
for float32 (lanes ``.x .. .w``), ``tc_vec16<T>`` through ``tc_load16`` / ``tc_store16`` of
``tilecraft_cuda.h`` for the narrow types (lanes ``.lane[0] ..``; a uint4 access underneath).
That needs every such access to be contiguous (the loop variable's coefficient in the element
offset is 1), of elements as wide as the store's, starting at a multiple of the lanes whatever
the other variables are (so 16-byte aligned: every array is, see :mod:`.memory`, and kernel
parameters must be, see the source's ``param_alignment``), and the extent to divide by the
lanes. Anything else — strides, a ragged extent, a guard inside the loop, mixed widths — is the
same loop in scalar code under ``#pragma unroll``: never a misaligned or out-of-bounds access.
A lane that stores a loaded element of the store's type unchanged copies it (no conversion
pair); a whole-vector copy stores the loaded vector itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import BufferLoad, For, Store, walk_expr
from tilecraft.te.expr import Const, Var
from tilecraft_nvidia_tc.codegen.affine import linear_form
from tilecraft_nvidia_tc.codegen.dtypes import load_value, storage_type

if TYPE_CHECKING:
    from tilecraft_nvidia_tc.codegen.statements import StatementEmitter

__all__ = ["WIDE_BYTES", "emit_vector_loop", "widenable"]

WIDE_BYTES = 16
_COMPONENTS = ("x", "y", "z", "w")


def _contiguous(access: BufferLoad | Store, var: Var, lanes: int) -> bool:
    from tilecraft_nvidia_tc.codegen.statements import flat_index

    form = linear_form(flat_index(access.buffer, access.indices), var)
    return form is not None and form.coefficient(var) == 1 and form.multiple_of(lanes, but=var)


def _walking_loads(store: Store, var: Var) -> list[BufferLoad]:
    """The loads of ``store``'s value whose address moves with ``var``."""
    return [node for node in walk_expr(store.value) if isinstance(node, BufferLoad)
            and any(n == var for i in node.indices for n in walk_expr(i))]


def widenable(loop: For) -> bool:
    """Whether ``loop`` can run on 128-bit accesses (module docstring)."""
    body = loop.body
    if not isinstance(body, Store) or not isinstance(loop.extent, Const):
        return False
    dtype = body.buffer.dtype
    lanes = loop.lanes
    if lanes * dtype.bytes != WIDE_BYTES or int(loop.extent.value) % lanes \
            or body.buffer.lanes != 1 or not _contiguous(body, loop.var, lanes):
        return False
    return all(load.buffer.dtype.bytes == dtype.bytes and load.buffer.lanes == 1
               and _contiguous(load, loop.var, lanes) for load in _walking_loads(body, loop.var))


def _vector_type(dtype: DType) -> str:
    return "float4" if dtype is DType.FLOAT32 else f"tc_vec16<{storage_type(dtype)}>"


def _lane(dtype: DType, lane: int) -> str:
    return f".{_COMPONENTS[lane]}" if dtype is DType.FLOAT32 else f".lane[{lane}]"


def _wide_load(emitter: StatementEmitter, load: BufferLoad, name: str) -> str:
    address = f"&{emitter.access(load.buffer, load.indices)}"
    dtype = load.buffer.dtype
    if dtype is DType.FLOAT32:
        return f"const float4 {name} = *reinterpret_cast<const float4*>({address});"
    return f"const {_vector_type(dtype)} {name} = tc_load16({address});"


def emit_vector_loop(emitter: StatementEmitter, loop: For, name: str) -> None:
    """The loop as 128-bit code when :func:`widenable`, unrolled scalar code otherwise."""
    extent = emitter.expr(loop.extent)
    if not widenable(loop):
        emitter.line("#pragma unroll")
        with emitter.block(f"for (int {name} = 0; {name} < {extent}; ++{name})"):
            emitter.visit(loop.body)
        return
    store = loop.body
    assert isinstance(store, Store)
    emitter.check_writer(store.buffer, f"the store into {store.buffer.name}")
    printer = emitter.printer
    var, lanes, dtype = loop.var, loop.lanes, store.buffer.dtype
    with emitter.block(f"for (int {name} = 0; {name} < {extent}; {name} += {lanes})"):
        wide: dict[BufferLoad, str] = {}
        loads = _walking_loads(store, var)
        if store.accumulate is not None:
            loads.append(BufferLoad(store.buffer, store.indices))
        for load in loads:
            if load not in wide:
                wide[load] = emitter.names.fresh("tc_wide")
                emitter.line(_wide_load(emitter, load, wide[load]))
        target = f"&{emitter.access(store.buffer, store.indices)}"
        copied = emitter.copied_load(store)
        if copied is not None and copied in wide and dtype is not DType.FLOAT32:
            emitter.line(f"tc_store16({target}, {wide[copied]});")
            return
        result = emitter.names.fresh("tc_wide")
        emitter.line(f"{_vector_type(dtype)} {result};")
        for lane in range(lanes):
            raw = {load: f"{text}{_lane(load.buffer.dtype, lane)}" for load, text in wide.items()}
            printer.overrides = {load: load_value(text, load.buffer.dtype)
                                 for load, text in raw.items()}
            printer.overrides[var] = f"({name} + {lane})"
            try:
                value = emitter.stored(store, raw)
            finally:
                printer.overrides = {}
            emitter.line(f"{result}{_lane(dtype, lane)} = {value};")
        if dtype is DType.FLOAT32:
            emitter.line(f"*reinterpret_cast<float4*>({target}) = {result};")
        else:
            emitter.line(f"tc_store16({target}, {result});")
