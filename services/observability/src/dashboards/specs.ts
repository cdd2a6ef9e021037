// The dashboards shipped with the platform. Every name here is one a service exports today (or a
// recording rule in alerts/); the stack test evaluates every query against a real Prometheus.
import { type DashboardSpec, percentiles, quantile } from './grafana.js';

const M = '{model_name=~"$model"}';
const RI = '$__rate_interval';

const overview: DashboardSpec = {
  uid: 'strata-overview',
  title: 'Strata / Platform overview',
  description: 'Traffic, latency, throughput and errors across edge, router and backends.',
  tags: ['overview'],
  modelVariable: true,
  panels: [
    {
      title: 'Edge requests/s by outcome',
      description: 'Public requests at the edge: forwarded, rejected, upstream_error, client_closed.',
      unit: 'reqps',
      targets: [
        { expr: `sum by (outcome) (rate(strata_edge_requests_total[${RI}]))`, legend: '{{outcome}}' },
      ],
    },
    {
      title: 'API requests/s by service',
      description: 'Requests on /v1/* routes as each layer saw them.',
      unit: 'reqps',
      targets: [
        {
          expr: `sum by (service) (rate(strata_http_requests_total{route=~"/v1/.*"}[${RI}]))`,
          legend: '{{service}}',
        },
      ],
    },
    {
      title: 'Time to first token',
      description: 'Engine TTFT percentiles (vllm:time_to_first_token_seconds).',
      unit: 's',
      width: 8,
      targets: percentiles('vllm:time_to_first_token_seconds', M),
    },
    {
      title: 'Inter-token latency',
      description: 'Gap between consecutive tokens of a request.',
      unit: 's',
      width: 8,
      targets: percentiles('vllm:inter_token_latency_seconds', M),
    },
    {
      title: 'End-to-end request latency',
      description: 'From arrival at the engine to the last token.',
      unit: 's',
      width: 8,
      targets: percentiles('vllm:e2e_request_latency_seconds', M),
    },
    {
      title: 'Tokens/s',
      description: 'Prompt tokens prefilled and tokens generated, all backends.',
      unit: 'short',
      targets: [
        { expr: `sum(rate(vllm:prompt_tokens_total${M}[${RI}]))`, legend: 'prompt' },
        { expr: `sum(rate(vllm:generation_tokens_total${M}[${RI}]))`, legend: 'generation' },
      ],
    },
    {
      title: 'Error rate (5xx share) by service',
      description: 'Share of requests answered with a 5xx; 0 for a service that never answered one.',
      unit: 'percentunit',
      targets: [
        {
          expr:
            `(sum by (service) (rate(strata_http_requests_total{status=~"5.."}[${RI}]))` +
            ` or sum by (service) (rate(strata_http_requests_total[${RI}])) * 0)` +
            ` / sum by (service) (rate(strata_http_requests_total[${RI}]))`,
          legend: '{{service}}',
        },
      ],
    },
    {
      title: 'Rejections/s',
      description: 'Refused by the edge (by reason) and by backends before the engine (by code).',
      unit: 'reqps',
      targets: [
        { expr: `sum by (reason) (rate(strata_edge_rejections_total[${RI}]))`, legend: 'edge {{reason}}' },
        {
          expr: `sum by (code) (rate(strata_backend_requests_rejected_total[${RI}]))`,
          legend: 'backend {{code}}',
        },
      ],
    },
    {
      title: 'Finished requests/s by reason',
      description: 'Requests the engines finished: stop, length, abort, error.',
      unit: 'reqps',
      targets: [
        {
          expr: `sum by (finished_reason) (rate(vllm:request_success_total${M}[${RI}]))`,
          legend: '{{finished_reason}}',
        },
      ],
    },
    {
      title: 'Saturation state per backend',
      description: "Each sidecar's diagnosis (docs/observability.md): the state currently at 1.",
      unit: 'short',
      targets: [
        {
          expr: `max by (instance, state) (strata_saturation_state${M}) == 1`,
          legend: '{{instance}} {{state}}',
        },
      ],
    },
  ],
};

