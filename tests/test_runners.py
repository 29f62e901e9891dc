"""Measurement runners behind one protocol: the local isolated pool (the default), cost-table
replay, batches that stream results and cancel, and the tuner written against them."""

from __future__ import annotations

import math
import socket
import sys
from pathlib import Path

import pytest

from tilecraft.target.registry import get_target
from tilecraft.tuning import (
    ErrorKind,
    MeasureInput,
    MeasureResult,
    MeasureSettings,
    TuningDatabase,
    Workload,
)
from tilecraft.tuning.runners import (
    CompletedBatch,
    LocalRunner,
    MeasureRunner,
    QueueBatch,
    ReplayRunner,
    device_resource,
)
from tilecraft.tuning.workload import resolve_reference

HELPERS = Path(__file__).with_name("tuning_candidates.py")
helpers = sys.modules[resolve_reference(f"{HELPERS}:ref").__module__]
ref = helpers.ref
fixtures = sys.modules[resolve_reference(
    f"{Path(__file__).with_name('runner_fixtures.py')}:replay_setup").__module__]
TARGET, best_sequence, replay_setup = (fixtures.TARGET, fixtures.best_sequence,
                                       fixtures.replay_setup)

needs_x86 = pytest.mark.skipif(not get_target(TARGET).available().execute,
                               reason="x86_avx512 cannot execute on this machine")


def test_queue_batch_streams_each_index_once_and_cancels():
    cancelled = []
    batch = QueueBatch(3, on_cancel=lambda: cancelled.append(True))
    batch.put(2, MeasureResult(costs=(3.0,)))
    batch.put(2, MeasureResult(costs=(9.0,)))  # a duplicate is ignored
    batch.put(0, MeasureResult(costs=(1.0,)))
    stream = batch.as_completed(timeout=5)
    assert [next(stream)[0], next(stream)[0]] == [2, 0]
    batch.cancel()
    batch.cancel()
    assert list(stream) == [] and cancelled == [True]
    partial = QueueBatch(3)
    partial.put(0, MeasureResult(costs=(1.0,)))
    partial.put(2, MeasureResult(costs=(1.0,)))
    partial.cancel()
    with pytest.raises(Exception, match=r"cancelled before candidates \[1\] finished"):
        partial.results()
    with pytest.raises(Exception, match="no candidate result within 0.05 s"):
        list(QueueBatch(1).as_completed(timeout=0.05))
    assert [r.cost for r in CompletedBatch([MeasureResult(costs=(2.0,))]).results()] == [2.0]


def test_device_resource_names_the_target_kind():
    assert device_resource("x86_avx512") == "x86_avx512"
    assert device_resource("nvidia_tc:h100") == "nvidia_tc:h100"
    assert device_resource(ref("measuring_target")) == helpers.measuring_target().name


def test_runners_follow_the_protocol():
    assert isinstance(LocalRunner(), MeasureRunner)
    assert isinstance(ReplayRunner(lambda c, s: MeasureResult()), MeasureRunner)


def _scaled(mode: object) -> MeasureInput:
    return MeasureInput(Workload(ref("scaled"), (37,), name="scaled37"),
                        ref("measuring_target"), mode, builder=ref("misbehaving_builder"),
                        label=str(mode))


def test_local_runner_streams_typed_results_and_survives_a_segfault():
    settings = MeasureSettings(warmup=0, repeats=2, min_seconds=0.0005, timeout_s=5)
    with LocalRunner(n_workers=2, settings=settings) as runner:
        batch = runner.submit([_scaled(None), _scaled("segfault"), _scaled("wrong")])
        seen = dict(batch.as_completed(timeout=60))
        assert sorted(seen) == [0, 1, 2]
        assert seen[0].ok and seen[0].node == socket.gethostname()
        assert seen[1].error_kind is ErrorKind.RUN and "SIGSEGV" in seen[1].error_message
        assert seen[2].error_kind is ErrorKind.WRONG_RESULT
        assert runner.restarts == 1
        # the pool goes on after the crash, results in submission order
        again = runner.submit([_scaled(None), _scaled(None)]).results()
        assert all(r.ok for r in again)


