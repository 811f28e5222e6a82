"""``noetl-cloud subscribe --local``: one message starts one execution, however many copies of it arrive.

Pub/Sub delivers at least once: a message the runtime spooled can come again (a lapsed lease, a
stream that reopened) and be spooled a second time, or dispatched live after its spooled copy was
replayed; the drain thread and the live pipeline can also run copies at the same moment. The
in-process control plane claims a start's keys (dedup, delivery, and the source message's identity)
before it runs, so whichever copy comes second is a ``duplicate`` of the first.
"""

from __future__ import annotations

import io
import itertools
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from noetl_cloud.kv.file import FileKeyValueStore
from noetl_cloud.runtime import local
from noetl_cloud.runtime.local import FileEventSink, LocalControl
from noetl_cloud.spool.backends import FixedBackend
from noetl_cloud.spool.engine import SpoolEngine, payload_bytes
from noetl_cloud.spool.events import EventJournal
from noetl_cloud.spool.local_disk import LocalDiskSpool
from noetl_cloud.spool.local_mode import DispatchReplayer, LocalDrainLoop
from noetl_cloud.spool.target import SpoolTarget
from tests.playbooks import INGEST

PLAYBOOK = INGEST
SUB = "subscriptions/local-dedup"
SPOOL = {"mode": "buffer_and_ack", "backend": "local_disk", "ordering": "per_key", "ordering_key": "device"}
PUBLISHED = "2026-11-27T09:00:00+00:00"


def control(tmp: Path) -> tuple[LocalControl, io.StringIO]:
    (tmp / "ingest.yaml").write_text(PLAYBOOK)
    stream = io.StringIO()
    return LocalControl({"kind": "Subscription"}, tmp, FileEventSink(stream)), stream


def live(message_id: str, n: int, publish_time: str = PUBLISHED) -> dict[str, Any]:
    """The execute request the runtime builds for a pulled message (``runtime.message.prepare``)."""
    meta = {"message_id": message_id, "source": "pubsub", "subscription_path": SUB, "publish_time": publish_time}
    return {"path": "domain/ingest", "workload": {"payload": {"n": n}}, "meta": meta}


def started(stream: io.StringIO) -> int:
    return sum(json.loads(line)["event_type"] == "playbook.started" for line in stream.getvalue().splitlines())


def test_two_spooled_copies_of_one_message_start_one_execution(tmp_path: Path) -> None:
    ctl, stream = control(tmp_path)
    kv = FileKeyValueStore(tmp_path / "spool.state.json")
    ids = itertools.count(1)
    engine = SpoolEngine(
        kv,
        EventJournal(ctl.sink, kv),
        FixedBackend(LocalDiskSpool(tmp_path / "spool", fsync=False)),
        ids=lambda: next(ids),
    )
    target = SpoolTarget.from_spec(SUB, SPOOL, source_kind="pull", downstream="local:in-process")
    request = live("7", 7)
    plan = {"playbook": "domain/ingest", "request": {k: v for k, v in request.items() if k != "workload"}}
    for _copy in range(2):  # the message, and its redelivery, each spooled behind a backlog
        engine.spool(
            target,
            payload_bytes(request["workload"]),
            message_id="7",
            source="pubsub",
            plan=plan,
            reason="draining",
            ordering_key="b",
        )
    loop = LocalDrainLoop(engine, target, DispatchReplayer(lambda rs: ctl.dispatch(rs, batch=False)))
    report = loop.tick()
    assert report is not None and report.replayed == 2
    assert started(stream) == 1 and len(ctl.runs) == 1
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    replayed = [e["payload"] for e in events if e["event_type"] == "subscription.message.replayed"]
    assert [r["duplicate"] for r in replayed] == [False, True]
    assert replayed[0]["execution_id"] == replayed[1]["execution_id"]
    # Each item's ``spooled`` event once, though the drainer writes it again before the replay.
    spooled = [e["payload"]["spool_ref"] for e in events if e["event_type"] == "subscription.message.spooled"]
    assert len(spooled) == 2 and len(set(spooled)) == 2
    assert LocalDiskSpool(tmp_path / "spool").list(SUB) == []
    # ... and the copy the source delivers once more, live, is a duplicate too.
    (outcome,) = ctl.dispatch([live("7", 7)], batch=False)
    assert outcome.status == "duplicate" and outcome.execution_id == replayed[0]["execution_id"]
    assert started(stream) == 1


def test_a_copy_dispatched_while_the_first_runs_waits_and_is_a_duplicate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl, stream = control(tmp_path)
    running, release = threading.Event(), threading.Event()
    real = local.run_file

    def held(*args: Any, **kwargs: Any) -> Any:
        running.set()
        assert release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(local, "run_file", held)
    outcomes: dict[str, Any] = {}
    first = threading.Thread(target=lambda: outcomes.update(first=ctl.dispatch([live("8", 8)], batch=False)[0]))
    first.start()
    assert running.wait(10)
    second = threading.Thread(target=lambda: outcomes.update(second=ctl.dispatch([live("8", 8)], batch=False)[0]))
    second.start()
    second.join(0.2)
    assert second.is_alive()  # the copy waits for the run it duplicates, it does not start another
    release.set()
    first.join(10)
    second.join(10)
    assert outcomes["first"].status == "accepted" and outcomes["second"].status == "duplicate"
    assert outcomes["second"].execution_id == outcomes["first"].execution_id
    assert started(stream) == 1


def test_a_new_message_given_an_old_id_runs_and_a_failed_start_frees_its_keys(tmp_path: Path) -> None:
    ctl, stream = control(tmp_path)
    assert ctl.dispatch([live("9", 1)], batch=False)[0].status == "accepted"
    # An emulator restarted numbers its messages anew: same id, another publish time, another message.
    assert ctl.dispatch([live("9", 2, "2026-11-27T09:05:00+00:00")], batch=False)[0].status == "accepted"
    missing = {**live("10", 3), "path": "domain/missing"}
    assert ctl.dispatch([missing], batch=False)[0].status == "rejected"
    assert ctl.dispatch([live("10", 3)], batch=False)[0].status == "accepted"  # nothing had started
    assert started(stream) == 3
