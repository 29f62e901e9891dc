"""Launching a built kernel on a GPU through the CUDA driver API of cuda-python
(``cuda.bindings.driver``): cuInit, the device's primary context, ``cuModuleLoadData`` of the
cubin of the device's architecture (else the PTX, JIT-compiled by the driver),
``cuModuleGetFunction``, ``cuFuncSetAttribute`` for dynamic shared memory over 48 KB,
``cuMemAlloc`` / ``cuMemcpyHtoD`` / ``cuMemcpyDtoH``, ``cuLaunchKernel`` with the Source's grid,
block and dynamic shared bytes, and events for timing.

Everything up to the driver calls is plain Python over an injectable ``driver`` module, so the
tests run it against a stand-in where no GPU exists; :func:`driver_status` says whether the
real one works here and why not (no libcuda, no device), never raising.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from tilecraft.errors import TargetError
from tilecraft_nvidia_tc.launch.arguments import (
    KernelParameter,
    PackedArguments,
    check_arrays,
    pack_arguments,
)
from tilecraft_nvidia_tc.toolchain.compiler import CudaBuild

if TYPE_CHECKING:
    from tilecraft_nvidia_tc.launch.resident import BoundLaunch

#: dynamic shared memory a kernel may use without opting in
DEFAULT_DYNAMIC_SHARED_BYTES = 48 * 1024


def load_driver() -> ModuleType:
    """``cuda.bindings.driver`` (a TargetError saying why it cannot be imported)."""
    try:
        from cuda.bindings import driver
    except ImportError as err:
        raise TargetError(f"cuda.bindings.driver cannot be imported ({err}); pip install "
                          "cuda-python") from err
    return driver


def _check(driver: ModuleType, result: Any, what: str) -> Any:
    """The values after the status of a cuda-python call (a TargetError naming the call and
    the driver's error name otherwise)."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if status != driver.CUresult.CUDA_SUCCESS:
        name = getattr(status, "name", str(status))
        raise TargetError(f"the CUDA driver failed in {what}: {name}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@functools.cache
def driver_status() -> tuple[bool, str]:
    """(usable, description): ``(True, "NVIDIA H100 ..., sm_90")`` where a GPU and its driver
    answer, else ``(False, why)``. Never raises."""
    try:
        device = Device(load_driver())
    except TargetError as err:
        return False, str(err)
    except Exception as err:  # noqa: BLE001 - cuda-python raises its loader's errors
        first = str(err).split(". ")[0].strip().rstrip(".")
        return False, f"no CUDA driver ({type(err).__name__}: {first})"
    return True, f"{device.name}, {device.architecture}"


class Device:
    """Device 0 with its primary context made current."""

    def __init__(self, driver: ModuleType) -> None:
        self.driver = driver
        _check(driver, driver.cuInit(0), "cuInit")
        count = _check(driver, driver.cuDeviceGetCount(), "cuDeviceGetCount")
        if not count:
            raise TargetError("the CUDA driver sees no device")
        self.handle = _check(driver, driver.cuDeviceGet(0), "cuDeviceGet")
        attribute = driver.CUdevice_attribute
        major = _check(driver, driver.cuDeviceGetAttribute(
            attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.handle),
            "cuDeviceGetAttribute")
        minor = _check(driver, driver.cuDeviceGetAttribute(
            attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.handle),
            "cuDeviceGetAttribute")
        self.architecture = f"sm_{major}{minor}"
        raw = _check(driver, driver.cuDeviceGetName(256, self.handle), "cuDeviceGetName")
        self.name = bytes(raw).split(b"\0", 1)[0].decode(errors="replace")
        self.context = _check(driver, driver.cuDevicePrimaryCtxRetain(self.handle),
                              "cuDevicePrimaryCtxRetain")
        _check(driver, driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")


def choose_image(build: CudaBuild, architecture: str) -> tuple[str, bytes]:
    """What to load on a device of ``architecture``: its own cubin, else the PTX of the
    newest built architecture not above it (the driver compiles PTX forward), else a
    TargetError naming what was built."""
    for built in build.architectures:
        if built.architecture == architecture:
            return f"cubin {built.architecture}", built.cubin_path.read_bytes()
    number = int(architecture.removeprefix("sm_"))
    older = [b for b in build.architectures if int(b.architecture.removeprefix("sm_"))
             <= number]
    if not older:
        raise TargetError(f"kernel {build.kernel_name} was built for "
                          f"{', '.join(b.architecture for b in build.architectures)}, none of "
                          f"which runs on this {architecture} device; build for {architecture}")
    newest = max(older, key=lambda b: int(b.architecture.removeprefix("sm_")))
    return f"ptx {newest.architecture}", newest.ptx_path.read_bytes() + b"\0"


class DriverLauncher:
    """A built kernel loaded on the device; call it with arrays by parameter name (outputs are
    copied back into the caller's arrays)."""

    def __init__(self, build: CudaBuild, parameters: Sequence[KernelParameter],
                 driver: ModuleType | None = None, scalars: Mapping[str, Any] | None = None
                 ) -> None:
        self.build = build
        self.parameters = tuple(parameters)
        self.scalars = dict(scalars or {})
        self.device = Device(driver or load_driver())
        self.driver = self.device.driver
        self.image, image = choose_image(build, self.device.architecture)
        self.module = _check(self.driver, self.driver.cuModuleLoadData(image),
                             "cuModuleLoadData")
        self.function = _check(self.driver, self.driver.cuModuleGetFunction(
            self.module, build.entry.encode()), "cuModuleGetFunction")
        dynamic = build.launch.dynamic_shared_bytes
        if dynamic > DEFAULT_DYNAMIC_SHARED_BYTES:
            attribute = self.driver.CUfunction_attribute
            _check(self.driver, self.driver.cuFuncSetAttribute(
                self.function, attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dynamic), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")

    def _launch(self, pointers: Mapping[str, int]) -> None:
        self._launch_packed(pack_arguments(self.build.kernel_name, self.parameters, pointers,
                                           self.scalars))

    def _launch_packed(self, packed: PackedArguments) -> None:
        """Launch on the default stream with ``packed`` (kept referenced by the caller until
        the launch is done)."""
        launch = self.build.launch
        _check(self.driver, self.driver.cuLaunchKernel(
            self.function, *launch.grid, *launch.block, launch.dynamic_shared_bytes, 0,
            packed.address, 0), "cuLaunchKernel")

    def make_current(self) -> None:
        """Make the device's context current on the calling thread (a thread other than the
        one that loaded the kernel has none)."""
        _check(self.driver, self.driver.cuCtxSetCurrent(self.device.context), "cuCtxSetCurrent")

    def bind(self, fixed: Mapping[str, np.ndarray]) -> BoundLaunch:
        """This kernel with the arrays of ``fixed`` bound (the Executable's protocol: see
        :mod:`tilecraft_nvidia_tc.launch.resident`, where consecutive bound kernels keep their
        data in device memory)."""
        from tilecraft_nvidia_tc.launch.resident import BoundLaunch

        return BoundLaunch(self, fixed)

    def run(self, arrays: Mapping[str, np.ndarray], repeat: int = 0) -> list[float]:
        """Copy the inputs to the device, launch once, copy the outputs back; then launch
        ``repeat`` more times between events and return each launch's seconds."""
        driver = self.driver
        checked = check_arrays(self.build.kernel_name, self.parameters, arrays)
        self.make_current()
        pointers: dict[str, int] = {}
        try:
            for parameter in self.parameters:
                if parameter.is_scalar:
                    continue
                pointer = _check(driver, driver.cuMemAlloc(max(parameter.nbytes, 1)),
                                 "cuMemAlloc")
                pointers[parameter.name] = int(pointer)
                array = checked[parameter.name]
                _check(driver, driver.cuMemcpyHtoD(pointer, array.ctypes.data, array.nbytes),
                       "cuMemcpyHtoD")
            self._launch(pointers)
            _check(driver, driver.cuCtxSynchronize(), "cuCtxSynchronize")
            for parameter in self.parameters:
                if parameter.output and not parameter.is_scalar:
                    array = checked[parameter.name]
                    _check(driver, driver.cuMemcpyDtoH(array.ctypes.data,
                                                       pointers[parameter.name], array.nbytes),
                           "cuMemcpyDtoH")
            return [self._timed(pointers) for _ in range(repeat)]
        finally:
            for pointer in pointers.values():
                driver.cuMemFree(pointer)

    def _timed(self, pointers: Mapping[str, int]) -> float:
        driver = self.driver
        start = _check(driver, driver.cuEventCreate(0), "cuEventCreate")
        stop = _check(driver, driver.cuEventCreate(0), "cuEventCreate")
        try:
            _check(driver, driver.cuEventRecord(start, 0), "cuEventRecord")
            self._launch(pointers)
            _check(driver, driver.cuEventRecord(stop, 0), "cuEventRecord")
            _check(driver, driver.cuEventSynchronize(stop), "cuEventSynchronize")
            milliseconds = _check(driver, driver.cuEventElapsedTime(start, stop),
                                  "cuEventElapsedTime")
        finally:
            driver.cuEventDestroy(start)
            driver.cuEventDestroy(stop)
        return float(milliseconds) / 1e3

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.run(arrays)


__all__ = ["DEFAULT_DYNAMIC_SHARED_BYTES", "Device", "DriverLauncher", "choose_image",
           "driver_status", "load_driver"]
