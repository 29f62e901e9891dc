"""The extension hooks: every hook is documented and exercised; extension plugins load from
entry points; broken ones are reported by name and never hide the others."""

from __future__ import annotations

import importlib.metadata
import inspect
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tilecraft.target import hookspecs
from tilecraft.target.builtins import DEFAULT_PROVIDERS, InProcessRunner
from tilecraft.target.hookspecs import hookimpl
from tilecraft.target.plugins import (
    ENTRY_POINT_GROUP,
    ExtensionKind,
    broken_plugins,
    collect,
    extensions,
    get_plugin_manager,
    make_plugin_manager,
)


class Named:
    def __init__(self, name: str):
        self.name = name


class EveryHook:
    """A plugin implementing every hook, with one object each."""

    @hookimpl
    def tilecraft_register_passes(self) -> list[Any]:
        return [Named("test_pass")]

    @hookimpl
    def tilecraft_register_cost_models(self) -> list[Any]:
        return [Named("test_cost_model")]

    @hookimpl
    def tilecraft_register_search_engines(self) -> list[Any]:
        return [Named("test_search_engine")]

    @hookimpl
    def tilecraft_register_operators(self) -> list[Any]:
        def test_operator() -> None:
            return None
        return [test_operator]

    @hookimpl
    def tilecraft_register_runners(self) -> list[Any]:
        return [Named("test_runner")]


# the meta-test --------------------------------------------------------------------------------


def test_every_hook_is_specified_typed_and_documented_with_an_example() -> None:
    names = hookspecs.hook_names()
    assert names == sorted(kind.hook_name for kind in ExtensionKind)
    for name in names:
        function = getattr(hookspecs, name)
        assert hasattr(function, "tilecraft_spec"), f"{name} is not marked @hookspec"
        doc = inspect.getdoc(function) or ""
        assert len(doc.splitlines()[0]) > 20, f"{name} needs a one-line description"
        assert ">>> " in doc and "@hookimpl" in doc, f"{name} needs an example implementation"
        hints = typing.get_type_hints(function, vars(hookspecs))
        assert "return" in hints, f"{name} needs a return type"


@pytest.mark.parametrize("kind", list(ExtensionKind))
def test_every_hook_is_exercised(kind: ExtensionKind) -> None:
    manager = make_plugin_manager([EveryHook()], entry_points=False, builtins=False)
    found = extensions(kind, manager)
    singular = {"passes": "pass", "cost_models": "cost_model", "search_engines": "search_engine",
                "operators": "operator", "runners": "runner"}[kind.value]
    assert [info.name for info in found] == [f"test_{singular}"]
    assert found[0].kind is kind and found[0].plugin.startswith("EveryHook")
    assert manager.broken == []


# built-ins ---------------------------------------------------------------------------------


def test_builtins_register_through_the_same_hooks() -> None:
    manager = make_plugin_manager([EveryHook()], entry_points=False)
    runners = extensions("runners", manager)
    assert [(info.name, info.plugin) for info in runners][0] == ("in_process",
                                                                 "tilecraft.builtins")
    assert runners[-1].name == "test_runner"
    assert set(DEFAULT_PROVIDERS) == {kind.value for kind in ExtensionKind}


def test_builtin_operators_come_from_the_ops_library() -> None:
    ops = pytest.importorskip("tilecraft.ops")
    operators = collect("operators", make_plugin_manager(entry_points=False))
    public = [name for name in ops.__all__ if callable(getattr(ops, name))
              and not isinstance(getattr(ops, name), type)]
    assert sorted(operators) == sorted(public)
    assert operators[public[0]] is getattr(ops, public[0])


def test_in_process_runner_times_each_call() -> None:
    arrays = {"x": np.zeros(3)}

    def kernel(given: dict[str, np.ndarray]) -> None:
        given["x"] += 1

    seconds = InProcessRunner().run(kernel, arrays, repeat=4, warmup=2)
    assert len(seconds) == 4 and all(s >= 0 for s in seconds)
    assert arrays["x"].tolist() == [6.0, 6.0, 6.0]


def test_the_default_manager_is_created_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from tilecraft.target import plugins

    monkeypatch.setattr(plugins, "_default_manager", None)
    first = get_plugin_manager()
    assert get_plugin_manager() is first
    assert get_plugin_manager(refresh=True) is not first
    assert broken_plugins() == []