def test_local_runner_cancel_drops_the_rest_and_the_pool_goes_on():
    settings = MeasureSettings(warmup=0, repeats=1, min_seconds=0.0005, timeout_s=5)
    with LocalRunner(n_workers=1, settings=settings) as runner:
        batch = runner.submit([_scaled(None)] + [_scaled("slow-run")] * 3)
        stream = batch.as_completed(timeout=60)
        first, _ = next(stream)
        batch.cancel()
        assert len(list(stream)) < 3
        assert [r.ok for r in runner.submit([_scaled(None)]).results()] == [True]


def test_replay_runner_tunes_deterministically_and_records(tmp_path):
    compute, target, replay, table = replay_setup()
    database = tmp_path / "t.db"
    runner = ReplayRunner(replay)
    first, task = best_sequence(compute, target, runner, trials=60, database=database)
    second, _ = best_sequence(compute, target, ReplayRunner(replay), trials=60)
    assert first == second and len(first) >= 2
    # the costs are the table's, failures included
    best_cost = min(cost for _, cost, _ in task.trials)
    assert task.best_seconds == best_cost >= table.optimum
    assert any(math.isinf(cost) for _, cost, _ in task.trials)
    with TuningDatabase(database) as db:
        records = db.records(task.workload_key, TARGET)
    assert len(records) == len({str(c) for c, _, _ in task.trials})
    assert {r.error_kind for r in records} == {None, ErrorKind.RUN}


@needs_x86
def test_tuner_default_runner_is_local(tmp_path):
    from tilecraft.tuning.tuner import tune

    events = []
    compute, target, _, _ = replay_setup()
    (task,) = tune(compute, target, {"preset": "quick", "trials": 2, "engine": "random",
                                     "progress": False, "events": events.append,
                                     "repeats": 1}).tasks
    assert len(task.trials) == 2 and math.isfinite(task.best_seconds)
    nodes = {e.data.get("node") for e in events if e.kind.value == "candidate_result"}
    assert nodes == {socket.gethostname()}


def test_ray_runner_without_ray_says_to_install_the_extra(monkeypatch):
    from tilecraft.tuning.runners.ray_runner import import_ray
    from tilecraft.tuning.workload import TuningError

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(TuningError, match=r"pip install 'tilecraft\[ray\]'"):
        import_ray()


def test_cli_ray_runner_needs_the_extra_and_address_needs_ray(tmp_path, monkeypatch, capsys):
    from tilecraft.cli import main

    program = tmp_path / "prog.py"
    program.write_text("from tilecraft.tuning.programs import matmul\ngraph = matmul(8, 8, 8)\n")
    monkeypatch.setitem(sys.modules, "ray", None)
    assert main(["tune", str(program), "--runner", "ray", "--address", "auto",
                 "--database", str(tmp_path / "t.db"), "--no-progress"]) == 2
    assert "tilecraft[ray]" in capsys.readouterr().err
    assert main(["tune", str(program), "--address", "auto", "--database",
                 str(tmp_path / "t.db"), "--no-progress"]) == 2
    assert "--runner ray" in capsys.readouterr().err


def test_progress_shows_per_node_throughput():
    import io

    from tilecraft.tuning.events import EventStream
    from tilecraft.tuning.progress import ProgressDisplay

    out = io.StringIO()
    stream = EventStream([ProgressDisplay(out, tty=False, plain_interval_s=0.0)])
    stream.task_start("C", target="x86_avx512", flops=0, trials=4)
    for node in ("gpu-a", "gpu-b", "gpu-b"):
        stream.candidate_result("C", cost=1e-3, node=node)
    lines = [line for line in out.getvalue().splitlines() if "nodes" in line]
    assert lines and "gpu-b" in lines[-1] and lines[-1].index("gpu-b") < lines[-1].index("gpu-a")
