"""Vector loops: 128-bit ``float4`` accesses where provably legal, unrolled scalar code else.

A ``vector`` loop of 4 lanes over float32 whose body is one store becomes, per group of four
iterations, ``float4`` loads of every operand that walks memory with the loop variable, four
lane computations and one ``float4`` store — when every such access is contiguous (the loop
variable's coefficient in the element offset is 1), starts at a multiple of 4 elements
whatever the other variables are (so 16-byte aligned: every array is, see :mod:`.memory`, and
kernel parameters must be, see the source's ``param_alignment``) and the extent divides by 4.
Anything else — strides, a ragged extent, a guard inside the loop, half types — is the same
loop in scalar code under ``#pragma unroll``: never a misaligned or out-of-bounds access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import BufferLoad, For, Store, walk_expr
from tilecraft.te.expr import Const, Var
from tilecraft_nvidia_tc.codegen.affine import linear_form
from tilecraft_nvidia_tc.codegen.dtypes import store_value

if TYPE_CHECKING:
    from tilecraft_nvidia_tc.codegen.statements import StatementEmitter

__all__ = ["WIDE_BYTES", "emit_vector_loop", "widenable"]

WIDE_BYTES = 16
_COMPONENTS = ("x", "y", "z", "w")


def _contiguous(access: BufferLoad | Store, var: Var) -> bool:
    from tilecraft_nvidia_tc.codegen.statements import flat_index

    form = linear_form(flat_index(access.buffer, access.indices), var)
    return form is not None and form.coefficient(var) == 1 and form.multiple_of(4, but=var)


def widenable(loop: For) -> bool:
    """Whether ``loop`` can run on ``float4`` accesses (module docstring)."""
    body = loop.body
    if loop.lanes * DType.FLOAT32.bytes != WIDE_BYTES or not isinstance(loop.extent, Const) \
            or int(loop.extent.value) % 4 or not isinstance(body, Store):
        return False
    if body.buffer.dtype is not DType.FLOAT32 or body.buffer.lanes != 1 \
            or not _contiguous(body, loop.var):
        return False
    for node in walk_expr(body.value):
        if isinstance(node, BufferLoad) and any(n == loop.var for i in node.indices
                                                for n in walk_expr(i)):
            if node.buffer.dtype is not DType.FLOAT32 or not _contiguous(node, loop.var):
                return False
    return True


def emit_vector_loop(emitter: StatementEmitter, loop: For, name: str) -> None:
    """The loop as ``float4`` code when :func:`widenable`, unrolled scalar code otherwise."""
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
    var = loop.var
    with emitter.block(f"for (int {name} = 0; {name} < {extent}; {name} += 4)"):
        wide: dict[BufferLoad, str] = {}
        loads = [node for node in walk_expr(store.value) if isinstance(node, BufferLoad)
                 and any(n == var for i in node.indices for n in walk_expr(i))]
        if store.accumulate is not None:
            loads.append(BufferLoad(store.buffer, store.indices))
        for load in loads:
            if load not in wide:
                wide[load] = emitter.names.fresh("tc_wide")
                emitter.line(f"const float4 {wide[load]} = *reinterpret_cast<const float4*>("
                             f"&{emitter.access(load.buffer, load.indices)});")
        result = emitter.names.fresh("tc_wide")
        emitter.line(f"float4 {result};")
        for lane, component in enumerate(_COMPONENTS):
            printer.overrides = {load: f"{text}.{component}" for load, text in wide.items()}
            printer.overrides[var] = f"({name} + {lane})"
            try:
                value = printer.expr(store.value)
                if store.accumulate is not None:
                    from tilecraft_nvidia_tc.codegen.statements import combine

                    old = printer.overrides[BufferLoad(store.buffer, store.indices)]
                    value = combine(store.accumulate, old, value)
            finally:
                printer.overrides = {}
            emitter.line(f"{result}.{component} = {store_value(value, DType.FLOAT32)};")
        emitter.line(f"*reinterpret_cast<float4*>(&{emitter.access(store.buffer, store.indices)})"
                     f" = {result};")
