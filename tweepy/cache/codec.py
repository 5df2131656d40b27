"""How ``RedisCache`` writes values into Redis and reads them back: JSON, with the types of rows tagged.

Reading a value only ever builds strings, numbers, booleans, None, datetimes, tuples, frozensets and
the row types registered with ``row_type``, so whoever can write to the Redis can at worst make a
page wrong, never run code in the app; anything else found there is refused with ``ValueError``.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T", bound=type)
PLAIN = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Row:
    """A named tuple a cached value may hold, and which of its fields are datetimes (kept as ISO text)."""

    cls: type
    datetimes: tuple[int, ...]

    def fields(self, row: tuple) -> list:
        fields = list(row)
        for i, field in enumerate(fields):
            if i in self.datetimes and isinstance(field, datetime):
                fields[i] = field.isoformat()
            elif not isinstance(field, PLAIN):
                raise TypeError(f"a cached {self.cls.__name__} cannot hold a {type(field).__name__}")
        return fields

    def make(self, rows: Any) -> list[tuple]:
        """The rows whose fields ``fields`` wrote (a page's worth at once: it is read on every visit)."""
        if not isinstance(rows, list):
            raise ValueError(f"not cached {self.cls.__name__}s")
        cls, width, datetimes, made = self.cls, len(self.cls._fields), self.datetimes, []
        for fields in rows:
            if type(fields) is not list or len(fields) != width:
                raise ValueError(f"not a cached {cls.__name__}")
            for i in datetimes:
                if fields[i] is not None:
                    fields[i] = datetime.fromisoformat(fields[i])
            made.append(tuple.__new__(cls, fields))  # as cls._make does, its length checked above
        return made


# The named tuples a cached read may return, by name: the only classes reading a value may build.
ROWS: dict[str, Row] = {}


def row_type(cls: T) -> T:
    """Register a named tuple as a row a cached value may hold (as ``queries.TweetRow`` is)."""
    if cls.__name__ in ROWS and ROWS[cls.__name__].cls is not cls:
        raise ValueError(f"two row types are named {cls.__name__!r}")
    hints = typing.get_type_hints(cls)
    ROWS[cls.__name__] = Row(cls, tuple(i for i, name in enumerate(cls._fields) if hints[name] is datetime))
    return cls


def _row_of(value: Any) -> Row | None:
    row = ROWS.get(type(value).__name__)
    return row if row is not None and row.cls is type(value) else None


def _tagged(value: Any) -> Any:
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    row = _row_of(value)
    if row is not None:
        return {"row": row.cls.__name__, "fields": row.fields(value)}
    if type(value) is tuple:
        row = _row_of(value[0]) if value else None
        if row is not None and all(type(item) is row.cls for item in value):  # a page of rows: tagged once
            return {"rows": row.cls.__name__, "fields": [row.fields(item) for item in value]}
        return {"tuple": [_tagged(item) for item in value]}
    if isinstance(value, frozenset):
        return {"frozenset": [_tagged(item) for item in value]}
    raise TypeError(f"a cached value cannot hold a {type(value).__name__}")


def _untagged(tagged: dict) -> Any:
    """Called by ``json.loads`` for each object, innermost first."""
    if tagged.keys() == {"rows", "fields"} and tagged["rows"] in ROWS:
        return tuple(ROWS[tagged["rows"]].make(tagged["fields"]))
    if tagged.keys() == {"row", "fields"} and tagged["row"] in ROWS:
        return ROWS[tagged["row"]].make([tagged["fields"]])[0]
    if len(tagged) == 1:
        ((tag, inner),) = tagged.items()
        if tag == "datetime" and isinstance(inner, str):
            return datetime.fromisoformat(inner)
        if tag == "tuple" and isinstance(inner, list):
            return tuple(inner)
        if tag == "frozenset" and isinstance(inner, list):
            return frozenset(inner)
    raise ValueError(f"not a cached value: {tagged!r:.80}")


def encode(value: Any) -> bytes:
    """The bytes Redis keeps for ``value``; ``TypeError`` for a value of a type not listed above."""
    return json.dumps(_tagged(value), separators=(",", ":"), ensure_ascii=False).encode()


def decode(payload: bytes) -> Any:
    """The value ``encode`` made these bytes from; ``ValueError`` for anything else."""
    try:
        value = json.loads(payload, object_hook=_untagged)
    except TypeError as error:  # a datetime that is not text, a set of lists
        raise ValueError(f"not a cached value: {error}") from None
    if isinstance(value, list):
        raise ValueError("not a cached value: a bare list")
    return value
