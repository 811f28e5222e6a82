"""Firestore key-value store: coordination state shared by every instance (ARCHITECTURE §3).

Layout: one collection per deployment (``collection``, default ``noetl-kv``), one document per
key. Firestore document ids cannot contain ``/`` and are limited to 1500 bytes, so the id is
``k.`` + the unpadded base64url of the key, or ``h.`` + its sha256 when that would be longer
than :data:`MAX_ENCODED_ID`; the document keeps the original key in ``key``. Fields:

* ``key`` -- the key as given;
* ``value_json`` -- the value as compact JSON text (one field rather than a map: JSON round-trips
  exactly, nested arrays and any key names are allowed, and no index entry per value field);
* ``version`` -- integer, 1 for a new entry;
* ``expires_at`` -- a timestamp, or null for an entry that never expires;
* ``updated_at`` -- the adapter clock's time of the last write (for people reading the console).

Every read-modify-write (create-if-absent included, so an expired document is replaced) runs in
one Firestore transaction (``@firestore.transactional``), but for the two that a precondition of
Firestore's own covers in one commit (a create of a key with no document, a compare-and-set of this
process's own last write: ``kv/firestore_commits.py``). A transaction aborted by contention is
run again by this adapter after a jittered, growing pause, up to ``contention_attempts`` times,
then answered :class:`~noetl_cloud.errors.Unavailable` (``kv_contended``). The library's own
immediate retries are turned off (one commit per transaction): when transactions that all read a
document abort together, retrying them at once makes them collide again (on the emulator every
collision costs a 2 s lock timeout; see docs/local.md).

Expired documents behave as absent. Our code deletes them lazily when it touches them (a
mutation of the key, or a ``get`` that finds one, through a delete conditioned on the document's
update time). In production a Firestore TTL policy on the ``expires_at`` field of the collection
group deletes the rest (usually within a day of expiry; documents whose ``expires_at`` is null
are never deleted); it is declared with the rest of the infrastructure, with single-field index
exemptions for ``value_json`` and ``key`` (never queried).

Errors: a Firestore outage (unavailable, deadline exceeded, internal, resource exhausted,
aborted beyond our retries, a credentials transport failure) surfaces as
:class:`~noetl_cloud.errors.Unavailable` (retryable); any other Firestore refusal as
:class:`~noetl_cloud.kv.port.KeyValueStoreError` (not retryable); missing application default credentials as
:class:`~noetl_cloud.errors.ConfigError`. No google exception escapes.

Nothing connects at import or construction: the client is created on first use. With
``emulator_host`` the client talks to that emulator with anonymous credentials; otherwise it
uses application default credentials. The adapter does not read the environment itself.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

from google.api_core import exceptions as gexc
from google.api_core import gapic_v1
from google.api_core import retry as gretry
from google.auth import exceptions as auth_exc
from google.cloud import firestore  # type: ignore[attr-defined]

from noetl_cloud.envelope import utc_now
from noetl_cloud.errors import ConfigError, NoetlError, Unavailable
from noetl_cloud.kv.firestore_commits import SingleCommitWrites
from noetl_cloud.kv.port import (
    Clock,
    Entry,
    KeyValueStoreError,
    Mutation,
    Put,
    TransactionalStore,
    check_key,
    decode_value,
    expiry,
    is_live,
)

if TYPE_CHECKING:
    from noetl_cloud.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_ENCODED_ID: Final = 1024  # bytes; Firestore allows 1500
DEFAULT_COLLECTION: Final = "noetl-kv"

# Failures that mean "Firestore cannot answer now" rather than "Firestore refuses this".
_OUTAGE: Final = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.ResourceExhausted,
    gexc.Unknown,
    gexc.Cancelled,
    gexc.RetryError,
    auth_exc.TransportError,
    auth_exc.RefreshError,
)


class _Contention(Exception):
    """A transaction was aborted by concurrent ones; worth running again."""


def document_id(key: str) -> str:
    """The Firestore document id of a key: URL-safe, no ``/``, bounded, never ``.``/``..``/``__x__``."""
    encoded = base64.urlsafe_b64encode(key.encode()).rstrip(b"=").decode("ascii")
    if len(encoded) + 2 <= MAX_ENCODED_ID:
        return "k." + encoded
    return "h." + hashlib.sha256(key.encode()).hexdigest()


def _plain_utc(value: datetime) -> datetime:
    """A stored timestamp (``DatetimeWithNanoseconds``) as a plain aware UTC datetime."""
    moment = value.astimezone(UTC)
    return datetime(
        moment.year,
        moment.month,
        moment.day,
        moment.hour,
        moment.minute,
        moment.second,
        moment.microsecond,
        tzinfo=UTC,
    )


class FirestoreKeyValueStore(SingleCommitWrites, TransactionalStore):
    """The key-value port on Firestore in Native mode (the emulator locally)."""

    def __init__(
        self,
        project_id: str,
        *,
        collection: str = DEFAULT_COLLECTION,
        emulator_host: str | None = None,
        clock: Clock = utc_now,
        timeout_s: float = 20.0,
        contention_attempts: int = 8,
        backoff_s: float = 0.1,
        max_backoff_s: float = 2.0,
    ) -> None:
        super().__init__(clock)
        if not project_id:
            raise ConfigError("the Firestore key-value store needs a project id", code="config_missing")
        if not collection or "/" in collection or collection in (".", "..") or len(collection.encode()) > 1500:
            raise ConfigError(f"{collection!r} is not a usable Firestore collection id", code="config_invalid")
        self.project_id = project_id
        self.collection = collection
        self.emulator_host = emulator_host
        self.timeout_s = timeout_s
        self.contention_attempts = max(1, contention_attempts)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._client_lock = threading.Lock()
        self._client: firestore.Client | None = None
        self._api: Any = None
        self._jitter = random.SystemRandom()

    @classmethod
    def from_settings(cls, settings: Settings, *, collection: str | None = None) -> FirestoreKeyValueStore:
        """The store of a deployment: ``NOETL_PROJECT_ID``, ``NOETL_KV_COLLECTION``, and
        ``FIRESTORE_EMULATOR_HOST`` when set."""
        settings.require("project_id")
        assert settings.project_id is not None
        return cls(
            settings.project_id,
            collection=collection or settings.kv_collection,
            emulator_host=settings.firestore_emulator_host,
        )

    # -- the client ------------------------------------------------------------------------------

    def _firestore(self) -> firestore.Client:
        with self._client_lock:
            if self._client is None:
                with self._translated():
                    self._client = self._connect()
            return self._client

    def _connect(self) -> firestore.Client:
        if self.emulator_host:
            from google.auth.credentials import AnonymousCredentials

            client = firestore.Client(project=self.project_id, credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
            # Named explicitly rather than left to the client's own read of FIRESTORE_EMULATOR_HOST:
            # the client sends its calls, on an insecure channel, to ``_emulator_host`` when set.
            client._emulator_host = self.emulator_host
        else:
            import google.auth

            # Credentials resolved here, so a stray FIRESTORE_EMULATOR_HOST cannot swap them for anonymous ones.
            credentials, _project = google.auth.default(scopes=firestore.Client.SCOPE)
            client = firestore.Client(project=self.project_id, credentials=credentials)
            client._emulator_host = None
        self._api = client._firestore_api
        self._bound_transaction_rpcs(self._api)
        return client

    def _bound_transaction_rpcs(self, api: Any) -> None:
        """Give the transaction RPCs our deadline instead of the library's 60 s of retries.

        ``Transaction`` calls begin/commit/rollback without a retry or timeout argument, so they
        run with the generated client's defaults; an outage would hold a request for a minute or
        more. The generated client keeps those defaults in its transport's ``_wrapped_methods``;
        when that private layout is not there any more, the defaults stay (and we say so).
        """
        transport = getattr(api, "_transport", None)
        wrapped = getattr(transport, "_wrapped_methods", None)
        if not isinstance(wrapped, dict):
            log.warning("firestore client layout changed: transaction RPCs keep the library's 60 s deadline")
            return
        reads = (gexc.DeadlineExceeded, gexc.InternalServerError, gexc.ResourceExhausted, gexc.ServiceUnavailable)
        writes = (gexc.ResourceExhausted, gexc.ServiceUnavailable)
        for name, retried in (("begin_transaction", reads), ("rollback", reads), ("commit", writes)):
            method = getattr(transport, name, None)
            if method is None or method not in wrapped:
                log.warning("firestore client layout changed: %s keeps the library's deadline", name)
                continue
            wrapped[method] = gapic_v1.method.wrap_method(  # type: ignore[no-untyped-call]
                method,
                default_retry=self._retry(*retried),
                default_timeout=self.timeout_s,
                client_info=gapic_v1.client_info.ClientInfo(),  # type: ignore[no-untyped-call]
            )

    def _retry(self, *errors: type[Exception]) -> gretry.Retry:
        return gretry.Retry(
            initial=0.1,
            maximum=2.0,
            multiplier=1.5,
            predicate=gretry.if_exception_type(*errors),
            timeout=self.timeout_s,
        )

    def _read_retry(self) -> gretry.Retry:
        return self._retry(gexc.DeadlineExceeded, gexc.InternalServerError, gexc.ServiceUnavailable)

    def close(self) -> None:
        """Close the client's channel (a later call opens a new one)."""
        with self._client_lock:
            api, self._api, self._client = self._api, None, None
        if api is not None:
            api.transport.close()

    # -- documents -------------------------------------------------------------------------------

    def _ref(self, key: str) -> Any:
        return self._firestore().collection(self.collection).document(document_id(key))

    def _stored(self, key: str, snapshot: Any) -> tuple[Entry, Any] | None:
        """The entry a snapshot holds (live or not) and its raw ``value_json``, or ``None``."""
        if not snapshot.exists:
            return None
        data = snapshot.to_dict() or {}
        if data.get("key") != key:
            raise KeyValueStoreError(f"document {snapshot.id} does not hold key {key!r}", details={"key": key})
        expires_at = data.get("expires_at")
        entry = Entry(
            key=key,
            value=decode_value(data["value_json"]),
            version=int(data["version"]),
            expires_at=None if expires_at is None else _plain_utc(expires_at),
        )
        return entry, data["value_json"]

    def get(self, key: str) -> Entry | None:
        check_key(key)
        return self._run(lambda: self._read(key))

    def _read(self, key: str) -> Entry | None:
        ref = self._ref(key)
        snapshot = ref.get(retry=self._read_retry(), timeout=self.timeout_s)
        stored = self._stored(key, snapshot)
        if stored is None:
            return None
        entry = stored[0]
        if is_live(entry.expires_at, self._now()):
            return entry
        self._purge(ref, snapshot)
        return None

    def get_many(self, keys: Sequence[str]) -> dict[str, Entry | None]:
        """One ``BatchGetDocuments`` call for all of ``keys`` (a single get is one such call too)."""
        for key in keys:
            check_key(key)
        return self._run(lambda: self._read_many(keys))

    def _read_many(self, keys: Sequence[str]) -> dict[str, Entry | None]:
        refs = {document_id(key): (key, self._ref(key)) for key in keys}
        found: dict[str, Entry | None] = dict.fromkeys(keys)
        snapshots = self._firestore().get_all(
            [ref for _key, ref in refs.values()], retry=self._read_retry(), timeout=self.timeout_s
        )
        for snapshot in snapshots:
            key, ref = refs[snapshot.id]
            stored = self._stored(key, snapshot)
            if stored is None:
                continue
            if is_live(stored[0].expires_at, self._now()):
                found[key] = stored[0]
            else:
                self._purge(ref, snapshot)
        return found

    def _purge(self, ref: Any, snapshot: Any) -> None:
        """Delete an expired document unless it changed since it was read; best effort."""
        try:
            ref.delete(
                option=firestore.Client.write_option(last_update_time=snapshot.update_time),
                retry=None,
                timeout=self.timeout_s,
            )
        except gexc.GoogleAPICallError as exc:
            log.debug("expired kv document %s not purged: %s", ref.id, type(exc).__name__)

    def _mutate(self, key: str, mutation: Mutation) -> tuple[Entry | None, Entry | None]:
        ref = self._ref(key)

        @firestore.transactional  # type: ignore[untyped-decorator]
        def apply(transaction: Any) -> tuple[Entry | None, Entry | None]:
            now = self._now()
            snapshot = ref.get(transaction=transaction, retry=self._read_retry(), timeout=self.timeout_s)
            stored = self._stored(key, snapshot)
            live = stored[0] if stored is not None and is_live(stored[0].expires_at, now) else None
            change = mutation(live)
            if isinstance(change, Put):
                entry = Entry(
                    key=key,
                    value=decode_value(change.value_json),
                    version=1 if live is None else live.version + 1,
                    expires_at=expiry(now, change.ttl_s),
                )
                transaction.set(
                    ref,
                    {
                        "key": key,
                        "value_json": change.value_json,
                        "version": entry.version,
                        "expires_at": entry.expires_at,
                        "updated_at": now,
                    },
                )
                return live, entry
            if change is not None or (stored is not None and live is None):
                transaction.delete(ref)  # removed, or expired and touched: purge it
            return live, None if change is not None else live

        # One commit per transaction: a retry begins again after a jittered pause (see _run).
        result: tuple[Entry | None, Entry | None] = self._run(
            lambda: apply(self._firestore().transaction(max_attempts=1))
        )
        return result

    # -- errors and contention -------------------------------------------------------------------

    def _run(self, attempt: Callable[[], T]) -> T:
        """``attempt()`` with google errors translated, run again while it is aborted by contention."""
        for n in range(self.contention_attempts):
            try:
                with self._translated():
                    return attempt()
            except _Contention:
                if n + 1 == self.contention_attempts:
                    break
                time.sleep(self._jitter.uniform(0, min(self.max_backoff_s, self.backoff_s * 2**n)))
        raise Unavailable(
            f"firestore transaction still contended after {self.contention_attempts} attempts",
            code="kv_contended",
        )

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """Turn google exceptions (also when the library wraps them in ``ValueError``) into ours."""
        try:
            yield
        except NoetlError:
            raise
        except (gexc.GoogleAPICallError, gexc.RetryError, auth_exc.GoogleAuthError, ValueError) as exc:
            causes = _google_causes(exc)
            if not causes:
                raise  # a ValueError of ours or of the caller's: a bug, not an outage
            aborted = [c for c in causes if isinstance(c, gexc.Aborted)]
            if aborted:  # also when the rollback that followed the abort failed too
                raise _Contention() from aborted[0]
            cause = causes[0]
            if isinstance(cause, _OUTAGE):
                raise Unavailable(f"firestore unavailable: {type(cause).__name__}", code="kv_unavailable") from cause
            if isinstance(cause, auth_exc.DefaultCredentialsError):
                raise ConfigError("no Google credentials for Firestore", code="config_missing") from cause
            raise KeyValueStoreError(f"firestore refused the operation: {type(cause).__name__}") from cause


def _google_causes(exc: BaseException) -> list[BaseException]:
    """The google exceptions in ``exc``'s chain of causes and contexts, ``exc`` itself first."""
    found: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, gexc.GoogleAPICallError | gexc.RetryError | auth_exc.GoogleAuthError):
            found.append(current)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return found
