"""ingress: the public push endpoint, POST /ingress/{listener}.

gunicorn --chdir functions/ingress main:app
functions-framework --source functions/ingress/main.py --target ingress
"""

import os

from flask import Request
from flask.typing import ResponseReturnValue

from noetl_cloud.ingress.app import app_from_env
from noetl_cloud.web.lazy import LazyApp

app = LazyApp(lambda: app_from_env(os.environ))


# functions-framework serves this as an HTTP function, its default signature type: without the
# decorator, gunicorn never imports the framework (about 90 ms of every cold start).
def ingress(request: Request) -> ResponseReturnValue:
    return app.dispatch(request)
