"""Scheduled subscriptions (Mode A, RFC §4.5): ``activation: scheduled`` + ``cadence`` as jobs.

From the catalog's Subscription documents and their registrations, the jobs the execute role's
subscription tick runs (:mod:`noetl_cloud.control.scheduled`, called by the maintenance schedule's
``subscription-tick`` job: Cloud Scheduler in Terraform, the local stack's scheduler locally). Each
job runs the subscription tool's bounded poll (``operation: poll``,
:mod:`noetl_cloud.tools.subscription`) of that subscription on its cadence and dispatches every
message to ``dispatch.playbook``.

The lifecycle applies to the job as it does to a runtime: a registration that is ``active`` gives
an enabled job, ``paused`` a paused one (the source keeps the backlog); ``registered`` (never
activated), ``draining`` and ``deactivated`` give none (a bounded drain holds nothing between
runs, so draining has nothing to finish). A scheduled subscription whose ``cadence`` is not a
unix-cron expression (five fields, or six with a leading seconds field) is listed in ``skipped`` with
the reason. The cadence is evaluated in UTC (:mod:`noetl_cloud.spec.cadence`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from noetl_cloud.spec.cadence import cadence_problem, latest_due, next_due
from noetl_cloud.spec.subscription import PULL_ADDRESS, SubscriptionDoc

__all__ = ["Schedule", "SubscriptionJob", "cadence_problem", "job_for", "latest_due", "next_due", "scheduled_jobs"]

#: The fields a poll task names its source with, beyond ``PULL_ADDRESS``'s one.
_SECOND_ADDRESS = {"nats": "consumer", "kafka": "group"}


@dataclass(frozen=True)
class SubscriptionJob:
    """One scheduled bounded drain: what to poll, how often, and what each message runs."""

    name: str  # subscription-<path>, the scheduler job's name
    path: str
    subscription_id: str
    cadence: str
    paused: bool
    task: dict[str, Any]  # the subscription tool's poll task
    playbook: str
    since: str | None = None  # when the registration entered its state (ISO 8601): no slot before it runs
    spec: dict[str, Any] = field(default_factory=dict, repr=False)  # the Subscription's spec (JSON form)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "spec"}


@dataclass(frozen=True)
class Schedule:
    jobs: list[SubscriptionJob] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # {path, reason}


class _Entry(Protocol):
    @property
    def path(self) -> str: ...

    @property
    def document(self) -> dict[str, Any]: ...


class _Catalog(Protocol):
    def list(self, kind: str | None = None) -> Iterable[_Entry]: ...


class _Registrations(Protocol):
    def live_for_path(self, path: str) -> dict[str, Any] | None: ...


def job_name(path: str) -> str:
    """``subscription-<path>`` with every character outside ``[a-z0-9-]`` as ``-`` (Cloud Scheduler's
    job ids take letters, digits, ``-`` and ``_``; 500 at most)."""
    return "subscription-" + re.sub(r"[^a-z0-9-]", "-", path.lower())[:480]


def poll_task(doc: SubscriptionDoc) -> dict[str, Any]:
    """The subscription tool's poll of this subscription (acked once every message decoded)."""
    spec = doc.spec
    address = PULL_ADDRESS[spec.source]
    task: dict[str, Any] = {
        "kind": "subscription",
        "operation": "poll",
        "source": spec.source,
        address: getattr(spec, address),
        "batch": spec.runtime.batch,
        "timeout_ms": spec.runtime.timeout_ms,
        "ack": "on_success",
        "payload_from": spec.dispatch.payload_from,
        "headers": spec.headers.model_dump(mode="json"),
    }
    second = _SECOND_ADDRESS.get(spec.source)
    if second is not None:
        task[second] = getattr(spec, second) or doc.metadata.name
    if spec.auth:
        task["auth"] = spec.auth
    return task


def job_for(doc: SubscriptionDoc, registration: Mapping[str, Any] | None) -> SubscriptionJob | None:
    """The job of one scheduled pull subscription in its registration's state, or ``None``."""
    spec = doc.spec
    if spec.mode != "pull" or spec.activation != "scheduled" or cadence_problem(spec.cadence) is not None:
        return None
    if registration is None or registration.get("state") not in ("active", "paused"):
        return None
    assert spec.cadence is not None
    return SubscriptionJob(
        name=job_name(doc.path),
        path=doc.path,
        subscription_id=str(registration["subscription_id"]),
        cadence=spec.cadence,
        paused=registration["state"] == "paused",
        task=poll_task(doc),
        playbook=spec.dispatch.playbook,
        since=str(registration.get("updated_at") or "") or None,
        spec=spec.model_dump(mode="json"),
    )


def scheduled_jobs(catalog: _Catalog, registrations: _Registrations) -> Schedule:
    """Every scheduled pull subscription of the catalog (its latest version) as a job."""
    schedule = Schedule()
    for entry in catalog.list("Subscription"):
        try:
            doc = SubscriptionDoc.model_validate(entry.document)
        except ValidationError:
            schedule.skipped.append({"path": entry.path, "reason": "not a valid Subscription"})
            continue
        spec = doc.spec
        if spec.mode != "pull" or spec.activation != "scheduled":
            continue
        problem = cadence_problem(spec.cadence)
        if problem is not None:
            schedule.skipped.append({"path": doc.path, "reason": problem})
            continue
        registration = registrations.live_for_path(doc.path)
        job = job_for(doc, registration)
        if job is None:
            state = registration["state"] if registration else "not registered"
            schedule.skipped.append({"path": doc.path, "reason": f"subscription is {state}"})
            continue
        schedule.jobs.append(job)
    return schedule
