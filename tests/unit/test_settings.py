from __future__ import annotations

import pytest

from noetl_cloud.errors import ConfigError
from noetl_cloud.settings import Settings


def test_defaults_need_no_environment() -> None:
    settings = Settings.from_env({})
    assert settings.pools == ("shared",) and settings.tenant_id == "default"
    assert settings.command_topic("shared") == "noetl-commands-shared"


def test_prefixed_and_standard_variables_are_read() -> None:
    settings = Settings.from_env(
        {
            "NOETL_POOLS": "shared, iot",
            "NOETL_DATABASE_URL": "postgresql://u:p@h:1/d",
            "NOETL_NODE_ID": "12",
            "NOETL_DB_IAM_AUTH": "true",
            "NOETL_INTERNAL_API_TOKEN": "s3cret",
            "PUBSUB_EMULATOR_HOST": "127.0.0.1:1",
            "HOME": "/root",
        }
    )
    assert settings.pools == ("shared", "iot") and settings.node_id == 12 and settings.db_iam_auth
    assert settings.pubsub_emulator_host == "127.0.0.1:1"
    assert "s3cret" not in repr(settings)  # secrets never print


@pytest.mark.parametrize(
    "env,variable",
    [
        ({"NOETL_NODE_ID": "5000"}, "NOETL_NODE_ID"),
        ({"NOETL_NODE_ID": "abc"}, "NOETL_NODE_ID"),
        ({"NOETL_POOLS": "Bad Pool"}, "NOETL_POOLS"),
        ({"NOETL_POOLS": "a,a"}, "NOETL_POOLS"),
        ({"NOETL_LOG_LEVEL": "LOUD"}, "NOETL_LOG_LEVEL"),
        ({"NOETL_MAX_REQUEST_BYTES": "10"}, "NOETL_MAX_REQUEST_BYTES"),
        ({"NOETL_DATABSE_URL": "typo"}, "NOETL_DATABSE_URL"),
        # an events topic under the command prefix would be taken for a pool's command topic
        ({"NOETL_COMMAND_TOPIC_PREFIX": "bench-", "NOETL_EVENTS_TOPIC": "bench-events"}, "NOETL_COMMAND_TOPIC_PREFIX"),
    ],
)
def test_a_bad_variable_fails_with_its_name(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env(env)
    assert variable in info.value.message


def test_require_names_each_missing_variable() -> None:
    settings = Settings.from_env({})
    with pytest.raises(ConfigError) as info:
        settings.require("database_url", "pubsub_emulator_host", "tenant_id")
    assert info.value.details == {"variables": ["NOETL_DATABASE_URL", "PUBSUB_EMULATOR_HOST"]}


def test_tool_variables_are_not_settings() -> None:
    assert Settings.from_env({"NOETL_LOCAL_STATE_DIR": "/x", "NOETL_TEST_FOO": "1"}).role == "cli"


def test_cloudsql_engine_needs_its_user() -> None:
    from noetl_cloud.db.engine import create_db_engine

    with pytest.raises(ConfigError) as info:
        create_db_engine(Settings.from_env({"NOETL_CLOUDSQL_INSTANCE": "p:r:i"}))
    assert "NOETL_DB_USER" in info.value.message
    with pytest.raises(ConfigError) as info:
        create_db_engine(Settings.from_env({}))
    assert "NOETL_DATABASE_URL" in info.value.message


def test_every_setting_is_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    missing = [Settings.env_name(f) for f in Settings.model_fields if f"`{Settings.env_name(f)}`" not in doc]
    assert missing == []


def test_cached_paramstyle_conversion_equals_pg8000s_own() -> None:
    import pg8000.legacy

    from noetl_cloud.db.engine import cache_paramstyle_conversion

    cases = [
        ("named", "SELECT a FROM t WHERE x = :x AND y = :y AND z = :x AND s = ':not_a_param'", {"x": 1, "y": 2}),
        ("format", "INSERT INTO t VALUES (%s, %s) -- comment %s", (1, "b")),
        ("named", "SELECT :x::text, $$ :inside $$", {"x": "v"}),
    ]
    import pg8000.dbapi

    original = pg8000.dbapi.convert_paramstyle  # pg8000's own; only the legacy module's name is replaced
    expected = [original(style, query, args) for style, query, args in cases]
    cache_paramstyle_conversion()
    cache_paramstyle_conversion()  # idempotent
    cached = pg8000.legacy.convert_paramstyle
    assert cached is not original and getattr(cached, "_noetl_cached", False)
    assert [cached(style, query, args) for style, query, args in cases] == expected
    assert [cached(style, query, args) for style, query, args in cases] == expected  # from the cache
