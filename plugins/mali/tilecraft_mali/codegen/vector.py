"""Vector loops in OpenCL C: ``vloadN`` / ``vstoreN`` where provably contiguous, unrolled
scalar code otherwise.

A ``vector`` loop of N lanes (2, 4, 8 or 16) over float32 whose body is one store becomes,
per group of N iterations, ``floatN`` loads of every operand that walks memory with the loop
variable, N lane computations and one ``vstoreN`` — when every such access is contiguous (the
loop variable's coefficient in its element offset is 1) and the extent divides by N.
``vloadN`` needs only element alignment, so no base alignment has to be proven. Anything else
— strides, a ragged extent, guards, half types — is the same loop in scalar code under
``#pragma unroll``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilecraft.codegen.affine import linear_form
from tilecraft.codegen.c_expressions import combine, flat_index
from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import BufferLoad, For, Store, walk_expr
from tilecraft.te.expr import Const, Var
from tilecraft_mali.codegen.dialect import OPENCL

if TYPE_CHECKING:
    from tilecraft_mali.codegen.statements import OpenCLEmitter

__all__ = ["VECTOR_WIDTHS", "emit_vector_loop", "vector_width"]

VECTOR_WIDTHS = (2, 4, 8, 16)
_LANE_NAMES = "0123456789abcdef"


def _moving_loads(store: Store, var: Var) -> list[BufferLoad]:
    loads = {node: None for node in walk_expr(store.value) if isinstance(node, BufferLoad)
             and any(n == var for index in node.indices for n in walk_expr(index))}
    if store.accumulate is not None:
        loads[BufferLoad(store.buffer, store.indices)] = None
    return list(loads)


def vector_width(loop: For) -> int:
    """N when ``loop`` can run on ``floatN`` accesses (module docstring), else 1."""
    store, lanes = loop.body, loop.lanes
    if lanes not in VECTOR_WIDTHS or not isinstance(loop.extent, Const) \
            or int(loop.extent.value) % lanes or not isinstance(store, Store):
        return 1
    for access in (store, *_moving_loads(store, loop.var)):
        form = linear_form(flat_index(access.buffer, access.indices), loop.var)
        if access.buffer.dtype is not DType.FLOAT32 or form is None \
                or form.coefficient(loop.var) != 1:
            return 1
    return lanes


def emit_vector_loop(emitter: OpenCLEmitter, loop: For, name: str, header: str) -> None:
    """The loop as ``vloadN`` / ``vstoreN`` code, or unrolled scalar code (module doc)."""
    lanes = vector_width(loop)
    if lanes == 1:
        emitter.line("#pragma unroll")
        with emitter.scope(header):
            emitter.visit(loop.body)
        return
    store = loop.body
    assert isinstance(store, Store)
    emitter.check_writer(store.buffer, f"the store into {store.buffer.name}")
    printer, var, vector = emitter.printer, loop.var, f"float{lanes}"
    with emitter.scope(f"for (int {name} = 0; {name} < {emitter.expr(loop.extent)}; "
                       f"{name} += {lanes})"):
        held: dict[BufferLoad, str] = {}
        for load in _moving_loads(store, var):
            held[load] = emitter.names.fresh("tc_vector")
            emitter.line(f"const {vector} {held[load]} = vload{lanes}(0, "
                         f"&{emitter.element(load.buffer, load.indices)});")
        result = emitter.names.fresh("tc_vector")
        emitter.line(f"{vector} {result};")
        for lane in range(lanes):
            component = f".s{_LANE_NAMES[lane]}"
            printer.overrides = {load: text + component for load, text in held.items()}
            printer.overrides[var] = f"({name} + {lane})"
            try:
                value = printer.expr(store.value)
                if store.accumulate is not None:
                    old = printer.overrides[BufferLoad(store.buffer, store.indices)]
                    value = combine(store.accumulate, old, value, OPENCL, DType.FLOAT32)
            finally:
                printer.overrides = {}
            emitter.line(f"{result}{component} = {value};")
        target = emitter.element(store.buffer, store.indices)
        emitter.line(f"vstore{lanes}({result}, 0, &{target});")
