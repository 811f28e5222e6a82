"""The frames API's errors, each with a stable code."""

from __future__ import annotations

from noetl_cloud.errors import Conflict, NotFound, ValidationFailed


class StageNotFound(NotFound):
    code = "stage_not_found"


class StageNotOpen(Conflict):
    """The stage is closed (completed, failed, cancelled): nothing more is claimed from it."""

    code = "stage_not_open"


class FrameNotFound(NotFound):
    code = "frame_not_found"


class FrameAlreadyTerminal(Conflict):
    """A second terminal commit, or a heartbeat of a committed/failed frame: nothing is written."""

    code = "frame_already_terminal"


class LeaseLost(Conflict):
    """The frame is not leased to this worker (it was abandoned, or another worker holds it)."""

    code = "lease_lost"


class IpcWithoutDurableRef(ValidationFailed):
    """An ``output_ref`` with a Tier 1.5 IPC hint must also carry a durable ``ref``/``uri``/``locator``."""

    code = "ipc_without_durable_ref"
