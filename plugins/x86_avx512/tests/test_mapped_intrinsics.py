"""Tensorized code through the general mapping path, run natively: computes lowered through
an intrinsic mapping (``compile(..., tensorize=...)``) whose ``IntrinsicCall``s the x86 code
generator emits (:mod:`tilecraft_x86_avx512.codegen.intrinsic`), against the reference."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from tilecraft_x86_avx512.host import read_cpuinfo
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError, TargetError
from tilecraft.intrin import MappingError, ReasonKind
from tilecraft.kernel_ir import Buffer, For, IntrinsicCall, Kernel, LoopKind, Region, Seq, Store
from tilecraft.te import Var, const

RNG = np.random.default_rng(77)
FLAGS = read_cpuinfo()[1]


def needs(flag: str) -> None:
    if flag not in FLAGS:
        pytest.skip(f"this CPU has no {flag}")


def values(tensor: te.Tensor) -> np.ndarray:
    if tensor.dtype is DType.UINT8:
        return RNG.integers(0, 256, tensor.shape).astype(np.uint8)  # extremes included
    if tensor.dtype is DType.INT8:
        return RNG.integers(-128, 128, tensor.shape).astype(np.int8)
    return RNG.standard_normal(tensor.shape).astype(tensor.dtype.numpy)


def compile_and_check(native: X86Avx512Target, output: te.Tensor, tensorize: object,
                      intrinsic: str, tolerance: float = 0.0) -> tc.Executable:
    """Compile ``output`` tensorized, check the kernel went through ``intrinsic`` and the
    result equals the reference (within ``tolerance``)."""
    graph = tc.Graph.from_outputs([output])
    exe = tc.compile(graph, native, tensorize=tensorize)
    kernel = next(k for k in exe.kernels if output.name in k.outputs)
    assert kernel.attrs["intrinsic"] == intrinsic
    assert exe.report.kernel(kernel.name).mode == "native"
    inputs = {tensor.name: values(tensor) for tensor in graph.inputs}
    got = exe(**inputs)
    want = tc.reference.run(output, inputs)
    assert got.dtype == want.dtype
    if tolerance:
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
    else:
        np.testing.assert_array_equal(got, want)
    return exe


def gemm(m: int, k: int, n: int, a: str, b: str, out: str | None = None) -> te.Tensor:
    return ops.matmul(te.placeholder((m, k), a, name="A"), te.placeholder((k, n), b, name="B"),
                      out_dtype=out, name="C")


SHAPES = [(1, 1, 1), (2, 2, 2), (7, 13, 5), (33, 64, 48)]


@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_int8_gemm_via_vpdpbusd(native: X86Avx512Target, m: int, k: int, n: int) -> None:
    needs("avx512_vnni")
    compile_and_check(native, gemm(m, k, n, "uint8", "int8", "int32"), {"C": "vpdpbusd"},
                      "vpdpbusd")


@pytest.mark.parametrize("r1", [["rc"], ["rh", "rw"], ["rc", "rh", "rw"]])
def test_int8_conv2d_via_vpdpbusd(native: X86Avx512Target, r1: list[str]) -> None:
    needs("avx512_vnni")
    x = te.placeholder((2, 5, 7, 7), "uint8", name="x")
    w = te.placeholder((17, 5, 3, 3), "int8", name="w")
    y = ops.conv2d(x, w, stride=2, padding=1, out_dtype="int32", name="y")
    forced = {"y": {"intrinsic": "vpdpbusd", "loops": {"i1": ["k"], "r1": r1}}}
    exe = compile_and_check(native, y, forced, "vpdpbusd")
    assert exe.kernels[-1].attrs["mapping"].startswith(f"vpdpbusd: i1 <- (k), r1 <- "
                                                       f"({', '.join(r1)})")


@pytest.mark.parametrize(("m", "k", "n"), SHAPES[:3] + [(16, 31, 20)])
def test_bf16_gemm_via_vdpbf16ps(native: X86Avx512Target, m: int, k: int, n: int) -> None:
    needs("avx512_bf16")
    compile_and_check(native, gemm(m, k, n, "bfloat16", "bfloat16", "float32"),
                      {"C": "vdpbf16ps"}, "vdpbf16ps", tolerance=1e-4)


@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
@pytest.mark.parametrize("lanes", ["j", "i"])
def test_fp32_gemm_via_fma_f32x16_bcast(native: X86Avx512Target, m: int, k: int, n: int,
                                        lanes: str) -> None:
    forced = {"C": {"intrinsic": "fma_f32x16_bcast", "loops": {"i1": [lanes]}}}
    compile_and_check(native, gemm(m, k, n, "float32", "float32"), forced,
                      "fma_f32x16_bcast", tolerance=1e-4)


def test_fp32_lane_products_via_fma_f32x16(native: X86Avx512Target) -> None:
    """``fma_f32x16`` needs a loop indexing both sources and the output (a GEMM has none):
    a sum over k of row products, C[i] = sum_k A[k, i] * B[k, i]."""
    A = te.placeholder((9, 37), name="A")
    B = te.placeholder((9, 37), name="B")
    k = te.reduce_axis(9, "k")
    C = te.compute((37,), lambda i: te.sum(A[k, i] * B[k, i], axis=k), name="C")
    compile_and_check(native, C, {"C": "fma_f32x16"}, "fma_f32x16", tolerance=1e-4)
    with pytest.raises(MappingError, match="no mapping onto fma_f32x16"):
        tc.compile(gemm(4, 4, 4, "float32", "float32"), native, tensorize={"C": "fma_f32x16"})


def test_auto_tensorizes_what_maps_and_reports_measured_time(native: X86Avx512Target) -> None:
    needs("avx512_vnni")
    A = te.placeholder((20, 36), "uint8", name="A")
    B = te.placeholder((36, 40), "int8", name="B")
    C = ops.matmul(A, B, out_dtype="int32", name="C")
    R = ops.relu(C, name="R")
    exe = tc.compile(tc.Graph.from_outputs([R]), native, tensorize=True)
    kinds = {k.name: k.attrs.get("intrinsic") for k in exe.kernels}
    assert kinds["C_vpdpbusd"] == "vpdpbusd" and len(kinds) == 2
    a, b = values(A), values(B)
    np.testing.assert_array_equal(exe(a, b), np.maximum(a.astype(np.int32)
                                                         @ b.astype(np.int32), 0))
    (entry,) = [e for e in exe.report.mappings if e.operator == "C" and e.intrinsic == "vpdpbusd"]
    assert entry.measured_seconds is not None and entry.measured_seconds > 0
    assert entry.predicted_seconds is not None and "compiled through this mapping" in entry.notes[0]
    text = str(exe.report)
    assert "tensorized: vpdpbusd: i1 <- (j), r1 <- (k)" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("C ")
               and "vpdpbusd" in line)
    assert row.split()[-2] != "-"  # the measured column


def test_a_rejected_forced_mapping_raises_the_reasons(native: X86Avx512Target) -> None:
    needs("avx512_vnni")  # the host spec declares vpdpbusd only with VNNI
    x = te.placeholder((1, 4, 6, 6), "uint8", name="x")
    w = te.placeholder((8, 4, 3, 3), "int8", name="w")
    y = ops.conv2d(x, w, out_dtype="int32", name="y")
    with pytest.raises(MappingError, match="fails verification") as info:
        tc.compile(y, native, tensorize={"y": {"intrinsic": "vpdpbusd",
                                               "loops": {"i1": ["k", "h"], "r1": ["rc"]}}})
    reason = info.value.reasons[0]
    assert reason.kind is ReasonKind.ACCESS_MATRIX and reason.software_loop == "h"
    assert reason.matrix == "X" and reason.entry == ("x", "h")


def test_an_unknown_intrinsic_is_refused(native: X86Avx512Target) -> None:
    with pytest.raises(TargetError, match="declares no intrinsic 'vfoo'"):
        tc.compile(gemm(4, 4, 4, "uint8", "int8", "int32"), native, tensorize={"C": "vfoo"})
    a = Buffer("a", (16,), DType.FLOAT32)
    kernel = Kernel("k", (a,), ("a",), IntrinsicCall("vfoo", (Region(a, (const(0),), (16,)),)))
    with pytest.raises(CodegenError, match="x86_avx512 .*intrinsic 'vfoo'.* fma_f32x16"):
        native.codegen(kernel)


def strided_kernel() -> Kernel:
    """vpdpbusd on regions that are not contiguous: the u8 group and B's columns step by 2,
    the destination is every other element of C."""
    a = Buffer("A", (8,), DType.UINT8)
    b = Buffer("B", (16, 8), DType.INT8)
    c = Buffer("C", (33,), DType.INT32)
    call = IntrinsicCall("vpdpbusd", (Region(a, (const(0),), (4,), (2,)),
                                      Region(b, (const(0), const(1)), (16, 4), (1, 2)),
                                      Region(c, (const(1),), (16,), (2,))))
    return Kernel("strided", (a, b, c), ("C",), call)


def test_non_contiguous_regions_are_gathered(native: X86Avx512Target,
                                             run: Callable[..., dict[str, np.ndarray]]) -> None:
    needs("avx512_vnni")
    kernel = strided_kernel()
    text = native.codegen(kernel).text
    assert "llvm.masked.gather" in text and "llvm.masked.scatter" in text
    arrays = {"A": RNG.integers(0, 256, 8).astype(np.uint8),
              "B": RNG.integers(-128, 128, (16, 8)).astype(np.int8),
              "C": RNG.integers(-1000, 1000, 33).astype(np.int32)}
    got = run(kernel, {name: array.copy() for name, array in arrays.items()})["C"]
    want = arrays["C"].copy()
    want[1::2] += arrays["B"][:, 1::2].astype(np.int32) @ arrays["A"][::2].astype(np.int32)
    np.testing.assert_array_equal(got, want)
    emulated = {name: array.copy() for name, array in arrays.items()}
    native.emulate(kernel, emulated)  # the declared semantics on the same regions
    np.testing.assert_array_equal(emulated["C"], want)


def test_regions_of_the_wrong_shape_or_dtype_are_refused(native: X86Avx512Target) -> None:
    needs("avx512_vnni")  # the host spec declares vpdpbusd only with VNNI
    a = Buffer("A", (8,), DType.INT8)
    b = Buffer("B", (16, 4), DType.INT8)
    c = Buffer("C", (16,), DType.INT32)
    wrong_dtype = IntrinsicCall("vpdpbusd", (Region(a, (const(0),), (4,)),
                                             Region(b, (const(0), const(0)), (16, 4)),
                                             Region(c, (const(0),), (16,))))
    with pytest.raises(CodegenError, match="Src1 operand of vpdpbusd is a region of A .int8"):
        native.codegen(Kernel("k", (a, b, c), ("C",), wrong_dtype))
    u8 = Buffer("U", (16, 4), DType.UINT8)
    short = IntrinsicCall("vpdpbusd", (Region(u8, (const(0), const(0)), (2, 4)),
                                       Region(b, (const(0), const(0)), (16, 4)),
                                       Region(c, (const(0),), (16,))))
    with pytest.raises(CodegenError, match=r"extents \[2, 4\] of U.*needs extents \[4\]"):
        native.codegen(Kernel("k", (u8, b, c), ("C",), short))
    i = Var("i")
    vector = For(i, const(16), LoopKind.VECTOR, Seq((
        Store(c, (i,), const(0)),
        IntrinsicCall("vpdpbusd", (Region(a, (const(0),), (4,)),
                                   Region(b, (const(0), const(0)), (16, 4)),
                                   Region(c, (const(0),), (16,)))))), lanes=16)
    with pytest.raises(CodegenError, match="inside the vector loop over i"):
        native.codegen(Kernel("k", (a, b, c), ("C",), vector))


PROGRAM = """
from tilecraft import ops, te

A = te.placeholder((24, 40), "uint8", name="A")
B = te.placeholder((40, 36), "int8", name="B")
graph = ops.matmul(A, B, out_dtype="int32", name="C")
"""


def test_cli_report_measures_the_chosen_mapping(native: X86Avx512Target, tmp_path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from tilecraft.cli import main

    needs("avx512_vnni")
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    assert main(["report", str(path), "--intrinsic", "vpdpbusd", "--measure", "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["entries"]
    assert entry["chosen"].startswith("vpdpbusd: i1 <- (j), r1 <- (k)")
    assert entry["measured_seconds"] > 0 and entry["predicted_seconds"] > 0
