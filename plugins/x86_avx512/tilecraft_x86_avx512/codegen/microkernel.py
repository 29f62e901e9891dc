"""Micro-kernel calls: render the plugin's template once per parameter set, call it.

The x86 micro-kernel ABI: the rendered function takes, for each operand in declaration order,
a pointer to the region's first element followed by one i64 element stride per declared
dimension. A region may carry extra leading dimensions of extent 1 (a tile of a batched
buffer); they are dropped. The innermost stride must be 1: the templates load whole vectors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilecraft.kernel_ir.nodes import MicroKernelCall
from tilecraft_x86_avx512.microkernels import LLVM_DECLARATIONS, MICRO_KERNELS, render

if TYPE_CHECKING:
    from tilecraft_x86_avx512.codegen.stmt import StmtEmitter


def function_name(name: str, params: dict[str, int]) -> str:
    """The rendered function's symbol: one per micro-kernel and parameter set.

    >>> function_name("outer_product_f32", {"MI": 5, "NR": 80, "KI": 256})
    'mk.outer_product_f32.KI256.MI5.NR80'
    """
    return ".".join(["mk", name, *(f"{k}{v}" for k, v in sorted(params.items()))])


def emit_micro_kernel_call(stmts: StmtEmitter, call: MicroKernelCall) -> None:
    ctx = stmts.ctx
    decl = MICRO_KERNELS.get(call.micro_kernel)
    if decl is None:
        raise ctx.error(f"calls the micro-kernel {call.micro_kernel!r}, which the x86_avx512 "
                        f"plugin does not provide (it provides {', '.join(MICRO_KERNELS)})")
    params = {k: int(v) for k, v in call.params}
    resolved = decl.resolve(params)
    for written, whole in (("MV", "MI"), ("NC", "NR")):  # edge extents default to the tile
        if written in resolved and written not in params:
            resolved[written] = resolved[whole]
    fn = function_name(decl.name, resolved)
    ctx.fb.module.helper(fn, lambda: render(decl.name, params, fn))
    if len(call.operands) != len(decl.operands):
        raise ctx.error(f"calls {decl.name} with {len(call.operands)} operands; it takes "
                        f"{len(decl.operands)} ({', '.join(o.name for o in decl.operands)})")
    memory = stmts.exprs.memory
    args: list[str] = []
    for region, operand in zip(call.operands, decl.operands):
        buffer = region.buffer
        declared = len(operand.shape)
        extra = len(region.extents) - declared
        if extra < 0 or any(e != 1 for e in region.extents[:extra]):
            raise ctx.error(f"the {operand.name} operand of {decl.name} is a region of extents "
                            f"{list(region.extents)} of {buffer.name}; it needs {declared} "
                            "dimensions (extra leading dimensions must have extent 1)")
        strides = [s * step for s, step in zip(buffer.strides(), region.steps)][extra:]
        if strides[-1] != 1:
            raise ctx.error(f"the {operand.name} operand of {decl.name} steps by {strides[-1]} "
                            f"elements along its last dimension in {buffer.name}; the x86 "
                            "micro-kernels need it contiguous (stride 1)")
        with ctx.uniform():
            offset = memory.offset(buffer, region.base)
            pointer = memory.address(buffer, offset)
        args.append(f"ptr {pointer.ref}")
        args.extend(f"i64 {stride}" for stride in strides)
    for intrinsic, ret, arg_types in LLVM_DECLARATIONS.get(decl.name, ()):
        ctx.fb.module.declare(intrinsic, ret, arg_types)
    ctx.fb.emit(f'call void @"{fn}"({", ".join(args)})')


__all__ = ["emit_micro_kernel_call", "function_name"]
