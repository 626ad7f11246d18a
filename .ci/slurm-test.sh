#!/usr/bin/env bash
# A real Slurm on this machine: installs Debian's slurm-wlm and munge (apt-get, as root), writes a one-node
# slurm.conf (this host, 2 CPUs, no GPUs), starts munged, slurmctld and slurmd on private sockets and ports,
# submits examples/slurm/eval-array.sbatch (3 array tasks on the tiny test checkpoint, then the dependent merge
# job), and checks the merged metrics and predictions against an unsharded run. Stops the daemons it started.
# Skips (exit 0, with a message) where apt-get, root or the packages are unavailable. Bounded in time.
#
# Prints the wall times: unsharded eval, and submit-to-merged for the array (SLURM_TEST_TIMES=FILE also
# writes them there).
set -euo pipefail
cd "$(dirname "$0")/.."

skip() { echo "slurm-test: SKIPPED: $*"; exit 0; }

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || skip "apt-get is not available to install slurm-wlm and munge"
    [[ $(id -u) -eq 0 ]] || skip "installing slurm-wlm and munge needs root"
    { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 \
        apt-get install -y -qq --no-install-recommends slurm-wlm munge; } >/dev/null 2>&1 ||
        skip "apt-get could not install slurm-wlm and munge"
fi
[[ $(id -u) -eq 0 ]] || skip "slurmd must run as root"

cargo build --locked --quiet
# The build's target folder: CARGO_TARGET_DIR when set (relative to the repository root, like cargo), else
# target/. The Slurm jobs run the binary from elsewhere, so its path is made absolute.
TARGET_DIR=${CARGO_TARGET_DIR:-target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$PWD/$TARGET_DIR
BIN=$TARGET_DIR/debug/mobile-r1-eval
[[ -x $BIN ]] || { echo "slurm-test: no binary at $BIN after the build" >&2; exit 1; }
MODEL=$PWD/tests/fixtures/models/tiny-b
# SLURM_TEST_EVAL_ARGS replaces the eval arguments (e.g. a longer run for timing).
read -r -a EVAL_ARGS <<< "${SLURM_TEST_EVAL_ARGS:---max-pixels 200704 --max-new-tokens 4}"
WORK=$(mktemp -d /tmp/slurm-test.XXXXXX)
HOST=$(hostname -s)
export SLURM_CONF=$WORK/slurm.conf
pids=()

cleanup() {
    for p in "${pids[@]}"; do
        [[ -f $p ]] && kill "$(cat "$p")" 2>/dev/null || true
    done
    sleep 1
    rm -rf "$WORK"
}
trap cleanup EXIT
trap "exit 1" INT TERM

chmod 755 "$WORK"
mkdir -p "$WORK/spool" "$WORK/state" "$WORK/munge"
chown munge: "$WORK/munge"
chmod 711 "$WORK/munge"
runuser -u munge -- munged --socket="$WORK/munge/munge.sock" --pid-file="$WORK/munge/munged.pid" \
    --log-file="$WORK/munge/munged.log" --seed-file="$WORK/munge/munged.seed" --key-file=/etc/munge/munge.key
pids+=("$WORK/munge/munged.pid")

cat > "$SLURM_CONF" <<CONF
ClusterName=mobile-r1-eval-ci
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$WORK/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=ci Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF

slurmctld -f "$SLURM_CONF"
pids+=("$WORK/slurmctld.pid")
slurmd -f "$SLURM_CONF"
pids+=("$WORK/slurmd.pid")
for _ in $(seq 60); do
    sinfo -h -o %t 2>/dev/null | grep -q idle && break
    sleep 1
done
sinfo -h -o %t | grep -q idle || { tail -20 "$WORK"/slurm*.log; echo "slurm-test: the node did not come up"; exit 1; }

t0=$(date +%s.%N)
RUST_LOG=warn "$BIN" eval --model "$MODEL" "${EVAL_ARGS[@]}" --out "$WORK/single" >/dev/null
t1=$(date +%s.%N)
read -r array_job merge_job < <(MODEL=$MODEL RUN=$WORK/sharded SHARDS=3 GPUS_PER_TASK=0 CPUS_PER_TASK=1 \
    MOBILE_R1_EVAL=$BIN RUST_LOG=warn bash examples/slurm/eval-array.sbatch "${EVAL_ARGS[@]}")
echo "slurm-test: submitted array job $array_job and merge job $merge_job"
state=""
for _ in $(seq 300); do
    state=$(scontrol show job "$merge_job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
    [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED || $state == TIMEOUT ]] && break
    sleep 1
done
t2=$(date +%s.%N)
if [[ $state != COMPLETED ]]; then
    echo "slurm-test: merge job $merge_job ended as ${state:-unknown}"
    scontrol show job "$array_job" | grep -E 'JobId|JobState' || true
    tail -n 20 "$WORK/sharded/logs/"* "$WORK/slurmctld.log" 2>/dev/null || true
    exit 1
fi

cmp "$WORK/single/metrics.json" "$WORK/sharded/metrics.json"
diff <(sort "$WORK/single/predictions.jsonl") <(sort "$WORK/sharded/predictions.jsonl")
diff <(sort "$WORK/single/judgements.jsonl") <(sort "$WORK/sharded/judgements.jsonl")
[[ $(ls "$WORK/sharded/shards") == $'0-of-3\n1-of-3\n2-of-3' ]]
times=$(awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "unsharded eval: %.1f s; Slurm array (3 tasks, \
1 CPU each) + merge job, submit to merged: %.1f s", b - a, c - b }')
echo "slurm-test: merged throughput.json: $(grep -E '"(elapsed_seconds|longest_shard_wall_seconds)"' \
    "$WORK/sharded/throughput.json" | tr -s ' \n' ' ')"
echo "slurm-test: OK: merged metrics and predictions equal the unsharded run's; $times"
[[ -n ${SLURM_TEST_TIMES:-} ]] && echo "$times" > "$SLURM_TEST_TIMES"
exit 0
