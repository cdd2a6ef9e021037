#!/usr/bin/env bash
# Everything the CUDA backend needs checked and measured on a GPU, in one device call: the steps
# below in order of value, each under its own timeout (trimmed to what is left of the call's
# budget), the whole under an outer timeout well inside the device tool's 600 s. Run from the
# repository root; docs/cuda-notes.md ("Running on the GPU machine") has the device tool's call.
#
#   bash scripts/device/gpu-plan.sh [--dry-run] [--budget S] [--cap STEP=S]... [--from STEP] [STEP...]
#   bash scripts/device/gpu-plan.sh --list | --source-hash | --service-hash | --llama3-key
#
# With no STEP, every step of the plan; named steps (or --from STEP: that one and every later
# one) run in the plan's order, after the steps they need (machine always, build, llama3).
# --budget: the outer timeout, 540 s unless given (at most 570). --cap: another timeout for a
# step. --dry-run: the whole plan without a GPU, every command that needs the GPU, the toolkit
# or PyTorch printed instead of run (gpu-env.sh's gpu()); how CI tests this script.
#
# $OUT (the device tool's folder; /tmp/strata-gpu-out otherwise) gets, each time a step ends:
#   summary.txt   one line per step: status, exit code, seconds, its timeout, a note
#   plan.json     the same, as JSON
#   results.tgz   every finished step's NN-step.log, NN-step.step.json (its status) and
#                 NN-step.json (the program's own JSON: a check's rows, a benchmark's numbers)
#   running.log   the log of a step cut off by the outer timeout, as far as it got
# The summary is printed last. Exit status 0 when every step passed, 1 otherwise, 2 for bad
# arguments.
#
# Outside the repository, on the GPU machine: the build (/tmp/strata-cuda-build), kept and
# rebuilt incrementally by later calls while the machine stays warm, and the random
# Llama-3-8B-shaped model with transformers' logits (/tmp/strata-llama3), made once per machine
# and reused while its manifest checks.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=scripts/device/gpu-env.sh
source scripts/device/gpu-env.sh
self=scripts/device/gpu-plan.sh

# The plan, in order of value, and the extras, run only when named.
PLAN=(machine build gemm kernels quant sampling backend memcheck llama3 hf_logits forward hf_generate e2e)
EXTRAS=(profile bench_gemm bench_quant bench_sampling e2e_cpu_sampling memcheck_quant racecheck_quant
  memcheck_sampling racecheck_sampling service bench_attention gemv gguf programmatic profile_gguf limits load)
# Each step's timeout (s), the least time worth starting it with, and the steps it needs.
declare -A CAP=([machine]=45 [build]=330 [gemm]=60 [kernels]=90 [quant]=90 [sampling]=150 [backend]=120
  [memcheck]=180 [llama3]=300 [hf_logits]=150 [forward]=180 [hf_generate]=180 [e2e]=180
  [profile]=240 [bench_gemm]=120 [bench_quant]=180 [bench_sampling]=180 [e2e_cpu_sampling]=180 [memcheck_quant]=240
  [racecheck_quant]=300 [memcheck_sampling]=300 [racecheck_sampling]=300 [service]=240 [bench_attention]=120 [gemv]=150 [gguf]=240 [profile_gguf]=150 [programmatic]=150 [limits]=300 [load]=240)
declare -A MIN=([machine]=5 [build]=60 [gemm]=15 [kernels]=20 [quant]=20 [sampling]=30 [backend]=20
  [memcheck]=60 [llama3]=60 [hf_logits]=45 [forward]=60 [hf_generate]=60 [e2e]=60
  [profile]=60 [bench_gemm]=30 [bench_quant]=30 [bench_sampling]=30 [e2e_cpu_sampling]=60 [memcheck_quant]=60
  [racecheck_quant]=60 [memcheck_sampling]=60 [racecheck_sampling]=60 [service]=90 [bench_attention]=30 [gemv]=60 [gguf]=90 [profile_gguf]=60 [programmatic]=60 [limits]=120 [load]=90)
declare -A NEEDS=([gemm]=build [kernels]=build [quant]=build [sampling]=build [backend]=build
  [memcheck]=build [hf_logits]="build llama3" [forward]="build llama3" [hf_generate]=llama3
  [e2e]="build llama3" [profile]="build llama3" [bench_gemm]=build [bench_quant]=build [bench_sampling]=build
  [e2e_cpu_sampling]="build llama3" [memcheck_quant]=build [racecheck_quant]=build
  [memcheck_sampling]=build [racecheck_sampling]=build [service]="build llama3" [bench_attention]=build [gemv]="build llama3" [gguf]="build llama3" [profile_gguf]="build llama3" [programmatic]="build llama3" [limits]="build llama3" [load]="build llama3")
