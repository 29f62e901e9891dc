"""This machine's measured figures, cached on disk so that they are measured once per machine.

The cache is one JSON file per CPU, ``x86_avx512-figures-<key>.json`` in
``$TILECRAFT_CACHE_DIR`` (else ``$XDG_CACHE_HOME/tilecraft``, else ``~/.cache/tilecraft``;
where that cannot be written, a per-user folder of the temporary directory);
the key hashes the CPU model name, its ISA flags and :data:`PROBE_VERSION`, and the file
repeats them, so a file from another CPU (a shared home directory), from an older probe, or
corrupt, truncated or implausible is measured again and replaced — never trusted, never a
crash. Writes are atomic (a temporary file renamed over the old one). Where no directory
can be written the figures are still measured, once per process.

``TILECRAFT_X86_PROBE=0`` skips the measurement: the spec then uses estimates from the clock and
the ISA (and says so in its description).

>>> key = figures_key("AMD EPYC 9R14", frozenset({"avx512f", "fma"}))
>>> key == figures_key("AMD EPYC 9R14", frozenset({"fma", "avx512f"})), len(key)
(True, 16)
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from tilecraft_x86_avx512.host import CacheLevel
from tilecraft_x86_avx512.probe import ProbeResult, measure, plausible_figures

#: bump when the probe measures differently: older cache files are then measured again
PROBE_VERSION = 2   # 2: the AMX tile rate
CACHE_DIR_ENV = "TILECRAFT_CACHE_DIR"
PROBE_ENV = "TILECRAFT_X86_PROBE"
FILE_PREFIX = "x86_avx512-figures-"

Probe = Callable[[Sequence[tuple[str, int]]], ProbeResult]


@dataclass(frozen=True)
class HostFigures:
    """Measured figures of one core and where they came from."""

    fma_flops_per_core: float
    dram_bytes_per_second: float
    l3_bytes_per_second: float
    l2_bytes_per_second: float
    l1_bytes_per_second: float
    source: str
    amx_bf16_flops_per_core: float | None = None


def cache_dir() -> Path:
    """Where the figures are cached (see the module docstring)."""
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tilecraft"


def fallback_dir() -> Path:
    """Where the figures go when :func:`cache_dir` cannot be written (a read-only home):
    a per-user folder in the temporary directory, so that every process of a run (tuning
    workers included) still measures only once."""
    return Path(tempfile.gettempdir()) / f"tilecraft-{os.getuid()}"


def figures_key(model_name: str, flags: frozenset[str]) -> str:
    """A short hash of the CPU model, its flags and the probe version."""
    text = json.dumps([model_name, sorted(flags), PROBE_VERSION])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_file(model_name: str, flags: frozenset[str], directory: Path | None = None) -> Path:
    name = f"{FILE_PREFIX}{figures_key(model_name, flags)}.json"
    return (directory or cache_dir()) / name


def _flags_digest(flags: frozenset[str]) -> str:
    return hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()


def read_cached(path: Path, model_name: str, flags: frozenset[str]) -> HostFigures | None:
    """The figures in ``path`` if it is a well-formed file of this CPU and probe version with
    plausible figures; None otherwise (absent, unreadable, corrupt, foreign, stale)."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("probe_version") != PROBE_VERSION \
            or data.get("model_name") != model_name \
            or data.get("flags_sha256") != _flags_digest(flags):
        return None
    try:
        result = ProbeResult(**{field.name: data[field.name] for field in fields(ProbeResult)})
    except (KeyError, TypeError):
        return None
    if not plausible_figures(result):
        return None
    return HostFigures(**asdict(result), source=f"cached in {path}")


def write_cached(path: Path, model_name: str, flags: frozenset[str],
                 result: ProbeResult) -> bool:
    """Write ``result`` atomically; False (and nothing written) when the directory is not
    writable."""
    data = {"probe_version": PROBE_VERSION, "model_name": model_name,
            "flags_sha256": _flags_digest(flags), **asdict(result)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump(data, file, indent=1)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True


def probing_enabled() -> bool:
    return os.environ.get(PROBE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def host_figures(model_name: str, flags: frozenset[str], caches: Sequence[CacheLevel],
                 refresh: bool = False, probe: Probe | None = None) -> HostFigures | None:
    """This CPU's figures: from the cache file, else measured by ``probe`` (default
    :func:`.probe.measure`) and cached.

    ``refresh`` measures even when the cache holds figures (and when
    ``TILECRAFT_X86_PROBE=0``: it is an explicit request). None when probing is disabled or
    the CPU has no AVX-512F (the probe's kernels would not run); a failed probe also gives
    None, with a warning, since planning must go on without figures.
    """
    if "avx512f" not in flags or not (refresh or probing_enabled()):
        return None
    paths = [cache_file(model_name, flags), cache_file(model_name, flags, fallback_dir())]
    if not refresh:
        for path in paths:
            cached = read_cached(path, model_name, flags)
            if cached is not None:
                return cached
    try:
        result = (probe or measure)([(cache.name, cache.size_bytes) for cache in caches])
    except Exception as err:  # noqa: BLE001 - the spec falls back to estimates, and says so
        warnings.warn(f"x86_avx512: the probe of this CPU failed ({err}); planning with "
                      "estimates from the clock and the ISA", RuntimeWarning, stacklevel=2)
        return None
    written = next((path for path in paths if write_cached(path, model_name, flags, result)),
                   None)
    source = f"measured, cached in {written}" if written else "measured (cache not writable)"
    return HostFigures(**asdict(result), source=source)


__all__ = ["HostFigures", "cache_dir", "cache_file", "figures_key", "host_figures",
           "read_cached", "write_cached"]
