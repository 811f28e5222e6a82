"""Stages and frames (spec §5): leased windows of loop work, and the worker's cursor-loop runner."""

from noetl_cloud.frames.policy import FramePolicy

__all__ = ["FramePolicy"]
