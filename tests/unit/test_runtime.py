"""The subscription runtime against the in-memory adapters of its own ports (source, control plane,
coordination store, spool): what is dispatched, what is acked, and when."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from noetl_cloud.kv.memory import InMemoryKeyValueStore
from noetl_cloud.local.process import wait_until
from noetl_cloud.runtime.governor import RateGovernor
from noetl_cloud.runtime.memory import InMemoryControl, InMemorySource
from noetl_cloud.runtime.message import prepare
from noetl_cloud.runtime.pipeline import Pipeline, PipelineConfig
from noetl_cloud.runtime.port import SourceClient, SourceMessage
from noetl_cloud.runtime.service import SubscriptionRuntime, check_document
from noetl_cloud.runtime.spooler import RuntimeSpooler
from noetl_cloud.spool.backends import FixedBackend
from noetl_cloud.spool.engine import SpoolEngine
from noetl_cloud.spool.events import EventJournal, MemoryEventSink
from noetl_cloud.spool.memory import InMemorySpool

PATH = "subscriptions/sensors"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def document(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "source": "pubsub",
        "mode": "pull",
        "subscription": "sensors-pull",
        "dispatch": {"playbook": "domain/ingest", "payload_from": "message.json"},
        "headers": {
            "directives": [
                {"header": "x-noetl-route", "controls": "dispatch.playbook", "allowed": ["domain/fraud"]},
                {"header": "x-idempotency-key", "controls": "idempotency_key"},
            ],
            "trace": {"propagate": "w3c"},
        },
    }
    for key, value in spec.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return {
        "apiVersion": "noetl.io/v1",
        "kind": "Subscription",
        "metadata": {"name": "sensors", "path": PATH},
        "spec": base,
    }


def spec_of(**spec: Any) -> dict[str, Any]:
    return check_document(PATH, document(**spec)).spec.model_dump(mode="json")


@contextmanager
def pipeline(control: InMemoryControl, source: InMemorySource, **kwargs: Any) -> Iterator[Pipeline]:
    spec = kwargs.pop("spec", spec_of())
    pipe = Pipeline(
        PipelineConfig.from_spec(PATH, spec, linger_s=0.01, concurrency=2),
        control,
        subscription_id=lambda: "77",
        **kwargs,
    )
    pipe.start()
    source.start(pipe.offer, max_in_flight=50)
    try:
        yield pipe
    finally:
        source.stop()
        pipe.halt()
        pipe.close()


def settled(source: InMemorySource, n: int) -> bool:
    return wait_until(lambda: len(source.acked) >= n and source.outstanding == 0, timeout=10, interval=0.01)


# -- message -> request --------------------------------------------------------------------------


def test_a_message_becomes_a_request_with_headers_directives_trace_and_the_subscription_as_parent() -> None:
    message = SourceMessage(
        "m1", b'{"t": 21}', (("X-Noetl-Route", "domain/fraud"), ("traceparent", TRACEPARENT), ("device", "d1"))
    )
    prepared = prepare(message, spec_of(), subscription_id="77", path=PATH)
    request = prepared.request
    assert request["path"] == "domain/fraud"
    assert request["trace"]["traceparent"] == TRACEPARENT
    assert request["parent_execution_id"] == "77"
    assert request["workload"]["payload"] == {"t": 21}
    assert request["workload"]["message"]["headers"]["x-noetl-route"] == "domain/fraud"
    assert request["workload"]["message"]["attributes"]["X-Noetl-Route"] == "domain/fraud"
    assert request["meta"]["directives"]["applied"][0]["effective_value"] == "domain/fraud"
    assert request["meta"]["principal"] == "pull:pubsub"
    assert "dedup" not in request


def test_a_route_outside_the_allowlist_is_ignored_and_recorded() -> None:
    message = SourceMessage("m1", b"{}", (("x-noetl-route", "admin/drop_tables"),))
    prepared = prepare(message, spec_of(), subscription_id=None, path=PATH)
    assert prepared.request["path"] == "domain/ingest"
    assert prepared.request["meta"]["directives"]["ignored"][0]["reason"] == "not_allowed"


def test_dedup_on_keys_by_the_idempotency_header_else_the_message_id() -> None:
    spec = spec_of(dedup={"enabled": True, "window_secs": 60})
    keyed = prepare(SourceMessage("m1", b"{}", (("x-idempotency-key", "K1"),)), spec, subscription_id="7", path=PATH)
    plain = prepare(SourceMessage("m2", b"{}"), spec, subscription_id="7", path=PATH)
    assert keyed.request["dedup"] == {"key": "K1", "window_secs": 60}
    assert plain.request["dedup"] == {"key": "m2", "window_secs": 60}


# -- the pipeline --------------------------------------------------------------------------------


def test_six_messages_two_redirected_become_six_executions_each_acked_after_dispatch() -> None:
    control, source = InMemoryControl(), InMemorySource()
    for n in range(6):
        attrs = {"traceparent": TRACEPARENT}
        if n < 2:
            attrs["x-noetl-route"] = "domain/fraud"
        source.publish(json.dumps({"n": n}).encode(), attrs)
    with pipeline(control, source):
        assert settled(source, 6)
    assert len(control.executions) == 6
    assert sorted(e["path"] for e in control.executions).count("domain/fraud") == 2
    assert all(e["trace"]["traceparent"] == TRACEPARENT for e in control.executions)
    assert source.nacked == []


def test_batch_dispatch_sends_chunks_of_at_most_batch_max() -> None:
    control, source = InMemoryControl(), InMemorySource()
    for n in range(12):
        source.publish(json.dumps({"n": n}).encode())
    spec = spec_of(dispatch={"batch_dispatch": True, "batch_max": 5})
    with pipeline(control, source, spec=spec):
        assert settled(source, 12)
    assert len(control.executions) == 12
    assert {mode for mode, _ in control.calls} == {"batch"}
    assert max(n for _, n in control.calls) <= 5


def test_single_dispatch_calls_execute_once_per_message() -> None:
    control, source = InMemoryControl(), InMemorySource()
    for n in range(4):
        source.publish(json.dumps({"n": n}).encode())
    with pipeline(control, source):
        assert settled(source, 4)
    assert control.calls == [("single", 1)] * 4


def test_a_duplicate_key_is_acked_and_collapses_into_the_first_execution() -> None:
    control, source = InMemoryControl(), InMemorySource()
    for key in ("K1", "K1", "K2"):
        source.publish(b"{}", {"x-idempotency-key": key})
    with pipeline(control, source, spec=spec_of(dedup={"enabled": True})):
        assert settled(source, 3)
    assert len(control.executions) == 2


def test_while_the_control_plane_is_down_nothing_is_acked_and_every_message_arrives_after() -> None:
    control, source = InMemoryControl(down=True), InMemorySource()
    for n in range(3):
        source.publish(json.dumps({"n": n}).encode())
    with pipeline(control, source) as pipe:
        assert wait_until(lambda: len(source.nacked) >= 3, timeout=10, interval=0.01)
        assert source.acked == [] and control.executions == []
        control.down = False
        assert settled(source, 3)
        assert pipe.held == 0
    assert sorted(e["workload"]["payload"]["n"] for e in control.executions) == [0, 1, 2]


def test_a_message_the_control_plane_refuses_and_one_that_is_not_json_are_nacked_never_acked() -> None:
    control, source = InMemoryControl(reject={"domain/fraud"}), InMemorySource()
    source.publish(b"{}", {"x-noetl-route": "domain/fraud"})
    source.publish(b"not json")
    with pipeline(control, source):
        assert wait_until(lambda: len(source.nacked) >= 2, timeout=10, interval=0.01)
    assert source.acked == [] and control.executions == []


def test_buffer_and_ack_spools_then_acks_while_the_control_plane_is_down() -> None:
    control, source = InMemoryControl(down=True), InMemorySource()
    kv, backend, sink = InMemoryKeyValueStore(), InMemorySpool(), MemoryEventSink()
    engine = SpoolEngine(kv, EventJournal(sink, kv), FixedBackend(backend), ids=iter(range(1, 10**6)).__next__)
    spool = {"mode": "buffer_and_ack", "backend": "gcs", "bucket": "b", "circuit": {"trip_after": 1}}
    spooler = RuntimeSpooler(engine, PATH, spool, "execute:http://control")
    for n in range(3):
        source.publish(json.dumps({"n": n}).encode())
    with pipeline(control, source, spec=spec_of(spool=spool), spooler=spooler):
        assert settled(source, 3)
    assert control.executions == []
    items = backend.list(PATH)
    assert len(items) == 3
    assert {backend.get(ref)[0].plan["request"]["path"] for ref in items} == {"domain/ingest"}
    assert "subscription.message.spooled" in {e.event_type for e in sink.events}


# -- the rate governor ---------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def wait(self, seconds: float) -> bool:
        self.t += seconds
        return False


def test_the_governor_admits_every_message_at_the_rate_and_reports_limiting_once() -> None:
    clock = FakeClock()
    starts: list[float] = []
    governor = RateGovernor(2.0, on_limited=starts.append, clock=clock)
    admitted = 0
    while admitted < 10:
        chunk = governor.chunk(5)
        assert chunk == 2  # never more than the burst
        assert governor.admit(chunk, clock.wait)
        admitted += chunk
    assert len(starts) == 1
    assert clock.t == pytest.approx(4.0)  # a burst of 2, then 8 more at 2/s


def test_a_stopping_runtime_interrupts_the_governors_wait() -> None:
    governor = RateGovernor(1.0)
    assert governor.admit(1, lambda _s: True)
    assert not governor.admit(1, lambda _s: True)


# -- lifecycle -----------------------------------------------------------------------------------


def runtime_for(control: InMemoryControl, source: SourceClient, **kwargs: Any) -> SubscriptionRuntime:
    control.documents[PATH] = kwargs.pop("doc", document())
    return SubscriptionRuntime(
        control, lambda _doc: source, path=PATH, poll_s=0.02, linger_s=0.005, shutdown_s=2.0, **kwargs
    )


@contextmanager
def running(runtime: SubscriptionRuntime) -> Iterator[threading.Thread]:
    thread = threading.Thread(target=runtime.run, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        runtime.stop()
        thread.join(10)


def test_lifecycle_pause_stops_pulling_resume_restarts_sigterm_leaves_the_subscription_active() -> None:
    control, source = InMemoryControl(), InMemorySource()
    runtime = runtime_for(control, source)
    with running(runtime) as thread:
        assert wait_until(lambda: runtime.phase == "pulling", timeout=5, interval=0.01)
        sid = runtime.subscription_id
        assert sid is not None
        source.publish(b'{"n": 1}')
        assert settled(source, 1)
        control.transition(sid, "pause")
        assert wait_until(lambda: runtime.phase == "paused", timeout=5, interval=0.01)
        source.publish(b'{"n": 2}')
        assert not wait_until(lambda: len(control.executions) > 1, timeout=0.3, interval=0.01)
        control.transition(sid, "resume")
        assert settled(source, 2)
        runtime.stop()
        thread.join(10)
        assert not thread.is_alive()
    assert [event for _, event in control.trail] == [
        "subscription.registered",
        "subscription.activated",
        "subscription.paused",
        "subscription.resumed",
    ]
    assert control.state(sid)["state"] == "active"


def test_sigterm_to_one_of_two_instances_finishes_its_own_messages_and_the_other_keeps_pulling() -> None:
    control, source = InMemoryControl(), InMemorySource()
    first = runtime_for(control, source.consumer(), instance="a")
    second = runtime_for(control, source.consumer(), instance="b")
    with running(first) as first_thread, running(second):
        assert wait_until(lambda: first.phase == second.phase == "pulling", timeout=5, interval=0.01)
        sid = first.subscription_id
        assert sid is not None and second.subscription_id == sid  # one registration, one dedup window
        for n in range(20):
            source.publish(json.dumps({"n": n}).encode())
        assert settled(source, 20)
        first.stop()
        first_thread.join(10)
        assert not first_thread.is_alive() and first.phase == "stopped"
        for n in range(20, 40):
            source.publish(json.dumps({"n": n}).encode())
        assert settled(source, 40)  # the survivor took every later message
        assert second.phase == "pulling"
        assert control.state(sid)["state"] == "active"
        restarted = runtime_for(control, source.consumer(), instance="a")
        with running(restarted):
            assert wait_until(lambda: restarted.phase == "pulling", timeout=5, interval=0.01)
            assert restarted.subscription_id == sid
    assert len(control.executions) == 40
    assert "subscription.draining" not in [event for _, event in control.trail]


def test_the_sole_local_instance_ends_the_subscription_when_stopped() -> None:
    control, source = InMemoryControl(), InMemorySource()
    runtime = runtime_for(control, source, end_on_stop=True)
    with running(runtime):
        assert wait_until(lambda: runtime.phase == "pulling", timeout=5, interval=0.01)
    assert [event for _, event in control.trail][-2:] == ["subscription.draining", "subscription.deactivated"]


def test_a_restarted_runtime_continues_the_live_subscription() -> None:
    control, source = InMemoryControl(), InMemorySource()
    control.documents[PATH] = document()
    sid = control.register(PATH)["subscription_id"]
    control.transition(sid, "activate")
    runtime = runtime_for(control, source)
    with running(runtime):
        assert wait_until(lambda: runtime.phase == "pulling", timeout=5, interval=0.01)
        assert runtime.subscription_id == sid


def test_a_drain_from_the_control_plane_finishes_and_deactivates() -> None:
    control, source = InMemoryControl(), InMemorySource()
    runtime = runtime_for(control, source)
    with running(runtime) as thread:
        assert wait_until(lambda: runtime.phase == "pulling", timeout=5, interval=0.01)
        assert runtime.subscription_id is not None
        control.transition(runtime.subscription_id, "drain")
        thread.join(10)
        assert not thread.is_alive()
    assert control.trail[-1][1] == "subscription.deactivated"


def test_a_second_instance_of_a_singleton_waits_for_the_lease() -> None:
    control, kv = InMemoryControl(), InMemoryKeyValueStore()
    doc = document(runtime={"singleton": True})
    first = runtime_for(control, InMemorySource(), doc=doc, kv=kv, instance="a", lease_ttl_s=5)
    second = runtime_for(control, InMemorySource(), doc=doc, kv=kv, instance="b", lease_ttl_s=5)
    with running(first):
        assert wait_until(lambda: first.phase == "pulling", timeout=5, interval=0.01)
        with running(second):
            assert wait_until(lambda: second.phase == "waiting_for_lease", timeout=5, interval=0.01)
            assert not second.status()["pulling"]
            first.stop()
            assert wait_until(lambda: first.phase == "stopped", timeout=5, interval=0.01)


def test_rate_limiting_writes_one_event_and_every_message_still_runs() -> None:
    control, source = InMemoryControl(), InMemorySource()
    runtime = runtime_for(control, source, doc=document(limits={"max_dispatch_per_sec": 20}))
    for n in range(30):
        source.publish(json.dumps({"n": n}).encode())
    with running(runtime):
        assert settled(source, 30)
    assert len(control.executions) == 30
    assert [e.event_type for _, e in control.events] == ["subscription.rate_limited"]


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        ({"mode": "push"}, "invalid_subscription"),
        ({"activation": "scheduled", "cadence": "*/5 * * * *"}, "not_continuous"),
    ],
)
def test_only_continuous_pull_subscriptions_are_held(spec: dict[str, Any], code: str) -> None:
    from noetl_cloud.errors import NoetlError

    with pytest.raises(NoetlError) as caught:
        check_document(PATH, document(**spec))
    assert caught.value.code == code


def test_with_tracing_each_chunk_is_a_span_its_executions_continue(tmp_path: Any) -> None:
    from noetl_cloud import telemetry
    from noetl_cloud.settings import Settings
    from noetl_cloud.telemetry.localexport import read_spans

    telemetry.configure(Settings(tracing="local", telemetry_dir=str(tmp_path)), "subscription_runtime")
    try:
        control, source = InMemoryControl(), InMemorySource()
        for n in range(3):
            source.publish(json.dumps({"n": n}).encode(), {"traceparent": TRACEPARENT})
        with pipeline(control, source):
            assert settled(source, 3)
    finally:
        telemetry.shutdown()  # flushes the spans
    spans = [s for s in read_spans(tmp_path) if s["name"] == "runtime.dispatch"]
    assert spans and all(s["parent_span_id"] is None for s in spans)  # each chunk starts a trace
    assert all(s["attributes"]["noetl.upstream.traceparent"] == TRACEPARENT for s in spans)
    own = {f"00-{s['trace_id']}-{s['span_id']}-01" for s in spans}
    assert len(control.executions) == 3
    assert {e["trace"]["traceparent"] for e in control.executions} <= own  # not the sender's
