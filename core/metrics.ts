/**
 * The process-wide Prometheus registry (prom-client): the runtime's own figures (CPU, RSS,
 * descriptors, event-loop lag, heap) and the few instruments fed where things happen (REST
 * request durations, hook latencies and failures, recorder writes). Figures read from the
 * server's state at scrape time live in routes/metrics.ts.
 */
import client from "prom-client";
import perfHooks from "node:perf_hooks";

/** Registry of the process-wide metrics. */
export const processRegistry: client.Registry = new client.Registry();

/** Interval between two samples of the event loop's delay, in ms (prom-client's default). */
export const eventLoopSampleIntervalMs = 10;
/** Buckets per doubling of the delay: a percentile is within 19% (2^(1/4)) of the true one. */
const delayBucketsPerOctave = 4;
/** Doublings above 1 µs the buckets cover (2^26 µs, 67 s); longer delays share the last. */
const delayOctaves = 26;

/**
 * Event-loop delays (how late a timer fired) in a fixed set of log-spaced buckets, with
 * their count, sum, sum of squares, min and max: the figures of Node's
 * `monitorEventLoopDelay()` in a few hundred bytes whatever the delays were. Deno's
 * `monitorEventLoopDelay()` keeps a native HDR histogram that starts at 5 MiB and grows to
 * cover the longest delay it saw (11 MiB after a 0.1 s stall, 22 MiB after 2 s); a reset
 * empties it without shrinking it: it was the largest part of what the server's RSS kept
 * after the soak bench's load (bench/soak.ts: 8 MiB before, 16 MiB after).
 */
export class EventLoopDelay {
  readonly #counts = new Float64Array(delayOctaves * delayBucketsPerOctave + 1);
  #count = 0;
  #sumMs = 0;
  #sumSquaresMs2 = 0;
  #minMs = Infinity;
  #maxMs = 0;
  /** The last delay recorded, in ms (0 before the first). */
  lastMs = 0;

