"""Target spec models: memory hierarchy, compute units, the spec itself, YAML loading and the
readable errors of invalid declarations."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from tilecraft.dtypes import DType
from tilecraft.errors import PluginError, TargetError
from tilecraft.kernel_ir import LoopKind
from tilecraft.target import (
    ComputeUnits,
    EvaluationMode,
    MemoryHierarchy,
    MemoryKind,
    MemoryLevel,
    SchedulePrimitive,
    TargetSpec,
    load_spec,
)
from tilecraft.target.spec import TARGET_API_VERSION

DOT4 = {
    "name": "dot4_i8",
    "latency_cycles": 4,
    "throughput_per_cycle": 1,
    "compute": {
        "loops": [{"name": "i1", "extent": 4, "kind": "spatial"},
                  {"name": "r1", "extent": 4, "kind": "reduce"}],
        "operands": [
            {"name": "Src1", "role": "src", "dtype": "int8", "shape": [4, 4],
             "index": ["i1", "r1"]},
            {"name": "Src2", "role": "src", "dtype": "int8", "shape": [4, 4],
             "index": ["i1", "r1"]},
            {"name": "Dst", "role": "dst", "dtype": "int32", "shape": [4], "index": ["i1"]}],
        "semantics": "Dst[i1] += cast(int32, Src1[i1, r1]) * cast(int32, Src2[i1, r1])",
    },
    "memory": {"moves": [
        {"operand": "Src1", "from_level": "SRAM", "to_level": "registers",
         "address": {"base": "a", "strides": ["lda", 1]}},
        {"operand": "Src2", "from_level": "SRAM", "to_level": "registers",
         "address": {"base": "b", "strides": ["ldb", 1]}},
        {"operand": "Dst", "from_level": "registers", "to_level": "SRAM",
         "instruction": "store_i32x4", "address": {"base": "c", "strides": [1]}}]},
}

SPEC: dict[str, Any] = {
    "name": "toy",
    "api_version": TARGET_API_VERSION,
    "version": "0.1",
    "memory": {"levels": [
        {"name": "DRAM", "size_bytes": None, "bandwidth_bytes_per_cycle": 16, "kind": "dram"},
        {"name": "SRAM", "size_bytes": 262144, "bandwidth_bytes_per_cycle": 64, "fan_out": 4},
        {"name": "registers", "size_bytes": 512, "bandwidth_bytes_per_cycle": 256,
         "kind": "registers"}]},
    "compute": {"cores": 4, "frequency_hz": 1.5e9, "vector_bits": 512, "fma_units_per_core": 2},
    "primitives": ["split", "reorder", "vectorize", "parallel"],
    "fixed_decisions": {"vector_lanes": 16, "layout": "row_major", "double_buffer": True},
    "loop_kinds": ["serial", "parallel", "vector"],
    "intrinsics": [DOT4],
    "evaluation": "both",
    "capabilities": {"executes_natively": True, "models_performance": True},
}


def spec_data(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(SPEC)
    data.update(changes)
    return data


def error_of(data: dict[str, Any], **kwargs: Any) -> str:
    with pytest.raises(PluginError) as info:
        load_spec(data, **kwargs)
    return str(info.value)


# memory --------------------------------------------------------------------------------------


def test_hierarchy_helpers_and_instances() -> None:
    spec = load_spec(spec_data())
    memory = spec.memory
    assert memory.names == ("DRAM", "SRAM", "registers")
    assert memory.outermost.name == "DRAM" and memory.innermost.name == "registers"
    assert memory.level("SRAM").size_bytes == 262144
    assert memory.level("DRAM").kind is MemoryKind.DRAM
    assert memory.level("SRAM").kind is MemoryKind.SCRATCHPAD  # the default
    assert memory.instances("DRAM") == 1 and memory.instances("registers") == 4
    assert memory.is_outer("DRAM", "registers") and not memory.is_outer("registers", "SRAM")
    assert "SRAM" in memory and "L2" not in memory
    with pytest.raises(TargetError, match="unknown memory level 'L2'; the levels are DRAM, SRAM"):
        memory.level("L2")


def test_level_may_hold() -> None:
    level = MemoryLevel(name="L0A", size_bytes=65536, bandwidth_bytes_per_cycle=512,
                        holds=["input"])
    assert level.may_hold("input") and not level.may_hold("output")
    assert MemoryLevel(name="UB", size_bytes=1, bandwidth_bytes_per_cycle=1).may_hold("x")


def test_inner_level_larger_than_outer_needs_the_flag() -> None:
    levels = [{"name": "shared", "size_bytes": 1024, "bandwidth_bytes_per_cycle": 64},
              {"name": "fragment", "size_bytes": 4096, "bandwidth_bytes_per_cycle": 256}]
    with pytest.raises(PluginError, match=r"levels\[1\] \(fragment\) has size_bytes 4096, "
                                          r"larger than the outer level shared"):
        MemoryHierarchy(levels=levels)
    levels[1]["allow_larger_than_outer"] = True
    assert MemoryHierarchy(levels=levels).innermost.size_bytes == 4096


@pytest.mark.parametrize(("levels", "message"), [
    ([], "at least 1 item"),
    ([{"name": "A", "size_bytes": 8, "bandwidth_bytes_per_cycle": 1},
      {"name": "A", "size_bytes": 4, "bandwidth_bytes_per_cycle": 1}],
     "memory level 'A' is declared twice"),
    ([{"name": "A", "size_bytes": 8, "bandwidth_bytes_per_cycle": 1},
      {"name": "B", "size_bytes": None, "bandwidth_bytes_per_cycle": 1}],
     r"levels\[1\] \(B\) is unbounded .* inside the bounded level A"),
    ([{"name": "A", "size_bytes": 0, "bandwidth_bytes_per_cycle": 1}],
     r"levels\[0\] \(A\)\.size_bytes: Input should be greater than or equal to 1"),
    ([{"name": "A", "size_bytes": 8, "bandwidth_bytes_per_cycle": 0}],
     "bandwidth_bytes_per_cycle: Input should be greater than 0"),
    ([{"name": "2nd", "size_bytes": 8, "bandwidth_bytes_per_cycle": 1}],
     "memory level name '2nd' is not a valid name"),
    ([{"name": "A", "size_bytes": "32KiB", "bandwidth_bytes_per_cycle": 1}],
     r"size_bytes: Input should be a valid integer \(got '32KiB'\)"),
    ([{"name": "A", "size_bytes": 8, "bandwidth_bytes_per_cycle": 1, "size": 8}],
     r"levels\[0\] \(A\)\.size: unknown field"),
])
def test_invalid_hierarchies_name_the_field(levels: list[Any], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        MemoryHierarchy(levels=levels)


# compute units ------------------------------------------------------------------------------


def test_lanes_and_peak_flops() -> None:
    units = ComputeUnits(cores=2, frequency_hz=4.1e9, vector_bits=512, fma_units_per_core=2)
    assert units.lanes(DType.FLOAT32) == 16
    assert units.lanes("int8") == 64 and units.lanes("bfloat16") == 32
    # Zen 5 figures of TOOLCHAINS.md: 64 flop/cycle/core
    assert units.peak_flops("float32") == pytest.approx(2 * 64 * 4.1e9)
    scalar = ComputeUnits(cores=1, frequency_hz=1e9, vector_bits=0, processing_elements=4096)
    assert scalar.lanes("float16") == 1
    assert scalar.peak_flops("float16") == pytest.approx(2 * 4096 * 1e9)
    narrow = ComputeUnits(cores=1, frequency_hz=1e9, vector_bits=8)
    assert narrow.lanes("float32") == 1  # at least one lane


@pytest.mark.parametrize(("fields", "message"), [
    ({"cores": 0}, "cores: Input should be greater than or equal to 1"),
    ({"vector_bits": 100}, "vector_bits 100 is not a whole number of bytes"),
    ({"cores": True}, r"cores: Input should be a valid integer \(got True\)"),
    ({"cores": 2.0}, r"cores: Input should be a valid integer \(got 2.0\)"),
    ({"frequency_hz": "1GHz"}, r"frequency_hz: Input should be a valid number"),
])
def test_invalid_compute_units(fields: dict[str, Any], message: str) -> None:
    data = {"cores": 1, "frequency_hz": 1e9, "vector_bits": 128} | fields
    with pytest.raises(PluginError, match=message):
        ComputeUnits(**data)


# the spec ----------------------------------------------------------------------------------


def test_spec_fields_are_typed() -> None:
    spec = load_spec(spec_data())
    assert spec.api_version == TARGET_API_VERSION == 1
    assert spec.primitives[0] is SchedulePrimitive.SPLIT
    assert spec.offers("vectorize") and not spec.offers(SchedulePrimitive.BIND)
    assert spec.loop_kinds == (LoopKind.SERIAL, LoopKind.PARALLEL, LoopKind.VECTOR)
    assert spec.expresses("vector") and not spec.expresses(LoopKind.PIPELINED)
    assert spec.evaluation is EvaluationMode.BOTH
    assert spec.fixed_decisions == {"vector_lanes": 16, "layout": "row_major",
                                    "double_buffer": True}
    assert isinstance(spec.fixed_decisions["double_buffer"], bool)
    assert spec.intrinsic("dot4_i8").latency_cycles == 4
    assert spec.compute.frequency_hz == 1.5e9


def test_spec_round_trips_through_dump_and_is_frozen() -> None:
    spec = load_spec(spec_data())
    assert load_spec(spec.model_dump(mode="json")) == spec
    assert TargetSpec.model_validate(spec.model_dump()) == spec
    assert hash(spec.memory) == hash(load_spec(spec_data()).memory)
    with pytest.raises(Exception, match="frozen"):
        spec.name = "other"  # type: ignore[misc]


def test_lookups_list_what_exists() -> None:
    spec = load_spec(spec_data())
    with pytest.raises(TargetError, match="declares no intrinsic 'vnni'; it declares dot4_i8"):
        spec.intrinsic("vnni")
    with pytest.raises(TargetError, match="declares no micro-kernel 'gemm'; it declares none"):
        spec.micro_kernel("gemm")


@pytest.mark.parametrize(("changes", "message"), [
    ({"primitives": ["split", "split"]}, "primitive 'split' is declared twice"),
    ({"primitives": ["split", "swizzle"]}, r"primitives\[1\]: Input should be 'split', 'fuse'"),
    ({"loop_kinds": []}, "loop_kinds: .*at least 1 item"),
    ({"loop_kinds": ["serial", "warp"]}, r"loop_kinds\[1\]: Input should be 'serial'"),
    ({"evaluation": "guess"}, "evaluation: Input should be 'measure', 'estimate' or 'both'"),
    ({"capabilities": {"executes_natively": True}},
     "evaluation 'both' needs a performance model, but capabilities.models_performance is "
     "false"),
    ({"capabilities": {"models_performance": True}},
     "evaluation 'both' measures on the device, but capabilities.executes_natively is false"),
    ({"fixed_decisions": {"tile": 1.5}}, r"fixed_decisions\.tile: Input should be a valid"),
    ({"api_version": 0}, "api_version: Input should be greater than or equal to 1"),
    ({"name": "my-chip"}, "target name 'my-chip' is not a valid name"),
    ({"intrinsics": [DOT4, DOT4]}, "intrinsic 'dot4_i8' is declared twice"),
    ({"colour": "red"}, "colour: unknown field"),
])
def test_invalid_specs_name_plugin_and_field(changes: dict[str, Any], message: str) -> None:
    text = error_of(spec_data(**changes), source="toy/spec.yaml", plugin="toy")
    assert text.startswith("invalid target spec of plugin 'toy' in toy/spec.yaml:")
    assert re.search(message, text), text


def test_capabilities_default_when_evaluation_allows() -> None:
    spec = load_spec(spec_data(evaluation="measure", capabilities={"executes_natively": True}))
    assert spec.capabilities.executes_natively and not spec.capabilities.emulates


def test_intrinsic_levels_must_exist_in_the_hierarchy() -> None:
    bad = copy.deepcopy(DOT4)
    bad["memory"]["moves"][0]["to_level"] = "fragment"
    text = error_of(spec_data(intrinsics=[bad]))
    assert "intrinsic dot4_i8: memory.moves[0].to_level 'fragment' is not a memory level of " \
           "this target; the levels are DRAM, SRAM, registers" in text


def test_nested_intrinsic_error_names_the_intrinsic_path() -> None:
    bad = copy.deepcopy(DOT4)
    bad["compute"]["semantics"] = "Dst[i1] += Src1[i1, r1] * Src2[i1, r1]"
    text = error_of(spec_data(intrinsics=[bad]))
    assert "intrinsics[0] (dot4_i8).compute.semantics:" in text
    assert "computes int8 values but Dst is int32; cast with cast(int32, ...)" in text


def test_every_error_is_listed_once() -> None:
    data = spec_data(version=3, compute={"cores": 0, "frequency_hz": 1e9, "vector_bits": 8})
    lines = error_of(data).splitlines()
    assert lines[1:] == ["  version: Input should be a valid string (got 3)",
                         "  compute.cores: Input should be greater than or equal to 1 (got 0)"]


def test_load_spec_rejects_non_mappings_and_passes_specs_through() -> None:
    spec = load_spec(spec_data())
    assert load_spec(spec) is spec
    with pytest.raises(PluginError, match="plugin x: target spec s.yaml must be a mapping of "
                                          "fields, got list"):
        load_spec([1, 2], source="s.yaml", plugin="x")  # type: ignore[arg-type]


# YAML -------------------------------------------------------------------------------------

YAML_SPEC = """\
name: yaml_toy
api_version: 1
version: "1.0"
memory:
  levels:
    - name: DRAM
      size_bytes: null
      bandwidth_bytes_per_cycle: 8
    - name: L1
      size_bytes: 32KiB
      bandwidth_bytes_per_cycle: 64
