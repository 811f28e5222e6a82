"""Drives executions through the control plane's command API the way workers do, without Pub/Sub:
claim each issued command, run it with the worker's ``run_command``, report it through ``POST /api/events``.

Commands are taken in a seeded random order, so independent commands (fan-out branches, parallel
iterations) finish in an order the in-process runner never uses.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from flask.testing import FlaskClient
from sqlalchemy import Engine, text

from noetl_cloud.engine import FakeClock, Outcome
from noetl_cloud.tools.registry import default_registry
from noetl_cloud.worker.run import PlanCache, run_command
from tests.unit.engine.conftest import LOOPBACK_ALLOW

PLAYBOOKS = Path(__file__).resolve().parents[1] / "data" / "playbooks"
ENDED = ("completed", "failed", "cancelled")


def golden_content(name: str, path: str) -> str:
    """A golden playbook's YAML with ``metadata.path`` set, so each registers at its own catalog path."""
    document = yaml.safe_load((PLAYBOOKS / f"{name}.yaml").read_text())
    document["metadata"]["path"] = path
    return yaml.safe_dump(document, sort_keys=False)


class Driver:
    def __init__(self, client: FlaskClient, engine: Engine, *, seed: int = 7, worker_id: str = "driver") -> None:
        self.client = client
        self.engine = engine
        self.random = random.Random(seed)
        self.worker_id = worker_id
        self.tools = default_registry(http_allow=LOOPBACK_ALLOW)
        self.clock = FakeClock()
        self.plans = PlanCache()
        self.runs: list[dict[str, Any]] = []

    def start(self, path: str, workload: Mapping[str, Any] | None = None, **extra: Any) -> str:
        response = self.client.post("/api/execute", json={"path": path, "workload": dict(workload or {}), **extra})
        assert response.status_code == 202, response.get_json()
        return str(response.get_json()["execution_id"])

    def issued(self, execution_id: str) -> list[str]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT command_id FROM command WHERE execution_id = :id AND status = 'issued' ORDER BY 1"),
                {"id": int(execution_id)},
            ).scalars()
            return [str(r) for r in rows]

    def status(self, execution_id: str) -> dict[str, Any]:
        response = self.client.get(f"/api/executions/{execution_id}")
        assert response.status_code == 200, (response.status_code, response.get_json())
        return response.get_json()  # type: ignore[no-any-return]

    def run_to_end(self, execution_id: str, limit: int = 2000) -> dict[str, Any]:
        for _ in range(limit):
            detail = self.status(execution_id)
            if detail["status"] in ENDED:
                return detail
            pending = self.issued(execution_id)
            assert pending, f"execution {execution_id} is {detail['status']} with no command issued"
            self.run_one(self.random.choice(pending))
        raise AssertionError(f"execution {execution_id} did not end within {limit} commands")

    def claim(self, command_id: str) -> Any:
        return self.client.post(f"/api/commands/{command_id}/claim", json={"worker_id": self.worker_id})

    def run_one(self, command_id: str) -> dict[str, Any]:
        claimed = self.claim(command_id)
        assert claimed.status_code == 200, claimed.get_json()
        command = claimed.get_json()
        report = run_command(command, tools=self.tools, clock=self.clock, run_child=self.run_child, compiled=self.plans)
        body = report.to_body(self.worker_id, command["attempt"], command["command_id"])
        self.runs.append(command)
        answer = self.client.post("/api/events", json=body)
        assert answer.status_code == 200, answer.get_json()
        return body

    def run_child(self, path: str, args: dict[str, Any], parent_iter: Mapping[str, Any] | None) -> Outcome:
        child = self.start(path, args, meta={"parent_iter": dict(parent_iter)} if parent_iter is not None else {})
        detail = self.run_to_end(child)
        body = {"execution_id": child, "status": detail["status"], "ctx": detail["ctx"], "results": detail["results"]}
        if detail["status"] == "completed":
            return Outcome.ok(body)
        return Outcome("error", body, {"kind": "child_failed", "message": f"child playbook {path} failed"})
