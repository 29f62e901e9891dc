"""pytest plugin (entry point ``pytest11``): ``--tilecraft-target NAME`` selects the target the
conformance suite (:mod:`tilecraft.testing.conformance`) checks."""

from __future__ import annotations

from typing import Any


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("tilecraft")
    group.addoption("--tilecraft-target", action="store", default=None, metavar="NAME",
                    help="installed tilecraft target whose conformance to check")