const engine: DashboardSpec = {
  uid: 'strata-engine',
  title: 'Strata / Engine',
  description: 'Scheduler and KV cache of every backend, from the vllm:* metrics.',
  tags: ['engine'],
  modelVariable: true,
  panels: [
    {
      title: 'Requests running / waiting',
      description: 'Running = in the batch; waiting = queued in the engine, preempted included.',
      unit: 'short',
      targets: [
        { expr: `sum by (instance) (vllm:num_requests_running${M})`, legend: '{{instance}} running' },
        { expr: `sum by (instance) (vllm:num_requests_waiting${M})`, legend: '{{instance}} waiting' },
      ],
    },
    {
      title: 'KV cache usage',
      description: 'Used KV blocks / total (1 = full).',
      unit: 'percentunit',
      targets: [{ expr: `max by (instance) (vllm:kv_cache_usage_perc${M})`, legend: '{{instance}}' }],
    },
    {
      title: 'Preemptions/s',
      description: 'Sequences evicted to free KV blocks (recomputed later): KV too small for the batch.',
      unit: 'short',
      width: 8,
      targets: [
        { expr: `sum by (instance) (rate(vllm:num_preemptions_total${M}[${RI}]))`, legend: '{{instance}}' },
      ],
    },
    {
      title: 'Prefix cache hit rate',
      description: 'Cached prompt tokens / prompt tokens looked up.',
      unit: 'percentunit',
      width: 8,
      targets: [
        {
          expr:
            `sum by (instance) (rate(vllm:prefix_cache_hits_total${M}[${RI}]))` +
            ` / sum by (instance) (rate(vllm:prefix_cache_queries_total${M}[${RI}]))`,
          legend: '{{instance}}',
        },
      ],
    },
    {
      title: 'Batch size (running sequences)',
      description: 'Sequences per engine step: mean and peak of vllm:num_requests_running over the interval.',
      unit: 'short',
      width: 8,
      targets: [
        {
          expr: `avg by (instance) (avg_over_time(vllm:num_requests_running${M}[${RI}]))`,
          legend: '{{instance}} mean',
        },
        {
          expr: `max by (instance) (max_over_time(vllm:num_requests_running${M}[${RI}]))`,
          legend: '{{instance}} peak',
        },
      ],
    },
    {
      title: 'Tokens per finished request',
      description: 'Mean prompt and generated tokens per request.',
      unit: 'short',
      targets: [
        {
          expr: `sum(rate(vllm:prompt_tokens_total${M}[${RI}])) / sum(rate(vllm:request_success_total${M}[${RI}]))`,
          legend: 'prompt',
        },
        {
          expr: `sum(rate(vllm:generation_tokens_total${M}[${RI}])) / sum(rate(vllm:request_success_total${M}[${RI}]))`,
          legend: 'generated',
        },
      ],
    },
    {
      title: 'Tokens per engine step',
      description:
        'Tokens computed per forward pass (prefill chunks + decodes), from vllm:iteration_tokens_total: mean and p95.',
      unit: 'short',
      targets: [
        {
          expr: `sum by (instance) (rate(vllm:iteration_tokens_total_sum${M}[${RI}])) / sum by (instance) (rate(vllm:iteration_tokens_total_count${M}[${RI}]))`,
          legend: '{{instance}} mean',
        },
        { expr: quantile(0.95, 'vllm:iteration_tokens_total', M), legend: 'p95' },
      ],
    },
    {
      title: 'Queue / prefill / decode time (p95)',
      description: 'Where request time goes inside the engine.',
      unit: 's',
      targets: [
        { expr: quantile(0.95, 'vllm:request_queue_time_seconds', M), legend: 'queue' },
        { expr: quantile(0.95, 'vllm:request_prefill_time_seconds', M), legend: 'prefill' },
        { expr: quantile(0.95, 'vllm:request_decode_time_seconds', M), legend: 'decode' },
      ],
    },
    {
      title: 'Backend rejections/s by code',
      description: 'Refused before the engine: queue full (429), prompt over the context (400).',
      unit: 'reqps',
      targets: [
        { expr: `sum by (code) (rate(strata_backend_requests_rejected_total[${RI}]))`, legend: '{{code}}' },
      ],
    },
    {
      title: 'KV blocks free / total (sidecar)',
      description: 'Blocks a new request can take, and the pool size, from /load.',
      unit: 'short',
      targets: [
        {
          expr: `sum by (instance) (strata_sidecar_backend_kv_blocks_free${M})`,
          legend: '{{instance}} free',
        },
        {
          expr: `sum by (instance) (strata_sidecar_backend_kv_blocks_total${M})`,
          legend: '{{instance}} total',
        },
      ],
    },
  ],
};

