"""Target discovery through entry points (faked here), broken plugins of every kind, and
in-process registration."""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tilecraft.errors import PluginError, TargetError
from tilecraft.target import registry
from tilecraft.target.registry import (
    ENTRY_POINT_GROUP,
    TargetStatus,
    discover_targets,
    format_target_table,
    get_target,
    list_targets,
    register_target,
    unregister_target,
)

PLUGIN_MODULE = '''
from pathlib import Path

from tilecraft.kernel_ir import kernel_to_str
from tilecraft.target import Availability, Source, Target, TargetSpec, load_spec

SPEC = {
    "name": "fake", "api_version": 1, "version": "2.5",
    "memory": {"levels": [{"name": "DRAM", "size_bytes": None,
                           "bandwidth_bytes_per_cycle": 8}]},
    "compute": {"cores": 1, "frequency_hz": 1e9, "vector_bits": 0},
    "primitives": ["split"], "loop_kinds": ["serial"], "evaluation": "estimate",
    "capabilities": {"models_performance": True, "emulates": True},
}


class FakeTarget(Target):
    def __init__(self, name="fake", api_version=1):
        self._spec = load_spec(dict(SPEC, name=name, api_version=api_version))

    @property
    def spec(self):
        return self._spec

    def available(self):
        return Availability(codegen=True, build=False, execute=False, emulate=True,
                            reasons={"build": "no compiler", "execute": "no device"})

    def codegen(self, kernel):
        return Source(self.name, kernel.name, "text", kernel_to_str(kernel), kernel.name)


class InvalidSpecTarget(FakeTarget):
    @property
    def spec(self):
        return TargetSpec.from_yaml(Path(__file__).with_name("bad_spec.yaml"),
                                    plugin="invalid_spec")


class RaisingAvailability(FakeTarget):
    def available(self):
        raise OSError("probing the device failed")


class NotASpec(FakeTarget):
    @property
    def spec(self):
        return {"name": "not_a_spec"}


INSTANCE = FakeTarget()
NOT_A_TARGET = 3


def made():
    return FakeTarget("made")


def old_api():
    return FakeTarget("old_api", api_version=2)


def exploding():
    raise RuntimeError("factory exploded")


def wrong_type():
    return 42
'''

BAD_SPEC = """\
name: invalid_spec
api_version: 1
version: "1"
memory:
  levels:
    - name: DRAM
      size_bytes: null
      bandwidth_bytes_per_cycle: -1
compute: {cores: 1, frequency_hz: 1.0e9, vector_bits: 0}
primitives: [split]
loop_kinds: [serial]
evaluation: estimate
capabilities: {models_performance: true}
"""


@dataclass(frozen=True)
class FakeDistribution:
    name: str
    version: str


@dataclass(frozen=True)
class FakeEntryPoint:
    """Duck-types importlib.metadata.EntryPoint, with a distribution."""

    name: str
    value: str
    dist: FakeDistribution | None = None
    group: str = ENTRY_POINT_GROUP

    def load(self) -> Any:
        module_name, _, attribute = self.value.partition(":")
        return getattr(importlib.import_module(module_name), attribute)


