"""The shell the SSH and local executors run on a node, as POSIX sh text.

Every attempt lives in `<base>/<attempt id>/` on its node:

    attempt.json   the record (tags, hosts, devices), written before anything runs
    startup.sh     the job's start-up script; work/ is its working directory
    run.sh         the wrapper: its own session (setsid), records how the job ended
    pid            "<pid> <start time> <boot id>" of the wrapper, the group leader
    log.txt        the job's stdout and stderr
    exit_code      the job's exit status (128 + n after signal n), when it ended
    cancelled, interrupted, gang
                   markers: the broker stopped it (terminate / preemption / another
                   rank of its gang failed)

`START` creates the directory with one `mkdir` (atomic: a second start of the same
attempt finds it and starts nothing), unpacks a tar of the files from stdin, then
starts the wrapper detached; the wrapper re-executes itself with only KEPT_ENV.
A pid alone cannot tell a live job from a recycled pid, so liveness also compares
the process start time and the boot id. `LIST` prints one line per attempt, fields
separated by \\x1f:

    id, alive (1/0), exit code, started (epoch s), ended (epoch s), marker, record

`CANCEL` writes the marker, sends SIGTERM to the wrapper's process group, waits up
to the grace (in tenths of a second), then SIGKILL, waits up to the kill wait for the
group to go, and records 137 if the job could not record its own status. Every wait
is a deadline on the clock since boot (/proc/uptime), never a number of sleeps: on a
loaded node each sleep and each liveness check takes longer than it says.
"""

from __future__ import annotations

# Variables a job keeps from the login environment; everything else is dropped, so the
# broker's credentials never reach a job it starts on this machine.
KEPT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME")

_ALIVE = r"""
alive() {  # alive <dir>: the wrapper of that attempt still runs (same boot, same process)
  [ -s "$1/pid" ] || return 1
  read -r a_pid a_start a_boot < "$1/pid" || return 1
  [ "$a_boot" = "$(cat /proc/sys/kernel/random/boot_id)" ] || return 1
  [ -r "/proc/$a_pid/stat" ] || return 1
  a_stat=$(sed 's/^.*) //' "/proc/$a_pid/stat" 2>/dev/null) || return 1
  set -- $a_stat
  [ "$1" != Z ] && [ "$1" != X ] || return 1
  shift 19
  [ "$1" = "$a_start" ]
}
centis() {  # hundredths of a second since boot: a deadline that a loaded machine keeps
  read -r c_up c_rest < /proc/uptime
  echo $(( ${c_up%.*} * 100 + 1${c_up#*.} - 100 ))
}
"""

START = (
    _ALIVE
    + r"""
set -u
base=$1; id=$2
mkdir -p "$base" || exit 3
d="$base/$id"
if ! mkdir "$d" 2>/dev/null; then cat >/dev/null; echo exists; exit 0; fi
if ! tar -x -C "$d" -f - ; then rm -rf "$d"; echo 'cannot unpack the attempt' >&2; exit 3; fi
mkdir -p "$d/work"
cd "$d" || exit 3
d=$(pwd)
setsid sh ./run.sh </dev/null >/dev/null 2>&1 &
end=$(( $(centis) + 1000 ))  # the wrapper records its pid within 10 s
while [ ! -s "$d/pid" ] && [ "$(centis)" -lt "$end" ]; do sleep 0.02; done
echo started
"""
)

WRAPPER = r"""#!/bin/sh
# Written by broker: runs startup.sh in its own session and records how it ended.
if [ "${1:-}" != clean ]; then  # again, with only the kept variables
  exec env -i {kept} sh "$0" clean
fi
cd "$(dirname "$0")" || exit 1
trap : TERM INT HUP  # before the pid is known: a cancel never finds the wrapper untrapped
printf '%s %s %s\n' "$$" "$(sed 's/^.*) //' /proc/$$/stat | cut -d' ' -f20)" \
  "$(cat /proc/sys/kernel/random/boot_id)" > pid.tmp && mv -f pid.tmp pid
{exports}
(cd work && exec sh ../startup.sh) >> log.txt 2>&1 </dev/null &
job=$!
while :; do wait "$job"; rc=$?; kill -0 "$job" 2>/dev/null || break; done
printf '%s\n' "$rc" > exit_code.tmp && mv -f exit_code.tmp exit_code
"""

LIST = (
    _ALIVE
    + r"""
base=$1; shift
[ -d "$base" ] || exit 0
if [ "$#" -eq 0 ]; then set -- $(ls -1 "$base"); fi
us=$(printf '\037')
for id in "$@"; do
  d="$base/$id"
  [ -f "$d/attempt.json" ] || continue
  if alive "$d"; then live=1; else live=0; fi
  code=""; ended=""; started=""; marker=""
  if [ -f "$d/exit_code" ]; then
    code=$(cat "$d/exit_code"); ended=$(stat -c %.6Y "$d/exit_code")
  fi
  [ -f "$d/pid" ] && started=$(stat -c %.6Y "$d/pid")
  [ -f "$d/gang" ] && marker=gang
  [ -f "$d/interrupted" ] && marker=interrupted
  [ -f "$d/cancelled" ] && marker=cancelled
  if [ "$live" = 0 ] && [ -z "$ended" ] && [ -f "$d/pid" ]; then  # died without a status
    [ -s "$d/lost" ] || date +%s.%N > "$d/lost"
    ended=$(cat "$d/lost")
  fi
  printf '%s%s%s%s%s%s%s%s%s%s%s%s%s\n' "$id" "$us" "$live" "$us" "$code" "$us" "$started" \
    "$us" "$ended" "$us" "$marker" "$us" "$(tr -d '\n' < "$d/attempt.json")"
done
"""
)

CANCEL = (
    _ALIVE
    + r"""
d="$1/$2"; tenths=$3; marker=$4; kill_tenths=$5
[ -f "$d/attempt.json" ] || { echo unknown; exit 0; }
if [ -f "$d/exit_code" ] || ! alive "$d"; then echo ended; exit 0; fi
: > "$d/$marker"
read -r pid rest < "$d/pid"
kill -TERM "-$pid" 2>/dev/null
end=$(( $(centis) + tenths * 10 ))
while alive "$d" && [ "$(centis)" -lt "$end" ]; do sleep 0.1; done
kill -KILL "-$pid" 2>/dev/null
end=$(( $(centis) + kill_tenths * 10 ))
while alive "$d" && [ "$(centis)" -lt "$end" ]; do sleep 0.1; done
if [ ! -f "$d/exit_code" ]; then
  printf '137\n' > "$d/exit_code.tmp" && mv -f "$d/exit_code.tmp" "$d/exit_code"
fi
echo stopped
"""
)

LOG = r"""
f="$1/$2/log.txt"
[ -f "$f" ] && tail -c "$3" "$f"
exit 0
"""


def wrapper(exports: list[tuple[str, str]]) -> str:
    """run.sh with `exports` (name, value) set before the job starts."""
    import shlex

    kept = " ".join(f'${{{name}+{name}="${name}"}}' for name in KEPT_ENV)
    lines = "\n".join(f"export {name}={shlex.quote(value)}" for name, value in exports)
    return WRAPPER.replace("{kept}", kept).replace("{exports}", lines)
