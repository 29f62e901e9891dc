"""NVRTC (and nvcc, where present) builds hand-written CUDA kernels for sm_80 and sm_90 to PTX
and cubin with a resource report; failures and over-limit launches are BuildErrors naming the
kernel, the file and the repro command; builds are cached."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from tilecraft_nvidia_tc.build import BuildOptions, CudaBuildError, LaunchShape, build_cuda
from tilecraft_nvidia_tc.target import NvidiaTcTarget, load_target_spec
from tilecraft_nvidia_tc.toolchain.tools import ToolMissing, nvcc_path, nvrtc, plugin_include_dir

from tilecraft.errors import BuildError
from tilecraft.target.base import Source

try:
    nvrtc()
except ToolMissing as missing:  # pragma: no cover - the plugin's dependencies install NVRTC
    pytest.skip(f"NVRTC cannot load: {missing}", allow_module_level=True)

BOTH = BuildOptions(architectures=("sm_80", "sm_90"), compiler="nvrtc")

PLAIN = """
extern "C" __global__ void scale(const float* __restrict__ a, float* __restrict__ b, int n) {
  __shared__ float tile[97];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x % 97] = i < n ? a[i] : 0.0f;
  __syncthreads();
  if (i < n) b[i] = 2.0f * tile[(threadIdx.x + 1) % 97];
}
"""

WMMA = """
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void wmma_tile(const __half* a, const __half* b, float* c) {
  __shared__ float staged[16 * 16];
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(staged, fc, 16, wmma::mem_row_major);
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += 32) c[i] = staged[i];
}
"""

DYNAMIC = """
extern "C" __global__ void big_smem(const float* a, float* b) {
  extern __shared__ unsigned char tc_dynamic_smem[];
  float* staged = reinterpret_cast<float*>(tc_dynamic_smem);
  for (int i = threadIdx.x; i < 25600; i += blockDim.x) staged[i] = a[i];
  __syncthreads();
  for (int i = threadIdx.x; i < 25600; i += blockDim.x) b[i] = staged[25599 - i];
}
"""


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TILECRAFT_CACHE_DIR", str(tmp_path))
    return tmp_path


THREADS = load_target_spec().threads


def test_plain_kernel_builds_to_ptx_and_cubin_for_both_architectures() -> None:
    built = build_cuda(PLAIN, "scale", options=BOTH, threads=THREADS,
                       launch=LaunchShape((5, 1, 1), (128, 1, 1)))
    assert [b.architecture for b in built.architectures] == ["sm_80", "sm_90"]
    for arch in built.architectures:
        ptx = arch.ptx_path.read_text()
        assert ".entry scale(" in ptx and f".target {arch.architecture}" in ptx
        assert arch.cubin_path.read_bytes()[:4] == b"\x7fELF"
        resources = arch.resources
        assert 0 < resources.registers <= 255
        assert resources.static_shared_bytes == 97 * 4
        assert resources.spill_store_bytes == 0 and resources.spill_load_bytes == 0
        assert resources.local_bytes == 0 and resources.barriers == 1
        assert resources.source == "cuobjdump + ptxas -v"
        # 4 warps a block, few registers: the 32-block limit of the SM binds (64 warps: 100%)
        assert arch.occupancy.blocks_per_core == 16
        assert arch.occupancy.limited_by == "threads" and arch.occupancy.occupancy == 1.0
    report = built.report()
    assert report["architectures"]["sm_90"]["resources"]["static_shared_bytes"] == 388
    assert "scale sm_80: " in built.summary() and "388 B static shared" in built.summary()


def test_wmma_kernel_with_mma_h_builds_for_sm80_and_sm90() -> None:
    built = build_cuda(WMMA, "wmma_tile", options=BOTH, threads=THREADS,
                       launch=LaunchShape(block=(32, 1, 1)))
    for arch in built.architectures:
        assert "mma.sync" in arch.ptx_path.read_text() or "wmma.mma.sync" in \
            arch.ptx_path.read_text()
        assert arch.resources.static_shared_bytes == 16 * 16 * 4
        assert arch.resources.registers > 8


def test_dynamic_shared_memory_over_48_kb_builds_and_limits_occupancy() -> None:
    launch = LaunchShape(block=(256, 1, 1), dynamic_shared_bytes=25600 * 4)
    built = build_cuda(DYNAMIC, "big_smem", options=BOTH, threads=THREADS, launch=launch)
    sm80, sm90 = built.architectures
    assert sm80.resources.static_shared_bytes == 0
    # 102400 + 1024 reserved = 103424 a block: 164 KB hold one, 228 KB two
    assert (sm80.occupancy.blocks_per_core, sm80.occupancy.limited_by) == (1, "shared_memory")
    assert (sm90.occupancy.blocks_per_core, sm90.occupancy.limited_by) == (2, "shared_memory")
    with pytest.raises(BuildError, match=r"kernel big_smem: a block needs 180000 bytes of "
                                         r"shared memory \(0 static \+ 180000 dynamic\), over "
                                         r"the 166912 bytes one block may use on sm_80"):
        build_cuda(DYNAMIC, "big_smem", options=BOTH, threads=THREADS,
                   launch=LaunchShape(block=(256, 1, 1), dynamic_shared_bytes=180000))


def test_too_many_threads_per_block_is_refused_naming_the_limit() -> None:
    with pytest.raises(BuildError, match=r"kernel scale: a block of 2048 threads \(64x32x1\) "
                                         r"exceeds the spec's max_threads_per_block 1024"):
        build_cuda(PLAIN, "scale", options=BOTH, threads=THREADS,
                   launch=LaunchShape(block=(64, 32, 1)))


def test_syntax_error_gives_the_file_the_repro_command_and_the_log() -> None:
    broken = PLAIN.replace("2.0f * tile", "2.0f * tyle")
    with pytest.raises(CudaBuildError) as info:
        build_cuda(broken, "scale", options=BOTH, threads=THREADS)
    err = info.value
    message = str(err)
    assert message.startswith("kernel scale: nvrtc rejected the CUDA source for sm_80; source ")
    assert err.source_path is not None and err.source_path.read_text() == broken
    assert err.source_path.name == "scale.cu"
    assert 'identifier "tyle" is undefined' in err.log and err.log.strip() in message
    assert "-m tilecraft_nvidia_tc.build" in err.command and "--arch sm_80" in err.command
    assert "# or: nvcc -cubin -arch=sm_80" in err.command
    own_command = err.command.split("  # or: ")[0]
    done = subprocess.run(shlex.split(own_command), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 1 and 'identifier "tyle" is undefined' in done.stderr


def test_an_entry_the_cubin_lacks_is_named() -> None:
    mangled = PLAIN.replace('extern "C" ', "")
    with pytest.raises(BuildError, match=r"the cubin for sm_80 has no kernel named scale; its "
                                         r"kernels are _Z5scalePKfPfi"):
        build_cuda(mangled, "scale", options=BOTH)


def test_builds_are_cached_by_source_architecture_and_options(cache_dir: Path) -> None:
    first = build_cuda(PLAIN, "scale", options=BOTH, threads=THREADS)
    again = build_cuda(PLAIN, "scale", options=BOTH, threads=THREADS)
    assert not any(b.cached for b in first.architectures)
    assert all(b.cached for b in again.architectures)
    assert [b.cubin_path for b in first.architectures] == \
        [b.cubin_path for b in again.architectures]
    assert first.architectures[0].cubin_path.is_relative_to(cache_dir)
    assert first.architectures[0].cubin_path.parent != first.architectures[1].cubin_path.parent
    other = build_cuda(PLAIN.replace("2.0f", "3.0f"), "scale", options=BOTH)
    assert not other.architectures[0].cached
    # a folder whose record is damaged is built again, not trusted
    (first.architectures[0].cubin_path.parent / "build.json").write_text("{broken")
    assert not build_cuda(PLAIN, "scale", options=BOTH).architectures[0].cached


def test_the_target_builds_a_source_with_its_launch_meta() -> None:
    source = Source("nvidia_tc", "scale", "cuda", PLAIN, "scale", suffix="cu", meta={
        "entry": "scale", "grid": [3, 1, 1], "block": [96, 1, 1], "dynamic_shared_bytes": 0,
        "params": [{"name": "a", "dtype": "float32", "shape": [257], "output": False},
                   {"name": "b", "dtype": "float32", "shape": [257], "output": True}]})
    artifact = NvidiaTcTarget().build(source)
    build = artifact.meta["build"]
    assert set(build["architectures"]) == {"sm_80", "sm_90"}
    assert build["block"] == [96, 1, 1] and artifact.path.suffix == ".cubin"
    assert build["architectures"]["sm_80"]["occupancy"]["limits"]["threads"] == 21
    assert artifact.meta["params"][1]["output"] is True


@pytest.mark.skipif(not (plugin_include_dir() / "tilecraft_cuda.h").is_file(),
                    reason="tilecraft_cuda.h has not landed")
def test_a_kernel_including_the_plugin_header_builds() -> None:
    text = """#include "tilecraft_cuda.h"
