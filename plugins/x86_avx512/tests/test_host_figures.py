"""Machine figures measured, not assumed: cache geometry from /sys, the probe's figures cached
on disk (and distrusted when damaged or foreign), the spec and the block-size model reading
them, ``tilecraft targets --probe``, and no machine's figure left in the planning code."""

from __future__ import annotations

import ast
import dataclasses
import json
import math
from pathlib import Path

import pytest
from tilecraft_x86_avx512 import amx, figures_cache, probe
from tilecraft_x86_avx512 import host as host_module
from tilecraft_x86_avx512 import spec as spec_module
from tilecraft_x86_avx512.fusion import BlockingMachine, fuse_chains
from tilecraft_x86_avx512.host import (
    CACHES_ASSUMED,
    CacheLevel,
    HostInfo,
    caches_source,
    figures_report,
    read_caches,
)
from tilecraft_x86_avx512.probe import ProbeResult
from tilecraft_x86_avx512.spec import build_spec
from tilecraft_x86_avx512.target import X86Avx512Target

from tilecraft import cli, ops, te
from tilecraft.fusion import plan_fusion
from tilecraft.graph import Graph
from tilecraft.lower.options import LoweringOptions
from tilecraft.target import registry
from tilecraft.target.base import Availability
from tilecraft.target.registry import TargetInfo, TargetStatus

PLUGIN = Path(spec_module.__file__).parent
FLAGS = frozenset({"avx512f", "fma"})
CACHES = (CacheLevel("L1", 32768, False, ways=8), CacheLevel("L2", 1 << 20, False, ways=8),
          CacheLevel("L3", 32 << 20, True, ways=16))
FIGURES = ProbeResult(fma_flops_per_core=1.2e11, dram_bytes_per_second=3.0e10,
                      l3_bytes_per_second=8.0e10, l2_bytes_per_second=1.2e11,
                      l1_bytes_per_second=2.4e11)


def fake_host(**figures: object) -> HostInfo:
    return HostInfo("Test CPU 9000", 2, 4.0e9, "test", CACHES, FLAGS, **figures)


class CountingProbe:
    """A probe returning fixed figures and counting its calls (no real measurement)."""

    def __init__(self, result: ProbeResult = FIGURES) -> None:
        self.result, self.calls = result, 0

    def __call__(self, sizes):
        self.calls += 1
        assert dict(sizes)["L2"] == 1 << 20
        return self.result


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(figures_cache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(figures_cache, "fallback_dir", lambda: tmp_path / "fallback")
    monkeypatch.delenv(figures_cache.PROBE_ENV, raising=False)
    return tmp_path / "cache"


# cache geometry from /sys ------------------------------------------------------------------------
def _sys_tree(root: Path, entries) -> Path:
    for index, (level, kind, size, ways, line) in enumerate(entries):
        folder = root / f"index{index}"
        folder.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size),
                            ("ways_of_associativity", ways), ("coherency_line_size", line),
                            ("shared_cpu_list", "0-7" if level == 3 else "0")):
            if value is not None:
                (folder / name).write_text(f"{value}\n")
    return root


def test_ways_and_line_size_from_sysfs(tmp_path):
    root = _sys_tree(tmp_path, [(1, "Data", "48K", 12, 64), (1, "Instruction", "32K", 8, 64),
                                (2, "Unified", "2048K", 16, 64), (3, "Unified", "30M", 0, 64)])
    caches = read_caches(root)
    assert [(c.name, c.size_bytes, c.ways, c.line_bytes, c.shared_by_cores) for c in caches] \
        == [("L1", 49152, 12, 64, False), ("L2", 2 << 20, 16, 64, False),
            ("L3", 30 << 20, None, 64, True)]  # 0 ways: the kernel could not say
    assert caches_source(root) == "/sys"


def test_geometry_that_does_not_divide_into_sets_drops_the_ways(tmp_path):
    root = _sys_tree(tmp_path, [(1, "Data", "32K", 12, 64), (2, "Unified", "1024K", None, 128)])
    l1, l2 = read_caches(root)
    assert (l1.ways, l1.line_bytes) == (None, 64)  # 32 KiB is no whole number of 12-way sets
    assert (l2.ways, l2.line_bytes) == (None, 128)


