"""What the demo needs in a running local stack, prepared idempotently.

`noetl-cloud local up --roles all` calls :func:`prepare` once the control plane answers and before it
starts the subscription runtime, which must find its subscription in the catalog: the wallet's demo
secrets (files in ``NOETL_SECRETS_DIR``), the ``noetl_demo`` database the demo playbook writes to with
its own login ``noetl_demo_app`` (whose password only the wallet entry ``keychain-pg_demo`` holds: the
playbook names the alias ``pg_demo`` and the worker resolves it when a task runs), the emulator's
``demo-orders`` topic and its pull subscription, and the catalog entries (the playbook with a
placeholder fixture URL, the three push listeners registered and active, the runtime's pull
subscription). `noetl-cloud demo` calls it again (a no-op when everything is there).

The playbook and the subscriptions are package data (``resources/``): what is registered is exactly
what a reader finds in those files.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from noetl_cloud.web.client import ApiClient, segment, static_token

PLAYBOOK_PATH = "demo/orders"
RUNTIME_SUBSCRIPTION = "demo/pubsub/orders"
PUBSUB_TOPIC = "demo-orders"
PUBSUB_SUBSCRIPTION = "demo-orders-runtime"
DEMO_DATABASE = "noetl_demo"
#: The login the playbook's postgres tasks use, and the keychain alias (``auth: pg_demo``) naming it:
#: the wallet entry ``keychain-pg_demo`` holds its DSN, password included; no workload or event does.
DEMO_LOGIN = "noetl_demo_app"
KEYCHAIN_ALIAS = "pg_demo"
#: What the playbook's workload says until a demo run registers its own fixture URL: the discard
#: port, so a message outside a demo run fails fast instead of reaching something else.
PLACEHOLDER_API_URL = "http://127.0.0.1:9"


@dataclass(frozen=True)
class Listener:
    """One push listener of the demo: its signature scheme, catalog path, route and wallet alias."""

    scheme: str
    path: str
    listener: str
    secret_alias: str
    resource: str


LISTENERS = (
    Listener("hmac_sha256", "demo/webhooks/hmac", "demo-hmac", "demo_hmac_secret", "hmac.subscription.yaml"),
    Listener(
        "standard_webhooks",
        "demo/webhooks/standard",
        "demo-standard",
        "demo_standard_secret",
        "standard.subscription.yaml",
    ),
    Listener("github", "demo/webhooks/github", "demo-github", "demo_github_secret", "github.subscription.yaml"),
)

TABLES = (
    """CREATE TABLE IF NOT EXISTS demo_queue (
        id bigserial PRIMARY KEY,
        run text NOT NULL,
        batch text NOT NULL,
        order_id integer NOT NULL,
        customer text NOT NULL,
        amount_cents integer NOT NULL,
        frame_id bigint,
        UNIQUE (batch, order_id))""",
    "CREATE INDEX IF NOT EXISTS demo_queue_unclaimed ON demo_queue (batch, id) WHERE frame_id IS NULL",
    "CREATE INDEX IF NOT EXISTS demo_queue_frame ON demo_queue (frame_id)",
    """CREATE TABLE IF NOT EXISTS demo_orders (
        batch text NOT NULL,
        order_id integer NOT NULL,
        run text NOT NULL,
        customer text NOT NULL,
        amount_cents integer NOT NULL,
        frame_id bigint NOT NULL,
        saved_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (batch, order_id))""",
    "CREATE INDEX IF NOT EXISTS demo_orders_run ON demo_orders (run)",
)


def resource(name: str) -> str:
    """The text of a file of ``noetl_cloud/demo/resources``."""
    return resources.files("noetl_cloud.demo").joinpath("resources", name).read_text(encoding="utf-8")


def playbook_content(*, run: str, api_url: str) -> str:
    """The demo playbook with its workload defaults filled in (no credential: its tasks name ``pg_demo``)."""
    return Template(resource("orders.playbook.yaml")).substitute(run=run, api_url=api_url, alias=KEYCHAIN_ALIAS)


def _new_secret(alias: str) -> str:
    if alias == "demo_standard_secret":  # Standard Webhooks secrets are base64 after whsec_
        return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode("ascii")
    return secrets.token_hex(32)


def ensure_secrets(folder: Path) -> dict[str, str]:
    """The demo listeners' secrets, one file per alias in the local wallet folder (made once, 0600)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    values: dict[str, str] = {}
    for item in LISTENERS:
        path = folder / item.secret_alias
        if not path.exists():
            path.write_text(_new_secret(item.secret_alias) + "\n")
            path.chmod(0o600)
        values[item.secret_alias] = path.read_text().strip()
    return values


def demo_database_url(database_url: str) -> str:
    """The URL of the demo's own database on the stack's PostgreSQL (``.../noetl_demo``)."""
    base, _name = database_url.rsplit("/", 1)
    return f"{base}/{DEMO_DATABASE}"


def keychain_entry_path(folder: Path) -> Path:
    """The wallet file of the demo's credential (``keychain-pg_demo``; secrets/keychain.py)."""
    return folder / f"keychain-{KEYCHAIN_ALIAS}"


