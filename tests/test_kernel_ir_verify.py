"""verify_kernel: each malformed construct is caught with a message naming the kernel, the
statement and the fix; well-formed kernels (including every lowered one) pass."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    Copy,
    For,
    IfThenElse,
    Kernel,
    LoopKind,
    MicroKernelCall,
    Region,
    Seq,
    Store,
    Stream,
    StreamPop,
)
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower import LoweringOptions, lower_compute
from tilecraft.te import Var, const

F32 = DType.FLOAT32
A = Buffer("A", (4, 6), F32)
B = Buffer("B", (4, 6), F32)
i, j = Var("i"), Var("j")


def nest(body, outer: LoopKind = LoopKind.SERIAL, inner: LoopKind = LoopKind.SERIAL,
         lanes: int = 0) -> For:
    return For(i, const(4), outer, For(j, const(6), inner, body, lanes=lanes))


def kernel(body, params=(A, B), outputs=("B",)) -> Kernel:
    return Kernel("k", tuple(params), tuple(outputs), body)


COPY_ROW = Store(B, (i, j), BufferLoad(A, (i, j)))


def test_well_formed_kernels_pass() -> None:
    verify_kernel(kernel(nest(COPY_ROW, LoopKind.PARALLEL, LoopKind.VECTOR, lanes=16)))
    X = te.placeholder((5, 7), name="X")
    Y = te.compute((5, 7), lambda a, b: te.select(b >= 2, X[a, b - 2], 0.0), name="Y")
    verify_kernel(lower_compute(Y, LoweringOptions()))


CASES = {
    "unbound variable": (
        kernel(For(i, const(4), LoopKind.SERIAL, COPY_ROW)),
        r"kernel k: in `B\[i, j\] = A\[i, j\]`: variable j is not bound by an enclosing loop"),
    "rebound variable": (
        kernel(For(i, const(4), LoopKind.SERIAL, For(i, const(6), LoopKind.SERIAL,
                                                     Store(B, (i, i), const(0.0))))),
        "loop variable i is already bound by an enclosing loop; use a fresh te.Var"),
    "unknown buffer": (
        kernel(nest(COPY_ROW), params=(B,)),
        "A is neither a parameter nor allocated around this statement"),
    "output not a parameter": (
        kernel(nest(COPY_ROW), outputs=("C",)),
        "output C: not a parameter of the kernel"),
    "duplicate names": (
        kernel(nest(COPY_ROW), params=(A, B, Buffer("A", (2,), F32))),
        "the name A is used by two buffers"),
    "store index count": (
        kernel(nest(Store(B, (i,), const(0.0)))),
        r"stores into B with 1 indices but it has 2 dimensions \[4, 6\]"),
    "load index count": (
        kernel(nest(Store(B, (i, j), BufferLoad(A, (i, j, j))))),
        r"reads A with 3 indices but it has 2 dimensions"),
    "float index": (
        kernel(nest(Store(B, (i, j), BufferLoad(A, (i, const(1.0)))))),
        "index 1 of A \\(1.0\\) has dtype float32; indices must be integers"),
    "value dtype": (
        kernel(nest(Store(B, (i, j), const(1)))),
        "the value has dtype int32 but B holds float32; cast the value"),
    "two parallel loops": (
        kernel(Seq((nest(COPY_ROW, LoopKind.PARALLEL), nest(COPY_ROW, LoopKind.PARALLEL)))),
        "a second parallel loop \\(the first is over i\\); a kernel has at most one"),
    "nested parallel loop": (
        kernel(nest(COPY_ROW, LoopKind.SERIAL, LoopKind.PARALLEL)),
        "the parallel loop is nested inside i; the parallel loop must be the outermost"),
    "vector without lanes": (
        kernel(nest(COPY_ROW, inner=LoopKind.VECTOR)),
        "a vector loop needs lanes >= 1"),
    "bound without axis": (
        kernel(nest(COPY_ROW, inner=LoopKind.BOUND)),
        "a bound loop needs the hardware axis"),
    "pipelined without II": (
        kernel(nest(COPY_ROW, inner=LoopKind.PIPELINED)),
        "a pipelined loop needs an initiation interval"),
    "te node left": (
        kernel(nest(Store(B, (i, j), te.placeholder((4, 6), name="T")[0, 0]))),
        "the te node T\\[0, 0\\] \\(Load\\) is not Kernel IR"),
    "out of bounds index": (
        kernel(nest(Store(B, (i, j), BufferLoad(A, (i, j + 1))))),
        r"index 1 of A \(\(j \+ 1\)\) ranges over \[1, 6\] but dimension 1 has extent 6; "
        "clamp it"),
    "unguarded negative index": (
        kernel(nest(Store(B, (i, j), BufferLoad(A, (i - 1, j))))),
        r"ranges over \[-1, 2\]"),
    "non-boolean condition": (
        kernel(nest(IfThenElse(i + 1, COPY_ROW))),
        "the condition \\(i \\+ 1\\) is not a comparison"),
    "reallocated buffer": (
        kernel(Allocate(B, nest(COPY_ROW))),
        "B is allocated again inside its own scope"),
    "region rank": (
        kernel(MicroKernelCall("mk", (Region(A, (const(0),), (4,)),))),
        "the region of A has 1 bases, 1 extents and 1 steps but the buffer has 2 dimensions"),
    "region out of bounds": (
        kernel(For(i, const(4), LoopKind.SERIAL, Copy(Region(B, (i, const(0)), (2, 6)),
                                                      Region(A, (i, const(0)), (2, 6))))),
        r"the region of B can cover \[0, 4\] in dimension 0, outside its extent 4"),
    "copy sizes": (
        kernel(Copy(Region(B, (const(0), const(0)), (1, 6)),
                    Region(A, (const(0), const(0)), (2, 6)))),
        "copies 12 elements into a region of 6"),
    "stream dtype": (
        kernel(nest(StreamPop(Stream("s", DType.INT32), B, (i, j)))),
        "stream s carries int32 but B holds float32"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_malformed_kernels_are_rejected(case: str) -> None:
    bad, message = CASES[case]
    with pytest.raises(LoweringError, match=message) as info:
        verify_kernel(bad)
    assert str(info.value).startswith("kernel k: ")


def test_guards_and_clamps_satisfy_the_bounds_check() -> None:
    guarded = Store(B, (i, j), te.select((j >= 1) & (i < 3), BufferLoad(A, (i + 1, j - 1)),
                                         0.0))
    verify_kernel(kernel(nest(guarded)))
    under_if = IfThenElse(j < 5, Store(B, (i, j), BufferLoad(A, (i, j + 1))))
    verify_kernel(kernel(nest(under_if)))
    clamped = Store(B, (i, j), BufferLoad(A, (te.min(i + 1, 3), te.max(j - 1, 0))))
    verify_kernel(kernel(nest(clamped)))
    # the check can be skipped for indices the interval analysis cannot follow
    verify_kernel(kernel(nest(Store(B, (i, j), BufferLoad(A, (i, j + 1))))), check_bounds=False)


def test_spec_levels_and_loop_kinds() -> None:
    spec = SimpleNamespace(name="toy", memory=SimpleNamespace(levels=(
        SimpleNamespace(name="DRAM", size_bytes=None),
        SimpleNamespace(name="SRAM", size_bytes=1024))),
        loop_kinds=(LoopKind.SERIAL, LoopKind.VECTOR))
    dram_a, dram_b = Buffer("A", (4, 6), F32, "DRAM"), Buffer("B", (4, 6), F32, "DRAM")
    body = nest(Store(dram_b, (i, j), BufferLoad(dram_a, (i, j))), inner=LoopKind.VECTOR,
                lanes=8)
    verify_kernel(kernel(body, params=(dram_a, dram_b)), spec)
    with pytest.raises(LoweringError, match="memory level 'global' is not in the memory "
                       "hierarchy of toy \\(DRAM, SRAM\\)"):
        verify_kernel(kernel(nest(COPY_ROW)), spec)
    body = nest(Store(dram_b, (i, j), BufferLoad(dram_a, (i, j))), outer=LoopKind.PARALLEL)
    with pytest.raises(LoweringError, match="loop kind parallel is not offered by toy"):
        verify_kernel(kernel(body, params=(dram_a, dram_b)), spec)
