"""The cursor loop of the fault suite (tests/e2e/test_faults.py, scenario ``frames killed``).

One execution of ``faults/frames`` reads 200 rows of ``faults_rows`` (the scenario's batch) through a
cursor loop: 4 slots, frames of 10 rows, one ``kind: http`` task per row that POSTs the row's key to
the suite's effect sink. The frames role (claim, heartbeat, commit) is SIGKILLed while frames are in
flight and started again; every row's effect must land exactly once.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.e2e.faults import FaultStack, Outcome

FRAMES_PLAYBOOK = "faults/frames"
FRAME_ROWS = 10
SLOTS = 4

_PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: frames, path: {path}}}
workload: {{effect_url: "{effect_url}", dsn: "", batch: ""}}
workflow:
  - step: rows
    loop:
      iterator: row
      cursor:
        kind: postgres
        dsn: "{{{{ workload.dsn }}}}"
        claim: |
          UPDATE faults_rows q SET frame_id = CAST(:frame_id AS bigint)
          WHERE q.frame_id = CAST(:frame_id AS bigint) OR q.id IN (
            SELECT id FROM faults_rows WHERE frame_id IS NULL AND batch = :batch ORDER BY id
            LIMIT greatest({{{{ __frame_max_rows }}}} - (SELECT count(*) FROM faults_rows
                                                 WHERE frame_id = {{{{ __frame_id }}}}), 0)
            FOR UPDATE SKIP LOCKED)
          RETURNING q.id, q.k
        params: {{frame_id: "{{{{ __frame_id }}}}", batch: "{{{{ workload.batch }}}}"}}
      spec:
        mode: cursor
        max_in_flight: {slots}
        frame: {{max_rows: {rows}, process: row, lease_seconds: 30, heartbeat_seconds: 1}}
    tool:
      - effect:
          kind: http
          method: POST
          url: "{{{{ workload.effect_url }}}}"
          headers: {{Idempotency-Key: "{{{{ iter.row.k }}}}"}}
          json: {{key: "{{{{ iter.row.k }}}}"}}
"""


def frames_playbook(effect_url: str) -> str:
    return _PLAYBOOK.format(path=FRAMES_PLAYBOOK, effect_url=effect_url, slots=SLOTS, rows=FRAME_ROWS)


def seed_rows(stack: FaultStack, batch: str, keys: list[str]) -> None:
    """The scenario's rows, keyed like the other scenarios' messages (``<scenario>-<n>``)."""
    stack.sql_write(
        "CREATE TABLE IF NOT EXISTS faults_rows (id bigserial PRIMARY KEY, batch text NOT NULL, "
        "k text NOT NULL UNIQUE, frame_id bigint)"
    )
    stack.sql_write(
        "INSERT INTO faults_rows (batch, k) SELECT :b, k FROM unnest(CAST(:keys AS text[])) AS k",
        b=batch,
        keys=keys,
    )


def start_run(stack: FaultStack, batch: str) -> str:
    """Start the cursor loop over ``batch``; its execution id."""
    assert stack.api is not None
    workload = {"dsn": stack.env["NOETL_DATABASE_URL"], "batch": batch}
    answer = stack.api.post("/api/execute", json={"path": FRAMES_PLAYBOOK, "workload": workload})
    answer.raise_for_error()
    return str(answer.json["execution_id"])


def running_frames(stack: FaultStack, execution_id: str) -> int:
    return int(
        stack.sql(
            "SELECT count(*) AS n FROM frame f JOIN stage s ON s.stage_id = f.stage_id "
            "WHERE s.execution_id = :e AND f.status = 'RUNNING'",
            e=int(execution_id),
        )[0].n
    )


def status(stack: FaultStack, execution_id: str) -> str:
    try:
        rows = stack.sql("SELECT status FROM execution WHERE execution_id = :e", e=int(execution_id))
    except Exception:  # noqa: BLE001 - measured while things restart
        return "unknown"
    return str(rows[0].status) if rows else "unknown"


def measure(stack: FaultStack, outcome: Outcome, execution_id: str, keys: list[str]) -> Outcome:
    """Rows are the messages: lost = rows without an effect, duplicates = effects beyond the first;
    ``reissued`` counts frames handed to a new attempt (``frame.abandoned``), whose rows could rerun."""
    effects = stack.sink.of(keys)
    outcome.executions = 1
    outcome.lost = sum(1 for n in effects.values() if n == 0)
    outcome.effect_reruns = sum(n - 1 for n in effects.values() if n > 1)
    outcome.resent = stack.sink.resent(keys)
    state = status(stack, execution_id)
    outcome.terminal = int(state in ("completed", "failed", "cancelled"))
    outcome.completed = int(state == "completed")
    events: list[Any] = stack.sql(
        "SELECT event_type, aggregate_id FROM event WHERE execution_id = :e AND aggregate_type = 'frame' "
        "AND event_type IN ('frame.committed', 'frame.failed', 'frame.abandoned')",
        e=int(execution_id),
    )
    commits = Counter(r.aggregate_id for r in events if r.event_type == "frame.committed")
    outcome.duplicates = sum(n - 1 for n in commits.values() if n > 1)  # a frame committed twice
    outcome.reissued = sum(1 for r in events if r.event_type == "frame.abandoned")
    failed = sum(1 for r in events if r.event_type == "frame.failed")
    if failed:
        outcome.notes.append(f"{failed} frames failed")
    outcome.parity_ok = stack.parity([int(execution_id)])
    return outcome


__all__ = ["FRAMES_PLAYBOOK", "frames_playbook", "measure", "running_frames", "seed_rows", "start_run", "status"]
