"""The resource readers (cuobjdump's and ptxas' reports) and the occupancy arithmetic on
hand-computed cases of the A100 and H100 residency limits."""

from __future__ import annotations

import pytest
from tilecraft_nvidia_tc.build import occupancy
from tilecraft_nvidia_tc.target import load_target_spec
from tilecraft_nvidia_tc.toolchain.resources import parse_ptxas_log, parse_resource_usage

THREADS = load_target_spec().threads
A100 = THREADS.residency_for("sm_80")
H100 = THREADS.residency_for("sm_90")


def test_cuobjdump_report_with_two_kernels() -> None:
    text = """
Fatbin elf code:
================
arch = sm_80

Resource usage:
 Common:
  GLOBAL:0
 Function first:
  REG:40 STACK:16 SHARED:4096 LOCAL:24 CONSTANT[0]:372 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function second:
  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:360 TEXTURE:0 SURFACE:0 SAMPLER:0
"""
    found = parse_resource_usage(text)
    assert set(found) == {"first", "second"}
    first = found["first"]
    assert (first.registers, first.static_shared_bytes, first.local_bytes, first.stack_bytes,
            first.constant_bytes) == (40, 4096, 24, 16, 372)
    assert first.spill_store_bytes is None and first.source == "cuobjdump"


def test_ptxas_report_in_nvcc_format_with_spills_and_local_memory() -> None:
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'heavy' for 'sm_80'
ptxas info    : Function properties for heavy
    96 bytes stack frame, 88 bytes spill stores, 92 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 96 bytes lmem, 2048 bytes smem, \
380 bytes cmem[0]
ptxas info    : Function properties for helper
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""
    (name,) = parse_ptxas_log(log)
    heavy = parse_ptxas_log(log)[name]
    assert name == "heavy"
    assert (heavy.registers, heavy.spill_store_bytes, heavy.spill_load_bytes, heavy.local_bytes,
            heavy.static_shared_bytes, heavy.stack_bytes, heavy.barriers) == \
        (255, 88, 92, 96, 2048, 96, 1)


@pytest.mark.parametrize(("limits", "threads", "registers", "shared", "blocks", "limited_by",
                          "fraction"), [
    # 8 warps x (64 x 32 = 2048 registers): 16384 a partition hold 8 warps, 32 an SM: 4 blocks
    (A100, 256, 64, 0, 4, "registers", 0.5),
    # 41024 B rounded to 41088 a block: 167936 // 41088 = 4 blocks of 4 warps
    (A100, 128, 32, 40000, 4, "shared_memory", 0.25),
    # 3 warps x 1280 registers: 12 warps a partition, 48 an SM: 16 blocks (75%)
    (A100, 96, 40, 0, 16, "registers", 0.75),
    # 32 warps x 8192 registers exceed the 65536 of a block: it cannot launch
    (A100, 1024, 255, 0, 0, "registers", 0.0),
    # one warp a block, tiny: the 32 resident blocks bind (32 of 64 warps)
    (H100, 32, 16, 0, 32, "blocks", 0.5),
    # 100 KB + 1 KB reserved: one block on an A100, two on an H100
    (A100, 256, 32, 102400, 1, "shared_memory", 0.125),
    (H100, 256, 32, 102400, 2, "shared_memory", 0.25),
    # over the per-block maximum of the A100 (163 KB), under the H100's (227 KB)
    (A100, 64, 32, 200000, 0, "shared_memory", 0.0),
    (H100, 64, 32, 200000, 1, "shared_memory", 2 / 64),
    # 33 threads take two warps
    (A100, 33, 16, 0, 32, "threads", 1.0),
])
def test_occupancy_on_hand_computed_cases(limits, threads, registers, shared, blocks,
                                          limited_by, fraction) -> None:
    result = occupancy(limits, threads_per_block=threads, registers_per_thread=registers,
                       shared_bytes=shared, subgroup_size=32, registers_per_block=65536)
    assert (result.blocks_per_core, result.limited_by) == (blocks, limited_by)
    assert result.occupancy == pytest.approx(fraction)
    assert result.subgroups_per_core == blocks * -(-threads // 32)
    assert result.limits[limited_by] == blocks == min(result.limits.values())


def test_occupancy_refuses_an_empty_block() -> None:
    with pytest.raises(ValueError, match="threads_per_block must be at least 1"):
        occupancy(A100, threads_per_block=0, registers_per_thread=8, shared_bytes=0)
