"""frames: stage/frame leases (claim, heartbeat, commit), the frame reaper and the backlog metric.

gunicorn --chdir functions/frames main:app
functions-framework --source functions/frames/main.py --target frames
"""

import os

from flask import Request
from flask.typing import ResponseReturnValue

from noetl_cloud.frames.app import app_from_env
from noetl_cloud.web.lazy import LazyApp

app = LazyApp(lambda: app_from_env(os.environ))


# functions-framework serves this as an HTTP function, its default signature type: without the
# decorator, gunicorn never imports the framework (about 90 ms of every cold start).
def frames(request: Request) -> ResponseReturnValue:
    return app.dispatch(request)
