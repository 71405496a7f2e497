"""The signatures of a catalog that a line can match: those with an anchor in it, in catalog order.

Every line a signature matches holds one of its anchors (signatures.py; unit tests check this on each
signature's examples and on lines of the corpus), so the rest need not be tried. A candidate line then costs a
substring test per anchor and a handful of regular expressions instead of the whole catalog's.
"""

from __future__ import annotations

from nvrx_hpc.attribution.signature_record import Signature

__all__ = ["signatures_for"]

_INDEXES: dict[int, tuple[tuple[Signature, ...], list[tuple[str, tuple[int, ...]]]]] = {}


def _index(catalog: tuple[Signature, ...]) -> list[tuple[str, tuple[int, ...]]]:
    entry = _INDEXES.get(id(catalog))
    if entry is None or entry[0] is not catalog:  # kept beside its catalog, so an id is never reused while cached
        if len(_INDEXES) > 16:  # catalogs made on the fly (tests): keep the cache small
            _INDEXES.clear()
        by_anchor: dict[str, list[int]] = {}
        for i, sig in enumerate(catalog):
            for anchor in sig.anchors:
                by_anchor.setdefault(anchor, []).append(i)
        entry = _INDEXES[id(catalog)] = (catalog, [(a, tuple(ids)) for a, ids in by_anchor.items()])
    return entry[1]


def signatures_for(line: str, catalog: tuple[Signature, ...]) -> list[Signature]:
    """The signatures of `catalog` with an anchor in `line`, in the catalog's order."""
    found: set[int] = set()
    for anchor, ids in _index(catalog):
        if anchor in line:
            found.update(ids)
    return [catalog[i] for i in sorted(found)]
