#!/usr/bin/env bash
# The inference backend as a service, from the bundle (.device-service/, made by
# bundle-service.sh), on a machine with neither Node nor the workspace: gpu-plan.sh's service
# step runs it with --backend cuda on the random Llama-3-8B-shaped model; here it runs with
# --backend cpu on a small model, from a copy of the bundle anywhere. In turn:
#  1. unpacks Node and the service into WORK (kept while the bundle's manifest is the same);
#  2. the model: MODEL itself when it has a tokenizer.json, else WORK/model, MODEL's files linked
#     and the bundle's Llama 3 tokenizer beside them (config.json's vocab_size must be 128,256);
#  3. starts the service (STRATA_ENGINE_BACKEND=BACKEND) and waits for GET /health/ready (at most
#     --ready-timeout s), giving up at once when the model fails to load or the process dies;
#  4. service-load.mjs: STREAMS concurrent POST /v1/generate SSE streams of PROMPT random token
#     ids and MAX_TOKENS tokens each (bench_cuda_e2e's workload), /metrics scraped before, during
#     and after: TTFT, ITL, tokens/s, KV usage;
#  5. stops the service (SIGTERM, SIGKILL after 10 s; also on any exit of this script);
#  6. unless --latency-streams 0: bench/http-latency.mjs, the per-token HTTP latency benchmark,
#     at LATENCY_STREAMS streams on LATENCY_MODEL (its own model, tinystories-656k) and backend;
#     with --latency-cuda-streams N (N > 0), again at N streams on the service's own model and
#     the CUDA backend: the HTTP layer at a GPU model's token rate, its CPUs free of the engine;
#     with --latency-http-workers W[,W...] too, that CUDA run once more for each W > 1 with W
#     event loops (STRATA_HTTP_WORKERS), right after the one-loop run, into
#     PREFIX.http-latency-cuda-wW.*;
#  7. PREFIX.json: the load, the benchmark and, given --engine-json, the engine alone's result on
#     the same workload, side by side; PREFIX.summary: one line of it.
# Also PREFIX.service.log, PREFIX.load.json, PREFIX.metrics.txt (the last scrape),
# PREFIX.http-latency.json and .log (and PREFIX.http-latency-cuda*.*). Exit status 0 when every
# part passed.
#   bash scripts/device/service-run.sh --bundle DIR --backend cpu|cuda --model DIR --out PREFIX
#     [--streams 64] [--requests N] [--prompt 1024] [--max-tokens 128] [--ready-timeout 300]
#     [--latency-model DIR] [--latency-streams 256] [--latency-backend cpu] [--latency-cuda-streams 0]
#     [--latency-http-workers 1]
#     [--engine-json FILE]
#     [--port 18080] [--work DIR]   (also STRATA_* service settings from the environment)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/device/gpu-env.sh
source "$here/gpu-env.sh"
bundle="" backend="" model="" out="" streams=64 requests="" prompt=1024 max_tokens=128 ready_timeout=300
latency_model="" latency_streams=256 latency_backend=cpu latency_cuda_streams=0 latency_http_workers=1
engine_json="" port=18080
work=${STRATA_SERVICE_WORK:-/tmp/strata-service}
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=$2 ;;
    --backend) backend=$2 ;;
    --model) model=$2 ;;
    --out) out=$2 ;;
    --streams) streams=$2 ;;
    --requests) requests=$2 ;;
    --prompt) prompt=$2 ;;
    --max-tokens) max_tokens=$2 ;;
    --ready-timeout) ready_timeout=$2 ;;
    --latency-model) latency_model=$2 ;;
    --latency-streams) latency_streams=$2 ;;
    --latency-backend) latency_backend=$2 ;;
    --latency-cuda-streams) latency_cuda_streams=$2 ;;
    --latency-http-workers) latency_http_workers=$2 ;;
    --engine-json) engine_json=$2 ;;
    --port) port=$2 ;;
    --work) work=$2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2 || { echo "$1 wants a value" >&2; exit 2; }
