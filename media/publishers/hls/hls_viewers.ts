/**
 * The viewers of one HLS output. HLS has no session: a viewer is one client address and user
 * agent whose requests come within `viewerActiveMs` of each other. Each request is counted on
 * its viewer (status, response time, the variant it asked for), which gives the
 * `/hls/subscribers` metrics and the subscriber counts of `/hls/find_all` and `/hls/profiles`.
 * A player of an audio group fetches a video variant and an audio rendition side by side:
 * each is followed on its own, so alternating between them is no profile switch.
 */
import { reasonPhrases } from "./hls_http1.ts";

/** A viewer seen within this long is active, in ms (players reload playlists every few s). */
export const viewerActiveMs = 10_000;
/** An inactive viewer is forgotten after this long, in ms. */
export const viewerForgetMs = 60_000;
/** Most viewers remembered per output; the least recently seen one makes room. */
export const maxViewersPerOutput = 10_000;

/** `requestsStatuses` keys by status, made once each. */
const statusLabels = new Map<number, string>();

/** The `requestsStatuses` key of `status`: "200 OK". */
function statusLabel(status: number): string {
  let label = statusLabels.get(status);
  if (label === undefined) {
    label = `${status} ${reasonPhrases[status] ?? ""}`.trim();
    statusLabels.set(status, label);
  }
  return label;
}

/** One request of a viewer. */
export interface HlsRequest {
  ip: string;
  port: number;
  userAgent: string;
  /** The variant the request was for (media playlist, segment, part, init); none for the master. */
  variant?: string;
  /** `variant` is an audio rendition (`#EXT-X-MEDIA`), played beside a video variant. */
  audio?: boolean;
  status: number;
  responseMs: number;
}

/** The `/hls/subscribers` record of a viewer. */
export interface HlsViewerRecord {
  id: string;
  ip: string;
  port: number;
  userAgent: string;
  active: boolean;
  metrics: {
    profileTime: Record<string, number>;
    requestsNumber: number;
    requestsStatuses: Record<string, number>;
    profileSwitches: number;
    maxResponseTime: number;
    minResponseTime: number;
    avgResponseTime: number;
  };
}

/** What a viewer plays of one kind: a variant, or an audio rendition. */
interface Lane {
  variant: string | undefined;
  /** Since when the viewer is on `variant`, in ms. */
  sinceMs: number;
}

interface Viewer {
  id: string;
  ip: string;
  port: number;
  userAgent: string;
  lastSeenMs: number;
  /** The variant played (muxed, or video of an audio group). */
  main: Lane;
  /** The audio rendition played beside it, if any. */
  audio: Lane;
  profileTimeMs: Map<string, number>;
  requests: number;
  statuses: Map<string, number>;
  switches: number;
  minMs: number;
  maxMs: number;
  totalMs: number;
}

/** The viewers of one output. */
export class HlsViewers {
  /** By `ip + "\n" + userAgent`, least recently seen first. */
  #byKey = new Map<string, Viewer>();
  #now: () => number;
  #lastRequestMs: number | undefined;

