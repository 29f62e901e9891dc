"""The launch path up to the driver: arguments checked and packed as cuLaunchKernel reads them,
the image chosen for the device, the driver calls in order against a stand-in driver that runs
a Python version of the kernel on its own memory; the missing-driver path; a real launch where
a GPU exists (marked device)."""

from __future__ import annotations

import ctypes
import enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from tilecraft_nvidia_tc.build import BuildOptions, LaunchShape, build_cuda
from tilecraft_nvidia_tc.launch import launch_status, make_launcher
from tilecraft_nvidia_tc.launch.arguments import (
    check_arrays,
    pack_arguments,
    parameters_from_meta,
)
from tilecraft_nvidia_tc.launch.driver import DriverLauncher, choose_image, driver_status
from tilecraft_nvidia_tc.target import NvidiaTcTarget

from tilecraft.errors import InputError, TargetError
from tilecraft.target.base import Source

SCALE = """
extern "C" __global__ void scale(const float* __restrict__ a, float* __restrict__ b, int n,
                                 float factor) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = factor * a[i];
}
"""
N = 37
META = {"entry": "scale", "grid": [2, 1, 1], "block": [32, 1, 1], "dynamic_shared_bytes": 0,
        "params": [{"name": "a", "dtype": "float32", "shape": [N], "output": False},
                   {"name": "b", "dtype": "float32", "shape": [N], "output": True},
                   {"name": "n", "dtype": "int32", "shape": [], "output": False,
                    "kind": "scalar"},
                   {"name": "factor", "dtype": "float32", "shape": [], "output": False,
                    "kind": "scalar"}]}
PARAMS = parameters_from_meta(META)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_arguments_are_packed_in_parameter_order_as_pointers_to_values() -> None:
    packed = pack_arguments("scale", PARAMS, {"a": 0x1000, "b": 0x2000}, {"n": N, "factor": 2.5})
    assert packed.values == (0x1000, 0x2000, N, 2.5) and len(packed) == 4
    pointers = (ctypes.c_void_p * 4).from_address(packed.address)
    assert ctypes.c_uint64.from_address(pointers[1]).value == 0x2000
    assert ctypes.c_int32.from_address(pointers[2]).value == N
    assert ctypes.c_float.from_address(pointers[3]).value == 2.5
    half = parameters_from_meta({"params": [{"name": "h", "dtype": "float16", "shape": [],
                                             "kind": "scalar"}]})
    assert pack_arguments("k", half, {}, {"h": 1.0}).values == (0x3C00,)
    with pytest.raises(InputError, match="kernel scale: no value for scalar parameter n"):
        pack_arguments("scale", PARAMS, {"a": 1, "b": 2}, {"factor": 1.0})


def test_a_zero_dimensional_buffer_is_a_pointer_not_a_scalar() -> None:
    """A full reduction's output is a 0-d buffer: the kernel takes it as ``float*``, so the
    launch passes its device pointer (reading it as a scalar would ask for a value)."""
    total = parameters_from_meta({"params": [
        {"name": "x", "dtype": "float32", "shape": [5], "output": False, "kind": "buffer"},
        {"name": "total", "dtype": "float32", "shape": [], "output": True}]})
    assert not total[1].is_scalar and total[1].nbytes == 4
    assert pack_arguments("sum", total, {"x": 0x1000, "total": 0x2000}).values == (0x1000, 0x2000)
    with pytest.raises(InputError, match="parameter n has kind 'value'"):
        parameters_from_meta({"params": [{"name": "n", "dtype": "int32", "kind": "value"}]})
    with pytest.raises(InputError, match=r"scalar parameter n has shape \[2\]"):
        parameters_from_meta({"params": [{"name": "n", "dtype": "int32", "shape": [2],
                                          "kind": "scalar"}]})


def test_generated_meta_marks_every_parameter_a_buffer() -> None:
    from tilecraft_nvidia_tc.target import NvidiaTcTarget

    from tilecraft import te
    from tilecraft.lower import LoweringOptions, lower_compute

    target = NvidiaTcTarget()
    x = te.placeholder((7,), name="x")
    k = te.reduce_axis(7, name="k")
    total = te.compute((), lambda: te.sum(x[k], axis=k), name="total")
    source = target.codegen(lower_compute(total, LoweringOptions.from_spec(target.spec)))
    parameters = parameters_from_meta(source.meta)
    assert [(p.name, p.shape, p.is_scalar) for p in parameters] == \
        [("x", (7,), False), ("total", (), False)]


