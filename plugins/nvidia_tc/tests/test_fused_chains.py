"""Chimera on the GPU: float16 GEMM chains and attention fused into one CUDA kernel (WMMA
outer-product micro-kernel, intermediate in shared memory, online softmax), built with NVRTC
for sm_80 / sm_90 where it is installed, its CPU emulation against the reference on awkward
shapes, tiles refused by name when they do not fit, the model's prediction."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_nvidia_tc.fusion import (
    ChainTiles,
    FusedResourceError,
    fuse_chains,
    fused_profile,
    lower_fused_chain,
    match_chain,
    plan_chain_tiles,
)
from tilecraft_nvidia_tc.model import BOUNDS
from tilecraft_nvidia_tc.target import NvidiaTcTarget

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.pipeline.fusion_planning import chain_plan
from tilecraft.target.registry import get_target


@pytest.fixture(scope="module")
def target() -> NvidiaTcTarget:
    return NvidiaTcTarget()


def _graph(batch, m, k, l_, n, softmax=False, scale=None, dtype="float16", batched=True,
           relu=False):
    lead = (batch,) if batched else ()
    A = te.placeholder((*lead, m, k), name="A", dtype=dtype)
    B = te.placeholder((*lead, k, l_), name="B", dtype=dtype)
    D = te.placeholder((*lead, l_, n), name="D", dtype=dtype)
    product = ops.batch_matmul if batched else ops.matmul
    T = product(A, B, name="T")
    X = ops.scale(T, scale, name="Ts") if scale is not None else T
    S = ops.softmax(X, name="S") if softmax else ops.relu(X, name="R") if relu else X
    return tc.Graph.from_outputs([product(S, D, name="E")])


def _inputs(graph, seed):
    rng = np.random.default_rng(seed)
    return {t.name: (rng.standard_normal(t.shape) * 0.5).astype(np.float16)
            for t in graph.inputs}


CASES = [
    # batch, M, K, L, N, softmax, scale, batched
    (1, 17, 24, 33, 40, False, None, True),
    (1, 17, 24, 33, 40, True, 0.125, True),
    (2, 70, 40, 100, 24, True, None, True),   # 3 row blocks, 2 steps of L, L % TL != 0
    pytest.param((1, 5, 16, 72, 8, False, None, False),   # 2-D, 16-byte cp.async staging
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) +
                         ("-softmax" if c[5] else "") + ("-scaled" if c[6] else ""))
def test_fused_kernel_matches_the_reference(target, case):
    batch, m, k, l_, n, softmax, scale, batched = case
    graph = _graph(batch, m, k, l_, n, softmax, scale, batched=batched)
    exe = tc.compile(graph, target=target)
    (kernel,) = exe.kernels
    assert kernel.attrs["fused"][0] == "T" and kernel.attrs["fused"][-1] == "E"
    assert any(note.startswith("fused T") for note in exe.report.notes), exe.report.notes
    (source,) = exe.sources.values()
    # the outer product: fm x fn mma_sync per micro-kernel step, in each micro-kernel the body
    # calls (S zero-filled; S's later K slices and O in shared accumulated; O in registers)
    config = kernel.attrs["fused_chain"]
    tiles = config.tiles
    assert min(tiles.fm, tiles.fn) >= 2
    micro_kernels = 1 + (config.k_chunks > 1 or not tiles.o_frags) + bool(tiles.o_frags)
    assert source.text.count("nvcuda::wmma::mma_sync(") == micro_kernels * tiles.fm * tiles.fn
    assert ("o_acc[" in source.text) == bool(tiles.o_frags)
    assert not (tiles.o_frags and softmax)   # the online softmax rescales O in shared memory
    assert ("tc_cp_async_16(" in source.text) == (k % 8 == l_ % 8 == n % 8 == 0)
    assert ("expf(" in source.text) == softmax
    (report,) = exe.report.kernels
    # launched where a GPU runs it, the generated CUDA emulated on the CPU elsewhere
    assert report.mode == ("native" if target.available().execute else "emulated")
    if target.available().build:   # NVRTC / nvcc here: built for both architectures
        assert "sm_80" in report.build_summary and "sm_90" in report.build_summary
        assert "predicted" in report.build_summary
    inputs = _inputs(graph, seed=m + l_)
    got = exe(**inputs)
    expected = tc.reference.run(graph, inputs)
    assert got.dtype == np.float16 and got.shape == expected.shape
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                               rtol=1e-2, atol=2e-3 if softmax else 1e-2)


def test_attention_rows_with_large_scores_are_stable(target):
    """Scores near fp16's range: the running max keeps exp() finite (a plain exp overflows);
    L = 200 takes several steps (rescaled), staged by cp.async into two buffers."""
    graph = _graph(1, 9, 16, 200, 16, softmax=True)
    exe = tc.compile(graph, target=target)
    assert exe.kernels[0].attrs["fused_chain"].steps >= 2
    assert exe.kernels[0].attrs["fused_chain"].tiles.stages == 2
    inputs = _inputs(graph, seed=3)
    inputs["A"] = (inputs["A"] * 12).astype(np.float16)
    got = exe(**inputs).astype(np.float32)
    expected = tc.reference.run(graph, inputs).astype(np.float32)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, rtol=1e-2, atol=5e-3)


def test_tiles_too_large_are_refused_by_name(target):
    chain = match_chain(_graph(1, 256, 512, 256, 512).computes[-1])
    with pytest.raises(FusedResourceError, match=r"kernel big: \d+ bytes of shared memory .* "
                       r"limit of 166912 bytes"):
        lower_fused_chain(chain, ChainTiles(128, 128, warps=8), target.spec, name="big")
    with pytest.raises(FusedResourceError, match=r"kernel wide: 1056 threads .* limit of 1024"):
        lower_fused_chain(chain, ChainTiles(32, 32, warps=33), target.spec, name="wide")
    with pytest.raises(FusedResourceError, match=r"kernel regs: about 624 registers .* limit "
                       r"of 255"):
        lower_fused_chain(chain, ChainTiles(128, 128, fm=8, fn=8, warps=1), target.spec,
                          name="regs")
    with pytest.raises(FusedResourceError, match="multiple of 32"):
        lower_fused_chain(chain, ChainTiles(48, 32), target.spec, name="odd")


@pytest.mark.parametrize("shape", [(8, 512, 64, 512, 64), (1, 1024, 64, 512, 64),
                                   (16, 208, 80, 208, 80), (1, 17, 24, 33, 40)])
@pytest.mark.parametrize("variant", ["nvidia_tc", "nvidia_tc:h100"])
def test_solver_tiles_fit_the_spec(shape, variant):
    spec = get_target(variant).spec
    chain = match_chain(_graph(*shape, softmax=True).computes[-1])
    tiles, reason = plan_chain_tiles(chain, spec)
    assert tiles is not None, reason
    assert tiles.tm % 32 == 0 and tiles.tl % 32 == 0 and 32 <= tiles.tm <= 128
    assert tiles.tl <= max(32, -(-shape[3] // 32) * 32)
    kernel = lower_fused_chain(chain, tiles, spec)   # raises if it does not fit
    assert kernel.launch.shared_bytes <= spec.threads.shared_bytes_per_block_optin


def test_chains_the_kernel_cannot_express_are_noted(target):
    for graph, why in ((_graph(1, 20, 16, 24, 8, dtype="float32"), "float16 chains"),):
        groups = fuse_chains(graph, target.spec, chain_plan(graph, target.spec))
        assert groups and all(not group.computes for group in groups)
        assert why in groups[0].notes[0]
    graph = _graph(1, 20, 16, 24, 8)
    T = graph.computes[0]
    graph = tc.Graph.from_outputs([graph.outputs[0], ops.relu(T, name="R")])
    groups = fuse_chains(graph, target.spec, chain_plan(graph, target.spec))
    assert all(not group.computes for group in groups)


@pytest.mark.parametrize("variant", ["nvidia_tc", "nvidia_tc:h100"])
def test_model_predicts_the_fused_kernel(variant):
    """G12 with softmax (thesis Table 3.5): the fused kernel's prediction beats the DRAM time
    alone of the unfused chain, which writes and reads T and S (float16) through memory."""
    target = get_target(variant)
    graph = _graph(1, 1024, 64, 512, 64, softmax=True)
    chain = match_chain(graph.computes[-1])
    tiles, _ = plan_chain_tiles(chain, target.spec)
    kernel = lower_fused_chain(chain, tiles, target.spec)
    estimate = target.estimate(kernel)
    bound = next(name[len("bound_"):] for name in estimate.detail if name.startswith("bound_"))
    assert bound.replace("_", " ") in BOUNDS
    profile = fused_profile(kernel)
    assert profile.tensor_macs >= 1024 * 512 * (64 + 64)   # both products, padded
    level = target.spec.memory.level("global")
    dram_per_s = level.bandwidth_bytes_per_cycle * target.spec.compute.frequency_hz
    unfused_bytes = 2 * (1024 * 64 * 2 + 64 * 512 * 2 + 1024 * 64) \
        + 2 * 1024 * 512 * 2 * 2 + 4 * 1024 * 512 * 4 * 2   # T, S written+read; fp32 middle
    assert 0 < estimate.seconds < unfused_bytes / dram_per_s


def test_gemm_relu_gemm(target):
    graph = _graph(2, 19, 24, 40, 16, relu=True)
    exe = tc.compile(graph, target=target)
    assert exe.kernels[0].attrs["fused"] == ("T", "R", "E")
    # the register level's N tile holds each warp's share of O: the accumulator in registers
    assert exe.kernels[0].attrs["fused_chain"].tiles.o_frags >= 1
    inputs = _inputs(graph, seed=11)
    np.testing.assert_allclose(exe(**inputs).astype(np.float32),
                               tc.reference.run(graph, inputs).astype(np.float32),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("softmax", [False, True], ids=["plain", "softmax"])
def test_k_and_n_beyond_whole_tiles(target, softmax):
    """K = 1500 and N = 1100: neither A's TM x K tile with B's nor O's TM x N tile fits a
    block's shared memory whole, so the solver's block tiles slice K (S accumulated over the
    slices) and N (blocks over N, each recomputing its rows' intermediate and softmax)."""
    graph = _graph(1, 20, 1500, 21, 1100, softmax=softmax)
    chain = match_chain(graph.computes[-1])
    whole = ChainTiles(32, 32, warps=1)
    with pytest.raises(FusedResourceError, match="bytes of shared memory"):
        lower_fused_chain(chain, whole, target.spec)
    exe = tc.compile(graph, target=target)
    (kernel,) = exe.kernels
    config = kernel.attrs["fused_chain"]
    assert 0 < config.tiles.tk < 1500 and config.k_chunks >= 2
    assert 0 < config.tiles.tn < 1100 and config.n_blocks >= 2
    assert "K in slices" in kernel.attrs["schedule"] or "TK=" in kernel.attrs["schedule"]
    inputs = _inputs(graph, seed=7)
    inputs["A"] = (inputs["A"] / 8).astype(np.float16)   # keeps T's 1500-term sums modest
    got = exe(**inputs).astype(np.float32)
    expected = tc.reference.run(graph, inputs).astype(np.float32)
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-2)


