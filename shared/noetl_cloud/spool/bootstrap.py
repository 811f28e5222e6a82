"""Wiring the spool from settings: for the ingress, the spool drainer and the operator command.

Nothing here connects at import or construction: backends, the coordination store and the API
client open their connections on first use.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from noetl_cloud.errors import NoetlError, Unavailable
from noetl_cloud.ids import SnowflakeGenerator
from noetl_cloud.kv.port import KeyValueStore
from noetl_cloud.settings import Settings
from noetl_cloud.spool.backends import Backends, SettingsBackends
from noetl_cloud.spool.drain import Drainer
from noetl_cloud.spool.drain_report import DrainReport
from noetl_cloud.spool.engine import SpoolEngine
from noetl_cloud.spool.events import ApiEventSink, EventJournal
from noetl_cloud.spool.policy import source_kind
from noetl_cloud.spool.replayer import ApiReplayer
from noetl_cloud.spool.target import SpoolTarget
from noetl_cloud.web.client import ApiClient, static_token
from noetl_cloud.web.id_tokens import google_id_token_source

log = logging.getLogger(__name__)


def kv_from_settings(settings: Settings) -> KeyValueStore:
    """Firestore in Google Cloud or next to its emulator; memory otherwise (one process only)."""
    if settings.environment == "gcp" or settings.firestore_emulator_host:
        from noetl_cloud.kv.firestore import FirestoreKeyValueStore

        return FirestoreKeyValueStore.from_settings(settings)
    from noetl_cloud.kv.memory import InMemoryKeyValueStore

    return InMemoryKeyValueStore()


def api_client(
    settings: Settings, *, timeout_s: float = 10.0, retries: int = 1, base_url: str | None = None
) -> ApiClient:
    url = base_url or settings.api_url
    if url is None:
        settings.require("api_url")
    assert url is not None
    if settings.internal_api_token is not None:
        token = static_token(settings.internal_api_token.get_secret_value())
    else:
        audience = url if base_url is not None else (settings.internal_api_audience or url)
        token = google_id_token_source(audience)
    return ApiClient(url, token_source=token, timeout_s=timeout_s, retries=retries)


def downstream_of(settings: Settings) -> str:
    """The circuit key of the control plane's execute API (every role must name it alike)."""
    settings.require("api_url")
    return f"execute:{str(settings.api_url).rstrip('/')}"


class DrainTrigger:
    """Asks the drainer to drain a subscription now (``POST /drain``): when a circuit closes, and when a
    message is spooled while the circuit's probe is due (the drainer probes with the oldest item).
    Best effort, in a thread: the drainer's schedule is the net."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: ApiClient | None = None

    def __call__(self, target: SpoolTarget) -> None:
        if not self.settings.spool_drainer_url:
            return
        if self._client is None:
            self._client = api_client(self.settings, timeout_s=2.0, retries=0, base_url=self.settings.spool_drainer_url)
        client = self._client

        def call() -> None:
            try:
                client.post("/drain", json={"subscription": target.subscription})
            except NoetlError:  # the schedule drains anyway
                log.info("drainer not reached (asked to drain now); its schedule drains anyway")

        threading.Thread(target=call, daemon=True).start()


def build_engine(settings: Settings, api: Any, kv: KeyValueStore, *, backends: Backends | None = None) -> SpoolEngine:
    ids = SnowflakeGenerator(settings.node_id)
    trigger = DrainTrigger(settings)
    return SpoolEngine(
        kv,
        EventJournal(ApiEventSink(api), kv),
        backends or SettingsBackends(settings),
        ids=ids.next_id,
        on_circuit_closed=trigger,
        on_probe_due=trigger,
    )


def ingress_spooler(settings: Settings, api: Any, kv: KeyValueStore) -> Any:
    from noetl_cloud.spool.ingress import IngressSpooler

    return IngressSpooler(build_engine(settings, api, kv), downstream_of(settings))


class CatalogTargets:
    """Spool targets from the control plane's catalog (the subscription's current ``spool`` block)."""

    def __init__(self, api: Any, downstream: str) -> None:
        self.api = api
        self.downstream = downstream

    def target(self, subscription: str) -> SpoolTarget | None:
        """``None`` when the catalog has no such subscription; ``Unavailable`` when it cannot be asked."""
        try:
            response = self.api.get(f"/api/catalog/{quote(subscription, safe='/')}")
        except NoetlError as exc:
            raise Unavailable("the control plane did not answer", code="control_plane_unavailable") from exc
        if response.status == 404:
            return None
        if response.status >= 500:
            raise Unavailable(f"the control plane answered {response.status}", code="control_plane_unavailable")
        response.raise_for_error()
        document = response.json.get("document") or {}
        if document.get("kind") != "Subscription":
            return None
        spec = document.get("spec") or {}
        kind = source_kind(str(spec.get("source")), "push" if spec.get("mode") == "push" else "pull")
        return SpoolTarget.from_spec(
            subscription,
            spec.get("spool"),
            source_kind=kind,
            downstream=self.downstream,
            downstreams=spec.get("downstreams"),
        )

    def spooling(self) -> list[str]:
        """The registered subscriptions whose ``spool.mode`` is not ``off``."""
        try:
            response = self.api.get("/api/subscriptions")
        except NoetlError as exc:
            raise Unavailable("the control plane did not answer", code="control_plane_unavailable") from exc
        response.raise_for_error()
        found = []
        for view in response.json.get("items", []):
            if view.get("state") == "deactivated":
                continue
            target = self.target(str(view["path"]))
            if target is not None and target.enabled:
                found.append(target.subscription)
        return found


class DrainService:
    """What the drainer role and ``noetl-cloud spool drain`` run: discover, resolve, drain."""

    def __init__(self, drainer: Drainer, targets: CatalogTargets) -> None:
        self.drainer = drainer
        self.targets = targets

    def discover(self) -> list[str]:
        found: set[str] = set()
        default = self.drainer.engine.backends.default()
        if default is not None:
            found.update(default[0].subscriptions())
        found.update(self.targets.spooling())
        return sorted(found)

    def run(self, subscriptions: Iterable[str] | None = None, *, resume: bool = False) -> list[dict[str, Any]]:
        reports = []
        for subscription in subscriptions if subscriptions is not None else self.discover():
            target = self.targets.target(subscription)
            if target is None:
                reports.append({"subscription": subscription, "state": "unknown_subscription"})
                continue
            report: DrainReport = self.drainer.drain(target, resume=resume)
            reports.append(report.to_dict())
        return reports


def drain_service(settings: Settings, *, kv: KeyValueStore | None = None) -> DrainService:
    api = api_client(settings, timeout_s=30.0, retries=2)
    engine = build_engine(settings, api, kv or kv_from_settings(settings))
    engine.on_circuit_closed = None  # the drainer drains right after its own probe closes a circuit
    engine.on_probe_due = None
    drainer = Drainer(
        engine,
        ApiReplayer(api),
        lease_ttl_s=settings.spool_lease_ttl_s,
        budget_s=settings.spool_drain_budget_s,
        probe_wait_s=settings.spool_probe_wait_s,
    )
    return DrainService(drainer, CatalogTargets(api, downstream_of(settings)))
