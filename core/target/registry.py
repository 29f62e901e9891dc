"""Target discovery: installed plugin packages declare an entry point in the group
``tilecraft.targets`` that loads to a :class:`~tilecraft.target.base.Target` instance, a
``Target`` subclass, or a zero-argument factory returning one.

Discovery happens when asked (:func:`discover_targets`, :func:`list_targets`,
:func:`get_target`), never on import. A plugin that fails to import, raises in its factory,
declares an invalid spec or the wrong ``api_version`` is listed as broken with the reason and
skipped; the other targets keep working. :func:`register_target` adds a target in-process
(tests, notebooks); in-process targets take precedence over installed ones of the same name.

A name ``"target:variant"`` asks the target for a variant (``Target.with_variant``, e.g.
``x86_avx512:znver4`` for that CPU); the variant's target is made once per process. A target
without variants refuses one with a TargetError.

>>> from tilecraft.target.base import Availability
>>> print(format_target_table([TargetInfo(
...     name="toy", status=TargetStatus.OK, target=None, version="0.1",
...     availability=Availability(codegen=True, build=False, execute=False, emulate=True,
...                               reasons={"build": "no compiler"}))]))
NAME  VERSION  STATUS  PACKAGE  CAPABILITY
toy   0.1      ok      -        emulate (build: no compiler)
"""

from __future__ import annotations

import enum
import importlib.metadata
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from tilecraft.errors import PluginError, TargetError
from tilecraft.target.base import Availability, Target
from tilecraft.target.plugins import PluginTimeoutError, call_with_timeout
from tilecraft.target.spec import TARGET_API_VERSION, TargetSpec

ENTRY_POINT_GROUP = "tilecraft.targets"
IN_PROCESS = "registered in-process"


class TargetStatus(str, enum.Enum):
    OK = "ok"
    BROKEN = "broken"


@dataclass(frozen=True)
class TargetInfo:
    """What discovery found for one target: the target (or None when broken), where it came
    from, and either its availability on this machine or why it is broken."""

    name: str
    status: TargetStatus
    target: Target | None
    reason: str = ""
    availability: Availability | None = None
    distribution: str | None = None
    version: str | None = None
    origin: str = ""
    details: str = ""

    @property
    def ok(self) -> bool:
        return self.status is TargetStatus.OK

    def explain(self) -> str:
        """The capability and why better ones are missing, or why the target is broken."""
        if self.availability is not None:
            return self.availability.explain()
        return " ".join(line.strip() for line in self.reason.splitlines())

    def row(self) -> tuple[str, str, str, str, str]:
        return (self.name, self.version or "-", self.status.value, self.distribution or "-",
                self.explain())


def format_target_table(infos: Iterable[TargetInfo]) -> str:
    """Targets as an aligned text table."""
    rows = [("NAME", "VERSION", "STATUS", "PACKAGE", "CAPABILITY")]
    rows += [info.row() for info in infos]
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths)) + "  " + row[4]
             for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def format_variants(infos: Iterable[TargetInfo]) -> str:
    """One line per working target that has variants: how to name them.

    >>> print(format_variants([]))
    <BLANKLINE>
    """
    lines = []
    for info in infos:
        if not info.ok or info.target is None:
            continue
        try:
            variants = info.target.variants()
        except Exception as err:  # noqa: BLE001 - shown, not raised: the listing goes on
            lines.append(f"{info.name}: listing its variants failed: {_describe(err)}")
            continue
        if variants:
            names = ", ".join(sorted(variants))
            lines.append(f"{info.name}:<variant> for another machine; variants: {names}")
    return "\n".join(lines)


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _instantiate(obj: Any, where: str) -> Target:
    """A Target from what an entry point loaded to."""
    if isinstance(obj, Target):
        return obj
    if isinstance(obj, type) and issubclass(obj, Target):
        return obj()
    if isinstance(obj, type) or not callable(obj):
        raise PluginError(f"{where} loaded {obj!r}; it must be a Target instance, a Target "
                          "subclass, or a zero-argument function returning a Target")
    made = obj()
    if not isinstance(made, Target):
        raise PluginError(f"{where}: the factory {getattr(obj, '__name__', obj)!r} returned "
                          f"{type(made).__name__}, not a Target")
    return made


