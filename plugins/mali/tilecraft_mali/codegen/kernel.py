"""One kernel's OpenCL C program, rendered through the plugin's Jinja templates.

The program defines exactly one ``__kernel`` named after the kernel, with
``reqd_work_group_size`` set to the work-group the bound loops launch, whose parameters are
the kernel's buffers as ``__global`` pointers in Kernel IR order (``const`` for the ones it only
reads). The :class:`~tilecraft.target.base.Source` carries the launch in ``meta``: entry,
global_size and local_size (work-items, x y z), groups, local_bytes, params.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Buffer, For, Kernel, LoopKind, Store, BufferLoad
>>> from tilecraft.te import Var, const
>>> from tilecraft_mali.target import load_target_spec
>>> A = Buffer("A", (40,), DType.FLOAT16)
>>> B = Buffer("B", (40,), DType.FLOAT32)
>>> g, t = Var("g"), Var("t")
>>> body = For(g, const(5), LoopKind.BOUND, For(t, const(8), LoopKind.BOUND,
...            Store(B, (g * 8 + t,), BufferLoad(A, (g * 8 + t,)).astype("float32")),
...            axis="local_id.x"), axis="group_id.x")
>>> source = generate_opencl(Kernel("widen", (A, B), ("B",), body), load_target_spec())
>>> source.meta["global_size"], source.meta["local_size"], source.meta["params"][0]["output"]
([40, 1, 1], [8, 1, 1], False)
>>> "void widen(__global const half* restrict A, __global float* restrict B)" in source.text
True
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

from tilecraft.codegen.c_expressions import Names
from tilecraft.codegen.launch import launch_config
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.concurrency import AtomicUpdate, SubgroupReduce
from tilecraft.kernel_ir.nodes import Copy, Kernel, Store
from tilecraft.kernel_ir.visitor import walk_stmts
from tilecraft.target.base import Source
from tilecraft.target.spec import TargetSpec
from tilecraft_mali.codegen.dialect import OPENCL
from tilecraft_mali.codegen.intrinsics import POLYFILL as DOT_PRODUCT_DECLARATIONS
from tilecraft_mali.codegen.memory import LocalMemoryPlan, check_local_bytes
from tilecraft_mali.codegen.reduction import scratch_declarations
from tilecraft_mali.codegen.statements import OpenCLEmitter

__all__ = ["LANGUAGE", "generate_opencl"]

#: the statements writing ``stmt.buffer``
_WRITERS = (Store, AtomicUpdate, SubgroupReduce)

LANGUAGE = "opencl"
SUFFIX = "cl"


@cache
def _template(name: str) -> jinja2.Template:
    """The plugin's template ``name`` (strict: a missing variable is an error)."""
    loader = jinja2.PackageLoader("tilecraft_mali", "templates")
    environment = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined,
                                     keep_trailing_newline=True, autoescape=False)
    return environment.get_template(name)


def _outputs(kernel: Kernel) -> set[str]:
    """Names of the buffers ``kernel`` writes (its declared outputs and every written one)."""
    written = set(kernel.outputs)
    for stmt in walk_stmts(kernel.body):
        if isinstance(stmt, Copy):
            written.add(stmt.dst.buffer.name)
        elif isinstance(stmt, _WRITERS):
            written.add(stmt.buffer.name)
    return written


def generate_opencl(kernel: Kernel, spec: TargetSpec, target: str = "mali") -> Source:
    """The OpenCL C source of ``kernel`` (module docstring); a CodegenError names the kernel
    and the construct, limit or dtype it cannot express."""
    names = Names(OPENCL.reserved)
    written = _outputs(kernel)
    params, meta_params = [], []
    for buffer in kernel.params:
        if buffer.dtype not in OPENCL.supported or buffer.lanes != 1 \
                or buffer.layout != "row_major":
            raise CodegenError(f"kernel {kernel.name}: parameter {buffer.name} of element type "
                               f"{buffer.element_type} and layout {buffer.layout}; the OpenCL C "
                               "code generator takes row-major buffers of "
                               f"{', '.join(sorted(d.value for d in OPENCL.supported))}")
        output = buffer.name in written
        params.append(f"__global {'' if output else 'const '}"
                      f"{OPENCL.storage_type(buffer.dtype)}* restrict {names.buffer(buffer)}")
        meta_params.append({"name": buffer.name, "dtype": buffer.dtype.value,
                            "shape": list(buffer.shape), "output": output})
    launch = launch_config(kernel, spec.threads, "OpenCL")
    plan = LocalMemoryPlan.of(kernel, spec)
    emitter = OpenCLEmitter(kernel, names, launch, plan)
    emitter.visit(kernel.body)
    declarations = [f"__local {OPENCL.storage_type(b.dtype)} {names.buffer(b)}"
                    f"[{max(1, b.size)}];" for b in plan.local]
    scratch = scratch_declarations(emitter.scratch)
    declarations += [text for text, _ in scratch]
    local_bytes = plan.local_bytes + sum(size for _, size in scratch)
    limit = spec.threads.shared_bytes_per_block if spec.threads else None
    check_local_bytes(kernel.name, local_bytes, limit, "shared_bytes_per_block of the spec")
    global_size = [g * b for g, b in zip(launch.grid, launch.block)]
    text = _template("kernel.cl.jinja").render(
        kernel_name=kernel.name, target=target, entry=kernel.name, params=params,
        global_size=global_size, local_size=list(launch.block), local_bytes=local_bytes,
        local_declarations=declarations, body=emitter.lines,
        uses_float_atomics=emitter.uses_float_atomics,
        dot_products=DOT_PRODUCT_DECLARATIONS if emitter.uses_dot_products else "")
    meta: dict[str, Any] = {
        "entry": kernel.name, "global_size": global_size, "local_size": list(launch.block),
        "groups": list(launch.grid), "local_bytes": local_bytes, "params": meta_params,
    }
    return Source(target, kernel.name, LANGUAGE, text, kernel.name, meta=meta, suffix=SUFFIX)
