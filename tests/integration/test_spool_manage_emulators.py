"""The drainer's ``/api/spool/*`` on the emulators: items in fake-gcs-server, the circuit, leases and the
resend operation's record in the Firestore emulator; the scenario is the unit test's."""

from __future__ import annotations

import secrets

from noetl_cloud.kv.firestore import FirestoreKeyValueStore
from noetl_cloud.spool.gcs import GcsSpool
from tests.integration.test_spool_engine_emulators import gcs, kv  # noqa: F401 - fixtures
from tests.spool_manage_scenario import exercise, rig


def test_the_spool_api_on_the_emulators(gcs: GcsSpool, kv: FirestoreKeyValueStore) -> None:  # noqa: F811
    exercise(rig(gcs, kv, f"subscriptions/devices-{secrets.token_hex(4)}"))
