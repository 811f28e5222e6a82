"""Flask helpers every role uses: app factory, JSON error model, request context."""

from noetl_cloud.web.app import create_app, json_body
from noetl_cloud.web.errors import register_error_handlers

__all__ = ["create_app", "json_body", "register_error_handlers"]
