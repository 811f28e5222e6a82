"""JSON from outside the process, parsed with its nesting bounded.

The standard library's parser recurses once per ``[`` or ``{``: a few thousand of them raise
``RecursionError``, which no handler expects (it answered 500, and Pub/Sub redelivered a signed
push of it forever), and a value nested just under that limit breaks later, when it is encoded
again deeper in a stack. Every JSON body a role reads from a request (the Flask JSON provider of
:func:`noetl_cloud.web.create_app`) or from a pushed or pulled message goes through :func:`loads`,
which refuses more than :data:`MAX_DEPTH` levels with :class:`TooDeep`, a ``ValueError`` like any
other malformed JSON: a 400 for a request, a permanent (dead-lettered) failure for a message.
"""

from __future__ import annotations

import json
from typing import Any

#: The deepest nesting a request body may have (the top-level array or object is level 1).
MAX_DEPTH = 128
#: The deepest payload a message may carry: the workload it is forwarded in wraps it a few levels
#: deeper, and that request must itself be within :data:`MAX_DEPTH`.
MAX_PAYLOAD_DEPTH = MAX_DEPTH - 8


class TooDeep(ValueError):
    """The JSON document nests deeper than allowed."""


def loads(data: str | bytes | bytearray, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(data)``, raising :class:`TooDeep` (a ``ValueError``) past ``max_depth`` levels."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise TooDeep(f"JSON nested deeper than {max_depth} levels") from None
    if _openers(data) > max_depth and depth_exceeds(value, max_depth):
        raise TooDeep(f"JSON nested deeper than {max_depth} levels")
    return value


def _openers(data: str | bytes | bytearray) -> int:
    """How many ``[`` and ``{`` the text holds (in strings too): no more of them, no deeper nesting.
    Counting is C-speed, so the walk of :func:`depth_exceeds` runs only for documents that could fail it."""
    if isinstance(data, str):
        return data.count("[") + data.count("{")
    return data.count(b"[") + data.count(b"{")


def depth_exceeds(value: Any, max_depth: int) -> bool:
    """Whether ``value`` (parsed JSON) nests deeper than ``max_depth``; iterative, so it cannot recurse."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if level > max_depth:
            return True
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return False
