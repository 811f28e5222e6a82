"""The peer side of ``bench/peers.py``: a procrastinate queue, the Flask app that defers into it, its worker.

The Flask app (``peers_app:web``) is served by gunicorn the way our roles are; each gunicorn worker
opens the queue synchronously on its first request (procrastinate's ``PsycopgConnector`` then uses a
sync psycopg pool). Routes:

* ``POST /defer`` ``{"task": name, "args": {...}}``: ``task.defer(**args)``, 202;
* ``POST /defer/batch`` ``{"task": name, "items": [{...}, ...]}``: ``task.batch_defer(*items)``, 200;
* ``POST /webhook/<listener>``: verifies the ``X-Signature`` HMAC-SHA256 of the body
  (``hmac.compare_digest``), then defers ``noop`` with the JSON body as its payload, 202; 401 if the
  signature does not match;
* ``GET /healthz``.

The tasks: ``noop`` (deferred by the HTTP paths; no worker runs it there), and the chain
``step1`` → ``step2`` → ``step3``: each is a no-op that defers the next one.

    PEERS_DATABASE_URL=postgresql://... PYTHONPATH=bench python -m procrastinate --app=peers_app.queue worker
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from typing import Any

import procrastinate
from flask import Flask, request

SECRET = os.environ.get("BENCH_SECRET", "bench-secret").encode()
# Up to 10 connections per process, as our roles' SQLAlchemy pool (8 + an overflow of 2).
queue = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("PEERS_DATABASE_URL", ""), max_size=10)
)


@queue.task(name="noop")
async def noop(**_payload: Any) -> None:
    return None


@queue.task(name="step1")
async def step1(run: str, i: int) -> None:
    await step2.defer_async(run=run, i=i)


@queue.task(name="step2")
async def step2(run: str, i: int) -> None:
    await step3.defer_async(run=run, i=i)


@queue.task(name="step3")
async def step3(run: str, i: int) -> None:
    return None


TASKS = {"noop": noop, "step1": step1}
web = Flask("peers")
_opened = threading.Lock()
_state = {"open": False}


def _ready() -> None:
    """Open the queue's sync pool once per process (gunicorn forks before the first request)."""
    if _state["open"]:
        return
    with _opened:
        if not _state["open"]:
            queue.open()
            _state["open"] = True


@web.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@web.post("/defer")
def defer() -> tuple[dict[str, Any], int]:
    _ready()
    body = request.get_json()
    job_id = TASKS[body["task"]].defer(**body.get("args", {}))
    return {"job_id": job_id}, 202


@web.post("/defer/batch")
def defer_batch() -> tuple[dict[str, Any], int]:
    _ready()
    body = request.get_json()
    ids = TASKS[body["task"]].batch_defer(*body["items"])
    return {"started": len(ids)}, 200


@web.post("/webhook/<listener>")
def webhook(listener: str) -> tuple[dict[str, Any], int]:
    _ready()
    body = request.get_data()
    expected = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, request.headers.get("X-Signature", "")):
        return {"status": "rejected"}, 401
    job_id = noop.defer(listener=listener, payload=json.loads(body))
    return {"status": "accepted", "job_id": job_id}, 202
