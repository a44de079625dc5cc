/**
 * The SFU bridge (config `sfu.bridge`, WCS's `sfu_bridge_enabled`): each track a room
 * participant publishes is also a published stream of the StreamRegistry, named
 * `{room}-{nickname}-VIDEO` (`-VIDEO-screen`) or `-AUDIO`, so it is listed, played, recorded
 * and pushed like any other stream, and removed when the participant leaves or stops it. A
 * rename moves the streams to the new nickname's names (see `rename`).
 */
import type { Logger } from "../log.ts";
import type { StreamRegistry } from "../stream_registry.ts";
import type { PublishedTrack } from "../../media/sfu/published_track.ts";
import { BridgeStream, bridgeStreamName } from "../../media/sfu/bridge_stream.ts";

/** Bridge streams of the SFU tracks. */
export class SfuBridge {
  readonly #streams: StreamRegistry;
  readonly #log: Logger;
  readonly #bridged = new Map<PublishedTrack, BridgeStream>();

  constructor(streams: StreamRegistry, log: Logger) {
    this.#streams = streams;
    this.#log = log;
  }

  /**
   * Publishes `track` of `nickname` in `room` as a stream. A name already published (a second
   * camera, or another publisher of that name) or the `streams` cap leaves it unbridged, logged:
   * the room goes on.
   */
  open(room: string, nickname: string, track: PublishedTrack): void {
    if (this.#bridged.has(track)) return;
    const stream = new BridgeStream(bridgeStreamName(room, nickname, track), track);
    try {
      this.#streams.add(stream);
    } catch (err) {
      stream.close();
      this.#log.info("SFU bridge stream not published", {
        name: stream.name,
        reason: (err as Error).message,
      });
      return;
    }
    this.#bridged.set(track, stream);
    // Ended by the room, or by /stream/terminate: either way it leaves the registry.
    void stream.done.then(() => {
      this.#streams.remove(stream);
      if (this.#bridged.get(track) === stream) this.#bridged.delete(track);
    });
  }

  /**
   * The participant publishing `tracks` in `room` is now called `nickname`: its bridge streams
   * are ended and published again under the new name. The name is how a WCS application finds
   * a participant's stream (`{room}-{nickname}-VIDEO`), and the old name is free for the next
   * participant who takes that nickname, so it must not go on naming this one's media. Readers
   * of the old name are ended as when the participant leaves (a Web SDK player is told, a
   * recording is closed); a track left unbridged under the old name (taken) is tried again.
   */
  rename(room: string, nickname: string, tracks: Iterable<PublishedTrack>): void {
    for (const track of tracks) {
      this.close([track]);
      this.open(room, nickname, track);
    }
  }

  /** Ends the bridge streams of `tracks` (they were withdrawn from the room). */
  close(tracks: Iterable<PublishedTrack>): void {
    for (const track of tracks) {
      const stream = this.#bridged.get(track);
      if (!stream) continue;
      this.#bridged.delete(track);
      this.#streams.remove(stream);
      stream.close();
    }
  }
}
