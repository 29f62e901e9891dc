"""int8 computes tensorized onto ``arm_dot`` / ``arm_dot_acc`` through the core's AMOS
mappings (generated and verified by the core, forced with ``tensorize=``), lowered one
work-item per output element, emitted as OpenCL C with the extension guards and the polyfill,
run on this machine's OpenCL device and compared EXACTLY with the reference (int32)."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.graph import Graph
from tilecraft.kernel_ir import Allocate, Buffer, For, IntrinsicCall, Kernel, LoopKind, Region
from tilecraft.reference.interpreter import run as run_reference
from tilecraft.target.registry import get_target
from tilecraft.te import Var, const

needs_device = pytest.mark.skipif(not get_target("mali").available().build,
                                  reason="no OpenCL device (pip install pocl-binary-distribution)")


def _compile_and_compare(output: te.Tensor, intrinsic: str, seed: int = 0,
                         low: int = -128, high: int = 128) -> tc.Executable:
    """Compile ``output`` for mali with its compute forced onto ``intrinsic``, run it on
    random int8 inputs in ``[low, high)`` and assert it equals the reference exactly."""
    graph = Graph.from_outputs([output])
    executable = tc.compile(graph, target="mali", tensorize={output.name: intrinsic})
    rng = np.random.default_rng(seed)
    inputs = {t.name: rng.integers(low, high, t.shape).astype(np.int8) for t in graph.inputs}
    result = executable(**inputs)
    expected = run_reference(graph, inputs)
    assert result.dtype == np.int32
    np.testing.assert_array_equal(result, expected)
    mapped = executable.kernels[-1]
    assert mapped.attrs["intrinsic"] == intrinsic
    assert mapped.attrs["strategy"] == "mali_dot"
    return executable


def _int8_matmul(m: int, n: int, k: int) -> te.Tensor:
    return ops.matmul(te.placeholder((m, k), "int8", name="A"),
                      te.placeholder((k, n), "int8", name="B"), out_dtype="int32", name="C")


@needs_device
@pytest.mark.parametrize("intrinsic", ["arm_dot_acc", "arm_dot"])
@pytest.mark.parametrize(("m", "n", "k"), [(17, 13, 31), (2, 3, 5), (1, 1, 4), (67, 45, 33),
                                           (8, 64, 16)])
def test_int8_gemm_through_arm_dot_is_exact(intrinsic: str, m: int, n: int, k: int) -> None:
    _compile_and_compare(_int8_matmul(m, n, k), intrinsic, seed=m * n + k)


@needs_device
def test_extreme_int8_values_accumulate_exactly_in_int32() -> None:
    # -128 * -128 = 16384 per product; 261 of them overflow int16 many times over
    _compile_and_compare(_int8_matmul(3, 5, 261), "arm_dot_acc", low=-128, high=-127)
    _compile_and_compare(_int8_matmul(3, 5, 261), "arm_dot_acc", low=126, high=128)


@needs_device
@pytest.mark.parametrize(("shape", "weight", "padding", "stride"), [
    ((1, 5, 9, 7), (6, 5, 3, 3), 1, 1),
    ((1, 3, 11, 6), (4, 3, 2, 3), 0, 2),
    ((1, 8, 5, 5), (3, 8, 1, 1), 0, 1),
])
def test_int8_conv2d_through_arm_dot_acc_is_exact(shape: tuple, weight: tuple, padding: int,
                                                  stride: int) -> None:
    conv = ops.conv2d(te.placeholder(shape, "int8", name="x"),
                      te.placeholder(weight, "int8", name="w"), stride=stride,
                      padding=padding, out_dtype="int32", name="conv")
    _compile_and_compare(conv, "arm_dot_acc", seed=sum(shape))


@needs_device
@pytest.mark.parametrize(("channels", "size", "kernel"), [(6, (9, 7), 3), (5, (4, 13), 5)])
def test_int8_depthwise_conv_through_arm_dot_is_exact(channels: int, size: tuple,
                                                      kernel: int) -> None:
    depthwise = ops.conv2d(te.placeholder((1, channels, *size), "int8", name="x"),
                           te.placeholder((channels, 1, kernel, kernel), "int8", name="w"),
                           padding=kernel // 2, groups=channels, out_dtype="int32", name="dw")
    _compile_and_compare(depthwise, "arm_dot_acc", seed=channels)


def test_the_opencl_calls_arm_dot_behind_the_extension_guards_with_a_polyfill() -> None:
    target = get_target("mali")
    executable = tc.compile(Graph.from_outputs([_int8_matmul(5, 3, 7)]), target="mali",
                            tensorize={"C": "arm_dot_acc"})
    text = executable.sources["C_arm_dot_acc"].text
    assert "#if defined(cl_arm_integer_dot_product_int8)" in text
    assert "#pragma OPENCL EXTENSION cl_arm_integer_dot_product_int8 : enable" in text
    assert "#if defined(cl_arm_integer_dot_product_accumulate_int8)" in text
    assert "#pragma OPENCL EXTENSION cl_arm_integer_dot_product_accumulate_int8 : enable" in text
    assert "inline int arm_dot(char4 a, char4 b)" in text          # the polyfills
    assert "inline int arm_dot_acc(char4 a, char4 b, int c)" in text
    assert "= arm_dot_acc(vload4(0, " in text
    # kernels that call neither carry no declarations
    plain = tc.compile(Graph.from_outputs([ops.relu(te.placeholder((4,), name="x"))]),
                       target="mali")
    assert all("arm_dot" not in target.codegen(k).text for k in plain.kernels)


def test_the_mapped_kernel_binds_work_items_and_keeps_operands_in_registers() -> None:
    executable = tc.compile(Graph.from_outputs([_int8_matmul(9, 70, 12)]), target="mali",
                            tensorize={"C": "arm_dot"})
    kernel = executable.kernels[-1]
    assert kernel.launch.block == (64,) and kernel.launch.grid == (10,)   # 630 outputs
    levels = {s.buffer.name: s.buffer.level for s in _allocations(kernel)}
    assert set(levels.values()) == {"private"}


def _allocations(kernel: Kernel) -> list[Allocate]:
    from tilecraft.kernel_ir.visitor import walk_stmts

    return [s for s in walk_stmts(kernel.body) if isinstance(s, Allocate)]


def test_calls_the_generator_cannot_express_are_refused_by_name() -> None:
    target = get_target("mali")
    a = Buffer("a", (4,), DType.INT32, level="global")
    out = Buffer("out", (1,), DType.INT32, level="global")
    t = Var("t")
    wrong = Kernel("bad_dot", (a, out), ("out",), For(t, const(1), LoopKind.BOUND, IntrinsicCall(
        "arm_dot", (Region(a, (const(0),), (4,)), Region(a, (const(0),), (4,)),
                    Region(out, (const(0),), (1,)))), axis="local_id.x"))
    with pytest.raises(CodegenError, match="kernel bad_dot: .*arm_dot operand a .*int32"):
        target.codegen(wrong)
    other = Kernel("bad_call", (a, out), ("out",), For(t, const(1), LoopKind.BOUND,
                                                      IntrinsicCall("vpdpbusd", ()),
                                                      axis="local_id.x"))
    with pytest.raises(CodegenError, match="kernel bad_call: .*vpdpbusd"):
        target.codegen(other)
