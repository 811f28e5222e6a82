"""``kind: subscription``: the bounded drain of a pull subscription (Mode A, RFC §4.1, §4.5).

``operation: poll`` fetches at most ``batch`` messages, waiting at most ``timeout_ms``, and returns
them normalized the way the runtime (Mode B) gives them to a playbook: ``{id, payload, headers,
attributes, publish_time, ordering_key, directives}`` per message. It never holds a worker slot
longer than the timeout. ``ack`` says when the source forgets them:

* ``on_success`` (default): after every message was decoded; a poll with an undecodable message
  acks none (the batch comes back on the next drain, or to the source's dead-letter policy);
* ``auto``: at once, whatever the decoding said;
* ``manual``: never here; the result carries ``ack_ids`` for a later ``operation: ack`` task
  (within the subscription's ack deadline).

Task fields: ``source`` (``pubsub``; ``nats`` with the ``nats`` extra; ``kafka`` with the ``kafka``
extra), ``subscription`` (a full ``projects/<p>/subscriptions/<s>`` or a short name with
``project``), ``stream`` / ``consumer`` (NATS), ``topic`` / ``group`` (Kafka: the consumer group
whose committed offsets the drain moves), ``batch`` (100), ``timeout_ms`` (10000: real Pub/Sub
needs seconds for a synchronous pull), ``ack``, ``payload_from`` (``message.json``), ``headers``
(a directive allowlist, as in a Subscription), ``ack_ids`` (``operation: ack``). The Pub/Sub emulator is found through
``PUBSUB_EMULATOR_HOST``, a NATS server through ``url`` or the process's ``NOETL_NATS_URL``, Kafka
brokers through ``bootstrap_servers`` or ``NOETL_KAFKA_BOOTSTRAP_SERVERS``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from noetl_cloud.engine.outcome import Outcome, ToolCall
from noetl_cloud.errors import NoetlError

MAX_BATCH = 1000
#: Each source and the task fields that address it.
SOURCES = {"pubsub": ("subscription",), "nats": ("stream", "consumer"), "kafka": ("topic", "group")}
MAX_TIMEOUT_MS = 600_000


def _source_key(config: Mapping[str, Any]) -> tuple[str, ...]:
    fields = ("source", "subscription", "project", "stream", "consumer", "url", "topic", "group", "bootstrap_servers")
    return tuple(str(config.get(k) or "") for k in fields)


def default_source(config: Mapping[str, Any]) -> Any:
    """The source client a task names (imported on first use: the clients are heavy)."""
    source = config.get("source") or "pubsub"
    if source == "pubsub":
        from noetl_cloud.runtime.pubsub import PubSubSource

        project = config.get("project") or os.environ.get("GOOGLE_CLOUD_PROJECT")
        return PubSubSource(
            str(config["subscription"]),
            project_id=str(project) if project else None,
            emulator_host=os.environ.get("PUBSUB_EMULATOR_HOST"),
        )
    if source == "nats":
        from noetl_cloud.runtime.nats import NatsSource

        url = config.get("url") or os.environ.get("NOETL_NATS_URL") or "nats://127.0.0.1:4222"
        return NatsSource(str(url), stream=str(config["stream"]), consumer=str(config["consumer"]))
    if source == "kafka":
        from noetl_cloud.runtime.kafka import KafkaSource

        servers = config.get("bootstrap_servers") or os.environ.get("NOETL_KAFKA_BOOTSTRAP_SERVERS") or "127.0.0.1:9092"
        return KafkaSource(str(servers), topic=str(config["topic"]), group=str(config["group"]))
    raise ValueError(f"unknown source {source!r} ({', '.join(SOURCES)})")


class SubscriptionTool:
    """Bounded pulls; one source client per (source, subscription), opened on first use."""

    kind = "subscription"
    raw_fields: tuple[str, ...] = ()

    def __init__(self, source_for: Callable[[Mapping[str, Any]], Any] = default_source) -> None:
        self._source_for = source_for
        self._sources: dict[tuple[str, ...], Any] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the source clients this tool opened (a NATS client would otherwise keep reconnecting)."""
        with self._lock:
            sources, self._sources = list(self._sources.values()), {}
        for source in sources:
            source.close()

    def source(self, config: Mapping[str, Any]) -> Any:
        """The source client of the subscription a task names (one per source and address, reused)."""
        return self._source(config)

    def _source(self, config: Mapping[str, Any]) -> Any:
        key = _source_key(config)
        with self._lock:
            if key not in self._sources:
                self._sources[key] = self._source_for(config)
            return self._sources[key]

    def run(self, call: ToolCall) -> Outcome:
        config = call.config
        operation = config.get("operation", "poll")
        source = config.get("source") or "pubsub"
        if source not in SOURCES:
            return Outcome.fail("bad_task", f"unknown source {source!r} ({', '.join(SOURCES)})")
        address = SOURCES[source]
        missing = [name for name in address if not config.get(name)]
        if missing:
            return Outcome.fail("bad_task", f"a {source} subscription task needs {', '.join(missing)}")
        try:
            if operation == "poll":
                return self._poll(call)
            if operation == "ack":
                ids = config.get("ack_ids")
                if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                    return Outcome.fail("bad_task", "operation ack needs ack_ids, a list of strings")
                self._source(config).acknowledge(ids)
                return Outcome.ok({"acked": len(ids)})
        except NoetlError as exc:
            return Outcome.fail("source_unavailable" if exc.retryable else exc.code, exc.message)
        return Outcome.fail("bad_task", f"unknown operation {operation!r} (poll, ack)")

    def _poll(self, call: ToolCall) -> Outcome:
        from noetl_cloud.ingress.push import BadMessage
        from noetl_cloud.runtime.message import prepare

        config = call.config
        ack = config.get("ack", "on_success")
        if ack not in ("on_success", "auto", "manual"):
            return Outcome.fail("bad_task", f"ack must be on_success, auto or manual, not {ack!r}")
        batch = _bounded(config.get("batch", 100), 1, MAX_BATCH)
        timeout_ms = _bounded(config.get("timeout_ms", 10_000), 1, MAX_TIMEOUT_MS)
        if batch is None or timeout_ms is None:
            return Outcome.fail("bad_task", f"batch is 1..{MAX_BATCH} and timeout_ms 1..{MAX_TIMEOUT_MS}")
        source = self._source(config)
        received = source.fetch(batch, timeout_ms / 1000.0)
        spec = {
            "source": config.get("source") or "pubsub",
            "dispatch": {"playbook": "-", "payload_from": config.get("payload_from") or "message.json"},
            "headers": config.get("headers") or {},
        }
        messages: list[dict[str, Any]] = []
        failed: list[dict[str, str]] = []
        for delivery in received:
            try:
                prepared = prepare(delivery.message, spec, subscription_id=None, path=call.step)
            except BadMessage as exc:
                failed.append({"id": delivery.message.message_id, "error": exc.code})
                continue
            workload = prepared.request["workload"]
            messages.append(
                {
                    "id": delivery.message.message_id,
                    "payload": workload["payload"],
                    "headers": workload["message"]["headers"],
                    "attributes": workload["message"]["attributes"],
                    "publish_time": workload["message"]["publish_time"],
                    "ordering_key": workload["message"]["ordering_key"],
                    "directives": prepared.plan.to_dict(),
                }
            )
        ack_ids = [d.ack_id for d in received if d.ack_id is not None]
        acked = (ack == "auto" or (ack == "on_success" and not failed)) and bool(ack_ids)
        if acked:
            source.acknowledge(ack_ids)
        elif ack == "on_success" and ack_ids:
            source.release(ack_ids)
        result: dict[str, Any] = {"messages": messages, "count": len(messages), "acked": acked, "failed": failed}
        if ack == "manual":
            result["ack_ids"] = ack_ids
        if failed and ack == "on_success":
            return Outcome("error", result, {"kind": "undecodable", "message": f"{len(failed)} message(s) undecodable"})
        return Outcome.ok(result)


def _bounded(value: Any, low: int, high: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        return None
    return int(value)
