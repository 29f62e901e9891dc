"""Checks a code generator runs first: does this Kernel IR only use what the target declares?

Loop kinds must be among ``spec.loop_kinds``, buffers must live in levels of the memory
hierarchy, intrinsic and micro-kernel calls must name declared ones (with the declared number
of operands), and each operand of an intrinsic call must be a region of the declared shape in
a buffer of the declared dtype. Every problem is listed in one
:class:`~tilecraft.errors.CodegenError`.

>>> from tilecraft.kernel_ir import Buffer, For, Kernel, LoopKind, Store
>>> from tilecraft.te import Var, const
>>> from tilecraft.dtypes import DType
>>> out = Buffer("out", (8,), DType.FLOAT32, level="DRAM")
>>> i = Var("i")
>>> kernel = Kernel("zero", (out,), ("out",),
...                 For(i, const(8), LoopKind.VECTOR, Store(out, (i,), const(0.0)), lanes=8))
>>> problems = kernel_problems(kernel, loop_kinds=["serial"], levels=["DRAM"])
>>> print(problems[0])
loop i is vector, which this target cannot express (it expresses: serial)
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    Copy,
    For,
    IfThenElse,
    IntrinsicCall,
    Kernel,
    LoopKind,
    MicroKernelCall,
    Seq,
    Stmt,
    Store,
    StreamPop,
)

if TYPE_CHECKING:
    from tilecraft.target.spec import TargetSpec


def iter_stmts(stmt: Stmt) -> Iterator[Stmt]:
    """Every statement of ``stmt``, parents before children."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, Seq):
            stack.extend(reversed(node.stmts))
        elif isinstance(node, (For, Allocate)):
            stack.append(node.body)
        elif isinstance(node, IfThenElse):
            if node.else_body is not None:
                stack.append(node.else_body)
            stack.append(node.then_body)


def _buffers(stmt: Stmt) -> list[Buffer]:
    if isinstance(stmt, (Allocate, Store, StreamPop)):
        return [stmt.buffer]
    if isinstance(stmt, Copy):
        return [stmt.dst.buffer, stmt.src.buffer]
    if isinstance(stmt, (IntrinsicCall, MicroKernelCall)):
        return [region.buffer for region in stmt.operands]
    return []


def kernel_problems(kernel: Kernel, loop_kinds: Collection[LoopKind | str],
                    levels: Collection[str], intrinsics: dict[str, int] | None = None,
                    micro_kernels: dict[str, int] | None = None,
                    intrinsic_operands: Mapping[str, Sequence[OperandSignature]] | None = None
                    ) -> list[str]:
    """What in ``kernel`` falls outside the given loop kinds, memory levels, intrinsics and
    micro-kernels (name -> operand count); ``None`` skips the call checks.
    ``intrinsic_operands`` (name -> (operand name, shape, dtype) per operand) also checks the
    regions an intrinsic call passes."""
    kinds = {LoopKind(kind) for kind in loop_kinds}
    problems: list[str] = []
    seen_buffers: set[int] = set()

    def check_buffer(buffer: Buffer) -> None:
        if id(buffer) in seen_buffers:
            return
        seen_buffers.add(id(buffer))
        if buffer.level not in levels:
            problems.append(f"buffer {buffer.name} is in memory level {buffer.level!r}, which "
                            f"this target does not have (levels: {', '.join(levels)})")

    for buffer in kernel.params:
        check_buffer(buffer)
    for stmt in iter_stmts(kernel.body):
        if isinstance(stmt, For) and stmt.kind not in kinds:
            expressed = ", ".join(kind.value for kind in LoopKind if kind in kinds)
            problems.append(f"loop {stmt.var.name} is {stmt.kind.value}, which this target "
                            f"cannot express (it expresses: {expressed})")
        for buffer in _buffers(stmt):
            check_buffer(buffer)
        for calls, declared, what in ((IntrinsicCall, intrinsics, "intrinsic"),
                                      (MicroKernelCall, micro_kernels, "micro-kernel")):
            if declared is None or not isinstance(stmt, calls):
                continue
            name = stmt.intrinsic if isinstance(stmt, IntrinsicCall) else stmt.micro_kernel
            if name not in declared:
                problems.append(f"call of {what} {name}, which this target does not declare "
                                f"(declared: {', '.join(declared) or 'none'})")
            elif len(stmt.operands) != declared[name]:
                problems.append(f"call of {what} {name} passes {len(stmt.operands)} operands; "
                                f"it declares {declared[name]}")
            elif isinstance(stmt, IntrinsicCall) and intrinsic_operands is not None \
                    and name in intrinsic_operands:
                problems.extend(_operand_problems(stmt, intrinsic_operands[name]))
    return problems


#: an intrinsic operand as a call must match it: (name, shape, dtype)
OperandSignature = tuple[str, tuple[int, ...], DType]


def _operand_problems(call: IntrinsicCall, signature: Sequence[OperandSignature]) -> list[str]:
    problems = []
    for position, (region, (name, shape, dtype)) in enumerate(zip(call.operands, signature)):
        where = f"call of intrinsic {call.intrinsic}: operand {position} ({name})"
        if tuple(region.extents) != tuple(shape):
            problems.append(f"{where} is a region of {region.buffer.name} with extents "
                            f"{tuple(region.extents)}; the intrinsic declares shape "
                            f"{tuple(shape)}")
        if region.buffer.dtype is not dtype:
            problems.append(f"{where} is in buffer {region.buffer.name} of "
                            f"{region.buffer.dtype.value}; the intrinsic declares "
                            f"{dtype.value}")
    return problems


def check_kernel_supported(kernel: Kernel, spec: TargetSpec) -> None:
    """Raise a :class:`CodegenError` listing everything in ``kernel`` that ``spec`` does not
    declare; code generators call it before emitting anything."""
    problems = kernel_problems(
        kernel, spec.loop_kinds, spec.memory.names,
        intrinsics={i.name: len(i.compute.operands) for i in spec.intrinsics},
        micro_kernels={k.name: len(k.operands) for k in spec.micro_kernels},
        intrinsic_operands={i.name: [(op.name, tuple(op.shape), op.dtype)
                                     for op in i.compute.operands] for i in spec.intrinsics})
    if problems:
        listing = "\n".join(f"  - {problem}" for problem in problems)
        raise CodegenError(f"target {spec.name} cannot generate code for kernel {kernel.name}:\n"
                           f"{listing}\nchange the schedule (or lowering) to use only what the "
                           "target declares, or extend the target")
