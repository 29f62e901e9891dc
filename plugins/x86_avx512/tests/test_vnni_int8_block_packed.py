"""int8 contractions with B packed inside the main kernel (one kernel, parallel over blocks of
panels of B, each packing its own panels): exact against the reference, natively and in the
Kernel IR interpreter, on awkward shapes; the default rule; the fallbacks."""

import numpy as np
import pytest
from cpu_features import VNNI, needs
from template_forcing import ForcedTarget
from tilecraft_x86_avx512.blocking.dot_product import lower_dot_product_contraction
from tilecraft_x86_avx512.blocking.dot_product_packing import pack_b_panel
from tilecraft_x86_avx512.blocking.register_tiles import Blocking
from tilecraft_x86_avx512.gemm_template import grouped_block_panels, grouped_default_config
from tilecraft_x86_avx512.microkernels import VNNI_ROW_SUMS_S8, VNNI_S8U8, VNNI_U8S8
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import as_dot_product_contraction
from tilecraft.reference import run
from tilecraft.te.expr import Var


def _data(tensor, rng):
    if tensor.dtype is DType.UINT8:
        return rng.integers(0, 256, tensor.shape).astype(np.uint8)
    return rng.integers(-128, 128, tensor.shape).astype(np.int8)


def _compile_exact(program, config, rng, threads=2):
    graph = Graph.from_outputs([program])
    exe = tc.compile(graph, target=ForcedTarget(config, "C", threads))
    inputs = {t.name: _data(t, rng) for t in graph.inputs}
    np.testing.assert_array_equal(exe(**inputs), run(graph, inputs))
    return exe


def _schedules(exe):
    return [kernel.attrs.get("schedule", "") for kernel in exe.kernels]


@pytest.mark.parametrize("m, n, k, a, b, config", [
    (37, 41, 64, "int8", "int8", {"NC": 1}),                    # s8 x s8: B shifted
    (13, 101, 36, "int8", "int8", {"NC": 3, "MI": 4, "NR": 32, "MC": 8}),  # last block short
    (1, 33, 8, "uint8", "uint8", {"NC": 1}),                    # one row, u8 x u8
    (31, 70, 12, "uint8", "int8", {"NC": 2, "KC": 4, "MI": 3, "NR": 16, "MC": 9}),  # 3 slices
    (53, 1, 20, "uint8", "int8", {"NC": 1}),                    # one column
    (97, 131, 44, "int8", "int8", {"NC": 2, "MI": 5, "NR": 48, "MC": 25}),  # primes
])
@needs(VNNI)  # runs VNNI micro-kernels natively
def test_block_packed_int8_gemm_is_exact(m, n, k, a, b, config):
    rng = np.random.default_rng(m * n + k)
    A = te.placeholder((m, k), a, name="A")
    B = te.placeholder((k, n), b, name="B")
    exe = _compile_exact(ops.matmul(A, B, out_dtype="int32", name="C"), config, rng)
    assert len(exe.kernels) == 1 and "pack B block" in _schedules(exe)[0]


@needs(VNNI)  # runs VNNI micro-kernels natively
def test_k_not_a_multiple_of_the_group_falls_back_to_the_pack_kernel():
    """k = 7: A cannot be read in place, so it is packed (shifted for s8 x s8) and B is packed
    by its own kernel, NC notwithstanding; still exact."""
    rng = np.random.default_rng(7)
    A = te.placeholder((29, 7), "int8", name="A")
    B = te.placeholder((7, 67), "int8", name="B")
    exe = _compile_exact(ops.matmul(A, B, out_dtype="int32", name="C"), {"NC": 2}, rng)
    assert len(exe.kernels) == 2 and not any("pack B block" in s for s in _schedules(exe))


@needs(VNNI)  # runs VNNI micro-kernels natively
@pytest.mark.parametrize("b_shape", [(3, 24, 50), (1, 24, 50)], ids=["batched", "broadcast"])
def test_block_packed_batch_matmul_is_exact(b_shape):
    rng = np.random.default_rng(3)
    A = te.placeholder((3, 23, 24), "int8", name="A")
    B = te.placeholder(b_shape, "int8", name="B")
    exe = _compile_exact(ops.batch_matmul(A, B, out_dtype="int32", name="C"),
                         {"NC": 2, "MI": 4, "NR": 16, "MC": 8}, rng)
    assert "pack B block" in _schedules(exe)[-1]


