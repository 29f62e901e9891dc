"""One Kernel IR kernel to one LLVM module with a C-ABI entry point.

The entry is ``void NAME(i8** args, i64 begin, i64 end)``: ``args[k]`` is the data pointer of
the k-th parameter (``kernel.params`` order) and ``[begin, end)`` the slice of the kernel's
PARALLEL loop to run (ignored when it has none). It loads the pointers and calls an internal,
always-inlined body function whose pointer parameters are ``noalias`` (the runtime refuses a
written array that overlaps another parameter, which makes that legal) and ``readonly`` for
parameters the kernel never writes; after inlining LLVM keeps that knowledge as alias scopes.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Buffer, BufferLoad, For, Kernel, LoopKind, Store
>>> from tilecraft.te import Var, const
>>> A, B = Buffer("A", (8,), DType.FLOAT32), Buffer("B", (8,), DType.FLOAT32)
>>> i = Var("i")
>>> body = For(i, const(8), LoopKind.VECTOR, Store(B, (i,), BufferLoad(A, (i,)) * 2.0), lanes=8)
>>> generated = generate_llvm_ir(Kernel("double", (A, B), ("B",), body))
>>> generated.entry, generated.meta["parallel_extent"]
('double', None)
>>> "fmul contract <8 x float>" in generated.text
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft_x86_avx512.codegen.analysis import (
    check_supported,
    const_int,
    estimate_work,
    find_parallel_loop,
    written_buffers,
)
from tilecraft_x86_avx512.codegen.builder import FunctionBuilder, ModuleBuilder, Value
from tilecraft_x86_avx512.codegen.context import CodegenOptions, EmitContext
from tilecraft_x86_avx512.codegen.stmt import StmtEmitter

#: version of the generated-code ABI recorded in every Source's meta and shared library
ABI_VERSION = 1


@dataclass(frozen=True)
class GeneratedModule:
    """LLVM IR text, its entry symbol, and what the runtime needs to call it (JSON-able)."""

    text: str
    entry: str
    meta: dict[str, Any] = field(default_factory=dict)


def entry_name(kernel_name: str) -> str:
    """A C identifier for the kernel's symbol.

    >>> entry_name("conv2d.relu-1"), entry_name("3x3")
    ('conv2d_relu_1', 'k_3x3')
    """
    name = re.sub(r"[^A-Za-z0-9_]", "_", kernel_name) or "kernel"
    return name if not name[0].isdigit() else f"k_{name}"


def kernel_meta(kernel: Kernel, entry: str) -> dict[str, Any]:
    """What the runtime needs to validate arrays and split the parallel range."""
    parallel = find_parallel_loop(kernel)
    written = written_buffers(kernel)
    return {
        "abi_version": ABI_VERSION,
        "kernel": kernel.name,
        "entry": entry,
        "params": [{"name": b.name, "shape": list(b.shape), "dtype": b.dtype.value}
                   for b in kernel.params],
        "outputs": list(kernel.outputs),
        "written": [b.name for b in kernel.params if b in written],
        "parallel_extent": None if parallel is None else const_int(parallel.loop.extent),
        "parallel_safe": parallel is not None and parallel.safe,
        "work": estimate_work(kernel.body),
    }


def _check_params(kernel: Kernel) -> None:
    names = [b.name for b in kernel.params]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise CodegenError(f"kernel {kernel.name!r} has several parameters named "
                        f"{', '.join(duplicates)}; parameter names must be unique")
    unknown = [name for name in kernel.outputs if name not in names]
    if unknown:
        raise CodegenError(f"kernel {kernel.name!r} declares outputs {unknown} that are not "
                        f"parameters ({', '.join(names)})")


def generate_llvm_ir(kernel: Kernel, options: CodegenOptions | None = None,
                     entry: str | None = None) -> GeneratedModule:
    """Kernel IR to an LLVM module (text) with the C-ABI entry ``entry``."""
    options = options or CodegenOptions()
    entry = entry or entry_name(kernel.name)
    check_supported(kernel)
    _check_params(kernel)
    meta = kernel_meta(kernel, entry)
    parallel = find_parallel_loop(kernel)
    written = written_buffers(kernel)

    module = ModuleBuilder()
    params = [("ptr", f"%p{k}", "noalias" + ("" if buffer in written else " readonly"))
              for k, buffer in enumerate(kernel.params)]
    params += [("i64", "%begin", ""), ("i64", "%end", "")]
    body_name = f"{entry}.body"
    fb = FunctionBuilder(module, body_name, "void", params, linkage="internal",
                         attributes="alwaysinline nounwind")
    ctx = EmitContext(fb, options, kernel.name)
    for k, buffer in enumerate(kernel.params):
        ctx.pointers[buffer] = f"%p{k}"
    stmts = StmtEmitter(ctx)
    if parallel is None:
        stmts.emit(kernel.body)
    else:
        for allocate in parallel.allocates:
            stmts.open_allocation(allocate)
        stmts.parallel_loop(parallel.loop, Value("%begin", "i64"), Value("%end", "i64"))
    for line in ctx.cleanup:
        fb.emit(line)
    fb.ret()
    module.add_function(fb.render())
    module.add_function(_wrapper(module, entry, body_name, len(kernel.params)))
    meta["notes"] = list(ctx.notes)
    return GeneratedModule(module.render(), entry, meta)


def _wrapper(module: ModuleBuilder, entry: str, body_name: str, count: int) -> str:
    fb = FunctionBuilder(module, entry, "void",
                         [("ptr", "%args", "noalias readonly"), ("i64", "%begin", ""),
                          ("i64", "%end", "")])
    pointers = []
    for k in range(count):
        slot = fb.define(f"getelementptr ptr, ptr %args, i64 {k}", "slot")
        pointers.append(fb.define(f"load ptr, ptr {slot}, align 8", "arg"))
    args = ", ".join([*(f"ptr {p}" for p in pointers), "i64 %begin", "i64 %end"])
    fb.emit(f'call void @"{body_name}"({args})')
    fb.ret()
    return fb.render()
