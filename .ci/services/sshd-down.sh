#!/usr/bin/env bash
# sshd-down.sh: stop every sshd by its pidfile PID, wait until gone or zombie, remove state.
D=${SVC_DIR:-/tmp/svc}/sshd
for f in $D/node*.pid; do [ -s "$f" ] || continue; p=$(cat $f); kill $p 2>/dev/null || continue
  for i in $(seq 50); do [ -d /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null || break; sleep 0.1; done; done
rm -rf $D    # user ${SSHD_USER:-brokerci} is kept for the next run; `userdel -r brokerci` removes it
