"""Helpers of tests/test_bad_inputs.py: fake plugin packages found through faked entry points,
and tuning database files damaged in known ways.

A fake plugin lives in a package written to a temporary folder on ``sys.path``; its entry
points are what ``importlib.metadata.entry_points`` returns while the fixture is active, so
discovery (:mod:`tilecraft.target.registry`, :mod:`tilecraft.target.plugins`) runs exactly as
with installed packages.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import sqlite3
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tilecraft.errors import PluginError
from tilecraft.target import plugins as extension_plugins
from tilecraft.target import registry
from tilecraft.target.spec import TargetSpec
from tilecraft.tuning.database import TuningDatabase
from tilecraft.tuning.record import TuningRecord

PACKAGE = "bad_input_plugins"

TARGET_MODULE = '''
from tilecraft.kernel_ir import kernel_to_str
from tilecraft.target import Availability, Source, Target, load_spec

SPEC = {
    "name": "fake", "api_version": 1, "version": "1.0",
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


def good():
    return FakeTarget("good")


def newer_api():
    return FakeTarget("newer_api", api_version=99)


class SlowProbe(FakeTarget):
    """Imports at once, but probing the device never answers."""

    def __init__(self):
        super().__init__("slow_probe")

    def available(self):
        from bad_input_plugins.gate import RELEASE

        RELEASE.wait(60)
        return super().available()
'''

EXITING_MODULE = '''
import sys

sys.exit("this plugin exits the interpreter when imported")
'''

#: a module whose import never finishes by itself: it waits for the test to release it
HANGING_MODULE = '''
from bad_input_plugins.gate import RELEASE

RELEASE.wait(60)
TARGET = None
'''

GATE_MODULE = '''
import threading

RELEASE = threading.Event()
'''

#: hook implementations (module-level ``tilecraft_*`` functions) that hang or exit
SLOW_HOOKS_MODULE = '''
from bad_input_plugins.gate import RELEASE


def tilecraft_register_passes():
    RELEASE.wait(60)
    return []
'''

EXITING_HOOKS_MODULE = '''
import sys


def tilecraft_register_passes():
    sys.exit("this hook exits the interpreter")
'''

RAISING_MODULE = '''
raise RuntimeError("plugin import exploded on purpose")
'''

#: a spec whose YAML does not parse (an unclosed flow sequence)
MALFORMED_YAML = "name: yaml_plugin\napi_version: 1\nprimitives: [split, reorder\n"

#: an intrinsic that moves an operand through a memory level the spec does not have
UNKNOWN_LEVEL_INTRINSICS = """\
intrinsics:
  - name: fma4
    latency_cycles: 4
    throughput_per_cycle: 1
    compute:
      loops: [{name: i1, extent: 4, kind: spatial}]
      operands:
        - {name: Src1, role: src, dtype: float32, shape: [4], index: [i1]}
        - {name: Dst, role: dst, dtype: float32, shape: [4], index: [i1]}
      semantics: "Dst[i1] += Src1[i1] * Src1[i1]"
    memory:
      moves:
        - {operand: Src1, from_level: DRAM, to_level: L7, address: {strides: [1]}}
        - {operand: Dst, from_level: L7, to_level: DRAM, address: {strides: [1]}}
"""

GOOD_SPEC_YAML = """\
name: yaml_plugin
api_version: 1
version: "1.0"
memory:
  levels:
    - {name: DRAM, size_bytes: null, bandwidth_bytes_per_cycle: 8}
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
    """Duck-types importlib.metadata.EntryPoint (load, name, value, group, dist)."""

    name: str
    value: str
    group: str = registry.ENTRY_POINT_GROUP
    dist: FakeDistribution | None = FakeDistribution("tilecraft-bad-plugin", "0.0.1")

    def load(self) -> Any:
        module_name, _, attribute = self.value.partition(":")
        module = importlib.import_module(module_name)
        return getattr(module, attribute) if attribute else module