declare -A WHAT=([machine]="GPU, driver, toolkit and tools"
  [build]="the GPU programs for this GPU's arch (or the prebuilt ones)"
  [gemm]="cuBLASLt / cublasGemmEx against float64 (check_cuda_gemm)"
  [kernels]="every kernel against float64 (check_cuda_kernels)"
  [quant]="the Q4_0/Q4_1/Q8_0 GEMM against float64 (check_cuda_quant)"
  [sampling]="the GPU sampler against the CPU Sampler (check_cuda_sampling)"
  [backend]="greedy tokens against the CPU backend (check_cuda_backend)"
  [memcheck]="compute-sanitizer memcheck over check_cuda_kernels"
  [llama3]="the random Llama-3-8B-shaped model, transformers' bf16 and fp32 logits (llama3_random.py)"
  [hf_logits]="Llama-3-8B logits against transformers (check_cuda_hf_logits)"
  [forward]="prefill and decode against the roofline, each step's GPU time by stage (bench_cuda_forward)"
  [hf_generate]="transformers generate() on the e2e workload (hf_generate.py)"
  [e2e]="256 requests through the engine (bench_cuda_e2e)"
  [profile]="ncu: each kernel's time in one prefill and one decode step per batch (bench_cuda_forward --profile)"
  [bench_gemm]="bench_cuda_gemm" [bench_quant]="bench_cuda_quant" [bench_sampling]="bench_cuda_sampling"
  [bench_attention]="decode attention alone, CUDA cores against tensor cores (bench_cuda_attention)"
  [gemv]="decode steps of 1 to 8 sequences, the GEMV kernel against cuBLAS (bench_cuda_forward --gemv-rows 8)"
  [gguf]="GGUF Q4_0/Q8_0 on the GPU: tinystories-656k checked (check_cuda_backend), Llama-3-8B-shaped timed (bench_cuda_forward)"
  [profile_gguf]="ncu: each kernel's time in decode steps of 1 and 64 on the Llama-3-8B-shaped model as Q4_0"
  [limits]="ncu: what bounds the first layer's kernels (speed of light, occupancy, pipes, stalls) of Q4_0 decode steps of 1 and 64 and a bf16 prefill step"
  [load]="the weights' load, three runs each: the bf16 safetensors model and its F16 GGUF copy (bench_cuda_load)"
  [programmatic]="decode steps with programmatic dependent launch against without, and its prefetch and early trigger apart (bench_cuda_forward --programmatic 1)"
  [e2e_cpu_sampling]="bench_cuda_e2e with the CPU sampler"
  [memcheck_quant]="compute-sanitizer memcheck over check_cuda_quant"
  [racecheck_quant]="compute-sanitizer racecheck over check_cuda_quant"
  [memcheck_sampling]="compute-sanitizer memcheck over check_cuda_sampling"
  [racecheck_sampling]="compute-sanitizer racecheck over check_cuda_sampling"
  [service]="the inference backend on the CUDA backend (.device-service): 64 SSE streams next to the engine alone, /metrics, HTTP latency at 256 streams")
DEFAULT_BUDGET=540  # the device tool stops a command at 600 s
MAX_BUDGET=570
# Kept back from the steps' timeouts for the summary and the archive. The plan's tests set a
# negative one to make a step outlast the outer timeout.
RESERVE=${STRATA_PLAN_RESERVE:-15}

OUT=${OUT:-/tmp/strata-gpu-out}
WORK=${STRATA_PLAN_WORK:-/tmp/strata-gpu-plan}
RESULTS=$WORK/results
STATE=$WORK/state
CACHE=${STRATA_LLAMA3_CACHE:-/tmp/strata-llama3}
PREBUILT=${STRATA_DEVICE_BIN:-.device-bin}
SERVICE_BUNDLE=${STRATA_SERVICE_BUNDLE:-.device-service}
MODELS=${STRATA_MODELS_DIR:-.device-models}
LAYERS=${STRATA_LLAMA3_LAYERS:-32}

is_step() {
  local s
  for s in "${PLAN[@]}" "${EXTRAS[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}

# Two-digit position in the plan: the prefix of the step's files.
index_of() {
  local i=1 s
  for s in "${PLAN[@]}" "${EXTRAS[@]}"; do
    if [ "$s" = "$1" ]; then
      printf '%02d' "$i"
      return
    fi
    i=$((i + 1))
  done
}

base_of() { echo "$RESULTS/$(index_of "$1")-$1"; }

cap_of() {  # the step's timeout, after --cap
  local kv
  for kv in ${STRATA_PLAN_CAPS:-}; do
    if [ "${kv%%=*}" = "$1" ]; then
      echo "${kv#*=}"
      return
    fi
  done
  echo "${CAP[$1]}"
}

json_str() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/ }
  s=${s//$'\r'/}
  printf '"%s"' "$s"
}

llama3_key() {
  { cat scripts/device/llama3_random.py; echo "layers=$LAYERS seed=0"; } | sha256sum | cut -c1-16
}

# 0 when $1 holds a complete model made by this llama3_random.py with these arguments: its
# manifest (written last) has the key, names the reference files, and every file it lists has
# the size it lists.
llama3_valid() {
  local dir=$1 key=$2 size name need
  [ -f "$dir/manifest.txt" ] || return 1
  [ "$(head -1 "$dir/manifest.txt")" = "key $key" ] || return 1
  for need in config.json prompts.bin logits.bin logits_fp32.bin; do
    grep -q " $need\$" "$dir/manifest.txt" || return 1
  done
  while read -r size name; do
    [ "$size" = key ] && continue
    [ "$(stat -c %s "$dir/$name" 2>/dev/null)" = "$size" ] || return 1
  done < "$dir/manifest.txt"
}

