"""The target a ``tilecraft`` command compiles for: the one ``--target`` names, or else the host's
best target.

The core has no default target (``tilecraft.compile`` needs one). The command line does: without
``--target``, ``tilecraft compile``, ``tune`` and ``report`` take, among the installed targets
this machine can *execute* (``Target.available()``, as ``tilecraft targets`` shows), the one
whose spec declares the highest float32 peak (``spec.compute.peak_flops``; ties by name), and
say on stderr which they chose. Nothing here names a target: the choice is read from what each
target reports about itself.

>>> choose_host_target([])
Traceback (most recent call last):
...
tilecraft.errors.TargetError: no tilecraft targets are installed; install a target plugin \
package (pip install -e plugins/<name>) or write one with `tilecraft new-target NAME`
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from tilecraft.errors import TargetError
from tilecraft.target.base import Capability, Target
from tilecraft.target.registry import TargetInfo

#: the dtype whose declared peak ranks the targets that execute here
RANKING_DTYPE = "float32"


@dataclass(frozen=True)
class HostChoice:
    """The target chosen for this machine, and the executing targets it was chosen among."""

    target: Target
    candidates: tuple[str, ...]

    def explain(self) -> str:
        """One line for the user: which target, and why it.

        ``candidates`` are the names of every target that executes here, best first.
        """
        others = [name for name in self.candidates if name != self.target.name]
        why = ("the only installed target this machine executes" if not others else
               f"of the installed targets this machine executes ({', '.join(self.candidates)}), "
               f"the one whose spec declares the highest {RANKING_DTYPE} peak")
        return (f"no --target given: using {self.target.name}, {why}; pass --target NAME for "
                "another (`tilecraft targets` lists them)")


def _declared_peak(target: Target) -> float:
    return target.spec.compute.peak_flops(RANKING_DTYPE)


def choose_host_target(infos: Sequence[TargetInfo]) -> HostChoice:
    """The best of ``infos`` (working targets as :func:`~tilecraft.target.registry.list_targets`
    gives them) that executes on this machine; a :class:`TargetError` naming what each target
    can do here when none executes."""
    if not infos:
        raise TargetError("no tilecraft targets are installed; install a target plugin package "
                          "(pip install -e plugins/<name>) or write one with `tilecraft "
                          "new-target NAME`")
    executing = [info.target for info in infos if info.ok and info.target is not None
                 and info.availability is not None
                 and info.availability.capability is Capability.EXECUTE]
    if not executing:
        can_do = ", ".join(f"{info.name}: {_capability(info)}" for info in infos)
        raise TargetError(f"no installed target executes on this machine ({can_do}); pass "
                          "--target NAME to compile for one of them anyway (`tilecraft targets` "
                          "says why each cannot execute)")
    ranked = sorted(executing, key=lambda target: (-_declared_peak(target), target.name))
    return HostChoice(ranked[0], tuple(target.name for target in ranked))


def _capability(info: TargetInfo) -> str:
    if not info.ok:
        return "broken"
    return info.availability.capability.value if info.availability is not None else "unknown"


def target_for_command(name: str | None) -> Target:
    """The target ``--target name`` names, or (``name`` is None) the host's best target, saying
    on stderr which one was chosen (stdout may be JSON)."""
    from tilecraft.target.registry import get_target, list_targets

    if name is not None:
        return get_target(name)
    choice = choose_host_target(list_targets())
    print(choice.explain(), file=sys.stderr)
    return choice.target


TARGET_HELP = ("installed target name, or NAME:VARIANT for a target's variant (`tilecraft "
               "targets` lists them); default: the best installed target this machine executes")

__all__ = ["RANKING_DTYPE", "TARGET_HELP", "HostChoice", "choose_host_target",
           "target_for_command"]
