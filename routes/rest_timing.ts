/**
 * Times REST requests into `mediaserver_rest_request_duration_seconds` with bounded labels:
 * the operation's group and name for management operations, the path's first segment for the
 * server's other fixed routes, "other" for anything else (unknown paths are not labels).
 */
import type client from "prom-client";
import { restRequestSeconds } from "../core/metrics.ts";
import type { Operation } from "./operation.ts";

/** First path segments of the REST port's fixed routes other than operations. */
const fixedRoutes = new Set(["health", "metrics", "client", "whip", "whep"]);

/** Records the duration of one answered request. */
export type RestTimer = (path: string, status: number, seconds: number) => void;

/** A timer knowing the operations mounted under `prefix`. */
export function createRestTimer(prefix: string, operations: readonly Operation[]): RestTimer {
  const byPath = new Map<string, { group: string; operation: string }>();
  for (const op of operations) {
    byPath.set(prefix + op.path, {
      group: op.group,
      operation: op.path.slice(op.group.length + 2),
    });
  }
  // One child per label set: resolving labels per request costs more than the observation.
  const children = new Map<string, client.Histogram.Internal<string>>();
  return (path, status, seconds) => {
    let labels = byPath.get(path);
    if (!labels) {
      const first = path.split("/")[1] ?? "";
      labels = { group: "none", operation: fixedRoutes.has(first) ? first : "other" };
    }
    const key = `${labels.group}/${labels.operation} ${status}`;
    let child = children.get(key);
    if (!child) {
      child = restRequestSeconds.labels({ ...labels, status: String(status) });
      children.set(key, child);
    }
    child.observe(seconds);
  };
}
