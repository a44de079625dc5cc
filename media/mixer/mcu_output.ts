/**
 * The output a conference participant plays in MCU mode: the mixer's picture with every
 * voice but their own. It is a stream of its own (`<mixer output>-<input name without #>`,
 * e.g. `room1-aliceroom1` for `alice#room1`, as WCS's MCU demo names it): the mixer's
 * encoded video frames as they are, and an Opus encode of the mix without the participant.
 */
import type { Logger } from "../../core/log.ts";
import type { CodecEngine } from "../engine/engine.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { Stream } from "../stream.ts";
import type { StreamDirectory } from "../stream_record.ts";
import { PcmEncoder, type PcmFormat } from "./pcm_codec.ts";

/** `mediaProvider` of an MCU output stream. */
export const mcuMediaProvider = "MixerMCU";

/** The name of the MCU output of input `inputName` of the mixer output `mixerOutput`. */
export function mcuOutputName(mixerOutput: string, inputName: string): string {
  return `${mixerOutput}-${inputName.replaceAll("#", "")}`;
}

/** What an MCU output is built from. */
export interface McuOutputOptions {
  name: string;
  /** The mixer's video track (shared: its encoder sets the parameter sets), if any. */
  video: Track | undefined;
  /** The mixer's audio track, copied for this output's own encode. */
  audio: Track;
  format: PcmFormat;
  /** Opus bitrate in bit/s (0: the codec's default). */
  bitrate: number;
  engine: CodecEngine;
  streams: StreamDirectory;
  log: Logger;
  /** Called when a reader terminates the output stream. */
  onStop: () => void;
}

/** One participant's MCU output stream. */
export class McuOutput {
  readonly stream: Stream;
  readonly #encoder: PcmEncoder;
  readonly #streams: StreamDirectory;
  #closed = false;

  /** Registers the output stream (a name in use is a ConflictError) and starts its encoder. */
  constructor(options: McuOutputOptions) {
    const audio: Track = { ...options.audio, id: options.video ? 1 : 0 };
    const tracks = options.video ? [options.video, audio] : [audio];
    this.#streams = options.streams;
    this.stream = new Stream({
      name: options.name,
      mediaSessionId: crypto.randomUUID(),
      tracks,
      mediaProvider: mcuMediaProvider,
      stopProvider: () => {
        options.onStop();
        return Promise.resolve();
      },
    });
    options.streams.add(this.stream);
    try {
      this.#encoder = new PcmEncoder({
        engine: options.engine,
        format: options.format,
        track: audio,
        bitrate: options.bitrate,
        onFrame: (frame) => {
          if (!this.#closed) this.stream.push(frame);
        },
        log: options.log,
      });
    } catch (err) {
      this.#end();
      throw err;
    }
  }

  /** A frame of the mixer's video (its track id is the same here). */
  pushVideo(frame: MediaFrame): void {
    if (!this.#closed) this.stream.push(frame);
  }

  /** 20 ms of the mix without this participant, at `pts` samples. */
  pushAudio(samples: Int16Array, pts: number): void {
    if (!this.#closed) this.#encoder.push(samples, pts);
  }

  /** Ends the stream and its encoder (idempotent). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#end();
    await this.#encoder.close();
  }

  #end(): void {
    this.#closed = true;
    this.stream.end();
    this.#streams.remove(this.stream);
  }
}
