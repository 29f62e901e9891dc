"""``tilecraft.compile`` as named stages: their order, what each produces, the dumps, and the
report assembled from the stages (mappings read, not matched again after codegen)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.graph import Graph
from tilecraft.pipeline import (
    Pipeline,
    ScheduleKind,
    StageDumpError,
    default_stages,
    run_pipeline,
)
from tilecraft.reference import run as reference_run
from tilecraft.target.registry import get_target

STAGES = ["graph_passes", "fusion", "mapping", "schedule", "kernel_ir", "codegen", "build",
          "report"]


@pytest.fixture(scope="module")
def x86() -> Any:
    target = get_target("x86_avx512")
    if not target.available().codegen:
        pytest.skip(f"x86_avx512 cannot generate code here: {target.available().explain()}")
    return target


def chain_and_tail() -> Graph:
    """A fusable GEMM chain, then a softmax over columns (default schedules; a softmax along
    rows would be one row-group kernel, :mod:`tilecraft.fusion.row_groups`)."""
    A = te.placeholder((128, 64), name="A")
    B = te.placeholder((64, 128), name="B")
    D = te.placeholder((128, 64), name="D")
    E = ops.matmul(ops.relu(ops.matmul(A, B, name="C"), name="R"), D, name="E")
    return Graph.from_outputs([ops.softmax(E, axis=0, name="F")])


def random_inputs(graph: Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}


def test_the_stages_run_in_the_design_order() -> None:
    assert [stage.name for stage in default_stages()] == STAGES


def test_each_stage_output_is_in_the_state_and_the_executable_is_right(x86: Any) -> None:
    graph = chain_and_tail()
    state = run_pipeline(graph, x86)
    fused = [group.computes for group in state.groups if group.computes]
    assert fused == [("C", "R", "E")]
    kinds = {name: choice.kind for name, choice in state.schedules.items()}
    assert kinds["C"] is kinds["R"] is kinds["E"] is ScheduleKind.FUSED
    assert kinds["F"] is ScheduleKind.DEFAULT
    # one schedule per compute the passes left; softmax's subtract is read once, by its exp,
    # so inline_elementwise (on by default) folded it there
    assert set(kinds) == {t.name for t in state.graph.computes}
    assert {t.name for t in graph.computes} - set(kinds) == {"F_sub"}
    assert "inline_elementwise" in state.passes_applied
    # one lowering per fusion group (at its last compute) and per other compute
    assert [lowered.compute for lowered in state.lowered][0] == "E"
    assert len(state.sources) == len(state.compiled) == len(state.kernel_reports)
    assert [k.name for k in state.kernels] == [c.kernel.name for c in state.compiled]
    exe = tc.compile(graph, x86)
    assert [k.name for k in exe.report.kernels] == [r.name for r in state.kernel_reports]
    assert exe.report.notes == state.report.notes
    inputs = random_inputs(graph)
    np.testing.assert_allclose(exe(**inputs), reference_run(graph, **inputs), rtol=2e-4,
                               atol=2e-4)


def test_dump_stages_writes_every_stage_and_the_sources(x86: Any, tmp_path: Path) -> None:
    graph = chain_and_tail()
    exe = tc.compile(graph, x86, dump_stages=tmp_path / "dump")
    written = sorted(p.name for p in (tmp_path / "dump").iterdir() if p.is_file())
    assert written == [f"{i:02d}-{name}.txt" for i, name in enumerate(STAGES, start=1)]
    schedule = (tmp_path / "dump" / "04-schedule.txt").read_text()
    assert "C: fused (fusion)" in schedule and "F: default (default)" in schedule
    kernel_ir = (tmp_path / "dump" / "05-kernel_ir.txt").read_text()
    assert all(f"kernel {name}" in kernel_ir or name in kernel_ir for name in exe.sources)
    sources = tmp_path / "dump" / "06-codegen"
    assert sorted(p.name for p in sources.iterdir()) == sorted(f"{n}.ll" for n in exe.sources)
    for name, source in exe.sources.items():
        assert (sources / f"{name}.ll").read_text().rstrip("\n") == source.text.rstrip("\n")
    assert (tmp_path / "dump" / "08-report.txt").read_text().rstrip("\n") == str(exe.report)


def test_a_dump_folder_that_cannot_be_written_is_named(x86: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    A = te.placeholder((4,), name="A")
    with pytest.raises(StageDumpError, match="cannot create the stage dump folder .*file"):
        tc.compile(te.compute((4,), lambda i: A[i] * 2.0, name="B"), x86,
                   dump_stages=blocker / "sub")


def test_the_cli_dumps_stages(x86: Any, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from tilecraft.cli import main

    program = tmp_path / "prog.py"
    program.write_text("from tilecraft import te\nA = te.placeholder((8, 8), name='A')\n"
                       "graph = te.compute((8, 8), lambda i, j: A[i, j] + 1.0, name='B')\n")
    assert main(["compile", str(program), "--dump-stages", str(tmp_path / "d"), "--run"]) == 0
    out = capsys.readouterr().out
    assert f"wrote the output of each compile stage to {tmp_path / 'd'}" in out
    assert "max abs error 0" in out
    assert (tmp_path / "d" / "04-schedule.txt").read_text().startswith("B: default")


def test_mappings_are_matched_once_in_the_mapping_stage(x86: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's mapping entries are the mapping stage's: the stages after it never match
    again (they did before: attach_mapping_report re-matched after codegen)."""
    from tilecraft.intrin import matching

    A = te.placeholder((32, 64), "uint8", name="A")
    B = te.placeholder((64, 48), "int8", name="B")
    graph = Graph.from_outputs([ops.matmul(A, B, out_dtype="int32", name="C")])
    stages = default_stages()
    up_to_mapping, after = Pipeline(stages[:3]), Pipeline(stages[3:])
    state = run_pipeline(graph, x86, stages=up_to_mapping.stages)
    entries = list(state.mapping_entries)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("matched again after the mapping stage")

    monkeypatch.setattr(matching, "match", refuse)
    state = after.run(state)
    assert state.report is not None and state.report.mappings == entries
    if x86.spec.has_intrinsic("vpdpbusd") if hasattr(x86.spec, "has_intrinsic") else any(
            i.name == "vpdpbusd" for i in x86.spec.intrinsics):
        assert any(entry.intrinsic == "vpdpbusd" for entry in entries)


