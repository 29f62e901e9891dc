"""Tuning mali on this machine's OpenCL device through the core's tuner and its isolated
workers (measure mode): the variant ``mali:stand_in`` executes the real OpenCL kernels there
and says so — in its availability and as the target of every database record — since the
timings are PoCL's (a CPU stand-in), not a Mali's. The plain ``mali`` target refuses to be
measured without a Mali GPU."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import TargetError
from tilecraft.graph import Graph
from tilecraft.target.registry import get_target
from tilecraft.tuning.tuner import best_configs, tune

needs_device = pytest.mark.skipif(not get_target("mali").available().build,
                                  reason="no OpenCL device (pip install pocl-binary-distribution)")


def _gemm() -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    A = te.placeholder((23, 19), name="A")
    B = te.placeholder((19, 29), name="B")
    return A, B, ops.matmul(A, B, name="C")


def test_the_stand_in_variant_is_listed_and_says_whose_timings_it_gives() -> None:
    mali = get_target("mali")
    assert "stand_in" in mali.variants()
    assert "not a Mali's" in mali.variants()["stand_in"]
    stand_in = get_target("mali:stand_in")
    assert stand_in.name == "mali:stand_in" and stand_in.spec.name == "mali"
    availability = stand_in.available()
    assert availability.execute is availability.build
    if availability.execute and not mali.available().execute:
        assert "not a Mali GPU's" in availability.reasons["execute"]
    with pytest.raises(TargetError, match="no variant 'g77'.*stand_in"):
        get_target("mali:g77")


@needs_device
def test_plain_mali_is_not_measured_without_a_mali_gpu(tmp_path: Path) -> None:
    if get_target("mali").available().execute:
        pytest.skip("a Mali GPU is here: mali measures on it")
    *_, C = _gemm()
    with pytest.raises(TargetError, match="cannot execute"):
        tune(Graph.from_outputs([C]), get_target("mali"), {"trials": 1, "n_workers": 1})


@needs_device
def test_tuning_a_gemm_on_the_stand_in_device(tmp_path: Path) -> None:
    A, B, C = _gemm()
    graph = Graph.from_outputs([C])
    target = get_target("mali:stand_in")
    database = tmp_path / "mali.db"
    result = tune(graph, target, {"trials": 3, "n_workers": 1, "database": str(database),
                                  "seed": 2})
    [task] = result.tasks
    measured = [cost for _, cost, error in task.trials if error is None]
    assert len(task.trials) == 3 and measured
    assert all(0 < cost < 1 for cost in measured)
    assert task.best_seconds == min(measured)
    assert set(task.best_config) == {"BM", "BN", "BK", "TM", "TN", "stages"}
    # every record names the stand-in variant as the target the timings are from
    with sqlite3.connect(database) as db:
        targets = {row[0] for row in db.execute("select target from records")}
    assert targets == {"mali:stand_in"}
    # the best config compiles (from the database) and matches numpy on the device
    assert best_configs(graph, target, str(database)) == {"C": task.best_config}
    executable = tc.compile(graph, target="mali:stand_in", database=str(database))
    [kernel] = executable.kernels
    assert kernel.attrs["tiles"] == task.best_config
    rng = np.random.default_rng(4)
    a = rng.standard_normal((23, 19)).astype(np.float32)
    b = rng.standard_normal((19, 29)).astype(np.float32)
    np.testing.assert_allclose(executable(A=a, B=b), a @ b, rtol=1e-5, atol=1e-5)
