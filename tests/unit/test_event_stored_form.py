"""The stored form of an event row (``noetl_cloud.eventlog.stored``): defaults left out, rebuilt exactly."""

from __future__ import annotations

import pytest

from noetl_cloud.eventlog.stored import ESCAPE, envelope_fields, stored_fields

EXECUTION = "384572860948287488"
CASES = [
    # (execution_id, aggregate_id, correlation_id, schema_name)
    (EXECUTION, EXECUTION, EXECUTION, "noetl.step.done"),  # every default: all three left out
    (EXECUTION, "384572860956676099", "other", "acme.step"),  # none of them
    (EXECUTION, EXECUTION, None, "noetl.step.done"),  # no correlation, though the event has an execution
    (None, "catalog/1", None, "noetl.step.done"),
    (None, "catalog/1", "c", "noetl.step.done"),
    (EXECUTION, EXECUTION, "", "noetl.step.done"),
    (EXECUTION, EXECUTION, ESCAPE, "noetl.step.done"),  # values that start with the escape
    (EXECUTION, EXECUTION, ESCAPE + "x", "noetl.step.done"),
    (EXECUTION, EXECUTION, ESCAPE + ESCAPE, "noetl.step.done"),
    (EXECUTION, "0" + EXECUTION, "0" + EXECUTION, "noetl.step.don"),  # not the execution id's own text
]


@pytest.mark.parametrize(("execution_id", "aggregate_id", "correlation_id", "schema_name"), CASES)
def test_the_stored_form_rebuilds_exactly_what_was_given(
    execution_id: str | None, aggregate_id: str, correlation_id: str | None, schema_name: str
) -> None:
    given = {"schema_name": schema_name, "aggregate_id": aggregate_id, "correlation_id": correlation_id}
    stored = stored_fields(event_type="step.done", execution_id=execution_id, **given)
    row = {"event_type": "step.done", "execution_id": None if execution_id is None else int(execution_id), **stored}
    assert envelope_fields(row) == given


def test_the_runtimes_usual_event_stores_none_of_the_three() -> None:
    stored = stored_fields(
        event_type="command.issued",
        execution_id=EXECUTION,
        schema_name="noetl.command.issued",
        aggregate_id=EXECUTION,
        correlation_id=EXECUTION,
    )
    assert stored == {"schema_name": None, "aggregate_id": None, "correlation_id": None}
