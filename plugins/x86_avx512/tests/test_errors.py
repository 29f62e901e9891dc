"""Bad arrays raise InputError before native code runs; constructs x86 cannot express raise
CodegenError naming the construct and the kernel."""

from __future__ import annotations

import numpy as np
import pytest
from x86_kernels import buffer, kernel, load, loop, store, vloop

from tilecraft import te
from tilecraft.errors import CodegenError, InputError, TargetError
from tilecraft.kernel_ir.nodes import (
    Barrier,
    Buffer,
    For,
    IntrinsicCall,
    LoopKind,
    MicroKernelCall,
    Region,
    Stream,
    StreamPush,
)
from tilecraft.target.base import Source
from tilecraft.te import Var, const


@pytest.fixture(scope="module")
def add_kernel():
    a, b, c = buffer("A", (4, 5)), buffer("B", (4, 5)), buffer("C", (4, 5))
    i, j = Var("i"), Var("j")
    return kernel("add", [a, b, c], ["C"], loop(i, 4, vloop(j, 5, store(
        c, (i, j), load(a, i, j) + load(b, i, j)))))


@pytest.fixture(scope="module")
def add(native, add_kernel):
    return native.compile_kernel(add_kernel)


def _arrays(**override):
    arrays = {name: np.ones((4, 5), np.float32) for name in "ABC"}
    arrays.update(override)
    return arrays


@pytest.mark.parametrize("override, message", [
    ({"A": None}, r"parameter 'A' \(float32\[4, 5\]\) is missing"),
    ({"A": [[1.0] * 5] * 4}, "'A' must be a numpy array .* got list"),
    ({"B": np.ones((4, 5), np.float64)}, "'B' must have dtype float32, got float64"),
    ({"B": np.ones((5, 4), np.float32)}, r"'B' must have shape \[4, 5\], got \[5, 4\]"),
    ({"A": np.ones((5, 4), np.float32).T}, "'A' is not C-contiguous"),
    ({"C": np.ones((4, 5), np.float32)[::1]}, None),
])
def test_bad_arrays_raise_input_error(add, override, message):
    arrays = _arrays(**override)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    if message is None:
        add(arrays)
        np.testing.assert_array_equal(arrays["C"], np.full((4, 5), 2, np.float32))
        return
    with pytest.raises(InputError, match=message):
        add(arrays)