def test_arrays_are_checked_against_the_parameters() -> None:
    a, b = np.zeros(N, np.float32), np.zeros(N, np.float32)
    assert set(check_arrays("scale", PARAMS, {"a": a, "b": b})) == {"a", "b"}
    with pytest.raises(InputError, match="kernel scale: no array for parameter b"):
        check_arrays("scale", PARAMS, {"a": a})
    with pytest.raises(InputError, match=r"parameter a is float32 \[37\], the array is float64 "
                                         r"\[37\]"):
        check_arrays("scale", PARAMS, {"a": a.astype(np.float64), "b": b})
    strided = np.zeros(2 * N, np.float32)[::2]
    with pytest.raises(InputError, match="the array of a is not C-contiguous"):
        check_arrays("scale", PARAMS, {"a": strided, "b": b})
    with pytest.raises(InputError, match="meta\\['params'\\] is malformed"):
        parameters_from_meta({"params": [{"dtype": "float32"}]})


class FakeDriver:
    """Enough of cuda.bindings.driver for the launcher: device memory is a dict of byte
    arrays, and launching ``scale`` runs it in Python on that memory."""

    class CUresult(enum.Enum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_INVALID_VALUE = 1

    CUdevice_attribute = SimpleNamespace(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
                                         CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor")
    CUfunction_attribute = SimpleNamespace(
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="max_dynamic_shared")

    def __init__(self, capability: tuple[int, int] = (9, 0)) -> None:
        self.capability = capability
        self.memory: dict[int, bytearray] = {}
        self.calls: list[tuple[Any, ...]] = []
        self.loaded = b""
        self.ok = self.CUresult.CUDA_SUCCESS

    def _log(self, *call: Any) -> None:
        self.calls.append(call)

    def cuInit(self, flags):  # noqa: N802 - the driver's names
        self._log("cuInit")
        return (self.ok,)

    def cuDeviceGetCount(self):  # noqa: N802
        return self.ok, 1

    def cuDeviceGet(self, ordinal):  # noqa: N802
        return self.ok, ordinal

    def cuDeviceGetAttribute(self, attribute, device):  # noqa: N802
        return self.ok, self.capability[0 if attribute == "major" else 1]

    def cuDeviceGetName(self, size, device):  # noqa: N802
        return self.ok, b"Fake GPU\0\0"

    def cuDevicePrimaryCtxRetain(self, device):  # noqa: N802
        return self.ok, "context"

    def cuCtxSetCurrent(self, context):  # noqa: N802
        return (self.ok,)

    def cuModuleLoadData(self, image):  # noqa: N802
        self.loaded = image
        return self.ok, "module"

    def cuModuleGetFunction(self, module, name):  # noqa: N802
        self._log("cuModuleGetFunction", name)
        return self.ok, "function"

    def cuFuncSetAttribute(self, function, attribute, value):  # noqa: N802
        self._log("cuFuncSetAttribute", attribute, value)
        return (self.ok,)

    def cuMemAlloc(self, size):  # noqa: N802
        address = 0x10000 * (len(self.memory) + 1)
        self.memory[address] = bytearray(size)
        return self.ok, address

    def cuMemFree(self, address):  # noqa: N802
        del self.memory[address]
        return (self.ok,)

    def cuMemcpyHtoD(self, device, host, size):  # noqa: N802
        self.memory[device][:size] = ctypes.string_at(host, size)
        return (self.ok,)

    def cuMemcpyDtoH(self, host, device, size):  # noqa: N802
        ctypes.memmove(host, bytes(self.memory[device][:size]), size)
        return (self.ok,)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):  # noqa: N802
        self._log("cuLaunchKernel", (gx, gy, gz), (bx, by, bz), shared)
        pointers = (ctypes.c_void_p * 4).from_address(params)
        a_address = ctypes.c_uint64.from_address(pointers[0]).value
        b_address = ctypes.c_uint64.from_address(pointers[1]).value
        n = ctypes.c_int32.from_address(pointers[2]).value
        factor = ctypes.c_float.from_address(pointers[3]).value
        a = np.frombuffer(self.memory[a_address], np.float32)
        b = np.frombuffer(self.memory[b_address], np.float32)
        for block in range(gx):
            for thread in range(bx):
                i = block * bx + thread
                if i < n:
                    b[i] = factor * a[i]
        return (self.ok,)

    def cuCtxSynchronize(self):  # noqa: N802
        return (self.ok,)

    def cuEventCreate(self, flags):  # noqa: N802
        return self.ok, object()

    def cuEventRecord(self, event, stream):  # noqa: N802
        return (self.ok,)

    def cuEventSynchronize(self, event):  # noqa: N802
        return (self.ok,)

    def cuEventElapsedTime(self, start, stop):  # noqa: N802
        return self.ok, 0.25

    def cuEventDestroy(self, event):  # noqa: N802
        return (self.ok,)


def _build(dynamic: int = 0) -> Any:
    return build_cuda(SCALE, "scale", options=BuildOptions(("sm_80", "sm_90")),
                      launch=LaunchShape((2, 1, 1), (32, 1, 1), dynamic))


def test_the_launcher_runs_the_driver_calls_with_packed_arguments() -> None:
    fake = FakeDriver((9, 0))
    built = _build()
    launcher = DriverLauncher(built, PARAMS, driver=fake, scalars={"n": N, "factor": 3.0})
    assert launcher.image == "cubin sm_90"
    assert fake.loaded == built.architecture("sm_90").cubin_path.read_bytes()
    a = np.arange(N, dtype=np.float32) - 5.0
    b = np.zeros(N, np.float32)
    seconds = launcher.run({"a": a, "b": b}, repeat=2)
    np.testing.assert_array_equal(b, 3.0 * a)
    assert seconds == [0.00025, 0.00025]
    launches = [call for call in fake.calls if call[0] == "cuLaunchKernel"]
    assert launches[0] == ("cuLaunchKernel", (2, 1, 1), (32, 1, 1), 0) and len(launches) == 3
    assert ("cuModuleGetFunction", b"scale") in fake.calls
    assert not fake.memory, "device buffers are freed"
    assert not any(call[0] == "cuFuncSetAttribute" for call in fake.calls)


def test_dynamic_shared_memory_over_48_kb_is_opted_in() -> None:
    fake = FakeDriver((8, 0))
    DriverLauncher(_build(dynamic=64 * 1024), PARAMS, driver=fake)
    assert ("cuFuncSetAttribute", "max_dynamic_shared", 65536) in fake.calls


def test_the_image_is_the_device_cubin_else_older_ptx() -> None:
    built = _build()
    assert choose_image(built, "sm_80")[0] == "cubin sm_80"
    kind, image = choose_image(built, "sm_86")
    assert kind == "ptx sm_80" and image.endswith(b"\0") and b".entry scale(" in image
    assert choose_image(built, "sm_120")[0] == "ptx sm_90"
    with pytest.raises(TargetError, match="built for sm_80, sm_90, none of which runs on this "
                                          "sm_75 device"):
        choose_image(built, "sm_75")


def test_a_driver_error_names_the_call() -> None:
    fake = FakeDriver()
    fake.cuModuleLoadData = lambda image: (fake.CUresult.CUDA_ERROR_INVALID_VALUE, None)
    with pytest.raises(TargetError, match="the CUDA driver failed in cuModuleLoadData: "
                                          "CUDA_ERROR_INVALID_VALUE"):
        DriverLauncher(_build(), PARAMS, driver=fake)


@pytest.mark.skipif(driver_status()[0], reason="a CUDA driver is present")
def test_without_a_driver_loading_says_why() -> None:
    usable, why = launch_status()
    assert not usable and "no CUDA driver" in why
    target = NvidiaTcTarget()
    artifact = target.build(Source("nvidia_tc", "scale", "cuda", SCALE, "scale", meta=META))
    with pytest.raises(TargetError, match="kernel scale cannot be launched here: no CUDA "
                                          "driver"):
        target.load(artifact)
    with pytest.raises(TargetError, match="cannot be launched here"):
        make_launcher(artifact.handle, PARAMS)


@pytest.mark.device
@pytest.mark.skipif(not driver_status()[0], reason=f"no GPU: {driver_status()[1]}")
def test_a_real_launch_matches_numpy() -> None:  # pragma: no cover - needs a GPU
    launcher = DriverLauncher(_build(), PARAMS, scalars={"n": N, "factor": 1.5})
    a = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    b = np.zeros(N, np.float32)
    seconds = launcher.run({"a": a, "b": b}, repeat=3)
    np.testing.assert_allclose(b, 1.5 * a, rtol=1e-6)
    assert len(seconds) == 3 and all(s > 0 for s in seconds)
