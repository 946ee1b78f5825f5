# shellcheck shell=bash
# Helpers for the Slurm end-to-end tests (sourced, not run): a private one-node Slurm cluster
# on this machine, with every state, spool, pid, log and socket path under one directory.
#
#   source "$SPECRUN_SOURCE_DIR/tests/e2e/slurm_cluster.sh"
#   slurm_require_packages            # installs Debian's Slurm + MUNGE, or skips (exit 77)
#   slurm_cluster_start DIR PORT      # munged, slurmctld (PORT), slurmd (PORT+1); node idle
#   trap slurm_cluster_stop EXIT      # stops the three daemons (by the pids in their pid files)
#   slurm_wait_job_gone ID SECONDS    # polls squeue until job ID left the queue
#   slurm_job_field ID Restarts       # one field of `scontrol show job -o ID`
#
# The cluster has its own munged on its own socket (AuthInfo=socket=...), so two tests running
# at the same time, each with its own DIR and PORT, do not share anything. The node declares
# 8 CPUs (SlurmdParameters=config_overrides, real cores may be fewer) and 8 fake GPUs (character
# devices made with mknod, enough for --gpus-per-node=8 and CUDA_VISIBLE_DEVICES). Why each
# setting is there: docs/slurm.md "The test cluster". After start, SLURM_CONF points every
# client command (sbatch, squeue, scontrol, scancel, srun) at this cluster.

SLURM_CLUSTER_DIR=""

slurm_log() { echo "[slurm-test $(date +%T)] $*"; }

# Installs slurmctld, slurmd, slurm-client and munge when missing. Where that is impossible
# (no apt-get, not root, the install fails) the test is skipped: it prints "SKIPPED: <why>" and
# exits 77, which ctest (SKIP_RETURN_CODE, tests/e2e/tests.cmake) counts as skipped, never as
# passed. Under CI=true it fails instead (exit 1): CI runs as root with apt-get, so Slurm must be
# there and the tests must run.
slurm_skip() {
  if [[ "${CI:-}" == "true" ]]; then
    echo "FAIL: $* (CI=true: the Slurm tests must run there)" >&2
    exit 1
  fi
  echo "SKIPPED: $*"
  exit 77
}

slurm_require_packages() {
  local missing=()
  local tool
  for tool in slurmctld slurmd sbatch munged; do
    command -v "$tool" >/dev/null 2>&1 || [[ -x /usr/sbin/$tool ]] || missing+=("$tool")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  [[ $(id -u) -eq 0 ]] || slurm_skip "Slurm is not installed (${missing[*]} missing) and this is not root"
  command -v apt-get >/dev/null 2>&1 ||
    slurm_skip "Slurm is not installed (${missing[*]} missing) and there is no apt-get"
  slurm_log "installing slurmctld slurmd slurm-client munge (missing: ${missing[*]})"
  if ! DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y \
    --no-install-recommends slurmctld slurmd slurm-client munge >apt-slurm.log 2>&1; then
    tail -n 20 apt-slurm.log
    slurm_skip "apt-get install of slurmctld slurmd slurm-client munge failed (log above)"
  fi
}

# Kills the daemon whose pid is in FILE (if it runs) and waits up to 10 s for it to go.
slurm_stop_pidfile() {
  local file=$1 pid i
  [[ -f $file ]] || return 0
  pid=$(cat "$file" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; ++i)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$file"
}

