"""AMOS's hierarchical performance model (Eq. 5.6-5.8) and the ranking of mappings by it."""

from __future__ import annotations

import math

import pytest

from tilecraft import ops, te
from tilecraft.errors import InputError, TargetError
from tilecraft.intrin import match
from tilecraft.intrin.examples import vpdpbusd, wmma
from tilecraft.intrin.mapping import IntrinsicMapping, MappingError
from tilecraft.intrin.perfmodel import (
    ScheduleParams,
    TileSchedule,
    algorithm4_check,
    default_schedule,
    estimate,
    mapped_nest,
    model_hierarchy,
    rank_mappings,
)
from tilecraft.intrin.verify import mapping_from_names, verify
from tilecraft.target.spec import load_spec


def gpu_spec(global_bw: float = 256, shared_bytes: int = 49152, shared_bw: float = 128,
             sms: int = 8):
    """The toy GPU of ``perfmodel.gpu_spec_example`` with its figures as parameters."""
    return load_spec({
        "name": "toy_gpu", "api_version": 1, "version": "0.1",
        "memory": {"levels": [
            {"name": "global", "size_bytes": None, "bandwidth_bytes_per_cycle": global_bw,
             "kind": "dram", "fan_out": sms},
            {"name": "shared", "size_bytes": shared_bytes, "bandwidth_bytes_per_cycle": shared_bw,
             "fan_out": 4},
            {"name": "fragment", "size_bytes": 65536, "bandwidth_bytes_per_cycle": 256,
             "kind": "registers", "allow_larger_than_outer": True}]},
        "compute": {"cores": sms, "frequency_hz": 1e9, "vector_bits": 128},
        "primitives": ["split"], "loop_kinds": ["serial"], "evaluation": "estimate",
        "capabilities": {"models_performance": True}})


def gemm(m: int, k: int, n: int, dtype: str = "float16", out: str = "float32"):
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    return ops.matmul(A, B, out_dtype=out, name="C")


def conv2d(n=1, c=16, h=14, k=32, r=3, dtype="float16", out="float32"):
    x = te.placeholder((n, c, h, h), dtype, name="x")
    w = te.placeholder((k, c, r, r), dtype, name="w")
    return ops.conv2d(x, w, out_dtype=out, name="y")


def cost_of(compute, spec, schedule=None, mma=None):
    mma = mma or wmma(16, 16, 16)
    nest = mapped_nest(compute, mma, match(compute, mma).mappings[0])
    hierarchy = model_hierarchy(spec, mma)
    params = None if schedule is None else ScheduleParams.of(*schedule)
    return estimate(nest, hierarchy, None if params is None
                    else params.apply(nest, hierarchy.depth))


# --- the levels ------------------------------------------------------------------------------
def test_levels_follow_the_operand_paths_and_fan_out() -> None:
    hierarchy = model_hierarchy(gpu_spec(sms=6), wmma(16, 16, 16))
    assert [level.memories for level in hierarchy.levels] == [("fragment",), ("shared",),
                                                               ("global",)]
    assert [level.units for level in hierarchy.levels] == [1, 4, 6]
    # the example WMMA stores its result from the fragments straight to global memory
    assert dict(hierarchy.paths)["Dst"] == ("fragment", None, "global")
    assert hierarchy.residence("Dst", 1) == ("fragment", True)
    # one SM issues 0.25 calls a cycle, shared by its four sub-partitions: 16 cycles apart
    assert hierarchy.issue_cycles == 16 and hierarchy.latency_cycles == 32


def test_levels_of_an_unknown_memory_name_the_intrinsic() -> None:
    with pytest.raises(TargetError, match="vpdpbusd_16 moves a through 'memory', which is not "
                       "a memory level of target toy_gpu"):
        model_hierarchy(gpu_spec(), vpdpbusd())


def test_levels_of_the_installed_targets() -> None:
    registry = pytest.importorskip("tilecraft.target.registry")
    try:
        ascend = registry.get_target("ascend_npu").spec
        x86 = registry.get_target("x86_avx512").spec
    except Exception as err:  # a plugin that is not installed here
        pytest.skip(f"target plugins not installed: {err}")
    cube = model_hierarchy(ascend, ascend.intrinsic("mad_f16_f32"))
    # the fork of the Cube's data path: L0A/L0B/L0C at level 0, L1 and UB at level 1
    assert [level.memories for level in cube.levels] == [("L0A", "L0B", "L0C"), ("L1", "UB"),
                                                         ("GM",)]
    assert cube.levels[2].units == 32
    fma = model_hierarchy(x86, x86.intrinsic("vpdpbusd"))
    # the caches between DRAM and the registers are levels too; the L3 feeds both cores
    assert [level.memories[0] for level in fma.levels] == ["register", "L1", "L2", "L3", "DRAM"]
    assert [level.units for level in fma.levels] == [1, 1, 1, 2, 1]
    # declared: 2 a cycle; where the host measured its peak, no faster than it allows
    operations_per_cycle = x86.compute.flops_per_core("uint8") / x86.compute.frequency_hz
    expected = max(0.5, 2 * 16 * 4 / operations_per_cycle) \
        if x86.compute.peak_flops_per_core else 0.5
    assert fma.issue_cycles == pytest.approx(expected)


