"""Chimera on the NPU (thesis §3.4, Fig. 3.10): a GEMM chain ``E = (A @ B) @ D`` in float16
fused into one kernel whose intermediate ``C`` never leaves the AI core.

Per block (a tile of ``TM`` rows of ``E``, one per AI core) the kernel keeps ``E``'s
``TM x N`` accumulators in L0C; for each tile of ``TL`` columns of ``C`` it computes
``C = A @ B`` on the Cube (``A`` and ``B`` tiles GM -> L1 -> L0A / L0B, fp32 in L0C), converts
the tile to fp16 on its way L0C -> UB -> L1 -> L0A (Fixpipe, DataCopy, LoadData), and
accumulates ``E += C @ D`` with ``D``'s tile in L0B; at the end ``E`` goes L0C -> UB -> GM.

The tiles come from Chimera's solver (:func:`tilecraft.fusion.solve_chain`) on the spec's L1
(where the intermediate lives between the two products) with the NPU micro-kernel's
constraints of §3.4.1.2, Eq. 3.5-3.7: ``M2 = N2 = 16`` (the tiles of ``M`` and ``L`` are
multiples of the fractal), ``M1`` and ``N1`` bounded by what L0A / L0B / L0C hold with each
tile twice (the double buffer), ``K`` and ``N`` whole (each product's reduction and ``E``'s
columns stay in one tile); the blocks (tiles of ``M``) spread over the AI cores at the Cube's rate.

>>> from tilecraft import te
>>> from tilecraft.ops import matmul
>>> from tilecraft_ascend_npu.target import load_target_spec
>>> A = te.placeholder((1024, 64), name="A", dtype="float16")
>>> B = te.placeholder((64, 512), name="B", dtype="float16")
>>> D = te.placeholder((512, 64), name="D", dtype="float16")
>>> C = matmul(A, B, name="C")
>>> chain = as_gemm_chain(C, matmul(C, D, name="E"))
>>> (chain.m, chain.k, chain.l, chain.n)
(1024, 64, 512, 64)
>>> tiles, why = plan_chain_tiles(chain, load_target_spec())
>>> tiles.tm % 16, tiles.tl % 16, 4 * tiles.tm * (64 + tiles.tl) <= 65536
(0, 0, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    Kernel,
    LoopKind,
    Seq,
    Stmt,
    Store,
)
from tilecraft.target.base import FusedGroup
from tilecraft.target.spec import TargetSpec
from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Cast,
    Compare,
    CompareOp,
    Expr,
    Load,
    Reduce,
    Var,
    const,
)
from tilecraft.te.expr import ReduceOp as TeReduceOp
from tilecraft.te.tensor import Tensor

__all__ = ["ChainTiles", "GemmChain", "as_gemm_chain", "fuse_gemm_chains", "lower_gemm_chain",
           "plan_chain_tiles"]

FRACTAL = 16


@dataclass(frozen=True)
class GemmChain:
    """``C[m, l] = A[m, k] B[k, l]``, ``E[m, n] = C[m, l] D[l, n]`` (all float16)."""

    a: Tensor
    b: Tensor
    c: Tensor
    d: Tensor
    e: Tensor

    @property
    def m(self) -> int:
        return self.a.shape[0]

    @property
    def k(self) -> int:
        return self.a.shape[1]

    @property
    def l(self) -> int:  # noqa: E743
        return self.b.shape[1]

    @property
    def n(self) -> int:
        return self.d.shape[1]


@dataclass(frozen=True)
class ChainTiles:
    """Rows of ``E`` per block (``tm``) and columns of ``C`` per step (``tl``)."""

    tm: int
    tl: int


def _strip(expr: Expr) -> Expr:
    return expr.x if isinstance(expr, Cast) else expr


def _gemm_operands(tensor: Tensor) -> tuple[Tensor, Tensor] | None:
    """``(lhs, rhs)`` when ``tensor`` is ``sum_r lhs[i, r] * rhs[r, j]`` of 2-D float16
    tensors, else None."""
    body = getattr(tensor.op, "body", None)
    axes = getattr(tensor.op, "axes", ())
    if not isinstance(body, Reduce) or body.op is not TeReduceOp.SUM or len(body.axes) != 1 \
            or len(axes) != 2 or tensor.dtype is not DType.FLOAT16:
        return None
    product = _strip(body.body)
    if not isinstance(product, Binary) or product.op is not BinaryOp.MUL:
        return None
    lhs, rhs = _strip(product.a), _strip(product.b)
    if not (isinstance(lhs, Load) and isinstance(rhs, Load)):
        return None
    i, j, r = axes[0], axes[1], body.axes[0]
    if tuple(lhs.indices) != (i, r) or tuple(rhs.indices) != (r, j):
        return None
    if lhs.tensor.dtype is not DType.FLOAT16 or rhs.tensor.dtype is not DType.FLOAT16:
        return None
    return lhs.tensor, rhs.tensor


def as_gemm_chain(first: Tensor, second: Tensor) -> GemmChain | None:
    """The chain when ``second`` is a GEMM whose left operand is the GEMM ``first``."""
    one, two = _gemm_operands(first), _gemm_operands(second)
    if one is None or two is None or two[0] is not first and two[0] != first:
        return None
    return GemmChain(one[0], one[1], first, two[1], second)


def _floor16(value: float) -> int:
    return int(value) // FRACTAL * FRACTAL


def _pad16(value: int) -> int:
    return math.ceil(value / FRACTAL) * FRACTAL


def plan_chain_tiles(chain: GemmChain, spec: TargetSpec) -> tuple[ChainTiles | None, str]:
    """The tiles of ``chain`` from Chimera's solver (module docstring), or ``None`` and why
    the chain does not fit."""
    from tilecraft.fusion import (
        FusionError,
        LoopConstraint,
        ParallelExecution,
        chain_from_computes,
        solve_chain,
    )

    memory = spec.memory
    l0a, l0b, l0c = (memory.level(name).size_bytes for name in ("L0A", "L0B", "L0C"))
    kp, np_ = _pad16(chain.k), _pad16(chain.n)
    # every L0 tensor sits in a queue of depth 2 (the double buffer): L0A holds A's TM x K
    # and C's TM x TL fp16 tiles, L0B B's K x TL and D's TL x N, L0C E's TM x N and C's
    # TM x TL fp32 accumulators. Eq. 3.6-3.7: M1 with TL at its least (16), then N1.
    tm_max = _floor16(min(l0a / (4 * (kp + FRACTAL)), l0c / (8 * (np_ + FRACTAL))))
    tl_max = _floor16(l0b / (4 * (kp + np_)))
    if tm_max < FRACTAL or tl_max < FRACTAL:
        return None, (f"K = {chain.k} or N = {chain.n} is too large for 16-row tiles double "
                      f"buffered in L0A ({l0a} bytes) / L0B ({l0b}) / L0C ({l0c})")
    try:
        core = chain_from_computes([chain.c, chain.e])
    except FusionError as err:
        return None, f"the fusion planner cannot model the chain: {err}"
    last = core.ops[-1]
    m_loop, n_loop = last.output.indices[-2].loops[0], last.output.indices[-1].loops[0]
    l_loop, k_loop = last.reduce_loops[0], core.ops[0].reduce_loops[0]
    constraints = {m_loop: LoopConstraint(multiple_of=FRACTAL, maximum=tm_max),
                   l_loop: LoopConstraint(multiple_of=FRACTAL, maximum=tl_max),
                   k_loop: LoopConstraint(minimum=chain.k), n_loop: LoopConstraint(minimum=chain.n)}
    cube_flops = 2 * math.prod(spec.intrinsic("mad_f16_f32").compute.loops[i].extent
                               for i in range(3))
    parallel = ParallelExecution(loops=(m_loop,), units=spec.compute.cores,
                                 flops_per_cycle=float(cube_flops))
    solution = solve_chain(core, spec=spec, levels=["L1"], constraints=constraints,
                           parallel=parallel)
    if not solution.fused:
        return None, solution.reason
    tm = min(solution.tiles[m_loop], tm_max, _pad16(chain.m))
    tl = min(solution.tiles[l_loop], tl_max, _pad16(chain.l))
    tm, tl = max(FRACTAL, _floor16(tm)), max(FRACTAL, _floor16(tl))
    # the intermediate tile, TM x TL, is C's accumulator and the second product's L0A operand
    while tl > FRACTAL and (4 * tm * (kp + tl) > l0a or 8 * tm * (np_ + tl) > l0c):
        tl -= FRACTAL
    return ChainTiles(tm, tl), solution.reason


def _guarded(cond: Expr | None, body: Stmt) -> Stmt:
    return body if cond is None else IfThenElse(cond, body)


def _below(value: Expr, bound: int, extent: int, tile: int) -> Expr | None:
    """``value < bound`` unless the tiles divide ``bound`` exactly (then it always holds)."""
    return None if bound % tile == 0 and extent <= bound else Compare(CompareOp.LT, value,
                                                                      const(bound))


def _nest(loops: list[tuple[Var, int, Expr | None]], body: Stmt) -> Stmt:
    """Serial loops (outermost first), each with the guard of its own index."""
    for var, extent, guard in reversed(loops):
        body = For(var, const(extent), LoopKind.SERIAL, _guarded(guard, body))
    return body


def lower_gemm_chain(chain: GemmChain, tiles: ChainTiles, name: str | None = None) -> Kernel:
    """The fused kernel of ``chain`` (module docstring) in Kernel IR the code generator turns
    into AscendC: copies into L0A / L0B, whole-buffer contractions (one Mmad each), the
    intermediate's conversion L0C -> L0A, the output's copy-out; ragged edges guarded."""
    m, k, l_, n = chain.m, chain.k, chain.l, chain.n
    tm, tl, tk = min(tiles.tm, m), min(tiles.tl, l_), k
    f16, f32 = DType.FLOAT16, DType.FLOAT32
    a, b, d, e = (Buffer(t.name, t.shape, f16) for t in (chain.a, chain.b, chain.d, chain.e))
    e_acc = Buffer(f"{chain.e.name}_L0C", (tm, n), f32, level="L0C")
    c_acc = Buffer(f"{chain.c.name}_L0C", (tm, tl), f32, level="L0C")
    a_l0 = Buffer(f"{chain.a.name}_L0A", (tm, tk), f16, level="L0A")
    b_l0 = Buffer(f"{chain.b.name}_L0B", (tk, tl), f16, level="L0B")
    c_l0 = Buffer(f"{chain.c.name}_L0A", (tm, tl), f16, level="L0A")
    d_l0 = Buffer(f"{chain.d.name}_L0B", (tl, n), f16, level="L0B")
    mb, lt = Var("m_block"), Var("l_tile")
    i, j, r = Var("i"), Var("j"), Var("r")
    row, col = mb * tm + i, lt * tl + j
    row_ok = _below(row, m, tm * math.ceil(m / tm), tm)
    col_ok = _below(col, l_, tl * math.ceil(l_ / tl), tl)
    red_ok = _below(lt * tl + r, l_, tl * math.ceil(l_ / tl), tl)

    def zero(buffer: Buffer) -> Stmt:
        return _nest([(i, buffer.shape[0], None), (j, buffer.shape[1], None)],
                     Store(buffer, (i, j), const(0.0)))

    def product(c: Buffer, lhs: Buffer, rhs: Buffer, guards: tuple) -> Stmt:
        value = Cast(f32, BufferLoad(lhs, (i, r)) * BufferLoad(rhs, (r, j)))
        return _nest([(i, c.shape[0], guards[0]), (j, c.shape[1], guards[1]),
                      (r, lhs.shape[1], guards[2])],
                     Store(c, (i, j), value, accumulate=TeReduceOp.SUM))

    first = Allocate(a_l0, Allocate(b_l0, Seq((
        _nest([(i, tm, row_ok), (j, tk, None)], Store(a_l0, (i, j), BufferLoad(a, (row, j)))),
        _nest([(i, tk, None), (j, tl, col_ok)],
              Store(b_l0, (i, j), BufferLoad(b, (i, col)))),
        product(c_acc, a_l0, b_l0, (row_ok, col_ok, None))))))
    second = Allocate(c_l0, Allocate(d_l0, Seq((
        _nest([(i, tm, None), (j, tl, None)],
              Store(c_l0, (i, j), Cast(f16, BufferLoad(c_acc, (i, j))))),
        _nest([(i, tl, _below(lt * tl + i, l_, tl * math.ceil(l_ / tl), tl)), (j, n, None)],
              Store(d_l0, (i, j), BufferLoad(d, (lt * tl + i, j)))),
        product(e_acc, c_l0, d_l0, (row_ok, None, red_ok))))))
    l_steps = For(lt, const(math.ceil(l_ / tl)), LoopKind.SERIAL,
                  Allocate(c_acc, Seq((zero(c_acc), first, second))))
    copy_out = _nest([(i, tm, row_ok), (j, n, None)],
                     Store(e, (row, j), Cast(f16, BufferLoad(e_acc, (i, j)))))
    block = Allocate(e_acc, Seq((zero(e_acc), l_steps, copy_out)))
    body = For(mb, const(math.ceil(m / tm)), LoopKind.BOUND, block, axis="block_idx")
    kernel_name = name or f"{chain.c.name}_{chain.e.name}_fused"
    return Kernel(kernel_name, (a, b, d, e), (e.name,), body,
                  attrs={"schedule": f"Chimera GEMM chain, TM={tm} TL={tl} (K={k}, N={n} whole)"})


def fuse_gemm_chains(graph: Graph, spec: TargetSpec, plan: Any) -> list[FusedGroup]:
    """The float16 GEMM chains Chimera's ``plan`` fuses, one kernel each; a note-only group
    saying why for each planned chain left apart."""
    if plan is None:
        return []
    by_name = {t.name: t for t in graph.computes}
    outputs = {t.name for t in graph.outputs}
    groups: list[FusedGroup] = []
    for group in plan.chains:
        names = tuple(group.computes)
        tensors = [by_name[name] for name in names if name in by_name]
        chain = as_gemm_chain(*tensors) if len(tensors) == 2 else None
        if chain is None:
            reason = ("the NPU fuses float16 chains of two 2-D GEMMs C = A @ B, E = C @ D "
                      "only")
        elif chain.c.name in outputs or len(graph.consumers(chain.c)) != 1:
            chain, reason = None, "the intermediate is also an output or read elsewhere"
        else:
            tiles, reason = plan_chain_tiles(chain, spec)
            if tiles is not None:
                kernel = lower_gemm_chain(chain, tiles)
                groups.append(FusedGroup(names, (kernel,), (
                    f"fused {' -> '.join(names)} into one kernel on the Cube: "
                    f"{kernel.attrs['schedule']}; the intermediate stays in L0C / UB / L1 / "
                    f"L0A ({reason})",)))
                continue
        groups.append(FusedGroup((), (), (
            f"chain {' -> '.join(names)} (planned by Chimera) not fused: {reason}",)))
    return groups
