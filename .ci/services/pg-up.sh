#!/usr/bin/env bash
# pg-up.sh: a throwaway PostgreSQL cluster in $SVC_DIR/pg: TCP 127.0.0.1:$PG_PORT (password
# auth, scram-sha-256, user postgres, password $PG_PASSWORD) and a unix socket in the same
# folder (trust). Idempotent: a second run starts a stopped cluster again. As root the
# cluster runs as the unprivileged user `postgres` (initdb refuses root). Prints its PID.
set -euo pipefail
D=${SVC_DIR:-/tmp/svc}/pg; PORT=${PG_PORT:-55432}; PW=${PG_PASSWORD:?set PG_PASSWORD}
B=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$B" ] && [ -x "$B/pg_ctl" ] || { echo "pg-up: no /usr/lib/postgresql/*/bin (apt-get install postgresql-15)" >&2; exit 3; }
if [ "$(id -u)" = 0 ]; then
  U=postgres; id -u $U >/dev/null 2>&1 || useradd -r -M -s /usr/sbin/nologin $U
  pg(){ runuser -u $U -- "$@"; }
else
  U=$(id -un); pg(){ "$@"; }
fi
mkdir -p "$D"; chown "$U" "$D"; chmod 700 "$D"
if [ ! -s "$D/data/PG_VERSION" ]; then
  printf '%s\n' "$PW" > "$D/pwfile"; chown "$U" "$D/pwfile"; chmod 600 "$D/pwfile"
  pg "$B/initdb" -D "$D/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    --pwfile="$D/pwfile" -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
  rm -f "$D/pwfile"
fi
if ! pg "$B/pg_ctl" -D "$D/data" status >/dev/null 2>&1; then
  pg "$B/pg_ctl" -D "$D/data" -l "$D/server.log" -w -t 30 start -o "-c listen_addresses=127.0.0.1 -p $PORT \
    -c unix_socket_directories=$D -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
    -c max_connections=200" >/dev/null
fi
head -n 1 "$D/data/postmaster.pid"
