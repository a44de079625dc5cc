/**
 * The recording of a Web SDK publish with `record: true`: it starts with the media, ends with
 * the stream, and its file name travels in the stream's final status as `recordName`, which
 * the SDK hands out as `stream.getRecordInfo()` (WCS's recording demo downloads it from
 * `/client/records/<recordName>`).
 */
import { NotFoundError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Services } from "../core/services.ts";
import { Recorder } from "../media/publishers/recorder.ts";
import type { Stream } from "../media/stream.ts";

/** One publish's recording. */
export class PublishRecording {
  #started: Promise<Recorder | undefined> = Promise.resolve(undefined);

  constructor(private readonly services: Services, private readonly log: Logger) {}

  /** Starts recording `stream` (once its media flows); a failure is logged, loudly. */
  start(stream: Stream): void {
    this.#started = this.services.recorders.startup(stream.mediaSessionId).then(
      () => stream.recording instanceof Recorder ? stream.recording : undefined,
      (err) => {
        this.log.error("recording of a publish with record: true could not start", {
          name: stream.name,
          mediaSessionId: stream.mediaSessionId,
          err,
        });
        return undefined;
      },
    );
  }

  /**
   * Ends the recording, if it still runs, and gives the final-status fields: `recordName`,
   * the name of the last file written (relative to the recordings folder), or none when
   * nothing was recorded.
   */
  async finish(mediaSessionId: string): Promise<Record<string, unknown>> {
    const recorder = await this.#started;
    if (!recorder) return {};
    try {
      await this.services.recorders.terminate(mediaSessionId);
    } catch (err) {
      // Stopped before (REST stopRecording, or the stream's end reached the recorder first).
      if (!(err instanceof NotFoundError)) throw err;
    }
    await recorder.stop();
    const name = recorder.closedFiles.at(-1);
    return name === undefined ? {} : { recordName: name };
  }
}
