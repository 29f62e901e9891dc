"""The tuning loop end to end on x86: search × isolated measurement × database × compile."""

import math

import numpy as np
import pytest

import tilecraft as tc
from tilecraft.cli import main
from tilecraft.target.registry import get_target
from tilecraft.tuning import TuningDatabase
from tilecraft.tuning.programs import matmul
from tilecraft.tuning.tuner import best_configs, tune

pytestmark = pytest.mark.skipif(not get_target("x86_avx512").available().execute,
                                reason="x86_avx512 cannot execute on this machine")


def test_tune_records_resumes_and_compiles(tmp_path):
    database = tmp_path / "tuning.db"
    C = matmul(96, 80, 72)
    target = get_target("x86_avx512")
    options = {"preset": "quick", "trials": 6, "database": database, "engine": "random",
               "repeats": 2}
    result = tune(C, target, options)
    (task,) = result.tasks
    assert len(task.trials) == 6 and math.isfinite(task.best_seconds)
    assert task.best_gflops > 0 and task.time_to_fraction(0.9) <= 6
    with TuningDatabase(database) as db:
        assert len(db.records(task.workload_key, "x86_avx512")) == 6
    # a second run of the same search reuses every recorded point: nothing new is measured
    again = tune(C, target, options)
    with TuningDatabase(database) as db:
        assert len(db.records(task.workload_key, "x86_avx512")) == 6
    assert again.tasks[0].best_seconds == task.best_seconds
    assert task.measured == 6 and again.tasks[0].measured == 0
    # compile picks the best recorded parameters
    graph = tc.Graph.from_outputs([C])
    assert best_configs(graph, target, str(database)) == {"C": task.best_config}
    exe = tc.compile(C, target="x86_avx512", database=str(database))
    assert any("best known parameters" in note for note in exe.report.notes)
    a = np.random.default_rng(0).standard_normal((96, 72)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((72, 80)).astype(np.float32)
    np.testing.assert_allclose(exe(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_cli_tune(tmp_path, capsys):
    program = tmp_path / "prog.py"
    program.write_text("from tilecraft.tuning.programs import matmul\ngraph = matmul(64, 48, 40)\n")
    database = tmp_path / "t.db"
    assert main(["tune", str(program), "--preset", "quick", "--trials", "3", "--database",
                 str(database), "--events", str(tmp_path / "events.jsonl"),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "C: 3 trials" in out and "GFLOP/s" in out
    assert (tmp_path / "events.jsonl").read_text().count("candidate_result") == 3
    nothing = tmp_path / "relu.py"
    nothing.write_text("from tilecraft import ops, te\n"
                       "graph = ops.relu(te.placeholder((1,), name='x'))\n")
    assert main(["tune", str(nothing), "--database", str(database), "--no-progress"]) == 2
    assert "nothing was tuned" in capsys.readouterr().err
    # a rerun measures nothing: it says the trials reused recorded costs (not "3 trials in 0.0 s")
    assert main(["tune", str(program), "--preset", "quick", "--trials", "3", "--database",
                 str(database), "--no-progress"]) == 0
    assert "C: 3 trials (3 reused a cost already measured or in the database)" in \
        capsys.readouterr().out


def test_generic_schedule_space_is_tuned_and_reused(tmp_path):
    """Computes without a template are tuned in FlexTensor's generic space (schedule
    primitives), and compile applies the best recorded configuration."""
    from tilecraft import ops, te

    x = te.placeholder((24, 40), name="x")
    y = ops.softmax(x, axis=0, name="y")  # along rows it would be one row-group kernel
    database = str(tmp_path / "t.db")
    # one task per compute of the softmax as written: inline_elementwise (on by default)
    # would fold y_sub into y_exp, leaving four
    off = {"inline_elementwise": False}
    exe = tc.compile(y, target="x86_avx512", tuning={"preset": "quick", "trials": 3,
                                                     "database": database, "progress": False},
                     passes=off)
    tuned = [note for note in exe.report.notes if note.startswith("tuned ")]
    assert len(tuned) == 5 and all("'split'" in note for note in tuned)
    a = np.random.default_rng(2).standard_normal((24, 40)).astype(np.float32)
    expected = tc.reference.run(y, x=a)
    np.testing.assert_allclose(exe(a), expected, rtol=1e-5, atol=1e-6)
    again = tc.compile(y, target="x86_avx512", database=database, passes=off)
    assert sum("best known parameters" in note for note in again.report.notes) == 5
    np.testing.assert_allclose(again(a), expected, rtol=1e-5, atol=1e-6)