done
if [ -z "$bundle" ] || [ -z "$model" ] || [ -z "$out" ] || { [ "$backend" != cpu ] && [ "$backend" != cuda ]; }; then
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
requests=${requests:-$streams}
mkdir -p "$(dirname "$out")" "$work" || exit 1
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
rm -f "$out.json" "$out.summary" "$out.load.json" "$out.metrics.txt" "$out".http-latency*.json "$out".http-latency*.log

# ---- 1. Node and the service
unpack_xz() {  # file.xz, destination: xz, else Python's lzma
  xz -dc "$1" > "$2" 2> /dev/null ||
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
}
if [ ! -f "$bundle/manifest.txt" ]; then
  echo "no service bundle in $bundle (bash scripts/device/bundle-service.sh makes it)" >&2
  exit 1
fi
if cmp -s "$bundle/manifest.txt" "$work/manifest.txt" && [ -x "$work/node" ] && [ -f "$work/app/main.js" ]; then
  echo "bundle: reusing $work (same manifest)"
else
  started=$SECONDS
  rm -rf "${work:?}/app" "$work/llama3-tokenizer" "$work/node" "$work/manifest.txt" "$work/model"
  if ! { unpack_xz "$bundle/node.xz" "$work/node.part" && chmod +x "$work/node.part" && mv "$work/node.part" "$work/node"; }; then
    echo "cannot unpack $bundle/node.xz" >&2
    exit 1
  fi
  if ! untar_xz "$bundle/service.tar.xz" "$work"; then
    echo "cannot unpack $bundle/service.tar.xz" >&2
    exit 1
  fi
  cp "$bundle/manifest.txt" "$work/manifest.txt"
  echo "bundle: unpacked into $work in $((SECONDS - started)) s"
fi
node=$work/node
echo "node $("$node" --version); $(grep -E '^(sources|archs|nvcc|built) ' "$bundle/manifest.txt" | tr '\n' ' ')"

# ---- 2. the model, with a tokenizer
json_field() {  # file, field: a top-level number of a JSON file
  "$node" -e 'const v = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8"))[process.argv[2]];
    console.log(v ?? "")' "$1" "$2"
}
model=$(cd "$model" && pwd) || exit 1
serve=$model
if [ ! -f "$model/tokenizer.json" ]; then
  vocab=$(json_field "$model/config.json" vocab_size)
  if [ "$vocab" != 128256 ]; then
    echo "$model has no tokenizer.json, and its vocab_size ($vocab) is not Llama 3's 128256 (the bundle's tokenizer)" >&2
    exit 1
  fi
  serve=$work/model
  rm -rf "$serve"
  mkdir -p "$serve"
  for f in "$model"/*; do
    case ${f##*/} in tokenizer.json | tokenizer_config.json | manifest.txt) ;; *) ln -s "$f" "$serve/" ;; esac
  done
  cp "$work/llama3-tokenizer/tokenizer.json" "$work/llama3-tokenizer/tokenizer_config.json" "$serve/"
  echo "model: $serve ($model's files, the bundle's Llama 3 tokenizer)"
fi
vocab=$(json_field "$serve/config.json" vocab_size)
prompt_vocab=$((vocab < 128000 ? vocab : 128000))  # Llama 3's ids from 128000 on are special tokens

