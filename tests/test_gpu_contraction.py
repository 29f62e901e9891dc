"""The GPU tiled-contraction template (core/schedule/strategies/gpu_contraction.py) on the
scaffolded GPU spec (warps of 32, 1024 threads per block, a shared level, no asynchronous
copies) and the same spec with 16-byte asynchronous copies: every kernel is verified against
its spec and interpreted against the numpy reference on awkward shapes (primes, size 1, tiles
that do not divide), with plain loads (one stage) and a double-buffered cp.async pipeline;
the limits are errors naming the compute, the limit and the value; every sampled point of the
template space gives a correct kernel."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from tilecraft import ops, te
from tilecraft.errors import LoweringError
from tilecraft.kernel_ir import Barrier, For, LoopKind, walk_stmts
from tilecraft.kernel_ir.concurrency import AsyncCopy, Pipeline
from tilecraft.kernel_ir.interpreter import run_kernel
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower import LoweringOptions
from tilecraft.reference.evaluator import evaluate
from tilecraft.scaffold import render_target_package
from tilecraft.schedule.strategies.gpu_contraction import (
    contraction_template_space,
    lower_tiled_contraction,
    tiled_contraction,
)
from tilecraft.target.spec import TargetSpec


@cache
def _gpu_spec(async_copy_bytes: int | None = None,
              max_registers_per_thread: int | None = None) -> TargetSpec:
    directory = Path(tempfile.mkdtemp(prefix="tilecraft-scaffold-gpu-"))
    render_target_package("toy_gpu", directory, "gpu")
    spec = TargetSpec.from_yaml(directory / "toy_gpu" / "tilecraft_toy_gpu" / "spec.yaml")
    threads = spec.threads.model_copy(update={
        "async_copy_bytes": async_copy_bytes,
        "max_registers_per_thread": max_registers_per_thread
        or spec.threads.max_registers_per_thread})
    return spec.model_copy(update={"threads": threads})


def _options(async_copy_bytes: int | None = None,
             max_registers_per_thread: int | None = None) -> LoweringOptions:
    return LoweringOptions.from_spec(_gpu_spec(async_copy_bytes, max_registers_per_thread))


def _check(tensor: te.Tensor, config: dict | None, options: LoweringOptions,
           seed: int = 0) -> None:
    kernel = lower_tiled_contraction(tensor, options, config)
    assert kernel is not None
    verify_kernel(kernel, options.spec)
    rng = np.random.default_rng(seed)
    env = {t: rng.standard_normal(t.shape).astype(t.dtype.numpy) for t in tensor.inputs}
    arrays = {t.name: array for t, array in env.items()}
    arrays[tensor.name] = np.full(tensor.shape, np.nan, tensor.dtype.numpy)
    run_kernel(kernel, arrays)
    expected = evaluate(tensor, env).astype(np.float32)
    tolerance = 1e-2 if tensor.dtype.bytes == 2 else 1e-4
    np.testing.assert_allclose(arrays[tensor.name].astype(np.float32), expected,
                               rtol=tolerance, atol=tolerance)


def _matmul(m: int, n: int, k: int, dtype: str = "float32") -> te.Tensor:
    return ops.matmul(te.placeholder((m, k), dtype, name="A"),
                      te.placeholder((k, n), dtype, name="B"), name="C")


SMALL = {"BM": 4, "BN": 8, "BK": 4, "TM": 2, "TN": 2}


@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("m", "n", "k"), [(2, 3, 5), (17, 13, 11), (1, 9, 7), (8, 8, 8)])
def test_matmul_matches_the_reference(m, n, k, dtype, stages) -> None:
    _check(_matmul(m, n, k, dtype), {**SMALL, "stages": stages}, _options(16))


@pytest.mark.parametrize("stages", [1, 2])
def test_operators_as_contractions_match_the_reference(stages) -> None:
    config = {**SMALL, "stages": stages}
    options = _options(16)
    _check(ops.batch_matmul(te.placeholder((3, 5, 6), name="X"),
                            te.placeholder((3, 6, 7), name="Y"), name="Z"), config, options)
    _check(ops.dense(te.placeholder((5, 12), name="X"), te.placeholder((7, 12), name="W"),
                     name="D"), config, options)
    _check(ops.gemv(te.placeholder((11, 9), name="A"), te.placeholder((9,), name="v"),
                    name="G"), config, options)
    # conv2d NCHW, one image: weights are A (m = output channels), the padded input read
    # through (c, kh, kw) and (oh, ow) is B: implicit GEMM
    _check(ops.conv2d(te.placeholder((1, 3, 7, 7), name="X"),
                      te.placeholder((5, 3, 3, 3), name="W"), stride=2, padding=1, name="Y"),
           config, options)
    _check(ops.conv2d(te.placeholder((1, 6, 5, 5), name="X"),
                      te.placeholder((4, 6, 1, 1), name="W"), name="Y1"), config, options)


P = te.placeholder

#: every convolution as an implicit GEMM: (name, tensor, batch / m / n axis names)
CONVOLUTIONS = [
    ("nchw-batch2", lambda: ops.conv2d(P((2, 3, 7, 7), name="X"), P((5, 3, 3, 3), name="W"),
                                       stride=2, padding=1, name="Y"),
     ([], ["k"], ["n", "h", "w"])),
    ("nhwc-batch2", lambda: ops.conv2d(P((2, 7, 9, 3), name="X"), P((3, 3, 3, 5), name="W"),
                                       layout="NHWC", name="Y"),
     ([], ["n", "h", "w"], ["k"])),
    ("nchw-groups2", lambda: ops.conv2d(P((2, 4, 9, 9), name="X"), P((6, 2, 3, 3), name="W"),
                                        groups=2, name="Y"),
     (["k_group"], ["k_in"], ["n", "h", "w"])),
    ("nhwc-groups2-stride2", lambda: ops.conv2d(P((2, 9, 11, 4), name="X"),
                                                P((3, 3, 2, 6), name="W"), groups=2, stride=2,
                                                layout="NHWC", name="Y"),
     (["k_group"], ["n", "h", "w"], ["k_in"])),
    ("depthwise", lambda: ops.depthwise_conv2d(P((1, 3, 9, 9), name="X"),
                                               P((3, 1, 3, 3), name="W"), stride=2, padding=1,
                                               name="Y"),
     (["k"], [], ["h", "w"])),
    ("depthwise-mult2-dil2", lambda: ops.depthwise_conv2d(P((2, 4, 13, 11), name="X"),
                                                          P((4, 2, 3, 3), name="W"),
                                                          dilation=2, padding=2, name="Y"),
     (["k_group"], ["k_in"], ["n", "h", "w"])),
    ("depthwise-torch-layout", lambda: ops.depthwise_conv2d(P((1, 3, 7, 7), name="X"),
                                                            P((6, 1, 3, 3), name="W"), name="Y"),
     (["k_group"], ["k_in"], ["h", "w"])),
    ("conv1d-groups3-batch3", lambda: ops.conv1d(P((3, 6, 11), name="X"),
                                                 P((9, 2, 4), name="W"), groups=3, name="Y"),
     (["k_group"], ["k_in"], ["n", "w"])),
]


@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize(("build", "groups"), [case[1:] for case in CONVOLUTIONS],
                         ids=[case[0] for case in CONVOLUTIONS])
def test_every_convolution_is_an_implicit_gemm(build, groups, stages) -> None:
    """Batched NCHW / NHWC, grouped and depthwise convolutions: M and N are any sets of output
    axes (the store address comes from each output index), a group of a grouped convolution
    is a batch axis (``k = k_group * K/groups + k_in``)."""
    tensor = build()
    contraction = tiled_contraction(tensor)
    assert contraction is not None
    names = tuple([axis.name for axis in group] for group in
                  (contraction.batch_axes, contraction.m_axes, contraction.n_axes))
    assert names == groups
    _check(tensor, {**SMALL, "stages": stages}, _options(16))
    _check(tensor, None, _options(16))


def test_fp16_operands_accumulate_in_float32_into_a_float32_result() -> None:
    A = te.placeholder((9, 40), "float16", name="A")
    B = te.placeholder((40, 6), "float16", name="B")
    _check(ops.matmul(A, B, out_dtype="float32", name="C"), {**SMALL, "stages": 2},
           _options(16))


def test_the_default_double_buffers_with_128_bit_async_copies_where_provable() -> None:
    tensor = _matmul(64, 64, 64)
    kernel = lower_tiled_contraction(tensor, _options(16))
    assert kernel.attrs["tiles"]["stages"] == 2
    assert kernel.attrs["vector_lanes"] == {"A": 4, "B": 4}
    copies = [s for s in walk_stmts(kernel.body) if isinstance(s, AsyncCopy)]
    assert {c.src.extents[-1] for c in copies} == {4}
    [pipeline] = [s for s in walk_stmts(kernel.body) if isinstance(s, Pipeline)]
    assert pipeline.depth == 2 and len(pipeline.stages) == 2
    assert sum(isinstance(s, Barrier) for s in walk_stmts(kernel.body)) == 2
    _check(tensor, None, _options(16))


def test_without_async_copies_the_slices_are_plain_vector_loads_between_two_barriers() -> None:
    tensor = _matmul(32, 16, 24)
    kernel = lower_tiled_contraction(tensor, _options())
    assert kernel.attrs["tiles"]["stages"] == 1
    assert not [s for s in walk_stmts(kernel.body) if isinstance(s, (AsyncCopy, Pipeline))]
    vectors = [s for s in walk_stmts(kernel.body)
               if isinstance(s, For) and s.kind is LoopKind.VECTOR]
    assert vectors and all(loop.lanes == 4 for loop in vectors)
    _check(tensor, None, _options())


def test_a_ragged_contiguous_axis_loads_element_by_element() -> None:
    kernel = lower_tiled_contraction(_matmul(8, 8, 10), _options(16),
                                     {"BM": 8, "BN": 8, "BK": 4, "TM": 2, "TN": 2, "stages": 2})
    assert kernel.attrs["vector_lanes"] == {"A": 1, "B": 4}


def test_what_is_not_a_float_contraction_takes_the_strategy() -> None:
    options = _options(16)
    assert lower_tiled_contraction(_matmul(1, 1, 1), options) is None
    x = te.placeholder((4, 5), name="x")
    assert lower_tiled_contraction(ops.softmax(x), options) is None
    A8 = te.placeholder((4, 8), "int8", name="A8")
    B8 = te.placeholder((8, 4), "int8", name="B8")
    assert lower_tiled_contraction(ops.matmul(A8, B8, out_dtype="int32"), options) is None
    assert contraction_template_space(ops.softmax(x), options) is None
    no_threads = LoweringOptions()
    assert lower_tiled_contraction(_matmul(4, 4, 4), no_threads) is None


@pytest.mark.parametrize(("config", "words"), [
    ({"BM": 128, "BN": 128, "BK": 8, "TM": 2, "TN": 2}, ["4096 threads", "limit 1024"]),
    ({"BM": 128, "BN": 128, "BK": 128, "TM": 8, "TN": 8}, ["bytes of shared memory",
                                                            "limit"]),
    ({"BM": 64, "BN": 64, "BK": 8, "TM": 64, "TN": 16}, ["registers per thread",
                                                         "max_registers_per_thread"]),
    ({"BM": 8, "BN": 8, "BK": 8, "TM": 3, "TN": 2}, ["multiple of TM"]),
    ({"BM": 8, "BN": 8, "BK": 8, "TM": 2}, ["missing ['TN']"]),
    ({"BM": 8, "BN": 8, "BK": 8, "TM": 2, "TN": 2, "stages": 2}, ["async_copy_bytes"]),
])
def test_a_config_over_a_limit_is_an_error_naming_it(config, words) -> None:
    with pytest.raises(LoweringError) as caught:
        lower_tiled_contraction(_matmul(64, 64, 64), _options(None, 255), config)
    message = str(caught.value)
    assert message.startswith("compute C:")
    for word in words:
        assert word in message


def test_every_sampled_point_of_the_space_is_a_correct_kernel() -> None:
    tensor = _matmul(13, 19, 10)
    options = _options(16)
    space = contraction_template_space(tensor, options)
    assert space.space.size > 20
    rng = np.random.default_rng(3)
    for _ in range(5):
        config = space.decode(space.space.random_point(rng))
        _check(tensor, config, options)


def test_barriers_take_the_scope_the_hierarchy_names() -> None:
    """OpenCL names a work-group barrier ``work_group``: the template's barriers use the
    hierarchy's block scope, so the kernel verifies on such a spec; a hierarchy without block
    barriers gets no template (the strategy's kernel instead)."""
    spec = _gpu_spec()
    renamed = spec.model_copy(update={"threads": spec.threads.model_copy(
        update={"barrier_scopes": ("work_group", "subgroup")})})
    options = LoweringOptions.from_spec(renamed)
    tensor = ops.matmul(te.placeholder((17, 13), name="A"), te.placeholder((13, 11), name="B"))
    kernel = lower_tiled_contraction(tensor, options)
    verify_kernel(kernel, renamed)
    scopes = {stmt.scope for stmt in walk_stmts(kernel.body) if isinstance(stmt, Barrier)}
    assert scopes == {"work_group"}
    without = renamed.model_copy(update={"threads": renamed.threads.model_copy(
        update={"barrier_scopes": ()})})
    assert lower_tiled_contraction(tensor, LoweringOptions.from_spec(without)) is None


def test_default_tiles_come_from_the_cost_model_of_the_spec() -> None:
    """The default is the fitting tile the model finds fastest on the spec's chip: more cores
    make smaller blocks (the makespan of the most loaded core), a register tile within
    max_registers_per_thread, whole subgroups; the model's cycles fall as a problem spreads
    over more cores; a gemv whose matrix is read along k is left to the row reduction."""
    from tilecraft.schedule.strategies.gpu_contraction_tiles import (
        REGISTER_OVERHEAD,
        ChipRates,
        default_tiles,
        estimate_cycles,
        row_reduction_cycles,
    )

    spec = _gpu_spec(16)
    threads = spec.threads
    extents = (1, 1024, 1024, 1024)
    one = default_tiles(extents, 2, threads, ChipRates(cores=1))
    many = default_tiles(extents, 2, threads, ChipRates(cores=108))
    assert one.block_m * one.block_n > many.block_m * many.block_n
    for tiles in (one, many):
        assert tiles.threads % threads.subgroup_size == 0
        assert tiles.register_words(2, 2) + REGISTER_OVERHEAD \
            <= (threads.max_registers_per_thread or 255)
    assert estimate_cycles(many, extents, 2, threads, ChipRates(cores=108)) \
        < estimate_cycles(many, extents, 2, threads, ChipRates(cores=1))
    # a gemv on 108 cores: one thread per output row leaves latency unhidden, a subgroup
    # per row (the strategy's row reduction) does not
    chip = ChipRates(cores=108)
    gemv = (1, 1, 4096, 4096)
    assert row_reduction_cycles(gemv, 2, threads, chip) \
        < estimate_cycles(default_tiles(gemv, 2, threads, chip), gemv, 2, threads, chip)
    options = _options(16)
    # given tiles, the template runs it anyway
    _check(ops.gemv(P((37, 16), name="A"), P((16,), name="v"), name="G"),
           {"BM": 1, "BN": 32, "BK": 8, "TM": 1, "TN": 1}, options)


def _banked_options(banks: int | None = 32) -> LoweringOptions:
    spec = _gpu_spec(16)
    shared = spec.threads.shared_level
    levels = [level.model_copy(update={"banks": banks, "bank_bytes": banks and 4})
              if level.name == shared else level for level in spec.memory.levels]
    memory = spec.memory.model_copy(update={"levels": levels})
    return LoweringOptions.from_spec(spec.model_copy(update={"memory": memory}))


def test_bank_conflicts_count_distinct_words_per_bank() -> None:
    from tilecraft.schedule.strategies.gpu_contraction_tiles import bank_conflicts

    assert bank_conflicts([0, 0, 0], 32, 4) == 1              # one word, broadcast
    assert bank_conflicts([0, 2], 32, 4) == 1                 # two halves of one word
    assert bank_conflicts([t * 128 for t in range(4)], 32, 4) == 4
    assert bank_conflicts([t * 4 for t in range(32)], 32, 4) == 1


@pytest.mark.parametrize("stages", [1, 2])
def test_tiles_whose_fragment_reads_conflict_are_padded_where_the_spec_has_banks(stages) -> None:
    """A's fragment reads walk its tile's rows: with 16-half rows, the threads of a warp at
    rows 0, 2, 4, 6 hit banks 0, 16, 0, 16; 8 halves more per row spread them. B's reads run
    along its rows (no padding, 128-bit vector reads). Without banks in the spec: no padding.
    Padded kernels verify and interpret to the reference, ragged shapes included."""
    config = {"BM": 8, "BN": 64, "BK": 16, "TM": 2, "TN": 8, "stages": stages}
    tensor = _matmul(19, 37, 29, "float16")
    kernel = lower_tiled_contraction(tensor, _banked_options(), config)
    assert kernel.attrs["row_padding"] == {"A": 8, "B": 0}
    tiles = {stmt.buffer.name: stmt.buffer for stmt in walk_stmts(kernel.body)
             if hasattr(stmt, "buffer") and stmt.buffer.name.endswith("_tile")}
    assert tiles["A_tile"].shape == (stages, 8, 24) and tiles["B_tile"].shape == (stages, 16, 64)
    assert any(isinstance(stmt, For) and stmt.kind is LoopKind.VECTOR and stmt.lanes == 8
               and stmt.body.buffer.name == "b_frag" for stmt in walk_stmts(kernel.body))
    _check(tensor, config, _banked_options())
    plain = lower_tiled_contraction(tensor, _banked_options(None), config)
    assert plain.attrs["row_padding"] == {"A": 0, "B": 0}


@pytest.mark.parametrize("stages", [1, 2])
def test_a_ragged_contiguous_axis_copies_whole_chunks_and_zero_fills_past_its_end(stages) -> None:
    """K = 40 with BK = 16: rows of 40 halves are 16-byte aligned, so A's slices copy in
    8-half chunks; the last slice's chunks past k = 40 are zeros (the address clamped to the
    last chunk). K = 37: rows not aligned, element by element. Both match the reference."""
    config = {"BM": 8, "BN": 64, "BK": 16, "TM": 2, "TN": 8, "stages": stages}
    options = _options(16)
    for k, lanes in ((40, 8), (37, 1)):
        tensor = _matmul(11, 19, k, "float16")
        kernel = lower_tiled_contraction(tensor, options, config)
        assert kernel.attrs["vector_lanes"]["A"] == lanes
        _check(tensor, config, options)


def test_tiles_keep_to_the_registers_a_block_of_their_size_can_have() -> None:
    """With 65536 registers per block, a 1024-thread block gets 64 registers a thread: the
    default tiles never plan more (tiles + overhead), and a config whose tiles alone exceed
    that budget is refused naming both limits."""
    from tilecraft.schedule.strategies.gpu_contraction_tiles import (
        REGISTER_OVERHEAD,
        ContractionTiles,
        check_tiles,
        default_tiles,
        thread_register_budget,
    )

    spec = _gpu_spec()
    threads = spec.threads.model_copy(update={"registers_per_block": 65536,
                                              "max_registers_per_thread": 255})
    assert thread_register_budget(threads, 1024) == 64
    assert thread_register_budget(threads, 128) == 255
    tiles = default_tiles((1, 4096, 4096, 4096), 2, threads)
    assert tiles.register_words(2, 2) + REGISTER_OVERHEAD \
        <= thread_register_budget(threads, tiles.threads)
    greedy = ContractionTiles(256, 256, 16, 8, 8, 1)   # 1024 threads of 8x8 tiles
    with pytest.raises(LoweringError, match=r"above the 64 a thread of a 1024-thread block"):
        check_tiles("C", greedy, threads, 2, 2)