@dataclass
class FakePlugins:
    """The entry points ``importlib.metadata.entry_points`` returns, and its calls."""

    entry_points: list[Any]
    calls: list[str]

    def add(self, *entry_points: Any) -> None:
        self.entry_points.extend(entry_points)


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePlugins]:
    """A package of fake plugin modules on sys.path, a clean registry, and fake entry points."""
    package = tmp_path / "fake_plugins_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "targets.py").write_text(PLUGIN_MODULE)
    (package / "bad_spec.yaml").write_text(BAD_SPEC)
    (package / "broken_import.py").write_text("import does_not_exist_xyz  # noqa\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake = FakePlugins([], [])

    def fake_entry_points(group: str | None = None, **_: Any) -> list[Any]:
        fake.calls.append(group or "")
        return [entry_point for entry_point in fake.entry_points if entry_point.group == group]

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    monkeypatch.setattr(registry, "_discovered", None)
    monkeypatch.setattr(registry, "_registered", {})
    yield fake
    for name in [name for name in sys.modules if name.startswith("fake_plugins_pkg")]:
        del sys.modules[name]


def ep(name: str, attribute: str, module: str = "targets", dist: str | None = "tilecraft-fake"
       ) -> FakeEntryPoint:
    return FakeEntryPoint(name, f"fake_plugins_pkg.{module}:{attribute}",
                          FakeDistribution(dist, "1.2.3") if dist else None)


def by_name(infos: list[Any]) -> dict[str, Any]:
    return {info.name: info for info in infos}


def test_instance_subclass_and_factory_entry_points(plugins: FakePlugins) -> None:
    plugins.add(ep("fake", "INSTANCE"), ep("made", "made", dist=None))
    infos = by_name(discover_targets())
    assert set(infos) == {"fake", "made"}
    fake = infos["fake"]
    assert fake.status is TargetStatus.OK and fake.ok and fake.reason == ""
    assert fake.distribution == "tilecraft-fake" and fake.version == "1.2.3"
    assert fake.availability is not None and fake.availability.emulate
    assert fake.origin == "entry point fake = fake_plugins_pkg.targets:INSTANCE"
    assert infos["made"].version == "2.5"  # no distribution: the spec's version
    assert get_target("made").name == "made"


def test_target_subclass_entry_point_is_instantiated(plugins: FakePlugins) -> None:
    plugins.add(ep("fake", "FakeTarget"))
    target = get_target("fake")
    assert type(target).__name__ == "FakeTarget"
    assert get_target("fake") is target  # discovered once, cached


@pytest.mark.parametrize(("entry_point", "reason"), [
    (ep("broken_import", "anything", module="broken_import"),
     "plugin 'broken_import' (tilecraft-fake 1.2.3): import failed: ModuleNotFoundError: "
     "No module named 'does_not_exist_xyz'"),
    (ep("exploding", "exploding"),
     "plugin 'exploding' (tilecraft-fake 1.2.3): creating the target failed: RuntimeError: "
     "factory exploded"),
    (ep("wrong_type", "wrong_type", dist=None),
     "plugin 'wrong_type': creating the target failed: entry point "
     "fake_plugins_pkg.targets:wrong_type: the factory 'wrong_type' returned int, not a Target"),
    (ep("number", "NOT_A_TARGET", dist=None),
     "plugin 'number': creating the target failed: entry point "
     "fake_plugins_pkg.targets:NOT_A_TARGET loaded 3; it must be a Target instance, a Target "
     "subclass, or a zero-argument function returning a Target"),
    (ep("missing_attr", "NOPE", dist=None),
     "plugin 'missing_attr': import failed: AttributeError: module 'fake_plugins_pkg.targets' "
     "has no attribute 'NOPE'"),
    (ep("old_api", "old_api", dist=None),
     "plugin 'old_api': invalid target: it declares api_version 2, but this tilecraft "
     "implements api_version 1; install a plugin version built for api_version 1"),
    (ep("renamed", "INSTANCE", dist=None),
     "plugin 'renamed': invalid target: its entry point is named 'renamed' but its spec is "
     "named 'fake'; make them the same"),
    (ep("fake", "RaisingAvailability", dist=None),
     "plugin 'fake': invalid target: OSError: probing the device failed"),
    (ep("fake", "NotASpec", dist=None),
     "plugin 'fake': invalid target: its spec is a dict, not a TargetSpec"),
])
def test_broken_plugins_are_listed_with_the_reason(plugins: FakePlugins, entry_point: Any,
                                                   reason: str) -> None:
    plugins.add(entry_point, ep("made", "made"))
    infos = by_name(discover_targets())
    broken = infos[entry_point.name]
    assert broken.status is TargetStatus.BROKEN and broken.target is None
    assert broken.reason.startswith(reason), broken.reason
    assert "Traceback" in broken.details
    assert infos["made"].ok  # the others keep working
    with pytest.raises(PluginError) as info:
        get_target(entry_point.name)
    assert str(info.value) == f"target {entry_point.name!r} is installed but broken: " \
                              f"{broken.reason}"


def test_invalid_spec_names_plugin_file_and_field(plugins: FakePlugins) -> None:
    plugins.add(ep("invalid_spec", "InvalidSpecTarget"))
    (info,) = discover_targets()
    assert not info.ok
    assert "plugin 'invalid_spec' (tilecraft-fake 1.2.3): invalid target: invalid target spec " \
           "of plugin 'invalid_spec' in " in info.reason
    assert "bad_spec.yaml:\n  memory.levels[0] (DRAM).bandwidth_bytes_per_cycle (line 8): " \
           "Input should be greater than 0 (got -1)" in info.reason
    # the table shows it on one line
    row = format_target_table([info]).splitlines()[1]
    assert "broken" in row and "bandwidth_bytes_per_cycle (line 8)" in row


def test_two_plugins_with_one_target_name(plugins: FakePlugins) -> None:
    plugins.add(ep("fake", "INSTANCE"), ep("fake", "FakeTarget", dist="tilecraft-fake-fork"))
    first, second = discover_targets()
    assert first.ok and not second.ok
    assert second.reason == "plugin 'fake': the target name is also provided by tilecraft-fake; " \
                            "uninstall one"
    assert get_target("fake") is first.target


def test_unknown_target_lists_installed_and_broken(plugins: FakePlugins) -> None:
    plugins.add(ep("fake", "INSTANCE"), ep("exploding", "exploding"))
    with pytest.raises(TargetError) as info:
        get_target("nvidia")
    assert not isinstance(info.value, PluginError)
    assert str(info.value).startswith("unknown target 'nvidia'; installed targets: fake "
                                      "(broken: exploding).")


def test_discovery_runs_once_unless_refreshed(plugins: FakePlugins) -> None:
    plugins.add(ep("fake", "INSTANCE"))
    calls = plugins.calls
    discover_targets()
    list_targets()
    get_target("fake")
    assert calls == [ENTRY_POINT_GROUP]
    discover_targets(refresh=True)
    assert calls == [ENTRY_POINT_GROUP] * 2


def test_real_entry_point_objects_work(plugins: FakePlugins) -> None:
    plugins.add(importlib.metadata.EntryPoint(
        name="fake", value="fake_plugins_pkg.targets:INSTANCE", group=ENTRY_POINT_GROUP))
    (info,) = discover_targets()
    assert info.ok and info.distribution is None and info.version == "2.5"


def test_table_lists_name_version_status_package_and_capability(plugins: FakePlugins) -> None:
    plugins.add(ep("fake", "INSTANCE"), ep("exploding", "exploding", dist=None))
    table = format_target_table(list_targets())
    assert table.splitlines() == [
        "NAME       VERSION  STATUS  PACKAGE         CAPABILITY",
        "exploding  -        broken  -               plugin 'exploding': creating the target "
        "failed: RuntimeError: factory exploded",
        "fake       1.2.3    ok      tilecraft-fake  emulate (build: no compiler; execute: no "
        "device)",
    ]


def test_register_target_in_process(plugins: FakePlugins) -> None:
    plugins.add(ep("fake", "INSTANCE"))
    targets = importlib.import_module("fake_plugins_pkg.targets")
    mine = targets.FakeTarget()
    info = register_target(mine)
    assert info.ok and info.origin == "registered in-process" and info.version == "2.5"
    assert get_target("fake") is mine  # shadows the installed one
    assert [i.origin for i in list_targets()] == ["registered in-process"]
    with pytest.raises(TargetError, match="'fake' is already registered in this process"):
        register_target(targets.FakeTarget())
    other = targets.FakeTarget()
    register_target(other, replace_existing=True)
    assert get_target("fake") is other
    unregister_target("fake")
    assert get_target("fake") is targets.INSTANCE
    with pytest.raises(TargetError, match="no target named 'fake' was registered"):
        unregister_target("fake")


def test_register_target_rejects_invalid_targets(plugins: FakePlugins) -> None:
    targets = importlib.import_module("fake_plugins_pkg.targets")
    with pytest.raises(PluginError, match="cannot register target FakeTarget: it declares "
                                          "api_version 2"):
        register_target(targets.old_api())
    with pytest.raises(PluginError, match="needs a Target instance, got int"):
        register_target(3)  # type: ignore[arg-type]
    assert list_targets() == []


def test_no_targets_installed(plugins: FakePlugins) -> None:
    assert discover_targets() == []
    with pytest.raises(TargetError, match="installed targets: none"):
        get_target("x86_avx512")


def test_format_target_table_of_nothing() -> None:
    assert format_target_table([]) == "NAME  VERSION  STATUS  PACKAGE  CAPABILITY"

