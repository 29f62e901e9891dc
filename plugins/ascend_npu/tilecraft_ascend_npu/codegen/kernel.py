"""One kernel's AscendC-style C++ source, rendered through the plugin's Jinja templates.

The source defines a kernel class with ``Init`` (``SetGlobalBuffer`` per parameter, one
``InitBuffer`` per queue and scratch buffer of the ``TPipe``) and ``Process`` (the statements of
:mod:`.statements`), and the entry ``extern "C" __global__ __aicore__ void <kernel>(GM_ADDR
...)`` with the kernel's buffers in Kernel IR order. The level capacities the emulation checks
are the spec's, written as ``TC_ASCEND_<LEVEL>_BYTES`` before the header. The
:class:`~tilecraft.target.base.Source` carries in ``meta``: entry, block_dim, params (name,
dtype, shape, output) and the AscendC calls used.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Allocate, Buffer, BufferLoad, For, Kernel, LoopKind, Seq, Store
>>> from tilecraft.te import UnaryOp, Var, const
>>> from tilecraft.te.expr import Unary
>>> from tilecraft_ascend_npu.target import load_target_spec
>>> x, y = Buffer("x", (4, 64), DType.FLOAT16), Buffer("y", (4, 64), DType.FLOAT16)
>>> ub = Buffer("x_ub", (64,), DType.FLOAT16, level="UB")
>>> b, i = Var("b"), Var("i")
>>> tile = Allocate(ub, Seq((
...     For(i, const(64), LoopKind.SERIAL, Store(ub, (i,), BufferLoad(x, (b, i)))),
...     For(i, const(64), LoopKind.VECTOR,
...         Store(ub, (i,), Unary(UnaryOp.EXP, BufferLoad(ub, (i,)))), lanes=128),
...     For(i, const(64), LoopKind.SERIAL, Store(y, (b, i), BufferLoad(ub, (i,)))))))
>>> grid = For(b, const(4), LoopKind.BOUND, tile, axis="block_idx")
>>> kernel = Kernel("expk", (x, y), ("y",), grid)
>>> source = generate_ascendc(kernel, load_target_spec())
>>> source.meta["block_dim"], source.meta["calls"]
(4, ['DataCopyPad', 'Exp'])
>>> 'extern "C" __global__ __aicore__ void expk(GM_ADDR x, GM_ADDR y)' in source.text
True
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

from tilecraft.codegen.c_expressions import Names
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.nodes import Buffer, Kernel, Store
from tilecraft.kernel_ir.visitor import walk_stmts
from tilecraft.target.base import Source
from tilecraft.target.spec import TargetSpec
from tilecraft_ascend_npu.codegen.buffers import plan_buffers
from tilecraft_ascend_npu.codegen.dialect import ASCEND
from tilecraft_ascend_npu.codegen.statements import AscendEmitter, Levels

__all__ = ["LANGUAGE", "SUFFIX", "generate_ascendc", "levels_of", "render_template"]

LANGUAGE = "ascendc"
SUFFIX = "cpp"
#: bytes of UB scratch the reductions use: one 32-byte block for the result, the rest work
REDUCTION_SCRATCH_BYTES = 64


@cache
def _environment() -> jinja2.Environment:
    loader = jinja2.PackageLoader("tilecraft_ascend_npu", "templates")
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)


def render_template(name: str, **values: Any) -> str:
    """The plugin's template ``name`` rendered with ``values`` (a missing one is an error)."""
    return _environment().get_template(name).render(**values)


def levels_of(spec: TargetSpec) -> Levels:
    """The levels of the Cube's and the vector unit's operands, from the spec's units."""
    units = {unit.kind.value: unit.operand_levels for unit in spec.spatial.units}
    cube, vector = units.get("matrix", {}), units.get("vector", {})
    names = spec.memory.names
    l0a, l0b, l0c = cube.get("input"), cube.get("weight"), cube.get("output")
    ub = vector.get("input")
    if None in (l0a, l0b, l0c, ub):
        raise CodegenError(f"target {spec.name}: the AscendC code generator needs a matrix unit "
                           "with input / weight / output levels and a vector unit with an "
                           "input level in spec.spatial.units")
    # the staging level of the Cube's operands: the level just outside L0A
    l1 = names[names.index(l0a) - 1]
    return Levels(ub, l1, l0a, l0b, l0c)


