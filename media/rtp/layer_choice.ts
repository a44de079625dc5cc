/**
 * Which simulcast layer one subscriber gets. The subscriber's manual choice (`changeQuality`)
 * is a cap; under it an automatic ceiling follows the subscriber's feedback: it drops one
 * layer when a receiver report shows heavy loss (at most once per `downHoldMs`, so the
 * effect of one step is seen before the next), and, when a bandwidth estimate (REMB) stays
 * under the rate of the layer forwarded (the lower of cap and ceiling: the estimate tells
 * nothing of a layer not sent) for `overuseHoldMs` (longer than one rate window, so
 * the burst of one keyframe does not count), at once to the highest layer whose rate fits
 * the estimate with `bandwidthHeadroom`; it climbs one layer after `upHoldMs` of clean reports when the
 * next layer fits the estimate or the estimate only follows what is sent (a browser's
 * receive-side estimate stays within 1.5 times its incoming rate, so it never shows room for
 * a layer several times larger: that layer is tried, and a try the estimate refuses doubles
 * the wait before the next, up to `maxUpHoldMs`). Among the layers under both limits the
 * highest alive one is chosen (moving up only to a layer alive for `layerWarmupMs`); when
 * none is alive, the lowest alive above.
 */

/** Loss share (0-1) of one receiver report that lowers the layer. */
export const lossDownFraction = 0.1;
/** Loss share (0-1) at or under which a report counts as clean. */
export const lossCleanFraction = 0.02;
/** Shortest time between two loss-driven steps down, in ms. */
export const downHoldMs = 2000;
/** Clean time needed before each step up, in ms. */
export const upHoldMs = 8000;
/** Share of the bandwidth estimate a layer's bitrate may use to be moved up to. */
export const bandwidthHeadroom = 0.85;
/**
 * An estimate at least this many times the ceiling layer's rate is taken as following the
 * incoming rate rather than limiting it: the next layer is tried even if it does not fit.
 */
export const estimateProbeFactor = 1.3;
/** Longest wait between climbs after tries the estimate refused, in ms. */
export const maxUpHoldMs = 64_000;
/** How long the estimate must stay under the forwarded layer's rate to lower it, in ms. */
export const overuseHoldMs = 1500;
/** A bandwidth estimate older than this is ignored, in ms. */
export const estimateMaxAgeMs = 5000;
/**
 * A layer that came back is moved up to only once alive this long, in ms: a browser resumes
 * a paused layer at a few frames a second while its bandwidth estimate ramps up.
 */
export const layerWarmupMs = 2000;

/** Thresholds of the automatic choice (defaults: the constants above). */
export interface LayerChoiceOptions {
  lossDownFraction?: number;
  lossCleanFraction?: number;
  downHoldMs?: number;
  upHoldMs?: number;
  bandwidthHeadroom?: number;
  layerWarmupMs?: number;
  estimateProbeFactor?: number;
  overuseHoldMs?: number;
}

/** Chooses the layer of one subscriber from its cap, feedback and the layers alive. */
export class LayerChoice {
  readonly layers: number;
  readonly #lossDown: number;
  readonly #lossClean: number;
  readonly #downHoldMs: number;
  readonly #upHoldMs: number;
  readonly #headroom: number;
  readonly #warmupMs: number;
  readonly #probeFactor: number;
  readonly #overuseHoldMs: number;
  /** When each layer became alive, -1 while dead. */
  readonly #aliveSinceMs: number[];
  #cap: number;
  #ceiling: number;
  #chosen = -1;
  #lastDownMs = -Infinity;
  #cleanSinceMs: number | undefined;
  #estimateKbps = 0;
  #estimateAtMs = -Infinity;
  /** The wait before the next climb: `upHoldMs`, doubled by each refused try. */
  #holdMs: number;
  /** When the ceiling last climbed, while that climb is on trial. */
  #trialSinceMs: number | undefined;
  /** Since when the estimate has been under the ceiling layer's rate. */
  #overSinceMs: number | undefined;

  /** `layers`: how many the publisher sends, indexed lowest first. */
  constructor(layers: number, options: LayerChoiceOptions = {}) {
    this.layers = layers;
    this.#cap = layers - 1;
    this.#ceiling = layers - 1;
    this.#lossDown = options.lossDownFraction ?? lossDownFraction;
    this.#lossClean = options.lossCleanFraction ?? lossCleanFraction;
    this.#downHoldMs = options.downHoldMs ?? downHoldMs;
    this.#upHoldMs = options.upHoldMs ?? upHoldMs;
    this.#headroom = options.bandwidthHeadroom ?? bandwidthHeadroom;
    this.#warmupMs = options.layerWarmupMs ?? layerWarmupMs;
    this.#probeFactor = options.estimateProbeFactor ?? estimateProbeFactor;
    this.#overuseHoldMs = options.overuseHoldMs ?? overuseHoldMs;
    this.#holdMs = this.#upHoldMs;
    this.#aliveSinceMs = new Array(layers).fill(-1);
  }

  /** The manual cap (changeQuality), highest layer index allowed. */
  get cap(): number {
    return this.#cap;
  }

  /** The automatic ceiling from feedback. */
  get ceiling(): number {
    return this.#ceiling;
  }