find_ncu() {
  local s
  for s in "$(command -v ncu)" "${cuda_home:-/usr/local/cuda}/bin/ncu" /usr/local/cuda/bin/ncu \
    /opt/nvidia/nsight-compute/*/ncu; do
    if [ -n "$s" ] && [ -x "$s" ]; then
      echo "$s"
      return
    fi
  done
  dry_run && echo ncu
}

find_sanitizer() {
  local s
  for s in "$(command -v compute-sanitizer)" "${cuda_home:-/usr/local/cuda}/bin/compute-sanitizer" \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    if [ -n "$s" ] && [ -x "$s" ]; then
      echo "$s"
      return
    fi
  done
  dry_run && echo compute-sanitizer
}

# ---- what $OUT holds, rewritten as each step ends --------------------------------------------

pack() {
  tar czf "$OUT/.results.tgz.part" -C "$RESULTS" . && mv -f "$OUT/.results.tgz.part" "$OUT/results.tgz"
}

write_plan_json() {  # [finished] [outer timeout]
  local name base sep=""
  {
    printf '{"dry_run":%s,"budget_s":%s,"reserve_s":%s,"started":%s,"finished":%s,"outer_timeout":%s,"selected":[' \
      "$(dry_run && echo true || echo false)" "$STRATA_PLAN_BUDGET" "$RESERVE" \
      "$(json_str "$(date -u -d "@$STRATA_PLAN_STARTED" +%FT%TZ)")" "${1:-false}" "${2:-false}"
    for name in $STRATA_PLAN_SELECTED; do
      printf '%s%s' "$sep" "$(json_str "$name")"
      sep=,
    done
    printf '],"steps":['
    sep=""
    for name in $STRATA_PLAN_SELECTED; do
      base=$(base_of "$name")
      [ -f "$base.step.json" ] || continue
      printf '%s%s' "$sep" "$(tr -d '\n' < "$base.step.json")"
      sep=,
    done
    printf ']}\n'
  } > "$OUT/.plan.json.part" && mv -f "$OUT/.plan.json.part" "$OUT/plan.json"
  cp "$OUT/plan.json" "$RESULTS/plan.json"
}

summary_line() {  # step status rc seconds timeout note
  printf '%-18s %-8s %4s %6s %8s%s\n' "$1" "$2" "${3:--}" "${4:+$4 s}" "${5:+$5 s}" "${6:+  $6}"
}

# Records a step's end: its status file, NN-step.step.json, its line in summary.txt, plan.json,
# results.tgz. A step already recorded is left as it is.
record_step() {  # step status rc seconds timeout note
  local base
  base=$(base_of "$1")
  [ -f "$base.step.json" ] && return
  echo "$2" > "$STATE/status.$1"
  printf '{"step":%s,"status":%s,"rc":%s,"seconds":%s,"timeout_s":%s,"note":%s}\n' "$(json_str "$1")" \
    "$(json_str "$2")" "${3:-null}" "${4:-null}" "${5:-null}" "$(json_str "$6")" > "$base.step.json"
  summary_line "$@" >> "$OUT/summary.txt"
  cp "$OUT/summary.txt" "$RESULTS/summary.txt"
  write_plan_json
  pack
}

# ---- the plan: parse, select, run the steps under the outer timeout, print the summary --------

usage() {
  sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
}

plan_main() {
  local budget=$DEFAULT_BUDGET caps="" from="" requested=() arg name dep s selected=() changed
  while [ $# -gt 0 ]; do
    case $1 in
      --dry-run) export STRATA_PLAN_DRY_RUN=1 ;;
      --budget) budget=${2:-}; shift ;;
      --cap) caps="$caps ${2:-}"; shift ;;
      --from) from=${2:-}; shift ;;
      --list)
        for s in "${PLAN[@]}" "${EXTRAS[@]}"; do
          printf '%-18s %4s s  (start with >= %3s s)  needs: %-12s %s\n' "$s" "${CAP[$s]}" "${MIN[$s]}" \
            "${NEEDS[$s]:--}" "${WHAT[$s]}"
        done
        exit 0 ;;
      --source-hash) source_hash; exit 0 ;;
      --service-hash) service_source_hash; exit 0 ;;
      --llama3-key) llama3_key; exit 0 ;;
      -h | --help) usage ;;
      -*) echo "unknown option $1" >&2; exit 2 ;;
      *) requested+=("$1") ;;
    esac
    shift
  done
  if ! [[ $RESERVE =~ ^-?[0-9]+$ ]]; then
    echo "STRATA_PLAN_RESERVE must be a whole number of seconds" >&2
    exit 2
  fi
  if ! [[ $budget =~ ^[0-9]+$ ]] || [ "$budget" -gt "$MAX_BUDGET" ] || [ "$budget" -le "$RESERVE" ]; then
    echo "--budget must be a whole number of seconds, over $RESERVE and at most $MAX_BUDGET (the device tool stops a command at 600 s)" >&2
    exit 2
  fi
  for arg in $caps; do
    if ! is_step "${arg%%=*}" || ! [[ ${arg#*=} =~ ^[1-9][0-9]*$ ]]; then
      echo "--cap wants STEP=SECONDS, not '$arg'" >&2
      exit 2
    fi
  done
  if [ -n "$from" ]; then
    is_step "$from" || { echo "unknown step $from (--list)" >&2; exit 2; }
    local on=0
    for s in "${PLAN[@]}"; do
      [ "$s" = "$from" ] && on=1
      [ $on = 1 ] && requested+=("$s")
    done
    [ $on = 1 ] || requested+=("$from")
  fi
  for name in "${requested[@]}"; do
    is_step "$name" || { echo "unknown step $name (--list)" >&2; exit 2; }
  done
  [ ${#requested[@]} -gt 0 ] || requested=("${PLAN[@]}")
  # What the named steps need, then the plan's order.
  declare -A want=([machine]=1)
  for name in "${requested[@]}"; do want[$name]=1; done
  changed=1
  while [ $changed = 1 ]; do
    changed=0
    for name in "${!want[@]}"; do
      for dep in ${NEEDS[$name]:-}; do
        [ -n "${want[$dep]:-}" ] || { want[$dep]=1; changed=1; }
      done
    done
  done
  for s in "${PLAN[@]}" "${EXTRAS[@]}"; do [ -n "${want[$s]:-}" ] && selected+=("$s"); done

  STRATA_PLAN_STARTED=$(date +%s)
  export STRATA_PLAN_SELECTED="${selected[*]}" STRATA_PLAN_BUDGET=$budget STRATA_PLAN_CAPS=$caps \
    STRATA_PLAN_STARTED STRATA_PLAN_DEADLINE=$((STRATA_PLAN_STARTED + budget))
  rm -rf "$RESULTS" "$STATE"
  mkdir -p "$OUT" "$RESULTS" "$STATE" || exit 1
  rm -f "$OUT/summary.txt" "$OUT/plan.json" "$OUT/results.tgz" "$OUT/running.log"
  printf '%-18s %-8s %4s %6s %8s  %s\n' step status rc time timeout notes > "$OUT/summary.txt"
  cp "$OUT/summary.txt" "$RESULTS/summary.txt"
  write_plan_json
  echo "gpu-plan: ${selected[*]}"
  echo "budget ${budget} s (outer timeout), $RESERVE s kept for the summary$(dry_run && echo '; DRY RUN: no GPU command runs')"

  timeout -k 10 "$budget" bash "$self" --inner < /dev/null
  local rc=$? cut=false started t pid now
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && cut=true
  if [ -f "$STATE/running" ]; then  # the outer timeout cut a step off: end its process group
    read -r name started t pid < "$STATE/running"
    kill -TERM -- "-$pid" 2>/dev/null
    sleep 2
    kill -KILL -- "-$pid" 2>/dev/null
    [ -f "$OUT/running.log" ] && cp "$OUT/running.log" "$(base_of "$name").log"
    now=$(date +%s)
    record_step "$name" killed 137 $((now - started)) "$t" "cut off by the outer timeout ($budget s); its log so far: running.log"
  fi
  for name in "${selected[@]}"; do
    [ -f "$STATE/status.$name" ] || record_step "$name" not-run "" "" "" "the outer timeout ($budget s) came first"
  done
  write_plan_json true "$cut"
  pack

  # Last, the summary: one line per step.
  local ok=0 failed=0 timedout=0 skipped=0 left=0 next="" status
  for name in "${selected[@]}"; do
    status=$(cat "$STATE/status.$name")
    case $status in
      ok) ok=$((ok + 1)) ;;
      failed) failed=$((failed + 1)) ;;
      timeout | killed) timedout=$((timedout + 1)) ;;
      skipped) skipped=$((skipped + 1)) ;;
      *) left=$((left + 1)) ;;
    esac
    case $status in no-time | not-run | killed) [ -n "$next" ] || next=$name ;; esac
  done
  echo
  echo "== summary ($OUT: summary.txt, plan.json, results.tgz)"
  cat "$OUT/summary.txt"
  echo "gpu-plan: ${#selected[@]} steps: $ok ok, $failed failed, $timedout timed out, $skipped skipped, $left not run;" \
    "$(($(date +%s) - STRATA_PLAN_STARTED)) s of the $budget s budget$(dry_run && echo ' (dry run)')"
  [ -z "$next" ] || echo "the rest, in the next call while this machine is warm: bash $self --from $next"
  [ "$ok" -eq ${#selected[@]} ]
}

# ---- inside the outer timeout: each step in turn ---------------------------------------------

inner_main() {
  local name dep status blocked now left cap t
  find_gpu_toolkit > /dev/null 2>&1 && export nvcc_path cuda_home
  find_cublas
  for name in $STRATA_PLAN_SELECTED; do
    blocked=""
    for dep in ${NEEDS[$name]:-}; do
      status=$(cat "$STATE/status.$dep" 2>/dev/null || echo missing)
      [ "$status" = ok ] || blocked="needs $dep ($status)"
    done
    if [ -n "$blocked" ]; then
      echo "== $name: skipped ($blocked)"
      record_step "$name" skipped "" "" "" "$blocked"
      continue
    fi
    now=$(date +%s)
    left=$((STRATA_PLAN_DEADLINE - RESERVE - now))
    cap=$(cap_of "$name")
    t=$((cap < left ? cap : left))
    if [ "$left" -lt "$((MIN[$name] < cap ? MIN[$name] : cap))" ]; then
      echo "== $name: not started, $left s left of the budget"
      record_step "$name" no-time "" "" "" "not started: $left s left of the budget, it needs at least ${MIN[$name]} s"
      continue
    fi
    run_step "$name" "$t"
  done
}

run_step() {  # step timeout
  local name=$1 t=$2 base started pid rc status
  base=$(base_of "$name")
  started=$(date +%s)
  echo "== $name: ${WHAT[$name]} (timeout $t s; $((STRATA_PLAN_DEADLINE - started)) s of the budget left)"
  # timeout runs the step in a process group of its own; the outer timeout's clean-up ends it
  # by that group (its pid, in $STATE/running).
  timeout -k 5 "$t" env STRATA_PLAN_STEP="$name" STRATA_PLAN_BASE="$base" bash "$self" --run-step "$name" \
    < /dev/null > "$OUT/running.log" 2>&1 &
  pid=$!
  echo "$name $started $t $pid" > "$STATE/running"
  wait "$pid"
  rc=$?
  mv -f "$OUT/running.log" "$base.log"
  case $rc in
    0) status=ok ;;
    124 | 137) status=timeout ;;
    77) status=skipped ;;
    *) status=failed ;;
  esac
  record_step "$name" "$status" "$rc" $(($(date +%s) - started)) "$t" "$(step_note "$name" "$base" "$status" "$t")"
  rm -f "$STATE/running"
  # What to see of the step in the call's output (the whole log is in results.tgz).
  if [ "$status" != ok ]; then
    tail -n 25 "$base.log"
  else
    case $name in
      machine) head -n 40 "$base.log" ;;
      forward | gemv | programmatic | e2e | e2e_cpu_sampling | hf_generate | bench_*) tail -n 15 "$base.log" ;;
      service) grep -E '^(ready in|service load:|  client:|  /metrics:|target|== |   )' "$base.log" | cut -c1-300 ;;
      profile | profile_gguf) grep -A6 -E '^(prefill|decode-[0-9]+): ' "$base.log" ;;
      limits) grep -A16 -E '^[A-Za-z0-9_]+\.(prefill|decode-[0-9]+): ' "$base.log" | cut -c1-200 ;;
      *) { grep -E '^FAIL' "$base.log" | head -10; tail -n 1 "$base.log"; } ;;
    esac
  fi
}

# One line for the summary: the step's own notes, the checks' ok/FAIL counts, memcheck's error
# summary, the build's spills.
step_note() {  # step base status timeout
  local parts=() line n_ok n_fail
  if [ -f "$2.note" ]; then
    while IFS= read -r line; do parts+=("$line"); done < "$2.note"
  fi
  [ "$3" = timeout ] && parts+=("over its $4 s timeout")
  n_ok=$(grep -cE '^ok ' "$2.log")
  n_fail=$(grep -cE '^FAIL ' "$2.log")
  [ $((n_ok + n_fail)) -gt 0 ] && parts+=("$n_ok ok, $n_fail failed")
  line=$(grep -oE 'ERROR SUMMARY: [0-9]+ errors?' "$2.log" | tail -1)
  [ -n "$line" ] && parts+=("$line")
  if [ "$3" = failed ]; then  # the programs' own words for a failure before any check
    line=$(grep -m1 -E '^(no CUDA device|error: |usage: )' "$2.log")
    [ -n "$line" ] && parts+=("$line")
  fi
  if [ "$1" = build ] && grep -q '^build: ' "$2.log"; then
    parts+=("$(grep -m1 '^build: ' "$2.log" | sed 's/^build: //; s/ into .*//')")
    grep -q 'spill stores' "$2.log" &&
      parts+=("$(grep -E 'spill stores' "$2.log" | grep -vc ' 0 bytes spill stores') kernels spill (ptxas)")
  fi
  local IFS=';'
  line="${parts[*]}"
  echo "${line//;/; }"
}

