"""worker: the push endpoint of a command subscription, POST / (claims, runs and reports one command).

gunicorn --chdir functions/worker main:app
functions-framework --source functions/worker/main.py --target worker
"""

import os

from flask import Request
from flask.typing import ResponseReturnValue

from noetl_cloud.web.lazy import LazyApp
from noetl_cloud.worker.app import app_from_env

app = LazyApp(lambda: app_from_env(os.environ))


# functions-framework serves this as an HTTP function, its default signature type: without the
# decorator, gunicorn never imports the framework (about 90 ms of every cold start).
def worker(request: Request) -> ResponseReturnValue:
    return app.dispatch(request)
