"""The start-up script's gang part on a cloud VM: wait for the peers, export the ranks.

A member's rank is known when it is launched, its peers' IPs only once every member
exists: the adapter then writes them (head first, separated by spaces) as the
`broker-peers` attribute of every member (TAG_PEERS). These lines
read it from the cloud's instance metadata, every BROKER_PEERS_POLL seconds (default 5)
for up to BROKER_PEERS_TIMEOUT seconds (default 1800, then the job fails), and export
what `providers.gang.rank_environment` gives that rank: the same variables on every
provider (docs/distributed.md). The base URL is BROKER_METADATA_URL when set.
"""

from __future__ import annotations

import shlex

from providers.gang import rank_environment

TAG_PEERS = "broker-peers"  # the members' private IPs, head first, separated by spaces

# cloud -> (metadata base URL, a command that prints the peers value, empty until set)
PEER_READS: dict[str, tuple[str, str]] = {
    # AWS: instance tags in IMDS (the instance is launched with InstanceMetadataTags).
    "aws": (
        "http://169.254.169.254",
        'broker_t=$(curl -sf -m 2 -X PUT "$broker_md/latest/api/token" '
        '-H "X-aws-ec2-metadata-token-ttl-seconds: 60") && '
        'curl -sf -m 2 -H "X-aws-ec2-metadata-token: $broker_t" '
        f'"$broker_md/latest/meta-data/tags/instance/{TAG_PEERS}"',
    ),
    # GCE: a custom metadata attribute of the instance.
    "gcp": (
        "http://metadata.google.internal",
        'curl -sf -m 2 -H "Metadata-Flavor: Google" '
        f'"$broker_md/computeMetadata/v1/instance/attributes/{TAG_PEERS}"',
    ),
    # Azure: the VM's tags in IMDS, as "name:value;name:value".
    "azure": (
        "http://169.254.169.254",
        'curl -sf -m 2 -H "Metadata: true" '
        '"$broker_md/metadata/instance/compute/tags?api-version=2021-02-01&format=text" '
        f"| tr ';' '\\n' | sed -n 's/^{TAG_PEERS}://p'",
    ),
}
# Variables whose values come from the peers list, set by the script itself.
FROM_PEERS = ("BROKER_NODE_IPS", "MASTER_ADDR")


def gang_lines(cloud: str, rank: int, nodes: int, gpus_per_node: int) -> list[str]:
    """The lines that wait for the peers and export rank `rank`'s environment, for a VM on
    `cloud`; ValueError for a cloud without instance metadata to read."""
    if cloud not in PEER_READS:
        raise ValueError(f"no instance metadata to read the peers from on {cloud!r}")
    base, read = PEER_READS[cloud]
    placeholders = tuple(f"node-{i}" for i in range(nodes))
    fixed = rank_environment(rank, placeholders, gpus_per_node)
    lines = [
        f'broker_md="${{BROKER_METADATA_URL:-{base}}}"',
        f"broker_peers() {{ {read}; }}",
        "broker_deadline=$(( $(date +%s) + ${BROKER_PEERS_TIMEOUT:-1800} ))",
        "while :; do",
        '  broker_ips=$(broker_peers 2>/dev/null) && [ -n "$broker_ips" ] && break',
        '  if [ "$(date +%s)" -ge "$broker_deadline" ]; then',
        "    echo 'broker: the gang peers never appeared in the instance metadata' >&2",
        "    exit 1",
        "  fi",
        '  sleep "${BROKER_PEERS_POLL:-5}"',
        "done",
        "set -f; set -- $broker_ips; set +f",  # the IPs as words (no globbing)
        f'if [ "$#" -ne {nodes} ]; then',
        f'  echo "broker: expected {nodes} peers, found $#: $broker_ips" >&2; exit 1',
        "fi",
        'export MASTER_ADDR="$1"',
        'export BROKER_NODE_IPS="$(printf \'%s\\n\' "$@")"',
        "set --",
    ]
    fixed = {name: value for name, value in fixed.items() if name not in FROM_PEERS}
    lines += [f"export {name}={shlex.quote(value)}" for name, value in fixed.items()]
    return lines