# ---- one step, in its own process under its own timeout --------------------------------------

note() { echo "$*" >> "$STRATA_PLAN_BASE.note"; }

check() {  # program, then its arguments: a GPU check writing its rows as JSON
  local program=$1
  shift
  STRATA_CHECK_JSON="$STRATA_PLAN_BASE.json" gpu "$BIN/$program" "$@"
}

sanitize() {  # tool, program
  local sanitizer
  sanitizer=$(find_sanitizer) || { note "no compute-sanitizer on this machine"; exit 77; }
  STRATA_CHECK_JSON="$STRATA_PLAN_BASE.json" gpu "$sanitizer" --tool "$1" --error-exitcode 3 "$BIN/$2"
}

step_main() {
  local name=$1
  BIN=$(cat "$STATE/bin_dir" 2>/dev/null || echo "${STRATA_CUDA_BUILD:-/tmp/strata-cuda-build}/cuda")
  MODEL=$CACHE/llama3-$(llama3_key)
  case $name in
    machine) step_machine ;;
    build) step_build ;;
    gemm | kernels | quant | sampling) check "check_cuda_$name" ;;
    backend) step_backend ;;
    memcheck) sanitize memcheck check_cuda_kernels ;;
    memcheck_quant | racecheck_quant | memcheck_sampling | racecheck_sampling)
      sanitize "${name%%_*}" "check_cuda_${name#*_}" ;;
    llama3) step_llama3 ;;
    hf_logits) check check_cuda_hf_logits "$MODEL" ;;
    forward) gpu "$BIN/bench_cuda_forward" "$MODEL" "$STRATA_PLAN_BASE.json" ;;
    gemv) gpu "$BIN/bench_cuda_forward" "$MODEL" "$STRATA_PLAN_BASE.json" --gemv-rows 8 --batches 1,2,4,8 --prefill-seqs 2 ;;
    gguf) step_gguf ;;
    load) step_load ;;
    programmatic) gpu "$BIN/bench_cuda_forward" "$MODEL" "$STRATA_PLAN_BASE.json" --programmatic 1 --batches 1,2,8,64 --prefill-seqs 2 ;;
    hf_generate) PYTHONUNBUFFERED=1 gpu python3 scripts/device/hf_generate.py "$MODEL" "$STRATA_PLAN_BASE.json" ;;
    e2e | e2e_cpu_sampling) step_e2e "$name" ;;
    profile) profile_model "$MODEL" "${STRATA_PROFILE_PHASES:-decode:1 decode:64 prefill}" ;;
    profile_gguf) step_profile_gguf ;;
    limits) step_limits ;;
    service) step_service ;;
    bench_gemm | bench_quant | bench_sampling | bench_attention) gpu "$BIN/bench_cuda_${name#bench_}" "$STRATA_PLAN_BASE.json" ;;
    *) echo "no step $name" >&2; exit 2 ;;
  esac
}

