"""Kernels whose data stays in device memory between them (launch/resident.py), against the
stand-in driver of test_launch.py made to resolve pointers inside an allocation: a chain of two
``scale`` kernels copies only the arrays passed per call and the shared ones, mirrors an arena
of fixed arrays as one allocation, and gives what the kernels run one by one give."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_launch import PARAMS, FakeDriver, _build  # noqa: E402
from tilecraft_nvidia_tc.launch.driver import DriverLauncher, driver_status  # noqa: E402
from tilecraft_nvidia_tc.launch.resident import BoundLaunch, ResidentChain  # noqa: E402

from tilecraft.errors import InputError  # noqa: E402

N = 37


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path))
    return tmp_path


class OffsetDriver(FakeDriver):
    """The stand-in driver with pointers anywhere inside an allocation, and its copies
    logged."""

    def _at(self, address: int) -> memoryview:
        for base, memory in self.memory.items():
            if base <= address < base + max(len(memory), 1):
                return memoryview(memory)[address - base:]
        raise AssertionError(f"no device memory at {address:#x}")

    def cuMemcpyHtoD(self, device, host, size):  # noqa: N802
        self._log("HtoD", size)
        self._at(device)[:size] = ctypes.string_at(host, size)
        return (self.ok,)

    def cuMemcpyDtoH(self, host, device, size):  # noqa: N802
        self._log("DtoH", size)
        ctypes.memmove(host, bytes(self._at(device)[:size]), size)
        return (self.ok,)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params,  # noqa: N802
                       extra):
        self._log("cuLaunchKernel")
        pointers = (ctypes.c_void_p * 4).from_address(params)
        a_address = ctypes.c_uint64.from_address(pointers[0]).value
        b_address = ctypes.c_uint64.from_address(pointers[1]).value
        n = ctypes.c_int32.from_address(pointers[2]).value
        factor = ctypes.c_float.from_address(pointers[3]).value
        a = np.frombuffer(self._at(a_address)[:4 * n], np.float32).copy()
        self._at(b_address)[:4 * n] = (factor * a).astype(np.float32).tobytes()
        return (self.ok,)


def _launchers(fake: OffsetDriver) -> tuple[DriverLauncher, DriverLauncher]:
    built = _build()
    return (DriverLauncher(built, PARAMS, driver=fake, scalars={"n": N, "factor": 2.0}),
            DriverLauncher(built, PARAMS, driver=fake, scalars={"n": N, "factor": 3.0}))


def _copies(fake: OffsetDriver) -> list[tuple]:
    return [call for call in fake.calls if call[0] in ("HtoD", "DtoH")]


def test_a_chain_copies_only_what_is_passed_per_call() -> None:
    fake = OffsetDriver()
    double, triple = _launchers(fake)
    arena = np.zeros(3 * N, np.float32)   # the middle array sits inside a larger arena
    middle = arena[N:2 * N]
    chain = BoundLaunch.chain([double.bind({"b": middle}), triple.bind({"a": middle})])
    assert isinstance(chain, ResidentChain) and chain.names == ("a", "b")
    built_copies = len(_copies(fake))
    assert built_copies == 1, "the fixed array's region is uploaded once, when the chain is made"
    x = np.arange(N, dtype=np.float32) - 7.0
    for round_ in range(2):
        y = np.zeros(N, np.float32)
        fake.calls.clear()
        seconds = chain([x + round_, y])
        np.testing.assert_array_equal(y, 6.0 * (x + round_))
        assert _copies(fake) == [("HtoD", 4 * N), ("DtoH", 4 * N)]
        assert seconds == [0.00025, 0.00025]
        assert [c[0] for c in fake.calls].count("cuLaunchKernel") == 2
    np.testing.assert_array_equal(middle, 0.0)  # the intermediate stayed on the device
    assert len(fake.memory) == 1, "per-call buffers are freed, the chain's own kept"
    del chain
    assert not fake.memory, "the chain's device memory is freed with it"


def test_shared_arrays_are_copied_out_and_in_each_call() -> None:
    """A bound array a kernel outside the chain reads is written back after each call; one
    it writes is uploaded before each call."""
    fake = OffsetDriver()
    double, triple = _launchers(fake)
    middle, y = np.zeros(N, np.float32), np.zeros(N, np.float32)
    x = np.linspace(-3, 3, N, dtype=np.float32)
    out_chain = BoundLaunch.chain([double.bind({"b": middle}), triple.bind({"a": middle})],
                                  frozenset({"b"}))
    out_chain([x, y])
    np.testing.assert_array_equal(middle, 2.0 * x)
    np.testing.assert_array_equal(y, 6.0 * x)
    source = np.full(N, 5.0, np.float32)  # written on the host by a kernel outside the chain
    z = np.zeros(N, np.float32)
    # (the stand-in's kernels have parameters a and b only: "a" names source and middle here,
    # "b" middle and z; in an Executable each name is one array)
    in_chain = BoundLaunch.chain([double.bind({"a": source, "b": middle}),
                                  triple.bind({"a": middle, "b": z})], frozenset({"a", "b"}))
    source[:] = 4.0
    in_chain([])
    np.testing.assert_array_equal(z, 24.0)
    kept = BoundLaunch.chain([double.bind({"a": source, "b": middle}),
                              triple.bind({"a": middle, "b": z})])
    source[:] = 1.0
    kept([])
    np.testing.assert_array_equal(z, 24.0)  # not shared: z stays on the device, and the
    # source was uploaded when the chain was made (4.0), not again


def test_fixed_arrays_of_one_arena_share_one_allocation() -> None:
    fake = OffsetDriver()
    double, triple = _launchers(fake)
    arena = np.zeros(2 * N + 5, np.float32)
    first, second = arena[:N], arena[N + 5:]
    before = len(fake.memory)
    chain = BoundLaunch.chain([double.bind({"b": first}), triple.bind({"a": first,
                                                                      "b": second})],
                              frozenset({"b"}))
    assert len(fake.memory) - before == 1
    x = np.ones(N, np.float32)
    chain([x])
    np.testing.assert_array_equal(second, 6.0)
    np.testing.assert_array_equal(arena[N:N + 5], 0.0)


def test_bad_calls_name_the_kernel() -> None:
    fake = OffsetDriver()
    double, triple = _launchers(fake)
    middle = np.zeros(N, np.float32)
    with pytest.raises(InputError, match="kernel scale has no buffer parameter.*'c'"):
        double.bind({"c": middle})
    bound = double.bind({"b": middle})
    with pytest.raises(InputError, match="bound kernel scale takes 1 array"):
        bound([])
    chain = BoundLaunch.chain([bound, triple.bind({"a": middle})])
    with pytest.raises(InputError, match="chain of 2 kernels takes 2 array"):
        chain([np.zeros(N, np.float32)])
    with pytest.raises(InputError, match="parameter a is float32"):
        chain([np.zeros(N, np.float64), np.zeros(N, np.float32)])


def test_a_bound_launch_alone_runs_as_the_launcher_does() -> None:
    fake = OffsetDriver()
    double, _ = _launchers(fake)
    x, y = np.arange(N, dtype=np.float32), np.zeros(N, np.float32)
    double.bind({"a": x})([y])
    np.testing.assert_array_equal(y, 2.0 * x)
    assert not fake.memory


@pytest.mark.device
@pytest.mark.skipif(not driver_status()[0], reason=f"no GPU: {driver_status()[1]}")
def test_a_network_runs_as_one_resident_chain_on_a_gpu() -> None:  # pragma: no cover - GPU
    """A small network compiled for the GPU: its kernels run as one chain in device memory,
    its intermediates never copied, and the result is the reference's."""
    import tilecraft as tc
    import tilecraft.models as models

    graph = models.build("bert_base", small=True)
    exe = tc.compile(graph, target="nvidia_tc")
    x = np.random.default_rng(2).standard_normal(graph.inputs[0].shape).astype(np.float32)
    for _ in range(2):
        np.testing.assert_allclose(exe(x=x), tc.reference.run(graph, x=x), rtol=1e-3,
                                   atol=1e-3)
    calls = exe._plan.idle_workspaces[0].calls
    assert any(isinstance(call.run, ResidentChain) for call in calls)
    assert all(seconds > 0 for k in exe.report.kernels for seconds in k.run_seconds)
