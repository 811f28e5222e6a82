#!/bin/sh
# The start command of the NoETL Cloud image: serve the role named by NOETL_ROLE on $PORT.
#
#   NOETL_ROLE   execute | ingress | worker | projector | frames | spool_drainer | subscription_runtime
#   PORT         the port Cloud Run gives the container (default 8080)
#   NOETL_APP_DIR  where the repository's functions/ folder is (default /app, the image's copy);
#                  the local tests point it at a checkout to run this very script.
#
# HTTP roles are served by gunicorn with the role's WSGI app (functions/<role>/main.py:app, the
# same module Cloud Functions gen2 serves through its functions-framework target). The
# subscription runtime runs its own loop with a health server on $PORT.
set -eu

role="${NOETL_ROLE:?NOETL_ROLE must name the role to serve}"
port="${PORT:-8080}"
app_dir="${NOETL_APP_DIR:-/app}"
# NOETL_APP_DIR is not a setting of the roles, which refuse unknown NOETL_ variables.
unset NOETL_APP_DIR
source_dir="$app_dir/functions/$role"

if [ ! -f "$source_dir/main.py" ]; then
    echo "entrypoint: unknown role '$role' (no $source_dir/main.py)" >&2
    exit 64
fi

case "$role" in
    subscription_runtime)
        cd "$source_dir"
        exec python main.py
        ;;
    *)
        # One process per instance and a thread per concurrent request: Cloud Run scales
        # instances; --timeout 0 leaves request deadlines to Cloud Run.
        exec gunicorn \
            --chdir "$source_dir" \
            --workers "${WEB_CONCURRENCY:-1}" \
            --threads "${GUNICORN_THREADS:-8}" \
            --timeout 0 \
            --graceful-timeout 10 \
            --bind "0.0.0.0:$port" \
            main:app
        ;;
esac