step_machine() {
  local query arch sanitizer version="" release="" rc=0
  query=$(gpu nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm,clocks.max.mem \
    --format=csv,noheader) || rc=1
  echo "$query"
  gpu nvidia-smi || rc=1
  arch=$(gpu_arch) && echo "arch: sm_$arch"
  if find_gpu_toolkit; then
    version=$(gpu "$nvcc_path" --version)
    echo "$version"
    release=$(grep -o 'release [0-9.]*' <<< "$version" | head -1)
  else
    rc=1
  fi
  echo "cuda_home=${cuda_home:-none} STRATA_CUBLAS_DIR=${STRATA_CUBLAS_DIR:-none found}"
  sanitizer=$(find_sanitizer) && echo "compute-sanitizer: $sanitizer"
  echo "cmake: $(cmake --version 2>/dev/null | head -1), ninja: $(ninja --version 2>/dev/null || echo none)"
  gpu python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "device", torch.cuda.get_device_name(0))'
  echo "cores: $(nproc)"
  free -g 2>/dev/null | head -2
  df -h /tmp 2>/dev/null | tail -1
  if dry_run; then
    note "dry run"
  else
    note "${query:-no nvidia-smi}"
  fi
  # For the benchmark records: which GPU, driver and toolkit gave the numbers.
  local gpu_name="" driver="" memory="" cap=""
  dry_run || IFS=, read -r gpu_name driver memory cap _ <<< "$query"
  printf '{"gpu":%s,"driver":%s,"memory":%s,"compute_cap":%s,"nvcc":%s,"cublas_dir":%s}\n' \
    "$(json_str "${gpu_name# }")" "$(json_str "${driver# }")" "$(json_str "${memory# }")" "$(json_str "${cap# }")" \
    "$(json_str "$release")" "$(json_str "${STRATA_CUBLAS_DIR:-}")" > "$STRATA_PLAN_BASE.json"
  return $rc
}

