from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from noetl_cloud.errors import ValidationFailed
from noetl_cloud.spec import SubscriptionDoc, parse_document, validate_document
from noetl_cloud.spec.common import parse_byte_size
from tests.unit.spec_support import problem_at, rejection

SPECS = Path(__file__).resolve().parent.parent / "data" / "specs"
RFC_EXAMPLES = sorted(path.name for path in SPECS.glob("subscription_*.yaml"))
DELETE = object()


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((SPECS / name).read_text())
    assert isinstance(data, dict)
    return data


def edited(name: str, *edits: tuple[str, Any]) -> dict[str, Any]:
    """The example ``name`` with each dotted path set to a value (or deleted with DELETE)."""
    doc = copy.deepcopy(load(name))
    for path, value in edits:
        *parents, last = [int(part) if part.isdigit() else part for part in path.split(".")]
        node: Any = doc
        for part in parents:
            node = node[part]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return doc


def parse(doc: dict[str, Any]) -> SubscriptionDoc:
    parsed = parse_document(yaml.safe_dump(doc, sort_keys=False))
    assert isinstance(parsed, SubscriptionDoc)
    return parsed


# -- the RFC's examples ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", RFC_EXAMPLES)
def test_rfc_example_documents_parse(name: str) -> None:
    doc = parse_document((SPECS / name).read_text())
    assert isinstance(doc, SubscriptionDoc) and doc.kind == "Subscription"
    assert doc.path == f"subscriptions/{doc.metadata.name}"


def test_iot_example_keeps_every_knob() -> None:
    spec = parse(load("subscription_iot_sensor_stream.yaml")).spec
    assert (spec.source, spec.mode, spec.activation, spec.auth) == ("pubsub", "pull", "continuous", "pubsub_iot")
    assert (spec.runtime.target, spec.runtime.pool, spec.runtime.batch, spec.runtime.max_in_flight) == (
        "dedicated-pool",
        "iot",
        500,
        1000,
    )
    assert spec.spool.mode == "hybrid" and spec.spool.ordering == "per_key" and spec.spool.ordering_key == "device_id"
    assert spec.spool.circuit.trip_after == 5 and spec.spool.circuit.probe_after_ms == 30_000
    assert spec.spool.retention.max_bytes == 50 * 2**30 and spec.spool.retention.on_full == "stop_acking"
    assert spec.spool.drain.rate_per_sec == 200 and spec.spool.drain.max_replay_attempts == 10
    assert spec.headers.trace.propagate == "w3c" and spec.headers.trace.baggage_allowlist == ["tenant"]
    assert spec.scaling == {"keda": {"trigger": "pubsub", "min": 1, "max": 20, "lag_threshold": 500}}


def test_optional_sections_default_to_off() -> None:
    spec = parse(load("subscription_orders_drain.yaml")).spec
    assert spec.spool.mode == "off" and spec.spool.backend is None and spec.spool.ordering == "global"
    assert spec.headers.directives == [] and spec.headers.trace.propagate == "none" and spec.headers.normalize
    assert spec.dedup.enabled is False and spec.dedup.window_secs == 3600
    assert spec.dispatch.batch_dispatch is False and spec.dispatch.batch_max == 100
    assert spec.limits.max_dispatch_per_sec is None and spec.ingress is None


def test_unquoted_spool_mode_off_means_off() -> None:
    text = (SPECS / "subscription_stripe_webhook.yaml").read_text().replace("mode: buffer_and_ack", "mode: off")
    doc = parse_document(text)
    assert isinstance(doc, SubscriptionDoc) and doc.spec.spool.mode == "off"
    assert "spec.spool.mode" in {d["field"] for d in rejection(edited(STRIPE, ("spec.spool.mode", True)))}


def test_payload_from_defaults_to_message_json() -> None:
    doc = edited("subscription_orders_drain.yaml", ("spec.dispatch.payload_from", DELETE))
    assert parse(doc).spec.dispatch.payload_from == "message.json"


def test_pull_activation_defaults_to_continuous() -> None:
    doc = edited("subscription_edge_clickstream.yaml", ("spec.activation", DELETE))
    assert parse(doc).spec.activation == "continuous"


def test_push_activation_is_ignored() -> None:
    doc = edited("subscription_stripe_webhook.yaml", ("spec.activation", "scheduled"))
    assert parse(doc).spec.activation is None


def test_header_names_are_lowercased_on_load() -> None:
    doc = edited("subscription_events_redirect.yaml", ("spec.headers.directives.0.header", "X-NoETL-Route"))
    parsed = parse(doc)
    assert parsed.spec.headers.directives[0].header == "x-noetl-route"
    stripe = parse(load("subscription_stripe_webhook.yaml"))
    assert stripe.spec.ingress is not None and stripe.spec.ingress.verify is not None
    assert stripe.spec.ingress.verify.header == "stripe-signature"


