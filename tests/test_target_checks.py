"""check_kernel_supported: a code generator's first step rejects, by name, every Kernel IR
construct its target does not declare."""

from __future__ import annotations

import copy

import pytest

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir import (
    Allocate,
    Buffer,
    BufferLoad,
    Copy,
    For,
    IfThenElse,
    IntrinsicCall,
    Kernel,
    LoopKind,
    MicroKernelCall,
    Region,
    Seq,
    Store,
)
from tilecraft.target import check_kernel_supported, kernel_problems, load_spec
from tilecraft.target.checks import iter_stmts
from tilecraft.te import Var, const

SPEC = {
    "name": "checked", "api_version": 1, "version": "1",
    "memory": {"levels": [
        {"name": "DRAM", "size_bytes": None, "bandwidth_bytes_per_cycle": 8},
        {"name": "SRAM", "size_bytes": 4096, "bandwidth_bytes_per_cycle": 32}]},
    "compute": {"cores": 1, "frequency_hz": 1e9, "vector_bits": 128},
    "primitives": ["split"], "loop_kinds": ["serial", "vector"],
    "intrinsics": [{
        "name": "add4", "latency_cycles": 1, "throughput_per_cycle": 1,
        "compute": {
            "loops": [{"name": "i", "extent": 4, "kind": "spatial"}],
            "operands": [
                {"name": "A", "role": "src", "dtype": "float32", "shape": [4], "index": ["i"]},
                {"name": "C", "role": "dst", "dtype": "float32", "shape": [4], "index": ["i"]}],
            "semantics": "C[i] += A[i]"},
        "memory": {"moves": [
            {"operand": "A", "from_level": "DRAM", "to_level": "SRAM",
             "address": {"strides": [1]}},
            {"operand": "C", "from_level": "SRAM", "to_level": "DRAM",
             "address": {"strides": [1]}}]}}],
    "evaluation": "estimate", "capabilities": {"models_performance": True},
}

A = Buffer("A", (8,), DType.FLOAT32, level="DRAM")
C = Buffer("C", (8,), DType.FLOAT32, level="DRAM")
i = Var("i")


def region(buffer: Buffer, start: int = 0) -> Region:
    return Region(buffer, (const(start),), (4,))


def test_supported_kernel_passes_and_calls_run_their_semantics() -> None:
    spec = load_spec(SPEC)
    tile = Buffer("tile", (4,), DType.FLOAT32, level="SRAM")
    body = Seq((
        Allocate(tile, Seq((Copy(region(tile), region(A)),
                            IntrinsicCall("add4", (region(tile), region(C)))))),
        For(i, const(8), LoopKind.VECTOR,
            Store(C, (i,), BufferLoad(C, (i,)) * 2.0), lanes=4),
    ))
    kernel = Kernel("ok", (A, C), ("C",), body)
    check_kernel_supported(kernel, spec)  # no error
    assert [type(s).__name__ for s in iter_stmts(kernel.body)] == [
        "Seq", "Allocate", "Seq", "Copy", "IntrinsicCall", "For", "Store"]


def test_every_problem_is_listed() -> None:
    spec = load_spec(SPEC)
    far = Buffer("far", (4,), DType.FLOAT32, level="L2")
    j = Var("j")
    body = Seq((
        For(i, const(8), LoopKind.PARALLEL, Store(C, (i,), const(0.0))),
        IfThenElse(const(True), Allocate(far, Store(far, (const(0),), const(1.0))),
                   For(j, const(2), LoopKind.BOUND, Store(C, (j,), const(1.0)),
                       axis="threadIdx.x")),
        IntrinsicCall("add4", (region(A),)),
        IntrinsicCall("mma", (region(A), region(C))),
        MicroKernelCall("gemm", (region(A),)),
    ))
    with pytest.raises(CodegenError) as info:
        check_kernel_supported(Kernel("bad", (A, C), ("C",), body), spec)
    assert str(info.value).splitlines() == [
        "target checked cannot generate code for kernel bad:",
        "  - loop i is parallel, which this target cannot express (it expresses: serial, "
        "vector)",
        "  - buffer far is in memory level 'L2', which this target does not have (levels: DRAM, "
        "SRAM)",
        "  - loop j is bound, which this target cannot express (it expresses: serial, vector)",
        "  - call of intrinsic add4 passes 1 operands; it declares 2",
        "  - call of intrinsic mma, which this target does not declare (declared: add4)",
        "  - call of micro-kernel gemm, which this target does not declare (declared: none)",
        "change the schedule (or lowering) to use only what the target declares, or extend the "
        "target",
    ]


def test_parameters_outside_the_hierarchy() -> None:
    data = copy.deepcopy(SPEC)
    data["memory"]["levels"][0]["name"] = "HBM"
    data["intrinsics"] = []
    problems = kernel_problems(Kernel("k", (A,), ("A",), Store(A, (const(0),), const(1.0))),
                               ["serial"], load_spec(data).memory.names)
    assert problems == ["buffer A is in memory level 'DRAM', which this target does not have "
                        "(levels: HBM, SRAM)"]
