#!/usr/bin/env bash
# sshd-up.sh: key-only sshd(s) on 127.0.0.1:$SSHD_PORT.. (one per fake node), user $SSHD_USER. Root, no systemd.
set -euo pipefail; export DEBIAN_FRONTEND=noninteractive
D=${SVC_DIR:-/tmp/svc}/sshd; P=${SSHD_PORT:-2222}; N=${SSHD_NODES:-1}; U=${SSHD_USER:-brokerci}
[ -x /usr/sbin/sshd ] || { apt-get update -qq; apt-get install -y -qq --no-install-recommends openssh-server >/dev/null; }
id -u $U >/dev/null 2>&1 || useradd -m -s /bin/bash $U
usermod -p '*' $U                 # '!' (locked, useradd default) makes sshd refuse even pubkey when UsePAM=no
mkdir -p $D /run/sshd; chmod 755 $D   # /run/sshd: privilege-separation dir, sshd exits without it
[ -s $D/host_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -C ci-host -f $D/host_ed25519
[ -s $D/id_ed25519 ]   || ssh-keygen -q -t ed25519 -N '' -C ci-client -f $D/id_ed25519
install -m 644 $D/id_ed25519.pub $D/authorized_keys   # root-owned file, root-owned 755 parents
HK=$(cut -d' ' -f1,2 $D/host_ed25519.pub)   # explicit [host]:port lines: paramiko ignores '[127.0.0.1]:*'
for i in $(seq 1 $N); do echo "[127.0.0.1]:$((P+i-1)),[localhost]:$((P+i-1)) $HK"; done > $D/known_hosts
for i in $(seq 1 $N); do port=$((P+i-1)); name=node$i; c=$D/sshd-$name.conf
  [ -s $D/$name.pid ] && kill -0 "$(cat $D/$name.pid)" 2>/dev/null && continue   # idempotent
  cat > $c <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $D/host_ed25519
PidFile $D/$name.pid
AuthorizedKeysFile $D/authorized_keys
AllowUsers $U
PermitRootLogin no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
SetEnv NODE_NAME=$name SLURM_CONF=${SVC_DIR:-/tmp/svc}/slurm/etc/slurm.conf
Subsystem sftp internal-sftp
LogLevel VERBOSE
EOF
  /usr/sbin/sshd -t -f $c
  # own UTS namespace -> `hostname` prints nodeN inside sessions; sshd daemonizes and writes PidFile
  unshare --uts sh -c "hostname $name && exec /usr/sbin/sshd -f $c -E $D/$name.log"
  end=$((SECONDS + 30)); until [ -s $D/$name.pid ] || [ $SECONDS -ge $end ]; do sleep 0.1; done
done
echo "ssh -F /dev/null -i $D/id_ed25519 -o UserKnownHostsFile=$D/known_hosts -o IdentitiesOnly=yes -p $P $U@127.0.0.1"
