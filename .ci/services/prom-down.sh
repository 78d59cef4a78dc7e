#!/usr/bin/env bash
# prom-down.sh: stop the Prometheus of prom-up.sh by its PID, wait until gone or zombie, remove state.
D=${SVC_DIR:-/tmp/svc}/prom
if [ -s $D/prometheus.pid ]; then p=$(cat $D/prometheus.pid); kill $p 2>/dev/null &&
  for i in $(seq 50); do [ -d /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null || break; sleep 0.1; done; fi
rm -rf $D