def test_no_cache_description_is_assumed_and_the_spec_says_so(tmp_path, monkeypatch):
    assert [c.name for c in read_caches(tmp_path)] == ["L1", "L2", "L3"]
    assert caches_source(tmp_path) == CACHES_ASSUMED
    spec = build_spec(dataclasses.replace(fake_host(), caches_source=CACHES_ASSUMED))
    assert "caches from assumed (/sys describes no cache)" in spec.description


def test_spec_levels_carry_ways_and_lines():
    spec = build_spec(fake_host())
    assert [(spec.memory.level(n).associativity, spec.memory.level(n).sets)
            for n in ("L1", "L2", "L3")] == [(8, 64), (8, 2048), (16, 32768)]


# the spec from the figures -----------------------------------------------------------------------
def test_measured_figures_drive_the_spec():
    spec = build_spec(fake_host(**{field.name: getattr(FIGURES, field.name)
                                   for field in dataclasses.fields(FIGURES)},
                                figures_source="measured"))
    assert spec.compute.peak_flops("float32") == 2 * 1.2e11
    assert spec.compute.flops_per_core("bfloat16") == 2 * 1.2e11  # twice the lanes, same units
    assert [spec.memory.level(n).bandwidth_bytes_per_cycle
            for n in ("DRAM", "L3", "L2", "L1")] == [7.5, 20.0, 30.0, 60.0]
    assert "figures measured; fp32 peak 120 GFLOP/s per core" in spec.description


def test_the_tile_path_is_declared_where_the_measured_rates_make_it_pay(monkeypatch):
    """The split path's micro-kernels are in the spec where the tile unit's rate over the six
    part products is at least MIN_SPLIT_OVER_FMA the FMA rate, or where a rate is unknown; the
    description gives the rate and the choice; TILECRAFT_X86_AMX=1 declares them anyway."""
    monkeypatch.delenv(amx.SWITCH, raising=False)
    split = {"amx_split_f32", "amx_split_f32_acc"}

    def declared(**figures: object) -> tuple[set[str], str]:
        spec = build_spec(fake_host(fma_flops_per_core=1.56e11, **figures))
        return split & {decl.name for decl in spec.micro_kernels}, spec.description

    names, text = declared(amx_bf16_flops_per_core=1.18e12)   # measured 0.65x the FMA path
    assert not names and "AMX bf16 1.18 TFLOP/s per core, float32 products on FMA" in text
    names, text = declared(amx_bf16_flops_per_core=3.0e12)    # measured 1.2-1.3x
    assert names == split and "float32 products on AMX tiles" in text
    names, text = declared()
    assert names == split and "AMX" not in text
    monkeypatch.setenv(amx.SWITCH, "1")
    assert declared(amx_bf16_flops_per_core=1.18e12)[0] == split


def test_the_tile_rate_is_cached_with_the_other_figures(cache_dir):
    with_tiles = dataclasses.replace(FIGURES, amx_bf16_flops_per_core=1.2e12)
    figures_cache.host_figures("Test CPU", FLAGS, CACHES, probe=CountingProbe(with_tiles))
    cached = figures_cache.host_figures("Test CPU", FLAGS, CACHES, probe=CountingProbe())
    assert cached.source.startswith("cached") and cached.amx_bf16_flops_per_core == 1.2e12
    assert not probe.plausible_figures(dataclasses.replace(FIGURES, amx_bf16_flops_per_core=5.0))


def test_without_figures_the_spec_estimates_and_says_so():
    spec = build_spec(fake_host(figures_source="estimated"))
    assert spec.compute.peak_flops("float32") == 2 * 2 * 2 * 16 * 4.0e9  # the ISA's formula
    assert [spec.memory.level(n).bandwidth_bytes_per_cycle for n in ("DRAM", "L3", "L2", "L1")] \
        == [spec_module.ESTIMATED_BYTES_PER_CYCLE[n] for n in ("DRAM", "L3", "L2", "L1")]
    assert "figures estimated from the clock and the ISA" in spec.description
    partly = build_spec(fake_host(fma_flops_per_core=1e11, figures_source="data"))
    assert "fp32 FMA rate data, the rest estimated" in partly.description


