// OpenTelemetry tracing bootstrap. With no OTLP endpoint configured nothing is started and the
// global tracer stays the API's no-op, so services pay nothing for tracing they did not ask for.
import { type Tracer, trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { NodeSDK } from '@opentelemetry/sdk-node';
import { BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';

export interface TelemetryOptions {
  serviceName: string;
  /** OTLP/HTTP base URL, e.g. http://tempo:4318; traces go to `${endpoint}/v1/traces`. */
  endpoint?: string | undefined;
}

export interface Telemetry {
  enabled: boolean;
  tracer: Tracer;
  /** Flushes pending spans and stops exporting. */
  shutdown(): Promise<void>;
}

export function startTelemetry(options: TelemetryOptions): Telemetry {
  if (!options.endpoint) {
    return { enabled: false, tracer: trace.getTracer(options.serviceName), shutdown: async () => {} };
  }
  const exporter = new OTLPTraceExporter({ url: `${options.endpoint.replace(/\/$/, '')}/v1/traces` });
  const sdk = new NodeSDK({
    resource: resourceFromAttributes({ 'service.name': options.serviceName }),
    spanProcessors: [new BatchSpanProcessor(exporter, { scheduledDelayMillis: 500 })],
  });
  sdk.start();
  return {
    enabled: true,
    tracer: trace.getTracer(options.serviceName),
    shutdown: () => sdk.shutdown(),
  };
}
