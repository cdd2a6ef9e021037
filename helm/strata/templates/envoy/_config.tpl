{{/*
envoy.yaml (a v3 Bootstrap). Shape:
  listeners: https (TLS, optional) and/or http -> [connection_limit, http_connection_manager]
             -> route_config "strata" -> cluster "edge";  stats -> cluster "envoy_admin"
  clusters:  edge (headless Service, active /health/ready checks), envoy_admin (127.0.0.1)
Timeouts suit SSE: no route timeout, a stream idle timeout, request-headers and whole-request
timeouts (both stop once the response starts).
*/}}
{{- define "strata.envoy.hcm" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $e := $root.Values.envoy -}}
- name: envoy.filters.network.connection_limit
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit
    stat_prefix: {{ $name }}_connections
    max_connections: {{ int $e.maxConnectionsPerListener }}
- name: envoy.filters.network.http_connection_manager
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
    stat_prefix: {{ $name }}
    # HTTP/1.1 and HTTP/2 on one port (ALPN with TLS, preface sniffing in plaintext).
    codec_type: AUTO
    use_remote_address: true
    # x-request-id: generated when absent, a client's kept, echoed in responses.
    generate_request_id: true
    preserve_external_request_id: true
    always_set_request_id_in_response: true
    normalize_path: true
    merge_slashes: true
    max_request_headers_kb: {{ int $e.maxRequestHeadersKb }}
    request_headers_timeout: {{ $e.requestHeadersTimeout }}
    # Receiving the whole request, body included; disarmed when the response starts, so an SSE
    # stream still lasts as long as the model generates.
    request_timeout: {{ $e.requestTimeout }}
    stream_idle_timeout: {{ $e.streamIdleTimeout }}
    drain_timeout: {{ $e.drainTimeout }}
    common_http_protocol_options:
      idle_timeout: {{ $e.connectionIdleTimeout }}
      headers_with_underscores_action: REJECT_REQUEST
    http2_protocol_options:
      max_concurrent_streams: {{ int $e.http2MaxConcurrentStreams }}
      initial_stream_window_size: 65536
      initial_connection_window_size: 1048576
    access_log:
      - name: envoy.access_loggers.stdout
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
          log_format:
            json_format:
              time: "%START_TIME%"
              request_id: "%REQ(X-REQUEST-ID)%"
              traceparent: "%REQ(TRACEPARENT)%"
              method: "%REQ(:METHOD)%"
              path: "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"
              protocol: "%PROTOCOL%"
              status: "%RESPONSE_CODE%"
              response_flags: "%RESPONSE_FLAGS%"
              bytes_received: "%BYTES_RECEIVED%"
              bytes_sent: "%BYTES_SENT%"
              duration_ms: "%DURATION%"
              upstream_host: "%UPSTREAM_HOST%"
              client: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"
              user_agent: "%REQ(USER-AGENT)%"
    route_config:
      name: strata
      # The edge sets x-strata-tenant after auth; a client's own is never trusted.
      request_headers_to_remove: ["x-strata-tenant"]
      virtual_hosts:
        - name: strata
          domains: ["*"]
          routes:
            # Metrics are for Prometheus inside the cluster, not the internet.
            - name: no-public-metrics
              match: { path: /metrics }
              direct_response: { status: 404 }
            - name: edge
              match: { prefix: / }
              route:
                cluster: edge
                timeout: 0s
                idle_timeout: {{ $e.streamIdleTimeout }}
    http_filters:
      {{- if $e.localRateLimit.enabled }}
      - name: envoy.filters.http.local_ratelimit
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
          stat_prefix: {{ $name }}_ratelimit
          token_bucket:
            max_tokens: {{ int $e.localRateLimit.maxTokens }}
            tokens_per_fill: {{ int $e.localRateLimit.tokensPerFill }}
            fill_interval: {{ $e.localRateLimit.fillInterval }}
          filter_enabled:
            runtime_key: local_rate_limit_enabled
            default_value: { numerator: 100, denominator: HUNDRED }
          filter_enforced:
            runtime_key: local_rate_limit_enforced
            default_value: { numerator: 100, denominator: HUNDRED }
          response_headers_to_add:
            - append_action: OVERWRITE_IF_EXISTS_OR_ADD
              header: { key: x-local-rate-limit, value: "true" }
      {{- end }}
      - name: envoy.filters.http.router
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
{{- end -}}

