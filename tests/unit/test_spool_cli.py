"""``noetl-cloud spool ls|show|dlq`` on a local_disk spool (the command's own code path, no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noetl_cloud.cli import main
from noetl_cloud.spool.backends import FixedBackend
from noetl_cloud.spool.local_disk import LocalDiskSpool
from tests.unit.spool_support import SUB, world


@pytest.fixture
def spool_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("NOETL_API_URL", "NOETL_SPOOL_BACKEND", "NOETL_SPOOL_BUCKET", "NOETL_SPOOL_DIR"):
        monkeypatch.delenv(name, raising=False)
    w = world()
    w.engine.backends = FixedBackend(LocalDiskSpool(tmp_path), "local_disk://test")
    target = w.target()
    for n in range(3):
        w.spool(target, n, key="ab"[n % 2])
    backend = w.engine.backends.resolve(target.spool)[0]
    backend.move_to_dlq(backend.list(SUB, "k-b")[0], "max_replay_attempts")
    return tmp_path


def test_ls_lists_the_live_items_in_lane_order_with_totals(spool_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spool", "ls", SUB, "--backend", "local_disk", "--dir", str(spool_dir), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["items"] == 2 and [r["message_id"] for r in listing["list"]] == ["m0", "m2"]
    assert main(["spool", "ls", SUB, "--backend", "local_disk", "--dir", str(spool_dir)]) == 0
    assert "2 spooled item(s)" in capsys.readouterr().out


def test_dlq_lists_dead_letters_with_their_reason_and_show_prints_one_item(
    spool_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["spool", "dlq", SUB, "--backend", "local_disk", "--dir", str(spool_dir), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["list"]
    assert (row["message_id"], row["reason"]) == ("m1", "max_replay_attempts")
    args = ["spool", "show", SUB, row["name"], "--backend", "local_disk", "--dir", str(spool_dir), "--payload"]
    assert main(args) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["ref"] == "noetl://spool/" + row["name"] and json.loads(shown["payload"]) == {"n": 1, "key": "b"}


def test_without_any_spool_location_the_command_names_what_to_set(
    spool_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["spool", "ls", SUB]) == 2
    assert "NOETL_SPOOL_BACKEND" in capsys.readouterr().err
    assert main(["spool", "ls", SUB, "--backend", "gcs"]) == 2
    assert "usage" in capsys.readouterr().err


@pytest.mark.parametrize("action", ["ls", "dlq", "drain"])
def test_a_subscription_the_catalog_does_not_have_is_an_error_not_an_empty_listing(
    action: str, spool_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from noetl_cloud.spool.bootstrap import CatalogTargets

    asked: list[str] = []

    def target(self: CatalogTargets, subscription: str) -> None:
        asked.append(subscription)
        return None  # what the catalog's 404 (or a playbook at that path) comes to

    monkeypatch.setattr(CatalogTargets, "target", target)
    monkeypatch.setenv("NOETL_API_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("NOETL_INTERNAL_API_TOKEN", "t")
    args = ["spool", action, "no/such/subscription"]
    assert main([*args, "--backend", "local_disk", "--dir", str(spool_dir)] if action != "drain" else args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and asked == ["no/such/subscription"]
    assert captured.err.startswith("noetl-cloud: subscription_not_found: no subscription no/such/subscription")


def test_when_the_control_plane_does_not_answer_the_spool_is_read_all_the_same(
    spool_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from noetl_cloud.errors import Unavailable
    from noetl_cloud.spool.bootstrap import CatalogTargets

    def target(self: CatalogTargets, subscription: str) -> None:
        raise Unavailable("the control plane did not answer", code="control_plane_unavailable")

    monkeypatch.setattr(CatalogTargets, "target", target)
    monkeypatch.setenv("NOETL_API_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("NOETL_INTERNAL_API_TOKEN", "t")
    assert main(["spool", "ls", SUB, "--backend", "local_disk", "--dir", str(spool_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == 2


def test_resend_moves_dead_letters_back_to_their_lanes_one_or_all_matching(
    spool_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--backend", "local_disk", "--dir", str(spool_dir)]
    spool = LocalDiskSpool(spool_dir)
    (dead,) = spool.list(SUB, dlq=True)
    assert main(["spool", "resend", SUB, "--all", "--reason", "poison", *where]) == 0  # matches none
    assert json.loads(capsys.readouterr().out)["matched"] == 0 and spool.list(SUB, dlq=True) == [dead]
    assert main(["spool", "resend", SUB, "--item", dead.name, *where]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["matched"], summary["resent"], summary["failed"]) == (1, 1, 0)
    assert spool.list(SUB, dlq=True) == [] and len(spool.list(SUB, "k-b")) == 1
    item, _payload = spool.get(spool.list(SUB, "k-b")[0])
    assert (item.message_id, item.attempts, item.dlq_reason) == ("m1", 0, None)
    # again: that dead letter is gone (exit 2, its code), and --all now matches nothing
    assert main(["spool", "resend", SUB, "--item", dead.name, *where]) == 2
    assert "spool_item_not_found" in capsys.readouterr().err
    spool.move_to_dlq(spool.list(SUB, "k-b")[0], "max_replay_attempts")
    assert main(["spool", "resend", SUB, "--all", "--lane", "k-b", *where]) == 0
    assert json.loads(capsys.readouterr().out)["resent"] == 1 and spool.list(SUB, dlq=True) == []


@pytest.mark.parametrize(
    "extra", [[], ["--all", "--item", "x"], ["--item", "x", "--lane", "a"], ["--item", "elsewhere/dlq/a/x"]]
)
def test_resend_needs_one_item_or_all_and_a_dead_letter_of_its_own_subscription(
    spool_dir: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    assert main(["spool", "resend", SUB, *extra, "--backend", "local_disk", "--dir", str(spool_dir)]) == 2
    err = capsys.readouterr().err
    assert "usage" in err or "not_a_dead_letter" in err
