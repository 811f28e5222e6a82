"""Database access: engine factory, table definitions, Alembic migrations.

Only the control-plane roles (execute, frames, projector) import this package.
"""