def test_a_measured_peak_bounds_vector_unit_intrinsics_only() -> None:
    """A target that measured its arithmetic caps an intrinsic of its vector unit at that
    rate (a core running 512-bit vectors as two halves); an intrinsic wider than the vector
    unit (WMMA) keeps its declared rate, and without a measurement the declaration stands."""
    from tilecraft.intrin.nest import issue_cycles, vector_unit_dtype

    spec = gpu_spec()
    lanes = spec.compute.lanes("float16")
    measured = spec.model_copy(update={"compute": spec.compute.model_copy(update={
        "peak_flops_per_core": {"float16": spec.compute.formula_flops_per_core("float16") / 2}
    })})
    mma = wmma(16, 16, 16)
    assert vector_unit_dtype(measured, mma) is None  # 4096 multiply-adds: a unit of its own
    assert issue_cycles(measured, mma) == issue_cycles(spec, mma) == 1 / mma.throughput_per_cycle
    narrow = wmma(1, lanes, 1)  # lanes multiply-adds a call: fits the vector unit
    assert vector_unit_dtype(measured, narrow).value == "float16"
    declared = 1 / narrow.throughput_per_cycle
    assert issue_cycles(spec, narrow) == declared
    per_cycle = measured.compute.flops_per_core("float16") / measured.compute.frequency_hz
    assert issue_cycles(measured, narrow) == pytest.approx(max(declared, 2 * lanes / per_cycle))


# --- the equations ---------------------------------------------------------------------------
def test_breakdown_by_hand() -> None:
    """64x64x64 fp16 GEMM, everything in one thread block: worked out on paper."""
    cost = cost_of(gemm(64, 64, 64), gpu_spec(), ({"i1": [1, 4], "i2": [1, 4], "r1": [1, 4]},))
    level0, level1, level2 = cost.levels
    assert (level0.serial_iterations, level0.below, level0.cycles) == (1, 32, 32)  # latency
    # 4 x 4 tiles on 4 warps, 4 k-steps: 16 serial iterations; each of the 64 (i, j, k) steps
    # loads one 512-byte tile of A and of B from shared memory (128 B/cycle)
    assert level1.serial_iterations == 16 and level1.active_units == 4
    assert dict(level1.read_bytes) == {"Src1": 64 * 512, "Src2": 64 * 512}
    assert level1.read_cycles == 64 * 1024 / 128
    assert level1.cycles == 16 * max(32, 512 / 16)
    # A and B come from global memory once (8 KiB each); the accumulator (no fill in this
    # declaration) is loaded and stored once (16 KiB each way), at 256 B/cycle
    assert dict(level2.read_bytes) == {"Src1": 8192, "Src2": 8192, "Dst": 16384}
    assert dict(level2.write_bytes) == {"Dst": 16384}
    assert (level2.read_cycles, level2.write_cycles) == (128, 64)
    assert cost.cycles == level2.cycles == 512 and cost.seconds == 512e-9
    assert cost.feasible and cost.bound == "compute"


@pytest.mark.parametrize("shape", [(64, 64, 64), (17, 33, 5), (1, 7, 130), (96, 48, 200)])
def test_levels_combine_as_eq_5_7(shape) -> None:
    spec = gpu_spec()
    cost = cost_of(gemm(*shape), spec)
    first = cost.levels[0]
    assert first.cycles == first.serial_iterations * first.below
    for below, level in zip(cost.levels, cost.levels[1:]):
        assert level.below == below.cycles
        assert level.read == level.read_cycles / level.serial_iterations
        assert level.cycles == pytest.approx(
            level.serial_iterations * max(level.below, level.read, level.write))
    assert cost.cycles == cost.levels[-1].cycles
    assert cost.seconds == pytest.approx(cost.cycles / spec.compute.frequency_hz)