  /** @param now clock in ms (injectable for tests). */
  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /** Counts a request on its viewer (a new one after `viewerActiveMs` of silence). */
  count(request: HlsRequest): void {
    const now = this.#now();
    const key = `${request.ip}\n${request.userAgent}`;
    let viewer = this.#byKey.get(key);
    if (viewer && now - viewer.lastSeenMs > viewerActiveMs) {
      // Gone for longer than a player's reload: a returning client is a new viewer.
      this.#byKey.delete(key);
      viewer = undefined;
    }
    if (viewer) this.#byKey.delete(key);
    else {
      this.#forget(now);
      viewer = {
        id: crypto.randomUUID(),
        ip: request.ip,
        port: request.port,
        userAgent: request.userAgent,
        lastSeenMs: now,
        main: { variant: undefined, sinceMs: now },
        audio: { variant: undefined, sinceMs: now },
        profileTimeMs: new Map(),
        requests: 0,
        statuses: new Map(),
        switches: 0,
        minMs: Infinity,
        maxMs: 0,
        totalMs: 0,
      };
    }
    // Re-inserted so the map stays ordered by last sight.
    this.#byKey.set(key, viewer);
    viewer.port = request.port;
    if (request.variant !== undefined) {
      const lane = request.audio ? viewer.audio : viewer.main;
      if (lane.variant === undefined) lane.sinceMs = now;
      else {
        addTime(viewer, lane, now);
        if (request.variant !== lane.variant) viewer.switches++;
      }
      lane.variant = request.variant;
    }
    viewer.lastSeenMs = now;
    this.#lastRequestMs = now;
    viewer.requests++;
    const status = statusLabel(request.status);
    viewer.statuses.set(status, (viewer.statuses.get(status) ?? 0) + 1);
    viewer.minMs = Math.min(viewer.minMs, request.responseMs);
    viewer.maxMs = Math.max(viewer.maxMs, request.responseMs);
    viewer.totalMs += request.responseMs;
  }

  /** Viewers seen within `viewerActiveMs`; of `variant` only, when given. */
  active(variant?: string): number {
    const now = this.#now();
    let n = 0;
    for (const viewer of this.#byKey.values()) {
      if (now - viewer.lastSeenMs > viewerActiveMs) continue;
      if (
        variant === undefined || viewer.main.variant === variant ||
        viewer.audio.variant === variant
      ) n++;
    }
    return n;
  }

  /** Time of the latest request of any viewer, in ms; undefined before the first. */
  get lastRequestMs(): number | undefined {
    return this.#lastRequestMs;
  }

  /** The `/hls/subscribers` records. */
  records(): HlsViewerRecord[] {
    const now = this.#now();
    this.#forget(now);
    return [...this.#byKey.values()].map((viewer) => {
      const active = now - viewer.lastSeenMs <= viewerActiveMs;
      const profileTime = Object.fromEntries(viewer.profileTimeMs);
      for (const lane of [viewer.main, viewer.audio]) {
        if (lane.variant === undefined) continue;
        // The time on the current variant runs until now (or until the viewer went silent).
        const until = active ? now : viewer.lastSeenMs;
        profileTime[lane.variant] = (profileTime[lane.variant] ?? 0) +
          Math.max(0, until - lane.sinceMs);
      }
      return {
        id: viewer.id,
        ip: viewer.ip,
        port: viewer.port,
        userAgent: viewer.userAgent,
        active,
        metrics: {
          profileTime: Object.fromEntries(
            Object.entries(profileTime).map(([name, ms]) => [name, Math.round(ms)]),
          ),
          requestsNumber: viewer.requests,
          requestsStatuses: Object.fromEntries(viewer.statuses),
          profileSwitches: viewer.switches,
          maxResponseTime: Math.round(viewer.maxMs),
          minResponseTime: viewer.requests > 0 ? Math.round(viewer.minMs) : 0,
          avgResponseTime: viewer.requests > 0
            ? Math.round(viewer.totalMs / viewer.requests * 100) / 100
            : 0,
        },
      };
    });
  }

  /** Drops viewers silent for `viewerForgetMs`, and the oldest beyond the bound. */
  #forget(now: number): void {
    for (const [key, viewer] of this.#byKey) {
      if (now - viewer.lastSeenMs <= viewerForgetMs && this.#byKey.size < maxViewersPerOutput) {
        break;
      }
      this.#byKey.delete(key);
    }
  }
}

/** Credits the time since the lane's last variant change to that variant. */
function addTime(viewer: Viewer, lane: Lane, now: number): void {
  const variant = lane.variant!;
  viewer.profileTimeMs.set(
    variant,
    (viewer.profileTimeMs.get(variant) ?? 0) + (now - lane.sinceMs),
  );
  lane.sinceMs = now;
}