@dataclass
class FakePlugins:
    """The package folder and the entry points discovery sees."""

    folder: Path
    entry_points: list[FakeEntryPoint] = field(default_factory=list)

    def add(self, name: str, module: str, attribute: str = "",
            group: str = registry.ENTRY_POINT_GROUP) -> None:
        value = f"{PACKAGE}.{module}" + (f":{attribute}" if attribute else "")
        self.entry_points.append(FakeEntryPoint(name, value, group))

    def write(self, name: str, text: str) -> Path:
        path = self.folder / name
        path.write_text(text, encoding="utf-8")
        return path


@pytest.fixture
def fake_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePlugins]:
    """A fake plugin package on sys.path, clean discovery state, and faked entry points; a
    hanging import is released at teardown so no thread outlives the test for long."""
    folder = tmp_path / PACKAGE
    folder.mkdir()
    fake = FakePlugins(folder)
    for name, text in {"__init__.py": "", "targets.py": TARGET_MODULE,
                       "hangs.py": HANGING_MODULE, "gate.py": GATE_MODULE,
                       "raises.py": RAISING_MODULE, "exits.py": EXITING_MODULE,
                       "slow_hooks.py": SLOW_HOOKS_MODULE,
                       "exiting_hooks.py": EXITING_HOOKS_MODULE}.items():
        fake.write(name, text)
    monkeypatch.syspath_prepend(str(tmp_path))

    def fake_entry_points(group: str | None = None, **_: Any) -> list[FakeEntryPoint]:
        return [entry for entry in fake.entry_points if entry.group == group]

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    monkeypatch.setattr(registry, "_discovered", None)
    monkeypatch.setattr(registry, "_registered", {})
    monkeypatch.setattr(extension_plugins, "_default_manager", None)
    yield fake
    gate = sys.modules.get(f"{PACKAGE}.gate")
    if gate is not None:
        gate.RELEASE.set()
    for name in [name for name in sys.modules if name.startswith(PACKAGE)]:
        del sys.modules[name]


# rows about plugins (``ctx`` is the catalogue's Context: tmp_path, monkeypatch, plugins) --------

def broken_target(ctx: Any, name: str, module: str, attribute: str = "") -> Any:
    """Discover ``name`` among the fake entry points and ask for it; the good target beside it
    must keep working."""
    ctx.plugins.add(name, module, attribute)
    ctx.plugins.add("good", "targets", "good")
    infos = {info.name: info for info in registry.discover_targets(refresh=True)}
    assert infos["good"].ok, infos["good"].reason
    assert not infos[name].ok and infos[name].target is None
    return registry.get_target(name)


def hanging_target(ctx: Any) -> Any:
    ctx.monkeypatch.setenv("TILECRAFT_PLUGIN_TIMEOUT_S", "0.3")
    return broken_target(ctx, "hangs", "hangs", "TARGET")


def hanging_extension(ctx: Any) -> Any:
    """A ``tilecraft.plugins`` extension whose import hangs: listed as broken, the manager
    built anyway; raised here so the row can check the message."""
    ctx.monkeypatch.setenv("TILECRAFT_PLUGIN_TIMEOUT_S", "0.3")
    ctx.plugins.add("slow_passes", "hangs", group=extension_plugins.ENTRY_POINT_GROUP)
    manager = extension_plugins.make_plugin_manager()
    (broken,) = manager.broken
    assert broken.name == "slow_passes"
    assert extension_plugins.collect("passes", manager) is not None  # the others still work
    raise PluginError(broken.reason)


def slow_probe(ctx: Any) -> Any:
    ctx.monkeypatch.setenv("TILECRAFT_PLUGIN_TIMEOUT_S", "0.3")
    return broken_target(ctx, "slow_probe", "targets", "SlowProbe")


