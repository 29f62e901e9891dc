"""`tilecraft new-target`: the rendered plugin package is complete, its spec validates, its
Target class loads and works, and its own tests (with the conformance suite) pass."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError, TargetError
from tilecraft.kernel_ir import (
    Buffer,
    BufferLoad,
    For,
    Kernel,
    LoopKind,
    Seq,
    Store,
    kernel_to_str,
)
from tilecraft.scaffold import render_target_package, scaffold_names, template_root
from tilecraft.target import Capability, Target, TargetSpec
from tilecraft.target.spec import TARGET_API_VERSION
from tilecraft.te import Var, const

EXPECTED_FILES = [
    "README.md",
    "pyproject.toml",
    "tests/test_conformance.py",
    "tilecraft_toy_npu/__init__.py",
    "tilecraft_toy_npu/spec.yaml",
    "tilecraft_toy_npu/target.py",
]


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("scaffold")
    render_target_package("toy_npu", directory)
    return directory / "toy_npu"


@pytest.fixture
def target(package: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    monkeypatch.syspath_prepend(str(package))
    module = importlib.import_module("tilecraft_toy_npu.target")
    yield module.ToyNpuTarget()
    for name in [n for n in sys.modules if n.startswith("tilecraft_toy_npu")]:
        del sys.modules[name]


def double_kernel(size: int, kind: LoopKind = LoopKind.VECTOR) -> Kernel:
    source = Buffer("a", (size,), DType.FLOAT32, level="DRAM")
    out = Buffer("out", (size,), DType.FLOAT32, level="DRAM")
    i = Var("i")
    body = For(i, const(size), kind, Store(out, (i,), BufferLoad(source, (i,)) * 2.0),
               lanes=4 if kind is LoopKind.VECTOR else 0)
    return Kernel("double", (source, out), ("out",), body)


def test_names_derive_from_the_target_name() -> None:
    names = scaffold_names("toy_npu")
    assert (names.target, names.package, names.distribution, names.class_name) == (
        "toy_npu", "tilecraft_toy_npu", "tilecraft-toy-npu", "ToyNpuTarget")
    assert names.api_version == TARGET_API_VERSION


@pytest.mark.parametrize("name", ["ToyNpu", "toy-npu", "1npu", "toy__npu", "npu_", "", "a b"])
def test_invalid_names_are_rejected(name: str, tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="is not valid|double underscore"):
        render_target_package(name, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_package_has_every_file(package: Path) -> None:
    files = sorted(str(p.relative_to(package)) for p in package.rglob("*") if p.is_file())
    assert files == EXPECTED_FILES
    text = "".join(p.read_text() for p in package.rglob("*") if p.is_file())
    assert "{{" not in text and "{%" not in text  # everything rendered


def test_pyproject_declares_the_entry_point(package: Path) -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    assert project["name"] == "tilecraft-toy-npu"
    assert project["entry-points"]["tilecraft.targets"] == {
        "toy_npu": "tilecraft_toy_npu.target:ToyNpuTarget"}
    assert any(dep.startswith("tilecraft>=") for dep in project["dependencies"])


def test_rendered_spec_validates(package: Path) -> None:
    spec = TargetSpec.from_yaml(package / "tilecraft_toy_npu" / "spec.yaml")
    assert spec.name == "toy_npu" and spec.api_version == TARGET_API_VERSION
    assert spec.memory.names == ("DRAM", "SRAM", "registers")
    assert spec.compute.frequency_hz == 1e9
    dot = spec.intrinsic("dot4_i8")
    assert dot.compute.access_matrix()[2].tolist() == [[True, True], [True, True], [True, False]]


def test_rendered_intrinsic_matches_numpy(target: Target) -> None:
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (4, 4), dtype=np.int8)
    b = rng.integers(-128, 128, (4, 4), dtype=np.int8)
    acc = np.array([1, -2, 3, 2**31 - 1 - 5], np.int32)
    expected = acc + (a.astype(np.int32) * b.astype(np.int32)).sum(axis=1, dtype=np.int32)
    target.spec.intrinsic("dot4_i8").reference(a, b, acc)
    np.testing.assert_array_equal(acc, expected)


def test_rendered_target_is_honest_about_this_machine(target: Target) -> None:
    availability = target.available()
    assert availability.capability is Capability.EMULATE
    assert availability.codegen and availability.emulate and availability.estimate
    assert not availability.build and not availability.execute
    assert "no compiler" in availability.reasons["build"]
    assert "no toy_npu device" in availability.reasons["execute"]


def test_rendered_codegen_prints_kernel_ir_and_rejects_what_it_cannot_express(
        target: Target) -> None:
    kernel = double_kernel(7)
    source = target.codegen(kernel)
    assert (source.target, source.kernel_name, source.language) == ("toy_npu", "double", "text")
    assert source.text == kernel_to_str(kernel)
    with pytest.raises(CodegenError, match="loop i is parallel, which this target cannot "
                                           "express"):
        target.codegen(double_kernel(7, LoopKind.PARALLEL))


@pytest.mark.parametrize("size", [1, 7, 16])
def test_rendered_target_emulates(target: Target, size: int) -> None:
    arrays = {"a": np.linspace(-1, 1, size, dtype=np.float32),
              "out": np.zeros(size, np.float32)}
    target.emulate(double_kernel(size), arrays)
    np.testing.assert_array_equal(arrays["out"], np.linspace(-1, 1, size, dtype=np.float32) * 2)


def test_rendered_estimate(target: Target) -> None:
    # a vector loop of 4 lanes: ceil(size / 4) cycles at 1 GHz
    assert target.estimate(double_kernel(7)).detail["cycles"] == 2
    assert target.estimate(double_kernel(7, LoopKind.SERIAL)).seconds == pytest.approx(7e-9)
    body = Seq((double_kernel(8).body, double_kernel(3, LoopKind.SERIAL).body))
    two_loops = Kernel("two", double_kernel(8).params, ("out",), body)
    assert target.estimate(two_loops).detail["cycles"] == 2 + 3


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / "toy_npu").mkdir()  # an empty folder is fine
    render_target_package("toy_npu", tmp_path)
    with pytest.raises(TargetError, match="already exists and is not empty"):
        render_target_package("toy_npu", tmp_path)


def test_templates_are_found() -> None:
    root = template_root()
    assert (root / "__package__" / "spec.yaml.jinja").is_file()


def test_rendered_package_tests_pass(package: Path) -> None:
    """The package's own tests, including the core's conformance suite, pass as rendered."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(package), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "tests"],
        cwd=package, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary, summary
    assert "no target selected" not in result.stdout  # the suite ran against this target
