from __future__ import annotations

import pytest

from noetl_cloud.cli import main


def test_downgrade_without_a_target_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "downgrade"]) == 2
    assert "noetl-cloud: usage: downgrade needs a target revision" in capsys.readouterr().err


def test_configuration_errors_name_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOETL_DATABASE_URL", raising=False)
    monkeypatch.delenv("NOETL_CLOUDSQL_INSTANCE", raising=False)
    assert main(["db", "upgrade"]) == 2
    err = capsys.readouterr().err
    assert "config_missing" in err and "NOETL_DATABASE_URL" in err


def test_unknown_subcommand_exits_with_usage() -> None:
    with pytest.raises(SystemExit) as info:
        main(["nope"])
    assert info.value.code == 2