def _check_target(target: Target, expected_name: str | None) -> tuple[TargetSpec, Availability]:
    """The target's spec and availability, or a PluginError saying what is wrong."""
    spec = target.spec
    if not isinstance(spec, TargetSpec):
        raise PluginError(f"its spec is a {type(spec).__name__}, not a TargetSpec; build it "
                          "with TargetSpec.from_yaml(...) or load_spec(...)")
    if spec.api_version != TARGET_API_VERSION:
        raise PluginError(f"it declares api_version {spec.api_version}, but this tilecraft "
                          f"implements api_version {TARGET_API_VERSION}; install a plugin "
                          f"version built for api_version {TARGET_API_VERSION} (or upgrade "
                          "tilecraft)")
    if expected_name is not None and spec.name != expected_name:
        raise PluginError(f"its entry point is named {expected_name!r} but its spec is named "
                          f"{spec.name!r}; make them the same")
    availability = target.available()
    if not isinstance(availability, Availability):
        raise PluginError(f"available() returned {type(availability).__name__}, not an "
                          "Availability")
    return spec, availability


def _load_entry_point(entry_point: importlib.metadata.EntryPoint) -> TargetInfo:
    dist = getattr(entry_point, "dist", None)
    info = TargetInfo(name=entry_point.name, status=TargetStatus.BROKEN, target=None,
                      distribution=dist.name if dist is not None else None,
                      version=dist.version if dist is not None else None,
                      origin=f"entry point {entry_point.name} = {entry_point.value}")
    plugin = f"plugin {entry_point.name!r}" + (f" ({dist.name} {dist.version})" if dist else "")
    stage = "import failed"
    try:
        obj = entry_point.load()
        stage = "creating the target failed"
        target = _instantiate(obj, f"entry point {entry_point.value}")
        stage = "invalid target"
        spec, availability = _check_target(target, entry_point.name)
    except PluginError as err:
        return replace(info, reason=f"{plugin}: {stage}: {err}", details=traceback.format_exc())
    except (Exception, SystemExit) as err:  # noqa: BLE001 - a plugin must not break the core
        return replace(info, reason=f"{plugin}: {stage}: {_describe(err)}",
                       details=traceback.format_exc())
    return replace(info, status=TargetStatus.OK, target=target, availability=availability,
                   version=info.version or spec.version)


def _load_guarded(entry_point: importlib.metadata.EntryPoint) -> TargetInfo:
    """:func:`_load_entry_point` within ``TILECRAFT_PLUGIN_TIMEOUT_S``: a plugin whose import,
    factory or ``available()`` hangs is listed as broken, naming it, instead of hanging the
    discovery of every target."""
    try:
        return call_with_timeout(lambda: _load_entry_point(entry_point),
                                 f"target plugin {entry_point.name!r}")
    except PluginTimeoutError as err:
        dist = getattr(entry_point, "dist", None)
        return TargetInfo(name=entry_point.name, status=TargetStatus.BROKEN, target=None,
                          reason=str(err), distribution=dist.name if dist is not None else None,
                          version=dist.version if dist is not None else None,
                          origin=f"entry point {entry_point.name} = {entry_point.value}")


_discovered: list[TargetInfo] | None = None
_registered: dict[str, TargetInfo] = {}
_variants: dict[str, Target] = {}


