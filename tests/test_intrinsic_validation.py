"""Load-time rejection of bad intrinsic declarations (issue 5, "bad input"): semantics that are
not a valid te program, shapes that disagree with the operands, a memory abstraction naming a
level the target does not have — each rejected when the declarations are loaded, in one
PluginError naming the plugin, the file, the intrinsic and the field (with its line)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tilecraft.dtypes import DType
from tilecraft.errors import PluginError
from tilecraft.kernel_ir import Buffer, IntrinsicCall, Kernel, Region
from tilecraft.target import (
    Availability,
    Target,
    TargetSpec,
    kernel_problems,
    register_target,
)
from tilecraft.target.intrinsic import IntrinsicDecl, IntrinsicSet, MemoryAbstraction
from tilecraft.target.spec import SpecLoader, load_intrinsics, load_spec
from tilecraft.te import const

SPEC_YAML = """\
name: toy_npu
api_version: 1
version: "0.1"
memory:
  levels:
    - {name: DRAM, kind: dram, size_bytes: null, bandwidth_bytes_per_cycle: 16}
    - {name: SRAM, size_bytes: 262144, bandwidth_bytes_per_cycle: 64}
    - {name: regs, kind: registers, size_bytes: 1024, bandwidth_bytes_per_cycle: 256}
compute: {cores: 1, frequency_hz: 1.0e9, vector_bits: 128}
primitives: [split, reorder]
loop_kinds: [serial]
evaluation: estimate
capabilities: {models_performance: true}
"""

FAMILY_YAML = """\
description: a 4x4x4 matrix unit and a 4-lane add
intrinsics:
  - name: mma4
    latency_cycles: 4
    throughput_per_cycle: 1
    compute:
      loops:
        - {name: i1, extent: 4, kind: spatial}
        - {name: i2, extent: 4, kind: spatial}
        - {name: r1, extent: 4, kind: reduce}
      operands:
        - {name: Src1, role: src, dtype: int8, shape: [4, 4], index: [i1, r1]}
        - {name: Src2, role: src, dtype: int8, shape: [4, 4], index: [r1, i2]}
        - {name: Dst, role: dst, dtype: int32, shape: [4, 4], index: [i1, i2]}
      semantics: "Dst[i1, i2] += cast(int32, Src1[i1, r1]) * cast(int32, Src2[r1, i2])"
    memory:
      moves:
        - {operand: Src1, from_level: SRAM, to_level: regs, instruction: load_a,
           address: {base: addr_a, strides: [lda, 1], alignment_bytes: 16}}
        - {operand: Src2, from_level: SRAM, to_level: regs, instruction: load_b,
           address: {base: addr_b, strides: [ldb, 1]}}
        - {operand: Dst, from_level: regs, to_level: SRAM, instruction: store_c,
           address: {base: addr_c, strides: [ldc, 1]}}
      fills:
        - {operand: Dst, level: regs, instruction: zero_c, value: 0}
  - name: vadd4
    latency_cycles: 1
    throughput_per_cycle: 2
    compute:
      loops:
        - {name: i1, extent: 4, kind: spatial}
      operands:
        - {name: Src1, role: src, dtype: float32, shape: [4], index: [i1]}
        - {name: Src2, role: src, dtype: float32, shape: [4], index: [i1]}
        - {name: Dst, role: dst, dtype: float32, shape: [4], index: [i1]}
      semantics: "Dst[i1] = Src1[i1] + Src2[i1]"
    memory:
      moves:
        - {operand: Src1, from_level: SRAM, to_level: regs, address: {strides: [1]}}
        - {operand: Src2, from_level: SRAM, to_level: regs, address: {strides: [1]}}
        - {operand: Dst, from_level: regs, to_level: SRAM, address: {strides: [1]}}
