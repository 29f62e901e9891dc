"""No default target in the core; the command line's default is the host's best target, read
from what the installed targets report (capability, then the spec's declared peak)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.cli import main
from tilecraft.cli_target import choose_host_target
from tilecraft.errors import TargetError
from tilecraft.kernel_ir.interpreter import compile_kernel
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.kernel_ir.printer import kernel_to_str
from tilecraft.target import registry
from tilecraft.target.base import Artifact, Availability, Source, Target
from tilecraft.target.registry import TargetInfo, TargetStatus, register_target
from tilecraft.target.spec import TargetSpec, load_spec

EXECUTES = Availability(codegen=True, build=True, execute=True)
EMULATES = Availability(codegen=True, build=False, execute=False, emulate=True,
                        reasons={"build": "no compiler", "execute": "no device"})


def toy_spec(name: str, cores: int) -> TargetSpec:
    """A scalar target at 1 GHz: its declared float32 peak is 2 GFLOP/s per core."""
    return load_spec({
        "name": name, "api_version": 1, "version": "0.1",
        "memory": {"levels": [{"name": "DRAM", "size_bytes": None,
                               "bandwidth_bytes_per_cycle": 8}]},
        "compute": {"cores": cores, "frequency_hz": 1e9, "vector_bits": 0},
        "primitives": ["split"], "loop_kinds": ["serial"], "evaluation": "measure",
        "capabilities": {"executes_natively": True, "compiles": True},
    })


class ToyTarget(Target):
    """Executes 'natively' by building each kernel into the Kernel IR interpreter."""

    def __init__(self, name: str, cores: int = 1, availability: Availability = EXECUTES):
        self._spec = toy_spec(name, cores)
        self._availability = availability

    @property
    def spec(self) -> TargetSpec:
        return self._spec

    def available(self) -> Availability:
        return self._availability

    def codegen(self, kernel: Kernel) -> Source:
        return Source(self.name, kernel.name, "text", kernel_to_str(kernel), kernel.name,
                      meta={"kernel": kernel})

    def build(self, source: Source) -> Artifact:
        return Artifact(self.name, source.kernel_name, handle=compile_kernel(source.meta["kernel"]))

    def load(self, artifact: Artifact):  # noqa: ANN201 - a KernelFunction
        built = artifact.handle

        def run(arrays: Mapping[str, np.ndarray]) -> None:
            built(arrays)

        return run


def info(target: Target | None, name: str = "", broken: bool = False) -> TargetInfo:
    if broken:
        return TargetInfo(name=name, status=TargetStatus.BROKEN, target=None,
                          reason=f"plugin {name!r}: import failed")
    assert target is not None
    return TargetInfo(name=target.name, status=TargetStatus.OK, target=target,
                      availability=target.available())


@pytest.fixture
def only_toy_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    """No installed target is seen; the test registers its own in-process."""
    monkeypatch.setattr(registry, "_discovered", [])
    monkeypatch.setattr(registry, "_registered", {})


PROGRAM = """
import tilecraft as tc
from tilecraft import ops, te

X = te.placeholder((3, 19), name="X")
graph = tc.Graph.from_outputs([ops.relu(X, name="R")])
"""


def test_compile_has_no_default_target() -> None:
    parameter = inspect.signature(tc.compile).parameters["target"]
    assert parameter.default is inspect.Parameter.empty
    with pytest.raises(TypeError, match="target"):
        tc.compile(ops.relu(te.placeholder((4,), name="X"), name="R"))  # type: ignore[call-arg]


def test_the_fastest_executing_target_is_chosen() -> None:
    slow, fast = ToyTarget("slow", cores=1), ToyTarget("fast", cores=8)
    emulated = ToyTarget("emulated", cores=1000, availability=EMULATES)
    choice = choose_host_target([info(slow), info(None, "gone", broken=True), info(emulated),
                                 info(fast)])
    assert choice.target is fast and choice.candidates == ("fast", "slow")
    assert choice.explain() == (
        "no --target given: using fast, of the installed targets this machine executes (fast, "
        "slow), the one whose spec declares the highest float32 peak; pass --target NAME for "
        "another (`tilecraft targets` lists them)")
    # equal peaks: by name, so that the choice does not depend on discovery order
    first, second = ToyTarget("b_toy", cores=2), ToyTarget("a_toy", cores=2)
    assert choose_host_target([info(first), info(second)]).target is second
    only = choose_host_target([info(slow), info(emulated)])
    assert only.target is slow and "the only installed target this machine executes" in \
        only.explain()


def test_no_executing_target_is_an_error_naming_what_each_can_do() -> None:
    emulated = ToyTarget("emulated", availability=EMULATES)
    with pytest.raises(TargetError, match=r"no installed target executes on this machine "
                                          r"\(emulated: emulate, gone: broken\); pass --target"):
        choose_host_target([info(emulated), info(None, "gone", broken=True)])


def test_compile_without_target_uses_and_names_the_host_target(
        only_toy_targets: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    register_target(ToyTarget("slow_toy", cores=1))
    register_target(ToyTarget("fast_toy", cores=4))
    register_target(ToyTarget("emulated_toy", cores=64, availability=EMULATES))
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    assert main(["compile", str(program), "--run", "--output-dir", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("no --target given: using fast_toy, of the installed "
                                   "targets this machine executes (fast_toy, slow_toy)")
    assert "max abs error 0" in captured.out and "target fast_toy" in captured.out
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["R.text"]
    # an explicit --target is taken as given, and nothing is said about a choice
    assert main(["compile", str(program), "--target", "emulated_toy"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "target emulated_toy" in captured.out


def test_report_json_stays_json_when_the_target_is_chosen(
        only_toy_targets: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    register_target(ToyTarget("toy"))
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    assert main(["report", str(program), "--json"]) == 0
    captured = capsys.readouterr()
    assert "using toy" in captured.err
    assert json.loads(captured.out)["target"] == "toy"


def test_without_an_executing_target_the_commands_say_to_pass_one(
        only_toy_targets: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    register_target(ToyTarget("emulated_toy", availability=EMULATES))
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    for command in ("compile", "tune", "report"):
        assert main([command, str(program)]) == 2
        err = capsys.readouterr().err
        assert "no installed target executes on this machine (emulated_toy: emulate); pass " \
               "--target NAME" in err, (command, err)