# PREFIX.json and PREFIX.summary from what exists so far: written after the load and again at
# the end, so that a step cut off in the benchmark still brings the load's result back.
compose() {
  "$node" - "$out" "$backend" "$serve" "$ready_s" "${engine_json:-}" << 'EOF'
const fs = require('node:fs');
const [prefix, backend, model, readySeconds, engineFile] = process.argv.slice(2);
const read = (f) => (f && fs.existsSync(f) ? JSON.parse(fs.readFileSync(f, 'utf8')) : null);
const load = read(`${prefix}.load.json`);
const latency = read(`${prefix}.http-latency.json`);
const latencyCuda = read(`${prefix}.http-latency-cuda.json`);
const dir = require('node:path').dirname(prefix);
const latencyLoops = fs
  .readdirSync(dir)
  .map((f) => require('node:path').join(dir, f))
  .filter((f) => f.startsWith(`${prefix}.http-latency-cuda-w`) && f.endsWith('.json'))
  .map(read);
const engine = read(engineFile);
const loaded = fs.readFileSync(`${prefix}.service.log`, 'utf8').split('\n').find((l) => l.includes('"msg":"model loaded"'));
const result = {
  benchmark: 'service',
  backend,
  model,
  ready_seconds: Number(readySeconds),
  model_loaded: loaded ? JSON.parse(loaded) : null,
  service: load,
  engine_alone: engine,
  http_latency: latency,
  http_latency_cuda: latencyCuda,
  http_latency_cuda_http_workers: latencyLoops,
};
fs.writeFileSync(`${prefix}.json`, `${JSON.stringify(result, null, 2)}\n`);
const f = (x) => (x === null || x === undefined ? '-' : Number(x).toFixed(0));
const parts = [];
if (load)
  parts.push(
    `service on ${backend}: ${load.completed}/${load.workload.requests} ok, TTFT p50 ${f(load.client.ttft_ms.p50)} p99 ${f(load.client.ttft_ms.p99)} ms, ` +
      `ITL p50 ${load.client.itl_ms.p50?.toFixed(1)} p99 ${load.client.itl_ms.p99?.toFixed(1)} ms, ${f(load.output_tokens_per_s)} tok/s, ` +
      `KV peak ${load.server_metrics.kv_cache_usage_peak === null ? '-' : (100 * load.server_metrics.kv_cache_usage_peak).toFixed(1)}%`,
  );
if (engine) parts.push(`engine alone: TTFT p50 ${f(engine.ttft_ms?.p50)} p99 ${f(engine.ttft_ms?.p99)} ms, ITL p50 ${engine.itl_ms?.p50?.toFixed(1)} p99 ${engine.itl_ms?.p99?.toFixed(1)} ms, ${f(engine.output_tokens_per_s)} tok/s`);
for (const l of [latency, latencyCuda, ...latencyLoops]) {
  if (!l) continue;
  const top = l.rows.filter((r) => r.concurrency === Math.max(...l.rows.map((x) => x.concurrency)));
  const loops = l.http_workers > 1 ? `, ${l.http_workers} loops` : '';
  for (const r of top)
    parts.push(`http-latency ${l.backend}${loops} ${r.concurrency} ${r.client}: added/token p99 ${r.itl_added_per_token.p99.toFixed(2)} ms`);
}
fs.writeFileSync(`${prefix}.summary`, `${parts.join('; ')}\n`);
console.log(`== ${parts.join('\n   ')}`);
EOF
}

# ---- 3. the service
service_pid=""
stop_service() {
  [ -n "$service_pid" ] || return 0
  kill -TERM "$service_pid" 2> /dev/null
  local waited=0
  while [ $waited -lt 20 ] && kill -0 "$service_pid" 2> /dev/null; do
    sleep 0.5
    waited=$((waited + 1))
  done
  kill -KILL "$service_pid" 2> /dev/null
  wait "$service_pid" 2> /dev/null
  service_pid=""
}
trap stop_service EXIT
trap 'stop_service; exit 143' TERM INT

http_status() {  # path: the HTTP status of GET path, from bash alone (no curl on the machine)
  local line
  { exec 3<> "/dev/tcp/127.0.0.1/$port"; } 2> /dev/null || { echo 0; return; }
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$1" >&3
  IFS=' ' read -r -t 5 _ line _ <&3 || line=0
  exec 3>&-
  echo "${line:-0}"
}
http_body() {
  { exec 3<> "/dev/tcp/127.0.0.1/$port"; } 2> /dev/null || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$1" >&3
  timeout 5 cat <&3 | sed '1,/^\r$/d'
  exec 3>&-
}

if [ "$(http_status /health/live)" != 0 ]; then
  echo "port $port already answers: another service is running (--port)" >&2
  exit 1
