#!/usr/bin/env bash
# pg-down.sh: stop the cluster of pg-up.sh by its postmaster PID (SIGQUIT: immediate
# shutdown), wait until it is gone, remove its folder.
D=${SVC_DIR:-/tmp/svc}/pg
if [ -s "$D/data/postmaster.pid" ]; then p=$(head -n 1 "$D/data/postmaster.pid")
  kill -QUIT "$p" 2>/dev/null && for i in $(seq 100); do [ -d /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null || break; sleep 0.1; done
fi
rm -rf "$D"