"""

LEVELS = ("DRAM", "SRAM", "regs")


def write(tmp_path: Path, text: str, name: str = "family.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def rejection(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(PluginError) as info:
        load_intrinsics(path, plugin="toy_npu", levels=LEVELS, target="toy_npu")
    message = str(info.value)
    assert message.startswith(f"invalid intrinsic declarations of plugin 'toy_npu' in {path}:\n")
    return message


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """1-based line of the ``occurrence``-th line containing ``needle``."""
    hits = [number for number, line in enumerate(text.splitlines(), 1) if needle in line]
    return hits[occurrence - 1]


# a valid family --------------------------------------------------------------------------------


def test_valid_family_loads_and_joins_the_spec(tmp_path: Path) -> None:
    family = write(tmp_path, FAMILY_YAML)
    intrinsics = load_intrinsics(family, plugin="toy_npu", levels=LEVELS)
    assert [i.name for i in intrinsics] == ["mma4", "vadd4"]
    assert intrinsics[0].memory.fills[0].instruction == "zero_c"
    spec = TargetSpec.from_yaml(write(tmp_path, SPEC_YAML, "spec.yaml"), plugin="toy_npu",
                                intrinsic_files=[family])
    assert [i.name for i in spec.intrinsics] == ["mma4", "vadd4"]
    assert spec.intrinsic("mma4") == intrinsics[0]
    a = np.arange(16, dtype=np.int8).reshape(4, 4)
    c = np.ones((4, 4), np.int32)
    spec.intrinsic("mma4").reference(a, a, c)
    np.testing.assert_array_equal(c, 1 + a.astype(np.int32) @ a.astype(np.int32))
    # the same declarations as Python data, without a file
    assert load_intrinsics(yaml.safe_load(FAMILY_YAML), plugin="toy_npu") == intrinsics


# semantics that are not a valid te program ----------------------------------------------------


@pytest.mark.parametrize(("old", "new", "problem"), [
    ("cast(int32, Src1[i1, r1]) * cast(int32, Src2[r1, i2])", "Src1[i1, r1] * Src2[r1, i2]",
     "computes int8 values but Dst is int32; cast with cast(int32, ...)"),
    ("cast(int32, Src1[i1, r1]) *", "cast(int32, Src1[i1, r1]) @",
     "operator MatMult is not supported"),
    ("cast(int32, Src2[r1, i2])", "cast(int32, Src3[r1, i2])",
     "only source operands can be indexed (sources: Src1, Src2)"),
    ("cast(int32, Src2[r1, i2])", "cast(int32, Src2[i2, r1])",
     "operand Src2 is declared with index [r1, i2] but read as [i2, r1]"),
    ('"Dst[i1, i2] += cast', '"Dst[i1, i2] = cast',
     "declares reduce loops (r1) but does not reduce"),
    ("cast(int32, Src1[i1, r1]) * cast(int32, Src2[r1, i2])", "exp(Src1[i1, r1])",
     "exp(Src1[i1, r1]) needs a float operand"),
])
def test_invalid_semantics(tmp_path: Path, old: str, new: str, problem: str) -> None:
    text = FAMILY_YAML.replace(old, new, 1)
    message = rejection(tmp_path, text)
    line = line_of(text, "semantics:")
    assert f"  intrinsics[0] (mma4).compute.semantics (line {line}): " in message
    assert problem in message


# shapes that disagree with the operands -------------------------------------------------------


@pytest.mark.parametrize(("old", "new", "field", "problem"), [
    ("dtype: int8, shape: [4, 4], index: [i1, r1]", "dtype: int8, shape: [4, 3], index: [i1, r1]",
     "compute.semantics", "index 1 of Src1[i1, r1] (r1) ranges over [0, 3], but dimension 1 "
                          "of Src1 has extent 3"),
    ("dtype: int8, shape: [4, 4], index: [i1, r1]", "dtype: int8, shape: [4, 8], index: [i1, r1]",
     "compute.semantics", "dimension 1 of operand Src1 has extent 8, but its index r1 only "
                          "reaches 3; declare the shape [4, 4]"),
    ("dtype: int32, shape: [4, 4]", "dtype: int32, shape: [4, 2]",
     "compute.semantics", "destination Dst has shape (4, 2) but its loops i1, i2 have extents "
                          "(4, 4)"),
    ("dtype: int8, shape: [4, 4], index: [i1, r1]", "dtype: int8, shape: [16], index: [i1, r1]",
     "compute.operands[0] (Src1)", "operand Src1 has 1 dimensions [16] but 2 index expressions"),
    ("strides: [lda, 1], alignment_bytes: 16", "strides: [1], alignment_bytes: 16",
     "memory", "moves[0]: operand Src1 has 2 dimensions but its address has 1 strides"),
    ("strides: [ldc, 1]", "strides: [2, 1]",
     "memory", "moves[2]: the address strides [2, 1] of the destination Dst (shape [4, 4]) put "
               "elements [0, 2] and [1, 0] at the same offset 2; a destination needs one place "
               "per element"),
    ("alignment_bytes: 16", "alignment_bytes: 24",
     "memory.moves[0].address.alignment_bytes", "alignment_bytes 24 is not a power of two"),
])
def test_shapes_that_disagree(tmp_path: Path, old: str, new: str, field: str,
                              problem: str) -> None:
    text = FAMILY_YAML.replace(old, new, 1)
    message = rejection(tmp_path, text)
    assert f"  intrinsics[0] (mma4).{field} (line " in message
    assert problem in message, message


def test_sources_may_broadcast_with_stride_zero(tmp_path: Path) -> None:
    text = FAMILY_YAML.replace("strides: [lda, 1], alignment_bytes: 16", "strides: [0, 1]", 1)
    (mma, _) = load_intrinsics(write(tmp_path, text), plugin="toy_npu", levels=LEVELS)
    assert mma.memory.moves[0].address.fixed_strides == (0, 1)


# memory abstractions naming levels the target does not have -----------------------------------


def test_unknown_level_names_plugin_file_intrinsic_field_and_line(tmp_path: Path) -> None:
    text = FAMILY_YAML.replace("{operand: Src2, from_level: SRAM, to_level: regs, address",
                               "{operand: Src2, from_level: L2, to_level: regs, address")
    message = rejection(tmp_path, text)
    assert message.splitlines()[1:] == [
        f"  intrinsics[1] (vadd4).memory.moves[1].from_level (line "
        f"{line_of(text, 'from_level: L2')}): 'L2' is not a memory level of target toy_npu; "
        "the levels are DRAM, SRAM, regs"]


def test_unknown_fill_level(tmp_path: Path) -> None:
    text = FAMILY_YAML.replace("level: regs, instruction: zero_c",
                               "level: acc, instruction: zero_c")
    message = rejection(tmp_path, text)
    assert "intrinsics[0] (mma4).memory.fills[0].level (line" in message
    assert "'acc' is not a memory level of target toy_npu" in message


def test_without_levels_only_the_spec_checks_them(tmp_path: Path) -> None:
    text = FAMILY_YAML.replace("from_level: SRAM, to_level: regs, instruction: load_a",
                               "from_level: VMEM, to_level: regs, instruction: load_a")
    family = write(tmp_path, text)
    assert len(load_intrinsics(family, plugin="toy_npu")) == 2  # no levels to check against
    with pytest.raises(PluginError) as info:
        TargetSpec.from_yaml(write(tmp_path, SPEC_YAML, "spec.yaml"), plugin="toy_npu",
                             intrinsic_files=[family])
    assert f"in {family}:" in str(info.value)
    assert "'VMEM' is not a memory level of target toy_npu" in str(info.value)
    data = yaml.load(SPEC_YAML, Loader=SpecLoader) | {
        "intrinsics": yaml.safe_load(text)["intrinsics"]}
    with pytest.raises(PluginError, match=r"invalid target spec of plugin 'toy_npu':\n  "
                                          r"intrinsics: target toy_npu: intrinsic mma4: "
                                          r"memory.moves\[0\].from_level 'VMEM' is not a memory "
                                          r"level of this target; the levels are DRAM, SRAM, "
                                          r"regs"):
        load_spec(data)


# fills ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fill", "problem"), [
    ("{operand: Src1, level: regs}", "fills[0] fills Src1, a source; only the destination Dst "
                                     "is filled"),
    ("{operand: Acc, level: regs}", "fills[0] names operand 'Acc', which the compute "
                                    "abstraction does not declare"),
    ("{operand: Dst, level: SRAM}", "fills[0] fills Dst in SRAM, but Dst moves out of regs; "
                                    "fill the level the intrinsic accumulates in"),
])
def test_invalid_fills(tmp_path: Path, fill: str, problem: str) -> None:
    text = FAMILY_YAML.replace("{operand: Dst, level: regs, instruction: zero_c, value: 0}", fill)
    message = rejection(tmp_path, text)
    assert "intrinsics[0] (mma4).memory (line" in message and problem in message


def test_a_fill_needs_an_accumulating_intrinsic(tmp_path: Path) -> None:
    text = FAMILY_YAML + "      fills: [{operand: Dst, level: regs}]\n"
    message = rejection(tmp_path, text)
    assert "intrinsics[1] (vadd4).memory" in message
    assert "fills[0] initialises Dst, but the semantics does not accumulate" in message


# the file itself ----------------------------------------------------------------------------


def test_duplicates_within_and_across_files(tmp_path: Path) -> None:
    text = FAMILY_YAML.replace("name: vadd4", "name: mma4")
    assert "intrinsic 'mma4' is declared twice" in rejection(tmp_path, text)
    first = write(tmp_path, FAMILY_YAML, "a.yaml")
    second = write(tmp_path, FAMILY_YAML, "b.yaml")
    with pytest.raises(PluginError, match=rf"plugin toy_npu: intrinsic 'mma4' is declared in "
                                          rf"{first} and in {second}; names must be unique"):
        TargetSpec.from_yaml(write(tmp_path, SPEC_YAML, "spec.yaml"), plugin="toy_npu",
                             intrinsic_files=[first, second])


@pytest.mark.parametrize(("text", "problem"), [
    ("- just a list\n", "must be a mapping with an 'intrinsics' list, got list"),
    ("intrinsics: []\n", "intrinsics (line 1): Tuple should have at least 1 item"),
    ("intrinsics: [\n", "is not valid YAML"),
    ("description: x\nintrinsic: []\n", "intrinsic (line 2): unknown field"),
])
def test_malformed_files(tmp_path: Path, text: str, problem: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PluginError) as info:
        load_intrinsics(path, plugin="toy_npu")
    assert "toy_npu" in str(info.value) and str(path) in str(info.value)
    assert problem in str(info.value)
    with pytest.raises(PluginError, match="plugin toy_npu: cannot read intrinsic declarations"):
        load_intrinsics(tmp_path / "missing.yaml", plugin="toy_npu")


def test_intrinsic_set_schema_is_strict() -> None:
    with pytest.raises(PluginError, match="intrinsics: Field required"):
        IntrinsicSet(description="nothing")
    with pytest.raises(PluginError, match=r"fills\.0\.value|fills\[0\]\.value"):
        MemoryAbstraction(moves=[{"operand": "Dst", "from_level": "a", "to_level": "b",
                                  "address": {"strides": [1]}}],
                          fills=[{"operand": "Dst", "level": "a", "value": "zero"}])


# at discovery: a broken plugin is reported, not loaded ----------------------------------------


class BrokenDeclarations(Target):
    """A plugin whose declaration file names a level its spec does not have."""

    def __init__(self, spec_path: Path, family: Path) -> None:
        self.files = (spec_path, family)

    @property
    def spec(self) -> TargetSpec:
        return TargetSpec.from_yaml(self.files[0], plugin="toy_npu",
                                    intrinsic_files=[self.files[1]])

    @property
    def name(self) -> str:
        return "toy_npu"

    def available(self) -> Availability:
        return Availability(codegen=False, build=False, execute=False,
                            reasons={"codegen": "a test target"})

    def codegen(self, kernel: Kernel) -> Any:
        raise NotImplementedError


def test_registering_a_plugin_with_broken_declarations_fails_with_the_reason(
        tmp_path: Path) -> None:
    text = FAMILY_YAML.replace("to_level: regs, instruction: load_b",
                               "to_level: fragment, instruction: load_b")
    target = BrokenDeclarations(write(tmp_path, SPEC_YAML, "spec.yaml"), write(tmp_path, text))
    with pytest.raises(PluginError) as info:
        register_target(target)
    message = str(info.value)
    assert message.startswith("cannot register target BrokenDeclarations: invalid intrinsic "
                              "declarations of plugin 'toy_npu' in ")
    assert re.search(r"intrinsics\[0\] \(mma4\)\.memory\.moves\[1\]\.to_level \(line \d+\): "
                     r"'fragment' is not a memory level of target toy_npu", message)


# calls in Kernel IR must match the declared operands ------------------------------------------


def test_kernel_calls_must_pass_regions_of_the_declared_shapes_and_dtypes() -> None:
    decl = IntrinsicDecl.model_validate(yaml.safe_load(FAMILY_YAML)["intrinsics"][0])
    signature = {decl.name: [(op.name, op.shape, op.dtype) for op in decl.compute.operands]}
    a = Buffer("a", (4, 4), DType.INT8, level="SRAM")
    b = Buffer("b", (8, 4), DType.UINT8, level="SRAM")
    c = Buffer("c", (4, 4), DType.INT32, level="regs")
    zero = (const(0), const(0))
    call = IntrinsicCall("mma4", (Region(a, zero, (4, 4)), Region(b, zero, (8, 4)),
                                  Region(c, zero, (4, 4))))
    kernel = Kernel("k", (a, b, c), ("c",), call)
    problems = kernel_problems(kernel, ["serial"], LEVELS, intrinsics={"mma4": 3},
                               intrinsic_operands=signature)
    assert problems == [
        "call of intrinsic mma4: operand 1 (Src2) is a region of b with extents (8, 4); the "
        "intrinsic declares shape (4, 4)",
        "call of intrinsic mma4: operand 1 (Src2) is in buffer b of uint8; the intrinsic "
        "declares int8"]
    good = IntrinsicCall("mma4", (Region(a, zero, (4, 4)), Region(a, zero, (4, 4)),
                                  Region(c, zero, (4, 4))))
    assert kernel_problems(Kernel("k", (a, c), ("c",), good), ["serial"], LEVELS,
                           intrinsics={"mma4": 3}, intrinsic_operands=signature) == []
