"""The Executable binds each workspace set's arrays (intermediates, workspaces, constants,
precomputed packs) to runners that offer ``bind`` once, and passes only the call's inputs and
fresh outputs per call. Bad inputs still raise an InputError naming the input; concurrent calls,
calls after :meth:`Executable.install`, and runners without ``bind`` give the reference's
results."""

from __future__ import annotations

import copy
import threading

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import InputError
from tilecraft.reference import run
from tilecraft.runtime.executable import CompiledKernel
from tilecraft.target.registry import get_target

pytestmark = pytest.mark.skipif(not get_target("x86_avx512").available().execute,
                                reason="x86_avx512 cannot execute on this machine")


def small_net() -> tc.Graph:
    """conv (constant weights: packed once) -> relu (a graph output read by the next kernel)
    -> matmul with a constant -> softmax: intermediates, workspaces, constants, a precomputed
    pack and a fresh output passed on, on awkward sizes (13x13 image, 7 channels, 29 columns)."""
    rng = np.random.default_rng(0)
    X = te.placeholder((1, 7, 13, 13), name="X")
    W = te.constant(rng.standard_normal((11, 7, 3, 3)).astype(np.float32), name="W")
    R = ops.relu(ops.conv2d(X, W, padding=1, name="Y"), name="R")
    flat = ops.reshape(R, (11, 169), name="F")
    M = te.constant(rng.standard_normal((169, 29)).astype(np.float32), name="M")
    S = ops.softmax(ops.matmul(flat, M, name="P"), name="S")
    return tc.Graph.from_outputs([R, S])


def deep_net() -> tc.Graph:
    """Two convolutions and relus, a matmul and a softmax, only the softmax an output: the
    kernels between the first and the last pass nothing per call (one native chain)."""
    rng = np.random.default_rng(1)
    X = te.placeholder((1, 7, 13, 13), name="X")
    W1 = te.constant(rng.standard_normal((11, 7, 3, 3)).astype(np.float32), name="W1")
    W2 = te.constant(rng.standard_normal((5, 11, 3, 3)).astype(np.float32), name="W2")
    H = ops.relu(ops.conv2d(X, W1, padding=1, name="Y1"), name="H")
    G = ops.relu(ops.conv2d(H, W2, padding=1, name="Y2"), name="G")
    M = te.constant(rng.standard_normal((169, 29)).astype(np.float32), name="M")
    P = ops.matmul(ops.reshape(G, (5, 169), name="F"), M, name="P")
    return tc.Graph.from_outputs([ops.softmax(P, name="S")])


@pytest.fixture(scope="module")
def net():
    graph = small_net()
    return graph, tc.compile(graph, target="x86_avx512")


def _inputs(seed: int) -> dict[str, np.ndarray]:
    return {"X": np.random.default_rng(seed).standard_normal((1, 7, 13, 13)).astype(np.float32)}


def _same(got, want) -> None:
    """``got`` (an array or a tuple of them) equals the reference's ``want``."""
    if not isinstance(got, tuple):
        got, want = (got,), (want,)
    assert len(got) == len(want)
    for each, wanted in zip(got, want):
        np.testing.assert_allclose(each, wanted, rtol=1e-4, atol=1e-4)


def _check(exe, graph, seed: int) -> None:
    inputs = _inputs(seed)
    _same(exe(**inputs), run(graph, inputs))


def test_every_step_is_bound_and_matches_the_reference(net):
    graph, exe = net
    _check(exe, graph, 0)
    plan = exe._plan
    assert plan.has_workspaces and plan.idle_workspaces
    calls = plan.idle_workspaces[0].calls
    assert len(exe._steps) > 2
    assert all(type(call.run).__name__ in ("BoundKernel", "KernelChain") for call in calls)
    # only the call's input and fresh outputs are passed per call
    passed = {name for call in calls for name, _ in call.passed}
    assert passed <= {"X", "R", "S"} and "X" in passed
    _check(exe, graph, 1)  # the same set again, on other inputs


