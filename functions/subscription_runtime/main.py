"""subscription_runtime: holds one pull subscription (NOETL_SUBSCRIPTION_PATH) and turns each message
into an execution; health on $PORT.

python functions/subscription_runtime/main.py      (the container's command: functions/entrypoint.sh)
gunicorn --chdir functions/subscription_runtime main:app   (health only: gunicorn runs no loop)
"""

import os
import sys

from flask import Request
from flask.typing import ResponseReturnValue

from noetl_cloud.web.lazy import LazyApp


def _health_only():  # type: ignore[no-untyped-def]
    from noetl_cloud.runtime.health import build_app
    from noetl_cloud.settings import Settings

    return build_app(Settings.from_env(os.environ, role="subscription_runtime"), None)


app = LazyApp(_health_only)


def subscription_runtime(request: Request) -> ResponseReturnValue:
    return app.dispatch(request)


if __name__ == "__main__":
    from noetl_cloud.runtime.bootstrap import serve

    sys.exit(serve(os.environ))
