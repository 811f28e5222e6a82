"""The stored form of an event row (``noetl_cloud.eventlog.stored``): defaults left out, rebuilt exactly."""

from __future__ import annotations

import pytest

from noetl_cloud.eventlog.stored import ESCAPE, LITERAL, envelope_fields, stored_fields, stream_lookup

EXECUTION = "384572860948287488"
EVENT = 384572860956676100
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
    given |= {"stream_id": f"execution/{execution_id}", "causation_id": None}
    scope = {"tenant_id": "acme", "organization_id": "ops"}
    stored = stored_fields(event_type="step.done", event_id=EVENT, execution_id=execution_id, **scope, **given)
    execution = None if execution_id is None else int(execution_id)
    row = {"event_type": "step.done", "event_id": EVENT, "execution_id": execution}
    assert envelope_fields({**row, **scope, **stored}) == given


STREAMS = [
    # (execution_id, stream_id, causation_id)
    (EXECUTION, f"execution/{EXECUTION}", str(EVENT - 1)),
    (EXECUTION, f"execution/{EXECUTION}/stage/1/frame/2", str(EVENT)),
    (EXECUTION, f"execution/{EXECUTION}0", "0" + str(EVENT - 1)),  # another execution's name; not canonical
    (EXECUTION, f"execution/{EXECUTION}/", str(EVENT + 1)),  # a cause after the event: kept whole
    (None, f"execution/{EXECUTION}", "١٢"),  # no execution; digits that are not ASCII
    (EXECUTION, ESCAPE, ESCAPE + "1"),
    (None, LITERAL + "x", LITERAL),
    (EXECUTION, "subscription/7", None),
]


@pytest.mark.parametrize(("execution_id", "stream_id", "causation_id"), STREAMS)
def test_stream_and_causation_ids_are_rebuilt_exactly(
    execution_id: str | None, stream_id: str, causation_id: str | None
) -> None:
    given = {
        "schema_name": "noetl.step.done",
        "aggregate_id": EXECUTION,
        "correlation_id": None,
        "producer": OWN,
        "idempotency_key": None,
        "stream_id": stream_id,
        "causation_id": causation_id,
    }
    scope = {"tenant_id": "acme", "organization_id": "ops", "event_type": "step.done", "event_id": EVENT}
    stored = stored_fields(execution_id=execution_id, **scope, **given)
    assert envelope_fields({**scope, "execution_id": execution_id, **stored}) == given
    _execution, relative, whole = stream_lookup(stream_id)
    assert stored["stream_id"] in (relative, whole)  # how read_stream finds it


def test_the_runtimes_usual_event_stores_none_of_the_repeats() -> None:
    stored = stored_fields(
        tenant_id="acme",
        organization_id="ops",
        event_type="command.issued",
        event_id=EVENT,
        execution_id=EXECUTION,
        stream_id=f"execution/{EXECUTION}",
        causation_id=str(EVENT - 3),
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
        "stream_id": ESCAPE,
        "causation_id": ESCAPE + "3",
    }
