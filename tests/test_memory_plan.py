"""The executable's arena: buffers whose lifetimes overlap never share bytes, buffers whose
lifetimes do not may, every buffer is aligned, and a chain of kernels run through shared bytes
still matches the numpy reference (also from several threads at once)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.reference import run
from tilecraft.runtime.aligned import ALIGN_BYTES, aligned_empty
from tilecraft.runtime.memory_plan import plan_memory
from tilecraft.target.registry import get_target


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.mark.parametrize("seed", range(20))
def test_live_buffers_never_share_bytes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lifetimes = []
    for index in range(int(rng.integers(1, 30))):
        first = int(rng.integers(0, 20))
        lifetimes.append((f"b{index}", int(rng.integers(1, 5000)), first,
                          first + int(rng.integers(0, 6))))
    plan = plan_memory(lifetimes)
    spans = {name: (plan.offsets[name], plan.offsets[name] + size)
             for name, size, _, _ in lifetimes}
    assert all(offset % ALIGN_BYTES == 0 for offset in plan.offsets.values())
    assert plan.size >= max(end for _, end in spans.values())
    for a, _, first_a, last_a in lifetimes:
        for b, _, first_b, last_b in lifetimes:
            if a < b and first_a <= last_b and first_b <= last_a:
                assert not _overlap(spans[a], spans[b]), (a, b, plan.offsets)
    # never worse than giving every buffer bytes of its own
    assert plan.size <= sum(-(-size // ALIGN_BYTES) * ALIGN_BYTES
                            for _, size, _, _ in lifetimes)


def test_a_chain_reuses_memory_and_a_name_keeps_one_slot() -> None:
    plan = plan_memory([(f"t{i}", 4096, i, i + 1) for i in range(10)])
    assert plan.size == 2 * 4096  # a ping-pong of two buffers
    twice = plan_memory([("x", 100, 0, 1), ("y", 100, 2, 3), ("x", 200, 5, 6)])
    assert twice.size == 256 + 128  # x: 0..6 with 200 bytes (a 256-byte slot); y inside it
    assert twice.offsets["x"] != twice.offsets["y"]
    with pytest.raises(ValueError, match="first step 3 after last step 1"):
        plan_memory([("z", 8, 3, 1)])


def test_aligned_empty_is_aligned_for_every_size() -> None:
    for count in (1, 3, 17, 1000, 1 << 20):
        array = aligned_empty((count,), "float32")
        assert array.ctypes.data % ALIGN_BYTES == 0 and array.shape == (count,)


@pytest.mark.skipif(not get_target("x86_avx512").available().execute,
                    reason="x86_avx512 cannot execute on this machine")
def test_a_long_chain_shares_an_arena_and_matches_the_reference() -> None:
    x = te.placeholder((37, 29), name="x")
    w = te.placeholder((29, 29), name="w")
    value = x
    for layer in range(6):  # matmul, relu, matmul, relu, ...: each tensor dies two kernels on
        value = ops.matmul(value, w, name=f"mm{layer}")
        value = te.compute((37, 29), lambda i, j, v=value: te.max(v[i, j], 0.0) * 0.5,
                           name=f"act{layer}")
    graph = tc.Graph.from_outputs([value])
    exe = tc.compile(graph, target="x86_avx512", passes={"inline_elementwise": False})
    plan = exe._plan
    kept = plan.workspace_buffers
    assert len(kept) >= 8
    total = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for _, shape, dtype in kept)
    assert plan.memory.size < total / 2, (plan.memory.size, total)  # memory is reused
    rng = np.random.default_rng(5)
    calls = [{"x": rng.standard_normal((37, 29)).astype(np.float32),
              "w": (rng.standard_normal((29, 29)) / 4).astype(np.float32)} for _ in range(8)]
    expected = [run(graph, inputs) for inputs in calls]
    got: list[np.ndarray | None] = [None] * len(calls)

    def call(index: int) -> None:
        got[index] = exe(**calls[index])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for ours, reference in zip(got, expected):
        np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-4)
        assert ours.ctypes.data % ALIGN_BYTES == 0
