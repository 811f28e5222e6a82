"""The ``downstreams`` of a Subscription (subscription-listener RFC §8.1, OQ2): what its playbook depends on.

Each entry names one dependency and says which failing tasks are failures *of it*::

    downstreams:
      - name: orders-api
        http_hosts: [orders.example.com, "orders.example.com:8443"]   # kind: http, by URL host[:port]
      - name: warehouse
        postgres_auth: [warehouse_rw]                                  # kind: postgres, by its auth: alias
      - name: ledger
        steps: [post_ledger]                                           # any tool, by the failing step's name

An execution dispatched by the subscription that ends failed with a *retryable* tool error (no
connection, a timeout, HTTP 5xx or 429) against a declared downstream counts toward that
downstream's circuit, keyed per subscription and downstream; while it is open the subscription's
new messages are spooled (:mod:`noetl_cloud.spool.downstreams`). Downstreams need a spool: with
``spool.mode: off`` nothing could hold the messages, so the document is refused.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, StringConstraints
from pydantic_core import InitErrorDetails

from noetl_cloud.spec.common import SpecModel, WalletAlias, rule

DOWNSTREAM_NAME = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
#: ``host`` or ``host:port``, lower case (a URL's host is case-insensitive; it is compared lower-cased).
HTTP_HOST = r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]{1,253})(:[0-9]{1,5})?$"
STEP_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$"
MAX_DOWNSTREAMS = 16

DownstreamName = Annotated[str, StringConstraints(pattern=DOWNSTREAM_NAME)]
HttpHost = Annotated[str, StringConstraints(pattern=HTTP_HOST, to_lower=True)]
StepName = Annotated[str, StringConstraints(pattern=STEP_NAME)]


class Downstream(SpecModel):
    """One declared dependency and the failures that are its own (at least one matcher)."""

    name: DownstreamName
    http_hosts: list[HttpHost] = Field(default_factory=list, max_length=64)
    postgres_auth: list[WalletAlias] = Field(default_factory=list, max_length=64)
    steps: list[StepName] = Field(default_factory=list, max_length=64)

    @property
    def matchers(self) -> list[tuple[str, str]]:
        """``(field, value)`` pairs this downstream claims."""
        return (
            [("http_hosts", h) for h in self.http_hosts]
            + [("postgres_auth", a) for a in self.postgres_auth]
            + [("steps", s) for s in self.steps]
        )


Downstreams = Annotated[list[Downstream], Field(max_length=MAX_DOWNSTREAMS)]


def downstream_problems(downstreams: list[Downstream], spool_mode: str) -> list[InitErrorDetails]:
    """The rules a list of downstreams must keep, as problems located under ``downstreams``."""
    problems: list[InitErrorDetails] = []
    if downstreams and spool_mode == "off":
        message = "downstreams need a spool to hold messages while one is down: set spool.mode and spool.backend"
        problems.append(rule(("downstreams",), "spool_required", message))
    names: dict[str, int] = {}
    claimed: dict[tuple[str, str], str] = {}
    for index, downstream in enumerate(downstreams):
        at = ("downstreams", index)
        if downstream.name in names:
            message = f"name is already declared at downstreams.{names[downstream.name]}"
            problems.append(rule((*at, "name"), "duplicate_downstream", message))
        else:
            names[downstream.name] = index
        if not downstream.matchers:
            message = "a downstream names at least one of http_hosts, postgres_auth or steps"
            problems.append(rule(at, "matcher_required", message))
        for field_name, value in downstream.matchers:
            owner = claimed.setdefault((field_name, value), downstream.name)
            if owner != downstream.name:
                message = f"{field_name} entry {_quoted(value)} is already claimed by downstream {owner}"
                problems.append(rule((*at, field_name), "ambiguous_downstream", message))
    return problems


def _quoted(value: str) -> str:
    # rule() messages are templates: keep braces out.
    return "'" + re.sub(r"[{}]", "", value) + "'"