def test_dependent_calls_pay_the_latency_independent_ones_the_issue_interval() -> None:
    spec = gpu_spec()
    chained = cost_of(gemm(16, 64, 16), spec, ({"r1": [4]},))  # 4 calls into one accumulator
    independent = cost_of(gemm(64, 16, 16), spec, ({"i1": [4]},))  # 4 accumulators
    assert chained.levels[0].below == 32 and chained.levels[0].cycles == 128
    assert independent.levels[0].below == 16 and independent.levels[0].cycles == 64


def test_parallel_units_divide_the_spatial_trips() -> None:
    spec = gpu_spec(sms=8)
    cost = cost_of(gemm(16 * 16, 16, 16), spec, ({"i1": [1, 1]},))  # 16 tiles on the top level
    top = cost.levels[-1]
    assert top.units == 8 and top.active_units == 8 and top.serial_iterations == 2


# --- monotonicity ----------------------------------------------------------------------------
def test_more_padding_costs_more() -> None:
    spec = gpu_spec()
    exact, padded, double = (cost_of(gemm(m, 64, 64), spec, ({"i1": [1, 1]},))
                             for m in (64, 65, 80))
    assert padded.nest.utilisation < exact.nest.utilisation
    assert padded.cycles > exact.cycles
    # a partly padded tile costs a whole one: 65 rows cost what 80 do
    assert padded.cycles == double.cycles
    # among the mappings of a convolution, the padded ones cost more
    ranked = rank_mappings(conv2d(), wmma(16, 16, 16), spec)
    worst = max(ranked, key=lambda r: r.seconds)
    assert worst.nest.utilisation < 0.1 < 0.9 < ranked[0].nest.utilisation
    assert worst.seconds > 2 * ranked[0].seconds


@pytest.mark.parametrize("level", ["global", "shared"])
def test_lower_bandwidth_costs_more(level: str) -> None:
    compute, mma = conv2d(c=32, h=28, k=64), wmma(16, 16, 16)
    mappings = match(compute, mma).mappings[:6]
    costs = []
    for bandwidth in (512, 128, 32, 8):
        spec = gpu_spec(global_bw=bandwidth) if level == "global" \
            else gpu_spec(shared_bw=bandwidth)
        costs.append([r.cost.cycles for r in rank_mappings(compute, mma, spec,
                                                           mappings=mappings)])
    # the same schedules (the default one depends on capacities only) never get cheaper, and
    # once the level's traffic dominates they get dearer
    for faster, slower in zip(costs, costs[1:]):
        assert all(s >= f for f, s in zip(faster, slower))
    assert all(s > f for f, s in zip(costs[0], costs[-1]))


def test_reuse_depends_on_loop_order() -> None:
    spec = gpu_spec(global_bw=16, sms=1)  # one SM: the top level's loops run in their order
    tiles = {"i1": [1, 1], "i2": [1, 1], "r1": [1, 1]}
    inner_k = cost_of(gemm(64, 256, 64), spec, (tiles, ["i1", "i2", "r1"]))
    outer_k = cost_of(gemm(64, 256, 64), spec, (tiles, ["r1", "i1", "i2"]))
    top_in, top_out = inner_k.levels[-1], outer_k.levels[-1]
    # k innermost: every output tile is loaded and stored once; k outermost: partial sums
    # go back to global memory after every k-step
    assert dict(top_in.write_bytes)["Dst"] < dict(top_out.write_bytes)["Dst"]
    assert dict(top_out.write_bytes)["Dst"] == 16 * dict(top_in.write_bytes)["Dst"]
    assert outer_k.cycles > inner_k.cycles
    # at a parallel level the spatial loops are bound to the units, outside any order
    parallel = [cost_of(gemm(64, 256, 64), gpu_spec(global_bw=16), (tiles, order)).cycles
                for order in (["i1", "i2", "r1"], ["r1", "i1", "i2"])]
    assert parallel[0] == parallel[1]


# --- feasibility -----------------------------------------------------------------------------
def test_tiles_beyond_a_memory_are_infeasible() -> None:
    spec = gpu_spec(shared_bytes=16384)
    fits = cost_of(gemm(256, 256, 256), spec, ({"i1": [1, 2], "i2": [1, 2], "r1": [1, 2]},))
    too_big = cost_of(gemm(256, 256, 256), spec,
                      ({"i1": [1, 8], "i2": [1, 8], "r1": [1, 4]},))
    assert fits.feasible
    assert not too_big.feasible
    assert any("in shared, which holds 16384" in p and p.startswith("level 1")
               for p in too_big.problems)
    assert dict(too_big.levels[1].usage)["shared"] > 16384
    # the default schedule always fits
    assert cost_of(gemm(256, 256, 256), spec).feasible