def exiting_extension(ctx: Any) -> Any:
    ctx.plugins.add("exits", "exits", group=extension_plugins.ENTRY_POINT_GROUP)
    (broken,) = extension_plugins.make_plugin_manager().broken
    raise PluginError(broken.reason)


def broken_hook(ctx: Any, module: str) -> Any:
    """Collect the passes with a plugin whose hook misbehaves: it is listed as broken and the
    built-in passes are still collected; its reason raised so the row can check it."""
    ctx.monkeypatch.setenv("TILECRAFT_PLUGIN_TIMEOUT_S", "0.3")
    ctx.plugins.add(module, module, group=extension_plugins.ENTRY_POINT_GROUP)
    manager = extension_plugins.make_plugin_manager()
    builtin = extension_plugins.collect("passes", extension_plugins.make_plugin_manager(
        entry_points=False))
    assert extension_plugins.collect("passes", manager).keys() == builtin.keys()
    (broken,) = manager.broken
    assert broken.name == module
    raise PluginError(broken.reason)


def bad_timeout_setting(ctx: Any) -> Any:
    ctx.monkeypatch.setenv("TILECRAFT_PLUGIN_TIMEOUT_S", "soon")
    ctx.plugins.add("good", "targets", "good")
    return registry.discover_targets(refresh=True)


def spec_file(ctx: Any, text: str, intrinsics: str | None = None) -> TargetSpec:
    spec = ctx.plugins.write("spec.yaml", text)
    files = [ctx.plugins.write("intrinsics.yaml", intrinsics)] if intrinsics else []
    return TargetSpec.from_yaml(spec, plugin="yaml_plugin", intrinsic_files=files)


def binary_spec(ctx: Any) -> TargetSpec:
    path = ctx.plugins.folder / "spec.yaml"
    path.write_bytes(b"\xf4\x90garbage\x00")
    return TargetSpec.from_yaml(path, plugin="yaml_plugin")


# tuning databases ---------------------------------------------------------------------------

def record(tile: int) -> TuningRecord:
    return TuningRecord(workload_key="w", target="x86_avx512", schedule={"tile": tile},
                        costs=(1e-3 * (tile + 1),))


def good_database(path: Path, count: int = 50) -> Path:
    """A valid tuning database of ``count`` records, checkpointed into one file."""
    with TuningDatabase(path) as db:
        db.add_many(record(tile) for tile in range(count))
    with sqlite3.connect(path) as conn:  # fold the WAL into the main file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def edit_database(path: Path, statement: str, *args: Any) -> Path:
    """Run one SQL statement on a database file (as another program or a newer tilecraft
    would)."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(statement, args)
    conn.close()
    return path


def with_unknown_field(path: Path) -> Path:
    """Record 3 gets a field this tilecraft's TuningRecord does not have."""
    conn = sqlite3.connect(path)
    body = json.loads(conn.execute("SELECT body FROM records WHERE id = 3").fetchone()[0])
    conn.close()
    body["energy_joules"] = 1.5
    return edit_database(path, "UPDATE records SET body = ? WHERE id = 3", json.dumps(body))


def truncated(path: Path, keep: Callable[[int], int]) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[:keep(len(data))])
    return path


def open_db(path: Path) -> list[Any]:
    with TuningDatabase(path) as db:
        return db.records()


def damaged(make: Callable[[Path], Path]) -> Callable[[Any], Any]:
    """Open (and read) a database ``make`` damaged; the file must be left byte for byte as it
    was."""
    def row(ctx: Any) -> Any:
        path = make(ctx.tmp_path / "tuning.db")
        before = path.read_bytes() if path.is_file() else None
        try:
            return open_db(path)
        finally:
            if before is not None:
                assert path.read_bytes() == before, "a refused database file was modified"
    return row


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def random_bytes(path: Path) -> Path:
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, np.uint8).tobytes())
    return path


def other_program(path: Path) -> Path:
    return edit_database(path, "CREATE TABLE photos (id INTEGER, jpeg BLOB)")