# Stops slurmd, slurmctld and munged of the cluster started by slurm_cluster_start. Safe to call
# more than once and from an EXIT trap.
slurm_cluster_stop() {
  [[ -n $SLURM_CLUSTER_DIR ]] || return 0
  local d=$SLURM_CLUSTER_DIR i
  # Jobs first, so that no rank outlives the daemons (a failed test may leave one running).
  if [[ -f $d/run/slurmctld.pid && -n ${SLURM_CONF:-} ]] && kill -0 "$(cat "$d/run/slurmctld.pid")" 2>/dev/null; then
    if [[ -n $(squeue -h -o %i 2>/dev/null) ]]; then
      slurm_log "cancelling the jobs still queued or running"
      scancel --user="$(id -un)" 2>/dev/null || true
      for ((i = 0; i < 100; ++i)); do
        [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
        sleep 0.2
      done
    fi
  fi
  slurm_stop_pidfile "$d/run/slurmd.pid"
  slurm_stop_pidfile "$d/run/slurmctld.pid"
  if [[ -f $d/munge_dir ]]; then
    local m
    m=$(cat "$d/munge_dir")
    slurm_stop_pidfile "$m/munged.pid"
    rm -rf "$m"
  fi
  slurm_log "cluster in $d stopped"
}

# Prints the last lines of the daemons' logs (for a failing test).
slurm_cluster_logs() {
  local f
  for f in "$SLURM_CLUSTER_DIR"/log/slurmctld.log "$SLURM_CLUSTER_DIR"/log/slurmd.log; do
    echo "---- tail of $f"
    tail -n 30 "$f" 2>/dev/null || true
  done
}

# slurm_cluster_start DIR PORT: a fresh cluster in DIR (removed first), slurmctld on PORT and
# slurmd on PORT+1. Returns once the node is idle; fails (exit 1) after 30 s otherwise.
slurm_cluster_start() {
  local d port host i
  d=$(realpath -m "$1")
  port=$2
  host=$(hostname -s)
  SLURM_CLUSTER_DIR=$d
  # Daemons left by an earlier run of this test that was killed before its EXIT trap.
  slurm_cluster_stop
  rm -rf "$d"
  mkdir -p "$d"/{state,spool,run,log,dev}
  # munged runs as the munge user, which must reach its directory: the build tree may sit in a
  # private directory (a mktemp -d clone is 0700), so munged gets its own directory under /run
  # (or /tmp), recorded in $d/munge_dir for slurm_cluster_stop. munged also checks ownership and
  # permissions of that directory.
  local m
  m=$(mktemp -d /run/specrun-munge.XXXXXX 2>/dev/null || mktemp -d /tmp/specrun-munge.XXXXXX)
  echo "$m" >"$d/munge_dir"
  chown munge:munge "$m"
  chmod 0755 "$m"
  runuser -u munge -- /usr/sbin/munged --socket="$m/sock" --pid-file="$m/munged.pid" \
    --log-file="$m/munged.log" --seed-file="$m/seed" ||
    {
      cat "$m/munged.log"
      echo "FAIL: munged did not start" >&2
      exit 1
    }
  munge -n -S "$m/sock" | unmunge -S "$m/sock" >/dev/null ||
    {
      echo "FAIL: munged does not answer on $m/sock" >&2
      exit 1
    }

  for i in 0 1 2 3 4 5 6 7; do mknod "$d/dev/nvidia$i" c 1 3; done
  cat >"$d/gres.conf" <<EOF
Name=gpu File=$d/dev/nvidia[0-7]
EOF
  cat >"$d/slurm.conf" <<EOF
ClusterName=specrun-test-$port
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# socket: this test's own munged; cred_expire=10: a requeued job restarts after ~12 s, not 2.5 min
AuthInfo=socket=$m/sock,cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$d/log/jobcomp.txt
MailProg=/bin/true
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=20000 Gres=gpu:8 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$d/slurm.conf
  # -i: ignore state of an earlier controller; both daemonise and write their pid files.
  slurmctld -i -f "$SLURM_CONF" || {
    slurm_cluster_logs
    echo "FAIL: slurmctld did not start" >&2
    exit 1
  }
  slurmd -f "$SLURM_CONF" || {
    slurm_cluster_logs
    echo "FAIL: slurmd did not start" >&2
    exit 1
  }
  for ((i = 0; i < 300; ++i)); do
    if sinfo -h -N -o '%t' 2>/dev/null | grep -qx idle; then
      slurm_log "cluster up in $d (node $host idle, controller port $port)"
      return 0
    fi
    sleep 0.1
  done
  sinfo -N 2>&1 || true
  slurm_cluster_logs
  echo "FAIL: the node did not become idle within 30 s" >&2
  exit 1
}

# slurm_job_field ID NAME: the value of NAME=... in `scontrol show job -o ID` ("" if absent).
slurm_job_field() {
  scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# slurm_wait_job_gone ID SECONDS: polls squeue every 0.25 s until job ID has left the queue
# (completed, failed or cancelled; requeued jobs stay in it). Returns 1 on timeout.
slurm_wait_job_gone() {
  local id=$1 limit=$2 start=$SECONDS
  while ((SECONDS - start < limit)); do
    if [[ -z $(squeue -h -j "$id" -o %i 2>/dev/null) ]]; then return 0; fi
    sleep 0.25
  done
  return 1
}
