"""Which id makes a verified delivery "the same delivery again", per scheme (replay protection).

The ingress claims this id in the coordination store while it forwards the delivery and keeps it
as accepted for the scheme's tolerance window (``verify.tolerance_s`` + 60 s): a second delivery
of it within the window is answered 200 ``duplicate`` and runs nothing. The id must be one the
scheme's credential covers, or an attacker replays a captured delivery under a fresh one:

==========================  ===================================================================
source / ``verify.type``    the id
==========================  ===================================================================
Pub/Sub push (any scheme)   ``message.messageId`` (``x-goog-pubsub-message-id`` unwrapped)
``standard_webhooks``       ``webhook-id`` (signed)
``stripe``                  the event's ``id`` in the signed body (else the body digest)
``github``                  the body digest (``X-GitHub-Delivery`` is not signed)
``hmac_sha256``, bearer     none by default: the message id is the body digest, so
                            ``dedup.enabled`` makes the control plane's dedup window refuse the
                            same content again (the signature covers nothing else; a sender that
                            posts equal bodies on purpose keeps them apart by leaving it off)
==========================  ===================================================================

Pure: data in, id out; called only after the verifier passed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from noetl_cloud import jsonsafe
from noetl_cloud.ingress.push import pubsub_message_id

_EVENT_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,255}$")
DIGEST_SCHEMES = frozenset({"github"})


def body_digest(body: bytes) -> str:
    """The content id of a body: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


def replay_id(
    scheme: str, source: str | None, signed_id: str | None, body: bytes, header_pairs: Sequence[tuple[str, str]]
) -> str | None:
    """The id a second delivery of this one would carry; ``None`` when the scheme proves none.
    ``signed_id`` is the message id the verifier vouched for."""
    if source == "pubsub":
        return pubsub_message_id(body, header_pairs) or signed_id
    if scheme == "standard_webhooks":
        return signed_id
    if scheme == "stripe":
        return _stripe_event_id(body) or body_digest(body)
    if scheme in DIGEST_SCHEMES:
        return body_digest(body)
    return None


def _stripe_event_id(body: bytes) -> str | None:
    try:
        event = jsonsafe.loads(body)
    except (UnicodeDecodeError, ValueError):
        return None
    value = event.get("id") if isinstance(event, dict) else None
    return value if isinstance(value, str) and _EVENT_ID.match(value) else None
