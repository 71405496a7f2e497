"""The type check of one message field, built once per field from its type hint (messages.parse runs them).

Standard library only: the worker imports the messages on its link thread.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any, Union

__all__ = ["FieldCheck", "field_check", "shown"]

FieldCheck = tuple[typing.Callable[[Any], Any], str]  # (convert-or-raise-TypeError, what it wants)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def field_check(hint: Any) -> FieldCheck:
    """(convert-or-raise-TypeError, what it wants) for one field's type hint."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        convert, want = field_check(inner)
        return (lambda v: None if v is None else convert(v)), f"{want} or null"
    if hint is int:
        return _expect(_is_int), "an integer"
    if hint is float:
        return _expect(lambda v: _is_int(v) or isinstance(v, float)), "a number"
    if hint is bool:
        return _expect(lambda v: isinstance(v, bool)), "true or false"
    if hint is str:
        return _expect(lambda v: isinstance(v, str)), "a string"
    if hint is dict or origin is dict:
        return _expect(lambda v: isinstance(v, dict)), "a map"
    if origin is tuple:
        item, want = field_check(args[0])
        is_list = _expect(lambda v: isinstance(v, (list, tuple)))
        return (lambda v: tuple(item(x) for x in is_list(v))), f"a list of {want}"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint, "one of " + ", ".join(member.value for member in hint)
    raise TypeError(f"no wire check for {hint!r}")


def _expect(test: typing.Callable[[Any], bool]) -> typing.Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not test(value):
            raise TypeError
        return value

    return check


def shown(value: Any) -> str:
    """A value for an error message, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
