#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for tests, .ci/run and trying the Slurm path on a laptop.
#
#   bash scripts/local-slurm.sh start    # install slurm-wlm + munge if missing (root), configure, start, wait
#   bash scripts/local-slurm.sh status   # daemons and sinfo
#   bash scripts/local-slurm.sh stop     # slurmd, slurmctld, munged, by the PIDs in their pid files
#
# `start` prints the line every Slurm command needs:  export SLURM_CONF=…  (eval "$(… start | tail -n1)").
# State, logs and slurm.conf live in $EOSCALE_SLURM_DIR (default /tmp/eoscale-slurm). The configuration is the
# one measured in /work/shared/local-slurm.md: munge auth with cred_expire=10 (a requeued job restarts after
# about 20 s instead of 2-2.5 min), cons_tres on cores, no accounting, one partition 'debug'. Needs root
# (the daemons run as root, munged as the munge user); no systemd needed.
set -euo pipefail

D=${EOSCALE_SLURM_DIR:-/tmp/eoscale-slurm}
CONF=$D/slurm/slurm.conf
export SLURM_CONF=$CONF

log() { echo "local-slurm: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The state folder holds the pid files this script kills by and the configuration the root daemons read, in a
# world-writable /tmp by default: another user who made it first could plant either. So it must be ours: created
# here with mode 0711 (munged, which runs as the munge user, must traverse it to reach its socket; nobody else may
# list or write it), not a symbolic link, owned by the user running this, and writable by nobody else.
private_state_dir() {
    if [[ ! -e $D && ! -L $D ]]; then
        (umask 077; mkdir -p "$D")
        chmod 0711 "$D"
    fi
    [[ -L $D ]] && die "$D is a symbolic link: refusing to use it as the cluster's state folder (remove it or set EOSCALE_SLURM_DIR)"
    [[ -d $D ]] || die "$D is not a folder: remove it or set EOSCALE_SLURM_DIR to a private folder"
    local owner mode
    owner=$(stat -c %u "$D")
    mode=$(stat -c %a "$D")
    [[ $owner == "$(id -u)" ]] || die "$D belongs to uid $owner, not to you ($(id -u)): refusing to trust its pid files and configuration; remove it or set EOSCALE_SLURM_DIR"
    (( (8#$mode & 8#022) == 0 )) || die "$D is writable by others (mode $mode): refusing to trust it; 'chmod 711 $D' or set EOSCALE_SLURM_DIR"
}

alive() {  # alive PIDFILE: the process named in the pid file runs
    [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_packages() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && return
    [[ $(id -u) == 0 ]] || die "slurm-wlm and munge are not installed: run this as root, or apt-get install slurm-wlm munge"
    log "installing slurm-wlm and munge (about 30 s)"
    export DEBIAN_FRONTEND=noninteractive
    # wait for another apt run instead of failing on its lock
    apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
    apt-get -o DPkg::Lock::Timeout=600 install -y -q slurm-wlm munge >/dev/null
}

write_config() {
    local host cpus mem
    host=$(hostname)
    cpus=$(nproc --all)
    # leave a little memory to the system; Slurm refuses a node that reports less than RealMemory
    mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
    mkdir -p "$D/munge" "$D/slurm/spool" "$D/slurm/state" "$D/slurm/log"
    cat > "$CONF.new" <<EOF
# Written by scripts/local-slurm.sh for $host ($cpus CPUs, $mem MB); rewritten at every start.
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.socket.2,cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MailProg=/bin/true
SlurmctldPidFile=$D/slurm/slurmctld.pid
SlurmdPidFile=$D/slurm/slurmd.pid
SlurmdSpoolDir=$D/slurm/spool
StateSaveLocation=$D/slurm/state
SlurmctldLogFile=$D/slurm/log/slurmctld.log
SlurmdLogFile=$D/slurm/log/slurmd.log
SchedulerType=sched/backfill
# one node, a handful of jobs: try pending jobs every 2 s, not every 60 s (main) / 30 s (backfill), so that a requeued
# job (held for cred_expire) starts when it may, not at the next periodic pass (~17 s later in the requeue test)
SchedulerParameters=sched_interval=2,bf_interval=2
MinJobAge=300
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    mv "$CONF.new" "$CONF"
}

start_munge() {
    alive "$D/munge/munged.pid" && return
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating /etc/munge/munge.key"
        mungekey -c -f -k /etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key
        chmod 400 /etc/munge/munge.key
    fi
    chown munge:munge "$D/munge"
    chmod 755 "$D/munge"  # munged insists that every user can reach its socket
    rm -f "$D/munge/munged.pid" "$D/munge/munge.socket.2" "$D/munge/munge.socket.2.lock"
    runuser -u munge -- /usr/sbin/munged --socket="$D/munge/munge.socket.2" --pid-file="$D/munge/munged.pid" \
        --log-file="$D/munge/munged.log" --seed-file="$D/munge/munged.seed" --key-file=/etc/munge/munge.key
}

wait_idle() {  # the node is up about 6 s after the daemons start
    local i state
    for i in $(seq 1 60); do
        state=$(sinfo -h -N -o %T 2>/dev/null | head -n1 || true)
        case $state in
            idle|mixed|allocated) return 0 ;;
            down*|drain*) scontrol update nodename="$(hostname)" state=resume >/dev/null 2>&1 || true ;;
        esac
        sleep 1
    done
    die "the node did not become idle within 60 s (state: '${state:-no answer}'); see $D/slurm/log/"
}

start() {
    if alive "$D/munge/munged.pid" && alive "$D/slurm/slurmctld.pid" && alive "$D/slurm/slurmd.pid"; then
        log "already running ($D)"
    else
        install_packages
        # a half-started cluster (one daemon died): restart the Slurm daemons on a fresh config
        stop_daemon slurmd "$D/slurm/slurmd.pid"
        stop_daemon slurmctld "$D/slurm/slurmctld.pid"
        write_config
        start_munge
        slurmctld -f "$CONF"
        slurmd -f "$CONF"
        log "started munged, slurmctld, slurmd (state and logs in $D)"
    fi
    wait_idle
    sinfo >&2
    echo "export SLURM_CONF=$CONF"
}

stop_daemon() {  # stop_daemon NAME PIDFILE: TERM the PID in the file, wait up to 10 s
    local name=$1 file=$2 pid i
    [[ -s $file ]] || return 0
    pid=$(cat "$file")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && { log "$name ($pid) ignores TERM: KILL"; kill -KILL "$pid"; }
        log "stopped $name ($pid)"
    fi
    rm -f "$file"
}

stop() {
    stop_daemon slurmd "$D/slurm/slurmd.pid"
    stop_daemon slurmctld "$D/slurm/slurmctld.pid"
    stop_daemon munged "$D/munge/munged.pid"
}

status() {
    local name file rc=0
    for name in munged slurmctld slurmd; do
        file=$D/slurm/$name.pid
        [[ $name == munged ]] && file=$D/munge/munged.pid
        if alive "$file"; then echo "$name: running ($(cat "$file"))"; else echo "$name: stopped"; rc=1; fi
    done
    if [[ $rc == 0 ]]; then sinfo; echo "export SLURM_CONF=$CONF"; fi
    return $rc
}

case ${1:-} in
    start|stop|status) private_state_dir ;;
esac
case ${1:-} in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status   (state in \$EOSCALE_SLURM_DIR, default /tmp/eoscale-slurm)" >&2; exit 2 ;;
esac