const GPU_LEGEND = '{{Hostname}} gpu{{gpu}} {{modelName}}';
const gpu: DashboardSpec = {
  uid: 'strata-gpu',
  title: 'Strata / GPU',
  description:
    'GPU telemetry under dcgm-exporter names (DCGM_FI_DEV_*): from dcgm-exporter where it runs, else from the sidecars (nvidia-smi).',
  tags: ['gpu'],
  panels: [
    {
      title: 'GPU utilisation',
      description: 'Share of time a kernel ran (DCGM_FI_DEV_GPU_UTIL).',
      unit: 'percent',
      targets: [{ expr: 'DCGM_FI_DEV_GPU_UTIL', legend: GPU_LEGEND }],
    },
    {
      title: 'Memory copy utilisation',
      description: 'Share of time device memory was read or written (DCGM_FI_DEV_MEM_COPY_UTIL).',
      unit: 'percent',
      targets: [{ expr: 'DCGM_FI_DEV_MEM_COPY_UTIL', legend: GPU_LEGEND }],
    },
    {
      title: 'Framebuffer memory',
      description: 'Used and free device memory (DCGM_FI_DEV_FB_USED / FB_FREE), MiB.',
      unit: 'mbytes',
      targets: [
        { expr: 'DCGM_FI_DEV_FB_USED', legend: `${GPU_LEGEND} used` },
        { expr: 'DCGM_FI_DEV_FB_FREE', legend: `${GPU_LEGEND} free` },
      ],
    },
    {
      title: 'Temperature',
      description: 'GPU core temperature (DCGM_FI_DEV_GPU_TEMP).',
      unit: 'celsius',
      width: 8,
      targets: [{ expr: 'DCGM_FI_DEV_GPU_TEMP', legend: GPU_LEGEND }],
    },
    {
      title: 'Power draw',
      description: 'Board power (DCGM_FI_DEV_POWER_USAGE).',
      unit: 'watt',
      width: 8,
      targets: [{ expr: 'DCGM_FI_DEV_POWER_USAGE', legend: GPU_LEGEND }],
    },
    {
      title: 'Clocks',
      description: 'SM and memory clocks (DCGM_FI_DEV_SM_CLOCK / MEM_CLOCK).',
      unit: 'hertz',
      width: 8,
      targets: [
        { expr: 'DCGM_FI_DEV_SM_CLOCK * 1e6', legend: `${GPU_LEGEND} SM` },
        { expr: 'DCGM_FI_DEV_MEM_CLOCK * 1e6', legend: `${GPU_LEGEND} memory` },
      ],
    },
    {
      title: 'GPU telemetry up / GPUs seen',
      description:
        '1 while the last GPU query (dcgm-exporter or nvidia-smi) worked; GPUs per sidecar (0 on CPU nodes).',
      unit: 'short',
      targets: [
        { expr: 'strata_sidecar_gpu_up', legend: '{{instance}} up' },
        { expr: 'strata_sidecar_gpus', legend: '{{instance}} GPUs' },
      ],
    },
    {
      title: 'GPU telemetry age',
      description: 'Seconds since the last good GPU sample (grows while the query fails).',
      unit: 's',
      targets: [{ expr: 'strata_sidecar_gpu_stats_age_seconds', legend: '{{instance}}' }],
    },
  ],
};