def test_chain_blocking_reads_the_spec():
    measured = build_spec(fake_host(fma_flops_per_core=1.2e11, l3_bytes_per_second=8e10))
    machine = BlockingMachine.from_spec(measured, threads=3)
    assert machine == BlockingMachine(l1_bytes=32768, l2_bytes=1 << 20, threads=3)
    # a chain whose intermediate tile fits half of this L2 but not half of a 4 KiB one, with
    # weights small against its intermediate (so fusing pays: chain_planning._chain_traffic)
    a, b = te.placeholder((1024, 64), name="A"), te.placeholder((64, 512), name="B")
    d = te.placeholder((512, 64), name="D")
    graph = Graph.from_outputs([ops.matmul(ops.matmul(a, b, name="T"), d, name="E")])
    small = build_spec(HostInfo("Test CPU 9000", 2, 4.0e9, "test", tuple(
        dataclasses.replace(c, size_bytes={"L1": 2048, "L2": 4096}.get(c.name, c.size_bytes))
        for c in CACHES),
        FLAGS, fma_flops_per_core=1.2e11, l3_bytes_per_second=8e10))
    [note] = fuse_chains(graph, LoweringOptions.from_spec(small),
                         BlockingMachine.from_spec(small, threads=3), plan_fusion(graph, small))
    assert not note.computes and "more than half of L2 (2 KB)" in note.notes[0]
    fused = fuse_chains(graph, LoweringOptions.from_spec(measured), machine,
                        plan_fusion(graph, measured))
    assert fused[0].computes == ("T", "E")


# the on-disk cache -------------------------------------------------------------------------------
def test_measured_once_then_read_from_the_cache(cache_dir):
    probe_ = CountingProbe()
    first = figures_cache.host_figures("Test CPU", FLAGS, CACHES, probe=probe_)
    second = figures_cache.host_figures("Test CPU", FLAGS, CACHES, probe=probe_)
    assert probe_.calls == 1
    assert first.fma_flops_per_core == second.fma_flops_per_core == FIGURES.fma_flops_per_core
    assert first.source.startswith("measured, cached in") and second.source.startswith("cached")
    assert [p.name for p in cache_dir.iterdir()] == [
        f"x86_avx512-figures-{figures_cache.figures_key('Test CPU', FLAGS)}.json"]
    figures_cache.host_figures("Test CPU", FLAGS, CACHES, refresh=True, probe=probe_)
    assert probe_.calls == 2


def _valid_file(cache_dir) -> Path:
    figures_cache.host_figures("Test CPU", FLAGS, CACHES, probe=CountingProbe())
    [path] = cache_dir.iterdir()
    return path


@pytest.mark.parametrize("damage", [
    "garbage", "truncated", "not an object", "NaN figure", "negative figure", "string figure",
    "missing figure", "another CPU", "other flags", "older probe", "binary"])
def test_a_damaged_or_foreign_cache_file_is_measured_again(cache_dir, damage):
    path = _valid_file(cache_dir)
    data = json.loads(path.read_text())
    text = {"garbage": "{{{ not json", "truncated": path.read_text()[:40],
            "not an object": "[1, 2, 3]"}.get(damage)
    if damage == "binary":
        path.write_bytes(b"\xff\xfe\x00\x81")
    elif text is not None:
        path.write_text(text)
    else:
        changes = {"NaN figure": {"fma_flops_per_core": math.nan},
                   "negative figure": {"dram_bytes_per_second": -1.0},
                   "string figure": {"l3_bytes_per_second": "fast"},
                   "missing figure": {"l1_bytes_per_second": None},
                   "another CPU": {"model_name": "Other CPU"},
                   "other flags": {"flags_sha256": "0" * 64},
                   "older probe": {"probe_version": figures_cache.PROBE_VERSION - 1}}[damage]
        data.update(changes)
        path.write_text(json.dumps({k: v for k, v in data.items() if v is not None}))
    assert figures_cache.read_cached(path, "Test CPU", FLAGS) is None
    probe_ = CountingProbe(dataclasses.replace(FIGURES, fma_flops_per_core=9.9e10))
    fresh = figures_cache.host_figures("Test CPU", FLAGS, CACHES, probe=probe_)
    assert probe_.calls == 1 and fresh.fma_flops_per_core == 9.9e10
    assert figures_cache.read_cached(path, "Test CPU", FLAGS).fma_flops_per_core == 9.9e10
    assert not [p for p in cache_dir.iterdir() if p.suffix == ".tmp"]  # nothing left half


