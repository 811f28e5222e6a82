"""local/docker-compose.yml runs the product as `make up` does, from the one image (no Docker engine
here: the structure is what is checked, against the local stack's own definitions)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl_cloud.local import compose, provision
from noetl_cloud.local.layout import DEFAULT_PORT_BASE, ROLE_PORTS, RUNTIME, Ports
from noetl_cloud.local.stack import LocalStack
from noetl_cloud.local.tokens import ensure_tokens
from noetl_cloud.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "local" / "docker-compose.yml"
ROLES = sorted(p.parent.name for p in (ROOT / "functions").glob("*/main.py"))
BACKING = ("postgres", "pubsub", "firestore", "gcs", "s3")
ONE_SHOT = ("migrate", "setup")
IMAGE = "noetl-cloud:local"


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def _default(image: str) -> str:
    """``${VAR:-default}`` -> default."""
    match = re.fullmatch(r"\$\{\w+:-([^}]*)\}", image)
    return match.group(1) if match else image


def test_every_role_runs_from_the_one_image_built_once() -> None:
    services = _services()
    assert set(services) == set(BACKING) | set(ONE_SHOT) | set(ROLES)
    assert len(ROLES) == 7
    for role in ROLES:
        assert services[role]["image"] == IMAGE and services[role]["pull_policy"] == "never"
        assert services[role]["environment"]["NOETL_ROLE"] == role
        assert "build" not in services[role]
    builders = [name for name, s in services.items() if "build" in s]
    assert builders == ["migrate"]
    build = services["migrate"]["build"]
    assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == ROOT / "functions" / "Dockerfile"
    assert services["migrate"]["entrypoint"] == ["noetl-cloud"] and services["migrate"]["command"] == ["db", "upgrade"]
    assert services["setup"]["entrypoint"] == ["python", "-m", "noetl_cloud.local.compose"]


def test_images_are_pinned_and_every_long_running_service_has_a_healthcheck() -> None:
    for name, service in _services().items():
        image = _default(service["image"])
        if image != IMAGE:
            assert not image.endswith(":latest") and re.search(r":\d+\.\d+", image), f"{name}: {image} is not pinned"
        if name not in ONE_SHOT:
            check = service["healthcheck"]["test"]
            assert check[0] == "CMD" and len(check) > 2, name
    roles_check = " ".join(_services()["execute"]["healthcheck"]["test"])
    assert "http://127.0.0.1:8080/healthz" in roles_check


def test_state_is_kept_in_volumes_the_pubsub_data_dir_included() -> None:
    services = _services()
    pubsub = services["pubsub"]
    data_dir = next(a.split("=", 1)[1] for a in pubsub["command"] if a.startswith("--data-dir="))
    assert f"pubsub:{data_dir}" in pubsub["volumes"]
    assert "postgres:/var/lib/postgresql/data" in services["postgres"]["volumes"]
    root = services["gcs"]["command"][services["gcs"]["command"].index("-filesystem-root") + 1]
    assert f"gcs:{root}" in services["gcs"]["volumes"]
    # The wallet the setup writes is the one execute reads; the payload folder is shared by the roles.
    env = services["execute"]["environment"]
    assert f"wallet:{env['NOETL_SECRETS_DIR']}" in services["setup"]["volumes"]
    assert f"wallet:{env['NOETL_SECRETS_DIR']}" in services["execute"]["volumes"]
    assert f"payloads:{env['NOETL_PAYLOAD_DIR']}" in services["worker"]["volumes"]
    dockerfile = (ROOT / "functions" / "Dockerfile").read_text()
    assert "chown -R 10001:10001 /var/lib/noetl" in dockerfile  # a fresh named volume is writable


def test_the_start_order_is_migrate_then_roles_then_setup_then_the_runtime() -> None:
    services = _services()
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for role in ROLES:
        depends = services[role]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}
        for backing in ("pubsub", "firestore", "gcs", "s3"):
            assert depends[backing] == {"condition": "service_healthy"}
    assert services["setup"]["depends_on"] == {"execute": {"condition": "service_healthy"}}
    assert services[RUNTIME]["depends_on"]["setup"] == {"condition": "service_completed_successfully"}


@pytest.mark.parametrize("role", ROLES)
def test_each_role_gets_valid_settings_and_what_local_up_gives_its_process(role: str, tmp_path: Path) -> None:
    env = {k: str(v) for k, v in _services()[role]["environment"].items()}
    env = {k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", v) for k, v in env.items()}
    Settings.from_env(env)  # every NOETL_ variable is a setting, with a valid value
    # (each process's credentials aside: compose runs one shared token, local up one per purpose)
    given_by_local_up = LocalStack(tmp_path)._role_env({}, ensure_tokens(tmp_path))
    assert set(given_by_local_up) <= set(env), sorted(set(given_by_local_up) - set(env))
    assert env["NOETL_API_URL"] == "http://execute:8080" and env["NOETL_FRAMES_URL"] == "http://frames:8080"
    if role == RUNTIME:
        from noetl_cloud.demo.setup import RUNTIME_SUBSCRIPTION

        assert env["NOETL_SUBSCRIPTION_PATH"] == RUNTIME_SUBSCRIPTION


def test_the_host_ports_are_the_local_stacks() -> None:
    services = _services()
    ports = Ports.from_base(DEFAULT_PORT_BASE)
    for name in BACKING:
        host = int(services[name]["ports"][0].split(":")[1])
        assert host == getattr(ports, name), name
    for role in ROLES:
        assert services[role]["ports"] == [f"127.0.0.1:{DEFAULT_PORT_BASE + ROLE_PORTS[role]}:8080"]


def test_the_emulator_pushes_to_the_worker_and_projector_services() -> None:
    env = {k: str(v) for k, v in _services()["setup"]["environment"].items()}
    env = {k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", v) for k, v in env.items()}
    pushes = compose.push_subscriptions(env)
    defaults = Settings()
    assert pushes == {
        f"{defaults.command_topic('shared')}-worker": (
            defaults.command_topic("shared"),
            "http://worker:8080/?token=local-compose-token",
        ),
        f"{defaults.events_topic}-projector": (
            defaults.events_topic,
            "http://projector:8080/?token=local-compose-token",
        ),
    }
    services = _services()
    for _topic, endpoint in pushes.values():
        host = endpoint.split("/")[2].split(":")[0]
        assert host in services and services[host]["environment"]["NOETL_ROLE"] == host


def test_setup_creates_topics_pushes_bucket_and_demo_in_that_order(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(provision, "ensure_topics", lambda env, pools: calls.append(("topics", pools)) or ["t"])
    monkeypatch.setattr(
        provision, "ensure_push", lambda env, topic, sub, endpoint: calls.append(("push", (topic, sub)))
    )
    monkeypatch.setattr(provision, "ensure_spool_bucket", lambda env: calls.append(("bucket", None)))
    import noetl_cloud.demo.setup as demo_setup

    monkeypatch.setattr(demo_setup, "prepare", lambda env, secrets: calls.append(("demo", str(secrets))) or "ready")
    env = {k: str(v) for k, v in _services()["setup"]["environment"].items()}
    env = {k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", v) for k, v in env.items()}
    lines = compose.setup(env)
    assert [c[0] for c in calls] == ["topics", "push", "push", "bucket", "demo"]
    assert calls[0][1] == ("shared",) and calls[-1][1] == env["NOETL_SECRETS_DIR"]
    assert {c[1] for c in calls if c[0] == "push"} == {(t, s) for s, (t, _e) in compose.push_subscriptions(env).items()}
    assert lines[-1] == "demo ready" and "token" not in "".join(lines)  # the push token is not printed