const router: DashboardSpec = {
  uid: 'strata-router',
  title: 'Strata / Router',
  description: 'Which backend served requests and why: decisions, retries, affinity, backend health.',
  tags: ['router'],
  panels: [
    {
      title: 'Decisions/s by rule and backend',
      description: 'Requests routed, by matched rule and chosen backend ("none": no candidate answered).',
      unit: 'reqps',
      targets: [
        {
          expr: `sum by (rule, backend) (rate(strata_router_decisions_total[${RI}]))`,
          legend: '{{rule}} → {{backend}}',
        },
      ],
    },
    {
      title: 'Retries/s by backend and outcome',
      description: 'Attempts beyond the first, by the backend that failed and how.',
      unit: 'reqps',
      targets: [
        {
          expr: `sum by (backend, outcome) (rate(strata_router_retries_total[${RI}]))`,
          legend: '{{backend}} {{outcome}}',
        },
      ],
    },
    {
      title: 'Session affinity lookups/s',
      description: 'hit, miss, stale (backend gone), unavailable (store failed).',
      unit: 'reqps',
      width: 8,
      targets: [
        { expr: `sum by (result) (rate(strata_router_affinity_total[${RI}]))`, legend: '{{result}}' },
      ],
    },
    {
      title: 'Affinity store (Redis) errors/s',
      description: 'Session store calls that failed or timed out; routing went on without affinity.',
      unit: 'short',
      width: 8,
      targets: [
        { expr: `sum by (op) (rate(strata_router_affinity_store_errors_total[${RI}]))`, legend: '{{op}}' },
      ],
    },
    {
      title: 'Backends ready (router view)',
      description: '1 while a backend answers /health/ready.',
      unit: 'short',
      width: 8,
      targets: [{ expr: 'max by (backend) (strata_router_backend_ready)', legend: '{{backend}}' }],
    },
    {
      title: 'Backend ejections',
      description: 'Ejections after consecutive failures, over the interval.',
      unit: 'short',
      targets: [
        {
          expr: `sum by (backend) (increase(strata_router_backend_ejections_total[${RI}]))`,
          legend: '{{backend}}',
        },
      ],
    },
    {
      title: 'Upstream first byte (p95) by backend',
      description: 'From forwarding to the first byte of the backend answer, per attempt.',
      unit: 's',
      targets: [
        {
          expr: quantile(0.95, 'strata_router_upstream_first_byte_seconds', '', ['backend']),
          legend: '{{backend}}',
        },
      ],
    },
  ],
};

const edge: DashboardSpec = {
  uid: 'strata-edge',
  title: 'Strata / Edge',
  description: 'The front door: what was refused and why, tenant quota usage, time to the router.',
  tags: ['edge'],
  panels: [
    {
      title: 'Rejections/s by reason',
      description: 'auth, validation, size, content_type, rate, quota, ...',
      unit: 'reqps',
      targets: [
        { expr: `sum by (reason) (rate(strata_edge_rejections_total[${RI}]))`, legend: '{{reason}}' },
      ],
    },
    {
      title: 'Rejections/s by code',
      description: 'The catalogue code clients received.',
      unit: 'reqps',
      targets: [{ expr: `sum by (code) (rate(strata_edge_rejections_total[${RI}]))`, legend: '{{code}}' }],
    },
    {
      title: 'Requests/s by endpoint and outcome',
      description: 'forwarded, rejected, upstream_error, client_closed.',
      unit: 'reqps',
      targets: [
        {
          expr: `sum by (endpoint, outcome) (rate(strata_edge_requests_total[${RI}]))`,
          legend: '{{endpoint}} {{outcome}}',
        },
      ],
    },
    {
      title: 'Quota used by tenant',
      description: 'Share of each tenant quota in use as of its last check (1 = exhausted).',
      unit: 'percentunit',
      targets: [
        { expr: 'max by (tenant, quota) (strata_edge_quota_used_ratio)', legend: '{{tenant}} {{quota}}' },
      ],
    },
    {
      title: 'Tokens charged/s by tenant',
      description: 'Prompt + generated tokens charged to each tenant.',
      unit: 'short',
      width: 8,
      targets: [
        { expr: `sum by (tenant) (rate(strata_edge_tokens_charged_total[${RI}]))`, legend: '{{tenant}}' },
      ],
    },
    {
      title: 'Quota store',
      description: 'Store up (1) per edge replica, and failed store operations/s.',
      unit: 'short',
      width: 8,
      targets: [
        { expr: 'min by (instance) (strata_edge_quota_store_up)', legend: '{{instance}} up' },
        { expr: `sum by (op) (rate(strata_edge_quota_store_errors_total[${RI}]))`, legend: 'errors {{op}}' },
      ],
    },
    {
      title: 'Time to router response headers',
      description: 'strata_edge_upstream_duration_seconds percentiles.',
      unit: 's',
      width: 8,
      targets: percentiles('strata_edge_upstream_duration_seconds'),
    },
  ],
};