def test_unwritable_cache_directory_falls_back_then_still_measures(tmp_path, monkeypatch):
    monkeypatch.delenv(figures_cache.PROBE_ENV, raising=False)
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv(figures_cache.CACHE_DIR_ENV, str(blocker / "cache"))
    monkeypatch.setattr(figures_cache, "fallback_dir", lambda: tmp_path / "fallback")
    probe_ = CountingProbe()
    figures = figures_cache.host_figures("Test CPU", FLAGS, CACHES, probe=probe_)
    assert figures.source.startswith(f"measured, cached in {tmp_path / 'fallback'}")
    again = figures_cache.host_figures("Test CPU", FLAGS, CACHES, probe=probe_)
    assert probe_.calls == 1 and again.source.startswith("cached in")
    monkeypatch.setattr(figures_cache, "fallback_dir", lambda: blocker / "fallback")
    figures = figures_cache.host_figures("Other CPU", FLAGS, CACHES, probe=probe_)
    assert figures.source == "measured (cache not writable)" and probe_.calls == 2


def test_probing_disabled_or_impossible_or_failing(cache_dir, monkeypatch):
    probe_ = CountingProbe()
    assert figures_cache.host_figures("Old CPU", frozenset({"avx2"}), CACHES,
                                      probe=probe_) is None  # no AVX-512F: nothing to run
    monkeypatch.setenv(figures_cache.PROBE_ENV, "0")
    assert figures_cache.host_figures("Test CPU", FLAGS, CACHES, probe=probe_) is None
    assert probe_.calls == 0
    assert figures_cache.host_figures("Test CPU", FLAGS, CACHES, refresh=True,
                                      probe=probe_) is not None  # asked for explicitly
    monkeypatch.delenv(figures_cache.PROBE_ENV)

    def broken(sizes):
        raise RuntimeError("llvmlite exploded")

    with pytest.warns(RuntimeWarning, match="probe of this CPU failed.*llvmlite exploded"):
        assert figures_cache.host_figures("Another CPU", FLAGS, CACHES, probe=broken) is None


def test_figures_report():
    report = figures_report(fake_host(fma_flops_per_core=1.2e11, l1_bytes_per_second=2.4e11,
                                      figures_source="measured"))
    assert report["fp32 FMA peak per core"] == "120.0 GFLOP/s"
    assert report["L1 read per core"] == "240.0 GB/s"
    assert report["DRAM read per core"] == "not measured"
    assert report["L1 cache"] == "32 KiB, 8-way, 64-byte lines"


# tilecraft targets --probe -----------------------------------------------------------------------
def test_target_probe_measures_again_and_rebuilds_the_spec(cache_dir, monkeypatch):
    probe_ = CountingProbe()
    monkeypatch.setattr(figures_cache, "measure", probe_)
    monkeypatch.setattr(host_module, "read_caches", lambda: CACHES)
    monkeypatch.setattr(host_module, "read_cpuinfo", lambda: ("Test CPU", FLAGS))
    host_module.host_info.cache_clear()
    try:
        target = X86Avx512Target()
        report = target.probe()
        assert probe_.calls == 1 and report["fp32 FMA peak per core"] == "120.0 GFLOP/s"
        assert report["figures from"].startswith("measured, cached in")
        assert target.spec.compute.peak_flops("float32") == target.spec.compute.cores * 1.2e11
        assert X86Avx512Target(cpu="znver4").probe() == {}  # a named CPU's figures are data
    finally:
        host_module.host_info.cache_clear()


class _Probed:
    def __init__(self, figures=None, error=None):
        self.figures, self.error = figures, error

    def variants(self):
        return {}

    def probe(self):
        if self.error:
            raise self.error
        return self.figures


def test_cli_targets_probe_prints_each_targets_figures(monkeypatch, capsys):
    available = Availability(codegen=True, build=True, execute=True)
    monkeypatch.setattr(registry, "_registered", {})
    monkeypatch.setattr(registry, "_discovered", [
        TargetInfo(name="cpu", status=TargetStatus.OK, availability=available,
                   target=_Probed({"peak": "1.0 GFLOP/s", "DRAM read": "2.0 GB/s"})),
        TargetInfo(name="flaky", status=TargetStatus.OK, availability=available,
                   target=_Probed(error=OSError("perf counters unavailable"))),
        TargetInfo(name="quiet", status=TargetStatus.OK, availability=available,
                   target=_Probed({}))])
    assert cli.main(["targets", "--probe"]) == 0
    out = capsys.readouterr().out
    assert "cpu: measured figures\n  peak       1.0 GFLOP/s\n  DRAM read  2.0 GB/s" in out
    assert "flaky: probe failed: OSError: perf counters unavailable" in out
    assert "quiet" not in out.split("CAPABILITY")[-1].split("\n\n", 1)[-1]


