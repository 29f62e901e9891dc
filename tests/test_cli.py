"""The `tilecraft` command line: targets, schemas, new-target, errors without tracebacks."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tilecraft import cli
from tilecraft.errors import TargetError
from tilecraft.target import registry
from tilecraft.target.base import Availability
from tilecraft.target.registry import TargetInfo, TargetStatus
from tilecraft.target.schemas import schema_names


@pytest.fixture
def no_installed_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_discovered", [])
    monkeypatch.setattr(registry, "_registered", {})


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = cli.main(args)
    out, err = capsys.readouterr()
    return status, out, err


def test_targets_table(no_installed_targets: None, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(registry, "_discovered", [
        TargetInfo(name="toy", status=TargetStatus.OK, target=None, version="0.3",
                   distribution="tilecraft-toy", origin="entry point toy = toy:T",
                   availability=Availability(codegen=True, build=True, execute=False,
                                             reasons={"execute": "no device"})),
        TargetInfo(name="gone", status=TargetStatus.BROKEN, target=None,
                   reason="plugin 'gone': import failed: ImportError: libgone.so",
                   origin="entry point gone = gone:T", details="Traceback ...\nImportError"),
    ])
    status, out, _ = run(["targets"], capsys)
    assert status == 0
    assert out.splitlines() == [
        "NAME  VERSION  STATUS  PACKAGE        CAPABILITY",
        "gone  -        broken  -              plugin 'gone': import failed: ImportError: "
        "libgone.so",
        "toy   0.3      ok      tilecraft-toy  compile only (execute: no device)",
    ]
    status, out, _ = run(["targets", "--verbose"], capsys)
    assert "gone: entry point gone = gone:T" in out and "Traceback ...\nImportError" in out
    assert "toy: entry point toy = toy:T" in out


def test_targets_when_none_is_installed(no_installed_targets: None,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["targets"], capsys)
    assert status == 0 and out.startswith("no tilecraft targets are installed")


def test_schemas_export_list_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["schemas", "list"], capsys)
    assert status == 0 and out.split() == schema_names()
    status, out, _ = run(["schemas", "check", str(tmp_path)], capsys)
    assert status == 1 and "stale or missing" in out and f"schemas export {tmp_path}" in out
    status, out, _ = run(["schemas", "export", str(tmp_path)], capsys)
    assert status == 0 and len(out.splitlines()) == len(schema_names())
    assert sorted(p.name for p in tmp_path.iterdir()) == schema_names()
    status, out, _ = run(["schemas", "check", str(tmp_path)], capsys)
    assert status == 0 and "up to date" in out
    (tmp_path / "intrinsic.json").write_text("{}")
    status, out, _ = run(["schemas", "check", str(tmp_path)], capsys)
    assert status == 1 and "intrinsic.json" in out


def test_new_target_creates_the_package(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["new-target", "edge_tpu", "--dir", str(tmp_path)], capsys)
    assert status == 0
    assert (tmp_path / "edge_tpu" / "tilecraft_edge_tpu" / "spec.yaml").is_file()
    assert "created the target plugin package" in out and "spec.yaml" in out
    status, out, err = run(["new-target", "edge_tpu", "--dir", str(tmp_path)], capsys)
    assert status == 2 and out == ""
    assert err.startswith("tilecraft: error: ") and "already exists and is not empty" in err


def test_errors_exit_2_without_traceback() -> None:
    result = subprocess.run([sys.executable, "-m", "tilecraft.cli", "new-target", "Bad-Name"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("tilecraft: error: target name 'Bad-Name' is not valid")
    assert "Traceback" not in result.stderr


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("tilecraft")
    if not script.exists():
        pytest.skip("the tilecraft console script is not installed in this environment")
    result = subprocess.run([str(script), "schemas", "list"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stdout.split() == schema_names()


def test_usage_errors_are_argparse_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main([])
    assert info.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_subcommands_can_be_added(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "SUBCOMMANDS", list(cli.SUBCOMMANDS))

    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("word")

    def greet(args: Any) -> int:
        if args.word == "fail":
            raise TargetError("cannot greet 'fail'; pick another word")
        print(f"hello {args.word}")
        return 0

    cli.add_subcommand(cli.Subcommand("greet", "say hello", configure, greet))
    assert run(["greet", "world"], capsys)[:2] == (0, "hello world\n")
    status, _, err = run(["greet", "fail"], capsys)
    assert status == 2 and err == "tilecraft: error: cannot greet 'fail'; pick another word\n"
    cli.add_subcommand(cli.Subcommand("greet", "say hi", configure, lambda args: 7))
    assert [s.name for s in cli.SUBCOMMANDS].count("greet") == 1
    assert cli.main(["greet", "x"]) == 7