step_build() {
  local arch why
  arch=$(gpu_arch) || { echo "no compute capability from nvidia-smi"; exit 1; }
  if why=$(prebuilt_usable "$PREBUILT" "$arch" "$WORK/prebuilt"); then
    echo "$why"
    echo "$WORK/prebuilt" > "$STATE/bin_dir"
    note "prebuilt ($PREBUILT: sm_$arch, $(manifest_field "$PREBUILT" nvcc))"
    exit 0
  fi
  echo "$why"
  note "built here ($(echo "$why" | tail -1))"
  find_gpu_toolkit || exit 1
  build_gpu_targets "$arch" || exit 1
  echo "${STRATA_CUDA_BUILD:-/tmp/strata-cuda-build}/cuda" > "$STATE/bin_dir"
}

step_backend() {
  local models=() m
  for m in tinystories-656k stories260K tinystories-656k-gguf; do
    [ -d "$MODELS/$m" ] && models+=("$MODELS/$m")
  done
  if [ ${#models[@]} -eq 0 ]; then
    note "no models in $MODELS: carry .device-models (scripts/device/prepare-models.sh)"
    exit 77
  fi
  note "on ${models[*]##*/}"
  check check_cuda_backend "${models[@]}"
}

# The quantized weights on the GPU: tinystories-656k written as a Q4_0 GGUF file and checked
# (its blocks on the device against the same weights dequantized, and against the CPU backend),
# then the Llama-3-8B-shaped model as Q4_0 and Q8_0 files (made once per machine beside it, named
# by the converter's hash), prefill and decode timed against the roofline of what they hold, and
# the Q4_0 prefill again with quant_gemm's tiled kernel instead of cuBLAS on dequantized weights.
# The Llama-3-8B-shaped model written as a GGUF file of TYPE (llama3_gguf.py), made once per
# machine (per converter version) and reused; prints its path. Its progress goes to stderr.
llama3_gguf() {  # type
  local converter file
  converter=$(sha256sum scripts/device/llama3_gguf.py | cut -c1-8)
  file=$MODEL-$1-$converter.gguf
  if [ -s "$file" ]; then
    echo "reusing $file" >&2
  else
    gpu python3 scripts/device/llama3_gguf.py "$MODEL" "$file.part" --type "$1" >&2 || return 1
    gpu mv "$file.part" "$file" >&2 || return 1
  fi
  echo "$file"
}

step_gguf() {
  local type file tiny=$MODELS/tinystories-656k
  if [ ! -d "$tiny" ]; then
    note "no $tiny: carry .device-models (scripts/device/prepare-models.sh)"
    exit 77
  fi
  gpu python3 scripts/device/llama3_gguf.py "$tiny" "$CACHE/tinystories-656k-Q4_0.gguf" --type Q4_0 || exit 1
  check check_cuda_backend "$CACHE/tinystories-656k-Q4_0.gguf" || exit 1
  for type in Q4_0 Q8_0; do
    file=$(llama3_gguf "$type") || exit 1
    gpu "$BIN/bench_cuda_forward" "$file" "$STRATA_PLAN_BASE-$type.json" --batches 1,8,64 --prefill-seqs 2 || exit 1
  done
  # The prefill above runs cuBLAS on the dequantized weights (quant_dense_min_rows); the same
  # Q4_0 file with every GEMM on quant_gemm, for the comparison.
  gpu "$BIN/bench_cuda_forward" "$(llama3_gguf Q4_0)" "$STRATA_PLAN_BASE-Q4_0-tiled.json" --batches 1 \
    --prefill-seqs 2 --quant-dense-rows 0 || exit 1
  # The Q4_0 file's load three more times, its parts apart (read, host work, the rest).
  gpu "$BIN/bench_cuda_load" "$(llama3_gguf Q4_0)" "$STRATA_PLAN_BASE-load-Q4_0.json" --runs 3 || exit 1
  note "tinystories-656k Q4_0 checked; Llama-3-8B-shaped Q4_0 and Q8_0 timed, Q4_0 also on quant_gemm alone, and its load"
}

# The load of the Llama-3-8B-shaped model from its bf16 safetensors and from an F16 GGUF copy
# (its matrices staged from the file's mapping, q and k gathered into the Hugging Face order, and
# converted on the device), three runs each. The 16 GB copy is deleted afterwards: with the
# model and the Q4_0 and Q8_0 copies of the gguf step it would fill most of the 64 GB disk.
step_load() {
  local file
  gpu "$BIN/bench_cuda_load" "$MODEL" "$STRATA_PLAN_BASE-bf16.json" --runs 3 || exit 1
  file=$(llama3_gguf F16) || exit 1
  gpu "$BIN/bench_cuda_load" "$file" "$STRATA_PLAN_BASE-F16.json" --runs 3 || exit 1
  gpu rm -f "$file"
  note "Llama-3-8B-shaped weights loaded from bf16 safetensors and an F16 GGUF, three times each"
}

step_llama3() {
  local key dir tmp
  key=$(llama3_key)
  dir=$CACHE/llama3-$key
  if llama3_valid "$dir" "$key"; then
    echo "reusing $dir: its manifest checks (key $key)"
    note "reused $dir"
    exit 0
  fi
  mkdir -p "$CACHE" || exit 1
  # One model at a time (16 GB each): drop any other.
  find "$CACHE" -mindepth 1 -maxdepth 1 ! -name "llama3-$key" -exec rm -rf {} +
  tmp=$dir.partial
  rm -rf "$dir" "$tmp"
  PYTHONUNBUFFERED=1 gpu python3 scripts/device/llama3_random.py "$tmp" --layers "$LAYERS" --key "$key" || exit 1
  if dry_run; then
    note "would be made into $dir"
    exit 0
  fi
  llama3_valid "$tmp" "$key" || { echo "$tmp: its manifest does not check"; exit 1; }
  mv "$tmp" "$dir" || exit 1
  note "made $dir"
}

step_e2e() {
  local hf args=()
  hf=$(base_of hf_generate).json
  if [ -f "$hf" ]; then
    args=(--hf "$hf")
  else
    note "without transformers' time (no hf_generate result)"
  fi
  [ "$1" = e2e_cpu_sampling ] && args+=(--sampling cpu)
  gpu "$BIN/bench_cuda_e2e" "$MODEL" "$STRATA_PLAN_BASE.json" "${args[@]}"
}

# The inference backend as a service on this GPU, from the bundle that bundle-service.sh made
# (Node 24, the bundled JavaScript, the addon with the CUDA backend; its sources must be the
# carried tree's): first the engine alone (bench_cuda_e2e) on the service's workload, then
# service-run.sh on the same model with the bundle's Llama 3 tokenizer: readiness after warmup,
# STREAMS concurrent POST /v1/generate SSE streams, /metrics (KV usage, TTFT, ITL), the service
# stopped, then the per-token HTTP latency benchmark at 256 streams on tinystories-656k (CPU
# backend) and on the same model (CUDA backend), that one with one event loop and then with
# each of STRATA_SERVICE_HTTP_WORKERS (4,8) loops.
step_service() {
  local hash arch streams=${STRATA_SERVICE_STREAMS:-64} prompt=${STRATA_SERVICE_PROMPT:-1024}
  local output=${STRATA_SERVICE_OUTPUT:-128} latency=() rc
  if [ ! -f "$SERVICE_BUNDLE/manifest.txt" ]; then
    note "no service bundle in $SERVICE_BUNDLE: carry .device-service (scripts/device/bundle-service.sh)"
    exit 77
  fi
  hash=$(service_source_hash)
  if [ "$(manifest_field "$SERVICE_BUNDLE" sources)" != "$hash" ]; then
    note "the service bundle is of other sources ($(manifest_field "$SERVICE_BUNDLE" sources), here $hash): run scripts/device/bundle-service.sh again"
    exit 1
  fi
  arch=$(gpu_arch) || { echo "no compute capability from nvidia-smi"; exit 1; }
  case " $(manifest_field "$SERVICE_BUNDLE" archs) " in
    *" $arch "*) ;;
    *) note "the service bundle's addon is for sm_$(manifest_field "$SERVICE_BUNDLE" archs), this GPU is sm_$arch"; exit 1 ;;
  esac
  echo "== the engine alone: bench_cuda_e2e, $streams x ($prompt + $output tokens)"
  gpu "$BIN/bench_cuda_e2e" "$MODEL" "$STRATA_PLAN_BASE.engine.json" --requests "$streams" --prompt "$prompt" \
    --output "$output" || note "the engine alone (bench_cuda_e2e) failed"
  if [ -d "$MODELS/tinystories-656k" ]; then
    latency=(--latency-model "$MODELS/tinystories-656k" --latency-streams "${STRATA_SERVICE_LATENCY_STREAMS:-256}")
  else
    latency=(--latency-streams 0)
    note "no HTTP latency benchmark: no tinystories-656k in $MODELS"
  fi
  gpu bash scripts/device/service-run.sh --bundle "$SERVICE_BUNDLE" --backend cuda --model "$MODEL" \
    --out "$STRATA_PLAN_BASE" --streams "$streams" --prompt "$prompt" --max-tokens "$output" \
    --engine-json "$STRATA_PLAN_BASE.engine.json" --ready-timeout 150 "${latency[@]}" \
    --latency-cuda-streams "${STRATA_SERVICE_LATENCY_STREAMS:-256}" \
    --latency-http-workers "${STRATA_SERVICE_HTTP_WORKERS:-4,8}"
  rc=$?
  [ -f "$STRATA_PLAN_BASE.summary" ] && note "$(cat "$STRATA_PLAN_BASE.summary")"
  return $rc
}

