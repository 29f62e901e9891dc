"""Intrinsics as compute + memory abstractions (thesis Def. 3-4): the semantics notation is
parsed into te programs whose values match numpy; invalid declarations name the field."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import tilecraft as tc
from tilecraft.errors import InputError, PluginError, TargetError
from tilecraft.target import (
    ComputeAbstraction,
    IntrinsicDecl,
    MemoryAbstraction,
    MicroKernelDecl,
    OperandRole,
)
from tilecraft.te import AxisKind, ComputeOp, Reduce

RNG = np.random.default_rng(1234)


def loop(name: str, extent: int, kind: str = "spatial") -> dict[str, Any]:
    return {"name": name, "extent": extent, "kind": kind}


def operand(name: str, role: str, dtype: str, shape: list[int],
            index: list[str]) -> dict[str, Any]:
    return {"name": name, "role": role, "dtype": dtype, "shape": shape, "index": index}


def matmul(m: int, n: int, k: int, semantics: str | None = None,
           in_dtype: str = "int8", out_dtype: str = "int32") -> ComputeAbstraction:
    return ComputeAbstraction(
        loops=[loop("i1", m), loop("i2", n), loop("r1", k, "reduce")],
        operands=[operand("Src1", "src", in_dtype, [m, k], ["i1", "r1"]),
                  operand("Src2", "src", in_dtype, [k, n], ["r1", "i2"]),
                  operand("Dst", "dst", out_dtype, [m, n], ["i1", "i2"])],
        semantics=semantics or (f"Dst[i1, i2] += cast({out_dtype}, Src1[i1, r1]) * "
                                f"cast({out_dtype}, Src2[r1, i2])"))


def ints(shape: tuple[int, ...], dtype: Any = np.int8) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


# the te program ---------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "n", "k"), [(16, 16, 16), (7, 3, 5), (1, 1, 1), (1, 13, 2)])
def test_accumulating_matmul_matches_numpy(m: int, n: int, k: int) -> None:
    compute = matmul(m, n, k)
    program = compute.to_te()
    assert [t.name for t in program.sources] == ["Src1", "Src2"]
    assert program.accumulator is not None and program.accumulator.name == "Dst_in"
    assert program.output.name == "Dst" and program.output.shape == (m, n)
    a, b, c = ints((m, k)), ints((k, n)), ints((m, n), np.int32)
    got = tc.reference.run(program.output, Src1=a, Src2=b, Dst_in=c)
    expected = c + a.astype(np.int32) @ b.astype(np.int32)
    np.testing.assert_array_equal(got, expected)


def test_program_loops_are_the_intrinsic_loops() -> None:
    program = matmul(32, 8, 16).to_te()
    assert list(program.loops) == ["i1", "i2", "r1"]
    assert [v.extent for v in program.loops.values()] == [32, 8, 16]
    assert program.compute.axes == (program.loops["i1"], program.loops["i2"])
    assert program.compute.reduce_axes == (program.loops["r1"],)
    assert program.loops["r1"].kind is AxisKind.REDUCE
    assert program.compute.statement() == (
        "Dst_acc[i1, i2] = sum(int32(Src1[i1, r1]) * int32(Src2[r1, i2]), axis=[r1])")
    assert program.output.statement() == "Dst[i1, i2] = Dst_in[i1, i2] + Dst_acc[i1, i2]"
    assert sorted(t.name for t in program.graph().inputs) == ["Dst_in", "Src1", "Src2"]


def test_each_call_builds_a_fresh_program() -> None:
    compute = matmul(2, 2, 2)
    first, second = compute.to_te(), compute.to_te()
    assert first.output is not second.output
    assert first.output.statement() == second.output.statement()


def test_plain_assignment_and_float_functions() -> None:
    compute = ComputeAbstraction(
        loops=[loop("i", 5), loop("j", 3)],
        operands=[operand("X", "src", "float32", [5, 3], ["i", "j"]),
                  operand("Bias", "src", "float32", [3], ["j"]),
                  operand("Y", "dst", "float32", [5, 3], ["i", "j"])],
        semantics="Y[i, j] = select(i != 0, select((X[i, j] > 0.0) & ~(j > 5), "
                  "exp(X[i, j]) + Bias[j], max(X[i, j], -1.5) * 2), -X[i, j])")
    program = compute.to_te()
    assert program.accumulator is None and program.compute is program.output
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    bias = RNG.standard_normal(3).astype(np.float32)
    got = tc.reference.run(program.output, X=x, Bias=bias)
    expected = np.where(x > 0, np.exp(x) + bias, np.maximum(x, -1.5) * 2)
    expected[0] = -x[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_explicit_reductions_do_not_read_the_destination() -> None:
    for name, reduce in (("max", np.max), ("min", np.min), ("sum", np.sum)):
        compute = ComputeAbstraction(
            loops=[loop("i", 3), loop("r", 7, "reduce")],
            operands=[operand("X", "src", "float32", [3, 7], ["i", "r"]),
                      operand("Y", "dst", "float32", [3], ["i"])],
            semantics=f"Y[i] = {name}(X[i, r] * 2.0)")
        program = compute.to_te()
        assert program.accumulator is None and not compute.accumulates
        assert isinstance(program.compute.body, Reduce)
        x = RNG.standard_normal((3, 7)).astype(np.float32)
        np.testing.assert_allclose(tc.reference.run(program.output, X=x), reduce(x * 2, axis=1),
                                   rtol=1e-6)


def test_accumulate_without_reduce_loops_is_elementwise_fma() -> None:
    compute = ComputeAbstraction(
        loops=[loop("l", 16)],
        operands=[operand("A", "src", "float32", [16], ["l"]),
                  operand("B", "src", "float32", [16], ["l"]),
                  operand("C", "dst", "float32", [16], ["l"])],
        semantics="C[l] += A[l] * B[l]")
    program = compute.to_te()
    assert program.compute is program.output and not isinstance(program.output.body, Reduce)
    a, b, c = (RNG.standard_normal(16).astype(np.float32) for _ in range(3))
    np.testing.assert_allclose(tc.reference.run(program.output, A=a, B=b, C_in=c), c + a * b,
                               rtol=1e-6)


def test_affine_operand_indices() -> None:
    """A 1-D convolution window: the input index is i + r."""
    compute = ComputeAbstraction(
        loops=[loop("i", 6), loop("r", 3, "reduce")],
        operands=[operand("X", "src", "float32", [8], ["i + r"]),
                  operand("W", "src", "float32", [3], ["r"]),
                  operand("Y", "dst", "float32", [6], ["i"])],
        semantics="Y[i] += X[i + r] * W[r]")
    x, w = RNG.standard_normal(8).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    y = np.zeros(6, np.float32)
    compute.apply(x, w, y)
    np.testing.assert_allclose(y, np.correlate(x, w, mode="valid"), rtol=1e-5)
    assert compute.access_matrix()[2].tolist() == [[True, True], [False, True], [True, False]]


def test_apply_writes_the_destination_in_place_and_checks_arity() -> None:
    compute = matmul(3, 2, 5, in_dtype="float16", out_dtype="float32")
    a = RNG.standard_normal((3, 5)).astype(np.float16)
    b = RNG.standard_normal((5, 2)).astype(np.float16)
    c = RNG.standard_normal((3, 2)).astype(np.float32)
    expected = c + a.astype(np.float32) @ b.astype(np.float32)
    compute.apply(a, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-5)
    with pytest.raises(InputError, match=r"takes 3 operands \(Src1, Src2, Dst\), got 2"):
        compute.apply(a, b)
    with pytest.raises(InputError):
        compute.apply(a.T.copy(), b, c)  # wrong shape for Src1


def test_helpers() -> None:
    compute = matmul(4, 4, 4)
    assert [op.name for op in compute.sources] == ["Src1", "Src2"]
    assert compute.destination.role is OperandRole.DST
    assert compute.accumulates and compute.iterations == 64
    assert compute.operand("Src2").shape == (4, 4) and compute.loop("r1").extent == 4
    with pytest.raises(TargetError, match="unknown operand 'Src3'; the operands are Src1"):
        compute.operand("Src3")
    with pytest.raises(TargetError, match="unknown loop 'k'; the loops are i1, i2, r1"):
        compute.loop("k")


# invalid semantics ---------------------------------------------------------------------------


@pytest.mark.parametrize(("semantics", "message"), [
    ("Dst[i1, i2] += Src1[i1, r1] * Src2[r1, i2]",
     r"computes int8 values but Dst is int32; cast with cast\(int32, \.\.\.\)"),
    ("Dst[i1, i2] += cast(int32, Src1[i1, r1]) * cast(int32, Src3[r1, i2])",
     r"at 'Src3\[r1, i2\]': only source operands can be indexed \(sources: Src1, Src2\)"),
    ("Dst[i1, i2] += cast(int32, Src1[r1, i1]) * cast(int32, Src2[r1, i2])",
     r"operand Src1 is declared with index \[i1, r1\] but read as \[r1, i1\]"),
    ("Dst[i1, i2] += cast(int32, Src1[i1, r1])", "operand Src2 is declared but"),
    ("Dst[i1, i2] = cast(int32, Src1[i1, r1]) * cast(int32, Src2[r1, i2])",
     r"declares reduce loops \(r1\) but does not reduce"),
    ("Dst[i1, i2] += sum(cast(int32, Src1[i1, r1]) * cast(int32, Src2[r1, i2]))",
     r"'\+=' already sums over the reduce loops; drop the sum"),
    ("Dst[i1, r1] += cast(int32, Src1[i1, r1])", "destination index r1 is not a spatial loop"),
    ("Dst[i1] += cast(int32, Src1[i1, r1]) * cast(int32, Src2[r1, i2])",
     "must be indexed by every spatial loop exactly once"),
    ("Dst[i2, i1] += cast(int32, Src1[i1, r1]) * cast(int32, Src2[r1, i2])",
     r"operand Dst is declared with index \[i1, i2\] but written as \[i2, i1\]"),
    ("Out[i1, i2] += cast(int32, Src1[i1, r1]) * cast(int32, Src2[r1, i2])",
     "writes Out, but the dst operand is Dst"),
    ("Dst[i1, i2] *= cast(int32, Src1[i1, r1])", r"only '\+=' \(accumulate a sum\)"),
    ("Dst[i1, i2] += __import__('os')", "unknown function __import__"),
    ("Dst[i1, i2] += __import__('os').system('true')", "only plain function names can be called"),
    ("Dst[i1, i2] += Src1.T", "Attribute is not part of the notation"),
    ("Dst[i1, i2] += [x for x in Src1]", "ListComp is not part of the notation"),
    ("Dst[i1, i2] += cast(int32, Src1[i1, r1]) * k", "k is neither a declared loop nor"),
    ("Dst[i1, i2] += cast(int64, Src1[i1, r1])", "cast's first argument must be a dtype"),
    ("Dst[i1, i2] += exp(Src1[i1, r1], 2)", "exp takes 1 argument"),
    ("Dst[i1, i2] += Src1", "operand Src1 must be indexed"),
    ("Dst[i1, i2] += int32", "the dtype int32 is only allowed as cast's first argument"),
    ("Dst[i1, i2] += 'text'", "only numbers and True/False are constants"),
    ("Dst[i1, i2] +=", "does not parse"),
    ("Dst[i1, i2] += 1\nDst[i1, i2] += 2", "must be exactly one statement"),
    ("import os", "must be 'Dst"),
    ("Dst[i1 + 1, i2] += 1", "must be a plain spatial loop name"),
    ("Dst[i1, i2] += exp(cast(int32, Src1[i1, r1]))", "exp.* needs a float operand"),
    ("Dst[i1, i2] += 1 ** 2", "operator Pow is not supported"),
    ("Dst[i1, i2] += select(i1 < 2 and i2 < 2, 1, 0)", "write conditions with & | ~ as in te"),
    ("Dst[i1, i2] += select(not i1 < 2, 1, 0)", "write ~cond, not 'not cond'"),
    ("Dst[i1, i2] += 1 if i1 < 2 else 0", r"write select\(cond, a, b\)"),
    ("Dst[i1, i2] += select(0 <= i1 < 2, 1, 0) * cast(int32, Src1[i1, r1]) * "
     "cast(int32, Src2[r1, i2]) + select(i1, 1, 0)", "select's condition i1 must be"),
])
def test_invalid_semantics_names_the_problem(semantics: str, message: str) -> None:
    with pytest.raises(PluginError) as info:
        matmul(4, 4, 4, semantics)
    text = str(info.value)
    assert text.startswith("invalid ComputeAbstraction:\n  semantics: ")
    assert re.search(message, text), text


def test_shape_must_cover_the_loop_extents() -> None:
    with pytest.raises(PluginError, match=r"an operand's shape does not match the loop extents: "
                                          r"index 1 of Src1\[i1, r1\] \(r1\) ranges over "
                                          r"\[0, 4\], but dimension 1 of Src1 has extent 3"):
        ComputeAbstraction(
            loops=[loop("i1", 2), loop("r1", 5, "reduce")],
            operands=[operand("Src1", "src", "float32", [2, 3], ["i1", "r1"]),
                      operand("Dst", "dst", "float32", [2], ["i1"])],
            semantics="Dst[i1] += Src1[i1, r1]")
    with pytest.raises(PluginError, match=r"dimension 1 of operand Src1 has extent 6, but its "
                                          r"index r1 only reaches 4; declare the shape \[2, 5\]"):
        ComputeAbstraction(
            loops=[loop("i1", 2), loop("r1", 5, "reduce")],
            operands=[operand("Src1", "src", "float32", [2, 6], ["i1", "r1"]),
                      operand("Dst", "dst", "float32", [2], ["i1"])],
            semantics="Dst[i1] += Src1[i1, r1]")
    with pytest.raises(PluginError, match=r"destination Dst has shape \(3,\) but its loops i1 "
                                          r"have extents \(2,\)"):
        ComputeAbstraction(
            loops=[loop("i1", 2)],
            operands=[operand("Src1", "src", "float32", [2], ["i1"]),
                      operand("Dst", "dst", "float32", [3], ["i1"])],
            semantics="Dst[i1] = Src1[i1]")


@pytest.mark.parametrize(("changes", "message"), [
    ({"loops": [loop("i1", 4), loop("i1", 4)]}, "loop 'i1' is declared twice"),
    ({"loops": [loop("i1", 0)]}, r"loops\[0\] \(i1\)\.extent: Input should be greater"),
    ({"loops": [loop("exp", 4)]}, "loop name 'exp' is reserved"),
    ({"loops": [loop("i1", 4, "sideways")]}, r"kind: Input should be 'spatial' or 'reduce'"),
    ({"operands": [operand("i1", "dst", "int32", [4], ["i1"])]},
     "'i1' names both a loop and an operand"),
    ({"operands": [operand("D", "dst", "int32", [4, 1], ["i1"])]},
     r"operand D has 2 dimensions \[4, 1\] but 1 index expressions"),
    ({"operands": [operand("D", "out", "int32", [4], ["i1"])]},
     r"role: Input should be 'src' or 'dst'"),
    ({"operands": [operand("D", "dst", "bool", [4], ["i1"])]}, "an operand cannot be bool"),
    ({"operands": [operand("D", "dst", "int64", [4], ["i1"])]}, r"dtype: Input should be"),
    ({"operands": [operand("Dst_in", "src", "int32", [4], ["i1"]),
                   operand("Dst", "dst", "int32", [4], ["i1"])],
      "semantics": "Dst[i1] = Dst_in[i1]"}, "operand name Dst_in is reserved"),
    ({"operands": [operand("A", "src", "int32", [4], ["i1"])]},
     "exactly one operand of role dst, got 0"),
])
def test_invalid_loops_and_operands(changes: dict[str, Any], message: str) -> None:
    data = {"loops": [loop("i1", 4)], "operands": [operand("D", "dst", "int32", [4], ["i1"])],
            "semantics": "D[i1] = 1"} | changes
    with pytest.raises(PluginError, match=message):
        ComputeAbstraction(**data)


# memory abstraction and the declaration ---------------------------------------------------


def moves(*entries: tuple[str, str, str, list[Any]]) -> dict[str, Any]:
    return {"moves": [{"operand": name, "from_level": src, "to_level": dst,
                       "address": {"strides": strides}} for name, src, dst, strides in entries]}


def intrinsic(memory: dict[str, Any]) -> IntrinsicDecl:
    return IntrinsicDecl(name="mma", compute=matmul(16, 16, 16), memory=memory,
                         latency_cycles=8, throughput_per_cycle=0.5)


def test_memory_abstraction_of_eq_5_4() -> None:
    decl = intrinsic({"moves": [
        {"operand": "Src1", "from_level": "shared", "to_level": "fragment",
         "instruction": "load_matrix_sync",
         "address": {"base": "addr_a", "strides": ["stride_a", 1], "alignment_bytes": 32}},
        {"operand": "Src2", "from_level": "shared", "to_level": "fragment",
         "instruction": "load_matrix_sync", "address": {"base": "addr_b",
                                                        "strides": ["stride_b", 1]}},
        {"operand": "Dst", "from_level": "fragment", "to_level": "global",
         "instruction": "store_matrix_sync", "address": {"base": "addr_c",
                                                         "strides": ["stride_c", 1]}}]})
    assert decl.memory.levels == ("shared", "fragment", "global")
    (load_a,) = decl.memory.moves_of("Src1")
    assert load_a.address.strides == ("stride_a", 1) and load_a.address.alignment_bytes == 32
    assert decl.memory.moves_of("Dst")[0].instruction == "store_matrix_sync"
    a, b = ints((16, 16)), ints((16, 16))
    c = np.zeros((16, 16), np.int32)
    decl.reference(a, b, c, layout="row_major")  # Kernel IR call attrs are ignored
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.parametrize(("memory", "message"), [
    (moves(("Src1", "L1", "reg", ["s", 1]), ("Src2", "L1", "reg", ["s", 1])),
     "operand Dst has no memory move"),
    (moves(("Src1", "L1", "reg", ["s", 1]), ("Src2", "L1", "reg", ["s", 1]),
           ("Dst", "reg", "L1", ["s", 1]), ("Src9", "L1", "reg", [1])),
     r"moves\[3\] names operand 'Src9', which the compute abstraction does not declare"),
    (moves(("Src1", "L1", "reg", [1]), ("Src2", "L1", "reg", ["s", 1]),
           ("Dst", "reg", "L1", ["s", 1])),
     r"moves\[0\]: operand Src1 has 2 dimensions but its address has 1 strides"),
    (moves(("Src1", "L1", "L1", ["s", 1])), "moves from L1 to itself"),
    (moves(("Src1", "L1", "reg", ["s", -1])), "stride -1 is negative"),
    (moves(("Src1", "L1", "reg", ["2s", 1])), "stride parameter '2s' is not a valid name"),
    (moves(("Src1", "L1", "reg", ["s", True])), r"strides\[1\]"),
    ({"moves": []}, "moves: .*at least 1 item"),
])
def test_invalid_memory_abstractions(memory: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        intrinsic(memory)


def test_declaration_figures_are_checked() -> None:
    memory = moves(("Src1", "L1", "reg", ["s", 1]), ("Src2", "L1", "reg", ["s", 1]),
                   ("Dst", "reg", "L1", ["s", 1]))
    with pytest.raises(PluginError, match="throughput_per_cycle: Input should be greater than 0"):
        IntrinsicDecl(name="x", compute=matmul(2, 2, 2), memory=memory, latency_cycles=1,
                      throughput_per_cycle=0)
    with pytest.raises(PluginError, match="latency_cycles: Field required"):
        IntrinsicDecl(name="x", compute=matmul(2, 2, 2), memory=memory, throughput_per_cycle=1)
    assert isinstance(MemoryAbstraction(**memory), MemoryAbstraction)


# micro-kernels ------------------------------------------------------------------------------


def gemm_micro_kernel(**changes: Any) -> MicroKernelDecl:
    data = {
        "name": "gemm_tile",
        "loops": [loop("m", "MI"), loop("n", "NI"), loop("k", "KI", "reduce")],  # type: ignore
        "operands": [operand("A", "src", "float32", ["MI", "KI"], ["m", "k"]),  # type: ignore
                     operand("B", "src", "float32", ["KI", "NI"], ["k", "n"]),  # type: ignore
                     operand("C", "dst", "float32", ["MI", "NI"], ["m", "n"])],  # type: ignore
        "semantics": "C[m, n] += A[m, k] * B[k, n]",
        "template": "templates/gemm_tile.ll.jinja",
        "parameters": {"MI": {"default": 4, "maximum": 14},
                       "NI": {"default": 16, "choices": [16, 32, 48]},
                       "KI": {"default": 1, "description": "k steps per call"}},
    } | changes
    return MicroKernelDecl(**data)


def test_micro_kernel_instantiation_matches_numpy() -> None:
    kernel = gemm_micro_kernel()
    assert kernel.resolve() == {"MI": 4, "NI": 16, "KI": 1}
    compute = kernel.instantiate(MI=5, NI=32, KI=7)
    assert [op.shape for op in compute.operands] == [(5, 7), (7, 32), (5, 32)]
    a = RNG.standard_normal((5, 7)).astype(np.float32)
    b = RNG.standard_normal((7, 32)).astype(np.float32)
    c = RNG.standard_normal((5, 32)).astype(np.float32)
    expected = c + a @ b
    kernel.reference(a, b, c, MI=5, NI=32, KI=7)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    assert kernel.to_te(MI=2).output.shape == (2, 16)


@pytest.mark.parametrize(("values", "message"), [
    ({"MI": 15}, "parameter MI = 15 is above the maximum 14"),
    ({"NI": 20}, r"parameter NI = 20 is not one of the choices \[16, 32, 48\]"),
    ({"KI": 0}, "parameter KI = 0 is below the minimum 1"),
    ({"XI": 2}, r"has no parameter 'XI' \(parameters: MI, NI, KI\)"),
])
def test_micro_kernel_parameter_values_are_checked(values: dict[str, int], message: str) -> None:
    with pytest.raises(TargetError, match=message):
        gemm_micro_kernel().instantiate(**values)


@pytest.mark.parametrize(("changes", "message"), [
    ({"parameters": {"MI": {"default": 4}, "NI": {"default": 16}}},
     r"extent 'KI' names no declared parameter \(parameters: MI, NI\)"),
    ({"parameters": {"MI": {"default": 20, "maximum": 14}, "NI": {"default": 16},
                     "KI": {"default": 1}}}, "default 20 is above the maximum 14"),
    ({"template": "/abs/path.jinja"}, "must be a relative path inside the plugin package"),
    ({"template": "../escape.jinja"}, "must be a relative path"),
    ({"semantics": "C[m, n] += A[m, k]"},
     r"with the default parameters \(MI=4, NI=16, KI=1\): semantics: operand B is declared"),
])
def test_invalid_micro_kernels(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        gemm_micro_kernel(**changes)


def test_kernel_ir_interpreter_runs_declared_intrinsics() -> None:
    """Target.emulate gives the interpreter every intrinsic's semantics (spec helper)."""
    from tilecraft.kernel_ir import Buffer, IntrinsicCall, Kernel, Region
    from tilecraft.te import const

    spec_module = pytest.importorskip("tilecraft.kernel_ir.interpreter")
    decl = intrinsic(moves(("Src1", "L1", "reg", ["s", 1]), ("Src2", "L1", "reg", ["s", 1]),
                           ("Dst", "reg", "L1", ["s", 1])))
    a = Buffer("a", (16, 16), tc.DType.INT8)
    b = Buffer("b", (16, 16), tc.DType.INT8)
    c = Buffer("c", (16, 16), tc.DType.INT32)
    zero = (const(0), const(0))
    call = IntrinsicCall("mma", (Region(a, zero, (16, 16)), Region(b, zero, (16, 16)),
                                 Region(c, zero, (16, 16))))
    kernel = Kernel("k", (a, b, c), ("c",), call)
    arrays = {"a": ints((16, 16)), "b": ints((16, 16)), "c": ints((16, 16), np.int32)}
    expected = arrays["c"] + arrays["a"].astype(np.int32) @ arrays["b"].astype(np.int32)
    spec_module.run_kernel(kernel, arrays, {"mma": decl.reference})
    np.testing.assert_array_equal(arrays["c"], expected)
    assert isinstance(decl.compute.to_te().compute.op, ComputeOp)


def test_chained_comparison_masks_lanes() -> None:
    compute = ComputeAbstraction(
        loops=[loop("i", 5), loop("r", 2, "reduce")],
        operands=[operand("A", "src", "float32", [5, 2], ["i", "r"]),
                  operand("C", "dst", "float32", [5], ["i"])],
        semantics="C[i] += select(1 <= i < 3, A[i, r], 0.0)")
    a = RNG.standard_normal((5, 2)).astype(np.float32)
    c = np.ones(5, np.float32)
    compute.apply(a, c)
    expected = np.ones(5, np.float32)
    expected[1:3] += a[1:3].sum(axis=1)
    np.testing.assert_allclose(c, expected, rtol=1e-6)