def test_rank_flags_infeasible_mappings() -> None:
    params = ScheduleParams.of({"i1": [1, 64], "i2": [1, 64], "r1": [1, 64]})
    ranked = rank_mappings(gemm(256, 256, 256), wmma(16, 16, 16), gpu_spec(), params)
    assert len(ranked) == 1 and ranked[0].verified and not ranked[0].feasible
    assert not ranked[0].usable and "in shared" in ranked[0].cost.problems[0]
    # nothing fits a shared memory smaller than one tile of each source
    tiny = rank_mappings(conv2d(), wmma(16, 16, 16), gpu_spec(shared_bytes=512))
    assert len(tiny) == 35 and not any(r.feasible for r in tiny)


# --- ranking ---------------------------------------------------------------------------------
def test_rank_prefers_the_obvious_mappings() -> None:
    spec = gpu_spec()
    only = rank_mappings(gemm(128, 64, 96), wmma(16, 16, 16), spec)
    assert [r.mapping.names() for r in only] == [{"i1": ["i"], "i2": ["j"], "r1": ["k"]}]
    ranked = rank_mappings(conv2d(c=16, h=14, k=32), wmma(16, 16, 16), spec)
    assert len(ranked) == 35 and all(r.verified and r.physical is not None for r in ranked)
    best = ranked[0].mapping.names()
    assert best["i2"] == ["k"] and {"h", "w"} <= set(best["i1"]) and "rc" in best["r1"]
    seconds = [r.seconds for r in ranked]
    assert seconds == sorted(seconds)
    # the mapping that puts only the batch (n = 1) on the 16-row loop is among the worst
    batch_only = [r for r in ranked if r.mapping.names()["i1"] == ["n"]]
    assert batch_only and all(r.seconds > 2 * ranked[0].seconds for r in batch_only)


def test_algorithm4_check_agrees_with_verify_on_matched_and_wrong_mappings() -> None:
    compute, mma = conv2d(), wmma(16, 16, 16)
    for mapping in match(compute, mma).mappings:
        assert algorithm4_check(compute, mma, mapping).ok
    wrong = mapping_from_names(compute, mma, {"i1": ["n", "k"], "r1": ["rc"]})[0]
    assert not algorithm4_check(compute, mma, wrong).ok
    assert not verify(compute, mma, wrong).ok
    # a wrong mapping is ranked (after every verified one), flagged as not verified
    good = match(compute, mma).mappings[0]
    ranked = rank_mappings(compute, mma, gpu_spec(), mappings=[wrong, good])
    assert [r.verified for r in ranked] == [True, False] and not ranked[1].usable
    # a mapping that does not even name every intrinsic loop cannot be costed
    unreadable = IntrinsicMapping(mma.name, good.operands, good.loops[:1])
    with pytest.raises(MappingError, match="fails verification"):
        rank_mappings(compute, mma, gpu_spec(), mappings=[unreadable])


# --- bad schedules ---------------------------------------------------------------------------
def test_schedule_errors_name_the_loop() -> None:
    compute, mma = gemm(64, 64, 64), wmma(16, 16, 16)
    nest = mapped_nest(compute, mma, match(compute, mma).mappings[0])
    hierarchy = model_hierarchy(gpu_spec(), mma)
    with pytest.raises(InputError, match="loop 'j2', which the nest of C"):
        ScheduleParams.of({"j2": [1]}).apply(nest, hierarchy.depth)
    with pytest.raises(InputError, match=r"i1\[0\] = 0"):
        ScheduleParams.of({"i1": [0]}).apply(nest, hierarchy.depth)
    good = default_schedule(nest, hierarchy)
    short = TileSchedule(tuple((n, (1, 1, 1)) for n, _ in good.factors), good.order)
    with pytest.raises(InputError, match="loop i1: trips \\[1, 1, 1\\] cover 1 of its 4"):
        estimate(nest, hierarchy, short)
    with pytest.raises(InputError, match="schedule order \\['i1', 'x'\\] names \\['x'\\]"):
        ScheduleParams.of(order=["i1", "x"]).apply(nest, hierarchy.depth)
    wrong_order = TileSchedule(good.factors, ("i1", "i2"))
    with pytest.raises(InputError, match="must both name exactly"):
        estimate(nest, hierarchy, wrong_order)
    with pytest.raises(InputError, match="hierarchy is for intrinsic wmma_32x8x16, the nest "
                       "for wmma_16x16x16"):
        estimate(nest, model_hierarchy(gpu_spec(), wmma(32, 8, 16)))
    assert math.prod(good.of("i1")) >= 4
