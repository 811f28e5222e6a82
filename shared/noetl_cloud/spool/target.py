"""One subscription's spool as the spool engine, the drainer and the operator see it: a :class:`SpoolTarget`
(its catalog path, ``spool`` block, source kind, downstream and declared downstreams' circuits)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from noetl_cloud.spec.spool import Spool
from noetl_cloud.spool.downstreams import circuit_ids
from noetl_cloud.spool.policy import SourceKind


@dataclass(frozen=True)
class SpoolTarget:
    """One subscription's spool: its catalog path, ``spool`` block, source kind and downstream."""

    subscription: str
    spool: Spool
    source_kind: SourceKind
    downstream: str
    #: The circuit ids of the subscription's declared ``downstreams`` (:mod:`noetl_cloud.spool.downstreams`).
    downstreams: tuple[str, ...] = ()

    @classmethod
    def from_spec(
        cls,
        subscription: str,
        spool: Mapping[str, Any] | Spool | None,
        *,
        source_kind: SourceKind,
        downstream: str,
        downstreams: Sequence[Any] | None = None,
    ) -> SpoolTarget:
        block = spool if isinstance(spool, Spool) else Spool.model_validate(dict(spool or {}))
        return cls(subscription, block, source_kind, downstream, circuit_ids(subscription, downstreams or ()))

    @property
    def enabled(self) -> bool:
        return self.spool.mode != "off"
