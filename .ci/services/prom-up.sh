#!/usr/bin/env bash
# prom-up.sh: Prometheus on 127.0.0.1:$PROM_PORT scraping $PROM_TARGETS (host:port,...) every 1 s.
# Root or any user, no systemd. State in $SVC_DIR/prom; prom-down.sh stops it by PID.
set -euo pipefail; export DEBIAN_FRONTEND=noninteractive
D=${SVC_DIR:-/tmp/svc}/prom; PORT=${PROM_PORT:-19090}; TARGETS=${PROM_TARGETS:-127.0.0.1:9464}
command -v prometheus >/dev/null || { apt-get update -qq
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
# idempotent: already up -> nothing to do
[ -s $D/prometheus.pid ] && kill -0 "$(cat $D/prometheus.pid)" 2>/dev/null && { echo "prometheus already up on :$PORT"; exit 0; }
mkdir -p $D/data
T=$(echo "$TARGETS" | sed "s/[^,][^,]*/'&'/g")
cat > $D/prometheus.yml <<CONF
global: {scrape_interval: 1s, evaluation_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: broker
    static_configs: [{targets: [$T]}]
CONF
nohup prometheus --config.file=$D/prometheus.yml --storage.tsdb.path=$D/data \
  --web.listen-address=127.0.0.1:$PORT >$D/prometheus.log 2>&1 &
echo $! > $D/prometheus.pid
ready(){ python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/-/ready', timeout=1)" 2>/dev/null; }
end=$((SECONDS + 60)); until ready || [ $SECONDS -ge $end ]; do sleep 0.1; done  # a deadline, not a count
ready || { tail -5 $D/prometheus.log; exit 1; }
echo "PROM_URL=http://127.0.0.1:$PORT"