# One bench_cuda_forward --profile step of MODEL (PHASE: prefill or decode:B) under ncu, only that
# step recorded (clocks as found: METHOD.md says leave them alone), its CSV into CSV: ncu's own
# options, then after -- bench_cuda_forward's.
ncu_forward() {  # ncu model phase csv [ncu options...] [-- bench_cuda_forward options...]
  local ncu=$1 model=$2 phase=$3 csv=$4 options=()
  shift 4
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    options+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  gpu "$ncu" --profile-from-start off --graph-profiling node --clock-control none "${options[@]}" \
    --csv --print-units base --log-file "$csv" \
    "$BIN/bench_cuda_forward" "$model" --profile "$phase" --copy-mib 64 --gemm-n 1024 "$@"
}

# Nsight Compute over bench_cuda_forward, once per phase: each kernel's duration, summed by kernel.
profile_model() {  # model phases
  local ncu phase csvs=()
  ncu=$(find_ncu) || { note "no ncu on this machine"; exit 77; }
  for phase in $2; do
    csvs+=("$STRATA_PLAN_BASE.${phase/:/-}.csv")
    ncu_forward "$ncu" "$1" "$phase" "${csvs[-1]}" --metrics gpu__time_duration.sum || exit 1
  done
  dry_run && exit 0
  python3 scripts/device/ncu_summary.py "$STRATA_PLAN_BASE.json" "${csvs[@]}"
}

