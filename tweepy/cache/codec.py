"""How ``RedisCache`` writes values into Redis and reads them back: JSON (orjson), with the types of rows tagged.

Reading a value only ever builds strings, numbers, booleans, None, datetimes, tuples, frozensets and
the row types registered with ``row_type``, so whoever can write to the Redis can at worst make a
page wrong, never run code in the app; anything else found there is refused with ``ValueError``.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import orjson

T = TypeVar("T", bound=type)
PLAIN = (str, int, float, bool, type(None))
# The exact types a field may have: orjson writes a datetime as its ISO text, as ``isoformat`` does.
FIELD_TYPES = frozenset(PLAIN)
DATETIME_FIELD_TYPES = FIELD_TYPES | {datetime}


@dataclass(frozen=True)
class Row:
    """A named tuple a cached value may hold, and which of its fields are datetimes (kept as ISO text)."""

    cls: type
    datetimes: tuple[int, ...]

    def fields(self, rows: tuple) -> list[tuple]:
        """The rows as orjson writes them; ``TypeError`` for a field that would not read back the same.

        Checked a column at a time (``zip`` and ``map`` loop in C): a page of fifty rows is written
        after every write that changes it."""
        for i, column in enumerate(zip(*rows, strict=True)):
            allowed = DATETIME_FIELD_TYPES if i in self.datetimes else FIELD_TYPES
            for kind in set(map(type, column)) - allowed:
                if not issubclass(kind, tuple(allowed)):  # a subclass (Markup is a str) is written as its base
                    raise TypeError(f"a cached {self.cls.__name__} cannot hold a {kind.__name__}")
        return [tuple(row) for row in rows]

    def make(self, rows: Any) -> list[tuple]:
        """The rows whose fields ``fields`` wrote (a page's worth at once: it is read on every visit)."""
        if type(rows) is not list:
            raise ValueError(f"not cached {self.cls.__name__}s")
        cls, width, datetimes, made = self.cls, len(self.cls._fields), self.datetimes, []
        for fields in rows:
            if type(fields) is not list or len(fields) != width:
                raise ValueError(f"not a cached {cls.__name__}")
            for i in datetimes:
                if fields[i] is not None:
                    fields[i] = datetime.fromisoformat(fields[i])
            made.append(tuple.__new__(cls, fields))  # as cls._make does, its length checked above
        for column in zip(*made, strict=True):  # only plain fields: a list or an object is someone else's writing
            if not set(map(type, column)) <= DATETIME_FIELD_TYPES:
                raise ValueError(f"not a cached {cls.__name__}")
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
        return {"row": row.cls.__name__, "fields": row.fields((value,))[0]}
    if type(value) is tuple:
        row = _row_of(value[0]) if value else None
        if row is not None and all(type(item) is row.cls for item in value):  # a page of rows: tagged once
            return {"rows": row.cls.__name__, "fields": row.fields(value)}
        return {"tuple": [_tagged(item) for item in value]}
    if isinstance(value, frozenset):
        return {"frozenset": [_tagged(item) for item in value]}
    raise TypeError(f"a cached value cannot hold a {type(value).__name__}")


def _untagged(value: Any) -> Any:
    """What ``_tagged`` made ``value`` from."""
    if type(value) is not dict:
        if type(value) is list:
            raise ValueError("not a cached value: a bare list")
        return value
    if value.keys() == {"rows", "fields"} and value["rows"] in ROWS:
        return tuple(ROWS[value["rows"]].make(value["fields"]))
    if value.keys() == {"row", "fields"} and value["row"] in ROWS:
        return ROWS[value["row"]].make([value["fields"]])[0]
    if len(value) == 1:
        ((tag, inner),) = value.items()
        if tag == "datetime" and type(inner) is str:
            return datetime.fromisoformat(inner)
        if tag == "tuple" and type(inner) is list:
            return tuple(map(_untagged, inner))
        if tag == "frozenset" and type(inner) is list:
            return frozenset(map(_untagged, inner))
    raise ValueError(f"not a cached value: {value!r:.80}")


def encode(value: Any) -> bytes:
    """The bytes Redis keeps for ``value``; ``TypeError`` for a value of a type not listed above."""
    return orjson.dumps(_tagged(value))


def decode(payload: bytes) -> Any:
    """The value ``encode`` made these bytes from; ``ValueError`` for anything else."""
    try:
        return _untagged(orjson.loads(payload))
    except TypeError as error:  # a datetime that is not text, a row type named by a list
        raise ValueError(f"not a cached value: {error}") from None
