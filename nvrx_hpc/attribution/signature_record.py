"""One entry of the signature catalog: a known failure line as data (see signatures.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from nvrx_hpc.attribution.api import Category, Role

__all__ = ["Signature"]


@dataclass(frozen=True)
class Signature:
    id: str
    category: Category
    role: Role
    pattern: str
    anchors: tuple[str, ...]
    restartable: bool | None
    summary: str
    examples: tuple[str, ...] = ()

    def compiled(self) -> re.Pattern[str]:
        return _compile(self.pattern)


_CACHE: dict[str, re.Pattern[str]] = {}


def _compile(pattern: str) -> re.Pattern[str]:
    if pattern not in _CACHE:
        _CACHE[pattern] = re.compile(pattern)
    return _CACHE[pattern]
