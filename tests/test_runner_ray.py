"""The Ray runner on a local Ray cluster (loopback only): the same best configurations as the
local replay runner for a fixed seed, with a worker killed mid-run and with a segfaulting
candidate; real x86 candidates; a device kind no node offers. Skipped where Ray is absent;
slow (a cluster takes seconds to start)."""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tilecraft.tuning import ErrorKind, MeasureInput, MeasureSettings, TuningDatabase, Workload
from tilecraft.tuning.record import canonical_json
from tilecraft.tuning.runners import CostReplay, ReplayRunner
from tilecraft.tuning.workload import TuningError, resolve_reference

ray = pytest.importorskip("ray")
from tilecraft.tuning.runners.ray_runner import RayRunner  # noqa: E402

pytestmark = pytest.mark.slow

HELPERS = Path(__file__).with_name("tuning_candidates.py")
helpers = sys.modules[resolve_reference(f"{HELPERS}:ref").__module__]
fixtures = sys.modules[resolve_reference(
    f"{Path(__file__).with_name('runner_fixtures.py')}:replay_setup").__module__]
TARGET = fixtures.TARGET


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             resources={TARGET: 2, helpers.measuring_target().name: 1})
    yield ray
    ray.shutdown()


def _records(database, task):
    with TuningDatabase(database) as db:
        return sorted((canonical_json(r.schedule), r.median_cost, r.error_kind)
                      for r in db.records(task.workload_key, TARGET))


def test_same_best_configurations_as_local(cluster, tmp_path):
    compute, target, replay, _ = fixtures.replay_setup()
    local, local_task = fixtures.best_sequence(compute, target, ReplayRunner(replay),
                                               database=tmp_path / "local.db")
    with RayRunner(evaluator=replay) as runner:
        remote, remote_task = fixtures.best_sequence(compute, target, runner,
                                                     database=tmp_path / "ray.db")
        assert runner.finished  # results came through the workers
    assert remote == local and len(local) >= 2
    assert [c for c, _, _ in remote_task.trials] == [c for c, _, _ in local_task.trials]
    assert _records(tmp_path / "ray.db", remote_task) == _records(tmp_path / "local.db",
                                                                  local_task)


def test_a_worker_killed_mid_run_changes_nothing(cluster):
    compute, target, replay, _ = fixtures.replay_setup(delay_s=0.03)
    expected, baseline = fixtures.best_sequence(compute, target, ReplayRunner(replay))
    with RayRunner(evaluator=replay) as runner:
        runner._pool(TARGET)
        victim = runner.worker_pids()[0]

        def kill_later() -> None:
            time.sleep(0.4)
            os.kill(victim, signal.SIGKILL)

        killer = threading.Thread(target=kill_later)
        killer.start()
        got, task = fixtures.best_sequence(compute, target, runner)
        killer.join()
        assert runner.restarts >= 1 and victim not in runner.worker_pids()
    assert got == expected
    # the candidate whose worker was killed was measured again: no failure beyond the table's
    assert [cost for _, cost, _ in task.trials] == [cost for _, cost, _ in baseline.trials]


def test_a_segfaulting_candidate_is_a_run_error_and_tuning_goes_on(cluster):
    compute, target, replay, _ = fixtures.replay_setup()
    _, baseline = fixtures.best_sequence(compute, target, ReplayRunner(replay))
    # a candidate the baseline met early, with a finite cost, now crashes every worker
    crasher = next(canonical_json({compute.name: c}) for c, cost, _ in baseline.trials[3:]
                   if math.isfinite(cost))
    crashing = CostReplay(replay.costs, crash=[crasher])
    failing = CostReplay({**replay.costs, crasher: math.inf})
    expected, _ = fixtures.best_sequence(compute, target, ReplayRunner(failing))
    with RayRunner(evaluator=crashing) as runner:
        got, task = fixtures.best_sequence(compute, target, runner)
        assert runner.restarts >= 2  # tried again once, then recorded
    assert got == expected
    costs = {canonical_json({compute.name: c}): cost for c, cost, _ in task.trials}
    assert math.isinf(costs[crasher])


def test_real_x86_candidates_and_typed_failures(cluster):
    settings = MeasureSettings(warmup=0, repeats=2, min_seconds=0.0005, timeout_s=2.0)
    workload = Workload(helpers.ref("scaled"), (37,), name="scaled37")

    def candidate(mode):
        return MeasureInput(workload, helpers.ref("measuring_target"), mode,
                            builder=helpers.ref("misbehaving_builder"), label=str(mode))

    with RayRunner(settings=settings) as runner:
        results = runner.submit([candidate(None), candidate("segfault"), candidate("wrong"),
                                 candidate("hang"), candidate(None)]).results()
        relu = runner.submit([MeasureInput(Workload.from_catalog("relu[13x17]"), TARGET)])
        (measured,) = relu.results()
    assert results[0].ok and results[4].ok and results[0].node
    assert results[1].error_kind is ErrorKind.RUN and "died" in results[1].error_message
    assert results[2].error_kind is ErrorKind.WRONG_RESULT
    assert results[3].error_kind is ErrorKind.TIMEOUT
    assert measured.ok and measured.max_abs_error is not None


def test_a_device_no_node_offers_is_named(cluster):
    candidate = MeasureInput(Workload.from_catalog("relu[13x17]"), "nvidia_tc:h100")
    with RayRunner() as runner, pytest.raises(TuningError, match="nvidia_tc:h100"):
        runner.submit([candidate])


def test_cli_tune_with_the_ray_runner(cluster, tmp_path, capsys):
    from tilecraft.cli import main

    program = tmp_path / "prog.py"
    program.write_text("from tilecraft.tuning.programs import matmul\ngraph = matmul(32, 24, 16)\n")
    events = tmp_path / "events.jsonl"
    assert main(["tune", str(program), "--runner", "ray", "--preset", "quick", "--trials", "3",
                 "--database", str(tmp_path / "t.db"), "--events", str(events),
                 "--no-progress"]) == 0
    assert "C: 3 trials" in capsys.readouterr().out
    assert events.read_text().count('"node"') == 3


def test_built_on_any_node_measured_on_the_device_without_building(cluster):
    settings = MeasureSettings(warmup=0, repeats=2, min_seconds=0.0005, timeout_s=5.0)
    candidates = [MeasureInput(Workload.from_catalog(name), TARGET)
                  for name in ("relu[13x17]", "matmul[m1-k5-n7]", "gemv[m13-k17]")]
    with RayRunner(settings=settings) as runner:
        results = runner.submit(candidates).results()
        device_pids = set(runner.worker_pids())
        roles = runner.role_counts()
    assert all(r.ok and r.max_abs_error is not None and r.max_abs_error < 1e-5 for r in results)
    assert {r.worker_pid for r in results} <= device_pids  # measured by the device workers
    assert sum(role.get("measure", 0) for role in roles) == len(candidates)
    # the device workers never built: the build tasks (CPU only, no device resource) did
    assert all(role.get("build", 0) == 0 and role.get("device-build", 0) == 0
               for role in roles)
