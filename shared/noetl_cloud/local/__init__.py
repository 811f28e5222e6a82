"""The local stack launcher: PostgreSQL and the emulators as plain processes."""
