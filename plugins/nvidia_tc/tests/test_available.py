"""available() says which of codegen / build / emulate / execute work on this machine and
why not, never raising; `tilecraft targets` shows it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tilecraft_nvidia_tc import availability
from tilecraft_nvidia_tc.launch.driver import driver_status
from tilecraft_nvidia_tc.target import NvidiaTcTarget
from tilecraft_nvidia_tc.toolchain import tools

from tilecraft.cli import main as cli_main


def test_build_works_here_from_pip_and_says_with_what() -> None:
    usable, why = availability.build_status()
    assert usable, why
    assert why.startswith("nvrtc 1") and "resource usage by cuobjdump" in why
    assert NvidiaTcTarget().available().build


@pytest.mark.skipif(driver_status()[0], reason="a CUDA driver is present")
def test_execute_is_refused_here_with_the_reason() -> None:
    target_availability = NvidiaTcTarget().available()
    assert not target_availability.execute
    assert "no CUDA driver" in target_availability.reasons["execute"]
    assert target_availability.emulate
    assert target_availability.estimate and "estimate" not in target_availability.reasons


def test_build_reports_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILECRAFT_CUDA_COMPILER", "nvcc")
    monkeypatch.setattr(availability, "nvcc_path", lambda: None)
    assert availability.build_status() == (
        False, "TILECRAFT_CUDA_COMPILER=nvcc but nvcc is not on PATH")
    monkeypatch.delenv("TILECRAFT_CUDA_COMPILER")
    monkeypatch.setattr(availability, "cuda_include_dir", lambda: None)
    usable, why = availability.build_status()
    assert not usable and "the CUDA headers (cuda_fp16.h, mma.h) are missing" in why
    monkeypatch.undo()

    def missing() -> str:
        raise tools.ToolMissing("libnvrtc cannot be loaded (OSError: nope)")
    monkeypatch.setattr(availability, "nvrtc_version", missing)
    assert availability.build_status() == (False, "libnvrtc cannot be loaded (OSError: nope)")
    monkeypatch.undo()
    monkeypatch.setattr(availability, "cuobjdump_path", lambda: None)
    usable, why = availability.build_status()
    assert usable and why.endswith("resource usage from ptxas' report (no cuobjdump: pip "
                                   "install nvidia-cuda-cuobjdump)")


def test_emulation_needs_a_host_compiler_and_the_header(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setattr(availability.shutil, "which", lambda name: None)
    assert availability.emulate_status() == (
        False, "no host C++ compiler (c++, g++, clang++) on PATH")
    monkeypatch.undo()
    monkeypatch.setattr(availability, "plugin_include_dir", lambda: tmp_path)
    usable, why = availability.emulate_status()
    assert not usable and why == f"the emulation headers are missing from {tmp_path}"


def test_describe_machine_gives_every_stage() -> None:
    described = availability.describe_machine()
    assert set(described) == {"codegen", "build", "emulate", "execute"}
    assert described["build"].startswith("yes: nvrtc")
    assert all(line.startswith(("yes: ", "no: ")) for line in described.values())


def test_tilecraft_targets_lists_the_target_with_its_availability(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["targets"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("nvidia_tc"))
    capability = NvidiaTcTarget().available().capability.value
    assert " ok " in line and capability in line
    if not driver_status()[0]:
        assert "execute: no CUDA driver" in line
