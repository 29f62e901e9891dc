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


# every hook has a consumer: a plugin registering one of each sees each called ---------------


class Recorder:
    """A plugin registering one working extension of every kind; each records its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        recorder = self
        self.extensions: dict[str, Any] = {}

        class Pass:
            name = "recording_pass"

            def __call__(self, graph: Any) -> Any:
                recorder.calls.append("passes")
                return graph

        class CostModel:
            name = "recording_cost_model"

            def rank(self, compute: Any, intrinsic: Any, spec: Any, mappings: Any, *,
                     thorough: bool = True) -> list[Any]:
                from tilecraft.intrin.perfmodel import rank_mappings

                recorder.calls.append("cost_models")
                return rank_mappings(compute, intrinsic, spec, mappings=mappings,
                                     thorough=thorough)

        from tilecraft.search import RandomSearch

        class Engine(RandomSearch):
            name = "recording_engine"

            def search(self, *args: Any, **kwargs: Any) -> Any:
                recorder.calls.append("search_engines")
                return super().search(*args, **kwargs)

        from tilecraft.runtime.runners import InProcessRunner

        class Runner(InProcessRunner):
            name = "recording_runner"

            def run(self, *args: Any, **kwargs: Any) -> list[float]:
                recorder.calls.append("runners")
                return super().run(*args, **kwargs)

        def recording_operator(tensor: Any) -> Any:
            from tilecraft import te

            recorder.calls.append("operators")
            return te.compute(tensor.shape, lambda *i: tensor[i] * 3.0, name="tripled")

        self.extensions.update(passes=Pass(), cost_models=CostModel(), search_engines=Engine(),
                               runners=Runner(), operators=recording_operator)

    @property
    def seen(self) -> set[str]:
        return set(self.calls)

    @hookimpl
    def tilecraft_register_passes(self) -> list[Any]:
        return [self.extensions["passes"]]

    @hookimpl
    def tilecraft_register_cost_models(self) -> list[Any]:
        return [self.extensions["cost_models"]]

    @hookimpl
    def tilecraft_register_search_engines(self) -> list[Any]:
        return [self.extensions["search_engines"]]

    @hookimpl
    def tilecraft_register_operators(self) -> list[Any]:
        return [self.extensions["operators"]]

    @hookimpl
    def tilecraft_register_runners(self) -> list[Any]:
        return [self.extensions["runners"]]


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """The recording plugin, installed in the process-wide plugin manager."""
    from tilecraft.target import plugins

    plugin = Recorder()
    monkeypatch.setattr(plugins, "_default_manager",
                        make_plugin_manager([plugin], entry_points=False))
    return plugin


def _x86() -> Any:
    from tilecraft.target.registry import get_target

    target = get_target("x86_avx512")
    if not target.available().execute:
        pytest.skip(f"x86_avx512 cannot execute here: {target.available().explain()}")
    return target


def test_every_hook_is_called_by_the_pipeline(recorder: Recorder, tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    """The meta-test of use: each kind's registered extension is called by its consumer —
    passes by compile's first stage, cost models by its mapping stage, operators by
    ``tilecraft compile``, search engines by the tuner, runners by the tuner's measurement."""
    import tilecraft as tc
    from tilecraft import ops, te
    from tilecraft.cli import main
    from tilecraft.pipeline import run_pipeline
    from tilecraft.tuning.candidate import MeasureInput, MeasureSettings, evaluate_in_process
    from tilecraft.tuning.tuner import compute_workload, tune

    target = _x86()
    A = te.placeholder((16, 32), "uint8", name="A")
    B = te.placeholder((32, 16), "int8", name="B")
    C = ops.matmul(A, B, out_dtype="int32", name="C")
    graph = tc.Graph.from_outputs([C])
    state = run_pipeline(graph, target)
    assert state.passes_applied[-1] == "recording_pass" and recorder.calls == ["passes"]
    assert target.spec.intrinsics, "x86_avx512 declares its FMA intrinsics on every host"
    # the mapping stage ranks mappings with the model named; the same model, the same entries
    ranked = run_pipeline(graph, target, cost_model="recording_cost_model")
    assert "cost_models" in recorder.calls
    assert [e.to_dict() for e in ranked.mapping_entries] == \
        [e.to_dict() for e in state.mapping_entries]

    program = tmp_path / "prog.py"
    program.write_text("from tilecraft import te\nx = te.placeholder((8,), name='x')\n"
                       "graph = operators['recording_operator'](x)\n")
    assert main(["compile", str(program), "--run"]) == 0
    assert "operators" in recorder.calls and "max abs error 0" in capsys.readouterr().out

    x = te.placeholder((6, 8), name="x")
    y = ops.softmax(x, name="y")
    result = tune(y, target, {"preset": "quick", "trials": 2, "engine": "recording_engine",
                              "progress": False, "repeats": 1})
    assert "search_engines" in recorder.calls and result.tasks
    assert {"passes", "cost_models", "operators", "search_engines"} <= recorder.seen

    workload = compute_workload(ops.relu(x, name="r"))
    measured = evaluate_in_process(MeasureInput(workload, "x86_avx512", {}),
                                   MeasureSettings(repeats=2, min_seconds=0.0,
                                                   runner="recording_runner"))
    assert measured.ok and len(measured.costs) == 2, measured.error_message
    assert recorder.calls.count("runners") == 2  # calibration, then the measurements
    # the meta-check: every kind of hook was called by its consumer
    assert recorder.seen == {kind.value for kind in ExtensionKind}


