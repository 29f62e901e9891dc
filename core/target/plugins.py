"""The plugin manager of optional extensions (hooks in :mod:`tilecraft.target.hookspecs`).

Extension packages are found through the entry point group ``tilecraft.plugins`` when
:func:`get_plugin_manager` is first called, never on import. A package that fails to import,
implements a hook that does not exist, or raises inside a hook is recorded in
``manager.broken`` with its name and the reason, and skipped; the others keep working. An
import or a hook call that does not finish within ``TILECRAFT_PLUGIN_TIMEOUT_S`` seconds
(default 60; ``0`` waits for ever) is recorded as broken too (:func:`call_with_timeout`), and
so is one that calls ``sys.exit()``; target discovery (:mod:`tilecraft.target.registry`) uses
the same limit.

>>> from tilecraft.target.hookspecs import hookimpl
>>> class Broken:
...     @hookimpl
...     def tilecraft_register_passes(self):
...         raise RuntimeError("boom")
>>> manager = make_plugin_manager([Broken()], entry_points=False, builtins=False)
>>> collect("passes", manager)
{}
>>> print(manager.broken[0].reason)
tilecraft_register_passes raised RuntimeError: boom
"""

from __future__ import annotations

import enum
import importlib.metadata
import inspect
import math
import os
import threading
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pluggy

from tilecraft.errors import PluginError
from tilecraft.target import hookspecs

ENTRY_POINT_GROUP = "tilecraft.plugins"

#: environment variable: seconds a plugin may take to load (``0``: no limit)
TIMEOUT_VARIABLE = "TILECRAFT_PLUGIN_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 60.0


class PluginTimeoutError(PluginError):
    """Loading a plugin did not finish within the time allowed."""


def plugin_timeout_s() -> float | None:
    """Seconds a plugin may take to load (``TILECRAFT_PLUGIN_TIMEOUT_S``), None for no limit.

    >>> import os
    >>> os.environ[TIMEOUT_VARIABLE] = "2.5"
    >>> plugin_timeout_s()
    2.5
    >>> del os.environ[TIMEOUT_VARIABLE]
    """
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds >= 0 or math.isinf(seconds):
        raise PluginError(f"{TIMEOUT_VARIABLE}={text!r} is not a number of seconds; set it to "
                          f"e.g. {DEFAULT_TIMEOUT_S:g}, or 0 for no limit")
    return seconds or None


def call_with_timeout(function: Callable[[], Any], what: str,
                      timeout_s: float | None = None) -> Any:
    """``function()``, run in a daemon thread and waited for at most ``timeout_s`` seconds
    (default: :func:`plugin_timeout_s`); its exception is re-raised here. When it does not
    finish in time a :class:`PluginTimeoutError` naming ``what`` is raised and the thread is
    left behind (Python cannot stop a thread): a hung import then blocks only that plugin's
    modules, and the run goes on.

    >>> call_with_timeout(lambda: 6 * 7, "plugin 'answer'")
    42
    >>> import time
    >>> try:
    ...     call_with_timeout(lambda: time.sleep(0.5), "plugin 'slow'", timeout_s=0.01)
    ... except PluginTimeoutError as err:
    ...     print(str(err).split(";")[0])
    plugin 'slow' did not finish loading within 0.01 s
    """
    if timeout_s is None:
        timeout_s = plugin_timeout_s()
    if timeout_s is None:
        return function()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = err

    thread = threading.Thread(target=run, name=f"tilecraft loading {what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise PluginTimeoutError(
            f"{what} did not finish loading within {timeout_s:g} s; it is left hanging in a "
            f"background thread — fix or uninstall the plugin, or raise {TIMEOUT_VARIABLE}")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class ExtensionKind(str, enum.Enum):
    PASSES = "passes"
    COST_MODELS = "cost_models"
    SEARCH_ENGINES = "search_engines"
    OPERATORS = "operators"
    RUNNERS = "runners"

    @property
    def hook_name(self) -> str:
        return f"tilecraft_register_{self.value}"


@dataclass(frozen=True)
class BrokenPlugin:
    """A plugin that could not be used, and why (``details`` holds the traceback)."""

    name: str
    reason: str
    details: str = ""


@dataclass(frozen=True)
class ExtensionInfo:
    """One registered object: its name, kind, the object, and the plugin that gave it."""

    name: str
    kind: ExtensionKind
    obj: Any
    plugin: str


def extension_name(obj: Any) -> str | None:
    """An object's registered name: its ``name`` attribute, else its ``__name__``."""
    name = getattr(obj, "name", None)
    if isinstance(name, str) and name:
        return name
    name = getattr(obj, "__name__", None)
    return name if isinstance(name, str) and name else None


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


