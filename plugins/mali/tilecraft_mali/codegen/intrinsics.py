"""Intrinsic calls in OpenCL C: Arm's integer dot products.

``IntrinsicCall("arm_dot_acc", (a[o:4], b[p:4], acc[q:1]))`` becomes::

    acc[q] = arm_dot_acc(vload4(0, a + o), vload4(0, b + p), acc[q]);

and ``arm_dot`` the same without the accumulator argument. The operands are ``char4`` loads
of four contiguous int8 elements (any memory: private registers, ``__local`` or global) and
an int32 element. The program declares the functions behind the extension macros: where the
device has ``cl_arm_integer_dot_product_int8`` (``..._accumulate_int8``) the extension is
enabled and Arm's built-in is called; elsewhere (PoCL, any non-Mali device) a polyfill of the
same signature computes it (:data:`POLYFILL`): exact int32 products of the sign-extended
bytes, the accumulation wrapping like int32 addition on the GPU.

Anything else — another intrinsic, an operand that is not four contiguous int8 elements or
one int32 element — is a CodegenError naming the kernel and the operand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilecraft.codegen.c_expressions import flat_index
from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import IntrinsicCall, Region

if TYPE_CHECKING:
    from tilecraft_mali.codegen.statements import OpenCLEmitter

__all__ = ["DOT_PRODUCTS", "POLYFILL", "emit_intrinsic_call"]

#: the intrinsics this generator emits -> whether they take an accumulator
DOT_PRODUCTS = {"arm_dot": False, "arm_dot_acc": True}

#: the declarations of arm_dot / arm_dot_acc: Arm's built-ins where the extensions exist
POLYFILL = """\
#if defined(cl_arm_integer_dot_product_int8)
#pragma OPENCL EXTENSION cl_arm_integer_dot_product_int8 : enable
#else
// no cl_arm_integer_dot_product_int8 on this device: the same function in plain OpenCL C
inline int arm_dot(char4 a, char4 b) {
    int4 products = convert_int4(a) * convert_int4(b);
    return products.x + products.y + products.z + products.w;
}
#endif
#if defined(cl_arm_integer_dot_product_accumulate_int8)
#pragma OPENCL EXTENSION cl_arm_integer_dot_product_accumulate_int8 : enable
#else
// no cl_arm_integer_dot_product_accumulate_int8: c + arm_dot(a, b), wrapping like int32
inline int arm_dot_acc(char4 a, char4 b, int c) {
    int4 products = convert_int4(a) * convert_int4(b);
    return as_int(as_uint(c) + as_uint(products.x + products.y + products.z + products.w));
}
#endif
"""


def _char4(emitter: OpenCLEmitter, call: IntrinsicCall, region: Region) -> str:
    """``vload4(0, buffer + offset)`` of a source region of four contiguous int8."""
    buffer = region.buffer
    if buffer.dtype is not DType.INT8 or tuple(e for e in region.extents if e != 1) != (4,) \
            or any(step != 1 for step, e in zip(region.steps, region.extents) if e != 1) \
            or region.extents[-1] != 4:
        raise emitter.fail(f"the {call.intrinsic} operand {buffer.name} "
                           f"({buffer.dtype.value}, extents {list(region.extents)})",
                           "pass four contiguous int8 elements along the innermost dimension")
    offset = emitter.expr(flat_index(buffer, region.base))
    name = emitter.names.buffer(buffer)
    return f"vload4(0, {name} + {offset})" if offset != "0" else f"vload4(0, {name})"


def emit_intrinsic_call(emitter: OpenCLEmitter, call: IntrinsicCall) -> None:
    """One line calling ``arm_dot`` / ``arm_dot_acc`` (module docstring)."""
    accumulates = DOT_PRODUCTS.get(call.intrinsic)
    if accumulates is None:
        raise emitter.fail(f"the intrinsic call {call.intrinsic}",
                           f"the OpenCL C generator emits {', '.join(DOT_PRODUCTS)} only")
    if len(call.operands) != 3:
        raise emitter.fail(f"the {call.intrinsic} call with {len(call.operands)} operands",
                           "pass Src1, Src2 and Dst")
    first, second, destination = call.operands
    if destination.buffer.dtype is not DType.INT32 \
            or any(extent != 1 for extent in destination.extents):
        raise emitter.fail(f"the {call.intrinsic} destination {destination.buffer.name} "
                           f"({destination.buffer.dtype.value}, extents "
                           f"{list(destination.extents)})", "write one int32 element")
    emitter.check_writer(destination.buffer, f"the {call.intrinsic} call writing "
                                             f"{destination.buffer.name}")
    emitter.uses_dot_products = True
    target = emitter.element(destination.buffer, destination.base)
    arguments = [_char4(emitter, call, first), _char4(emitter, call, second)]
    if accumulates:
        arguments.append(target)
    emitter.line(f"{target} = {call.intrinsic}({', '.join(arguments)});")
