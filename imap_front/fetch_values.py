"""pymap's FETCH values, each rendered without its `has_bytes` checks.

pymap renders each item of a FETCH line (`UID 7`, `FLAGS (\\Seen)`, a body's literal)
through `BytesFormat.__mod__`, which asks `isinstance` of two `runtime_checkable`
Protocols (`SupportsIndex`, `SupportsBytes`) for every value: Python walks the Protocol's
attributes at each check, 25% of the front's time in a `UID FETCH 1:* (FLAGS)`
(bench/README.md, *imap*).  The values here are pymap's own classes with `__bytes__`
formatting the value's bytes directly: the same bytes, every value a FETCH item can have
being bytes or a pymap primitive with its `__bytes__`.  `FrontAttributes` is pymap's
`MessageAttributes` making these; `protocol.FrontState.do_fetch` uses it.
"""

from __future__ import annotations

from typing import ClassVar

from pymap.fetch import DynamicFetchValue, DynamicLoadedFetchValue, MessageAttributes


class _Simple(DynamicFetchValue):
    __slots__ = ()

    def __bytes__(self) -> bytes:
        return b"%b %b" % (self.attribute.for_response, bytes(self.get_value()))


class _Loaded(DynamicLoadedFetchValue):
    __slots__ = ()

    def __bytes__(self) -> bytes:
        loaded = self._get_loaded.loaded_msg
        value = MessageAttributes.placeholder if loaded is None else self.get_value(loaded)
        return b"%b %b" % (self.attribute.for_response, bytes(value))


def _fast(base: type, pymaps: dict[bytes, type]) -> dict[bytes, type]:
    return {name: type(cls.__name__, (base, cls), {"__slots__": ()}) for name, cls in
            pymaps.items()}  # fmt: skip


class FrontAttributes(MessageAttributes):
    """pymap's FETCH attributes of one message, rendered by the classes above."""

    __slots__ = ()

    _simple_attrs: ClassVar = _fast(_Simple, dict(MessageAttributes._simple_attrs))  # type: ignore[misc]
    _loaded_attrs: ClassVar = _fast(_Loaded, dict(MessageAttributes._loaded_attrs))  # type: ignore[misc]
