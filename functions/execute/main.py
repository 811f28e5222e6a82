"""execute: the control-plane API (catalog, executions, subscriptions, listener configuration).

gunicorn --chdir functions/execute main:app                  # WSGI
functions-framework --source functions/execute/main.py --target execute
"""

import os

from flask import Request
from flask.typing import ResponseReturnValue

from noetl_cloud.control.app import app_from_env
from noetl_cloud.web.lazy import LazyApp

app = LazyApp(lambda: app_from_env(os.environ))


# functions-framework serves this as an HTTP function, its default signature type: without the
# decorator, gunicorn never imports the framework (about 90 ms of every cold start).
def execute(request: Request) -> ResponseReturnValue:
    return app.dispatch(request)
