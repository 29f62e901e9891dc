"""The core's graph passes in tilecraft.compile: registered by default, each can be turned off."""

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.passes import DEFAULT_PASSES, PassError
from tilecraft.target.plugins import collect


def test_the_core_passes_are_registered_through_the_hook():
    names = [p.name for p in DEFAULT_PASSES]
    assert names == ["simplify", "fold_constants", "fold_batch_norm", "choose_layout",
                     "inline_elementwise", "eliminate_dead_code"]
    assert set(names) <= set(collect("passes"))


def _graph():
    rng = np.random.default_rng(0)
    x = te.placeholder((1, 2, 6, 6), name="x")
    w = te.constant(rng.standard_normal((3, 2, 3, 3)), "float32", name="w")
    stats = [te.constant(rng.random(3) + 0.5, "float32", name=n) for n in "mvgb"]
    bn = ops.batch_norm(ops.conv2d(x, w, name="conv"), *stats, name="bn")
    return tc.Graph.from_outputs([ops.relu(ops.transpose(ops.transpose(bn, name="t1"),
                                                         name="t2"), name="y")])


def test_compile_runs_the_passes_and_each_can_be_turned_off():
    pytest.importorskip("tilecraft_x86_avx512")
    graph = _graph()
    x = np.random.default_rng(1).standard_normal((1, 2, 6, 6)).astype(np.float32)
    want = tc.reference.run(graph, x=x)
    exe = tc.compile(graph, target="x86_avx512")
    assert "w_folded" in [t.name for t in exe.graph.constants]
    assert not {"t1", "t2"} & {t.name for t in exe.graph.computes}
    np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4)
    kept = tc.compile(graph, target="x86_avx512", passes={"fold_batch_norm": False})
    assert "w_folded" not in [t.name for t in kept.graph.constants]
    assert not {"t1", "t2"} & {t.name for t in kept.graph.computes}
    np.testing.assert_allclose(kept(x), want, rtol=1e-4, atol=1e-4)
    with pytest.raises(PassError, match="unknown graph pass.*fold_everything"):
        tc.compile(graph, target="x86_avx512", passes={"fold_everything": False})