def demo_login_password(folder: Path) -> str:
    """The password of ``noetl_demo_app``: the one the wallet entry already holds, else a new one."""
    from sqlalchemy.engine import make_url

    from noetl_cloud.secrets.keychain import parse_entry

    path = keychain_entry_path(folder)
    if path.exists():
        dsn = parse_entry(path.read_text()).get("dsn")
        try:
            password = make_url(dsn).password if isinstance(dsn, str) else None
        except ValueError:
            password = None
        if isinstance(password, str) and password:
            return password
    return secrets.token_hex(24)


def ensure_database(database_url: str, wallet: Path) -> str:
    """Create the ``noetl_demo`` database, its tables and its login ``noetl_demo_app`` when missing, and
    write the login's DSN to the wallet entry ``keychain-pg_demo``; the database's URL (the stack's
    own login: what the demo driver reads its checks with)."""
    import pg8000.dbapi
    from sqlalchemy.engine import make_url

    from noetl_cloud.local.postgres import create_database

    url = make_url(database_url)
    create_database(
        DEMO_DATABASE, user=str(url.username), password=url.password, host=str(url.host), port=int(url.port or 5432)
    )
    demo = demo_database_url(database_url)
    wallet.mkdir(parents=True, exist_ok=True)
    password = demo_login_password(wallet)
    conn = pg8000.dbapi.connect(
        user=url.username, password=url.password, host=url.host, port=url.port, database=DEMO_DATABASE
    )
    try:
        conn.autocommit = True
        cursor = conn.cursor()
        for statement in TABLES:
            cursor.execute(statement)
        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (DEMO_LOGIN,))
        verb = "ALTER" if cursor.fetchone() else "CREATE"
        # Identifiers and the password are ours (a constant, hex): nothing a caller controls is spliced in.
        cursor.execute(f"{verb} ROLE {DEMO_LOGIN} LOGIN PASSWORD '{password}'")
        cursor.execute(f'GRANT CONNECT ON DATABASE "{DEMO_DATABASE}" TO {DEMO_LOGIN}')
        cursor.execute(f"GRANT SELECT, INSERT, UPDATE ON demo_queue, demo_orders TO {DEMO_LOGIN}")
        cursor.execute(f"GRANT USAGE ON SEQUENCE demo_queue_id_seq TO {DEMO_LOGIN}")
    finally:
        conn.close()
    entry = {
        "kind": "postgres",
        "dsn": make_url(demo).set(username=DEMO_LOGIN, password=password).render_as_string(hide_password=False),
    }
    path = keychain_entry_path(wallet)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(json.dumps(entry) + "\n")
    return demo


@contextmanager
def emulator(host: str) -> Iterator[None]:
    """``PUBSUB_EMULATOR_HOST`` set for the official client while the block runs."""
    import os

    previous = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = host
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = previous


def ensure_pubsub(project_id: str, emulator_host: str) -> None:
    """The ``demo-orders`` topic and the runtime's pull subscription of it, on the emulator."""
    from google.api_core.exceptions import AlreadyExists
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    with emulator(emulator_host):
        publisher = pubsub_v1.PublisherClient()
        topic = publisher.topic_path(project_id, PUBSUB_TOPIC)
        try:
            publisher.create_topic(name=topic)
        except AlreadyExists:
            pass
        subscriber = pubsub_v1.SubscriberClient()
        try:
            subscriber.create_subscription(
                request={
                    "name": subscriber.subscription_path(project_id, PUBSUB_SUBSCRIPTION),
                    "topic": topic,
                    "ack_deadline_seconds": 60,
                }
            )
        except AlreadyExists:
            pass
        finally:
            subscriber.close()


def api_client(env: Mapping[str, str]) -> ApiClient:
    return ApiClient(
        env["NOETL_API_URL"], token_source=static_token(env["NOETL_INTERNAL_API_TOKEN"]), timeout_s=30, retries=2
    )


def register(api: ApiClient, content: str) -> dict[str, Any]:
    """``POST /api/catalog`` (the same bytes again are a no-op); the catalog's answer."""
    return api.post("/api/catalog", json={"content": content}).raise_for_error().json  # type: ignore[no-any-return]


def activate(api: ApiClient, path: str) -> dict[str, Any]:
    """Register a push subscription and activate it unless it already is live; its registration."""
    view: dict[str, Any] = api.post("/api/subscriptions/register", json={"path": path}).raise_for_error().json
    if view["state"] == "registered":
        view = api.post(f"/api/subscriptions/{segment(view['subscription_id'])}/activate").raise_for_error().json
    return view


def prepare(env: Mapping[str, str], secrets_dir: Path) -> str:
    """Everything above, idempotently; one line saying what is there."""
    ensure_secrets(secrets_dir)
    ensure_database(env["NOETL_DATABASE_URL"], secrets_dir)
    ensure_pubsub(env["NOETL_PROJECT_ID"], env["PUBSUB_EMULATOR_HOST"])
    with api_client(env) as api:
        latest = api.get(f"/api/catalog/{PLAYBOOK_PATH}")
        if latest.status == 404:  # a demo run's own version is left in place
            register(api, playbook_content(run="none", api_url=PLACEHOLDER_API_URL))
        else:
            latest.raise_for_error()
        for item in LISTENERS:
            register(api, resource(item.resource))
            activate(api, item.path)
        register(api, resource("pubsub.subscription.yaml"))
    listeners = ", ".join(f"/ingress/{item.listener}" for item in LISTENERS)
    return f"{PLAYBOOK_PATH}, listeners {listeners}, {RUNTIME_SUBSCRIPTION} (topic {PUBSUB_TOPIC})"
