"""The target object: spec from this machine, availability, discovery, generated assembly,
host facts and the timing helper."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import statistics

import numpy as np
import pytest
from tilecraft_x86_avx512 import host as host_module
from tilecraft_x86_avx512 import spec as spec_module
from tilecraft_x86_avx512 import target as target_module
from tilecraft_x86_avx512.host import HostInfo, parse_size, read_caches, read_cpuinfo
from tilecraft_x86_avx512.runtime import split_range, time_kernel
from tilecraft_x86_avx512.spec import build_spec
from tilecraft_x86_avx512.target import X86Avx512Target
from x86_kernels import buffer, kernel, load, loop, store, vloop, zeros_for

import tilecraft as tc
from tilecraft.errors import TargetError
from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.lower import LoweringOptions
from tilecraft.target.spec import TARGET_API_VERSION, EvaluationMode, SchedulePrimitive
from tilecraft.te import Var


def test_spec_describes_this_machine(target):
    spec = target.spec
    assert spec.name == "x86_avx512" and spec.api_version == TARGET_API_VERSION
    assert spec.memory.names == ("DRAM", "L3", "L2", "L1", "register")
    assert spec.memory.outermost.size_bytes is None
    assert spec.memory.innermost.size_bytes == 32 * 64
    caches = {cache.name: cache for cache in read_caches()}
    for name in ("L1", "L2", "L3"):
        level = spec.memory.level(name)
        assert (level.size_bytes, level.associativity, level.line_bytes) == \
            (caches[name].size_bytes, caches[name].ways, caches[name].line_bytes)
    assert spec.memory.level("L3").shared_by_cores
    assert spec.compute.vector_bits == 512 and spec.compute.lanes("float32") == 16
    assert spec.compute.cores == host_module.usable_cores()
    assert 0.5e9 < spec.compute.frequency_hz < 7e9
    assert set(spec.loop_kinds) == {LoopKind.SERIAL, LoopKind.PARALLEL, LoopKind.VECTOR,
                                    LoopKind.UNROLLED}
    assert {p.value for p in spec.primitives} == {
        "split", "fuse", "reorder", "tile", "unroll", "vectorize", "inline", "compute_at",
        "parallel", "cache"}
    assert SchedulePrimitive.BIND not in spec.primitives
    assert spec.evaluation is EvaluationMode.MEASURE
    flags = read_cpuinfo()[1]
    expected = ["fma_f32x16", "fma_f32x16_bcast"] + \
        ["vpdpbusd"] * ("avx512_vnni" in flags) + ["vdpbf16ps"] * ("avx512_bf16" in flags)
    assert [i.name for i in spec.intrinsics] == expected  # what this CPU can run
    options = LoweringOptions.from_spec(spec)
    assert options.param_level == "DRAM" and options.register_level == "register"


def test_spec_for_another_host():
    small = HostInfo("tiny", 1, 2.0e9, "test", (host_module.CacheLevel("L1", 32768, False),
                                                  host_module.CacheLevel("L2", 262144, False)),
                     frozenset())
    spec = build_spec(small)
    assert spec.memory.names == ("DRAM", "L2", "L1", "register")
    assert spec.compute.peak_flops("float32") == 2 * 1 * 2 * 16 * 2.0e9  # nothing measured
    assert spec.memory.outermost.bandwidth_bytes_per_cycle == \
        spec_module.ESTIMATED_BYTES_PER_CYCLE["DRAM"]
    measured = build_spec(dataclasses.replace(small, fma_flops_per_core=60e9,
                                              dram_bytes_per_second=30e9))
    assert measured.compute.peak_flops("float32") == 60e9
    assert measured.memory.outermost.bandwidth_bytes_per_cycle == 15.0


def test_available_here_and_the_reason_when_not(target, monkeypatch):
    flags = read_cpuinfo()[1]
    availability = target.available()
    assert availability.codegen and availability.emulate
    assert availability.execute == ("avx512f" in flags and availability.build)
    target_module._availability.cache_clear()
    monkeypatch.setattr(target_module, "read_cpuinfo", lambda: ("old CPU", frozenset({"avx2"})))
    try:
        without = X86Avx512Target().available()
        assert not without.execute and "no AVX-512F" in without.reasons["execute"]
        with pytest.raises(TargetError, match="cannot execute on this machine: .*AVX-512F"):
            X86Avx512Target().load_shared_library("unused.so")
    finally:
        target_module._availability.cache_clear()


def test_discovered_through_the_entry_point():
    entry_points = importlib.metadata.entry_points(group="tilecraft.targets")
    (entry,) = [ep for ep in entry_points if ep.name == "x86_avx512"]
    assert entry.value == "tilecraft_x86_avx512:make_target"
    assert isinstance(entry.load()(), X86Avx512Target)
    assert tc.get_target("x86_avx512").name == "x86_avx512"


def test_vectorised_loop_is_avx512(native):
    n = 1000
    x, y = buffer("X", (n,)), buffer("Y", (n,))
    i = Var("i")
    source = native.codegen(kernel("axpy", [x, y], ["Y"], vloop(i, n, store(
        y, (i,), load(x, i) * 2.5 + load(y, i)))))
    assert source.language == "llvm-ir" and source.entry == "axpy"
    assert "<16 x float>" in source.text
    assembly = native.assembly(source)
    assert "%zmm" in assembly
    assert "vfmadd" in assembly  # contracted multiply-add on 16 lanes


def test_emulate_agrees_with_native_code(native):
    rows, cols = 9, 21
    x, y = buffer("X", (rows, cols)), buffer("Y", (rows, cols))
    i, j = Var("i"), Var("j")
    kern = kernel("emul", [x, y], ["Y"], loop(i, rows, vloop(j, cols, store(
        y, (i, j), (load(x, i, j) - 1.0) * (i * cols + j).astype("float32"))),
        LoopKind.PARALLEL))
    data = np.random.default_rng(20).standard_normal((rows, cols)).astype(np.float32)
    emulated, compiled = zeros_for(kern, X=data), zeros_for(kern, X=data)
    native.emulate(kern, emulated)
    native.compile_kernel(kern)(compiled)
    np.testing.assert_array_equal(emulated["Y"], compiled["Y"])


def test_build_is_cached_by_source(native):
    x = buffer("X", (3,))
    i = Var("i")
    source = native.codegen(kernel("cached", [x], ["X"], loop(i, 3, store(x, (i,), load(x, i)))))
    first, second = native.build(source), native.build(source)
    assert first.handle is second.handle and first.meta["source_hash"]


def test_time_kernel(native):
    n = 4096
    x, y = buffer("X", (n,)), buffer("Y", (n,))
    i = Var("i")
    kern = kernel("timed", [x, y], ["Y"], vloop(i, n, store(y, (i,), load(x, i) + 1.0)))
    times = time_kernel(native.compile_kernel(kern), zeros_for(kern), repeat=5)
    assert len(times) == 5 and all(0 < t < 1 for t in times)
    assert statistics.median(times) > 0


# host facts ----------------------------------------------------------------------------------
def test_cache_sizes_from_sysfs(tmp_path):
    for index, (level, kind, size, shared) in enumerate([
            (1, "Data", "32K", "0"), (1, "Instruction", "32K", "0"), (2, "Unified", "512K", "0"),
            (3, "Unified", "16384K", "0-7")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
        (folder / "shared_cpu_list").write_text(f"{shared}\n")
    caches = read_caches(tmp_path)
    assert [(c.name, c.size_bytes, c.shared_by_cores) for c in caches] == [
        ("L1", 32768, False), ("L2", 524288, False), ("L3", 16 * 1024 * 1024, True)]
    assert [c.name for c in read_caches(tmp_path / "missing")] == ["L1", "L2", "L3"]
    assert parse_size("2M") == 2 * 1024 * 1024


def test_cpuinfo_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse2 avx512f "
                    "avx512bw\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    model, flags = read_cpuinfo(info)
    assert model == "Test CPU 9000" and {"avx512f", "avx512bw"} <= flags
    assert read_cpuinfo(tmp_path / "missing") == ("unknown x86 CPU", frozenset())


def test_frequency_override_and_measurement(monkeypatch):
    monkeypatch.setenv("TILECRAFT_X86_FREQ_GHZ", "3.5")
    assert host_module.estimate_frequency() == (3.5e9, "TILECRAFT_X86_FREQ_GHZ")
    monkeypatch.setenv("TILECRAFT_X86_FREQ_GHZ", "fast")
    with pytest.raises(TargetError, match="TILECRAFT_X86_FREQ_GHZ='fast' is not a number"):
        host_module.estimate_frequency()
    monkeypatch.setenv("TILECRAFT_X86_FREQ_GHZ", "400")
    with pytest.raises(TargetError, match="not a plausible clock"):
        host_module.estimate_frequency()
    assert 0.5e9 < host_module.measure_frequency_hz(blocks=500, runs=3) < 7e9


def test_split_range():
    assert split_range(5, 2) == [(0, 3), (3, 5)]
    assert split_range(1, 4) == [(0, 1)]
    assert split_range(0, 2) == [(0, 0)]


def test_thread_count_override(monkeypatch):
    from tilecraft_x86_avx512.runtime import default_threads

    monkeypatch.setenv("TILECRAFT_X86_THREADS", "3")
    assert default_threads() == 3 and X86Avx512Target().threads == 3
    assert X86Avx512Target(threads=1).threads == 1
    monkeypatch.setenv("TILECRAFT_X86_THREADS", "many")
    with pytest.raises(TargetError, match="TILECRAFT_X86_THREADS='many' is not an integer"):
        default_threads()
    monkeypatch.delenv("TILECRAFT_X86_THREADS")
    assert default_threads() == host_module.usable_cores()
