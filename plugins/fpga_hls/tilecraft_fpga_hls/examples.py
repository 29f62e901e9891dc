"""Hand-written Kernel IR in the shape of FlexTensor's FPGA template, for tests and examples:
a tiled GEMM whose read stage copies A and B tiles into partitioned BRAM buffers, whose compute
stage calls the ``rows`` x ``cols`` MAC array once per k, and whose write stage drains the
accumulators through BRAM to DDR.

>>> from tilecraft.dtypes import DType
>>> kernel = gemm_kernel(4, 8, 13, (2, 3), DType.INT8)
>>> [(p.name, p.shape, p.dtype.value) for p in kernel.params]
[('A', (8, 13), 'int8'), ('B', (13, 24), 'int8'), ('C', (8, 24), 'int32')]
"""

from __future__ import annotations

from tilecraft.dtypes import DType
from tilecraft.kernel_ir import (
    Allocate,
    Buffer,
    Copy,
    For,
    IntrinsicCall,
    Kernel,
    LoopKind,
    Region,
    Seq,
    Store,
)
from tilecraft.kernel_ir.nodes import ArrayPartition, PartitionKind
from tilecraft.te import Var, const

__all__ = ["gemm_kernel"]


def gemm_kernel(rows: int, cols: int, k: int, tiles: tuple[int, int], dtype: DType,
                k_loop: LoopKind = LoopKind.PIPELINED) -> Kernel:
    """C = A @ B on ``tiles`` output tiles of the array's shape: read A and B tiles into BRAM
    (A partitioned by rows, B by columns: one bank per PE row and column), one ``mac_array``
    call per k (II = 1), drain through BRAM to DDR."""
    acc_dtype = DType.INT32 if dtype in (DType.INT8, DType.UINT8) else dtype
    m, n = tiles[0] * rows, tiles[1] * cols
    a = Buffer("A", (m, k), dtype, level="DDR")
    b = Buffer("B", (k, n), dtype, level="DDR")
    c = Buffer("C", (m, n), acc_dtype, level="DDR")
    a_buf = Buffer("a_buf", (rows, k), dtype, level="BRAM",
                   partitions=(ArrayPartition(0, PartitionKind.COMPLETE),))
    b_buf = Buffer("b_buf", (k, cols), dtype, level="BRAM",
                   partitions=(ArrayPartition(1, PartitionKind.CYCLIC, cols),))
    c_buf = Buffer("c_buf", (rows, cols), acc_dtype, level="BRAM")
    acc = Buffer("acc", (rows, cols), acc_dtype, level="register")
    tm, tn, kk, i, j = Var("tm"), Var("tn"), Var("kk"), Var("i"), Var("j")
    zero = (const(0), const(0))
    read = Seq((Copy(Region(a_buf, zero, (rows, k)), Region(a, (tm * rows, const(0)), (rows, k))),
                Copy(Region(b_buf, zero, (k, cols)), Region(b, (const(0), tn * cols), (k, cols)))))
    reset = For(i, const(rows), LoopKind.UNROLLED, For(j, const(cols), LoopKind.UNROLLED,
                                                       Store(acc, (i, j), const(0, acc_dtype))))
    compute = For(kk, const(k), k_loop, IntrinsicCall("mac_array", (
        Region(a_buf, (const(0), kk), (rows, 1)), Region(b_buf, (kk, const(0)), (1, cols)),
        Region(acc, zero, (rows, cols)))), initiation_interval=1)
    write = Seq((Copy(Region(c_buf, zero, (rows, cols)), Region(acc, zero, (rows, cols))),
                 Copy(Region(c, (tm * rows, tn * cols), (rows, cols)),
                      Region(c_buf, zero, (rows, cols)))))
    tile_loops = For(tm, const(tiles[0]), LoopKind.SERIAL,
                     For(tn, const(tiles[1]), LoopKind.SERIAL,
                         Seq((read, reset, compute, write))))
    body = Allocate(a_buf, Allocate(b_buf, Allocate(c_buf, Allocate(acc, tile_loops))))
    return Kernel("gemm", (a, b, c), ("C",), body)
