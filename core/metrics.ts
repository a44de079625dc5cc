/**
 * The process-wide Prometheus registry (prom-client): the runtime's own figures (CPU, RSS,
 * descriptors, event-loop lag, heap) and the few instruments fed where things happen (REST
 * request durations, hook latencies and failures, recorder writes). Figures read from the
 * server's state at scrape time live in routes/metrics.ts.
 */
import client from "prom-client";

/** Registry of the process-wide metrics. */
export const processRegistry: client.Registry = new client.Registry();

// CPU, RSS, open and max descriptors, event-loop lag, heap, GC: all read at scrape time.
client.collectDefaultMetrics({ register: processRegistry });
// Gauges named like counters, which Prometheus' linter refuses; the same figures remain
// without the suffix, by type.
for (const name of ["active_handles_total", "active_requests_total", "active_resources_total"]) {
  processRegistry.removeSingleMetric(`nodejs_${name}`);
}

/** Prefix of every metric the server defines. */
export const metricPrefix = "mediaserver_";

/** REST request durations by `group`, `operation` (from the operation table) and `status`. */
export const restRequestSeconds: client.Histogram<"group" | "operation" | "status"> = new client
  .Histogram({
  name: `${metricPrefix}rest_request_duration_seconds`,
  help: "Time to answer a REST request, by operation group, operation and HTTP status.",
  labelNames: ["group", "operation", "status"] as const,
  buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
  registers: [processRegistry],
});

/** Durations of hook calls to the backend, by hook, whatever their outcome. */
export const hookSeconds: client.Histogram<"hook"> = new client.Histogram({
  name: `${metricPrefix}hook_duration_seconds`,
  help: "Time a REST hook call to the backend took, by hook name.",
  labelNames: ["hook"] as const,
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  registers: [processRegistry],
});

/** Hook calls that failed (non-200, timeout, unreachable, bad answer). */
export const hookFailures: client.Counter<"hook"> = new client.Counter({
  name: `${metricPrefix}hook_failures_total`,
  help: "REST hook calls that failed (non-200, timeout, unreachable backend, bad answer).",
  labelNames: ["hook"] as const,
  registers: [processRegistry],
});

/** Bytes recorders wrote to their files. */
export const recorderWrittenBytes: client.Counter = new client.Counter({
  name: `${metricPrefix}recorder_written_bytes_total`,
  help: "Bytes recorders wrote to MP4 files.",
  registers: [processRegistry],
});

/** Files recorders opened. */
export const recorderFiles: client.Counter = new client.Counter({
  name: `${metricPrefix}recorder_files_total`,
  help: "MP4 files recorders opened (a rotation opens one more).",
  registers: [processRegistry],
});

/** Hook names are the WCS hook set; any other name is counted as "other" (bounded labels). */
const hookNames = new Set([
  "connect",
  "ConnectionStatusEvent",
  "publishStream",
  "unPublishStream",
  "playStream",
  "stopStream",
  "StreamStatusEvent",
  "OnDataEvent",
  "sendData",
  "RecordingStatusEvent",
  "call",
  "CallStatusEvent",
  "answer",
  "hangup",
  "hold",
  "unhold",
  "transfer",
  "sendDTMF",
  "sendMessage",
  "MessageStatusEvent",
  "RegistrationStatusEvent",
  "TransferStatusEvent",
  "ErrorStatusEvent",
  "playHLS",
  "stopHLS",
  "publishRTMP",
  "playRTMP",
  "playRTSP",
  "playVOD",
]);

/** The label of a hook: its name when it is a known one. */
export function hookLabel(hook: string): string {
  return hookNames.has(hook) ? hook : "other";
}
