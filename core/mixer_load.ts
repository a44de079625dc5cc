/**
 * The mixer load test of `/mixer/test/*`: `mixerCount` mixers named `mixer://mixer-test-<n>`,
 * one started every `intervalInSeconds` (the first at once), each fed `streamsInMixer` of the
 * `feedingStreams` in turn. `stop` ends every mixer it made; what it did is logged.
 */
import { BadRequestError, ConflictError, NotFoundError } from "./errors.ts";
import type { Logger } from "./log.ts";
import type { MixerRegistry } from "./mixer_registry.ts";
import type { StreamRegistry } from "./stream_registry.ts";

/** A load test request. */
export interface MixerLoadRequest {
  /** Published streams the mixers take their inputs from. */
  feedingStreams: string[];
  mixerCount: number;
  /** Inputs of each mixer, at most the number of feeding streams. */
  streamsInMixer: number;
  /** Time between two mixers' starts, in seconds. */
  intervalInSeconds: number;
}

/** The example `test/get_start_example` answers. */
export const mixerLoadExample: MixerLoadRequest = {
  feedingStreams: ["stream1", "stream2", "stream3"],
  mixerCount: 2,
  streamsInMixer: 3,
  intervalInSeconds: 1,
};

/** Most mixers one load test may start (each is a decoder set and an encoder). */
const maxLoadMixers = 64;

/** The running load test of a server, if any. */
export class MixerLoad {
  #mixers: MixerRegistry;
  #streams: StreamRegistry;
  #log: Logger;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #started: string[] = [];
  #running = false;
  #step: Promise<void> = Promise.resolve();

  constructor(mixers: MixerRegistry, streams: StreamRegistry, log: Logger) {
    this.#mixers = mixers;
    this.#streams = streams;
    this.#log = log.child({ component: "mixer load test" });
  }

  /**
   * Starts the load test: 409 while one runs, 400 for more inputs per mixer than feeding
   * streams, 404 for a feeding stream not published.
   */
  start(request: MixerLoadRequest): void {
    if (this.#running) throw new ConflictError("a mixer load test is running");
    const { feedingStreams, mixerCount, streamsInMixer, intervalInSeconds } = request;
    if (streamsInMixer > feedingStreams.length) {
      throw new BadRequestError(
        "streamsInMixer",
        `${streamsInMixer} is more than the ${feedingStreams.length} feeding streams`,
      );
    }
    if (mixerCount > maxLoadMixers) {
      throw new BadRequestError("mixerCount", `${mixerCount} is over ${maxLoadMixers}`);
    }
    const missing = feedingStreams.find((name) => !this.#streams.published(name));
    if (missing !== undefined) throw new NotFoundError(`feeding stream ${missing} not found`);
    this.#running = true;
    this.#started = [];
    this.#log.info("load test started", { ...request });
    let next = 0;
    const startNext = () => {
      const index = next++;
      this.#step = this.#startMixer(index, request);
      if (next < mixerCount) this.#timer = setTimeout(startNext, intervalInSeconds * 1000);
    };
    startNext();
  }

  /** Ends the load test and every mixer it started (nothing when none runs). */
  async stop(): Promise<void> {
    clearTimeout(this.#timer);
    this.#running = false;
    await this.#step;
    const uris = this.#started;
    this.#started = [];
    await Promise.all(uris.map((uri) => this.#mixers.terminate(uri).catch(() => {})));
    if (uris.length > 0) this.#log.info("load test stopped", { mixersEnded: uris.length });
  }

  async #startMixer(index: number, request: MixerLoadRequest): Promise<void> {
    if (!this.#running) return;
    const uri = `mixer://mixer-test-${index + 1}`;
    const { feedingStreams, streamsInMixer } = request;
    try {
      await this.#mixers.startup({ uri });
      this.#started.push(uri);
      for (let i = 0; i < streamsInMixer; i++) {
        const name = feedingStreams[(index * streamsInMixer + i) % feedingStreams.length];
        this.#mixers.add(uri, name, {});
      }
      this.#log.info("load test mixer started", { uri, inputs: streamsInMixer });
    } catch (err) {
      this.#log.warn("load test mixer failed", { uri, err });
    }
  }
}
