/**
 * A bounded pool in front of a codec engine: at most `maxRunning` whole jobs (snapshots,
 * chunked conversions, sound decoding) run at once, up to `maxQueued` more wait their turn in
 * arrival order, and a job beyond both is refused with a 503, so a burst of snapshots starts
 * a few ffmpeg processes (or Workers) instead of one each and the server stays responsive.
 *
 * Live jobs (`start`: one ffmpeg per converted stream, running as long as the stream) are not
 * counted: queueing one would stall its media for as long as the queue is, and they are
 * bounded already by the streams and players that need them (`limits.streams`,
 * `limits.sessions`). Chunks of live conversions run as whole jobs (`live: true`, where the
 * engine cannot stream, and for sound mixing) do count, but wait ahead of the other jobs and
 * are never refused for a full queue: there is one at a time per converted stream.
 */
import { ServiceUnavailableError } from "../../core/errors.ts";
import {
  type CodecEngine,
  EngineError,
  type EngineJob,
  type EngineKind,
  type LiveJob,
  type LiveJobOptions,
} from "./engine.ts";

/** Bounds of a pool. */
export interface EnginePoolLimits {
  /** Whole jobs running at once. */
  maxRunning: number;
  /** Jobs waiting for a slot; more are refused. */
  maxQueued: number;
}

/** Figures of a pool for `/health`. */
export interface EnginePoolFigures {
  running: number;
  queued: number;
  max: number;
  maxQueued: number;
  refused: number;
}

interface Waiter {
  resolve: () => void;
  reject: (err: Error) => void;
}

/** An engine whose whole jobs run through a bounded pool. */
export class EnginePool implements CodecEngine {
  /** Starts a live job on the engine, uncounted (see the module comment); absent when the engine cannot stream. */
  readonly start?: (job: LiveJobOptions) => LiveJob;
  #engine: CodecEngine;
  #limits: EnginePoolLimits;
  #running = 0;
  #queue: Waiter[] = [];
  #liveQueue: Waiter[] = [];
  #refused = 0;
  #closed = false;

  constructor(engine: CodecEngine, limits: EnginePoolLimits) {
    this.#engine = engine;
    this.#limits = limits;
    if (engine.start) this.start = (job) => engine.start!(job);
  }

  /** The implementation behind the pool. */
  get kind(): EngineKind {
    return this.#engine.kind;
  }

  /** Runs `job` once a slot is free; a 503 when the queue is full (never for live chunks). */
  async run(job: EngineJob): Promise<Uint8Array> {
    await this.#acquire(job.live === true);
    try {
      return await this.#engine.run(job);
    } finally {
      this.#release();
    }
  }

  /** Subprocesses or Workers of the engine running now, live jobs included. */
  get runningJobs(): number {
    return this.#engine.runningJobs ?? 0;
  }

  /** Running and queued jobs, the bounds and refusals since start. */
  figures(): EnginePoolFigures {
    return {
      running: this.#running,
      queued: this.#queue.length + this.#liveQueue.length,
      max: this.#limits.maxRunning,
      maxQueued: this.#limits.maxQueued,
      refused: this.#refused,
    };
  }

  /** Refuses the queued jobs, then kills the running ones. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const waiter of [...this.#liveQueue.splice(0), ...this.#queue.splice(0)]) {
      waiter.reject(new EngineError("the engine is closed"));
    }
    await this.#engine.close();
  }

  #acquire(live: boolean): Promise<void> {
    if (this.#closed) return Promise.reject(new EngineError("the engine is closed"));
    if (this.#running < this.#limits.maxRunning) {
      this.#running++;
      return Promise.resolve();
    }
    if (!live && this.#queue.length >= this.#limits.maxQueued) {
      this.#refused++;
      return Promise.reject(
        new ServiceUnavailableError(
          `engine jobs limit of ${this.#limits.maxRunning} running and ${this.#limits.maxQueued} queued reached`,
        ),
      );
    }
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    (live ? this.#liveQueue : this.#queue).push({ resolve, reject });
    return promise;
  }

  /** Hands the slot to the first waiting live chunk, else the first waiting job, or frees it. */
  #release(): void {
    const next = this.#liveQueue.shift() ?? this.#queue.shift();
    if (next) next.resolve();
    else this.#running--;
  }
}
