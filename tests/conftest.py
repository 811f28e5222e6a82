"""Test tiers, the local stack fixture, and per-test databases.

Tiers are folders: ``tests/unit`` (no network), ``tests/integration`` (PostgreSQL and the
emulators of the local stack), ``tests/e2e`` (whole flows). Each test is marked with its tier
from its folder, and the run ends with a per-tier count.

The stack is brought up once per session (or reused when it already runs: ``make test`` starts
it first); each database test gets its own database cloned from a migrated template, so tests
never see each other's rows.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pg8000.dbapi
import pytest

from noetl_cloud.settings import Settings
from tests import parallel
from tests.parallel import pytest_testnodedown, pytest_xdist_make_scheduler  # noqa: F401 - xdist's hooks

if TYPE_CHECKING:
    from noetl_cloud.local.kafka_broker import KafkaBroker
    from noetl_cloud.local.stack import LocalStack

ROOT = Path(__file__).resolve().parent.parent
TIERS = ("unit", "integration", "e2e")
# One template per xdist worker (each migrates its own; no worker drops another's).
TEMPLATE_DB = f"noetl_test_template_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = _tier(item.nodeid)
        if tier:
            item.add_marker(getattr(pytest.mark, tier))
    if parallel.is_worker(config):
        parallel.order(items)


def _tier(nodeid: str) -> str | None:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" and parts[1] in TIERS else None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    counts = {tier: {"passed": 0, "failed": 0, "skipped": 0} for tier in TIERS}
    for outcome in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(outcome, []):
            tier = _tier(getattr(report, "nodeid", ""))
            if tier is None or (outcome == "passed" and report.when != "call"):
                continue
            counts[tier]["failed" if outcome == "error" else outcome] += 1
    config = terminalreporter.config
    for title, lines in parallel.sections(config).items():
        if title != STACK_SECTION:
            terminalreporter.section(title)
            for line in lines:
                terminalreporter.write_line(line)
    terminalreporter.section("tests per tier")
    stack = next(iter(parallel.sections(config).get(STACK_SECTION, [])), None)
    for tier in TIERS:
        c = counts[tier]
        where = ""
        if tier != "unit" and stack:
            where = f"  (against the real stack: {stack})"
        terminalreporter.write_line(
            f"{tier}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped{where}"
        )


STACK_SECTION = "the stack"  # not printed as a section: the tiers' lines name it


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    _fuzz_section(config)
    parallel.worker_sessionfinish(config)
    if parallel.is_worker(config) or os.environ.get("NOETL_LOCAL_KEEP"):
        return
    # The controller of a parallel run stops what a worker started (a worker leaves it running).
    started = config.stash.get(parallel.STARTED, set())
    if "kafka" in started:
        _kafka().down(echo=lambda _line: None)
    if "stack" in started:
        _stack().down(echo=lambda _line: None)


def _fuzz_section(config: pytest.Config) -> None:
    from tests.e2e.fuzz_report import lines

    if found := lines(config):
        parallel.put_section(config, "openapi fuzz (schemathesis)", found)


def _state_dir() -> Path:
    return Path(os.environ.get("NOETL_LOCAL_STATE_DIR", str(ROOT / "local" / ".state")))


def _stack() -> LocalStack:
    from noetl_cloud.local.stack import LocalStack

    return LocalStack.from_env({**os.environ, "NOETL_LOCAL_STATE_DIR": str(_state_dir())})


def _kafka() -> KafkaBroker:
    from noetl_cloud.local.kafka_broker import KafkaBroker
    from noetl_cloud.local.layout import DEFAULT_PORT_BASE, default_state_dir

    base = int(os.environ.get("NOETL_LOCAL_PORT_BASE") or DEFAULT_PORT_BASE)
    return KafkaBroker(default_state_dir(os.environ, ROOT), base)


# -- the local stack -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def local_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The connection environment of a running local stack (started here if needed)."""
    stack = _stack()
    with parallel.exclusive(_state_dir(), "stack"):  # one worker at a time starts (or finds) it
        already = all(s.healthy for s in stack.status())
        env = stack.up(echo=lambda _line: None)
    if not already:
        parallel.started_here(request.config, "stack")
    described = (
        f"postgres {env['NOETL_DATABASE_URL'].rsplit('@', 1)[-1]}, pubsub {env['PUBSUB_EMULATOR_HOST']}, "
        f"firestore {env['FIRESTORE_EMULATOR_HOST']}, gcs {env['STORAGE_EMULATOR_HOST']}, "
        f"s3 {env['NOETL_S3_ENDPOINT_URL']}"
    )
    parallel.put_section(request.config, STACK_SECTION, [described])
    with pytest.MonkeyPatch.context() as mp:
        # The official Google clients find their emulators through these variables.
        for key in (
            "PUBSUB_EMULATOR_HOST",
            "FIRESTORE_EMULATOR_HOST",
            "STORAGE_EMULATOR_HOST",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_DEFAULT_REGION",
        ):
            mp.setenv(key, env[key])
        yield env
    if not already and parallel.owns_teardown(request.config) and not os.environ.get("NOETL_LOCAL_KEEP"):
        stack.down(echo=lambda _line: None)


def _admin(env: dict[str, str]) -> pg8000.dbapi.Connection:
    from sqlalchemy.engine import make_url

    url = make_url(env["NOETL_DATABASE_URL"])
    conn = pg8000.dbapi.connect(
        user=url.username, password=url.password, host=url.host, port=url.port, database="postgres"
    )
    conn.autocommit = True
    return conn


def _url_for(env: dict[str, str], database: str) -> str:
    base, _name = env["NOETL_DATABASE_URL"].rsplit("/", 1)
    return f"{base}/{database}"


@pytest.fixture(scope="session")
def template_database(local_env: dict[str, str]) -> str:
    """A database migrated to head, cloned by every database test."""
    from noetl_cloud.db.engine import create_db_engine
    from noetl_cloud.db.migrate import upgrade

    admin = _admin(local_env)
    try:
        cur = admin.cursor()
        cur.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{TEMPLATE_DB}"')
    finally:
        admin.close()
    engine = create_db_engine(Settings(database_url=_url_for(local_env, TEMPLATE_DB)), pool_size=1)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    return TEMPLATE_DB


def _scratch_database(env: dict[str, str], template: str) -> Iterator[str]:
    name = f"t_{secrets.token_hex(6)}"
    admin = _admin(env)
    try:
        admin.cursor().execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        yield _url_for(env, name)
    finally:
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def database_url(local_env: dict[str, str], template_database: str) -> Iterator[str]:
    """A fresh database at the head migration, dropped after the test."""
    yield from _scratch_database(local_env, template_database)


@pytest.fixture(scope="module")
def module_database_url(local_env: dict[str, str], template_database: str) -> Iterator[str]:
    """A fresh database at the head migration shared by a module's tests (for role processes a module
    starts once), dropped after the module."""
    yield from _scratch_database(local_env, template_database)


@pytest.fixture
def empty_database_url(local_env: dict[str, str]) -> Iterator[str]:
    """A fresh database with no tables at all."""
    yield from _scratch_database(local_env, "template0")


@pytest.fixture
def db_settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, db_pool_size=10, db_max_overflow=10, environment="test")


@pytest.fixture
def db_engine(db_settings: Settings) -> Iterator[object]:
    from noetl_cloud.db.engine import create_db_engine

    engine = create_db_engine(db_settings)
    yield engine
    engine.dispose()
