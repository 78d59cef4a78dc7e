#!/usr/bin/env bash
# slurm-up.sh: 3-node Slurm 22.05 on 127.0.0.1 (root, no systemd). State in $SVC_DIR/slurm.
set -euo pipefail; export DEBIAN_FRONTEND=noninteractive
D=${SVC_DIR:-/tmp/svc}/slurm; P=${SLURM_PORT_BASE:-17100}; H=$(hostname -s)
export SLURM_CONF=$D/etc/slurm.conf
command -v slurmctld >/dev/null && command -v slurmd >/dev/null || { apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null; }
# idempotent: already up -> nothing to do
if [ -s $D/run/slurmctld.pid ] && kill -0 "$(cat $D/run/slurmctld.pid)" 2>/dev/null \
   && sinfo -h >/dev/null 2>&1; then echo "slurm already up: export SLURM_CONF=$SLURM_CONF"; exit 0; fi
mkdir -p $D/{etc,ctld,log,run,out} $D/spool/n{1,2,3} $D/dev/n{1,2,3} $D/munge; chmod 1777 $D/out
chown munge:munge $D/munge; chmod 755 $D/munge
[ -s $D/munge/munge.key ] || runuser -u munge -- mungekey -c -k $D/munge/munge.key
for n in n1 n2 n3; do for i in 0 1 2 3 4 5 6 7; do
  [ -c $D/dev/$n/nvidia$i ] || mknod $D/dev/$n/nvidia$i c 195 $i; done; done
cat > $SLURM_CONF <<EOF
ClusterName=ci
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=$P
SlurmdPort=$((P+1))
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge/munge.socket,cred_expire=10
StateSaveLocation=$D/ctld
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$D/log/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
MpiDefault=none
ReturnToService=2
MinJobAge=${SLURM_MIN_JOB_AGE:-600}
KillWait=5
SchedulerParameters=batch_sched_delay=0
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
TopologyPlugin=topology/tree
GresTypes=gpu
NodeName=DEFAULT CPUs=16 Boards=1 SocketsPerBoard=1 CoresPerSocket=16 ThreadsPerCore=1 RealMemory=64000 State=UNKNOWN
NodeName=n1 NodeHostname=$H NodeAddr=127.0.0.1 Port=$((P+1)) Gres=gpu:a100:8
NodeName=n2 NodeHostname=$H NodeAddr=127.0.0.1 Port=$((P+2)) Gres=gpu:a100:8
NodeName=n3 NodeHostname=$H NodeAddr=127.0.0.1 Port=$((P+3)) Gres=gpu:a100_1g.10gb:7
PartitionName=low  Nodes=n[1-3] Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=high Nodes=n[1-3] MaxTime=INFINITE State=UP PriorityTier=10
EOF
cat > $D/etc/gres.conf <<EOF
AutoDetect=off
NodeName=n1 Name=gpu Type=a100 File=$D/dev/n1/nvidia[0-7]
NodeName=n2 Name=gpu Type=a100 File=$D/dev/n2/nvidia[0-7]
NodeName=n3 Name=gpu Type=a100_1g.10gb File=$D/dev/n3/nvidia[0-6]
EOF
printf 'SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=leaf2 Nodes=n3\nSwitchName=spine Switches=leaf[1-2]\n' > $D/etc/topology.conf
[ -s $D/munge/munged.pid ] && kill -0 $(cat $D/munge/munged.pid) 2>/dev/null ||
runuser -u munge -- /usr/sbin/munged --socket=$D/munge/munge.socket --key-file=$D/munge/munge.key \
  --pid-file=$D/munge/munged.pid --log-file=$D/munge/munged.log --seed-file=$D/munge/munged.seed
/usr/sbin/slurmctld                              # daemonizes; reads $SLURM_CONF
for n in n1 n2 n3; do /usr/sbin/slurmd -N $n; done
idle(){ [ "$(sinfo -h -N -p low -o %T 2>/dev/null | grep -c '^idle$')" = 3 ]; }  # -N lists a node once per partition
end=$((SECONDS + 60)); until idle || [ $SECONDS -ge $end ]; do sleep 0.1; done  # a deadline, not a count: load slows each sinfo
sinfo -N -p low -o '%N %T %G' | sed 's/^/  /'
idle || { scontrol show node | grep -o 'Reason=.*' | sort -u; exit 1; }; echo "export SLURM_CONF=$SLURM_CONF"