# The same profile of the model's Q4_0 GGUF file (made as the gguf step makes it, or reused).
step_profile_gguf() {
  local file
  file=$(llama3_gguf Q4_0) || exit 1
  profile_model "$file" "${STRATA_PROFILE_PHASES:-decode:1 decode:64}"
}

# Nsight Compute's sections over the first launches of the kernels that decide a step's time, one
# phase a run: where each one stands against the GPU's limits (ncu_limits.py reads the raw page).
# Each kernel is replayed once per pass the sections need (tens), so only the first
# STRATA_LIMITS_COUNT (14: a layer or two) of those named by STRATA_LIMITS_KERNELS are profiled.
# A phase is TYPE:PHASE, TYPE Q4_0 or Q8_0 (the model's GGUF copy, made as the gguf step makes it)
# or bf16. Decode steps run eagerly (--graphs 0: the same kernels), so that ncu replays plain
# launches. A phase that fails does not stop the others; the step fails at the end.
step_limits() {
  local ncu spec type phase model section csv rc=0 csvs=() sections=()
  local kernels=${STRATA_LIMITS_KERNELS:-quant_|gemv|nvjet|decode_|prefill_|rope_|silu_|add_rms}
  local phases=${STRATA_LIMITS_PHASES:-Q4_0:decode:1 Q4_0:decode:64 bf16:prefill}
  for spec in $phases; do
    case ${spec%%:*} in
      bf16 | Q4_0 | Q8_0) ;;
      *) echo "limits: no model type ${spec%%:*} in $spec (bf16, Q4_0 or Q8_0)" >&2; exit 2 ;;
    esac
  done
  ncu=$(find_ncu) || { note "no ncu on this machine"; exit 77; }
  for section in SpeedOfLight LaunchStats Occupancy SchedulerStats WarpStateStats ComputeWorkloadAnalysis \
    MemoryWorkloadAnalysis; do
    sections+=(--section "$section")
  done
  for spec in $phases; do
    type=${spec%%:*}
    phase=${spec#*:}
    if [ "$type" = bf16 ]; then
      model=$MODEL
    elif ! model=$(llama3_gguf "$type"); then
      note "$spec: no $type file"
      rc=1
      continue
    fi
    csv=$STRATA_PLAN_BASE.$type.${phase/:/-}.csv
    ncu_forward "$ncu" "$model" "$phase" "$csv" --kernel-name "regex:$kernels" \
      --launch-count "${STRATA_LIMITS_COUNT:-14}" "${sections[@]}" --page raw -- --graphs 0 || {
      note "$spec: ncu or the profiled step failed"
      rc=1
    }
    [ -s "$csv" ] && csvs+=("$csv")  # what a failed run profiled before it failed, too
  done
  dry_run && exit $rc
  [ ${#csvs[@]} -gt 0 ] || exit 1
  python3 scripts/device/ncu_limits.py "$STRATA_PLAN_BASE.json" "${csvs[@]}" || rc=1
  exit $rc
}

case ${1:-} in
  --inner) inner_main ;;
  --run-step) step_main "$2" ;;
  *) plan_main "$@" ;;
esac