def _check_parameter(kernel_name: str, buffer: Buffer) -> None:
    """A GM parameter is a row-major buffer of scalars of a dtype AscendC names."""
    supported = ", ".join(sorted(d.value for d in ASCEND.supported))
    problems = [f"dtype {buffer.dtype.value} (use one of {supported})"
                if buffer.dtype not in ASCEND.supported else "",
                f"{buffer.lanes} lanes per element" if buffer.lanes != 1 else "",
                f"layout {buffer.layout}" if buffer.layout != "row_major" else ""]
    problems = [problem for problem in problems if problem]
    if problems:
        raise CodegenError(f"kernel {kernel_name}: the AscendC code generator cannot pass the "
                           f"GM parameter {buffer.name} with {'; '.join(problems)}: parameters "
                           "are row-major buffers of scalars")


def generate_ascendc(kernel: Kernel, spec: TargetSpec, target: str = "ascend_npu") -> Source:
    """The AscendC-style C++ of ``kernel`` (module docstring); a CodegenError names the kernel
    and the construct it cannot express."""
    levels = levels_of(spec)
    names = Names(ASCEND.reserved)
    entry = names.fresh(kernel.name)
    gm_params, gm_names, global_init, members, meta_params, notes = [], [], [], [], [], []
    written = set(kernel.outputs)
    written |= {s.buffer.name for s in walk_stmts(kernel.body) if isinstance(s, Store)}
    for buffer in kernel.params:
        _check_parameter(kernel.name, buffer)
        name = names.buffer(buffer)
        ctype = ASCEND.storage_type(buffer.dtype)
        gm_params.append(f"GM_ADDR {name}")
        gm_names.append(name)
        members.append(f"GlobalTensor<{ctype}> {name}Gm;")
        global_init.append(f"{name}Gm.SetGlobalBuffer((__gm__ {ctype}*){name}, "
                           f"{max(1, buffer.size)});")
        output = buffer.name in written
        meta_params.append({"name": buffer.name, "dtype": buffer.dtype.value,
                            "shape": list(buffer.shape), "output": output})
        notes.append(f"{name}: {buffer.dtype.value}{list(buffer.shape)}"
                     f"{' (written)' if output else ''}")
    plan = plan_buffers(kernel, levels.cube, (levels.l1,), levels.vector)
    emitter = AscendEmitter(kernel, names, plan, levels)
    with emitter.statement_list():
        emitter.visit(kernel.body)
    pipe_init = [init for _, init in emitter.pipe_members]
    members += [declaration for declaration, _ in emitter.pipe_members]
    body = list(emitter.lines)
    if emitter.uses_reduction_scratch:
        members.append("TBuf<TPosition::VECCALC> tc_reduce_buf;")
        pipe_init.append(f"pipe.InitBuffer(tc_reduce_buf, {REDUCTION_SCRATCH_BYTES});")
        body.insert(0, "    LocalTensor<float> tc_reduce = tc_reduce_buf.Get<float>();")
    labels = [f'{d.split()[-1].rstrip(";")}.label = "{d.split()[-1].rstrip(";")}";'
              for d, _ in emitter.pipe_members]
    if emitter.uses_reduction_scratch:
        labels.append('tc_reduce_buf.label = "tc_reduce_buf";')
    capacities = [(level.name, level.size_bytes) for level in spec.memory.levels
                  if level.name in (levels.vector, levels.l1, *levels.cube)]
    capacity_names = {levels.vector: "UB", levels.l1: "L1", levels.l0a: "L0A",
                      levels.l0b: "L0B", levels.l0c: "L0C"}
    capacities = [(capacity_names[name], size) for name, size in capacities]
    calls = sorted(emitter.calls)
    text = render_template(
        "kernel.cpp.jinja", kernel_name=kernel.name, target=target,
        block_dim=emitter.block_extent, param_notes=notes, calls=calls, capacities=capacities,
        class_name=f"Kernel_{names.fresh(kernel.name)}", gm_params=gm_params,
        gm_names=gm_names, global_init=global_init, labels=labels, pipe_init=pipe_init, body=body,
        members=members, entry=entry)
    meta: dict[str, Any] = {"entry": entry, "block_dim": emitter.block_extent,
                            "params": meta_params, "calls": calls}
    return Source(target, kernel.name, LANGUAGE, text, entry, meta=meta, suffix=SUFFIX)