  /** The layer chosen by the last `choose`, -1 before. */
  get chosen(): number {
    return this.#chosen;
  }

  /** Sets the manual cap (clamped to the layers there are). */
  setCap(layer: number): void {
    this.#cap = Math.max(0, Math.min(this.layers - 1, layer));
  }

  /** A receiver report's fraction lost about the subscriber's track, as a share 0-1. */
  onLoss(fraction: number, nowMs: number): void {
    if (fraction > this.#lossClean) this.#cleanSinceMs = nowMs;
    else this.#cleanSinceMs ??= nowMs;
    if (fraction < this.#lossDown || nowMs - this.#lastDownMs < this.#downHoldMs) return;
    const from = this.#chosen < 0 ? this.#ceiling : Math.min(this.#ceiling, this.#chosen);
    this.#ceiling = Math.max(0, from - 1);
    this.#lastDownMs = nowMs;
  }

  /** The latest bandwidth estimate, in kbit/s (0 before one). */
  get estimateKbps(): number {
    return this.#estimateKbps;
  }

  /** A bandwidth estimate for the subscriber's track (its share of a REMB), in kbit/s. */
  onEstimate(kbps: number, nowMs: number): void {
    this.#estimateKbps = kbps;
    this.#estimateAtMs = nowMs;
  }

  /**
   * The layer to forward now, given which layers are alive and their measured bitrates
   * (kbit/s, 0 when unknown), lowest first; -1 when no layer is alive.
   */
  choose(alive: readonly boolean[], layerKbps: readonly number[], nowMs: number): number {
    const estimate = nowMs - this.#estimateAtMs <= estimateMaxAgeMs ? this.#estimateKbps : Infinity;
    const fits = (layer: number) => !(layerKbps[layer] > estimate * this.#headroom);
    if (this.#trialSinceMs !== undefined && nowMs - this.#trialSinceMs >= this.#upHoldMs) {
      // The last climb held: the next may come after the base wait again.
      this.#trialSinceMs = undefined;
      this.#holdMs = this.#upHoldMs;
    }
    const forwarded = Math.min(this.#cap, this.#ceiling);
    if (!(layerKbps[forwarded] > estimate)) this.#overSinceMs = undefined;
    else this.#overSinceMs ??= nowMs;
    if (this.#overSinceMs !== undefined && nowMs - this.#overSinceMs >= this.#overuseHoldMs) {
      this.#overSinceMs = undefined;
      let fit = forwarded;
      while (fit > 0 && !fits(fit)) fit--;
      this.#ceiling = fit;
      this.#cleanSinceMs = nowMs;
      if (this.#trialSinceMs !== undefined) {
        this.#holdMs = Math.min(maxUpHoldMs, this.#holdMs * 2);
        this.#trialSinceMs = undefined;
      }
    }
    const next = this.#ceiling + 1;
    if (
      next < this.layers && this.#cleanSinceMs !== undefined &&
      nowMs - this.#cleanSinceMs >= this.#holdMs &&
      (fits(next) || estimate >= this.#probeFactor * (layerKbps[this.#ceiling] ?? 0))
    ) {
      this.#ceiling = next;
      this.#cleanSinceMs = nowMs;
      if (estimate !== Infinity && !fits(next)) this.#trialSinceMs = nowMs;
    }
    for (let layer = 0; layer < this.layers; layer++) {
      if (!alive[layer]) this.#aliveSinceMs[layer] = -1;
      else if (this.#aliveSinceMs[layer] < 0) this.#aliveSinceMs[layer] = nowMs;
    }
    const warm = (layer: number) =>
      layer <= this.#chosen || nowMs - this.#aliveSinceMs[layer] >= this.#warmupMs;
    const limit = Math.min(this.#cap, this.#ceiling);
    let chosen = -1;
    for (let layer = limit; layer >= 0 && chosen < 0; layer--) {
      if (alive[layer] && warm(layer)) chosen = layer;
    }
    for (let layer = limit; layer >= 0 && chosen < 0; layer--) if (alive[layer]) chosen = layer;
    for (let layer = limit + 1; layer < this.layers && chosen < 0; layer++) {
      if (alive[layer]) chosen = layer;
    }
    this.#chosen = chosen;
    return chosen;
  }
}

/** Ranks of well-known rid sets, lowest quality first: WCS's and Chrome's samples'. */
const lowMediumHigh: Record<string, number> = { l: 0, m: 1, h: 2 };
const quarterHalfFull: Record<string, number> = { q: 0, h: 1, f: 2 };

/**
 * The rids of a simulcast offer ordered lowest quality first: `l`/`m`/`h` (and Chrome's
 * `q`/`h`/`f`), or names with a picture height like `180p`/`360p`/`720p`; other names keep
 * the offer's order.
 */
export function orderRids(rids: readonly string[]): string[] {
  // "h" is the top of l/m/h but the middle of q/h/f.
  const ranks = rids.some((rid) => rid === "q" || rid === "f") ? quarterHalfFull : lowMediumHigh;
  const rank = (rid: string): number | undefined => {
    const height = /^(\d+)p$/.exec(rid);
    return height ? Number(height[1]) : ranks[rid];
  };
  if (rids.some((rid) => rank(rid) === undefined)) return [...rids];
  return [...rids].sort((a, b) => rank(a)! - rank(b)!);
}
