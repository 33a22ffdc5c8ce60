#!/bin/bash
# gateway-ab.sh MODE "ENV_A" "ENV_B": bin/gateway on a private redis-server,
# restarted for each of A, B, A, B with that environment added (e.g.
# "GOGC=100" "GOGC=400"), under bin/loadgen --mode MODE (create or query)
# at 64 connections for 8 s after a 2 s warm-up; prints each run's rate,
# p99 and the gateway's and Redis's CPU per request (/proc/PID/stat).
# With BIN_B=DIR, B's runs use DIR's gateway and easelctl instead (an older
# build: "" "" for the environments compares the two builds alone).
# Build first: make build. Uses ports 6391 and 8091.
set -euo pipefail
MODE=$1; A=$2; B=$3
BIN=${BIN:-bin}
BIN_A=$BIN; BIN_B=${BIN_B:-$BIN}
DIR=$(mktemp -d)
trap 'redis-cli -p 6391 shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
MIX=lumen-2.5-flash-image/-/1:1=3,lumen-3-pro-image-preview/2K/16:9=1
tick() { awk '{print $14+$15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
for run in A B A B; do
	if [ $run = A ]; then env=$A; GBIN=$BIN_A; else env=$B; GBIN=$BIN_B; fi
	redis-cli -p 6391 shutdown nosave >/dev/null 2>&1 || true
	sleep 0.3
	redis-server --port 6391 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --logfile "$DIR/redis.log" >/dev/null
	sleep 0.4
	export EASEL_REDIS_URL=redis://127.0.0.1:6391
	acct=$("$GBIN/easelctl" account create --name bench --credits 1000000000000 --rate-limit 1000000 --query-rate-limit 1000000 --max-inflight 1000000 | tail -1 | awk '{print $NF}')
	: >"$DIR/keys"
	for _ in 1 2 3 4; do "$GBIN/easelctl" key create --account "$acct" | grep -o 'esk_[A-Za-z0-9_]*' | head -1 >>"$DIR/keys"; done
	# shellcheck disable=SC2086 # $env is words of KEY=VALUE
	env $env EASEL_HTTP_ADDR=127.0.0.1:8091 EASEL_METRICS_ADDR=off EASEL_SIGNING_SECRET=bench-signing-secret-0123456789abcdef \
		EASEL_BLOB_URL="file://$DIR/blobs" EASEL_LOG_LEVEL=info EASEL_ACCOUNT_MAX_RUNNING=0 "$GBIN/gateway" >"$DIR/gateway.log" 2>&1 &
	gw=$!
	sleep 1
	rp=$(pgrep -f "redis-server 127.0.0.1:6391")
	load() { "$BIN/loadgen" --mode "$MODE" --query-tasks 1000 --url http://127.0.0.1:8091 --keys-file "$DIR/keys" --mix "$MIX" --concurrency 64 --duration "$1" --quiet; }
	load 2s >/dev/null
	g0=$(tick $gw); r0=$(tick "$rp")
	out=$(load 8s | grep -E "^ +(create|query) ")
	g1=$(tick $gw); r1=$(tick "$rp")
	n=$(echo "$out" | awk '{print $2}')
	echo "[$run $GBIN $env] $MODE $(echo "$out" | awk '{print $5}')/s, p99 $(echo "$out" | awk '{print $8}') ms;" \
		"gateway $(( (g1 - g0) * 1000000 / hz / n )) µs/request, redis $(( (r1 - r0) * 1000000 / hz / n )) µs/request"
	kill $gw
	wait $gw 2>/dev/null || true
done
