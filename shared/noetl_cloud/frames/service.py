"""Stage and frame leases (distributed-runtime spec §5, docs/frames.md): claim, heartbeat, commit, reaper.

Every transition is one transaction: the frame row changes under its row lock and its event is appended,
with its outbox row, to the frame's own stream ``execution/{e}/stage/{s}/frame/{f}``; the outbox rows are
published after the commit. Idempotency keys are ``<tenant>/<org>/<execution>/frame/<f>/<kind>/<attempt>``
(heartbeats add their number), so a transition is recorded once per attempt.

* **claim** takes, under ``FOR UPDATE SKIP LOCKED`` (so claimers never wait on each other): pending frames
  first, then frames whose lease expired (``frame.abandoned``, then a new attempt; a frame that already
  had ``max_attempts`` attempts ends ``frame.failed`` with reason ``max_attempts`` instead), then newly
  minted frames at the stage's next boundary (``next_frame_index``) while the cursor is not exhausted
  and ``frame_limit`` is not reached. Each claimed frame gets ``frame.dispatched``.
* **heartbeat**: the first one of an attempt moves ``CLAIMED → RUNNING`` (``frame.started``), later ones
  extend the lease (``frame.heartbeat``).
* **commit** ends the attempt: ``frame.committed`` or ``frame.failed``. A frame already terminal answers
  409 ``frame_already_terminal`` with its ``terminal_event_id`` and writes nothing. A commit whose cursor
  says ``exhausted`` stops the minting; the stage closes (``stage.closed``) once it is exhausted (or at its
  frame limit) and no frame is open.
* **reap** (Cloud Scheduler) does to expired leases what a claim would, without waiting for one, and
  closes the stages of executions that ended.
"""

from noetl_cloud.frames.commits import Commits
from noetl_cloud.frames.reaper import Reaper
from noetl_cloud.frames.rows import EXECUTION_ENDED, OPEN, TERMINAL, stage_opened_payload, stage_row

__all__ = ["EXECUTION_ENDED", "OPEN", "TERMINAL", "FrameService", "stage_opened_payload", "stage_row"]


class FrameService(Commits, Reaper):
    """Leases of frames within stages, over PostgreSQL. Safe to share between threads.

    The work lives in one module per concept, stacked as base classes: ``streams`` (adapters, event
    writing), ``stage_lifecycle`` (open, read, close, backlog), ``claims``, ``commits`` (heartbeat and
    commit, single and batch) and ``reaper``; ``rows`` holds the row shapes they share.
    """