def test_outputs_must_be_writeable_and_not_overlap(add):
    frozen = np.zeros((4, 5), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(InputError, match="'C' is written but its array is read-only"):
        add(_arrays(C=frozen))
    shared = np.ones((4, 5), np.float32)
    with pytest.raises(InputError, match="'C', which the kernel writes, overlaps .*'A'"):
        add(_arrays(A=shared, C=shared))
    inputs_may_alias = np.ones((4, 5), np.float32)
    arrays = _arrays(A=inputs_may_alias, B=inputs_may_alias)
    add(arrays)
    np.testing.assert_array_equal(arrays["C"], np.full((4, 5), 2, np.float32))
    with pytest.raises(InputError, match="takes a mapping"):
        add([np.ones(3)])


def _wrap(body, params=()):
    out = buffer("O", (8,))
    return kernel("odd", [out, *params], ["O"], body(out))


def _loop(kind, **extra):
    i = Var("i")
    return lambda out: For(i, const(8), kind, store(out, (i,), const(1.0)), **extra)


def _region(out):
    return Region(out, (const(0),), (8,))


UNSUPPORTED = [
    (_loop(LoopKind.BOUND, axis="blockIdx.x"), "bound loop over 'i'.*kernel 'odd'"),
    (_loop(LoopKind.PIPELINED, initiation_interval=1), "pipelined loop over 'i'"),
    (_loop(LoopKind.STAGE), "stage loop over 'i'"),
    (lambda out: Barrier(), "Barrier in kernel 'odd'"),
    (lambda out: StreamPush(Stream("s", out.dtype), const(1.0)), "StreamPush in kernel 'odd'"),
    (lambda out: IntrinsicCall("fma16", (_region(out),)), "IntrinsicCall in kernel 'odd'"),
    (lambda out: MicroKernelCall("gemm4x16", (_region(out),)), "micro-kernel .gemm4x16."),
]


@pytest.mark.parametrize("body, message", UNSUPPORTED,
                         ids=["bound", "pipelined", "stage", "barrier", "stream", "intrinsic",
                              "micro_kernel"])
def test_unsupported_constructs_raise_codegen_error(target, body, message):
    with pytest.raises(CodegenError, match=message):
        target.codegen(_wrap(body))


def test_malformed_kernels_raise_codegen_error(target):
    i, j = Var("i"), Var("j")
    out, local = buffer("O", (8,)), Buffer("tmp", (8,), buffer("O", (8,)).dtype)
    placeholder = te.placeholder((8,), name="T")
    cases = [
        (kernel("k1", [out], ["O"], loop(i, 8, store(out, (i,), placeholder[i]))),
         "reads the te tensor 'T' directly"),
        (kernel("k2", [out], ["O"], loop(i, 8, store(out, (j,), const(1.0)))),
         "variable 'j' is used outside any loop"),
        (kernel("k3", [out], ["O"], loop(i, 8, store(out, (i,), load(local, i)))),
         "buffer 'tmp' is neither a kernel parameter nor allocated"),
        (kernel("k4", [out], ["O"], loop(i, 8, store(out, (i, i), const(1.0)))),
         "O has 1 dimensions but is indexed with 2 indices"),
        (kernel("k5", [out], ["O"], loop(i, 2, loop(j, 4, store(out, (i * 4 + j,), const(1.0)),
                                                     LoopKind.PARALLEL))),
         "PARALLEL loop over 'j' is not the kernel's outermost loop"),
        (kernel("k6", [out], ["O", "P"], loop(i, 8, store(out, (i,), const(1.0)))),
         r"declares outputs \['P'\] that are not parameters"),
        (kernel("k7", [out, buffer("O", (3,))], ["O"], loop(i, 8, store(out, (i,), const(1.0)))),
         "several parameters named O"),
        (kernel("k8", [Buffer("F", (8,), out.dtype, layout="fractal_zZ")], ["F"],
                loop(i, 8, store(out, (i,), const(1.0)))), "layout 'fractal_zZ'"),
        (kernel("k9", [out], ["O"], vloop(i, 8, store(out, (i,), const(1.0)), lanes=128)),
         "asks for 128 lanes"),
    ]
    for bad, message in cases:
        with pytest.raises(CodegenError, match=message):
            target.codegen(bad)


def test_foreign_sources_are_refused(target):
    source = Source(target="nvidia_tc", kernel_name="k", language="cuda", text="", entry="k")
    with pytest.raises(TargetError, match="x86_avx512 builds llvm-ir"):
        target.build(source)


def test_vector_loops_that_cannot_run_lane_parallel_fall_back(run, target):
    n = 20
    x, y, h = buffer("X", (n,)), buffer("Y", (1,)), buffer("H", (4,), "int32")
    i = Var("i")
    # a lane-varying value stored to one location: the last iteration wins
    last = kernel("last", [x, y], ["Y"], vloop(i, n, store(y, (0,), load(x, i))))
    source = target.codegen(last)
    assert "emitted as a scalar loop" in source.meta["notes"][0]
    out = run(last, {"X": np.arange(n, dtype=np.float32), "Y": np.zeros(1, np.float32)})
    assert out["Y"][0] == n - 1
    # a histogram: lanes may collide, so it runs lane by lane
    hist = kernel("hist", [h], ["H"], vloop(i, n, store(h, (i % 4,), const(1, "int32"),
                                                        te.ReduceOp.SUM)))
    out = run(hist, {"H": np.zeros(4, np.int32)})
    np.testing.assert_array_equal(out["H"], [5, 5, 5, 5])