extern "C" __global__ void staged(const float* __restrict__ a, float* __restrict__ b) {
  __shared__ __align__(16) float tile[64];
  tc_cp_async_16(&tile[threadIdx.x * 4], &a[blockIdx.x * 64 + threadIdx.x * 4]);
  tc_cp_async_commit();
  tc_cp_async_wait<0>();
  __syncthreads();
  b[blockIdx.x * 64 + threadIdx.x] = tile[63 - threadIdx.x];
}
"""
    built = build_cuda(text, "staged", options=BOTH, threads=THREADS,
                       launch=LaunchShape(block=(16, 1, 1)))
    assert "cp.async" in built.architectures[0].ptx_path.read_text()
    assert built.architectures[0].resources.static_shared_bytes == 256


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_nvcc_builds_the_same_kernel_when_chosen() -> None:
    built = build_cuda(PLAIN, "scale", options=BuildOptions(("sm_80",), compiler="nvcc"),
                       threads=THREADS)
    (arch,) = built.architectures
    assert built.compiler.startswith("nvcc ")
    assert arch.resources.static_shared_bytes == 388 and arch.resources.registers > 0
    assert ".entry scale(" in arch.ptx_path.read_text()


def test_an_empty_compiler_log_leaves_the_process_bytes_intact(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """NVRTC writes its log, PTX and cubin into the buffers it is handed. A clean build
    without ``--verbose`` has an empty log (size 1): written into ``b" " * 1``, which is
    CPython's one shared ``b" "``, it turned every ``b" "`` of the process into ``b"\\0"``,
    and Python 3.12 then compiled the f-strings of modules imported later without their
    spaces (``unsigned a[2]`` generated as ``unsigneda[2]``: seen on a GPU machine)."""
    import ctypes
    import sys

    from tilecraft_nvidia_tc.toolchain import compilers

    monkeypatch.setattr(compilers, "nvrtc_options",
                        lambda architecture, folders: [f"--gpu-architecture={architecture}"])
    code = compilers.compile_with_nvrtc(PLAIN, "scale.cu", "sm_80", ())
    space = b" "   # the shared one-byte object
    try:
        assert space[0] == 0x20, "the build wrote into the shared b' '"
        assert code.log == "" and code.cubin[:4] == b"\x7fELF" and ".entry scale(" in code.ptx
    finally:   # undo the damage so that a failure here does not spread to later tests
        if space[0] != 0x20:
            ctypes.memset(id(space) + sys.getsizeof(b"") - 1, 0x20, 1)


def test_a_source_compiled_again_still_reports_its_resources() -> None:
    """NVRTC 12.9+ keeps a cache of its own where a CUDA driver is installed and answers a
    source it has seen from it without running ptxas: the log came back empty on an H200
    machine, and a build without cuobjdump then failed. ``--no-cache`` keeps ptxas running."""
    from tilecraft_nvidia_tc.toolchain import compilers
    from tilecraft_nvidia_tc.toolchain.tools import include_dirs

    logs = [compilers.compile_with_nvrtc(PLAIN, "scale.cu", "sm_90", include_dirs()).log
            for _ in range(2)]
    for log in logs:
        assert "Compiling entry function 'scale'" in log and "388 bytes smem" in log


def test_without_cuobjdump_the_resources_come_from_ptxas(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from tilecraft_nvidia_tc.toolchain import compiler

    monkeypatch.setattr(compiler, "cuobjdump_path", lambda: None)
    built = build_cuda(PLAIN, "scale", options=BuildOptions(("sm_90",)), threads=THREADS)
    resources = built.architectures[0].resources
    assert resources.source == "ptxas -v"
    assert resources.static_shared_bytes == 388 and resources.registers > 0
    assert resources.spill_store_bytes == 0 and resources.shared_section_bytes is None
