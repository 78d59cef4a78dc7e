"""Where executor commands run: LocalShell's timeout, and how SshShell tells a failure of
ssh itself (credentials, an unreachable node) from a command's own exit status."""

from __future__ import annotations

import time

import pytest

from onprem.executors.base import NodeUnreachable
from onprem.executors.shell import LocalShell, SshShell
from providers.errors import CredentialsError, ProviderError


def test_local_commands_report_their_status_and_a_hang_is_unreachable():
    shell = LocalShell()
    done = shell.run(
        ["sh", "-c", 'echo "$X"; cat; echo oops >&2; exit 3'], input=b"in\n", env={"X": "x"}
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "x\nin\n", "oops\n")
    start = time.monotonic()
    with pytest.raises(NodeUnreachable) as error:
        shell.run(["sleep", "30"], timeout=0.3)
    assert error.value.retryable and time.monotonic() - start < 10
    with pytest.raises(ProviderError, match="not installed"):
        shell.run(["no-such-command-here"])


@pytest.mark.parametrize(
    ("stderr", "error"),
    [
        ("brokerci@127.0.0.1: Permission denied (publickey).", CredentialsError),
        ("Host key verification failed.", CredentialsError),
        ("ssh: connect to host 10.9.9.9 port 22: Connection timed out", NodeUnreachable),
        ("ssh: connect to host 127.0.0.1 port 1: Connection refused", NodeUnreachable),
        ("ssh: Could not resolve hostname gpu-x: Name or service not known", NodeUnreachable),
        ("Connection closed by 127.0.0.1 port 2222", NodeUnreachable),
    ],
)
def test_ssh_failures_are_classified(stderr, error):
    shell = SshShell("gpu-x", "broker")
    with pytest.raises(error):
        shell._raise_transport(stderr)


def test_a_commands_own_255_is_not_a_transport_failure():
    SshShell("gpu-x", "broker")._raise_transport("")  # nothing said by ssh: no error
    SshShell("gpu-x", "broker")._raise_transport("my tool failed\n")
