#!/usr/bin/env bash
# Peer benchmark: gpuq itself, with the same contract as ../shared/peers
# (slurm/, river/): builds gpuq from this repository (idempotent: go build),
# runs `gpuq bench --output json` on its default installation (an embedded
# NATS on 127.0.0.1, a scheduler and one worker with 8 simulated GPUs, all in
# the one gpuq process, in a temporary directory it removes), stops that
# process if it is interrupted, and prints ONE line of JSON last. See
# README.md ("Performance").
#
# Env knobs (defaults in brackets):
#   N [5000]            jobs per phase (e2e phase + backlog-drain phase)
#   PROBES [50]         idle-latency probes
#   SUBMITTERS [8]      concurrent submitters
#   GPUS [8]            simulated GPUs of the embedded worker
#   JS_OPS [50000]      async publishes and KV updates of the JetStream phase
#   GPUQ_SRC [the repository this script is in]
#   GPUQ_ROOT [${TMPDIR:-/tmp}/gpuq-peers/gpuq]   where the binary is built
# Extra arguments are passed to gpuq bench (run it with --help for the list).
#
# To run it beside the other peers with their run-all.sh, which runs the
# peers of its own directory:
#   cp -r ../shared/peers "$TMPDIR/peers" && ln -s "$PWD/bench/peers/gpuq" "$TMPDIR/peers/gpuq"
#   PEERS="slurm river gpuq" "$TMPDIR/peers/run-all.sh"
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
GPUQ_SRC=${GPUQ_SRC:-$(cd "$HERE/../../.." && pwd -P)}
N=${N:-5000}
PROBES=${PROBES:-50}
SUBMITTERS=${SUBMITTERS:-8}
GPUS=${GPUS:-8}
JS_OPS=${JS_OPS:-50000}
GPUQ_ROOT=${GPUQ_ROOT:-${TMPDIR:-/tmp}/gpuq-peers/gpuq}
BIN=$GPUQ_ROOT/bin/gpuq

log() { echo "[gpuq-bench $(date +%T)] $*" >&2; }
die() { log "FATAL: $*"; exit 1; }

PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null 2>&1 || die "Go toolchain not found"
[ -f "$GPUQ_SRC/go.mod" ] || die "GPUQ_SRC=$GPUQ_SRC is not the gpuq repository"
mkdir -p "$GPUQ_ROOT/bin" "$GPUQ_ROOT/log"
log "building gpuq from $GPUQ_SRC"
# go-nvml's cgo build is noisy; its output goes to a file, shown on failure
(cd "$GPUQ_SRC" && go build -o "$BIN" ./cmd/gpuq) > "$GPUQ_ROOT/log/build.log" 2>&1 ||
  { cat "$GPUQ_ROOT/log/build.log" >&2; die "go build failed"; }

OUT=$GPUQ_ROOT/log/result.json
PID=
stop() {
  local rc=$?
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    log "stopping gpuq bench (pid $PID)"
    kill -TERM "$PID" 2>/dev/null || true   # it cancels its jobs and stops its parts
    wait "$PID" 2>/dev/null || true
  fi
  exit $rc
}
trap stop INT TERM

log "gpuq bench: N=$N PROBES=$PROBES SUBMITTERS=$SUBMITTERS GPUS=$GPUS JS_OPS=$JS_OPS"
set +e
"$BIN" bench --jobs "$N" --probes "$PROBES" --submitters "$SUBMITTERS" --gpus "$GPUS" --js-ops "$JS_OPS" \
  --output json "$@" > "$OUT" &
PID=$!
wait "$PID"
rc=$?
PID=
set -e
trap - INT TERM
[ -s "$OUT" ] && tail -1 "$OUT"
exit $rc
