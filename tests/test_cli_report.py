"""The mapping report: `tilecraft report`, `mapping_report` and `Executable.report`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.cli import main
from tilecraft.errors import TilecraftError
from tilecraft.intrin import decision as decision_module
from tilecraft.intrin import report as mapping_module
from tilecraft.intrin.examples import wmma
from tilecraft.intrin.perfmodel import gpu_spec_example
from tilecraft.intrin.report import functional_check, mapping_report
from tilecraft.target.registry import get_target

CONV = """
import tilecraft as tc
from tilecraft import ops, te

x = te.placeholder((1, 4, 6, 6), "float16", name="x")
w = te.placeholder((8, 4, 3, 3), "float16", name="w")
y = ops.conv2d(x, w, out_dtype="float32", name="y")
graph = tc.Graph.from_outputs([ops.relu(y, name="r")])
"""

GEMMS = """
from tilecraft import ops, te

def build():
    A = te.placeholder((33, 64), "uint8", name="A")
    B = te.placeholder((64, 48), "int8", name="B")
    X = te.placeholder((20, 30), name="X")
    Y = te.placeholder((30, 17), name="Y")
    return [ops.matmul(A, B, out_dtype="int32", name="C"), ops.matmul(X, Y, name="Z")]
"""


def installed(name: str):
    try:
        return get_target(name)
    except TilecraftError as err:
        pytest.skip(f"target {name} is not installed: {err}")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prog.py"
    path.write_text(text)
    return path


def rows(output: str) -> dict[tuple[str, str], list[str]]:
    """Table rows by (operator, intrinsic): the five counts, then the check column."""
    table = {}
    for line in output.splitlines():
        cells = line.split()
        if len(cells) >= 10 and all(cell.isdigit() for cell in cells[2:7]):
            table[(cells[0], cells[1])] = cells[2:7] + cells[-1:]
    return table


def test_report_of_a_convolution_on_tensor_cores(tmp_path: Path, capsys) -> None:
    installed("nvidia_tc")
    path = write(tmp_path, CONV)
    assert main(["report", str(path), "--target", "nvidia_tc", "--check"]) == 0
    out = capsys.readouterr().out
    assert "2 computes" not in out and "4 of 32 operator x intrinsic pairs match" in out
    table = rows(out)
    # Table 5.3: 35 mappings of a convolution onto a 16x16x16 Tensor Core, all verified
    cand, basic, maps, verified, feasible, _ = table[("y", "wmma_m16n16k16_f16_f32")]
    assert (cand, basic, maps, verified, feasible) == ("7", "7", "35", "35", "35")
    assert table[("y", "wmma_m16n16k16_f16_f32")][-1] == "ok"
    assert table[("y", "wmma_m16n16k16_f16_f16")][:3] == ["0", "0", "0"]  # fp32 result
    assert table[("r", "mma_m16n8k16_f16_f32")][2] == "0"  # relu is no product
    assert "y on wmma_m16n16k16_f16_f32: i1 <- (" in out
    assert "measured cost needs a target that executes the mapped" in out


def test_report_json_for_one_intrinsic(tmp_path: Path, capsys) -> None:
    installed("nvidia_tc")
    path = write(tmp_path, CONV)
    assert main(["report", str(path), "--target", "nvidia_tc", "--json",
                 "--intrinsic", "wmma_m16n16k16_f16_f32"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["target"] == "nvidia_tc"
    conv, relu = data["entries"]
    assert (conv["operator"], conv["intrinsic"], conv["mappings"]) == \
        ("y", "wmma_m16n16k16_f16_f32", 35)
    assert conv["chosen_loops"]["i2"] == ["k"] and conv["predicted_seconds"] > 0
    assert conv["measured_seconds"] is None and conv["check"] is None
    assert relu["mappings"] == 0 and "not a sum of products" in relu["reasons"][0]


def test_report_explore_and_matched_only(tmp_path: Path, capsys) -> None:
    installed("nvidia_tc")
    path = write(tmp_path, CONV)
    assert main(["report", str(path), "--target", "nvidia_tc", "--matched-only",
                 "--intrinsic", "mma_m16n8k16_f16_f32", "--explore", "30"]) == 0
    out = capsys.readouterr().out
    assert list(rows(out)) == [("y", "mma_m16n8k16_f16_f32")]
    assert "chosen by the joint mapping x schedule search (30 trials, engine q" in out


def test_report_on_x86(tmp_path: Path, capsys) -> None:
    installed("x86_avx512")
    path = write(tmp_path, GEMMS)
    # a named CPU with VNNI: the host's spec declares vpdpbusd only where its CPU has it
    assert main(["report", str(path), "--check", "--target", "x86_avx512:icelake-server"]) == 0
    out = capsys.readouterr().out
    table = rows(out)
    # u8 x s8 -> s32 onto VNNI: one mapping (lanes <- j, the 4-byte group <- k), checked
    assert table[("C", "vpdpbusd")][2:5] == ["1", "1", "1"]
    assert table[("C", "vpdpbusd")][-1] == "ok"
    # fp32 onto the broadcast FMA: the broadcast operand Src1[0] is generated and checked
    assert table[("Z", "fma_f32x16_bcast")][2] == "2"
    assert table[("Z", "fma_f32x16_bcast")][-1] == "ok"


def test_report_errors(tmp_path: Path, capsys) -> None:
    installed("x86_avx512")
    path = write(tmp_path, GEMMS)
    assert main(["report", str(path), "--intrinsic", "wmma"]) == 2
    assert "declares no intrinsic 'wmma'" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.py")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["report", str(path), "--target", "no_such_target"]) == 2
    assert "no_such_target" in capsys.readouterr().err
    assert main(["report", str(path), "--explore", "-1"]) == 2
    assert "--explore -1" in capsys.readouterr().err


# --- the library side ------------------------------------------------------------------------
def conv2d():
    x = te.placeholder((1, 4, 6, 6), "float16", name="x")
    w = te.placeholder((8, 4, 3, 3), "float16", name="w")
    return ops.conv2d(x, w, out_dtype="float32", name="y")


def test_measured_hook_and_json_round_trip() -> None:
    measured = []

    def measure(physical) -> float:
        measured.append(str(physical.virtual.mapping))
        return 2e-3

    report = mapping_report(conv2d(), gpu_spec_example(), [wmma(16, 16, 16)], measured=measure)
    entry = report.entries[0]
    assert measured == [entry.chosen] and entry.measured_seconds == 2e-3
    assert "2 ms" in str(report)
    assert not any("measured cost needs" in note for note in report.notes)
    assert json.loads(report.to_json())["entries"][0]["measured_seconds"] == 2e-3


def test_functional_check_catches_a_wrong_result(monkeypatch) -> None:
    report = mapping_report(conv2d(), gpu_spec_example(), [wmma(16, 16, 16)])
    ranked = mapping_module.report_entry(conv2d(), wmma(16, 16, 16), gpu_spec_example())[1]
    physical = ranked[0].physical
    assert functional_check(physical) == "ok"
    import tilecraft.intrin.executor as executor

    real = executor.execute
    monkeypatch.setattr(executor, "execute", lambda p, i: real(p, i) + 1.0)
    assert functional_check(physical).startswith("mismatch (max error 1")
    assert report.entries[0].check is None  # not asked for


def test_budget_leaves_slow_computes_out() -> None:
    report = mapping_report(conv2d(), gpu_spec_example(), [wmma(16, 16, 16)],
                            budget_seconds=0.0)
    assert report.entries == []
    assert "mapping report of y skipped: it took more than 0 ms" in report.notes[0]


def test_compile_attaches_the_mapping_report() -> None:
    installed("x86_avx512")
    A = te.placeholder((20, 30), name="A")
    B = te.placeholder((30, 17), name="B")
    D = ops.relu(ops.matmul(A, B, name="C"), name="D")
    graph = tc.Graph.from_outputs([D])
    mapping_report(graph, get_target("x86_avx512").spec, thorough=False)  # warm the caches
    exe = tc.compile(graph, target="x86_avx512")
    entries = exe.report.mappings  # bounded by mappings ranked, not by a clock: always there
    assert [(e.operator, e.intrinsic) for e in entries] == [("C", "fma_f32x16_bcast")]
    assert entries[0].predicted_seconds > 0 and entries[0].feasible == 2
    text = str(exe.report)
    assert "intrinsic mappings" in text and "C on fma_f32x16_bcast: i1 <- (" in text
    a, b = np.ones((20, 30), np.float32), np.ones((30, 17), np.float32)
    np.testing.assert_allclose(exe(A=a, B=b), np.full((20, 17), 30.0, np.float32))


def test_a_model_failure_never_breaks_compile(monkeypatch) -> None:
    installed("x86_avx512")

    def broken(*args, **kwargs):
        raise TilecraftError("the model is broken")

    monkeypatch.setattr(decision_module, "report_entry", broken)
    X = te.placeholder((3, 5), name="X")
    exe = tc.compile(ops.relu(X, name="R"), target="x86_avx512")
    assert exe.report.mappings == []
    assert "mapping survey of R failed: the model is broken" in exe.report.notes
    np.testing.assert_array_equal(exe(X=-np.ones((3, 5), np.float32)), np.zeros((3, 5)))