class TilecraftPluginManager(pluggy.PluginManager):
    """A pluggy manager that also keeps the list of broken plugins.

    Like pytest, a function named ``tilecraft_*`` counts as a hook implementation even without
    the ``@hookimpl`` marker, so a forgotten decorator or a misspelled hook name is reported
    instead of silently ignored.
    """

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        self.broken: list[BrokenPlugin] = []

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name.startswith(f"{hookspecs.PROJECT}_") \
                and inspect.isroutine(getattr(plugin, name, None)):
            opts = {}
        return opts

    def mark_broken(self, name: str, reason: str, details: str = "") -> None:
        entry = BrokenPlugin(name, reason, details)
        if all((b.name, b.reason) != (name, reason) for b in self.broken):
            self.broken.append(entry)

    def register_checked(self, plugin: Any, name: str) -> bool:
        """Register ``plugin``; on an invalid hook implementation, record it as broken."""
        try:
            self.register(plugin, name=name)
        except Exception as err:  # noqa: BLE001 - a plugin's error must not stop the core
            self.mark_broken(name, f"invalid hook implementation: {_describe(err)}",
                             traceback.format_exc())
            return False
        try:
            self.check_pending()
        except pluggy.PluginValidationError as err:
            self.unregister(plugin)
            known = ", ".join(hookspecs.hook_names())
            self.mark_broken(name, f"implements an unknown hook: {err} (hooks: {known})",
                             traceback.format_exc())
            return False
        return True


def _load_entry_points(manager: TilecraftPluginManager) -> None:
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        name = entry_point.name
        try:
            plugin = call_with_timeout(entry_point.load, f"plugin {name!r}")
        except PluginTimeoutError as err:
            manager.mark_broken(name, f"cannot load entry point {entry_point.value}: {err}")
            continue
        except (Exception, SystemExit) as err:  # noqa: BLE001 - sys.exit() in a plugin too
            manager.mark_broken(name, f"cannot load entry point {entry_point.value}: "
                                      f"{_describe(err)}", traceback.format_exc())
            continue
        if manager.get_plugin(name) is not None:
            manager.mark_broken(name, "another plugin is registered under the same name; "
                                      "rename the entry point")
            continue
        manager.register_checked(plugin, name)


def make_plugin_manager(plugins: Iterable[Any] = (), *, entry_points: bool = True,
                        builtins: bool = True) -> TilecraftPluginManager:
    """A fresh manager: the core's defaults (``builtins``), the installed extension packages
    (``entry_points``), then ``plugins`` (objects implementing hooks, e.g. in tests)."""
    manager = TilecraftPluginManager()
    if builtins:
        from tilecraft.target import builtins as core_defaults

        manager.register_checked(core_defaults, "tilecraft.builtins")
    if entry_points:
        _load_entry_points(manager)
    for position, plugin in enumerate(plugins):
        name = getattr(plugin, "__name__", None) or f"{type(plugin).__name__}-{position}"
        manager.register_checked(plugin, name)
    return manager


_default_manager: TilecraftPluginManager | None = None


def get_plugin_manager(refresh: bool = False) -> TilecraftPluginManager:
    """The process-wide manager (built-ins plus installed plugins), created on first call."""
    global _default_manager
    if _default_manager is None or refresh:
        _default_manager = make_plugin_manager()
    return _default_manager


def extensions(kind: ExtensionKind | str,
               manager: TilecraftPluginManager | None = None) -> list[ExtensionInfo]:
    """Every object of ``kind``, built-ins first, each hook implementation called on its own
    so one failing plugin does not hide the others."""
    kind = ExtensionKind(kind)
    manager = manager or get_plugin_manager()
    caller = getattr(manager.hook, kind.hook_name)
    found: dict[str, ExtensionInfo] = {}
    for impl in caller.get_hookimpls():
        plugin = impl.plugin_name
        try:  # built-ins are called directly; a plugin's hook within the time limit
            result = impl.function() if plugin == "tilecraft.builtins" else \
                call_with_timeout(impl.function, f"plugin {plugin!r} ({kind.hook_name})")
        except PluginTimeoutError as err:
            manager.mark_broken(plugin, str(err))
            continue
        except (Exception, SystemExit) as err:  # noqa: BLE001 - sys.exit() in a hook too
            manager.mark_broken(plugin, f"{kind.hook_name} raised {_describe(err)}",
                                traceback.format_exc())
            continue
        if not isinstance(result, (list, tuple)):
            manager.mark_broken(plugin, f"{kind.hook_name} returned {type(result).__name__}; "
                                        "return a list of named objects")
            continue
        for obj in result:
            name = extension_name(obj)
            if name is None:
                manager.mark_broken(plugin, f"{kind.hook_name} returned {obj!r}, which has no "
                                            "name; give it a name attribute")
            elif name in found:
                manager.mark_broken(plugin, f"{kind.value} {name!r} is already registered by "
                                            f"{found[name].plugin}; rename it")
            else:
                found[name] = ExtensionInfo(name, kind, obj, plugin)
    return list(found.values())


def collect(kind: ExtensionKind | str,
            manager: TilecraftPluginManager | None = None) -> dict[str, Any]:
    """Name -> object for every registered object of ``kind``."""
    return {info.name: info.obj for info in extensions(kind, manager)}


def broken_plugins(manager: TilecraftPluginManager | None = None) -> list[BrokenPlugin]:
    return list((manager or get_plugin_manager()).broken)
