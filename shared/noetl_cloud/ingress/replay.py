"""Which id makes a verified delivery "the same delivery again", per scheme (replay protection).

The ingress sends this id with the start as its delivery key (with a Pub/Sub message's publish
time: ``ingress/service.py`` ``delivery_key``), which the control plane claims with the execution
for the listener's replay window: a second delivery of it within the window is answered 200
``duplicate`` and runs nothing. The id must be one the scheme's credential covers,
or an attacker replays a captured delivery under a fresh one:

==========================  ========================================================  ==========================
source / ``verify.type``    the id                                                    window
==========================  ========================================================  ==========================
Pub/Sub push (any scheme)   ``message.messageId`` (``x-goog-pubsub-message-id``       ``replay_window_s``, else
                            unwrapped)                                                ``tolerance_s`` + 60 s
``standard_webhooks``       ``webhook-id`` (signed)                                   ``tolerance_s`` + 60 s
``stripe``                  the event's ``id`` in the signed body (else the digest)   ``tolerance_s`` + 60 s
``github``                  the body digest (``X-GitHub-Delivery`` is not signed)     as Pub/Sub push
``hmac_sha256``, ``bearer`` the body digest, unless ``verify.replay: none``           as Pub/Sub push
==========================  ========================================================  ==========================

The body digest is the sha256 of the verified raw body. ``stripe`` and ``standard_webhooks`` sign
a timestamp, so a delivery older than ``tolerance_s`` is refused anyway and the window only has to
outlive it; the other schemes sign none, so the window is all there is: ``verify.replay_window_s``
sets it (the listener spec refuses it where a signed timestamp sets the window). A ``bearer``
token signs nothing at all: its digest keeps a captured or re-sent request from running twice, not
a token holder from sending new bodies. ``verify.replay: none`` (``hmac_sha256`` and ``bearer``
webhooks only) is for a sender that posts equal bodies on purpose, and leaves only ``dedup``.

Pure: data in, id out; called only after the verifier passed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from noetl_cloud import jsonsafe
from noetl_cloud.errors import ConfigError
from noetl_cloud.ingress.push import pubsub_message_id

_EVENT_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,255}$")
#: Schemes whose only replay key is the digest of the body they sign (or, for bearer, carry).
DIGEST_SCHEMES = frozenset({"github", "hmac_sha256", "bearer"})
#: Of those, the ones a listener may opt out with ``verify.replay: none``.
OPTIONAL_SCHEMES = frozenset({"hmac_sha256", "bearer"})
#: Schemes whose signed timestamp bounds a replay: ``tolerance_s`` sets their window.
TIMESTAMP_SCHEMES = frozenset({"stripe", "standard_webhooks"})
REPLAY_MODES = ("body_digest", "none")
DEFAULT_TOLERANCE_S = 300
WINDOW_MARGIN_S = 60


def body_digest(body: bytes) -> str:
    """The content id of a body: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass(frozen=True, slots=True)
class ReplayPolicy:
    """A listener's replay settings, from its ``verify`` mapping as the control plane returns it."""

    mode: str = "body_digest"
    window_s: float = DEFAULT_TOLERANCE_S + WINDOW_MARGIN_S

    @classmethod
    def from_mapping(cls, verify: Mapping[str, Any]) -> ReplayPolicy:
        """``replay`` (``body_digest`` | ``none``), ``replay_window_s`` and ``tolerance_s``; ``null`` is the
        default. Raises :class:`ConfigError` for a value the listener spec would have refused."""
        mode = verify.get("replay") or "body_digest"
        if mode not in REPLAY_MODES:
            raise ConfigError("verify.replay must be body_digest or none", code="config_invalid")
        window = verify.get("replay_window_s")
        if window is not None and verify.get("type") not in TIMESTAMP_SCHEMES:
            if isinstance(window, bool) or not isinstance(window, int) or window < 1:
                raise ConfigError("verify.replay_window_s must be a positive integer", code="config_invalid")
            return cls(mode, float(window))
        tolerance = verify.get("tolerance_s")
        tolerance = DEFAULT_TOLERANCE_S if tolerance is None or isinstance(tolerance, bool) else tolerance
        if not isinstance(tolerance, int) or tolerance < 0:
            raise ConfigError("verify.tolerance_s must be a non-negative integer", code="config_invalid")
        return cls(mode, float(tolerance + WINDOW_MARGIN_S))


def replay_id(
    scheme: str,
    source: str | None,
    signed_id: str | None,
    body: bytes,
    header_pairs: Sequence[tuple[str, str]],
    policy: ReplayPolicy | None = None,
) -> str | None:
    """The id a second delivery of this one would carry; ``None`` when the listener keeps none
    (``verify.replay: none``). ``signed_id`` is the message id the verifier vouched for."""
    if source == "pubsub":
        return pubsub_message_id(body, header_pairs) or signed_id
    if scheme == "standard_webhooks":
        return signed_id
    if scheme == "stripe":
        return _stripe_event_id(body) or body_digest(body)
    if scheme in OPTIONAL_SCHEMES and policy is not None and policy.mode == "none":
        return None
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
