"""The Ray runner on a multi-node local cluster (``ray.cluster_utils.Cluster``: several raylets
on this machine, loopback only): the device node lost mid-run turns the candidates still waiting
into ``device-lost`` results, the database keeps every record measured before, and the next
batch is told at once; an unreachable cluster is a TuningError naming the address. Skipped
where Ray is absent; slow."""

from __future__ import annotations

import math
import sys
import threading
import time
from pathlib import Path

import pytest

from tilecraft.tuning import ErrorKind, MeasureInput, TuningDatabase, Workload
from tilecraft.tuning.workload import TuningError, resolve_reference

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")
from tilecraft.tuning.runners.ray_runner import RayRunner  # noqa: E402

pytestmark = pytest.mark.slow

fixtures = sys.modules[resolve_reference(
    f"{Path(__file__).with_name('runner_fixtures.py')}:replay_setup").__module__]
TARGET = fixtures.TARGET


def test_a_device_node_lost_mid_run_fails_the_rest_as_device_lost(tmp_path):
    cluster = cluster_utils.Cluster(initialize_head=True,
                                    head_node_args={"num_cpus": 1, "include_dashboard": False})
    device_node = cluster.add_node(num_cpus=1, resources={TARGET: 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        compute, target, replay, _ = fixtures.replay_setup(delay_s=0.05)
        database = tmp_path / "tuning.db"
        with RayRunner(evaluator=replay) as runner:
            runner._pool(TARGET)  # the worker is up before the clock starts

            def lose_the_node() -> None:
                while sum(runner.finished.values()) < 6:
                    time.sleep(0.02)
                cluster.remove_node(device_node, allow_graceful=False)

            loser = threading.Thread(target=lose_the_node)
            loser.start()
            _, task = fixtures.best_sequence(compute, target, runner, trials=60, database=database)
            loser.join()
            measured = [cost for _, cost, _ in task.trials if math.isfinite(cost)]
            # a later batch of the lost kind is answered at once, by name
            (again,) = runner.submit([MeasureInput(Workload.from_catalog("relu[13x17]"),
                                                   TARGET)]).results()
        assert again.error_kind is ErrorKind.DEVICE_LOST and TARGET in again.error_message
        with TuningDatabase(database) as db:
            records = list(db.records(task.workload_key, TARGET))
        stored = {record.median_cost for record in records if record.ok}
        lost = [record for record in records if record.error_kind is ErrorKind.DEVICE_LOST]
        assert len(measured) >= 6 and lost  # some measured before the loss, some lost after
        assert set(measured) <= stored  # nothing measured before the loss is lost
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_an_unreachable_cluster_is_named():
    with pytest.raises(TuningError, match="127.0.0.1:1"):
        RayRunner(address="127.0.0.1:1")
