"""Retention: daily partitions kept ahead, expired executions archived (Parquet) and removed, old
partitions dropped (docs/retention.md)."""
