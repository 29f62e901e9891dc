"""Buffer layouts with meaning: offsets, the verifier's checks, the interpreter's gather from
and scatter to the physical arrays of parameters, and the visitor every consumer shares."""

from __future__ import annotations

import numpy as np
import pytest

from tilecraft.dtypes import DType
from tilecraft.errors import InputError, LoweringError
from tilecraft.kernel_ir import (
    Blocked,
    Buffer,
    BufferLoad,
    For,
    Kernel,
    KernelTransformer,
    KernelVisitor,
    LoopKind,
    Seq,
    Store,
    Strided,
    parse_layout,
    walk_stmts,
)
from tilecraft.kernel_ir.interpreter import run_kernel
from tilecraft.kernel_ir.simplify import simplify_stmt
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.te import Var, const

F32 = DType.FLOAT32


def _fractal(matrix: np.ndarray, inner_transposed: bool = False) -> np.ndarray:
    """The 16x16-fractal physical order of a matrix, blocks row-major (numpy reference)."""
    rows, cols = matrix.shape
    blocks = matrix.reshape(rows // 16, 16, cols // 16, 16).transpose(0, 2, 1, 3)
    if inner_transposed:
        blocks = blocks.transpose(0, 1, 3, 2)
    return np.ascontiguousarray(blocks).reshape(-1)


@pytest.mark.parametrize(("name", "transposed"), [("fractal_zZ", False), ("fractal_nZ", True)])
def test_offsets_match_the_fractal_reference(name: str, transposed: bool) -> None:
    layout = parse_layout(name)
    logical = np.arange(32 * 48).reshape(32, 48)
    physical = np.empty(32 * 48, np.int64)
    physical[layout.offsets((32, 48)).reshape(-1)] = logical.reshape(-1)
    np.testing.assert_array_equal(physical, _fractal(logical, transposed))
    assert layout.physical_size((32, 48)) == 32 * 48


def test_parse_names_and_problems() -> None:
    assert parse_layout("blocked(4x8,zN)") == Blocked((4, 8), outer="N", inner="z")
    assert parse_layout("strided(10,1)") == Strided((10, 1))
    assert Strided((10, 1)).physical_size((3, 4)) == 24
    assert Strided((1, 1)).problem((3, 4)) is not None
    with pytest.raises(LoweringError, match="unknown layout 'NHWC'; use row_major"):
        parse_layout("NHWC")


def _transpose_kernel(layout: str, shape: tuple[int, int] = (32, 32)) -> Kernel:
    A = Buffer("A", shape, F32, layout=layout)
    B = Buffer("B", shape[::-1], F32)
    i, j = Var("i"), Var("j")
    body = For(i, const(shape[0]), LoopKind.SERIAL, For(j, const(shape[1]), LoopKind.SERIAL,
               Store(B, (j, i), BufferLoad(A, (i, j)))))
    return Kernel("transpose", (A, B), ("B",), body)


def test_interpreter_reads_a_fractal_parameter_in_its_physical_order() -> None:
    logical = np.random.default_rng(3).standard_normal((32, 32)).astype(np.float32)
    out = np.zeros((32, 32), np.float32)
    run_kernel(_transpose_kernel("fractal_nZ"), {"A": _fractal(logical, True), "B": out})
    np.testing.assert_array_equal(out, logical.T)


def test_interpreter_writes_a_strided_output_back_with_its_gaps() -> None:
    A = Buffer("A", (3, 4), F32)
    B = Buffer("B", (3, 4), F32, layout=Strided((6, 1)))   # rows padded to 6 elements
    i, j = Var("i"), Var("j")
    kernel = Kernel("pad", (A, B), ("B",), For(i, const(3), LoopKind.SERIAL, For(
        j, const(4), LoopKind.SERIAL, Store(B, (i, j), BufferLoad(A, (i, j)) + 1.0))))
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.full(16, -1.0, np.float32)
    run_kernel(kernel, {"A": a, "B": out})
    expected = np.full(16, -1.0, np.float32)
    for row in range(3):
        expected[row * 6: row * 6 + 4] = a[row] + 1.0
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(InputError, match=r"array B must hold the 16 elements of its "
                                         r"strided\(6,1\) layout"):
        run_kernel(kernel, {"A": a, "B": np.zeros(15, np.float32)})


def test_verifier_refuses_a_layout_that_does_not_fit() -> None:
    with pytest.raises(LoweringError, match=r"kernel transpose: parameter A: layout fractal_zZ "
                                            r"of A block \[16, 16\] does not divide the shape "
                                            r"\[20, 32\]"):
        verify_kernel(_transpose_kernel("fractal_zZ", (20, 32)))


def test_one_visitor_and_transformer_for_every_consumer() -> None:
    kernel = _transpose_kernel("row_major")
    kinds = [type(s).__name__ for s in walk_stmts(kernel.body)]
    assert kinds == ["For", "For", "Store"]

    class Loads(KernelVisitor[None]):
        def __init__(self) -> None:
            self.buffers: list[str] = []

        def visit_Store(self, stmt: Store) -> None:
            self.buffers += [stmt.buffer.name, *(n.buffer.name for n in [stmt.value]
                                                 if isinstance(n, BufferLoad))]

    loads = Loads()
    loads.visit(kernel.body)
    assert loads.buffers == ["B", "A"]

    class Unchanged(KernelTransformer):
        pass

    assert Unchanged().visit(kernel.body) is kernel.body
    i = Var("i")
    A = Buffer("A", (4,), F32)
    messy = Seq((For(i, const(4), LoopKind.SERIAL, Store(A, ((i * 1) + 0,), const(2.0))),))
    assert str(simplify_stmt(messy)) == "for i in serial(4):\n  A[i] = 2.0"