@pytest.mark.parametrize("program", ["gemm", "softmax"])
def test_known_parameters_become_the_schedule_choice(x86: Any, program: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Parameters from the database become one schedule choice per compute — a target
    template's (``template``) or FlexTensor's generic schedule (``primitives``) — and lowering
    applies exactly that choice."""
    from tilecraft.tuning import tuner

    if program == "gemm":
        A = te.placeholder((64, 48), name="A")
        B = te.placeholder((48, 80), name="B")
        tensor = ops.matmul(A, B, name="C")
    else:
        tensor = ops.softmax(te.placeholder((24, 40), name="x"), axis=0, name="y")
    graph = Graph.from_outputs([tensor])
    compute = graph.computes[-1]
    template, _ = tuner.task_space(compute, x86)
    rng = np.random.default_rng(0)
    config = template.decode(template.space.random_point(rng))
    monkeypatch.setattr(tuner, "best_configs", lambda *args: {compute.name: config})
    state = run_pipeline(graph, x86, database="unused.db")
    choice = state.schedules[compute.name]
    expected = ScheduleKind.TEMPLATE if program == "gemm" else ScheduleKind.PRIMITIVES
    assert (choice.kind, dict(choice.config or {}), choice.source) == (expected, config,
                                                                       "database")
    assert f"{compute.name}: best known parameters from unused.db: {config}" in state.report.notes
    if program == "gemm":
        reference = x86.lower_compute(compute, state.options, config)
    else:
        from tilecraft.tuning.builders import lower_compute_with_config

        reference = lower_compute_with_config(graph, compute, config, x86)
    ours = state.lowered[-1].kernels
    assert [k.attrs.get("schedule") for k in ours] == [k.attrs.get("schedule")
                                                       for k in reference]
    assert [c.source.text for c in state.compiled][-len(ours):] == \
        [x86.codegen(k).text for k in reference]
    if x86.available().execute:
        from tilecraft.runtime.executable import Executable

        exe = Executable(state.graph, x86.name, state.compiled, state.report)
        inputs = random_inputs(graph)
        np.testing.assert_allclose(exe(**inputs), reference_run(graph, **inputs), rtol=2e-4,
                                   atol=2e-5)


def test_every_stage_output_prints(x86: Any) -> None:
    graph = chain_and_tail()
    state = run_pipeline(graph, x86)
    text = Pipeline(default_stages()).describe(state)
    headers = [line[3:-3] for line in text.splitlines() if line.startswith("== ")]
    assert headers == STAGES
    assert "1 fused group(s) lowered by x86_avx512\n  C -> R -> E: kernels" in text
    assert "fusion plan for x86_avx512" in text
    assert ("passes applied: simplify, fold_constants, fold_batch_norm, choose_layout, "
            "inline_elementwise, eliminate_dead_code") in text