def test_documents_are_immutable() -> None:
    doc = parse(load("subscription_stripe_webhook.yaml"))
    with pytest.raises(pydantic.ValidationError):
        doc.spec.dispatch.playbook = "domain/other"  # type: ignore[misc]


def test_validate_document_accepts_a_decoded_mapping() -> None:
    assert isinstance(validate_document(load("subscription_billing_events.yaml")), SubscriptionDoc)


# -- helpers for the catalog service ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,listener",
    [
        ("subscription_stripe_webhook.yaml", "stripe"),
        ("subscription_billing_events.yaml", "billing-events"),
        ("subscription_iot_sensor_stream.yaml", None),
    ],
)
def test_listener_is_the_segment_after_ingress(name: str, listener: str | None) -> None:
    assert parse(load(name)).listener() == listener


def test_route_targets_are_the_default_then_allowlisted_playbooks_without_repeats() -> None:
    doc = parse(load("subscription_events_redirect.yaml"))
    assert doc.route_targets() == ["domain/handle_event", "domain/handle_billing", "domain/handle_fraud"]


def test_pool_targets_cover_default_pool_allowlists_and_priority_maps() -> None:
    doc = parse(load("subscription_directives.yaml"))
    assert doc.pool_targets() == ["shared", "iot", "priority"]
    # without a default pool, only the directive targets remain
    no_default = edited("subscription_directives.yaml", ("spec.dispatch.execution_pool", DELETE))
    no_default["spec"]["headers"]["directives"][2]["map"] = {"high": "urgent", "low": "bulk"}
    assert parse(no_default).pool_targets() == ["iot", "priority", "shared", "urgent", "bulk"]


def test_targets_without_directives_are_the_defaults() -> None:
    doc = parse(load("subscription_stripe_webhook.yaml"))
    assert doc.route_targets() == ["domain/handle_stripe_event"] and doc.pool_targets() == []


# -- rules -------------------------------------------------------------------------------------------------

STRIPE = "subscription_stripe_webhook.yaml"
BILLING = "subscription_billing_events.yaml"
IOT = "subscription_iot_sensor_stream.yaml"
REDIRECT = "subscription_events_redirect.yaml"
DIRECTIVES = "subscription_directives.yaml"