def test_bad_inputs_still_raise_naming_the_input(net):
    graph, exe = net
    x = _inputs(2)["X"]
    exe(X=x)  # a set is bound already: the checks below run on the fast path
    with pytest.raises(InputError, match=r"input 'X' has shape \(1, 7, 13, 12\)"):
        exe(X=x[..., :12].copy())
    with pytest.raises(InputError, match="input 'X' has dtype float64, expected float32"):
        exe(X=x.astype(np.float64))
    with pytest.raises(InputError, match="input 'X' must be a numpy array"):
        exe(X=x.tolist())
    strided = np.zeros((1, 7, 13, 26), np.float32)[..., ::2]
    strided[...] = x
    assert not strided.flags.c_contiguous  # copied, not rejected, as before
    for got, want in zip(exe(X=strided), run(graph, {"X": x})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def deep():
    graph = deep_net()
    return graph, tc.compile(graph, target="x86_avx512")


def test_a_chain_runs_the_kernels_that_pass_nothing(deep):
    graph, exe = deep
    inputs = _inputs(7)
    np.testing.assert_allclose(exe(**inputs), run(graph, inputs), rtol=1e-4, atol=1e-4)
    calls = exe._plan.idle_workspaces[0].calls
    chains = [call for call in calls if call.chained]
    assert chains, [type(call.run).__name__ for call in calls]
    # the chain takes per-call arrays: the input and output kernels join it, and the whole
    # call is one chain, passed the input and the fresh output
    assert len(calls) == 1 and [name for name, _ in calls[0].passed] == ["X", "S"]
    chained = [timings for call in chains for timings in call.chained]  # their run_seconds
    assert len(chained) + len(calls) - len(chains) == len(exe._steps)
    reported = {id(step.report.run_seconds) for step in exe._steps}
    assert all(id(timings) in reported for timings in chained)
    before = [len(timings) for timings in chained]
    inputs = _inputs(8)
    np.testing.assert_allclose(exe(**inputs), run(graph, inputs), rtol=1e-4, atol=1e-4)
    assert [len(timings) for timings in chained] == [n + 1 for n in before]
    assert all(0 <= timings[-1] < 10 for timings in chained)
    saved = [c.runner.threads for c in exe.compiled]
    try:  # thread counts set after the set was bound: the chain launches at the new counts
        for threads in (1, 2):
            for c in exe.compiled:
                c.runner.threads = threads
            np.testing.assert_allclose(exe(**inputs), run(graph, inputs), rtol=1e-4, atol=1e-4)
    finally:
        for c, threads in zip(exe.compiled, saved):
            c.runner.threads = threads


def test_a_busy_chain_runs_on_copies_and_a_refused_call_leaves_it_usable(deep):
    """A chain call that finds the chain in use (its lock held) runs on copies of its steps
    and pointer arrays; a call refused by a check writes nothing the next call would run on."""
    graph, exe = deep
    exe(**_inputs(9))
    chain = exe._plan.idle_workspaces[0].calls[0].run
    assert type(chain).__name__ == "KernelChain"
    x = _inputs(10)["X"]
    with pytest.raises(InputError, match="'S'"):  # after X's pointer was written
        chain([x, np.zeros((4, 29), np.float32)])
    want = run(graph, {"X": x})
    for busy in (True, False):
        if busy:
            assert chain._lock.acquire(blocking=False)
        try:
            np.testing.assert_allclose(exe(X=x), want, rtol=1e-4, atol=1e-4)
        finally:
            if busy:
                chain._lock.release()
        assert not chain._lock.locked()


@pytest.mark.parametrize("which", ["net", "deep"])
def test_concurrent_calls_match_the_reference(which, request):
    graph, exe = request.getfixturevalue(which)
    threads, errors = 6, []
    barrier = threading.Barrier(threads)
    expected = {seed: run(graph, _inputs(seed)) for seed in range(threads)}

    def body(index: int) -> None:
        try:
            barrier.wait()
            for iteration in range(15):
                seed = (index + iteration) % threads
                _same(exe(**_inputs(seed)), expected[seed])
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    workers = [threading.Thread(target=body, args=(k,)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors[0]
    assert len(exe._plan.idle_workspaces) >= 1


@pytest.mark.parametrize("which", ["net", "deep"])
def test_results_unchanged_after_install(which, request):
    graph, exe = request.getfixturevalue(which)
    _check(exe, graph, 3)
    other = tc.compile(graph, target="x86_avx512")
    old_plan = exe._plan
    exe.install(other.compiled, copy.deepcopy(other.report.kernels))
    assert exe._plan is not old_plan and not exe._plan.idle_workspaces  # fresh sets, rebound
    _check(exe, graph, 4)
    runners = {id(c.runner) for c in other.compiled}
    bound = [bound for call in exe._plan.idle_workspaces[0].calls
             for bound in getattr(call.run, "bounds", (call.run,))]
    assert len(bound) == len(exe._steps)
    assert all(id(each.kernel) in runners for each in bound)


def test_runners_without_bind_get_the_whole_mapping():
    """A runner that is a plain function (another target's, a wrapper) is called with the
    mapping of every parameter, bound arrays included."""
    graph = small_net()
    exe = tc.compile(graph, target="x86_avx512")
    seen: list[set[str]] = []

    def wrap(runner):
        def call(arrays):
            seen.append(set(arrays))
            runner(arrays)
        return call

    compiled = [CompiledKernel(c.kernel, c.source, wrap(c.runner)) for c in exe.compiled]
    exe.install(compiled, copy.deepcopy(exe.report.kernels))
    del seen[:]  # what install ran once (a constant's packing)
    _check(exe, graph, 5)
    steps = exe._steps
    assert len(seen) == len(steps)
    for names, step in zip(seen, steps):
        assert names == {name for name, _ in step.params}
    _check(exe, graph, 6)


class _Recorded:
    """A bound kernel whose type's ``chain`` records what the Executable passes it (the
    bounds' kernels and ``shared``) and runs them one by one."""

    chains: list[tuple[list[str], frozenset[str]]] = []

    def __init__(self, bound) -> None:
        self.bound, self.names = bound, bound.names

    def __call__(self, arrays) -> None:
        self.bound(arrays)

    @staticmethod
    def chain(bounds, shared):
        _Recorded.chains.append(([each.bound.kernel.name for each in bounds], shared))
        return None


class _Recording:
    def __init__(self, runner) -> None:
        self.runner = runner

    def __call__(self, arrays) -> None:
        self.runner(arrays)

    def bind(self, fixed) -> _Recorded:
        return _Recorded(self.runner.bind(fixed))


def test_a_chain_is_told_which_bound_arrays_other_kernels_take():
    """A kernel without ``bind`` between bound ones splits the chain; each side is told the
    intermediates the other side writes or reads (what a chain in a device's own memory must
    copy), and nothing else."""
    graph = deep_net()
    exe = tc.compile(graph, target="x86_avx512")
    names = [c.kernel.name for c in exe.compiled]
    assert {"Y1", "Y2_pad", "S"} <= set(names)
    compiled = [CompiledKernel(c.kernel, c.source, (lambda arrays, run=c.runner: run(arrays))
                               if c.kernel.name == "Y2_pad" else _Recording(c.runner))
                for c in exe.compiled]
    _Recorded.chains.clear()
    exe.install(compiled, copy.deepcopy(exe.report.kernels))
    _check(exe, graph, 11)
    before, after = _Recorded.chains
    assert before[0][-1] == "Y1" and before[1] == frozenset({"Y1"})
    assert after[0][0] == "Y2_bpacked_pack" and after[0][-1] == "S"
    assert after[1] == frozenset({"Y2_pad"})


def test_without_the_native_loop_each_kernel_runs_alone(monkeypatch):
    """Where the chain's C loop cannot be built (no gcc), bound kernels run one call each."""
    from tilecraft_x86_avx512 import bound

    monkeypatch.setattr(bound, "run_steps", lambda: None)
    graph = deep_net()
    exe = tc.compile(graph, target="x86_avx512")
    _check(exe, graph, 9)
    calls = exe._plan.idle_workspaces[0].calls
    assert len(calls) == len(exe._steps) and not any(call.chained for call in calls)
    _check(exe, graph, 10)


def test_install_while_other_threads_call(deep):
    """Calls running while :meth:`Executable.install` swaps the kernels finish with the plan
    they started with (its bound sets and chains); later calls bind the new plan's sets."""
    graph, exe = deep
    other = tc.compile(graph, target="x86_avx512")
    kernels = [(exe.compiled, copy.deepcopy(exe.report.kernels)),
               (other.compiled, copy.deepcopy(other.report.kernels))]
    expected = {seed: run(graph, _inputs(seed)) for seed in range(4)}
    stop, errors = threading.Event(), []

    def body(index: int) -> None:
        try:
            while not stop.is_set():
                _same(exe(**_inputs(index)), expected[index])
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    workers = [threading.Thread(target=body, args=(k,)) for k in range(4)]
    for worker in workers:
        worker.start()
    try:
        for swap in range(12):
            exe.install(*kernels[swap % 2])
            _check(exe, graph, swap % 4)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert not errors, errors[0]


def test_an_output_folded_to_a_constant_is_returned():
    """A call's values hold only its inputs, fresh outputs and the outputs folded to
    constants: those come back as computed, next to a kernel reading one of them."""
    C = te.constant(np.arange(6, dtype=np.float32).reshape(2, 3), name="C")
    Y = ops.reshape(C, (3, 2), name="Y")
    X = te.placeholder((1,), name="X")
    Z = te.compute((1,), lambda i: X[i] + Y[2, 1], name="Z")
    graph = tc.Graph.from_outputs([Y, Z])
    exe = tc.compile(graph, target="x86_avx512")
    x = np.array([10], np.float32)
    for _ in range(2):
        got = exe(X=x)
        for each, want in zip(got, run(graph, {"X": x})):
            np.testing.assert_array_equal(each, want)
