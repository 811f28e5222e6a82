"""The local stack's credentials: one bearer token per purpose, and each role's share of them.

``noetl-cloud local up`` makes the tokens once per state folder (``tokens.json``, owner-only, mode
0600) and gives every role process only what it needs (docs/security.md, "What each role may call"):

* a caller role's process (ingress, worker, spool drainer, subscription runtime, scheduler) gets its
  own token as ``NOETL_INTERNAL_API_TOKEN``; the operator's token is the one in the stack's ``env``
  file, for the CLI, the console, the demo and the tests;
* a role that serves an internal API (execute, frames, projector, spool drainer) gets the digests of
  the callers' tokens, each with its role (``NOETL_INTERNAL_API_TOKEN_DIGESTS``): it can recognise
  every caller and act as none of them;
* the worker and the projector each get their own push token.

Every other credential variable is set empty for a role, so one inherited from the launching shell
(``eval "$(noetl-cloud local env)"`` exports the operator's) never reaches a role that must not hold it.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from noetl_cloud.auth import roles

#: The caller roles that get a token of their own (the purpose is the role's name).
CALLER_PURPOSES = (
    roles.OPERATOR,
    roles.INGRESS,
    roles.WORKER,
    roles.SPOOL_DRAINER,
    roles.SUBSCRIPTION_RUNTIME,
    roles.SCHEDULER,
)
#: The push endpoints' tokens (the emulator's push presents them as ``?token=``).
PUSH_PURPOSES = ("worker_push", "projector_push")
PURPOSES = CALLER_PURPOSES + PUSH_PURPOSES

#: The process (a role of ``functions/``, or the scheduler) → the caller role it calls others as.
CALLS_AS = {
    "ingress": roles.INGRESS,
    "worker": roles.WORKER,
    "spool_drainer": roles.SPOOL_DRAINER,
    "subscription_runtime": roles.SUBSCRIPTION_RUNTIME,
    "scheduler": roles.SCHEDULER,
}
#: The processes that serve an internal API, and so recognise callers by their tokens' digests.
SERVES = frozenset({"execute", "frames", "projector", "spool_drainer"})
#: The push tokens a role checks.
PUSH_TOKEN_OF = {"worker": "worker_push", "projector": "projector_push"}

TOKENS_FILE = "tokens.json"


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable and writable by its owner only (0600), also when ``path``
    existed with a wider mode; atomically (a temporary file in the same folder, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an earlier temporary file keeps its mode through O_CREAT
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)
    tmp.replace(path)


def ensure_tokens(state_dir: Path) -> dict[str, str]:
    """The stack's tokens, one per :data:`PURPOSES` entry, made (and kept) in ``tokens.json``: a
    purpose without a token gets a new one; the file is rewritten owner-only whenever it changes."""
    path = state_dir / TOKENS_FILE
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        loaded = {}
    tokens = {p: str(loaded[p]) for p in PURPOSES if isinstance(loaded, dict) and isinstance(loaded.get(p), str)}
    if len(set(tokens.values())) != len(tokens):  # a copy-pasted file: every purpose gets its own again
        tokens = {}
    missing = [p for p in PURPOSES if p not in tokens]
    for purpose in missing:
        tokens[purpose] = secrets.token_hex(24)
    if missing or (path.stat().st_mode & 0o077):
        write_private(path, json.dumps(tokens, indent=2, sort_keys=True) + "\n")
    (state_dir / "api_token").unlink(missing_ok=True)  # the one shared token of earlier versions
    return tokens


def digest(token: str) -> str:
    """The SHA-256 hex digest a serving role recognises ``token`` by."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def digests_setting(tokens: Mapping[str, str]) -> str:
    """``NOETL_INTERNAL_API_TOKEN_DIGESTS``: ``<role>=<digest>`` of every caller purpose."""
    return ",".join(f"{purpose}={digest(tokens[purpose])}" for purpose in CALLER_PURPOSES)


def operator_env(tokens: Mapping[str, str]) -> dict[str, str]:
    """What the stack's ``env`` file carries: the operator's token as the API token, and the push
    tokens (the operator's tools post to the push endpoints, as the emulator does)."""
    return {
        "NOETL_INTERNAL_API_TOKEN": tokens[roles.OPERATOR],
        "NOETL_WORKER_PUSH_TOKEN": tokens["worker_push"],
        "NOETL_PROJECTOR_PUSH_TOKEN": tokens["projector_push"],
    }


def role_env(process: str, env: Mapping[str, str], tokens: Mapping[str, str]) -> dict[str, str]:
    """``env`` with exactly the credentials ``process`` needs (the others empty, see the module)."""
    out = dict(env)
    caller = CALLS_AS.get(process)
    out["NOETL_INTERNAL_API_TOKEN"] = tokens[caller] if caller else ""
    out["NOETL_INTERNAL_API_TOKEN_DIGESTS"] = digests_setting(tokens) if process in SERVES else ""
    for role, purpose in PUSH_TOKEN_OF.items():
        out[f"NOETL_{role.upper()}_PUSH_TOKEN"] = tokens[purpose] if process == role else ""
    return out


__all__ = [
    "CALLER_PURPOSES",
    "PURPOSES",
    "digest",
    "digests_setting",
    "ensure_tokens",
    "operator_env",
    "role_env",
    "write_private",
]