const capacity: DashboardSpec = {
  uid: 'strata-capacity',
  title: 'Strata / Capacity',
  description: 'Is the bottleneck routing, execution or capacity? Saturation diagnosis across backends.',
  tags: ['capacity'],
  modelVariable: true,
  panels: [
    {
      title: 'Backends per saturation state',
      description:
        'How many backends are idle, healthy, queueing, under memory pressure or compute saturated.',
      unit: 'short',
      targets: [
        {
          expr: `sum by (state) (model_name_state:strata_saturation_backends:count${M})`,
          legend: '{{state}}',
        },
      ],
    },
    {
      title: 'Load imbalance across backends',
      description:
        '(max - min) / max(avg, 1) of running + waiting per backend; > 1 with a queue = routing problem.',
      unit: 'short',
      targets: [
        { expr: `model_name:strata_backend_load_imbalance:ratio${M}`, legend: '{{model_name}} imbalance' },
        { expr: `model_name:strata_backend_queue_depth:max${M}`, legend: '{{model_name}} deepest queue' },
      ],
    },
    {
      title: 'Load per backend (running + waiting)',
      description: 'The recording rule the imbalance is computed from.',
      unit: 'short',
      width: 8,
      targets: [{ expr: `instance:strata_backend_load_requests:sum${M}`, legend: '{{instance}}' }],
    },
    {
      title: 'KV usage per backend (sidecar)',
      description: 'The memory input of the diagnosis.',
      unit: 'percentunit',
      width: 8,
      targets: [{ expr: `strata_saturation_input_kv_usage_ratio${M}`, legend: '{{instance}}' }],
    },
    {
      title: 'Recent preemptions per backend',
      description: 'Preemptions within the sidecar window (memory pressure input).',
      unit: 'short',
      width: 8,
      targets: [{ expr: `strata_saturation_input_recent_preemptions${M}`, legend: '{{instance}}' }],
    },
    {
      title: 'Busiest GPU per backend',
      description: 'The compute input of the diagnosis (absent on CPU nodes).',
      unit: 'percentunit',
      targets: [{ expr: `strata_saturation_input_gpu_util_ratio${M}`, legend: '{{instance}}' }],
    },
    {
      title: 'Generation throughput per backend',
      description: 'Tokens generated per second: the capacity actually delivered.',
      unit: 'short',
      targets: [
        { expr: `sum by (instance) (rate(vllm:generation_tokens_total${M}[${RI}]))`, legend: '{{instance}}' },
      ],
    },
    {
      title: 'Ready backends',
      description: 'Backends the routers consider ready, and backends the sidecars can read.',
      unit: 'short',
      type: 'stat',
      targets: [
        { expr: 'count(max by (backend) (strata_router_backend_ready) == 1)', legend: 'ready (router)' },
        { expr: 'sum(strata_sidecar_backend_up)', legend: 'polled (sidecars)' },
      ],
    },
  ],
};

export const DASHBOARDS: DashboardSpec[] = [overview, engine, gpu, router, edge, capacity];