def test_unknown_extensions_are_named_with_the_registered_ones(recorder: Recorder) -> None:
    from tilecraft.cost import CostModelError, get_cost_model
    from tilecraft.runtime.runners import RunnerError, get_runner
    from tilecraft.search import SearchError, get_engine

    with pytest.raises(CostModelError, match="unknown cost model 'roofline'; the cost models "
                                             "are amos, recording_cost_model"):
        get_cost_model("roofline")
    with pytest.raises(RunnerError, match="unknown runner 'remote'; the runners are "
                                          "in_process, recording_runner"):
        get_runner("remote")
    with pytest.raises(SearchError, match="unknown search engine 'sa'; the engines are genetic, "
                                          "mcts, p, q, random, recording_engine"):
        get_engine("sa")
    assert type(get_engine("recording_engine", batch_size=2)).__name__ == "Engine"


def test_a_pass_that_changes_the_outputs_is_refused_by_name() -> None:
    import tilecraft as tc
    from tilecraft import te
    from tilecraft.passes import PassError
    from tilecraft.pipeline import run_pipeline

    class Truncate:
        name = "truncate"

        def __call__(self, graph: Any) -> Any:
            return tc.Graph.from_outputs([graph.computes[0]])

    class Plugin:
        @hookimpl
        def tilecraft_register_passes(self) -> list[Any]:
            return [Truncate()]

    x = te.placeholder((4,), name="x")
    y = te.compute((4,), lambda i: x[i] + 1.0, name="y")
    z = te.compute((4,), lambda i: y[i] * 2.0, name="z")
    manager = make_plugin_manager([Plugin()], entry_points=False)
    # inline_elementwise off: it would fold y into z, leaving Truncate nothing to drop
    with pytest.raises(PassError, match="graph pass 'truncate' changed the graph's outputs"):
        run_pipeline(tc.Graph.from_outputs([z]), _x86(), plugins=manager,
                     passes={"inline_elementwise": False})


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
    assert [(info.name, info.plugin) for info in models] == [("amos", "tilecraft.builtins"),
                                                             ("from_entry_point", "good")]
    assert [(b.name, b.reason) for b in manager.broken] == [
        ("bad", "cannot load entry point fake_broken_extension: ImportError: needs libfoo"),
        ("good", "another plugin is registered under the same name; rename the entry point")]
    assert "Traceback" in manager.broken[0].details
