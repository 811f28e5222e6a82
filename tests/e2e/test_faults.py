"""The fault-injection suite (issue 12, "The proof"): faults while 200 messages are in flight.

Every scenario drives 200 messages into a private stack of its own (tests/e2e/faults.py), injects
one fault mid-flow, waits until the flow has settled, and proves: every message has an execution
(lost = 0), exactly one (duplicates = 0: dedup is on everywhere), every execution is terminal and,
the playbook being one HTTP effect, completed; each message's effect reached the effect sink; and
every execution's live projection equals a fresh fold of its events (replay parity). The run ends
with the table of scenario -> messages in / executions / duplicates / lost (docs/faults.md).

Faults: a role's process group SIGKILLed (ingress, execute, worker, projector, spool drainer,
subscription runtime) and started again on its port; the Pub/Sub emulator, PostgreSQL and
fake-gcs-server stopped and started by the stack's own component start/stop.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_cloud.local.process import wait_until
from tests.e2e.faults import INBOUND, PULL, FaultStack, Outcome, table, wait_for

pytestmark = pytest.mark.faults

N = 200
SETTLE_S = 180.0
# A command issued again because its claim lease ran out (its worker died, or could not heartbeat
# through the fault) is the at-least-once contract of commands (docs/distributed.md): its effect may
# land twice. A second effect that no such re-issue explains is a bug.


class Report:
    """A plugin registered by the module's fixture: prints the table in the terminal summary."""

    def __init__(self, outcomes: list[Outcome]) -> None:
        self.outcomes = outcomes

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        terminalreporter.section("fault injection")
        for line in table(self.outcomes):
            terminalreporter.write_line(line)


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest) -> list[Outcome]:
    collected: list[Outcome] = []
    request.config.pluginmanager.register(Report(collected), "faults-report")
    return collected


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    base = int(os.environ.get("NOETL_FAULTS_PORT_BASE") or int(os.environ.get("NOETL_LOCAL_PORT_BASE") or 15430) + 40)
    saved = {k: os.environ.get(k) for k in ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST", "STORAGE_EMULATOR_HOST")}
    fs = FaultStack(Path(tmp_path_factory.mktemp("faults")) / "stack", base)
    try:
        fs.up()
        yield fs
    finally:
        fs.down()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def keys_of(scenario: str) -> list[str]:
    return [f"{scenario}-{n}" for n in range(N)]


def started(stack: FaultStack, scenario: str) -> int:
    return len(stack.executions(scenario))


def completed(stack: FaultStack, scenario: str) -> int:
    return sum(1 for r in stack.executions(scenario) if r.status == "completed")


def prove(
    stack: FaultStack, outcomes: list[Outcome], scenario: str, keys: list[str], t0: float, settle_s: float = SETTLE_S
) -> None:
    """Wait until the flow settled, measure, record the row, assert the guarantees."""
    settled = wait_until(lambda: stack.settled(scenario, keys), timeout=settle_s, interval=0.5)
    # An unsettled flow is measured as it stands: no waiting for the projector to catch up on it.
    outcome = stack.measure(Outcome(scenario, len(keys)), keys, parity_wait_s=90.0 if settled else 0.0)
    outcome.seconds = time.monotonic() - t0
    if not settled:
        outcome.notes.append(f"not settled after {settle_s:.0f} s")
    outcomes.append(outcome)
    assert outcome.lost == 0, outcome
    assert outcome.duplicates == 0, outcome
    assert outcome.terminal == outcome.executions == len(keys), outcome
    assert outcome.completed == outcome.executions, outcome
    assert not outcome.notes, outcome
    assert outcome.effect_reruns <= outcome.reissued, outcome
    assert outcome.parity_ok == outcome.executions, outcome


def kill_mid_flow(stack: FaultStack, role: str, scenario: str, *, after: int = 30) -> None:
    """SIGKILL ``role`` once ``after`` executions exist and before all are done, then start it again."""
    wait_for(lambda: started(stack, scenario) >= after, 120, f"{after} executions of {scenario}")
    stack.kill_role(role)
    assert completed(stack, scenario) < N, "everything had finished before the kill: it proves nothing"
    stack.start_role(role)


def test_ingress_killed(stack: FaultStack, outcomes: list[Outcome]) -> None:
    scenario, keys, t0 = "ingress killed", keys_of("ingress killed"), time.monotonic()
    publisher = threading.Thread(target=stack.publish, args=(INBOUND, keys, 0.01), daemon=True)
    publisher.start()
    kill_mid_flow(stack, "ingress", scenario)
    publisher.join(timeout=60)
    prove(stack, outcomes, scenario, keys, t0)


def test_worker_killed(stack: FaultStack, outcomes: list[Outcome]) -> None:
    scenario, keys, t0 = "worker killed", keys_of("worker killed"), time.monotonic()
    client = stack.submit_all(keys, pace_s=0.02)
    wait_for(lambda: completed(stack, scenario) >= 30, 120, "30 completed executions")
    stack.kill_role("worker")
    assert completed(stack, scenario) < N
    stack.start_role("worker")
    client.join(timeout=120)
    prove(stack, outcomes, scenario, keys, t0)


def test_projector_killed(stack: FaultStack, outcomes: list[Outcome]) -> None:
    scenario, keys, t0 = "projector killed", keys_of("projector killed"), time.monotonic()
    client = stack.submit_all(keys, pace_s=0.02)
    kill_mid_flow(stack, "projector", scenario, after=60)
    client.join(timeout=120)
    prove(stack, outcomes, scenario, keys, t0)


def test_execute_killed(stack: FaultStack, outcomes: list[Outcome]) -> None:
    scenario, keys, t0 = "execute killed", keys_of("execute killed"), time.monotonic()
    client = stack.submit_all(keys, pace_s=0.03)
    kill_mid_flow(stack, "execute", scenario, after=60)
    client.join(timeout=180)
    prove(stack, outcomes, scenario, keys, t0)


def test_runtime_killed(stack: FaultStack, outcomes: list[Outcome]) -> None:
    scenario, keys, t0 = "runtime killed", keys_of("runtime killed"), time.monotonic()
    stack.publish(PULL, keys)
    kill_mid_flow(stack, "subscription_runtime", scenario)
    prove(stack, outcomes, scenario, keys, t0)


def test_drainer_killed(stack: FaultStack, outcomes: list[Outcome]) -> None:
    """The control plane is down while the messages arrive, so the ingress spools them all; it comes
    back, and the drainer is killed while it replays the spool."""
    scenario, keys, t0 = "drainer killed", keys_of("drainer killed"), time.monotonic()
    stack.prime_ingress("warm-drainer-killed")
    stack.stop_role("execute")
    stack.publish(INBOUND, keys)
    wait_for(lambda: stack.spooled() >= N, 120, f"{N} spooled deliveries")
    stack.start_role("execute")
    kill_mid_flow(stack, "spool_drainer", scenario, after=20)
    prove(stack, outcomes, scenario, keys, t0)


def test_gcs_unavailable_for_ten_seconds(stack: FaultStack, outcomes: list[Outcome]) -> None:
    """The spool's bucket is the only place a delivery can go while the control plane is down; GCS
    goes away for 10 s in the middle of that."""
    scenario, keys, t0 = "gcs unavailable 10 s", keys_of("gcs unavailable 10 s"), time.monotonic()
    stack.prime_ingress("warm-gcs-unavailable")
    stack.stop_role("execute")
    publisher = threading.Thread(target=stack.publish, args=(INBOUND, keys, 0.05), daemon=True)
    publisher.start()
    wait_for(lambda: stack.spooled() >= 40, 120, "40 spooled deliveries")
    stack.stop_component("gcs")
    time.sleep(10)  # the fault itself: GCS unreachable for 10 s (not a wait for a condition)
    stack.start_components()
    publisher.join(timeout=60)
    stack.start_role("execute")
    prove(stack, outcomes, scenario, keys, t0)


def test_postgres_restarted(stack: FaultStack, outcomes: list[Outcome]) -> None:
    scenario, keys, t0 = "postgres restarted", keys_of("postgres restarted"), time.monotonic()
    client = stack.submit_all(keys, pace_s=0.03)
    wait_for(lambda: started(stack, scenario) >= 60, 120, "60 executions")
    stack.stop_component("postgres")
    stack.start_components()
    client.join(timeout=180)
    prove(stack, outcomes, scenario, keys, t0)


def test_pubsub_emulator_restarted(stack: FaultStack, outcomes: list[Outcome]) -> None:
    """The emulator keeps nothing across a restart: topics and subscriptions are created again (as
    Terraform holds them); whatever it held is gone, and PostgreSQL's outbox and command rows must
    carry the flow: the reaper publishes again the notifications of commands nobody claimed, the
    projector's catch-up folds the executions whose last deliveries were lost."""
    scenario, keys, t0 = "pubsub restarted", keys_of("pubsub restarted"), time.monotonic()
    client = stack.submit_all(keys, pace_s=0.03)
    wait_for(lambda: started(stack, scenario) >= 60, 120, "60 executions")
    stack.stop_component("pubsub")
    stack.start_components()
    stack.ensure_pubsub()
    client.join(timeout=180)
    prove(stack, outcomes, scenario, keys, t0)
