"""How the store client (`node_client`) reads the nodes' answers: a body's JSON (orjson,
else the standard library, which reads a lone surrogate orjson refuses), and a listing's item
leniently (an item that is not one comes back as an unreadable item saying why, the rest of
the page as it is)."""

from __future__ import annotations

import json as std_json
from typing import Any

from orjson import loads as json_loads

from dag_common.store_api import Item


def json_or_none(raw: bytes) -> Any:
    """The JSON document `raw` holds, or None if it holds none.  orjson refuses a document
    spelling a lone surrogate ("\\ud800"), which is valid JSON: the standard library reads
    it, and `lenient_item` finds the item that holds it."""
    if not raw:
        return None
    try:
        return json_loads(raw)
    except ValueError:
        pass
    try:
        return std_json.loads(raw)
    except (ValueError, RecursionError):
        return None


def text_or_none(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def std_json_or_none(text: str) -> Any:
    """The JSON document `text` holds (the standard library's parse), or None."""
    try:
        return std_json.loads(text)
    except (ValueError, RecursionError):
        return None


def lenient_item(data: Any, bodies: bool = True) -> Item:
    """One item of a listing (`bodies` off: without its body), or, if it is not one, an
    unreadable item saying why."""
    try:
        item = Item.from_json(data) if bodies else Item.head_from_json(data)
        for text in (item.item_id, item.folder, item.subject, item.body, item.body_hash):
            if not isinstance(text, str):
                raise TypeError(f"a text field is {type(text).__name__}")
            if not text.isascii():
                text.encode()  # UnicodeEncodeError: a lone surrogate
        return item
    except UnicodeEncodeError:
        why = "the source's item holds text that UTF-8 cannot carry (a lone surrogate)"
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        why = f"the source's item is not readable ({type(exc).__name__}: {exc})"[:300]
    item_id = data.get("item_id") if isinstance(data, dict) else None
    change = data.get("change_number") if isinstance(data, dict) else None
    return Item.unreadable_at(
        change if isinstance(change, int) else 0,
        why,
        item_id if isinstance(item_id, str) and item_id.isprintable() else "",
    )
