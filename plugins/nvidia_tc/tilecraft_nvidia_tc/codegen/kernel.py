"""One kernel's CUDA C translation unit, rendered through the plugin's Jinja templates.

The unit starts with ``#include "tilecraft_cuda.h"`` (the plugin's ``include/``: real CUDA on
a GPU, the emulation header under ``TILECRAFT_CUDA_EMULATION``) and defines exactly one
``extern "C" __global__`` function named after the kernel, whose parameters are the kernel's
buffers as typed pointers in Kernel IR order (``const`` for the ones it only reads). The
:class:`~tilecraft.target.base.Source` carries the launch in ``meta``: entry, grid, block,
dynamic_shared_bytes, needs_smem_optin, params, param_alignment.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Buffer, For, Kernel, LoopKind, Store, BufferLoad
>>> from tilecraft.te import Var, const
>>> from tilecraft_nvidia_tc.target import load_target_spec
>>> A = Buffer("A", (40,), DType.FLOAT16)
>>> B = Buffer("B", (40,), DType.FLOAT32)
>>> t = Var("t")
>>> body = For(t, const(64), LoopKind.BOUND, For(Var("u"), const(1), LoopKind.SERIAL,
...            Store(B, (t,), BufferLoad(A, (t,)).astype("float32"))), axis="threadIdx.x")
>>> source = generate_cuda(Kernel("widen", (A, B), ("B",), body), load_target_spec())
>>> source.meta["grid"], source.meta["block"], source.meta["params"][0]["output"]
([1, 1, 1], [64, 1, 1], False)
>>> ('extern "C" __global__ void __launch_bounds__(64) '
...  'widen(const __half* __restrict__ A, float* __restrict__ B)') in source.text
True
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.concurrency import AsyncCopy, AtomicUpdate, SubgroupReduce
from tilecraft.kernel_ir.nodes import Copy, Kernel, Store
from tilecraft.kernel_ir.visitor import walk_stmts
from tilecraft.target.base import Source
from tilecraft.target.spec import TargetSpec
from tilecraft_nvidia_tc.codegen.dtypes import SUPPORTED, storage_type
from tilecraft_nvidia_tc.codegen.expressions import Names
from tilecraft_nvidia_tc.codegen.launch import launch_config
from tilecraft_nvidia_tc.codegen.memory import ALIGNMENT, plan_memory
from tilecraft_nvidia_tc.codegen.statements import StatementEmitter

__all__ = ["DEFAULT_ARCH", "generate_cuda"]

#: the compute capability the spec describes (A100): sm_80
DEFAULT_ARCH = 80
LANGUAGE = "cuda"
SUFFIX = "cu"


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("tilecraft_nvidia_tc", "templates"),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              autoescape=False)


def _written(kernel: Kernel) -> set[str]:
    """Names of the buffers some statement of ``kernel`` writes."""
    names: set[str] = set()
    for stmt in walk_stmts(kernel.body):
        if isinstance(stmt, (Store, AtomicUpdate, SubgroupReduce)):
            names.add(stmt.buffer.name)
        elif isinstance(stmt, (Copy, AsyncCopy)):
            names.add(stmt.dst.buffer.name)
    return names


def generate_cuda(kernel: Kernel, spec: TargetSpec, arch: int = DEFAULT_ARCH,
                  target: str = "nvidia_tc") -> Source:
    """The CUDA C source of ``kernel`` (module docstring); a CodegenError names the kernel and
    the construct, limit or dtype it cannot express."""
    names = Names()
    written = _written(kernel) | set(kernel.outputs)
    params, meta_params = [], []
    for buffer in kernel.params:
        if buffer.dtype not in SUPPORTED or buffer.lanes != 1 or buffer.layout != "row_major":
            raise CodegenError(f"kernel {kernel.name}: parameter {buffer.name} of element type "
                               f"{buffer.element_type} and layout {buffer.layout}; the CUDA "
                               "code generator takes row-major float32, float16, bfloat16, "
                               "int8, uint8, int32 or bool buffers")
        name = names.buffer(buffer)
        output = buffer.name in written
        qualifier = "" if output else "const "
        params.append(f"{qualifier}{storage_type(buffer.dtype)}* __restrict__ {name}")
        meta_params.append({"name": buffer.name, "dtype": buffer.dtype.value,
                            "shape": list(buffer.shape), "output": output,
                            "kind": "buffer"})
    launch = launch_config(kernel, spec.threads)
    plan = plan_memory(kernel, spec)
    subgroup = spec.threads.subgroup_size if spec.threads else 32
    emitter = StatementEmitter(kernel, names, launch, plan, subgroup, arch)
    shared = _shared_declarations(plan, names)
    emitter.visit(kernel.body)
    from tilecraft_nvidia_tc.codegen.mma_sync import helpers

    text = _environment().get_template("kernel.cu.jinja").render(
        mma_helpers=helpers(emitter.mma_variants),
        kernel_name=kernel.name, target=target, arch=arch, entry=kernel.name, params=params,
        grid=list(launch.grid), block=list(launch.block),
        threads_per_block=launch.threads_per_block,
        dynamic_shared_bytes=plan.dynamic_shared_bytes, shared_declarations=shared,
        body=emitter.lines)
    meta: dict[str, Any] = {
        "entry": kernel.name, "grid": list(launch.grid), "block": list(launch.block),
        "dynamic_shared_bytes": plan.dynamic_shared_bytes,
        "needs_smem_optin": plan.dynamic, "static_shared_bytes": 0 if plan.dynamic
        else plan.shared_bytes, "params": meta_params, "param_alignment": ALIGNMENT,
        "arch": arch, "uses_async_copy": emitter.uses_async_copy,
    }
    return Source(target, kernel.name, LANGUAGE, text, kernel.name, meta=meta, suffix=SUFFIX)


def _shared_declarations(plan: Any, names: Names) -> list[str]:
    lines = []
    if plan.dynamic and plan.shared:
        lines.append("extern __shared__ unsigned char tc_dynamic_smem[];")
    for buffer in plan.shared:
        name, ctype = names.buffer(buffer), storage_type(buffer.dtype)
        if plan.dynamic:
            offset = plan.shared_offsets[id(buffer)]
            lines.append(f"{ctype}* const {name} = reinterpret_cast<{ctype}*>(tc_dynamic_smem + "
                         f"{offset});")
        else:
            # alignas first: the emulation header makes __shared__ thread_local, after which
            # g++ refuses an attribute
            # 32 bytes where WMMA loads or stores fragments (256-bit aligned pointers)
            align = 32 if id(buffer) in plan.fragment_memory else 16
            lines.append(f"alignas({align}) __shared__ {ctype} {name}[{max(1, buffer.size)}];")
    return lines
