"""projector: the push endpoint of the noetl-events subscription, POST / (folds an execution's events
into its projection rows); GET /api/projector/status; GET /api/replay/state|verify.

gunicorn --chdir functions/projector main:app
functions-framework --source functions/projector/main.py --target projector
"""

import os

import functions_framework
from flask import Request
from flask.typing import ResponseReturnValue

from noetl_cloud.projector.app import app_from_env
from noetl_cloud.web.lazy import LazyApp

app = LazyApp(lambda: app_from_env(os.environ))


@functions_framework.http
def projector(request: Request) -> ResponseReturnValue:
    return app.dispatch(request)
