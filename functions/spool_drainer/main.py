"""spool_drainer: ordered replay of spooled items, POST /drain (scheduled, and when a circuit closes).

gunicorn --chdir functions/spool_drainer main:app
functions-framework --source functions/spool_drainer/main.py --target spool_drainer
"""

import os

from flask import Request
from flask.typing import ResponseReturnValue

from noetl_cloud.spool.app import app_from_env
from noetl_cloud.web.lazy import LazyApp

app = LazyApp(lambda: app_from_env(os.environ))


# functions-framework serves this as an HTTP function, its default signature type: without the
# decorator, gunicorn never imports the framework (about 90 ms of every cold start).
def spool_drainer(request: Request) -> ResponseReturnValue:
    return app.dispatch(request)