# the probe itself (real measurement: only plausibility) ------------------------------------------
def test_probe_measures_plausible_figures(native):
    caches = {c.name: c.size_bytes for c in read_caches()}
    result = probe.measure(list(caches.items()))
    assert probe.plausible_figures(result)
    assert result.l1_bytes_per_second > result.dram_bytes_per_second
    # between one 256-bit FMA unit and two 512-bit ones at a 1-7 GHz clock
    assert 16 * 1e9 <= result.fma_flops_per_core <= 64 * 7e9
    if amx.amx_permitted() and {"amx_tile", "amx_bf16"} <= host_module.read_cpuinfo()[1]:
        # at most 1024 bfloat16 operations a cycle (one 16x16x32 multiply per 16 cycles)
        assert 1e10 <= result.amx_bf16_flops_per_core <= 1024 * 7e9
    else:
        assert result.amx_bf16_flops_per_core is None


# no machine's figure in the planning code --------------------------------------------------------
#: the plugin's modules that model the machine or plan with its figures
MODEL_MODULES = ("spec.py", "fusion.py", "gemm_template.py", "conv_variants.py", "target.py",
                 "parallel.py")
#: cache sizes of particular x86 cores: planning reads them from the spec
CACHE_SIZES = {32 * 1024, 48 * 1024, 64 * 1024, 256 * 1024, 512 * 1024, 1 << 20, 1280 * 1024,
               2 << 20, 16 << 20, 30 << 20, 32 << 20, 36 << 20, 96 << 20}


def _constant(node: ast.AST) -> float | None:
    """The value of a numeric literal or of an arithmetic expression of literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = _constant(node.left), _constant(node.right)
        if left is None or right is None:
            return None
        operators = {ast.Mult: lambda a, b: a * b, ast.LShift: lambda a, b: int(a) << int(b),
                     ast.Pow: lambda a, b: a ** b}
        operator = operators.get(type(node.op))
        return operator(left, right) if operator else None
    return None


def _in_kib(node: ast.AST) -> bool:
    """Whether an expression is written in KiB / MiB (``48 * 1024``, ``1 << 20``)."""
    if not isinstance(node, ast.BinOp):
        return False
    if isinstance(node.op, ast.LShift):
        return _constant(node.right) in (10, 20)
    return any(_constant(side) == 1024 or _in_kib(side) for side in (node.left, node.right))


def machine_figures_in(source: str) -> list[str]:
    """Literals in code (docstrings and their examples are strings: not looked at) that look
    like a machine's figure: a rate of 1e9 or more per second (GFLOP/s, GB/s, Hz; 1e9 itself is
    the unit), a cache size of a particular core (a literal, or written in KiB / MiB), or 262
    (Zen 5's GFLOP/s per core)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        value = _constant(node)
        if value is None:
            continue
        cache_size = value in CACHE_SIZES and (isinstance(node, ast.Constant) or _in_kib(node))
        if (value > 1e9 and value != 1e12) or cache_size or value == 262:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_guard_finds_machine_figures():
    assert machine_figures_in("PEAK = 262e9\nL1 = 48 * 1024\nL2 = 1 << 20\nX = 262\n"
                              "GHZ = x / 1e9\nFLOPS = 2 * 64 * 64 * 64\nL1 = 49152\n") == [
        "line 1: 262000000000.0", "line 2: 48 * 1024", "line 3: 1 << 20", "line 4: 262",
        "line 7: 49152"]


@pytest.mark.parametrize("module", MODEL_MODULES)
def test_no_machine_figure_in_the_models(module):
    assert machine_figures_in((PLUGIN / module).read_text()) == [], (
        f"{module} hard-codes a machine's figure: read it from the spec (target.spec.memory / "
        "spec.compute), which the host's probe or a named CPU's data fills in")


@pytest.mark.parametrize("value, enabled", [("0", False), ("off", False), ("no", False),
                                            ("1", True), ("yes", True)])
def test_probe_switch(monkeypatch, value, enabled):
    monkeypatch.setenv(figures_cache.PROBE_ENV, value)
    assert figures_cache.probing_enabled() is enabled