def discover_targets(refresh: bool = False) -> list[TargetInfo]:
    """Load every installed target plugin (once; ``refresh`` loads them again)."""
    global _discovered
    if _discovered is not None and not refresh:
        return list(_discovered)
    _variants.clear()
    found: list[TargetInfo] = []
    by_name: dict[str, TargetInfo] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        info = _load_guarded(entry_point)
        if info.ok and info.name in by_name and by_name[info.name].ok:
            first = by_name[info.name]
            info = replace(info, status=TargetStatus.BROKEN, target=None, availability=None,
                           reason=f"plugin {info.name!r}: the target name is also provided by "
                                  f"{first.distribution or first.origin}; uninstall one")
        by_name.setdefault(info.name, info)
        found.append(info)
    _discovered = found
    return list(found)


def register_target(target: Target, *, replace_existing: bool = False) -> TargetInfo:
    """Make ``target`` available by name in this process (a :class:`PluginError` if it is
    invalid, a :class:`TargetError` if the name is taken and ``replace_existing`` is false)."""
    if not isinstance(target, Target):
        raise PluginError(f"register_target needs a Target instance, got {type(target).__name__}")
    try:
        spec, availability = _check_target(target, None)
    except PluginError as err:
        raise PluginError(f"cannot register target {type(target).__name__}: {err}") from err
    if spec.name in _registered and not replace_existing:
        raise TargetError(f"a target named {spec.name!r} is already registered in this process; "
                          "pass replace_existing=True or call unregister_target first")
    info = TargetInfo(name=spec.name, status=TargetStatus.OK, target=target,
                      availability=availability, version=spec.version, origin=IN_PROCESS)
    _registered[spec.name] = info
    _variants.clear()
    return info


def unregister_target(name: str) -> None:
    """Remove a target added with :func:`register_target`."""
    if _registered.pop(name, None) is None:
        raise TargetError(f"no target named {name!r} was registered in this process")
    _variants.clear()


def list_targets(refresh: bool = False) -> list[TargetInfo]:
    """In-process targets, then installed ones (their names not shadowed), by name."""
    infos = dict(_registered)
    for info in discover_targets(refresh):
        infos.setdefault(info.name, info)
    return sorted(infos.values(), key=lambda info: (info.name, info.origin))


def get_target(name: str) -> Target:
    """The target called ``name``: a :class:`TargetError` listing the installed targets when
    unknown, a :class:`PluginError` with the reason when broken. ``"name:variant"`` is that
    target's variant (see the module docstring)."""
    base, colon, variant = name.partition(":")
    if colon:
        return _variant_target(name, base, variant)
    if name in _registered:
        return _registered[name].target  # type: ignore[return-value]
    infos = discover_targets()
    for info in infos:
        if info.name == name and info.ok:
            assert info.target is not None
            return info.target
    for info in infos:
        if info.name == name:
            raise PluginError(f"target {name!r} is installed but broken: {info.reason}")
    usable = sorted({*_registered, *(info.name for info in infos if info.ok)})
    broken = sorted(info.name for info in infos if not info.ok)
    listing = ", ".join(usable) or "none"
    if broken:
        listing += f" (broken: {', '.join(broken)})"
    raise TargetError(f"unknown target {name!r}; installed targets: {listing}. Install its "
                      "plugin package (pip install ...) or run `tilecraft targets`")


def _variant_target(full: str, base: str, variant: str) -> Target:
    """``get_target(base).with_variant(variant)``, checked like a plugin's target, made once."""
    made = _variants.get(full)
    if made is not None:
        return made
    if not base or not variant:
        raise TargetError(f"target name {full!r} is malformed; write TARGET or "
                          "TARGET:VARIANT, e.g. x86_avx512:znver4")
    target = get_target(base)
    try:
        made = target.with_variant(variant)
    except TargetError:
        raise
    except Exception as err:  # a plugin's bug: reported with its cause, never swallowed
        raise PluginError(f"target {base!r} failed to make its variant {variant!r}: "
                          f"{_describe(err)}") from err
    if not isinstance(made, Target):
        raise PluginError(f"target {base!r}: with_variant({variant!r}) returned "
                          f"{type(made).__name__}, not a Target")
    try:
        _check_target(made, base)
    except PluginError as err:
        raise PluginError(f"target {full!r} is invalid: {err}") from err
    _variants[full] = made
    return made
