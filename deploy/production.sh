#!/usr/bin/env bash
# `make production`: `ki init` (the Procfile's release), then every long-running Procfile line under honcho,
# against PostgreSQL, Redis and OpenSearch from `make services`. Settings: deploy/production.env for
# whatever the environment does not set already. Ctrl-C (SIGINT/SIGTERM) stops every process.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"

while IFS='=' read -r key value; do
    [[ -z "$key" || "$key" == \#* ]] && continue
    [[ -z "${!key:-}" ]] && export "$key=$value"
done < deploy/production.env

database=$(python -c 'import os; from sqlalchemy.engine import make_url; print(make_url(os.environ["KI_DATABASE__URL"]).database)')
if [[ "$KI_DATABASE__URL" == postgresql* ]] && ! psql -h 127.0.0.1 -U postgres -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = '$database'" | grep -q 1; then
    createdb -h 127.0.0.1 -U postgres "$database"
fi

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
processes=$(grep -E '^[a-z][a-z0-9-]*:' Procfile | cut -d: -f1 | grep -vx release | tr '\n' ' ')
exec honcho start -f Procfile $processes
