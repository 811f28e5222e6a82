"""Playbooks several test modules run."""

from __future__ import annotations

#: One noop step echoing ``workload.payload.n``: what a subscription's messages start in the subscribe tests.
INGEST = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: ingest, path: domain/ingest}
workflow:
  - step: start
    tool: {kind: noop, result: "{{ workload.payload.n }}"}
"""
