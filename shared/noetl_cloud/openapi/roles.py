"""Every role's app built for its URL map only (services that are never called), and the committed
documents written from them: ``python -m noetl_cloud.openapi <folder>``."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from flask import Flask

from noetl_cloud.settings import Settings

ROLES = ("execute", "frames", "projector", "worker", "ingress", "spool_drainer", "subscription_runtime")


def role_app(role: str, settings: Settings | None = None) -> Flask:
    """``role``'s Flask app with inert services: its routes, nothing behind them (no connection is made)."""
    settings = settings or Settings()
    inert: Any = SimpleNamespace(settings=settings)
    if role == "execute":
        from noetl_cloud.control.app import build_app as execute

        return execute(inert, inert)
    if role == "frames":
        from noetl_cloud.frames.app import build_app as frames

        return frames(settings, inert, inert)
    if role == "projector":
        from noetl_cloud.projector.app import build_app as projector

        return projector(inert, inert, inert)
    if role == "worker":
        from noetl_cloud.worker.app import build_app as worker

        return worker(settings, inert, inert)
    if role == "ingress":
        from noetl_cloud.ingress.app import build_app as ingress

        return ingress(settings, inert)
    if role == "spool_drainer":
        from noetl_cloud.spool.app import build_app as drainer

        return drainer(settings, inert, inert)
    if role == "subscription_runtime":
        from noetl_cloud.runtime.health import build_app as runtime

        return runtime(settings, None)
    raise ValueError(f"unknown role {role!r}")


def render(document: dict[str, Any]) -> str:
    """The committed form: indented, keys in the document's order, one trailing newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def documents() -> dict[str, str]:
    """Every role's document, rendered."""
    from noetl_cloud.openapi import document_for

    return {role: render(document_for(role_app(role))) for role in ROLES}


def write(folder: Path) -> list[Path]:
    """Write ``<folder>/<role>.json`` for every role; the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for role, text in documents().items():
        path = folder / f"{role}.json"
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
