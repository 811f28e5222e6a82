"""What the ingress answers: the outcome of a delivery it took, and the errors it refuses one with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from noetl_cloud.errors import NoetlError, NotFound, Unavailable


class RateLimited(NoetlError):
    status = 429
    code = "rate_limited"
    retryable = True

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"this listener's rate limit is reached; retry after {retry_after} s")
        self.retry_after = retry_after


class ListenerPaused(Unavailable):
    code = "listener_paused"
    retry_after = 30


class ListenerInactive(NotFound):
    code = "listener_inactive"


class DispatchRejected(NoetlError):
    status = 422
    code = "dispatch_rejected"


@dataclass(frozen=True)
class Outcome:
    status: str  # accepted | duplicate | dead_lettered | spooled | dropped
    http_status: int
    execution_id: str | None = None
    reason: str | None = None

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.execution_id:
            out["execution_id"] = self.execution_id
        if self.reason:
            out["reason"] = self.reason
        return out


class ListenerMisconfigured(Unavailable):
    """The listener's configuration cannot verify anything (a secret of the wrong shape, a missing
    OIDC setting). The sender is not at fault and is told nothing about the configuration: a generic
    503 (it retries, and the operator's fix takes effect); the detail goes to the log."""

    code = "listener_unavailable"
    retry_after = 60

    def __init__(self) -> None:
        super().__init__("this listener cannot take deliveries now; retry later")
