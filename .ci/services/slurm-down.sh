#!/usr/bin/env bash
# slurm-down.sh: stop by PID (pidfiles), wait until gone or zombie, remove state.
D=${SVC_DIR:-/tmp/svc}/slurm
# End the jobs first, so that no slurmstepd outlives its slurmd (bounded: 10 s).
if [ -s $D/etc/slurm.conf ] && [ -s $D/run/slurmctld.pid ]; then
  export SLURM_CONF=$D/etc/slurm.conf
  jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  [ -n "$jobs" ] && scancel $jobs 2>/dev/null
  for i in $(seq 100); do [ -z "$(squeue -h -o %i -t R,CG,PD,S 2>/dev/null)" ] && break; sleep 0.1; done
fi
for f in $D/run/slurmd-n1.pid $D/run/slurmd-n2.pid $D/run/slurmd-n3.pid $D/run/slurmctld.pid $D/munge/munged.pid; do
  [ -s $f ] || continue; p=$(cat $f); kill $p 2>/dev/null || continue
  for i in $(seq 50); do [ -d /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null || break; sleep 0.2; done
done; rm -rf $D