compute:
  cores: 1
  frequency_hz: 2.0e9
  vector_bits: 256
primitives: [split, vectorize]
loop_kinds: [serial, vector]
evaluation: estimate
capabilities: {models_performance: true}
"""


def test_from_yaml_reads_yaml_12_floats(tmp_path: Any) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(YAML_SPEC.replace("32KiB", "32768"))
    spec = TargetSpec.from_yaml(path)
    assert spec.compute.frequency_hz == 2.0e9  # PyYAML alone reads "2.0e9" as a string
    assert spec.memory.level("L1").size_bytes == 32768


def test_from_yaml_error_names_plugin_file_field_and_line(tmp_path: Any) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(YAML_SPEC)
    with pytest.raises(PluginError) as info:
        TargetSpec.from_yaml(path, plugin="tilecraft-yaml-toy")
    assert str(info.value) == (
        f"invalid target spec of plugin 'tilecraft-yaml-toy' in {path}:\n"
        "  memory.levels[1] (L1).size_bytes (line 10): Input should be a valid integer "
        "(got '32KiB')")


def test_from_yaml_reports_syntax_errors_and_missing_files(tmp_path: Any) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("name: [unclosed\nversion: 1\n")
    with pytest.raises(PluginError, match=rf"plugin p: target spec {path}:\d+ is not valid YAML"):
        TargetSpec.from_yaml(path, plugin="p")
    with pytest.raises(PluginError, match="cannot read target spec .*missing.yaml"):
        TargetSpec.from_yaml(tmp_path / "missing.yaml", plugin="p")
