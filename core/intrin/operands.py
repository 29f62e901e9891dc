"""A mapped operand's value in a target's own lowering of a physical mapping.

A plugin that lowers an AMOS mapping itself (``Target.lower_mapped``: WMMA fragments, OpenCL
``arm_dot``) loads each intrinsic operand from the compute's buffers: the operand's factor of
the sum of products, with every tensor read a load of the buffer of the same name and every
software loop its value at this point of the kernel.

>>> from tilecraft import ops, te
>>> from tilecraft.intrin import generate, match
>>> from tilecraft.intrin.examples import wmma
>>> from tilecraft.kernel_ir.nodes import Buffer
>>> A = te.placeholder((2, 3), "float16", name="A")
>>> B = te.placeholder((3, 2), "float16", name="B")
>>> C = ops.matmul(A, B, out_dtype="float32", name="C")
>>> mma = wmma(16, 16, 16)
>>> virtual = generate(C, mma, match(C, mma).mappings[0]).virtual
>>> params = {t.name: Buffer(t.name, t.shape, t.dtype) for t in (A, B)}
>>> values = {loop: te.const(0) for loop in virtual.product.loops}
>>> str(operand_value(virtual, params, "Src1", values))
'A[0, 0]'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tilecraft.kernel_ir.nodes import Buffer, BufferLoad
from tilecraft.te.expr import Expr, IterVar, Load
from tilecraft.te.visit import transform


def operand_value(virtual: Any, params: Mapping[str, Buffer], operand: str,
                  values: Mapping[IterVar, Expr]) -> Expr:
    """The element intrinsic operand ``operand`` (e.g. ``"Src1"``) of ``virtual`` (a
    VirtualMapping) reads when the compute's loops take ``values``: its factor with tensor
    reads turned into loads of ``params`` (buffers by tensor name)."""
    position = virtual.mapping.binding(operand).factor
    if position is None:
        raise ValueError(f"operand {operand} of {virtual.intrinsic.name} binds no factor")
    factor = virtual.product.factors[position]

    def replace(node: Expr) -> Expr | None:
        if isinstance(node, Load):
            return BufferLoad(params[node.tensor.name],
                              tuple(transform(i, replace) for i in node.indices))
        if isinstance(node, IterVar):
            return values[node]
        return None

    return transform(factor.value(), replace)


__all__ = ["operand_value"]
