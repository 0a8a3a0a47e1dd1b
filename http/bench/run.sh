#!/usr/bin/env bash
# The payments example with and without the idempotency layer, under wrk, in one run:
#   bash http/bench/run.sh [seconds] [connections] [threads] [rounds]
# Each round measures the bare handler, the bare handler sending the layer's two Redis
# commands by hand (`--bare-store`: the like-for-like baseline), then the layer on
# MemoryStore and on Redis (fresh keys, then replays of one key), so that every figure has
# baselines of its own round beside it: "x bare" is against the bare handler's rate,
# "x store" (the layer on Redis only) against the hand-sent commands' rate for the same kind
# of request (fresh against fresh, replay against replay).
# NICE=N runs wrk at that niceness, so that the servers get the CPU first (two cores are
# shared by wrk, Redis and the service).
# Needs wrk and redis-server on PATH, and the example built:
#   cargo build --release -p idem-http --example payments
# Starts its own servers on free ports and stops them (by pid) when it ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-10}
connections=${2:-64}
threads=${3:-2}
rounds=${4:-3}
bin=${CARGO_TARGET_DIR:-target}/release/examples/payments
tag=$(date +%s)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 not up" >&2; exit 1; }

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
pids+=($!)
wait_port "$redis_port"

start() { # name, extra args...
  local port; port=$(free_port)
  "$bin" --addr "127.0.0.1:$port" --action-ms 0 "${@:2}" >/dev/null &
  pids+=($!)
  wait_port "$port"
  eval "port_$1=$port"
}
start bare --no-idempotency
start store --bare-store --redis "redis://127.0.0.1:$redis_port"
start memory
start redis --redis "redis://127.0.0.1:$redis_port"

run() { # label, port, script, round -> "rps p50 p99"
  local out
  out=$(nice -n "${NICE:-0}" wrk -t"$threads" -c"$connections" -d"${seconds}s" --latency -s "http/bench/$3.lua" \
    "http://127.0.0.1:$2/charges" -- "$tag-$4-$1")
  if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
    echo "$1: $(grep -E 'Non-2xx|Socket errors' <<<"$out")" >&2
  fi
  echo "$(awk '/^Requests\/sec/ {print $2}' <<<"$out") $(awk '$1 == "50%" {print $2}' <<<"$out") $(awk '$1 == "99%" {print $2}' <<<"$out")"
}

printf '%-6s %-14s %10s %8s %8s %9s %9s\n' round phase "req/s" "x bare" "x store" p50 p99
for round in $(seq "$rounds"); do
  read -r bare_rps bare_p50 bare_p99 <<<"$(run bare "$port_bare" fresh "$round")"
  printf '%-6s %-14s %10s %8s %8s %9s %9s\n' "$round" bare "$bare_rps" 1.00 - "$bare_p50" "$bare_p99"
  for phase in store-fresh store-replay memory-fresh memory-replay redis-fresh redis-replay; do
    port_var="port_${phase%-*}"
    kind=${phase#*-}
    read -r rps p50 p99 <<<"$(run "$phase" "${!port_var}" "$kind" "$round")"
    ratio=$(awk -v a="$rps" -v b="$bare_rps" 'BEGIN {printf "%.2f", a / b}')
    against_store=-
    case $phase in
      store-*) eval "store_$kind=$rps" ;;
      redis-*) store_var="store_$kind"
        against_store=$(awk -v a="$rps" -v b="${!store_var}" 'BEGIN {printf "%.2f", a / b}') ;;
    esac
    printf '%-6s %-14s %10s %8s %8s %9s %9s\n' "$round" "$phase" "$rps" "$ratio" "$against_store" "$p50" "$p99"
  done
done
