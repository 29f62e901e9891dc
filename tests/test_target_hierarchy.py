"""Typed thread hierarchies and spatial architectures on target specs: declared by the four
non-x86 plugins with published figures, validated at declaration, read by lowering."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tilecraft import te
from tilecraft.errors import PluginError, TargetError
from tilecraft.kernel_ir.interpreter import run_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.schedule import create_schedule
from tilecraft.target.hierarchy import LaunchScope, ThreadHierarchy
from tilecraft.target.registry import get_target
from tilecraft.target.spec import load_spec

LEVELS = [{"name": "global", "size_bytes": None, "bandwidth_bytes_per_cycle": 32, "kind": "dram"},
          {"name": "local", "size_bytes": 32768, "bandwidth_bytes_per_cycle": 64}]


def _spec(**extra: Any) -> Any:
    return load_spec({
        "name": "toy_cl", "api_version": 1, "version": "0", "memory": {"levels": LEVELS},
        "compute": {"cores": 1, "frequency_hz": 1e9, "vector_bits": 0},
        "primitives": ["split", "reorder", "bind"], "loop_kinds": ["serial", "bound"],
        "evaluation": "estimate", "capabilities": {"models_performance": True}, **extra})


RESIDENCY = {"architecture": "gen1", "max_threads": 1024, "max_blocks": 16, "registers": 65536,
             "shared_bytes": 65536}


def _threads(**changes: Any) -> dict[str, Any]:
    threads: dict[str, Any] = {
        "axes": [{"name": "group_id.x", "scope": "grid", "dim": 0, "max_extent": 65535},
                 {"name": "local_id.x", "scope": "block", "dim": 0, "max_extent": 256},
                 {"name": "local_id.y", "scope": "block", "dim": 1, "max_extent": 256}],
        "max_threads_per_block": 256, "subgroup_size": 16, "shared_bytes_per_block": 32768,
        "shared_level": "local", "barrier_scopes": ["work_group"]}
    threads.update(changes)
    return threads


def test_gpu_specs_declare_their_launch_hierarchy() -> None:
    nvidia = get_target("nvidia_tc").spec.threads
    assert nvidia.axis("blockIdx.x").max_extent == 2 ** 31 - 1
    assert nvidia.axis("blockIdx.y").scope is LaunchScope.GRID
    assert (nvidia.subgroup_size, nvidia.max_registers_per_thread,
            nvidia.registers_per_block) == (32, 255, 65536)
    assert nvidia.shared_level == "shared"
    mali = get_target("mali").spec.threads
    assert mali.max_threads_per_block == 384 and mali.subgroup_size == 8
    assert mali.shared_bytes_per_block == get_target("mali").spec.memory.level("local").size_bytes
    assert get_target("mali").spec.barrier_scopes == ("work_group", "subgroup")


def test_spatial_specs_declare_units_and_budgets() -> None:
    ascend = get_target("ascend_npu").spec
    cube = ascend.spatial.unit("cube")
    assert cube.pe_shape == (16, 16, 16) and cube.processing_elements == 4096
    assert cube.operand_levels == {"input": "L0A", "weight": "L0B", "output": "L0C"}
    assert ascend.spatial.unit("vector").pe_shape == (128,)
    assert ascend.barrier_scopes == ("pipe",) and ascend.bindable_axes == ("block_idx",)
    fpga = get_target("fpga_hls").spec
    fabric = fpga.spatial.fabric
    assert fabric.part.startswith("xcvu9p") and fabric.dsp_slices == 6840
    assert fabric.dsp_slices_used == fpga.fixed_decisions["dsp_slices_used"]
    assert fpga.spatial.unit("mac_array").pe_shape == (32, 32)


def test_x86_spec_declares_neither_and_stays_valid() -> None:
    spec = get_target("x86_avx512").spec
    assert spec.threads is None and spec.spatial is None
    assert spec.bindable_axes == () and spec.barrier_scopes == ()


@pytest.mark.parametrize(("extra", "message"), [
    ({"threads": _threads(shared_level="smem")},
     r"threads: .*shared_level 'smem' is not a memory level of this target; the levels are "
     r"global, local"),
    ({"threads": _threads(axes=[{"name": "local_id.x", "scope": "block", "dim": 0,
                                 "max_extent": 512}])},
     r"axis local_id.x: max_extent 512 exceeds max_threads_per_block 256"),
    ({"threads": _threads(axes=[{"name": "a", "scope": "grid", "dim": 0, "max_extent": 4},
                                {"name": "b", "scope": "grid", "dim": 0, "max_extent": 4}])},
     r"launch dimension 'grid dim 0' is declared twice"),
    ({"threads": _threads(axes=[{"name": "a.b.c", "scope": "grid", "dim": 0,
                                 "max_extent": 4}])},
     r"axis name 'a.b.c' must be an identifier"),
    ({"threads": _threads(shared_bytes_per_block_optin=1024)},
     r"shared_bytes_per_block_optin 1024 is below the static limit"),
    ({"threads": _threads(residency=[RESIDENCY, RESIDENCY])},
     r"architecture 'gen1' is declared twice"),
    ({"threads": _threads(residency=[{**RESIDENCY, "register_partitions": 3}])},
     r"architecture gen1: registers 65536 do not split evenly over 3 partitions"),
    ({"threads": _threads(residency=[{**RESIDENCY, "max_shared_bytes_per_block": 70000}])},
     r"architecture gen1: max_shared_bytes_per_block 70000 exceeds the core's shared_bytes "
     r"65536"),
    ({"threads": _threads(residency=[{**RESIDENCY, "shared_bytes_reserved_per_block": 70000}])},
     r"shared_bytes_reserved_per_block 70000 exceeds shared_bytes 65536"),
    ({"spatial": {"units": [{"name": "cube", "kind": "matrix", "pe_shape": [16, 16, 16],
                             "operand_levels": {"input": "L0A"}}]}},
     r"operand_levels.input 'L0A' is not a memory level"),
    ({"spatial": {"units": [{"name": "mac", "kind": "matrix", "pe_shape": [4, 4]}],
                  "fabric": {"part": "p", "dsp_slices": 10, "bram36_blocks": 1,
                             "dsp_slices_used": 11}}},
     r"dsp_slices_used 11 exceeds the part's 10 DSP slices"),
])
def test_invalid_declarations_name_the_field(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        _spec(**extra)


def test_unknown_axis_lookup_lists_the_axes() -> None:
    with pytest.raises(TargetError, match="the bindable axes are group_id.x, local_id.x"):
        ThreadHierarchy(**_threads()).axis("threadIdx.x")


def test_lowering_options_and_launch_follow_the_spec_hierarchy() -> None:
    spec = _spec(threads=_threads())
    options = LoweringOptions.from_spec(spec)
    assert options.bindable_axes == ("group_id.x", "local_id.x", "local_id.y")
    assert options.subgroup_size == 16
    assert LoweringOptions.from_spec(get_target("x86_avx512").spec).bindable_axes == ()

    A = te.placeholder((6, 8), "float32", name="A")
    B = te.compute((6, 8), lambda i, j: A[i, j] * 2.0, name="B")
    s = create_schedule(B, spec)
    i, j = s[B].axes
    s[B].bind(i, "group_id.x")
    s[B].bind(j, "local_id.y")
    (kernel,) = s.lower()
    # OpenCL names, placed by the spec's scope and dimension: no CUDA names in the core
    assert (kernel.launch.grid, kernel.launch.block) == ((6,), (1, 8))
    a = np.arange(48, dtype=np.float32).reshape(6, 8)
    out = np.zeros((6, 8), np.float32)
    run_kernel(kernel, {"A": a, "B": out})
    np.testing.assert_array_equal(out, a * 2.0)


def test_binding_to_an_axis_the_spec_lacks_is_refused_at_the_step() -> None:
    from tilecraft.schedule.errors import ScheduleError

    A = te.placeholder((6, 8), "float32", name="A")
    B = te.compute((6, 8), lambda i, j: A[i, j] + 1.0, name="B")
    s = create_schedule(B, _spec(threads=_threads()))
    s[B].bind(s[B].axes[0], "blockIdx.x")
    with pytest.raises(ScheduleError, match=r"bind on stage B, loop i: 'blockIdx.x' is not a "
                                            r"bindable axis of toy_cl; bind to one of "
                                            r"group_id.x, local_id.x, local_id.y"):
        s.lower()


def test_block_threads_and_shared_memory_are_checked_against_the_hierarchy() -> None:
    from tilecraft.dtypes import DType
    from tilecraft.errors import LoweringError
    from tilecraft.kernel_ir import Allocate, Buffer, For, Kernel, LoopKind, Store
    from tilecraft.kernel_ir.verify import verify_kernel
    from tilecraft.te import Var, const

    spec = _spec(threads=_threads())   # 256 threads, 32 KB of local memory per work-group
    A = Buffer("A", (32, 16), DType.FLOAT32)
    x, y = Var("x"), Var("y")
    store = Store(A, (y, x), const(1.0))
    block = For(y, const(32), LoopKind.BOUND, For(x, const(16), LoopKind.BOUND, store,
                                                  axis="local_id.x"), axis="local_id.y")
    with pytest.raises(LoweringError, match="the block has 512 threads but toy_cl runs at "
                                            "most 256 per block"):
        verify_kernel(Kernel("big_block", (A,), ("A",), block), spec)
    tile = Buffer("T", (96, 96), DType.FLOAT32, level="local")
    with pytest.raises(LoweringError, match=r"local allocations take 36864 bytes but a block of "
                                            r"toy_cl gets at most 32768"):
        verify_kernel(Kernel("big_tile", (A,), ("A",), Allocate(tile, Store(
            A, (const(0), const(0)), const(1.0)))), spec)


def test_residency_is_looked_up_by_architecture() -> None:
    threads = ThreadHierarchy(**_threads(residency=[
        RESIDENCY, {**RESIDENCY, "architecture": "gen2", "register_allocation_unit": 256,
                    "shared_allocation_unit": 128, "shared_bytes_reserved_per_block": 1024}]))
    assert threads.architectures == ("gen1", "gen2")
    gen2 = threads.residency_for("gen2")
    # 37 registers x 16 lanes = 592, in units of 256 -> 768; 1000 + 1024 bytes in units of 128
    assert gen2.allocated_registers_per_subgroup(37, 16) == 768
    assert gen2.allocated_shared_bytes(1000) == 2048
    assert threads.residency_for("gen1").allocated_shared_bytes(1000) == 1000
    assert gen2.max_subgroups(16) == 64
    with pytest.raises(TargetError, match="no residency limits for architecture 'gen3'; the "
                                          "spec's architectures are gen1, gen2"):
        threads.residency_for("gen3")
    with pytest.raises(TargetError, match="the spec declares no residency"):
        ThreadHierarchy(**_threads()).residency_for("gen1")


def test_nvidia_spec_declares_a100_and_h100_residency() -> None:
    threads = get_target("nvidia_tc").spec.threads
    assert threads.architectures == ("sm_80", "sm_90")
    a100, h100 = threads.residency_for("sm_80"), threads.residency_for("sm_90")
    assert a100.shared_bytes == 164 * 1024 and h100.shared_bytes == 228 * 1024
    assert a100.max_shared_bytes_per_block == threads.max_shared_bytes_per_block == 163 * 1024
    assert h100.max_shared_bytes_per_block == 227 * 1024
    assert a100.max_subgroups(threads.subgroup_size) == 64 == h100.max_subgroups(32)