@needs(VNNI)  # runs VNNI micro-kernels natively
def test_transposed_b_contiguous_in_k_is_exact():
    """B read as W[n, k] (dense): the panel copy moves 4 consecutive k at a time."""
    rng = np.random.default_rng(5)
    x = te.placeholder((19, 40), "uint8", name="x")
    w = te.placeholder((45, 40), "int8", name="w")
    exe = _compile_exact(ops.dense(x, w, out_dtype="int32", name="C"), {"NC": 2}, rng,
                         threads=1)
    assert "pack B block" in _schedules(exe)[-1]


def test_default_rule_packs_b_in_the_main_kernel_for_large_gemms():
    rng = np.random.default_rng(1)
    A = te.placeholder((260, 256), "int8", name="A")
    B = te.placeholder((256, 256), "int8", name="B")
    dot = as_dot_product_contraction(ops.matmul(A, B, out_dtype="int32"))
    config = grouped_default_config(dot, l2_bytes=1 << 20, threads=2)
    assert config["NC"] == 2   # 4 panels of 64 in 2 blocks, one per thread
    graph = Graph.from_outputs([ops.matmul(A, B, out_dtype="int32", name="C")])
    exe = tc.compile(graph, target=X86Avx512Target(threads=2))
    inputs = {t.name: _data(t, rng) for t in graph.inputs}
    np.testing.assert_array_equal(exe(**inputs), run(graph, inputs))
    assert len(exe.kernels) == 1


def test_default_rule_keeps_the_pack_kernel_where_blocks_do_not_split_evenly():
    def panels(n, nr, threads=2, a="int8", b="int8", k=512):
        dot = as_dot_product_contraction(ops.matmul(te.placeholder((512, k), a, name="A"),
                                                    te.placeholder((k, n), b, name="B"),
                                                    out_dtype=None if a == "bfloat16" else "int32"))
        return grouped_block_panels(dot, nr, k, 1 << 20, threads)
    assert panels(100, 48) == 0            # 3 panels over 2 threads
    assert panels(100, 48, threads=1) == 3
    assert panels(512, 64) == 4            # 8 panels: 2 blocks
    assert panels(2048, 64, k=2048) == 4   # a block's panels within half of L2
    assert panels(512, 64, a="bfloat16", b="bfloat16") == 0   # int8 only
    assert panels(512, 64, k=510) == 0     # A not read in place


def test_block_packed_kernel_in_the_interpreter():
    """The Kernel IR itself (no native code): s8 x s8 with B shifted, row sums of A, a ragged
    last strip, panel and block, two k slices."""
    A = te.placeholder((11, 24), "int8", name="A")
    B = te.placeholder((24, 37), "int8", name="B")
    dot = as_dot_product_contraction(ops.matmul(A, B, name="C"))
    kernels = lower_dot_product_contraction(dot, VNNI_S8U8.name, Blocking(mi=3, nr=16, kc=12, mc=6),
                                            LoweringOptions(vector_lanes=16), packed_a="int8",
                                            packed_b="uint8",
                                            row_sums_micro_kernel=VNNI_ROW_SUMS_S8.name,
                                            panels_per_block=2)
    assert [k.name for k in kernels] == ["C"]
    rng = np.random.default_rng(11)
    a, b = _data(A, rng), _data(B, rng)
    semantics = {d.name: d.reference for d in (VNNI_S8U8, VNNI_U8S8, VNNI_ROW_SUMS_S8)}
    out = run_kernels(kernels, {"A": a, "B": b}, semantics=semantics)
    expected = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    np.testing.assert_array_equal(out["C"].reshape(11, 37), expected)


def test_pack_b_panel_rejects_several_n_axes():
    x = te.placeholder((1, 8, 6, 6), "uint8", name="x")
    w = te.placeholder((16, 8, 3, 3), "int8", name="w")
    dot = as_dot_product_contraction(ops.conv2d(x, w, out_dtype="int32", name="C"))
    assert dot is not None and len(dot.contraction.n_axes) > 1
    from tilecraft.kernel_ir.nodes import Buffer
    local = Buffer("C_bblock", (1, 18, 16, 4), DType.UINT8)
    with pytest.raises(LoweringError, match="one n axis.*pack_b_kernel"):
        pack_b_panel(dot, 16, 72, LoweringOptions(), DType.INT8, local, Var("jr"), Var("jr"),
                     None)
