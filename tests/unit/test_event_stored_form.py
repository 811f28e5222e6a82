"""The stored form of an event row (``noetl_cloud.eventlog.stored``): defaults left out, rebuilt exactly."""

from __future__ import annotations

import pytest

from noetl_cloud.eventlog.stored import ESCAPE, LITERAL, envelope_fields, stored_fields

EXECUTION = "384572860948287488"
OWN = "noetl://tenant/acme/org/ops/role/execute/node/321"
KEY = f"acme/ops/{EXECUTION}/command/384572860956676099/1/issued"
CASES = [
    # (execution_id, aggregate_id, correlation_id, schema_name, producer, idempotency_key)
    (EXECUTION, EXECUTION, EXECUTION, "noetl.step.done", OWN, KEY),  # every default: all five left out
    (EXECUTION, "384572860956676099", "other", "acme.step", "noetl://tenant/acme/org/other/role/x", "acme/ops/1/x"),
    (EXECUTION, EXECUTION, None, "noetl.step.done", OWN, None),  # no correlation, though it has an execution
    (None, "catalog/1", None, "noetl.step.done", "noetl://tenant/acme/org/ops/", "acme/ops/catalog/a/1"),
    (None, "catalog/1", "c", "noetl.step.done", "test", ESCAPE + "k"),
    (EXECUTION, EXECUTION, "", "noetl.step.done", "noetl://tenant/acme/org/ops", f"acme/ops/{EXECUTION}"),
    (EXECUTION, EXECUTION, ESCAPE, "noetl.step.done", ESCAPE, ESCAPE),  # values that start with the markers
    (EXECUTION, EXECUTION, ESCAPE + "x", "noetl.step.done", LITERAL + "x", LITERAL + "x"),
    (EXECUTION, EXECUTION, ESCAPE + ESCAPE, "noetl.step.done", ESCAPE + LITERAL, f"acme/ops/{EXECUTION}/" + ESCAPE),
    (EXECUTION, "0" + EXECUTION, "0" + EXECUTION, "noetl.step.don", OWN + ESCAPE, f"acme/ops/0{EXECUTION}/k"),
]


@pytest.mark.parametrize(
    ("execution_id", "aggregate_id", "correlation_id", "schema_name", "producer", "idempotency_key"), CASES
)
def test_the_stored_form_rebuilds_exactly_what_was_given(
    execution_id: str | None,
    aggregate_id: str,
    correlation_id: str | None,
    schema_name: str,
    producer: str,
    idempotency_key: str | None,
) -> None:
    given = {
        "schema_name": schema_name,
        "aggregate_id": aggregate_id,
        "correlation_id": correlation_id,
        "producer": producer,
        "idempotency_key": idempotency_key,
    }
    scope = {"tenant_id": "acme", "organization_id": "ops"}
    stored = stored_fields(event_type="step.done", execution_id=execution_id, **scope, **given)
    row = {"event_type": "step.done", "execution_id": None if execution_id is None else int(execution_id)}
    assert envelope_fields({**row, **scope, **stored}) == given


def test_the_runtimes_usual_event_stores_none_of_the_repeats() -> None:
    stored = stored_fields(
        tenant_id="acme",
        organization_id="ops",
        event_type="command.issued",
        execution_id=EXECUTION,
        schema_name="noetl.command.issued",
        aggregate_id=EXECUTION,
        correlation_id=EXECUTION,
        producer=OWN,
        idempotency_key=KEY,
    )
    assert stored == {
        "schema_name": None,
        "aggregate_id": None,
        "correlation_id": None,
        "producer": ESCAPE + "role/execute/node/321",
        "idempotency_key": ESCAPE + "command/384572860956676099/1/issued",
    }