def test_occupancy_weighs_in_the_choice():
    """Each fragment grid's tiles planned for 1 and for 2 blocks per SM; the choice is the plan
    the model predicts fastest (those with a warp per sub-partition first). G12-like with odd
    sizes (1x1024x61x509x61, softmax): its 32-row tiles leave 2 blocks resident per SM, and
    they beat the grids whose tiles hold 1 block per SM, as the model predicts."""
    from tilecraft_nvidia_tc.fusion import FRAGMENT_GRIDS, choose_chain_tiles
    from tilecraft_nvidia_tc.fusion.choice import _partitions, _s_tiles
    from tilecraft_nvidia_tc.model import estimate_profile

    spec = NvidiaTcTarget().spec
    chain = match_chain(_graph(1, 1024, 61, 509, 61, softmax=True).computes[-1])

    def predicted(tiles):
        estimate = estimate_profile(fused_profile(lower_fused_chain(chain, tiles, spec)), spec)
        return (min(tiles.warps, _s_tiles(tiles)) < _partitions(spec),
                estimate.seconds), \
            estimate.occupancy.blocks_per_core

    options = {}
    for fm, fn in FRAGMENT_GRIDS:
        for resident in (1, 2):
            tiles, _ = plan_chain_tiles(chain, spec, fm, fn, blocks_per_sm=resident)
            if tiles is not None:
                options[tiles] = predicted(tiles)
    tiles, why = choose_chain_tiles(chain, spec)
    key, blocks = predicted(tiles)
    assert key == min(k for k, _ in options.values()) and "/2:" in why
    assert blocks >= 2
    assert any(b == 1 and k > key for k, b in options.values())


