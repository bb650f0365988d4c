#!/usr/bin/env bash
# `make production`: `ki init` (the Procfile's release), then every long-running Procfile line under honcho,
# against PostgreSQL, Redis and OpenSearch from `make services`. Settings: deploy/production.env for
# whatever the environment does not set already. Ctrl-C (SIGINT) or SIGTERM stops every process.
#
# honcho stops all processes when one exits. A Celery worker can exit on a Redis restart (kombu fails
# to restore its unacknowledged messages on the lost connection: "Unrecoverable error: AttributeError
# ... 'hostname'"), so, like a supervisor's restart policy, this script then starts them all again;
# their unacknowledged tasks are delivered again and the sweep redrives open events.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV_BIN="$(cd "${VENV:-.venv}" && pwd)/bin"
export PATH="$VENV_BIN:$PATH"
PROCFILE=${PROCFILE:-Procfile}

while IFS='=' read -r key value; do
    [[ -z "$key" || "$key" == \#* ]] && continue
    [[ -z "${!key:-}" ]] && export "$key=$value"
done < deploy/production.env

python - <<'PY'
"""The PostgreSQL database of database.url, created when missing (ki init migrates it)."""
import os
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

url = make_url(os.environ["KI_DATABASE__URL"])
if url.get_backend_name() == "postgresql":
    admin = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if not conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": url.database}):
            conn.execute(text(f'CREATE DATABASE "{url.database}"'))
    admin.dispose()
PY

# Flower never runs without a password: one random password per state directory, unless one is configured.
mkdir -p "$KI_STATE_DIR"
if [[ -z "${KI_FLOWER__BASIC_AUTH:-}" ]]; then
    auth_file="$KI_STATE_DIR/flower-basic-auth"
    [[ -s "$auth_file" ]] || (umask 077; echo "admin:$(python -c 'import secrets; print(secrets.token_urlsafe(18))')" > "$auth_file")
    KI_FLOWER__BASIC_AUTH=$(cat "$auth_file")
    export KI_FLOWER__BASIC_AUTH
    echo "Flower: http://${KI_FLOWER__ADDRESS:-127.0.0.1}:${KI_FLOWER__PORT:-5555} (user and password in $auth_file)"
fi

ki init
processes=$(grep -E '^[a-z][a-z0-9-]*:' "$PROCFILE" | cut -d: -f1 | grep -vx release | tr '\n' ' ')
stopping=0
child=
trap 'stopping=1; [[ -n "$child" ]] && kill -TERM "$child" 2>/dev/null || true' INT TERM
while :; do
    # shellcheck disable=SC2086 # one argument per process name
    honcho start -f "$PROCFILE" $processes &
    child=$!
    wait "$child" || true          # returns early when a signal arrives; then wait for honcho to stop them all
    wait "$child" 2>/dev/null || true
    [[ $stopping == 1 ]] && break
    echo "production: a process exited and honcho stopped the others; starting them all again in 2 s" >&2
    sleep 2
done