@pytest.mark.parametrize(
    "name,edits,field",
    [
        # 1. push ingress always verifies
        pytest.param(BILLING, [("spec.ingress.verify", DELETE)], "spec.ingress.verify", id="push-without-verify"),
        pytest.param(STRIPE, [("spec.ingress", DELETE)], "spec.ingress.verify", id="push-without-ingress"),
        pytest.param(STRIPE, [("spec.ingress.verify", {"type": "none"})], "spec.ingress.verify.type", id="verify-none"),
        # 2. push needs a route
        pytest.param(
            STRIPE, [("spec.ingress.gateway_path", DELETE)], "spec.ingress.gateway_path", id="push-without-path"
        ),
        pytest.param(STRIPE, [("spec.ingress", DELETE)], "spec.ingress.gateway_path", id="push-without-ingress-path"),
        pytest.param(STRIPE, [("spec.ingress.gateway_path", "/hooks/stripe")], "spec.ingress.gateway_path", id="path"),
        pytest.param(
            STRIPE, [("spec.ingress.gateway_path", "/ingress/Stripe")], "spec.ingress.gateway_path", id="case"
        ),
        pytest.param(STRIPE, [("spec.ingress.gateway_path", "/ingress/a/b")], "spec.ingress.gateway_path", id="nested"),
        pytest.param(STRIPE, [("spec.ingress.gateway_path", "/ingress/")], "spec.ingress.gateway_path", id="no-name"),
        # 3. routing directives need a value allowlist
        pytest.param(
            REDIRECT,
            [("spec.headers.directives.0.allowed", DELETE)],
            "spec.headers.directives.0.allowed",
            id="playbook-directive-without-allowed",
        ),
        pytest.param(
            REDIRECT,
            [("spec.headers.directives.1.allowed", [])],
            "spec.headers.directives.1.allowed",
            id="pool-directive-with-empty-allowed",
        ),
        pytest.param(
            REDIRECT,
            [("spec.headers.directives.1.allowed", ["shared", "Not A Pool"])],
            "spec.headers.directives.1.allowed.1",
            id="pool-directive-allows-invalid-pool",
        ),
        pytest.param(
            REDIRECT,
            [("spec.headers.directives.0.allowed", ["domain/../etc"])],
            "spec.headers.directives.0.allowed.0",
            id="playbook-directive-allows-invalid-path",
        ),
        # 4. priority needs a map
        pytest.param(
            DIRECTIVES,
            [("spec.headers.directives.2.map", DELETE)],
            "spec.headers.directives.2.map",
            id="priority-without-map",
        ),
        pytest.param(
            DIRECTIVES,
            [("spec.headers.directives.2.map", {})],
            "spec.headers.directives.2.map",
            id="priority-empty-map",
        ),
        pytest.param(
            DIRECTIVES,
            [("spec.headers.directives.2.map", {"high": "Bad Pool"})],
            "spec.headers.directives.2.map.high",
            id="priority-maps-to-invalid-pool",
        ),
        # 5. interleaving the drain breaks global order
        pytest.param(
            IOT,
            [("spec.spool.ordering", "global"), ("spec.spool.drain.on_recovery", "interleave")],
            "spec.spool.drain.on_recovery",
            id="interleave-with-global",
        ),
        pytest.param(
            BILLING,
            [("spec.spool.drain", {"on_recovery": "interleave"})],
            "spec.spool.drain.on_recovery",
            id="interleave-with-default-global",
        ),
        # 6. per-key lanes need a key
        pytest.param(IOT, [("spec.spool.ordering_key", DELETE)], "spec.spool.ordering_key", id="per-key-without-key"),
        # 7. verifiers need their configuration
        pytest.param(
            BILLING, [("spec.ingress.verify.audience", DELETE)], "spec.ingress.verify.audience", id="oidc-audience"
        ),
        pytest.param(
            BILLING,
            [("spec.ingress.verify.service_account", DELETE)],
            "spec.ingress.verify.service_account",
            id="oidc-service-account",
        ),
        # 8. a spool that buffers needs somewhere to write
        pytest.param(STRIPE, [("spec.spool.backend", DELETE)], "spec.spool.backend", id="buffer-without-backend"),
        pytest.param(IOT, [("spec.spool.backend", DELETE)], "spec.spool.backend", id="hybrid-without-backend"),
        # 9. one directive per header, case-insensitively
        pytest.param(
            IOT,
            [("spec.headers.directives.1.header", "X-NOETL-POOL")],
            "spec.headers.directives.1.header",
            id="duplicate-header",
        ),
        # source and mode belong together
        pytest.param(STRIPE, [("spec.mode", "pull")], "spec.mode", id="webhook-pull"),
        pytest.param(IOT, [("spec.source", "kafka"), ("spec.mode", "push")], "spec.mode", id="kafka-push"),
        pytest.param(IOT, [("spec.subscription", DELETE)], "spec.subscription", id="pubsub-pull-unaddressed"),
        pytest.param("subscription_orders_drain.yaml", [("spec.stream", DELETE)], "spec.stream", id="nats-unaddressed"),
        pytest.param(
            "subscription_edge_clickstream.yaml", [("spec.topic", DELETE)], "spec.topic", id="kafka-unaddressed"
        ),
        pytest.param(IOT, [("spec.ingress", {"gateway_path": "/ingress/iot"})], "spec.ingress", id="ingress-on-pull"),
        # the schema itself
        pytest.param(IOT, [("spec.sourse", "pubsub")], "spec.sourse", id="unknown-key"),
        pytest.param(IOT, [("spec.source", "sqs")], "spec.source", id="unknown-source"),
        pytest.param(IOT, [("spec.dispatch.playbook", DELETE)], "spec.dispatch.playbook", id="no-playbook"),
        pytest.param(IOT, [("spec.dispatch.batch_max", 0)], "spec.dispatch.batch_max", id="batch-max-low"),
        pytest.param(IOT, [("spec.dispatch.batch_max", 1001)], "spec.dispatch.batch_max", id="batch-max-high"),
        pytest.param(IOT, [("spec.dedup", {"window_secs": 0})], "spec.dedup.window_secs", id="dedup-window-low"),
        pytest.param(IOT, [("spec.dedup", {"window_secs": 604_801})], "spec.dedup.window_secs", id="dedup-window-8d"),
        pytest.param(IOT, [("spec.runtime.pool", "IoT Pool")], "spec.runtime.pool", id="bad-pool-name"),
        pytest.param(IOT, [("spec.spool.mode", "sometimes")], "spec.spool.mode", id="unknown-spool-mode"),
        pytest.param(IOT, [("metadata.path", "../etc/passwd")], "metadata.path", id="path-escapes"),
        pytest.param(IOT, [("metadata.name", DELETE)], "metadata.name", id="no-name"),
    ],
)
def test_rule_violations_name_the_failing_field(name: str, edits: list[tuple[str, Any]], field: str) -> None:
    assert field in {d["field"] for d in rejection(edited(name, *edits))}