def _conv_chain(n, c, h, k1, r, s, k2, relu=True):
    x = te.placeholder((n, c, h, h), name="x", dtype="float16")
    w = te.placeholder((k1, c, r, r), name="w", dtype="float16")
    v = te.placeholder((k2, k1, 1, 1), name="v", dtype="float16")
    C = ops.conv2d(x, w, stride=s, padding=r // 2, name="C")
    R = ops.relu(C, name="R") if relu else C
    return tc.Graph.from_outputs([ops.conv2d(R, v, name="E")])


@pytest.mark.parametrize("shape", [(2, 5, 11, 20, 3, 2, 7),
                                   pytest.param((1, 3, 9, 40, 3, 1, 5), marks=pytest.mark.slow)],
                         ids=["3x3s2", "3x3s1"])
def test_conv_relu_conv1x1_fused(target, shape):
    """Thesis Table 3.6's chain: the 3x3 convolution as an implicit GEMM (im2col gathered
    while staging, zero padding), relu, the 1x1 convolution as the second GEMM, NCHW out."""
    graph = _conv_chain(*shape)
    exe = tc.compile(graph, target=target)
    (kernel,) = exe.kernels
    assert kernel.attrs["fused"] == ("C_pad", "C", "R", "E")
    assert "tc_im2col(" in exe.sources[kernel.name].text
    inputs = _inputs(graph, seed=shape[2])
    np.testing.assert_allclose(exe(**inputs).astype(np.float32),
                               tc.reference.run(graph, inputs).astype(np.float32),
                               rtol=1e-2, atol=1e-2)


def test_fused_source_is_ready_for_the_launch_path(target):
    """What the driver launch reads from the source: parameters in order (E the output), the
    grid of row blocks x batches x column blocks, the dynamic shared memory (opted in above
    48 KB)."""
    from tilecraft_nvidia_tc.build import LaunchShape
    from tilecraft_nvidia_tc.launch.arguments import check_arrays, parameters_from_meta

    graph = _graph(3, 130, 64, 200, 64, softmax=True, scale=0.125)
    chain = match_chain(graph.computes[-1])
    tiles, _ = plan_chain_tiles(chain, target.spec)
    kernel = lower_fused_chain(chain, tiles, target.spec)
    source = target.codegen(kernel)
    params = parameters_from_meta(source.meta)
    assert [p.name for p in params] == ["A", "B", "D", "E"]
    assert [p.name for p in params if p.output] == ["E"]
    launch = LaunchShape.from_meta(source.meta)
    n_tiles = -(-64 // tiles.tn) if tiles.tn else 1
    assert launch.grid == (-(-130 // tiles.tm), 3, n_tiles)
    assert launch.block == (tiles.threads, 1, 1)
    assert launch.dynamic_shared_bytes == kernel.launch.shared_bytes
    assert source.meta["needs_smem_optin"] == (launch.dynamic_shared_bytes > 48 * 1024)
    check_arrays(kernel.name, params, _inputs(graph, 0) | {
        "E": np.zeros(graph.outputs[0].shape, np.float16)})


@pytest.mark.device
def test_fused_attention_on_the_gpu(target):
    """Where a GPU and its driver are here: the built kernel launched, against the reference."""
    if not target.available().execute:
        pytest.skip(target.available().reasons.get("execute", "no GPU"))
    graph = _graph(2, 130, 64, 200, 64, softmax=True, scale=0.125)
    exe = tc.compile(graph, target=target)
    inputs = _inputs(graph, seed=5)
    np.testing.assert_allclose(exe(**inputs).astype(np.float32),
                               tc.reference.run(graph, inputs).astype(np.float32),
                               rtol=1e-2, atol=2e-3)