fi
echo "== service: $backend backend, $serve, port $port"
started=$SECONDS
STRATA_NATIVE_ADDON=$work/app/strata_native.node STRATA_MODEL_DIR=$serve STRATA_ENGINE_BACKEND=$backend \
  STRATA_SERVED_MODEL_NAME=${STRATA_SERVED_MODEL_NAME:-${model##*/}} HOST=127.0.0.1 PORT=$port STRATA_DRAIN_TIMEOUT_MS=${STRATA_DRAIN_TIMEOUT_MS:-3000} \
  STRATA_MAX_NUM_BATCHED_TOKENS=${STRATA_MAX_NUM_BATCHED_TOKENS:-8192} \
  "$node" "$work/app/main.js" > "$out.service.log" 2>&1 &
service_pid=$!
status=0
while [ $((SECONDS - started)) -lt "$ready_timeout" ]; do
  status=$(http_status /health/ready)
  [ "$status" = 200 ] && break
  if ! kill -0 "$service_pid" 2> /dev/null; then
    echo "the service exited before it was ready" >&2
    break
  fi
  grep -q '"msg":"model failed to load"' "$out.service.log" && break
  sleep 1
done
if [ "$status" != 200 ]; then
  ready=$(http_body /health/ready)
  echo "not ready after $((SECONDS - started)) s (GET /health/ready: $status): $ready" >&2
  tail -n 20 "$out.service.log" >&2
  why=$(grep -o 'failed to load: [^"]*' <<< "$ready" | head -1)
  echo "service on $backend: not ready after $((SECONDS - started)) s: ${why:-see service.log}" > "$out.summary"
  exit 1
fi
ready_s=$((SECONDS - started))
echo "ready in $ready_s s: $(http_body /health/ready)"
grep -m1 '"msg":"model loaded"' "$out.service.log" | cut -c1-1200

# ---- 4. the load
echo "== load: $requests requests, $streams streams, $prompt + $max_tokens tokens"
"$node" "$here/service-load.mjs" --url "http://127.0.0.1:$port" --out "$out.load.json" --metrics-out "$out.metrics.txt" \
  --streams "$streams" --requests "$requests" --prompt "$prompt" --max-tokens "$max_tokens" --vocab "$prompt_vocab"
load_rc=$?
compose > /dev/null

# ---- 5. stop
stop_service
echo "service stopped: $(grep -o '"outcome":"[a-z]*"' "$out.service.log" | tail -1)"

# ---- 6. the per-token HTTP latency benchmark
latency_bench() {  # streams, model, backend, output prefix[, event loops]
  echo "== http-latency: $1 streams on $2 ($3 backend, ${5:-1} event loops)"
  STRATA_NATIVE_ADDON=$work/app/strata_native.node STRATA_SSE_CLIENT=$work/app/sse-client \
    "$node" "$work/app/http-latency.js" --model "$2" --concurrency "$1" --backend "$3" \
    --http-workers "${5:-1}" --out "$4.json" > "$4.log" 2>&1
  local rc=$?
  tail -n 12 "$4.log"
  return $rc
}
latency_rc=0
if [ "$latency_streams" != 0 ]; then
  if [ -z "$latency_model" ]; then
    echo "--latency-model is needed unless --latency-streams 0" >&2
    latency_rc=2
  else
    latency_bench "$latency_streams" "$latency_model" "$latency_backend" "$out.http-latency" || latency_rc=$?
  fi
fi
if [ "$latency_cuda_streams" != 0 ]; then
  latency_bench "$latency_cuda_streams" "$serve" cuda "$out.http-latency-cuda" || latency_rc=$?
  for loops in ${latency_http_workers//,/ }; do
    case $loops in
      '' | *[!0-9]*) echo "--latency-http-workers: whole numbers, not $loops" >&2; latency_rc=2; continue ;;
    esac
    [ "$loops" -gt 1 ] || continue
    latency_bench "$latency_cuda_streams" "$serve" cuda "$out.http-latency-cuda-w$loops" "$loops" || latency_rc=$?
  done
fi

# ---- 7. side by side
compose
[ "$load_rc" = 0 ] && [ "$latency_rc" = 0 ]
