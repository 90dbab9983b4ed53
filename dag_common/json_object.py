"""`JsonObject`: a JSON object whose shape this code does not know, at a wire boundary.

A helper that carries any call's JSON (a command's GET or POST, the etcd gateway's calls, a
request body before its route parses it into a model) holds it as a `JsonObject`; the code
that knows the shape turns it into a model (pydantic, a TypedDict, a dataclass) right
there, and passes that on.  A shape that is known is never a `JsonObject`.
"""

from __future__ import annotations

from typing import Any, TypeAlias

# Any, not object: the values are what `json.loads` gives (str, int, float, bool, None, list,
# dict), read by code that checks them or hands them to a model that does.
JsonObject: TypeAlias = dict[str, Any]
