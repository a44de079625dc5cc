/**
 * The RTMP players of one stream, fed from one shared log of chunk bytes. The stream is read
 * once (one StreamReader for all the players); each frame is chunked once into a bundle (see
 * `RtmpPackager.playChunks`) appended to a bounded ring, and every player holds only its
 * position in that ring and writes the ring's very bytes: no per-player queue of frames, no
 * per-player copy. A player more than `playerLagMaxBundles` behind (its socket takes less
 * than the stream) skips to the newest keyframe, or waits for the next one, without slowing
 * the others; one that stops reading is dropped by its connection's write timeout.
 */
import type { RtmpConn, WriteDone } from "../protocols/rtmp/conn.ts";
import { joinChunkBytes } from "../protocols/rtmp/chunk_writer.ts";
import { readerQueueFrames, type Stream, type StreamReader } from "../stream.ts";
import { countFanoutPlayers, FanoutRing, waitingForKey } from "./fanout_ring.ts";
import { RtmpPackager } from "./rtmp_packager.ts";

/**
 * Bundles a player may lag behind the newest before it skips to a keyframe; also what the
 * ring holds, so a new player starts at the cached keyframe when the GOP fits in it. Bundles
 * are at most frames, so this is at least the frame queue a reader of its own had.
 */
export const playerLagMaxBundles = readerQueueFrames;

/** One player: its connection and position in the ring. */
class FanoutPlayer {
  /** Sequence number of the next bundle to write, or `waitingForKey`. */
  next = waitingForKey;
  writing = false;
  readonly conn: RtmpConn;
  readonly done = Promise.withResolvers<void>();
  /** Ends a write: the next one starts, or the player leaves when it failed. */
  readonly written: WriteDone;

  constructor(fanout: RtmpFanout, conn: RtmpConn) {
    this.conn = conn;
    this.written = (err) => {
      this.writing = false;
      if (!err) return fanout.feed(this);
      this.done.reject(err);
      fanout.remove(this);
    };
  }
}

/** The RTMP players of one stream and the ring of bundles they write. */
export class RtmpFanout {
  #packager: RtmpPackager;
  #stream: Stream;
  #reader: StreamReader | undefined;
  #ring = new FanoutRing<Uint8Array>(playerLagMaxBundles);
  /** Frames and bytes taken from the reader since the last bundle (held audio). */
  #pendingFrames = 0;
  #pendingBytes = 0;
  #headerVersion: number;
  #players = new Set<FanoutPlayer>();
  /** Players the reader metrics count beyond the shared reader itself. */
  #countedPlayers = 0;
  #ended = false;

  static #byStream = new WeakMap<Stream, RtmpFanout>();

  /** The fan-out of `stream`'s RTMP players, started with its first player. */
  static of(stream: Stream): RtmpFanout {
    let fanout = RtmpFanout.#byStream.get(stream);
    if (!fanout) {
      fanout = new RtmpFanout(stream);
      RtmpFanout.#byStream.set(stream, fanout);
    }
    return fanout;
  }

  private constructor(stream: Stream) {
    this.#stream = stream;
    this.#packager = RtmpPackager.of(stream);
    // Audio held back by an earlier fan-out of this stream is from another time.
    this.#packager.dropHeldAudio();
    this.#headerVersion = this.#packager.headerVersion;
  }

  /** Bundles written so far (the next bundle's sequence number). */
  get head(): number {
    return this.#ring.head;
  }

  /**
   * Adds a player whose connection got the headers; resolves once the stream has ended and
   * the player wrote everything, rejects when a write fails. `remove` takes it out earlier.
   */
  add(conn: RtmpConn): { player: FanoutPlayer; done: Promise<void> } {
    const player = new FanoutPlayer(this, conn);
    if (this.#ended) {
      player.done.resolve();
      return { player, done: player.done.promise };
    }
    this.#players.add(player);
    player.next = this.#ring.start;
    // Started after the player joined: the cached GOP then goes out to it at once.
    this.#reader ??= this.#startReader();
    this.#countPlayers();
    this.feed(player);
    return { player, done: player.done.promise };
  }

  /** Takes a player out (its connection ended); the last one out stops reading the stream. */
  remove(player: FanoutPlayer): void {
    if (!this.#players.delete(player)) return;
    player.done.resolve();
    this.#countPlayers();
    if (this.#players.size > 0 || this.#ended) return;
    // Nobody plays: stop reading so the stream (or its conversion) may stop, and start
    // afresh from the stream's cached GOP with the next player.
    RtmpFanout.#byStream.delete(this.#stream);
    this.#ended = true;
    this.#reader?.close();
    this.#countPlayers();
    this.#ring.clear();
  }

  /** Starts the player's next write when it has none in flight and a bundle is due. */
  feed(player: FanoutPlayer): void {
    if (player.writing || !this.#players.has(player)) return;
    const tally = this.#reader?.tally;
    // Too slow for the stream: skip to the newest keyframe, else wait for the next one.
    const seq = this.#ring.catchUp(player.next, tally);
    player.next = seq;
    if (seq !== waitingForKey && seq < this.#ring.head) {
      player.next = seq + 1;
      player.writing = true;
      this.#ring.deliver(seq, tally);
      player.conn.writeThen(this.#ring.at(seq), player.written);
      return;
    }
    if (this.#ended) {
      this.#players.delete(player);
      this.#countPlayers();
      player.done.resolve();
    }
  }

  #startReader(): StreamReader {
    const reader = this.#stream.reader(undefined, "rtmp");
    const pump = (): void => {
      for (;;) {
        const frame = reader.poll(pump);
        if (frame === undefined) {
          if (reader.drained) this.#end();
          return;
        }
        this.#pendingFrames++;
        this.#pendingBytes += frame.data.length;
        let bytes = this.#packager.playChunks(frame);
        if (!bytes) continue;
        if (this.#packager.headerVersion !== this.#headerVersion) {
          // The stream's encoder set its parameter sets after the headers went out.
          this.#headerVersion = this.#packager.headerVersion;
          bytes = joinChunkBytes([this.#packager.header, bytes]);
        }
        const video = this.#packager.video;
        this.#append(bytes, !video || (frame.trackId === video.id && frame.keyframe));
      }
    };
    pump();
    return reader;
  }

  #append(bytes: Uint8Array, startable: boolean): void {
    const seq = this.#ring.append(
      bytes,
      this.#pendingFrames,
      this.#pendingBytes,
      startable,
      this.#reader?.tally,
    );
    this.#pendingFrames = 0;
    this.#pendingBytes = 0;
    let floor = this.#ring.keyFloor;
    for (const player of this.#players) {
      if (player.next === waitingForKey && startable) player.next = seq;
      if (!player.writing) this.feed(player);
      if (player.next !== waitingForKey && player.next < floor) floor = player.next;
    }
    this.#ring.release(floor);
  }

  /** The stream ended: players finish once they wrote the rest (with the audio still held). */
  #end(): void {
    if (this.#ended) return;
    const tail = this.#packager.endChunks();
    if (tail) this.#append(tail, false);
    RtmpFanout.#byStream.delete(this.#stream);
    this.#ended = true;
    this.#countPlayers();
    for (const player of [...this.#players]) this.feed(player);
  }

  /**
   * Keeps the `rtmp` reader metrics counting players, not shared readers: the attached
   * reader counts one, and each further player one more.
   */
  #countPlayers(): void {
    this.#countedPlayers = countFanoutPlayers(
      this.#reader?.tally,
      this.#players.size,
      !this.#ended && !this.#stream.ended,
      this.#countedPlayers,
    );
  }
}
