"""The ingress is the public edge: its cold start must not pay for the database or Arrow stacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The catalog document models: the spool needs only its own block (spec.spool), and the playbook
# models were a third of the ingress's import time when the spool loaded them with the rest.
HEAVY = (
    "sqlalchemy",
    "pyarrow",
    "alembic",
    "pg8000",
    "google.cloud.firestore",
    "google.cloud.pubsub_v1",
    "noetl_cloud.spec.playbook",
    "noetl_cloud.spec.subscription",
)

PROBE = """
import json, sys
sys.path.insert(0, "functions/ingress")
import main
from noetl_cloud.ingress.app import build_app, service_from_settings
from noetl_cloud.settings import Settings
settings = Settings(api_url="http://127.0.0.1:9", internal_api_token="t")
app = build_app(settings, service_from_settings(settings))
assert app.test_client().get("/healthz").status_code == 200
print(json.dumps(sorted(sys.modules)))
"""


def test_ingress_entry_point_and_app_import_no_database_or_arrow_modules() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert "noetl_cloud.ingress.service" in loaded  # the probe really built the role
    assert [m for m in loaded if m.startswith(HEAVY)] == []
