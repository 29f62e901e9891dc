"""One Executable called from several threads at once gives every caller its own correct result.

ctypes calls release the GIL, so the calls really overlap: kernels that pack an operand into a
workspace (a GEMM's packed B, a fused chain's packed B1 and D, a convolution's packed weights)
would otherwise pack one caller's operand over another's while it is being read. Every result is
compared with the numpy reference (``tilecraft.reference.run``) on that thread's own inputs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.reference import run
from tilecraft.target.registry import get_target

pytestmark = pytest.mark.skipif(not get_target("x86_avx512").available().execute,
                                reason="x86_avx512 cannot execute on this machine")

THREADS = 4


def gemm_softmax() -> tc.Graph:
    """A template GEMM (B packed into a workspace) followed by a softmax over its rows."""
    A = te.placeholder((96, 80), name="A")
    B = te.placeholder((80, 72), name="B")
    return tc.Graph.from_outputs([ops.softmax(ops.matmul(A, B, name="C"), name="S")])


def fused_chain() -> tc.Graph:
    """``E = softmax(A @ B) @ D`` fused into one kernel (B and D packed into workspaces)."""
    A = te.placeholder((2, 67, 64), name="A")
    B = te.placeholder((2, 64, 97), name="B")
    D = te.placeholder((2, 97, 64), name="D")
    T = ops.batch_matmul(A, B, name="T")
    return tc.Graph.from_outputs([ops.batch_matmul(ops.softmax(T, name="Z"), D, name="E")])


def conv_relu() -> tc.Graph:
    """A convolution (weights packed into a workspace) and an elementwise relu after it."""
    X = te.placeholder((1, 16, 18, 18), name="X")
    W = te.placeholder((32, 16, 3, 3), name="W")
    return tc.Graph.from_outputs([ops.relu(ops.conv2d(X, W, padding=1, name="Y"), name="R")])


def _inputs(graph: tc.Graph, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}


def _hammer(call: Callable[[int], None], threads: int = THREADS) -> list[BaseException]:
    """Run ``call(thread_index)`` on ``threads`` threads started together; their exceptions."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def body(index: int) -> None:
        try:
            barrier.wait()
            call(index)
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    workers = [threading.Thread(target=body, args=(k,)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return errors


@pytest.mark.parametrize("build", [gemm_softmax, fused_chain, conv_relu])
def test_one_executable_from_four_threads_with_different_inputs(build):
    graph = build()
    exe = tc.compile(graph, target="x86_avx512")
    assert any(step.workspaces for step in exe._steps), "the program must use a workspace"
    cases = [_inputs(graph, seed) for seed in range(THREADS * 2)]
    expected = [run(graph, inputs) for inputs in cases]
    iterations = 40

    def call(index: int) -> None:
        for iteration in range(iterations):
            case = (index + iteration) % len(cases)  # threads alternate between inputs
            got = exe(**cases[case])
            np.testing.assert_allclose(got, expected[case], rtol=1e-4, atol=1e-4,
                                       err_msg=f"thread {index}, iteration {iteration}")

    errors = _hammer(call)
    assert not errors, errors[0]
    # and a call on this thread afterwards still gives the right answer
    np.testing.assert_allclose(exe(**cases[0]), expected[0], rtol=1e-4, atol=1e-4)


def test_results_of_concurrent_calls_are_not_shared_between_callers():
    """Each call returns arrays of its own: a later call (on any thread) does not change them."""
    graph = gemm_softmax()
    exe = tc.compile(graph, target="x86_avx512")
    cases = [_inputs(graph, seed) for seed in range(THREADS)]
    expected = [run(graph, inputs) for inputs in cases]
    kept: dict[int, list[np.ndarray]] = {k: [] for k in range(THREADS)}

    def call(index: int) -> None:
        for _ in range(10):
            kept[index].append(exe(**cases[index]))

    assert not _hammer(call)
    for index, results in kept.items():
        assert len({id(r) for r in results}) == len(results)
        for result in results:
            np.testing.assert_allclose(result, expected[index], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("runner", ["openmp", "python-pool"])
def test_threads_launch_parallel_regions_at_once(runner, monkeypatch):
    """The native parallel-for (OpenMP: one team per launching thread) and the Python pool
    (the fallback without gcc/OpenMP) run parallel kernels launched by several threads at the
    same time; each kernel covers its whole range."""
    from tilecraft_x86_avx512 import runtime

    if runner == "python-pool":
        monkeypatch.setattr(runtime, "parallel_for", lambda: None)
    elif runtime.parallel_for() is None:
        pytest.skip("the OpenMP shim cannot be built here (no gcc or no OpenMP)")
    A = te.placeholder((512, 384), name="A")
    graph = tc.Graph.from_outputs([ops.relu(A, name="R")])
    exe = tc.compile(graph, target="x86_avx512")
    kernel = exe.compiled[0].runner
    assert kernel._parallel, "the test needs a kernel whose PARALLEL loop runs on threads"
    if kernel.threads == 1:
        kernel.threads = 2  # a 1-core machine: still launch a region of two threads
    cases = [_inputs(graph, seed) for seed in range(THREADS)]

    def call(index: int) -> None:
        for _ in range(50):
            out = exe(**cases[index])
            np.testing.assert_array_equal(out, np.maximum(cases[index]["A"], 0))

    assert not _hammer(call)
