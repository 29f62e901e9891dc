"""NativeKernel.bind: the arrays bound once are checked once, the arrays passed per call are
checked on every call exactly as ``__call__`` checks them (same InputError naming the parameter),
and a bound kernel computes what ``__call__`` computes, inline and on threads."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from tilecraft_x86_avx512.bound import BoundKernel
from x86_kernels import buffer, kernel, load, loop, store, vloop

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import InputError
from tilecraft.te import Var


@pytest.fixture(scope="module")
def add(native):
    """``C = A + B`` on 7x5 float32 (a prime row count, a ragged vector loop)."""
    a, b, c = buffer("A", (7, 5)), buffer("B", (7, 5)), buffer("C", (7, 5))
    i, j = Var("i"), Var("j")
    return native.compile_kernel(kernel("add", [a, b, c], ["C"], loop(i, 7, vloop(j, 5, store(
        c, (i, j), load(a, i, j) + load(b, i, j))))))


def _arrays(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((7, 5)).astype(np.float32),
            rng.standard_normal((7, 5)).astype(np.float32))


def test_bound_matches_call_and_names_the_passed_parameters(add):
    a, b = _arrays(0)
    bound = add.bind({"B": b})
    assert bound.names == ("A", "C")
    c = np.full((7, 5), np.nan, np.float32)
    bound([a, c])
    np.testing.assert_array_equal(c, a + b)
    a2 = a * 3  # a new array each call: its pointer is taken per call
    bound([a2, c])
    np.testing.assert_array_equal(c, a2 + b)
    everything = add.bind({"A": a, "B": b, "C": c})
    assert everything.names == ()
    c[...] = 0
    everything(())
    np.testing.assert_array_equal(c, a + b)


def test_passed_arrays_are_checked_every_call(add):
    a, b = _arrays(1)
    bound = add.bind({"B": b})
    c = np.zeros((7, 5), np.float32)
    with pytest.raises(InputError, match=r"'A' must have shape \[7, 5\], got \[5, 7\]"):
        bound([a.T.copy(), c])
    with pytest.raises(InputError, match="'A' must have dtype float32, got float64"):
        bound([a.astype(np.float64), c])
    with pytest.raises(InputError, match="'A' is not C-contiguous"):
        bound([np.asfortranarray(a), c])
    with pytest.raises(InputError, match="'C' is written but its array is read-only"):
        read_only = np.zeros((7, 5), np.float32)
        read_only.flags.writeable = False
        bound([a, read_only])
    with pytest.raises(InputError, match="'A' must be a numpy array"):
        bound([a.tolist(), c])
    with pytest.raises(InputError, match="takes 2 array.*for A, C; got 1"):
        bound([a])
    with pytest.raises(InputError, match="takes 0 array.*got 1"):
        add.bind({"A": a, "B": b, "C": c})([a])
    np.testing.assert_array_equal(c, 0)  # nothing ran


def test_overlaps_with_bound_and_passed_arrays_are_refused(add):
    a, b = _arrays(2)
    storage = np.zeros(70, np.float32)
    bound = add.bind({"B": storage[:35].reshape(7, 5)})
    # the output passed per call shares one element with the bound B
    with pytest.raises(InputError, match="'C', which the kernel writes, overlaps .*'B'"):
        bound([a, storage[34:69].reshape(7, 5)])
    bound([a, storage[35:].reshape(7, 5)])  # adjacent: fine
    np.testing.assert_array_equal(storage[35:].reshape(7, 5), a)
    # the output passed per call is the input passed per call
    c = np.zeros((7, 5), np.float32)
    with pytest.raises(InputError, match="'C', which the kernel writes, overlaps .*'A'"):
        bound([c, c])
    # the bound output overlaps a bound input: refused when binding
    with pytest.raises(InputError, match="'C', which the kernel writes, overlaps .*'A'"):
        add.bind({"A": c, "C": c})


def test_bound_arrays_are_checked_when_bound(add):
    a, _ = _arrays(3)
    with pytest.raises(InputError, match="'B' must have dtype float32, got int32"):
        add.bind({"B": np.zeros((7, 5), np.int32)})
    with pytest.raises(InputError, match="'B' is not C-contiguous"):
        add.bind({"B": np.zeros((5, 7), np.float32).T})
    with pytest.raises(InputError, match="no parameter.*'D'.*its parameters are A, B, C"):
        add.bind({"D": a})


@pytest.fixture(scope="module")
def relu(native):
    """A kernel whose PARALLEL loop runs on threads (large enough for a parallel region)."""
    A = te.placeholder((512, 384), name="A")
    exe = tc.compile(tc.Graph.from_outputs([ops.relu(A, name="R")]), target=native)
    runner = exe.compiled[0].runner
    assert runner._parallel, "the test needs a kernel whose PARALLEL loop runs on threads"
    return runner


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_bound_parallel_kernel_covers_its_range_at_any_thread_count(relu, threads):
    rng = np.random.default_rng(threads)
    a = rng.standard_normal((512, 384)).astype(np.float32)
    saved = relu.threads
    try:
        bound = relu.bind({"A": a})
        relu.threads = threads  # changed after binding: the bound kernel follows it
        out = np.full((512, 384), np.nan, np.float32)
        bound([out])
        np.testing.assert_array_equal(out, np.maximum(a, 0))
        fixed_out = np.full((512, 384), np.nan, np.float32)
        relu.bind({"A": a, "R": fixed_out})(())
        np.testing.assert_array_equal(fixed_out, np.maximum(a, 0))
    finally:
        relu.threads = saved


def test_one_bound_kernel_from_several_threads(relu):
    """A call changes nothing in the bound kernel: concurrent calls with their own outputs."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((512, 384)).astype(np.float32)
    bound = relu.bind({"A": a})
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def body() -> None:
        try:
            barrier.wait()
            for _ in range(20):
                out = np.full((512, 384), np.nan, np.float32)
                bound([out])
                np.testing.assert_array_equal(out, np.maximum(a, 0))
        except BaseException as err:  # noqa: BLE001 - reported by the test
            errors.append(err)

    workers = [threading.Thread(target=body) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors[0]


def test_chain_runs_bound_kernels_in_order_and_times_each(add, relu):
    a, b = _arrays(6)
    c, d = np.full((7, 5), np.nan, np.float32), np.full((7, 5), np.nan, np.float32)
    first = add.bind({"A": a, "B": b, "C": c})
    second = add.bind({"A": c, "B": b, "C": d})  # reads what the first wrote
    chain = BoundKernel.chain([first, second])
    assert chain is not None, "gcc builds the chain's C loop wherever the parallel shim builds"
    start = time.perf_counter()
    seconds = chain()
    wall = time.perf_counter() - start
    # counter ticks scaled to the loop's clock time: they add up to at most the call's
    assert len(seconds) == 2 and all(s >= 0 for s in seconds)
    assert 0 < sum(seconds) <= wall
    np.testing.assert_array_equal(d, (a + b) + b)


def test_chain_takes_the_arrays_its_kernels_pass_per_call(add):
    """A chain's first and last kernels take arrays per call (a network's input and output):
    the chain takes them one kernel after another, checks them as each bound kernel does, and
    never runs a kernel when one is bad."""
    a, b = _arrays(9)
    middle = np.full((7, 5), np.nan, np.float32)
    chain = BoundKernel.chain([add.bind({"B": b, "C": middle}),  # passes A
                               add.bind({"A": middle}),  # passes B and C
                               add.bind({"A": middle, "B": b})])  # passes C
    assert chain is not None
    assert chain.names == ("A", "B", "C", "C")
    for seed in (10, 11):  # new arrays each call: their pointers are taken per call
        x, y = _arrays(seed)
        out, last = np.full((7, 5), np.nan, np.float32), np.full((7, 5), np.nan, np.float32)
        seconds = chain([x, y, out, last])
        assert len(seconds) == 3 and all(0 <= s < 10 for s in seconds)
        np.testing.assert_array_equal(out, (x + b) + y)
        np.testing.assert_array_equal(last, (x + b) + b)
    out = np.full((7, 5), np.nan, np.float32)
    with pytest.raises(InputError, match="takes 4 array"):
        chain([x, y, out])
    with pytest.raises(InputError, match=r"'C' must have shape \[7, 5\], got \[5, 7\]"):
        chain([x, y, out, np.zeros((5, 7), np.float32)])
    with pytest.raises(InputError, match="'C', which the kernel writes, overlaps"):
        chain([x, y, out, middle])
    middle[...] = np.nan
    with pytest.raises(InputError, match="'A' must have dtype float32"):
        chain([x.astype(np.float64), y, out, out.copy()])
    assert np.isnan(middle).all() and np.isnan(out).all()  # nothing ran


def test_one_chain_from_several_threads(add):
    """Each call fills its own copy of the steps: threads calling one chain at once, each
    with its own arrays, get their own results."""
    b = _arrays(12)[1]
    chain = BoundKernel.chain([add.bind({"B": b}), add.bind({"B": b})])  # A, C; A, C
    assert chain is not None and chain.names == ("A", "C", "A", "C")
    errors: list[BaseException] = []

    def body(seed: int) -> None:
        try:
            for round_ in range(50):
                x = np.full((7, 5), seed * 100 + round_, np.float32)
                middle, out = np.empty((7, 5), np.float32), np.empty((7, 5), np.float32)
                chain([x, middle, middle, out])
                np.testing.assert_array_equal(out, (x + b) + b)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    workers = [threading.Thread(target=body, args=(seed,)) for seed in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors[0]


def test_chain_follows_thread_counts_set_after_it_was_made(relu):
    rng = np.random.default_rng(8)
    a = rng.standard_normal((512, 384)).astype(np.float32)
    out, again = np.empty_like(a), np.empty_like(a)
    chain = BoundKernel.chain([relu.bind({"A": a, "R": out}), relu.bind({"A": -a, "R": again})])
    saved = relu.threads
    try:
        for threads in (1, 3, 2):
            relu.threads = threads
            out[...] = np.nan
            again[...] = np.nan
            chain()
            np.testing.assert_array_equal(out, np.maximum(a, 0))
            np.testing.assert_array_equal(again, np.maximum(-a, 0))
            assert chain._launches[1][0].threads == (1 if threads == 1 else threads)
    finally:
        relu.threads = saved