{{- define "strata.envoy.config" -}}
{{- $e := .Values.envoy -}}
{{- $https := $e.listeners.https -}}
{{- $http := $e.listeners.http -}}
admin:
  # Loopback only: /quitquitquit and friends never leave the pod; the stats listener
  # exposes just /stats/prometheus and /ready.
  address:
    socket_address: { address: 127.0.0.1, port_value: {{ int $e.adminPort }} }
overload_manager:
  refresh_interval: 0.25s
  resource_monitors:
    - name: envoy.resource_monitors.global_downstream_max_connections
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig
        max_active_downstream_connections: {{ int $e.maxConnectionsGlobal }}
    - name: envoy.resource_monitors.fixed_heap
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig
        max_heap_size_bytes: {{ int64 $e.maxHeapBytes }}
  actions:
    - name: envoy.overload_actions.shrink_heap
      triggers:
        - name: envoy.resource_monitors.fixed_heap
          threshold: { value: 0.90 }
    - name: envoy.overload_actions.stop_accepting_requests
      triggers:
        - name: envoy.resource_monitors.fixed_heap
          threshold: { value: 0.98 }
static_resources:
  listeners:
    {{- if $https.enabled }}
    - name: https
      address:
        socket_address: { address: 0.0.0.0, port_value: {{ int $https.port }} }
      per_connection_buffer_limit_bytes: 32768
      filter_chains:
        - transport_socket:
            name: envoy.transport_sockets.tls
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
              common_tls_context:
                alpn_protocols: ["h2", "http/1.1"]
                tls_params:
                  tls_minimum_protocol_version: {{ $https.minimumProtocolVersion }}
                tls_certificates:
                  - certificate_chain: { filename: /etc/envoy/tls/tls.crt }
                    private_key: { filename: /etc/envoy/tls/tls.key }
          filters:
            {{- include "strata.envoy.hcm" (list . "https") | nindent 12 }}
    {{- end }}
    {{- if $http.enabled }}
    - name: http
      address:
        socket_address: { address: 0.0.0.0, port_value: {{ int $http.port }} }
      per_connection_buffer_limit_bytes: 32768
      filter_chains:
        - filters:
            {{- include "strata.envoy.hcm" (list . "http") | nindent 12 }}
    {{- end }}
    - name: stats
      address:
        socket_address: { address: 0.0.0.0, port_value: {{ int $e.statsPort }} }
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: stats
                codec_type: AUTO
                route_config:
                  name: stats
                  virtual_hosts:
                    - name: stats
                      domains: ["*"]
                      routes:
                        - match: { path: /stats/prometheus }
                          route: { cluster: envoy_admin }
                        - match: { path: /ready }
                          route: { cluster: envoy_admin }
                http_filters:
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
    - name: edge
      # A headless Service: every edge pod is an endpoint, health-checked on its own.
      type: STRICT_DNS
      dns_lookup_family: V4_ONLY
      dns_refresh_rate: 5s
      respect_dns_ttl: false
      connect_timeout: 5s
      # Streams are long and uneven: send new ones to the least busy edge pod.
      lb_policy: LEAST_REQUEST
      load_assignment:
        cluster_name: edge
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address:
                      address: {{ printf "%s.%s.svc.%s" (include "strata.componentName" (list . "edge-headless")) .Release.Namespace .Values.clusterDomain }}
                      port_value: {{ int .Values.edge.port }}
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          # Below the edge's keep-alive (STRATA_HTTP_KEEP_ALIVE_TIMEOUT_MS, 72 s) so Envoy never
          # reuses a closing socket.
          common_http_protocol_options: { idle_timeout: 60s }
          explicit_http_config:
            http_protocol_options: {}
      circuit_breakers:
        thresholds:
          - priority: DEFAULT
            max_connections: {{ int $e.maxConnectionsGlobal }}
            max_pending_requests: {{ int $e.maxConnectionsGlobal }}
            max_requests: {{ int $e.maxConnectionsGlobal }}
            max_retries: 3
      health_checks:
        - timeout: {{ $e.healthCheck.timeout }}
          interval: {{ $e.healthCheck.interval }}
          no_traffic_interval: {{ $e.healthCheck.interval }}
          unhealthy_threshold: {{ int $e.healthCheck.unhealthyThreshold }}
          healthy_threshold: {{ int $e.healthCheck.healthyThreshold }}
          http_health_check:
            path: {{ $e.healthCheck.path }}
            codec_client_type: HTTP1
    - name: envoy_admin
      type: STATIC
      connect_timeout: 1s
      load_assignment:
        cluster_name: envoy_admin
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address: { address: 127.0.0.1, port_value: {{ int $e.adminPort }} }
{{- end -}}
