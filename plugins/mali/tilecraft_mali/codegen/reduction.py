"""``SubgroupReduce`` in OpenCL C: a butterfly through ``__local`` memory.

Every work-item of a group of ``width`` consecutive values of the lane variable (bound to
``local_id.x``) gets the reduction of its group's values: at each step it publishes its value
in a ``__local`` scratch row (one slot per work-item of the work-group), waits at a barrier,
combines the value of the work-item whose slot differs in one bit, and waits again before the
row is reused. It needs no extension: PoCL's CPU device has no ``cl_khr_subgroups`` and the
subgroup size of a real device's compiler is not the kernel's to choose. Every work-item must
reach the barriers, so a reduction under a work-item-dependent condition is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilecraft.codegen.c_expressions import combine
from tilecraft.kernel_ir.concurrency import SubgroupReduce
from tilecraft.target.hierarchy import LaunchScope
from tilecraft_mali.codegen.dialect import OPENCL

if TYPE_CHECKING:
    from tilecraft_mali.codegen.statements import OpenCLEmitter

__all__ = ["SCRATCH_NAMES", "emit_subgroup_reduce", "scratch_declarations"]

#: the __local scratch row of each compute type
SCRATCH_NAMES = {"float": "tc_scratch_f", "int": "tc_scratch_i"}


def emit_subgroup_reduce(emitter: OpenCLEmitter, stmt: SubgroupReduce) -> None:
    """The butterfly of ``stmt`` (module docstring)."""
    emitter.check_writer(stmt.buffer, f"the subgroup reduction into {stmt.buffer.name}")
    axis = emitter.bound.get(stmt.lane)
    launch = emitter.launch
    if axis is None or launch.scopes[axis] is not LaunchScope.BLOCK or not axis.endswith(".x"):
        raise emitter.fail(f"a subgroup reduction over {stmt.lane.name}, which is not the "
                           "variable of an enclosing loop bound to local_id.x",
                           "bind the lane loop to local_id.x")
    width, launched = stmt.width, launch.extents[axis]
    if width < 1 or width & (width - 1) or launched % width:
        raise emitter.fail(f"a subgroup reduction of width {width} over {axis} launched "
                           f"{launched} wide", "use a power of two dividing the work-group's x "
                           "extent")
    emitter.require_uniform("a subgroup reduction (its barriers)")
    ctype = "float" if stmt.value.dtype.is_float else "int"
    scratch = SCRATCH_NAMES[ctype]
    emitter.scratch[ctype] = launch.threads_per_block
    value = emitter.names.fresh("tc_reduced")
    slot = emitter.names.fresh("tc_slot")
    bx, by, _ = launch.block
    with emitter.scope():
        emitter.line(f"{ctype} {value} = {emitter.expr(stmt.value)};")
        emitter.line(f"const int {slot} = (int)(get_local_id(0) + {bx} * (get_local_id(1) + "
                     f"{by} * get_local_id(2)));")
        offset = width // 2
        while offset:
            emitter.line(f"{scratch}[{slot}] = {value};")
            emitter.line("barrier(CLK_LOCAL_MEM_FENCE);")
            partner = f"{scratch}[{slot} ^ {offset}]"
            emitter.line(f"{value} = {combine(stmt.op, value, partner, OPENCL, stmt.value.dtype)};")
            emitter.line("barrier(CLK_LOCAL_MEM_FENCE);")
            offset //= 2
        emitter.store(stmt.buffer, stmt.indices, value)


def scratch_declarations(scratch: dict[str, int]) -> list[tuple[str, int]]:
    """``(declaration, bytes)`` of the scratch rows the reductions of a kernel use."""
    return [(f"__local {ctype} {SCRATCH_NAMES[ctype]}[{slots}];", 4 * slots)
            for ctype, slots in sorted(scratch.items())]
