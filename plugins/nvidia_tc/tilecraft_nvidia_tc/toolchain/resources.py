"""What a compiled kernel uses per thread and per block, read from its cubin.

Two readers, one record (:class:`KernelResources`):

- :func:`parse_resource_usage`: the output of ``cuobjdump --dump-resource-usage`` on the cubin
  (registers, static shared memory, local memory, stack, constant bank 0);
- :func:`parse_ptxas_log`: ptxas' ``--verbose`` report, which NVRTC (``--ptxas-options=
  --verbose``) and ``nvcc -Xptxas -v`` print (the same figures plus the bytes of spill stores
  and loads, which the cubin does not record).

The build reads both where it can and says which it used in ``KernelResources.source``.

>>> usage = '''
... Resource usage:
...  Common:
...   GLOBAL:0
...  Function k:
...   REG:22 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:376 TEXTURE:0 SURFACE:0 SAMPLER:0'''
>>> parse_resource_usage(usage)["k"].registers
22
>>> log = '''ptxas info    : Compiling entry function 'k' for 'sm_90'
... ptxas info    : Function properties for k
... ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
... ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem, 376 bytes cmem[0]'''
>>> parse_ptxas_log(log)["k"].spill_store_bytes
4
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_FUNCTION = re.compile(r"^\s*Function\s+([A-Za-z_$][\w$]*)\s*:\s*$")
_FIELD = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")
_PTXAS_ENTRY = re.compile(r"(?:Compiling entry function|Function properties for)\s+'?([\w$]+)'?")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                          r"(\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_AMOUNTS = re.compile(r"(\d+) bytes (smem|lmem|cmem\[0\])")
_PTXAS_BARRIERS = re.compile(r"used (\d+) barriers")


@dataclass(frozen=True)
class KernelResources:
    """Per-kernel resource use of one architecture's cubin (bytes unless named otherwise).

    ``static_shared_bytes`` is what the kernel declares (``__shared__`` arrays);
    ``shared_section_bytes`` the size of the cubin's shared section, which on sm_90 includes
    the block's 1 KB system reserve. ``spill_store_bytes`` / ``spill_load_bytes`` are
    ``None`` where only the cubin was read (it does not record them); ``source`` names the
    reader(s).
    """

    registers: int
    static_shared_bytes: int
    local_bytes: int = 0
    stack_bytes: int = 0
    constant_bytes: int = 0
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    barriers: int | None = None
    shared_section_bytes: int | None = None
    source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def merged(self, log: KernelResources) -> KernelResources:
        """These figures (read from the cubin) with what only ptxas' ``log`` report knows:
        spills, barriers, and the kernel's own static shared memory — the cubin's shared
        section of an sm_90 kernel also holds the 1 KB the system reserves per block, which
        stays in ``shared_section_bytes``."""
        return dataclasses.replace(
            self, static_shared_bytes=log.static_shared_bytes,
            shared_section_bytes=self.static_shared_bytes,
            spill_store_bytes=log.spill_store_bytes, spill_load_bytes=log.spill_load_bytes,
            barriers=log.barriers, source=f"{self.source} + {log.source}")


def parse_resource_usage(text: str) -> dict[str, KernelResources]:
    """Kernel name -> resources from ``cuobjdump --dump-resource-usage`` output."""
    result: dict[str, KernelResources] = {}
    current: str | None = None
    for line in text.splitlines():
        function = _FUNCTION.match(line)
        if function:
            current = function.group(1)
            continue
        if current is None or "REG:" not in line:
            continue
        fields = {name: int(value) for name, value in _FIELD.findall(line)}
        result[current] = KernelResources(
            registers=fields.get("REG", 0), static_shared_bytes=fields.get("SHARED", 0),
            local_bytes=fields.get("LOCAL", 0), stack_bytes=fields.get("STACK", 0),
            constant_bytes=fields.get("CONSTANT[0]", 0), source="cuobjdump")
        current = None
    return result


def parse_ptxas_log(text: str) -> dict[str, KernelResources]:
    """Kernel name -> resources from ptxas' ``--verbose`` report (NVRTC's or nvcc's log)."""
    found: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        entry = _PTXAS_ENTRY.search(line)
        if entry:
            current = entry.group(1)
            found.setdefault(current, {})
            continue
        if current is None:
            continue
        figures = found[current]
        frame = _PTXAS_FRAME.search(line)
        if frame:
            figures["stack"], figures["spill_stores"], figures["spill_loads"] = (
                int(value) for value in frame.groups())
        used = _PTXAS_USED.search(line)
        if used:
            figures["registers"] = int(used.group(1))
            for amount, kind in _PTXAS_AMOUNTS.findall(line):
                figures[kind] = int(amount)
            barriers = _PTXAS_BARRIERS.search(line)
            figures["barriers"] = int(barriers.group(1)) if barriers else 0
    return {
        name: KernelResources(
            registers=figures["registers"], static_shared_bytes=figures.get("smem", 0),
            local_bytes=figures.get("lmem", 0), stack_bytes=figures.get("stack", 0),
            constant_bytes=figures.get("cmem[0]", 0),
            spill_store_bytes=figures.get("spill_stores"),
            spill_load_bytes=figures.get("spill_loads"), barriers=figures.get("barriers"),
            source="ptxas -v")
        for name, figures in found.items() if "registers" in figures}


def dump_resource_usage(cuobjdump: Path, cubin: Path) -> dict[str, KernelResources]:
    """Run ``cuobjdump --dump-resource-usage`` on ``cubin`` and parse it (a RuntimeError
    quoting cuobjdump when it fails)."""
    try:
        done = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)],
                              capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise RuntimeError(f"{cuobjdump} failed: {err}") from err
    if done.returncode != 0:
        raise RuntimeError(f"{cuobjdump} --dump-resource-usage {cubin} exited with "
                           f"{done.returncode}: {done.stderr.strip()}")
    return parse_resource_usage(done.stdout)


__all__ = ["KernelResources", "dump_resource_usage", "parse_ptxas_log", "parse_resource_usage"]
