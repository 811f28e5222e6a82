"""One typed model of all configuration, built from an explicit environment mapping.

Every field is read from ``NOETL_<FIELD>`` unless it names another variable (the Google Cloud
emulator hosts keep their standard names). Nothing here reads ``os.environ`` by itself: the
caller passes the mapping, so tests pass ``env=`` and production passes ``os.environ`` once, at
start. A bad or missing variable fails with a :class:`~noetl_cloud.errors.ConfigError` that names
the variable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from noetl_cloud.errors import ConfigError

PREFIX = "NOETL_"

_POOL_NAME = r"^[a-z][a-z0-9-]{0,30}$"


def _env(name: str) -> dict[str, Any]:
    """Mark a field as read from a variable that does not follow the ``NOETL_`` convention."""
    return {"env": name}


class Settings(BaseModel):
    """Configuration of every role. Fields a role does not use may stay unset."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    environment: Literal["local", "test", "gcp"] = "local"
    role: str = "cli"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    # OpenTelemetry (docs/observability.md): spans off (the no-op tracer: no span objects at all),
    # to the local exporter (JSON lines under ``telemetry_dir``) or to Cloud Trace; the share of new
    # traces kept (a trace whose caller sampled it follows the caller); metrics likewise to the local
    # exporter or Cloud Monitoring, every ``metrics_export_s``.
    tracing: Literal["off", "local", "cloud"] = "off"
    tracing_sample_ratio: Annotated[float, Field(ge=0, le=1)] = 1.0
    metrics: Literal["off", "local", "cloud"] = "off"
    metrics_export_s: Annotated[float, Field(ge=1, le=3600)] = 60.0
    telemetry_dir: str | None = None

    # Identity and isolation boundary of everything this deployment writes.
    tenant_id: str = Field(default="default", min_length=1, max_length=128)
    organization_id: str = Field(default="default", min_length=1, max_length=128)
    node_id: Annotated[int, Field(ge=0, le=1023)] | None = None

    # Google Cloud.
    project_id: str | None = None
    region: str | None = None

    # Database: a plain DSN locally, the Cloud SQL connector when an instance is named.
    database_url: str | None = None
    cloudsql_instance: str | None = None
    db_user: str | None = None
    db_password: SecretStr | None = None
    db_name: str = "noetl"
    db_iam_auth: bool = False
    cloudsql_ip_type: Literal["private", "public", "psc"] = "private"
    db_pool_size: Annotated[int, Field(ge=1, le=50)] = 5
    db_max_overflow: Annotated[int, Field(ge=0, le=50)] = 2
    db_pool_timeout_s: Annotated[float, Field(gt=0, le=120)] = 10.0
    # Server-side prepared statements per connection (one round trip a statement instead of three);
    # off behind a transaction-mode pooler, which does not keep them.
    db_prepared_statements: bool = True
    # The one-time database access of a new instance (noetl_cloud.dbaccess, run by the migration job
    # before the upgrade): a built-in user of the instance with its password (Secret Manager), and the
    # IAM database users of the runtime roles, granted data access to what the schema owner creates.
    db_admin_user: str | None = None
    db_admin_password: SecretStr | None = None
    db_runtime_users: tuple[str, ...] = ()

    # Messaging.
    pools: tuple[str, ...] = ("shared",)
    events_topic: str = "noetl-events"
    command_topic_prefix: str = "noetl-commands-"
    # How committed outbox rows are published: by a relay thread of the process after the request's
    # commit ("background": no request waits on Pub/Sub; Cloud Run needs CPU always allocated for it,
    # docs/architecture.md), or inside the request ("inline"). The relay thread also sweeps rows a
    # crashed process left every ``outbox_sweep_every_s`` seconds (0: only the scheduled sweep).
    outbox_publish: Literal["background", "inline"] = "background"
    outbox_sweep_every_s: Annotated[float, Field(ge=0, le=3600)] = 10.0
    # How long the relay thread waits for more requests' rows before one Publish (bounds the added delay).
    outbox_linger_ms: Annotated[float, Field(ge=0, le=1000)] = 10.0
    # How long the ids the relay thread published wait to be marked published together with later ones
    # (one statement for many batches; a crash before the mark has those rows published again).
    outbox_settle_every_ms: Annotated[float, Field(ge=0, le=10_000)] = 200.0

    # Distributed execution: how long a claim holds without a heartbeat, how often a command is
    # issued before it fails with ``lease_expired``.
    command_lease_s: Annotated[float, Field(ge=1, le=3600)] = 60.0
    command_max_attempts: Annotated[int, Field(ge=1, le=100)] = 3
    # A command nobody claimed this long after its notification was published gets its notification
    # published again by the reaper (a lost message; the claim is atomic, so a spare one is harmless).
    command_renotify_after_s: Annotated[float, Field(ge=1, le=86_400)] = 300.0

    # The worker role (docs/distributed.md): its pool and identity, how its push endpoint is
    # authenticated, how often it extends a claim lease (at most every third of the lease).
    worker_pool: str = Field(default="shared", pattern=_POOL_NAME)
    worker_id: str | None = Field(default=None, min_length=1, max_length=128)
    worker_push_audience: str | None = None
    worker_push_service_account: str | None = None
    worker_push_token: SecretStr | None = None
    worker_heartbeat_s: Annotated[float, Field(gt=0, le=600)] = 10.0
    # Eager dispatch: for this long after a delivery arrived, the worker takes the next command of a
    # sequential step in its report's answer and runs it at once (0: every command through its topic).
    # Keep it well under the push subscription's ack deadline.
    worker_eager_budget_s: Annotated[float, Field(ge=0, le=600)] = 30.0
    # Threads per worker process for the further commands a report takes back from its pool (0: one
    # command at a time per delivery). Each runs that command's own chain, within the same budget.
    worker_eager_slots: Annotated[int, Field(ge=0, le=31)] = 4

    # Web and the internal API (docs/security.md, "What each role may call"). ``internal_api_token`` is
    # this process's own credential as a caller (locally); the callers a role's API admits, each mapped
    # to its caller roles (noetl_cloud.auth.roles): ``<role>=<sha256 hex of a token>`` locally,
    # ``<role>=<service account email>`` in the cloud (with ``internal_api_audience``). A process with a
    # token and no digests takes that one token as every caller role (test harnesses only).
    max_request_bytes: Annotated[int, Field(ge=1024, le=32 * 1024 * 1024)] = 1024 * 1024
    internal_api_token: SecretStr | None = None
    internal_api_token_digests: tuple[str, ...] = ()
    internal_api_audience: str | None = None
    internal_api_callers: tuple[str, ...] = ()
    api_url: str | None = None

    # Task isolation (docs/security.md): what an http task may reach besides public addresses
    # (addresses, networks or host names, each optionally with :port; empty: public only).
    http_tool_allow: tuple[str, ...] = ()

    # Coordination state (Firestore): one collection per deployment.
    kv_collection: str = Field(default="noetl-kv", pattern=r"^[A-Za-z0-9_-]{1,100}$")

    # The wallet.
    secrets_backend: Literal["local", "secret_manager"] = "local"
    secrets_dir: str | None = None
    # A task's ``auth: <alias>`` is the wallet secret ``<prefix><alias>`` (secrets/keychain.py).
    keychain_prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")] = "keychain-"

    # Emulators (standard variable names of the Google Cloud clients).
    pubsub_emulator_host: str | None = Field(default=None, json_schema_extra=_env("PUBSUB_EMULATOR_HOST"))
    firestore_emulator_host: str | None = Field(default=None, json_schema_extra=_env("FIRESTORE_EMULATOR_HOST"))
    storage_emulator_host: str | None = Field(default=None, json_schema_extra=_env("STORAGE_EMULATOR_HOST"))
    s3_endpoint_url: str | None = None

    # Store-and-forward spool (docs/spool.md).
    spool_backend: Literal["gcs", "s3", "local_disk"] | None = None
    spool_bucket: str | None = Field(default=None, min_length=1, max_length=222)
    spool_dir: str | None = None
    spool_lease_ttl_s: Annotated[float, Field(ge=1, le=3600)] = 30.0
    spool_drain_budget_s: Annotated[float, Field(gt=0, le=3600)] = 240.0
    spool_drainer_url: str | None = None
    # How long a drain waits for the execution of a downstream circuit's probe to end (docs/spool.md).
    spool_probe_wait_s: Annotated[float, Field(ge=0, le=600)] = 20.0
    # The execute role counts ended executions toward their subscription's declared downstream
    # circuits (needs the shared coordination store: Firestore or its emulator).
    downstream_circuits: bool = True

    # The local stack's scheduler (noetl_cloud.maintenance.scheduler): one period, in seconds, for
    # every maintenance job instead of each job's own (tests use 1).
    scheduler_every_s: Annotated[float, Field(gt=0, le=3600)] | None = None

    # The subscription runtime (docs/runtime.md): which subscription it holds, how often it reads
    # the subscription's state, how it groups dispatches, how long SIGTERM may take.
    subscription_path: str | None = Field(default=None, min_length=1, max_length=512)
    runtime_poll_s: Annotated[float, Field(gt=0, le=300)] = 2.0
    runtime_linger_ms: Annotated[float, Field(ge=0, le=5000)] = 20.0
    runtime_concurrency: Annotated[int, Field(ge=1, le=64)] = 4
    runtime_shutdown_s: Annotated[float, Field(gt=0, le=600)] = 8.0
    runtime_lease_ttl_s: Annotated[float, Field(ge=1, le=3600)] = 15.0
    # Each Pub/Sub lease extension of a held message (the stream's ack deadline).
    runtime_lease_extension_s: Annotated[int, Field(ge=10, le=600)] = 30
    nats_url: str | None = None
    # Kafka brokers of ``source: kafka`` subscriptions (``host:9092[,host:9092]``, the kafka extra).
    kafka_bootstrap_servers: str | None = Field(default=None, min_length=1, max_length=1024)

    # The projector role and replay (docs/replay.md): how its push endpoint is authenticated (as the
    # worker's), and every how many events of an execution it writes a replay-state snapshot.
    projector_push_audience: str | None = None
    projector_push_service_account: str | None = None
    projector_push_token: SecretStr | None = None
    # The projector's catch-up (POST /api/internal/projector/catch-up): executions started this recently
    # and quiet this long whose projection is behind their log are folded without a delivery.
    projector_catchup_window_s: Annotated[float, Field(ge=60, le=30 * 86_400)] = 86_400.0
    projector_catchup_settle_s: Annotated[float, Field(ge=0, le=86_400)] = 30.0
    replay_snapshot_every: Annotated[int, Field(ge=0, le=1_000_000)] = 1000
    # Snapshots kept per execution: the newest ``keep``, plus those whose event count is a multiple of
    # ``anchor_every`` (time travel far back starts near its cutoff; 0 = none); the rest are pruned.
    replay_snapshot_keep: Annotated[int, Field(ge=1, le=1000)] = 3
    replay_snapshot_anchor_every: Annotated[int, Field(ge=0, le=100_000_000)] = 25_000
    # Surface rows a projector instance keeps between deliveries (the executions it folded last), so a
    # fold at the tip does not load them again; 0 = off.
    projector_cache_rows: Annotated[int, Field(ge=0, le=10_000_000)] = 50_000

    # Frames (docs/frames.md): where workers reach the frames role, the payload store frame rows are
    # written to as Arrow IPC, and how many expired leases one reaper run releases.
    frames_url: str | None = None
    payload_backend: Literal["gcs", "s3", "filesystem"] | None = None
    payload_bucket: str | None = Field(default=None, min_length=1, max_length=222)
    payload_dir: str | None = None
    frame_reaper_limit: Annotated[int, Field(ge=1, le=100_000)] = 1000

    # Retention (docs/retention.md): days a terminal execution stays live (a tenant's or organization's
    # row in ``retention_policy`` overrides it), whether it is archived (Parquet in the archive bucket or
    # folder, same backend as payloads) before it is removed, days of partitions kept created ahead,
    # and how many executions one sweep (POST /api/internal/retention) archives.
    retention_days: Annotated[int, Field(ge=1, le=36_500)] = 30
    retention_archive: bool = True
    archive_bucket: str | None = Field(default=None, min_length=1, max_length=222)
    archive_dir: str | None = None
    partition_days_ahead: Annotated[int, Field(ge=1, le=60)] = 3
    retention_batch: Annotated[int, Field(ge=1, le=100_000)] = 500

    @field_validator(
        "pools",
        "internal_api_callers",
        "internal_api_token_digests",
        "db_runtime_users",
        "http_tool_allow",
        mode="before",
    )
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = tuple(p.strip() for p in value.split(",") if p.strip())
        return value

    @field_validator("pools")
    @classmethod
    def _check_pools(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("at least one pool is required")
        for pool in value:
            if not re.match(_POOL_NAME, pool):
                raise ValueError(f"pool name {pool!r} must match {_POOL_NAME}")
        if len(set(value)) != len(value):
            raise ValueError("pool names must be unique")
        return value

    @field_validator("internal_api_callers", "internal_api_token_digests")
    @classmethod
    def _check_role_entries(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        from noetl_cloud.auth.roles import parse_role_entries

        digests = info.field_name == "internal_api_token_digests"
        mapped = parse_role_entries(value, value="sha256 hex" if digests else "email")  # a ValueError names the entry
        for item in mapped:
            if digests and not re.fullmatch(r"[0-9a-f]{64}", item):
                raise ValueError(f"{item[:8]}... is not a SHA-256 digest (64 lower-case hex digits)")
            if not digests and "@" not in item:
                raise ValueError(f"{item!r} is not an email")
        return value

    @field_validator("http_tool_allow")
    @classmethod
    def _check_allow(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from noetl_cloud.tools.egress import parse_entry

        for entry in value:
            parse_entry(entry)  # a ValueError names the entry
        return value

    @field_validator("command_topic_prefix")
    @classmethod
    def _check_prefix(cls, value: str, info: ValidationInfo) -> str:
        # The relay and the outbox sweep tell a command notification from an event's mirror by this
        # prefix: an events topic under it would be taken for a pool's command topic.
        events = info.data.get("events_topic", "")
        if events.startswith(value):
            raise ValueError(f"the events topic {events!r} must not start with the command topic prefix {value!r}")
        return value

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def env_name(cls, field: str) -> str:
        """The environment variable a field is read from."""
        extra = cls.model_fields[field].json_schema_extra
        if isinstance(extra, dict) and isinstance(extra.get("env"), str):
            return str(extra["env"])
        return PREFIX + field.upper()

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: Any) -> Settings:
        """Build settings from ``env``; unknown ``NOETL_`` variables are errors (typos fail fast)."""
        known = {cls.env_name(name): name for name in cls.model_fields}
        values: dict[str, Any] = {}
        for key, raw in env.items():
            if key in known:
                if raw == "":
                    continue
                values[known[key]] = raw
            elif key.startswith(PREFIX) and not key.startswith(_TOOL_PREFIXES):
                raise ConfigError(
                    f"{key} is not a NoETL Cloud setting",
                    code="config_unknown_variable",
                    details={"variable": key},
                )
        values.update(overrides)
        try:
            return cls(**values)
        except ValidationError as exc:
            raise _config_error(cls, exc) from None

    # -- requirements of a role ---------------------------------------------------------------

    def require(self, *fields: str) -> None:
        """Fail with a message naming each variable a role needs and does not have."""
        missing = [self.env_name(f) for f in fields if getattr(self, f) in (None, "")]
        if missing:
            raise ConfigError(
                f"missing required setting(s): {', '.join(missing)}",
                code="config_missing",
                details={"variables": missing},
            )

    def command_topic(self, pool: str) -> str:
        return f"{self.command_topic_prefix}{pool}"


def events_topic_for(command_topic_prefix: str) -> str:
    """The events topic that goes with a private command prefix ``<run>-commands-`` (the test suite's
    and the benchmarks', which keep their messages apart from the stack's): ``<run>-events``."""
    return command_topic_prefix.removesuffix("-commands-") + "-events"


# Prefixed variables that are not settings: the local stack launcher's, the test suite's, and the
# local wallet's secrets (``NOETL_SECRET_<ALIAS>``, read only by the local secrets adapter).
_TOOL_PREFIXES = ("NOETL_LOCAL_", "NOETL_TEST_", "NOETL_SECRET_")


def _config_error(cls: type[Settings], exc: ValidationError) -> ConfigError:
    problems = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        variable = cls.env_name(field) if field in cls.model_fields else field
        problems.append({"variable": variable, "problem": err["msg"]})
    text = "; ".join(f"{p['variable']}: {p['problem']}" for p in problems)
    return ConfigError(f"invalid configuration: {text}", code="config_invalid", details=problems)
