/**
 * Times REST requests into `mediaserver_rest_request_duration_seconds` with bounded labels:
 * the operation's group and name for management operations, the path's first segment for the
 * server's other fixed routes, "other" for anything else (unknown paths are not labels).
 */
import { type HistogramSeries, restRequestSeconds } from "../core/metrics.ts";
import type { Operation } from "./operation.ts";

/** First path segments of the REST port's fixed routes other than operations. */
const fixedRoutes = new Set(["health", "metrics", "client", "whip", "whep"]);

/** Records the duration of one answered request. */
export type RestTimer = (path: string, status: number, seconds: number) => void;

/** The labels of a route and its series by status, made on the first request of each. */
interface Route {
  group: string;
  operation: string;
  byStatus: Map<number, HistogramSeries>;
}

/** A timer knowing the operations mounted under `prefix`. */
export function createRestTimer(prefix: string, operations: readonly Operation[]): RestTimer {
  const route = (group: string, operation: string): Route => ({
    group,
    operation,
    byStatus: new Map(),
  });
  const byPath = new Map<string, Route>();
  for (const op of operations) {
    byPath.set(prefix + op.path, route(op.group, op.path.slice(op.group.length + 2)));
  }
  const others = new Map<string, Route>();
  // Label sets are resolved once per route and status: building them per request cost more
  // than the observation.
  return (path, status, seconds) => {
    let labels = byPath.get(path);
    if (!labels) {
      const first = path.split("/")[1] ?? "";
      const operation = fixedRoutes.has(first) ? first : "other";
      labels = others.get(operation);
      if (!labels) others.set(operation, labels = route("none", operation));
    }
    let series = labels.byStatus.get(status);
    if (!series) {
      const { group, operation } = labels;
      series = restRequestSeconds.series({ group, operation, status: String(status) });
      labels.byStatus.set(status, series);
    }
    series.observe(seconds);
  };
}