  /** Counts one delay, in ms (negative counts as 0). */
  record(delayMs: number): void {
    const ms = Math.max(0, delayMs);
    this.lastMs = ms;
    this.#count++;
    this.#sumMs += ms;
    this.#sumSquaresMs2 += ms * ms;
    if (ms < this.#minMs) this.#minMs = ms;
    if (ms > this.#maxMs) this.#maxMs = ms;
    const us = ms * 1000;
    const bucket = us <= 1 ? 0 : Math.ceil(Math.log2(us) * delayBucketsPerOctave);
    this.#counts[Math.min(bucket, this.#counts.length - 1)]++;
  }

  /** Delays recorded since the last reset. */
  get count(): number {
    return this.#count;
  }
  /** Shortest delay since the last reset, in ms (0 when none). */
  get minMs(): number {
    return this.#count === 0 ? 0 : this.#minMs;
  }
  /** Longest delay since the last reset, in ms. */
  get maxMs(): number {
    return this.#maxMs;
  }
  /** Mean delay since the last reset, in ms (0 when none). */
  get meanMs(): number {
    return this.#count === 0 ? 0 : this.#sumMs / this.#count;
  }
  /** Standard deviation of the delays since the last reset, in ms. */
  get stddevMs(): number {
    if (this.#count === 0) return 0;
    const mean = this.meanMs;
    return Math.sqrt(Math.max(0, this.#sumSquaresMs2 / this.#count - mean * mean));
  }

  /**
   * The delay under which `percent` % of those recorded fall, in ms: the upper bound of the
   * bucket that holds it, never above the longest delay seen (0 when none).
   */
  percentileMs(percent: number): number {
    if (this.#count === 0) return 0;
    const rank = Math.ceil((percent / 100) * this.#count);
    let seen = 0;
    for (let i = 0; i < this.#counts.length; i++) {
      seen += this.#counts[i];
      if (seen >= rank && seen > 0) {
        return Math.min(this.#maxMs, 2 ** (i / delayBucketsPerOctave) / 1000);
      }
    }
    return this.#maxMs;
  }

  /** Forgets every delay recorded (as prom-client resets its histogram after each scrape). */
  reset(): void {
    this.#counts.fill(0);
    this.#count = 0;
    this.#sumMs = 0;
    this.#sumSquaresMs2 = 0;
    this.#minMs = Infinity;
    this.#maxMs = 0;
  }
}

/**
 * Samples the event loop's delay into `delay` every `intervalMs`: how much later than asked
 * each tick of an interval timer ran. The timer does not keep the process alive; the
 * function returned stops it.
 */
export function sampleEventLoopDelay(
  delay: EventLoopDelay,
  intervalMs = eventLoopSampleIntervalMs,
): () => void {
  let dueMs = performance.now() + intervalMs;
  const timer = setInterval(() => {
    const nowMs = performance.now();
    delay.record(nowMs - dueMs);
    dueMs = nowMs + intervalMs;
  }, intervalMs);
  Deno.unrefTimer(timer);
  return () => clearInterval(timer);
}

/**
 * Registers in `registry` the event-loop gauges of prom-client's default metrics, under
 * their names (`nodejs_eventloop_lag_seconds`, `_min_`, `_max_`, `_mean_`, `_stddev_`,
 * `_p50_`, `_p90_`, `_p99_seconds`), read from `delay` at each scrape and reset after it as
 * prom-client does. `nodejs_eventloop_lag_seconds` is the last delay sampled.
 */
export function registerEventLoopDelay(registry: client.Registry, delay: EventLoopDelay): void {
  const gauge = (suffix: string, help: string, collect?: () => void) =>
    new client.Gauge({
      name: `nodejs_eventloop_lag${suffix}_seconds`,
      help,
      registers: [registry],
      ...(collect ? { collect } : {}),
    });
  // The registry reads its metrics in the order they were registered: the first gauge's
  // collect sets all of them, then forgets the delays, as prom-client's own does.
  const figures: [client.Gauge, () => number][] = [];
  const lag = gauge("", "Lag of event loop in seconds.", () => {
    lag.set(delay.lastMs / 1000);
    for (const [g, ms] of figures) g.set(ms() / 1000);
    delay.reset();
  });
  figures.push(
    [gauge("_min", "The minimum recorded event loop delay."), () => delay.minMs],
    [gauge("_max", "The maximum recorded event loop delay."), () => delay.maxMs],
    [gauge("_mean", "The mean of the recorded event loop delays."), () => delay.meanMs],
    [
      gauge("_stddev", "The standard deviation of the recorded event loop delays."),
      () => delay.stddevMs,
    ],
    [
      gauge("_p50", "The 50th percentile of the recorded event loop delays."),
      () => delay.percentileMs(50),
    ],
    [
      gauge("_p90", "The 90th percentile of the recorded event loop delays."),
      () => delay.percentileMs(90),
    ],
    [
      gauge("_p99", "The 99th percentile of the recorded event loop delays."),
      () => delay.percentileMs(99),
    ],
  );
}

/**
 * The default metrics without the event-loop ones, which would make Deno's native
 * `monitorEventLoopDelay()` histogram (see EventLoopDelay): prom-client skips them when that
 * function throws "not implemented" (as on Bun), so it does while the defaults are set up.
 */
function collectDefaultMetricsWithoutLoopDelay(registry: client.Registry): void {
  const hooks = perfHooks as { monitorEventLoopDelay: unknown };
  const monitor = hooks.monitorEventLoopDelay;
  hooks.monitorEventLoopDelay = () => {
    throw Object.assign(new Error("the server samples the event loop itself"), {
      code: "ERR_NOT_IMPLEMENTED",
    });
  };
  try {
    client.collectDefaultMetrics({ register: registry });
  } finally {
    hooks.monitorEventLoopDelay = monitor;
  }
}

// CPU, RSS, open and max descriptors, heap, GC: read at scrape time; event-loop delays sampled
// here into fixed memory.
collectDefaultMetricsWithoutLoopDelay(processRegistry);
/** The server's event-loop delays, sampled from the first import for the process's life. */
export const eventLoopDelay: EventLoopDelay = new EventLoopDelay();
sampleEventLoopDelay(eventLoopDelay);
registerEventLoopDelay(processRegistry, eventLoopDelay);
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
