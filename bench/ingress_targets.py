"""WSGI apps the ingress benchmark needs beside the real roles (served by gunicorn).

* ``bare``: a Flask endpoint that only verifies an HMAC-SHA256 signature and answers 202 — the
  baseline of what any verifying webhook endpoint costs on this machine.
* ``CONFIG``: the listener configuration the stand-in control plane (``bench/standin.py``) serves.
"""

from __future__ import annotations

import hashlib
import hmac
import os

from flask import Flask, request

SECRET = os.environ.get("BENCH_SECRET", "bench-secret")
bare = Flask("bare")

CONFIG = {
    "listener": "bench",
    "path": "subscriptions/bench",
    "catalog_id": "1",
    "version": 1,
    "subscription_id": "2",
    "state": "active",
    "source": "webhook",
    "verify": {"type": "hmac_sha256", "header": "x-signature", "secret": SECRET, "secret_alias": "bench"},
    "max_body_bytes": None,
    "rate_limit": None,
    "dispatch": {"playbook": "bench/noop", "payload_from": "message.json", "execution_pool": None},
    "headers": {"directives": [], "trace": {"propagate": "w3c"}},
    "spool": {"mode": "off"},
    "limits": {},
    "dedup": {"enabled": False, "window_secs": 3600},
}


@bare.post("/ingress/<listener>")
def verify_only(listener: str) -> tuple[dict[str, str], int]:
    body = request.get_data()
    expected = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, request.headers.get("X-Signature", "")):
        return {"status": "rejected"}, 401
    return {"status": "accepted"}, 202
