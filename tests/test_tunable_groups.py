"""A fusion group with a tunable compute (x86: a GEMM with its epilogue in its kernel) is left
apart where tuning or the database gives that compute parameters, so the tuned kernels run;
without them it stays fused."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.pipeline import run_pipeline
from tilecraft.pipeline.state import ScheduleKind
from tilecraft.target.registry import get_target

pytestmark = pytest.mark.skipif(not get_target("x86_avx512").available().execute,
                                reason="x86_avx512 cannot execute on this machine")


def _program():
    a = te.placeholder((41, 67), name="a")
    b = te.placeholder((67, 53), name="b")
    out = ops.relu(ops.matmul(a, b, name="mm"), name="out")
    rng = np.random.default_rng(0)
    arrays = {"a": rng.standard_normal((41, 67)).astype(np.float32),
              "b": rng.standard_normal((67, 53)).astype(np.float32)}
    return tc.Graph.from_outputs([out]), arrays, np.maximum(arrays["a"] @ arrays["b"], 0)


def test_untuned_compile_fuses_the_epilogue():
    graph, arrays, expected = _program()
    state = run_pipeline(graph, get_target("x86_avx512"))
    assert state.schedules["mm"].kind is ScheduleKind.FUSED
    exe = tc.compile(graph, target="x86_avx512")
    np.testing.assert_allclose(exe(**arrays), expected, rtol=1e-4, atol=1e-4)


def test_tuned_and_database_compiles_run_the_tuned_gemm_apart(tmp_path):
    graph, arrays, expected = _program()
    database = str(tmp_path / "db.sqlite")
    options = {"preset": "quick", "trials": 3, "batch_size": 3, "progress": False,
               "database": database}
    tuned = run_pipeline(graph, get_target("x86_avx512"), tuning=options)
    assert tuned.schedules["mm"].kind is ScheduleKind.TEMPLATE
    assert tuned.schedules["mm"].config is not None
    assert any("mm -> out run apart" in note for note in tuned.schedule_notes)
    recorded = run_pipeline(graph, get_target("x86_avx512"), database=database)
    assert recorded.schedules["mm"].config == tuned.schedules["mm"].config
    exe = tc.compile(graph, target="x86_avx512", database=database)
    np.testing.assert_allclose(exe(**arrays), expected, rtol=1e-4, atol=1e-4)
