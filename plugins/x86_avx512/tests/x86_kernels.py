"""Small builders of hand-written Kernel IR for the x86 plugin's tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import Buffer, BufferLoad, For, Kernel, LoopKind, Seq, Stmt, Store
from tilecraft.te.expr import Expr, ReduceOp, Var, const


def buffer(name: str, shape: Sequence[int], dtype: str = "float32") -> Buffer:
    return Buffer(name, tuple(shape), DType.parse(dtype), level="DRAM")


def load(buf: Buffer, *indices: Expr | int) -> BufferLoad:
    return BufferLoad(buf, tuple(const(i) if isinstance(i, int) else i for i in indices))


def store(buf: Buffer, indices: Sequence[Expr | int], value: Expr,
          accumulate: ReduceOp | None = None) -> Store:
    return Store(buf, tuple(const(i) if isinstance(i, int) else i for i in indices), value,
                 accumulate)


def loop(var: Var, extent: int | Expr, body: Stmt, kind: LoopKind = LoopKind.SERIAL,
         lanes: int = 0) -> For:
    return For(var, const(extent) if isinstance(extent, int) else extent, kind, body,
               lanes=lanes)


def vloop(var: Var, extent: int | Expr, body: Stmt, lanes: int = 16) -> For:
    return loop(var, extent, body, LoopKind.VECTOR, lanes)


def seq(*stmts: Stmt) -> Seq:
    return Seq(tuple(stmts))


def kernel(name: str, params: Sequence[Buffer], outputs: Sequence[str], *body: Stmt) -> Kernel:
    return Kernel(name, tuple(params), tuple(outputs), body[0] if len(body) == 1 else seq(*body))


def zeros_for(kernel_: Kernel, **given: np.ndarray) -> dict[str, np.ndarray]:
    """Arrays for every parameter: the given ones, zeros for the rest."""
    arrays = {}
    for param in kernel_.params:
        value = given.get(param.name)
        arrays[param.name] = np.zeros(param.shape, param.dtype.numpy) if value is None \
            else np.array(value, copy=True)
    return arrays


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Units in the last place between float32 arrays (NaN == NaN counts as 0)."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)

    def ordered(x: np.ndarray) -> np.ndarray:
        bits = x.view(np.int32).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)

    distance = np.abs(ordered(a) - ordered(b))
    both_nan = np.isnan(a) & np.isnan(b)
    return np.where(both_nan, 0, np.where(np.isnan(a) | np.isnan(b), 1 << 40, distance))
