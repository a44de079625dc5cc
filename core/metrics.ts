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

/** The counts of one label set of a `CountingHistogram`. */
interface Series<L extends string> {
  labels: Record<L, string>;
  /** Observations in each bucket alone (not cumulative), by bucket. */
  counts: Float64Array;
  sum: number;
  count: number;
  /** Observed since the last reset: listed in the samples. */
  shown: boolean;
}

/** Observations of one label set of a `CountingHistogram`. */
export interface HistogramSeries {
  /** Adds one observation, in the histogram's unit. */
  observe(value: number): void;
}

/**
 * A histogram whose observation is a bucket search and three additions. prom-client's
 * checks the label names, hashes the label set and converts the bucket's bound to a property
 * name on every observation, which cost more than the rest of a REST request's bookkeeping;
 * here the label set is resolved once, by `series()`. It shows in the registry's text
 * exactly as a prom-client histogram of the same name, help, labels and buckets does.
 */
export class CountingHistogram<L extends string> {
  readonly name: string;
  readonly help: string;
  readonly type = "histogram";
  readonly aggregator = "sum";
  readonly #bounds: readonly number[];
  readonly #labelNames: readonly L[];
  /** Every series handed out, by its label values. */
  #byLabels = new Map<string, Series<L>>();
  /** The series observed since the last reset, in the order of their first observation. */
  #shown: Series<L>[] = [];

  /** @param config.buckets upper bounds of the buckets, ascending, in the observed unit. */
  constructor(config: {
    name: string;
    help: string;
    labelNames: readonly L[];
    buckets: readonly number[];
    registers: client.Registry[];
  }) {
    this.name = config.name;
    this.help = config.help;
    this.#labelNames = config.labelNames;
    this.#bounds = config.buckets.toSorted((a, b) => a - b);
    // The registry takes any object with prom-client's metric shape (name, help, type,
    // get); its typings list only prom-client's own classes.
    for (const registry of config.registers) {
      registry.registerMetric(this as unknown as client.Metric<L>);
    }
  }

  /**
   * The series of one label set (every label named); it shows from its first observation on,
   * as a prom-client histogram's label set does.
   */
  series(labels: Record<L, string>): HistogramSeries {
    const names = Object.keys(labels);
    if (
      names.length !== this.#labelNames.length ||
      !names.every((name) => this.#labelNames.includes(name as L))
    ) {
      throw new Error(`${this.name}: labels must be ${this.#labelNames.join(", ")}`);
    }
    const key = JSON.stringify(this.#labelNames.map((name) => labels[name]));
    let entry = this.#byLabels.get(key);
    if (!entry) {
      entry = {
        labels: { ...labels },
        counts: new Float64Array(this.#bounds.length),
        sum: 0,
        count: 0,
        shown: false,
      };
      this.#byLabels.set(key, entry);
    }
    const series = entry;
    const bounds = this.#bounds;
    const shown = this.#shown;
    return {
      observe(value) {
        if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
        if (!series.shown) {
          series.shown = true;
          shown.push(series);
        }
        series.sum += value;
        series.count++;
        // A value above every bound counts in +Inf only (the total).
        for (let i = 0; i < bounds.length; i++) {
          if (value <= bounds[i]) {
            series.counts[i]++;
            break;
          }
        }
      },
    };
  }

  /** The samples, as prom-client's histogram gives them: cumulative buckets, +Inf, sum, count. */
  get(): Promise<{
    name: string;
    help: string;
    type: string;
    aggregator: string;
    values: { value: number; metricName: string; exemplar: null | undefined; labels: object }[];
  }> {
    const values = [];
    const bucket = `${this.name}_bucket`;
    for (const { labels, counts, sum, count } of this.#shown) {
      let cumulative = 0;
      for (let i = 0; i < this.#bounds.length; i++) {
        cumulative += counts[i];
        values.push({
          value: cumulative,
          metricName: bucket,
          exemplar: null,
          labels: { le: this.#bounds[i], ...labels },
        });
      }
      values.push({
        value: count,
        metricName: bucket,
        exemplar: null,
        labels: { le: "+Inf", ...labels },
      });
      values.push({
        value: sum,
        metricName: `${this.name}_sum`,
        exemplar: undefined,
        labels: { ...labels },
      });
      values.push({
        value: count,
        metricName: `${this.name}_count`,
        exemplar: undefined,
        labels: { ...labels },
      });
    }
    return Promise.resolve({
      name: this.name,
      help: this.help,
      type: this.type,
      aggregator: this.aggregator,
      values,
    });
  }

  /** Sets every series back to zero and hides it until its next observation. */
  reset(): void {
    for (const series of this.#shown) {
      series.counts.fill(0);
      series.sum = 0;
      series.count = 0;
      series.shown = false;
    }
    this.#shown.length = 0;
  }
}

/** REST request durations by `group`, `operation` (from the operation table) and `status`. */
export const restRequestSeconds: CountingHistogram<"group" | "operation" | "status"> =
  new CountingHistogram({
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