@pytest.mark.parametrize("verify_type", ["hmac_sha256", "github", "stripe", "standard_webhooks", "bearer"])
def test_secret_verifiers_need_a_wallet_alias(verify_type: str) -> None:
    doc = edited(STRIPE, ("spec.ingress.verify", {"type": verify_type, "header": "x-signature"}))
    assert "spec.ingress.verify.secret" in {d["field"] for d in rejection(doc)}
    # and with one they are accepted
    doc["spec"]["ingress"]["verify"]["secret"] = "webhook_secret"
    assert parse(doc).spec.ingress is not None


def test_every_violation_is_reported_at_once() -> None:
    doc = edited(
        IOT,
        ("spec.spool.ordering_key", DELETE),
        ("spec.spool.backend", DELETE),
        ("spec.headers.directives.0.allowed", DELETE),
    )
    fields = {d["field"] for d in rejection(doc)}
    assert {"spec.spool.ordering_key", "spec.spool.backend", "spec.headers.directives.0.allowed"} <= fields


def test_rejected_secret_values_are_never_echoed() -> None:
    leaked = "sk_live $ecret value"
    doc = edited(STRIPE, ("spec.ingress.verify.secret", leaked), ("spec.auth", leaked))
    details = rejection(doc)
    assert {"spec.ingress.verify.secret", "spec.auth"} <= {d["field"] for d in details}
    assert leaked not in repr(details)


# -- byte sizes --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("50Gi", 50 * 2**30),
        ("10Mi", 10 * 2**20),
        ("1G", 10**9),
        ("1GB", 10**9),
        ("1GiB", 2**30),
        ("512k", 512_000),
        ("1.5Ki", 1536),
        ("2 Ti", 2 * 2**40),
        ("4096", 4096),
        (1048576, 1048576),
        (2048.0, 2048),
    ],
)
def test_byte_sizes_parse_to_bytes(raw: object, expected: int) -> None:
    assert parse_byte_size(raw) == expected
    doc = edited(IOT, ("spec.spool.retention.max_bytes", raw))
    assert parse(doc).spec.spool.retention.max_bytes == expected


@pytest.mark.parametrize("raw", ["50 parsecs", "-1", "1.5", "Gi", "", True, [1], "0.1k1"])
def test_malformed_byte_sizes_are_rejected(raw: object) -> None:
    with pytest.raises(ValueError):
        parse_byte_size(raw)
    details = rejection(edited(IOT, ("spec.spool.retention.max_bytes", raw)))
    assert [(d["field"], d["type"]) for d in details] == [("spec.spool.retention.max_bytes", "byte_size")]


def test_zero_bytes_is_not_a_retention_ceiling() -> None:
    assert "spec.spool.retention.max_bytes" in {
        d["field"] for d in rejection(edited(IOT, ("spec.spool.retention.max_bytes", "0")))
    }


def test_ingress_body_limit_accepts_a_size_string() -> None:
    doc = edited(STRIPE, ("spec.ingress.max_body_bytes", "256Ki"))
    ingress = parse(doc).spec.ingress
    assert ingress is not None and ingress.max_body_bytes == 256 * 1024
    assert "spec.ingress.max_body_bytes" in {
        d["field"] for d in rejection(edited(STRIPE, ("spec.ingress.max_body_bytes", "1Gi")))
    }


# -- documents that are not documents ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,field,type_",
    [
        ("kind: Subscription\nspec: [unclosed", "$", "yaml_syntax"),
        ("- a\n- list", "$", "not_a_mapping"),
        ("", "$", "not_a_mapping"),
        ("metadata: {name: x}", "kind", "missing"),
        ("kind: Pipeline\nmetadata: {name: x}", "kind", "unknown_kind"),
        ("kind: [Subscription]", "kind", "unknown_kind"),
        ("kind: Subscription\n---\nkind: Playbook\n", "$", "yaml_syntax"),
    ],
)
def test_unreadable_documents_are_validation_failures(text: str, field: str, type_: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_document(text)
    assert [(d["field"], d["type"]) for d in info.value.details] == [(field, type_)]
    assert info.value.status == 422


def test_yaml_errors_do_not_quote_the_document() -> None:
    text = 'kind: Subscription\nspec:\n  auth: "topsecretvalue\n  mode: [push'
    with pytest.raises(ValidationFailed) as info:
        parse_document(text)
    assert "topsecretvalue" not in repr(info.value.details) and "line" in info.value.details[0]["problem"]


@pytest.mark.parametrize("cadence", [DELETE, "every hour", "61 * * * *", "* * * *"])
def test_a_scheduled_pull_needs_a_unix_cron_cadence(cadence: Any) -> None:
    details = rejection(edited("subscription_orders_drain.yaml", ("spec.cadence", cadence)))
    assert "cadence" in problem_at(details, "spec.cadence")["problem"]


def test_a_scheduled_cadence_may_have_a_seconds_field() -> None:
    doc = edited("subscription_orders_drain.yaml", ("spec.cadence", "*/10 * * * * *"))
    assert parse(doc).spec.cadence == "*/10 * * * * *"