# broken plugins ---------------------------------------------------------------------------


class Raising:
    @hookimpl
    def tilecraft_register_passes(self) -> list[Any]:
        raise ValueError("no passes today")


class Unnamed:
    @hookimpl
    def tilecraft_register_search_engines(self) -> list[Any]:
        return [42]


class NotAList:
    @hookimpl
    def tilecraft_register_cost_models(self) -> Any:
        return Named("single")


class Duplicate:
    @hookimpl
    def tilecraft_register_runners(self) -> list[Any]:
        return [Named("in_process"), Named("fresh")]


class Misspelled:
    def tilecraft_register_pases(self) -> list[Any]:  # no marker, misspelled: still caught
        return []


class WrongArguments:
    @hookimpl
    def tilecraft_register_passes(self, graph: Any) -> list[Any]:
        return []


class Unmarked:
    def tilecraft_register_operators(self) -> list[Any]:  # no @hookimpl: still a hook
        def unmarked_op() -> None:
            return None
        return [unmarked_op]


def test_broken_extension_plugins_are_reported_and_skipped() -> None:
    manager = make_plugin_manager(
        [Raising(), Unnamed(), NotAList(), Duplicate(), Misspelled(), WrongArguments(),
         Unmarked(), EveryHook()], entry_points=False)
    for kind in ExtensionKind:
        collect(kind, manager)
    reasons = {entry.name.split("-")[0]: entry.reason for entry in manager.broken}
    assert reasons["Raising"] == "tilecraft_register_passes raised ValueError: no passes today"
    assert reasons["Unnamed"] == ("tilecraft_register_search_engines returned 42, which has no "
                                  "name; give it a name attribute")
    assert reasons["NotAList"] == ("tilecraft_register_cost_models returned Named; return a "
                                   "list of named objects")
    assert reasons["Duplicate"] == ("runners 'in_process' is already registered by "
                                    "tilecraft.builtins; rename it")
    assert reasons["Misspelled"].startswith("implements an unknown hook: ")
    assert "tilecraft_register_pases" in reasons["Misspelled"]
    assert reasons["WrongArguments"].startswith("invalid hook implementation: ")
    assert "graph" in reasons["WrongArguments"]
    assert set(reasons) == {"Raising", "Unnamed", "NotAList", "Duplicate", "Misspelled",
                            "WrongArguments"}
    # the healthy plugins keep working
    assert "test_pass" in collect("passes", manager)
    assert "unmarked_op" in collect("operators", manager)
    assert sorted(collect("runners", manager)) == ["fresh", "in_process", "test_runner"]
    assert len(manager.broken) == 6  # collecting again does not repeat the reports


# entry points ------------------------------------------------------------------------------

EXTENSION_MODULE = '''
from tilecraft.target.hookspecs import hookimpl


class Cost:
    name = "from_entry_point"


@hookimpl
def tilecraft_register_cost_models():
    return [Cost()]
'''


@pytest.fixture
def entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    (tmp_path / "fake_extension.py").write_text(EXTENSION_MODULE)
    (tmp_path / "fake_broken_extension.py").write_text("raise ImportError('needs libfoo')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found: list[Any] = []
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None, **_: [e for e in found if e.group == group])
    yield found
    for name in ("fake_extension", "fake_broken_extension"):
        sys.modules.pop(name, None)


def test_extension_plugins_load_from_entry_points(entry_points: list[Any]) -> None:
    entry_points += [
        importlib.metadata.EntryPoint("good", "fake_extension", ENTRY_POINT_GROUP),
        importlib.metadata.EntryPoint("bad", "fake_broken_extension", ENTRY_POINT_GROUP),
        importlib.metadata.EntryPoint("good", "fake_extension", ENTRY_POINT_GROUP),
        importlib.metadata.EntryPoint("other_group", "nope", "tilecraft.targets"),
    ]
    manager = make_plugin_manager()
    models = extensions("cost_models", manager)
    assert [(info.name, info.plugin) for info in models] == [("from_entry_point", "good")]
    assert [(b.name, b.reason) for b in manager.broken] == [
        ("bad", "cannot load entry point fake_broken_extension: ImportError: needs libfoo"),
        ("good", "another plugin is registered under the same name; rename the entry point")]
    assert "Traceback" in manager.broken[0].details
