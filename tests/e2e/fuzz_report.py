"""What the OpenAPI fuzz run (test_openapi_fuzz.py) sent, per role, for the run's terminal summary
(its section is printed by tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest


@dataclass
class RoleRun:
    """One role's fuzz run: operations, requests sent, answers by status, problems found."""

    operations: int = 0
    requests: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def line(self, role: str) -> str:
        classes = ", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
        return (
            f"openapi fuzz {role}: {self.requests} requests over {self.operations} operations ({classes}); "
            f"{len(self.problems)} problems"
        )


RUNS = pytest.StashKey[dict[str, RoleRun]]()


def runs(config: pytest.Config) -> dict[str, RoleRun]:
    """The runs of this session, by role (created on first use)."""
    if RUNS not in config.stash:
        config.stash[RUNS] = {}
    return config.stash[RUNS]


def lines(config: pytest.Config) -> list[str]:
    """The lines of the run's summary section: the requests sent per role, when the fuzz run ran."""
    done = config.stash.get(RUNS, None)
    if not done:
        return []
    total = sum(r.requests for r in done.values())
    return [
        *(run.line(role) for role, run in done.items()),
        f"openapi fuzz total: {total} requests to {len(done)} roles",
    ]
