#!/usr/bin/env bash
# Check docker/docker-compose.yml the way `docker compose config` does, without a Docker engine
# or the compose plugin: a small Go program (scripts/compose-check/) loads it with compose-go v2,
# the library Docker Compose v2 itself uses (the Compose Specification's JSON schema,
# interpolation, normalisation, consistency checks), and prints the resolved project as YAML.
#
#   scripts/compose-config.sh [COMPOSE_FILE]      [docker/docker-compose.yml]
#
# Needs Go 1.24+ and the Go module proxy on the first run (modules pinned by go.sum); the binary
# is cached in .cache/compose-check. Exit status 1 and the reason on stderr for an invalid file.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FILE=${1:-$REPO/docker/docker-compose.yml}
OUT=$REPO/.cache/compose-check
BIN=$OUT/compose-check
SRC=$REPO/scripts/compose-check

command -v go >/dev/null || { echo "compose-config.sh: needs Go 1.24+ (go not on PATH)" >&2; exit 1; }
if [ ! -x "$BIN" ] || [ -n "$(find "$SRC" -newer "$BIN" -type f)" ]; then
  mkdir -p "$OUT"
  (cd "$SRC" && go build -o "$BIN" .)
fi
exec "$BIN" "$FILE"
