"""The local stack: ``noetl-cloud local up | down | status | env``.

State lives in one folder (:mod:`noetl_cloud.local.layout` finds it): ``stack.json`` records what
this launcher started (pid, port, start-up time), ``env`` holds the connection environment (the
operator's credentials, so it is readable by its owner only), ``tokens.json`` one token per purpose
(:mod:`noetl_cloud.local.tokens`), ``logs/`` each component's log.

``up`` is idempotent: a component whose recorded process still runs and answers is reused; a
port that answers but was not started by this state folder is an error, never silently shared.
``down`` stops only the processes recorded in ``stack.json``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from noetl_cloud.local import emulators, process, provision, tokens
from noetl_cloud.local.components import PROJECT_ID, Component, StackError
from noetl_cloud.local.layout import (
    DEFAULT_PORT_BASE,
    DEMO_API_PORT,
    ORDER,
    ROLE_PORTS,
    RUNTIME,
    SCHEDULER,
    SCHEDULER_PORT,
    Ports,
    default_state_dir,
    project_root,
)
from noetl_cloud.local.postgres import Postgres
from noetl_cloud.local.roles import role, runtime, scheduler
from noetl_cloud.local.status import ComponentStatus, scheduler_report

STATUS_GRACE_S = 6.0  # how long `local status` retries the health check of a running component
START_TIMEOUT_S = 90.0
#: gunicorn processes per role (default 2). The ingress runs one, as its container does
#: (functions/entrypoint.sh): its per-instance state - the listener configurations it keeps serving
#: while the control plane is down, the spool's size view - is then one instance's, as deployed.
ROLE_WORKERS = {"ingress": 1}


class LocalStack:
    def __init__(
        self,
        state_dir: Path,
        port_base: int = DEFAULT_PORT_BASE,
        pools: tuple[str, ...] = ("shared",),
        root: Path | None = None,
        http_allow: tuple[str, ...] = (),
        telemetry: tuple[str, str] = ("local", "local"),
    ) -> None:
        self.state_dir = state_dir
        self.telemetry = telemetry  # NOETL_TRACING and NOETL_METRICS of the roles
        self.pools = pools
        self.http_allow = http_allow
        self.root = root or project_root()
        self.ports = Ports.from_base(port_base)
        self.port_base = port_base
        self.state_file = state_dir / "stack.json"
        self.env_file = state_dir / "env"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LocalStack:
        from noetl_cloud.settings import Settings

        base = int(env.get("NOETL_LOCAL_PORT_BASE") or DEFAULT_PORT_BASE)
        pools = Settings.from_env({k: v for k, v in env.items() if k == "NOETL_POOLS"}).pools
        # What the local worker's http tasks may reach besides the demo's API (NOETL_HTTP_TOOL_ALLOW's form).
        extra = {"NOETL_HTTP_TOOL_ALLOW": env.get("NOETL_LOCAL_HTTP_TOOL_ALLOW", "")}
        http_allow = Settings.from_env(extra).http_tool_allow
        telemetry = (env.get("NOETL_LOCAL_TRACING") or "local", env.get("NOETL_LOCAL_METRICS") or "local")
        return cls(default_state_dir(env), base, pools, http_allow=http_allow, telemetry=telemetry)

    # -- components ---------------------------------------------------------------------------

    def components(self) -> dict[str, Component]:
        factories: dict[str, Callable[[], Component]] = {
            "postgres": lambda: Postgres(self.state_dir, self.ports.postgres).component(),
            "pubsub": lambda: emulators.pubsub(self.state_dir, self.ports.pubsub),
            "firestore": lambda: emulators.firestore(self.state_dir, self.ports.firestore),
            "gcs": lambda: emulators.gcs(self.state_dir, self.ports.gcs),
            "s3": lambda: emulators.s3(self.state_dir, self.ports.s3),
        }
        return {name: factories[name]() for name in ORDER}

    def available_roles(self) -> list[str]:
        """The roles this checkout has (``functions/<role>/main.py``), in start order."""
        return [r for r in ROLE_PORTS if (self.root / "functions" / r / "main.py").exists()]

    def role_components(
        self, roles: list[str], env: dict[str, str], keys: Mapping[str, str] | None = None
    ) -> dict[str, Component]:
        """The roles' components with ``env``; given the stack's ``keys`` (its tokens), each role's
        environment carries only that role's credentials (:func:`noetl_cloud.local.tokens.role_env`)."""
        out = {}
        for r in roles:
            port = self.port_base + ROLE_PORTS[r]
            role_env = tokens.role_env(r, env, keys) if keys is not None else env
            if r == RUNTIME:
                from noetl_cloud.demo.setup import RUNTIME_SUBSCRIPTION

                runtime_env = {**role_env, "NOETL_SUBSCRIPTION_PATH": RUNTIME_SUBSCRIPTION} if env else role_env
                out[r] = runtime(self.state_dir, port, self.root, runtime_env)
            else:
                out[r] = role(self.state_dir, port, r, self.root, role_env, workers=ROLE_WORKERS.get(r, 2))
        return out

    def scheduler_component(self, env: dict[str, str], keys: Mapping[str, str] | None = None) -> Component:
        """The scheduler, calling every role a maintenance job targets on this stack's ports (as the
        scheduler's caller role, given the stack's ``keys``)."""
        from noetl_cloud.maintenance.schedule import JOBS

        urls = {job.role: f"http://127.0.0.1:{self.port_base + ROLE_PORTS[job.role]}" for job in JOBS}
        scheduler_env = tokens.role_env(SCHEDULER, env, keys) if keys is not None else env
        return scheduler(self.state_dir, self.port_base + SCHEDULER_PORT, urls, scheduler_env)

    # -- state file ---------------------------------------------------------------------------

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {"components": {}}
        return data if isinstance(data, dict) else {"components": {}}

    def _save(self, state: dict[str, Any]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
        tmp.replace(self.state_file)

    # -- commands -----------------------------------------------------------------------------

    def up(self, echo: Callable[[str], None] = print, roles: list[str] | None = None) -> dict[str, str]:
        """Start what is not running, wait until each answers, migrate, create the topics, start
        ``roles``; the connection environment."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / ".gitignore").write_text("*\n")
        state = self._load()
        recorded: dict[str, Any] = state.setdefault("components", {})
        comps = self.components()
        total = time.monotonic()
        self._start(ORDER, comps, recorded, state, echo)
        env = self._env(comps)
        migrated = time.monotonic()
        provision.migrate(env)
        echo(f"{'migrations':<10} applied in {time.monotonic() - migrated:5.2f} s")
        topics = provision.ensure_topics(env, self.pools)
        echo(f"{'topics':<10} {', '.join(topics)}")
        if roles:
            keys = tokens.ensure_tokens(self.state_dir)
            env.update(self._role_env(env, keys))
            provision.ensure_spool_bucket(env)
            role_comps = self.role_components(roles, env, keys)
            self._start(tuple(r for r in roles if r != RUNTIME), role_comps, recorded, state, echo)
            if "worker" in roles:
                echo(f"{'push':<10} {provision.ensure_worker_push(env, self.port_base + ROLE_PORTS['worker'])}")
            if "projector" in roles:
                echo(f"{'push':<10} {provision.ensure_projector_push(env, self.port_base + ROLE_PORTS['projector'])}")
            if "execute" in roles:
                # The runtime reads its subscription from the catalog as it starts: register it first.
                from noetl_cloud.demo.setup import prepare

                echo(f"{'demo':<10} {prepare(env, Path(env['NOETL_SECRETS_DIR']))}")
            if RUNTIME in roles:
                self._start((RUNTIME,), role_comps, recorded, state, echo)
            self._start((SCHEDULER,), {SCHEDULER: self.scheduler_component(env, keys)}, recorded, state, echo)
        described = env
        if not roles and self._roles_running(recorded, env):
            # Roles started earlier still run: the file keeps describing them (the answer stays the
            # services' environment, what a caller of ``up`` without roles asked for).
            described = {**env, **self._role_env(env, tokens.ensure_tokens(self.state_dir))}
        self._write_env(described)
        echo(f"stack up in {time.monotonic() - total:.2f} s; environment: {self.env_file}")
        return env

    def _start(
        self,
        names: tuple[str, ...],
        comps: dict[str, Component],
        recorded: dict[str, Any],
        state: dict[str, Any],
        echo: Callable[[str], None],
    ) -> None:
        for name in names:
            comp = comps[name]
            entry = recorded.get(name, {})
            if process.alive(entry.get("pid"), comp.marker) and comp.healthy():
                echo(f"{name:<10} reused     port {comp.port}  (pid {entry['pid']})")
                continue
            if process.port_open(comp.port):
                raise StackError(
                    f"{name}: port {comp.port} is already in use by a process this state folder "
                    f"({self.state_dir}) did not start; stop it or set NOETL_LOCAL_PORT_BASE"
                )
            started = time.monotonic()
            pid = comp.start()
            if not process.wait_until(comp.healthy, timeout=START_TIMEOUT_S):
                log = comp.log_path
                comp.stop(pid)
                raise StackError(
                    f"{name} did not answer within {START_TIMEOUT_S:.0f} s; last log lines:\n{process.tail(log)}"
                )
            seconds = round(time.monotonic() - started, 2)
            recorded[name] = {"pid": pid, "port": comp.port, "startup_seconds": seconds, "started_at": time.time()}
            self._save(state)
            echo(f"{name:<10} started in {seconds:5.2f} s  port {comp.port}  (pid {pid})")

    def _roles_running(self, recorded: dict[str, Any], env: dict[str, str]) -> bool:
        """Whether a role this state folder started still runs (``up`` without roles, as the test
        suite calls it, must not drop their settings from the environment file)."""
        roles = [name for name in ROLE_PORTS if name in recorded]
        comps = self.role_components(roles, env) if roles else {}
        return any(process.alive(recorded[name].get("pid"), comps[name].marker) for name in roles if name in comps)

    def _role_env(self, env: dict[str, str], keys: Mapping[str, str]) -> dict[str, str]:
        """What the roles need beyond the stack: the operator's credentials (the ``env`` file's; each
        role gets its own instead, :meth:`role_components`) and the control plane's URL."""
        return {
            # The operator's API token and the push tokens: the emulator's push carries no credentials,
            # so the local worker and projector take their bearer tokens in the push endpoint's query
            # (deployed, they verify the push OIDC token).
            **tokens.operator_env(keys),
            "NOETL_API_URL": f"http://127.0.0.1:{self.port_base + ROLE_PORTS['execute']}",
            "NOETL_WORKER_POOL": "shared",
            # Cursor loops: workers claim frames from the frames role and write frame rows to a folder.
            "NOETL_FRAMES_URL": f"http://127.0.0.1:{self.port_base + ROLE_PORTS['frames']}",
            "NOETL_PAYLOAD_BACKEND": "filesystem",
            "NOETL_PAYLOAD_DIR": str(self.state_dir / "payloads"),
            # The local wallet: one file per secret alias (the demo's listener secrets live there).
            "NOETL_SECRETS_DIR": str(self.state_dir / "secrets"),
            # One spool for every subscription that spools (fake-gcs-server); the drainer lists it.
            "NOETL_SPOOL_BACKEND": "gcs",
            "NOETL_SPOOL_BUCKET": provision.SPOOL_BUCKET,
            # A recovered circuit, and an ingress spooling while the probe is due, ask the drainer to drain now.
            "NOETL_SPOOL_DRAINER_URL": f"http://127.0.0.1:{self.port_base + ROLE_PORTS['spool_drainer']}",
            # http tasks reach public addresses and, locally, the demo's API only (not the stack's services).
            "NOETL_HTTP_TOOL_ALLOW": ",".join([f"127.0.0.1:{self.port_base + DEMO_API_PORT}", *self.http_allow]),
            # Spans and metrics as JSON lines under the state folder (docs/observability.md);
            # NOETL_LOCAL_TRACING / NOETL_LOCAL_METRICS=off start the stack without them (benchmarks).
            "NOETL_TRACING": self.telemetry[0],
            "NOETL_METRICS": self.telemetry[1],
            "NOETL_METRICS_EXPORT_S": "5",
            "NOETL_TELEMETRY_DIR": str(self.state_dir / "telemetry"),
        }

    def start_scheduler(self, env: dict[str, str], echo: Callable[[str], None] = print) -> None:
        """Start the scheduler with ``env`` (the roles' token, ``NOETL_SCHEDULER_EVERY_S``) unless it runs;
        recorded, so ``down`` stops it. For a caller that starts the roles itself (the fault suite)."""
        state = self._load()
        recorded: dict[str, Any] = state.setdefault("components", {})
        self._start((SCHEDULER,), {SCHEDULER: self.scheduler_component(env)}, recorded, state, echo)

    def stop_role(self, name: str, echo: Callable[[str], None] = print) -> bool:
        """Stop one running role of this stack (the next ``up`` with it starts it again); whether it ran."""
        state = self._load()
        recorded: dict[str, Any] = state.get("components", {})
        entry = recorded.get(name)
        if entry is None:
            return False
        comp = self.role_components([name], {})[name]
        running = process.alive(entry.get("pid"), comp.marker)
        if running:
            comp.stop(int(entry["pid"]))
            echo(f"{name:<10} stopped")
        del recorded[name]
        self._save(state)
        return running

    def down(self, echo: Callable[[str], None] = print, *, purge: bool = False) -> None:
        """Stop what this state folder started; with ``purge`` also delete its data."""
        state = self._load()
        recorded: dict[str, Any] = state.get("components", {})
        if not recorded:
            echo("nothing to stop")
        comps = {
            **self.components(),
            **self.role_components(self._recorded_roles(recorded), {}),
            SCHEDULER: self.scheduler_component({}),
        }
        for name in [SCHEDULER, *reversed(list(ROLE_PORTS)), *reversed(ORDER)]:
            entry = recorded.get(name)
            if entry is None:
                continue
            comp = comps[name]
            if process.alive(entry.get("pid"), comp.marker):
                comp.stop(int(entry["pid"]))
                echo(f"{name:<10} stopped")
            else:
                echo(f"{name:<10} was not running")
            del recorded[name]
            self._save(state)
        if purge:
            data_dir = Postgres(self.state_dir, self.ports.postgres).data_dir
            shutil.rmtree(data_dir.parent, ignore_errors=True)
            shutil.rmtree(self.state_dir, ignore_errors=True)
            echo(f"removed {self.state_dir}")

    def status(self, *, every_role: bool = False) -> list[ComponentStatus]:
        """Every backing service and the roles the state folder recorded; with ``every_role`` also every
        role of this checkout, running or not (after ``down`` each is listed as stopped)."""
        recorded = self._load().get("components", {})
        out = []
        available = self.available_roles() if every_role else []
        roles = [r for r in ROLE_PORTS if r in recorded or r in available]
        comps = {**self.components(), **self.role_components(roles, {})}
        if SCHEDULER in recorded or every_role:
            comps[SCHEDULER] = self.scheduler_component({})
        for name, comp in comps.items():
            entry = recorded.get(name, {})
            running = process.alive(entry.get("pid"), comp.marker)
            kind = "role" if name in ROLE_PORTS else SCHEDULER if name == SCHEDULER else "service"
            out.append(
                ComponentStatus(
                    name=name,
                    port=comp.port,
                    pid=entry.get("pid") if running else None,
                    running=running,
                    # A running component gets a few seconds: on a busy machine a check's answer can be
                    # late without anything being wrong.
                    healthy=running and process.wait_until(comp.healthy, timeout=STATUS_GRACE_S, interval=0.5),
                    startup_seconds=entry.get("startup_seconds"),
                    kind=kind,
                    recorded=name in recorded,
                )
            )
            if name == SCHEDULER and running:
                report = scheduler_report(comp.port)
                jobs, subs = report.get("jobs"), report.get("subscriptions")
                out[-1].jobs = jobs if isinstance(jobs, list) else None
                out[-1].subscriptions = subs if isinstance(subs, dict) else None
        return out

    def env(self) -> dict[str, str]:
        """The connection environment written by the last ``up``."""
        try:
            lines = self.env_file.read_text().splitlines()
        except OSError:
            raise StackError(f"the local stack is not up (no {self.env_file}): run `noetl-cloud local up`") from None
        return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))

    @staticmethod
    def _recorded_roles(recorded: dict[str, Any]) -> list[str]:
        return [r for r in ROLE_PORTS if r in recorded]

    # -- helpers ------------------------------------------------------------------------------

    def _env(self, comps: dict[str, Component]) -> dict[str, str]:
        env = {
            "NOETL_ENVIRONMENT": "local",
            "NOETL_PROJECT_ID": PROJECT_ID,
            "GOOGLE_CLOUD_PROJECT": PROJECT_ID,
            "NOETL_POOLS": ",".join(self.pools),
        }
        for comp in comps.values():
            env.update(comp.env)
        return env

    def _write_env(self, env: dict[str, str]) -> None:
        body = "# written by `noetl-cloud local up`\n" + "".join(f"{k}={v}\n" for k, v in sorted(env.items()))
        tokens.write_private(self.env_file, body)  # the operator's credentials: owner only (0600)


def export_lines(env: Mapping[str, str]) -> str:
    """``export K='V'`` lines for ``eval "$(noetl-cloud local env)"``."""
    return "".join(f"export {k}='{v}'\n" for k, v in sorted(env.items()))


__all__ = ["LocalStack", "StackError", "export_lines"]
