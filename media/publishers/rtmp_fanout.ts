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
import { RtmpPackager } from "./rtmp_packager.ts";

/**
 * Bundles a player may lag behind the newest before it skips to a keyframe; also what the
 * ring holds, so a new player starts at the cached keyframe when the GOP fits in it. Bundles
 * are at most frames, so this is at least the frame queue a reader of its own had.
 */
export const playerLagMaxBundles = readerQueueFrames;

/** Marks a player that waits for the next keyframe bundle. */
const waitingForKey = -1;

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
  #ring: (Uint8Array | undefined)[] = new Array(playerLagMaxBundles);
  /** Frames and media bytes in each ring slot, for the reader metrics. */
  #ringFrames = new Uint16Array(playerLagMaxBundles);
  #ringBytes = new Float64Array(playerLagMaxBundles);
  /** Sequence number of the next bundle (the ring holds the `playerLagMaxBundles` before it). */
  #head = 0;
  /** Sequence number of the oldest bundle the ring still holds. */
  #tail = 0;
  /** Sequence number of the newest bundle a player may start at, or -1. */
  #lastKey = -1;
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
    return this.#head;
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
    player.next = this.#lastKey >= this.#tail ? this.#lastKey : waitingForKey;
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
    this.#ring.fill(undefined);
  }

  /** Starts the player's next write when it has none in flight and a bundle is due. */
  feed(player: FanoutPlayer): void {
    if (player.writing || !this.#players.has(player)) return;
    let seq = player.next;
    const tally = this.#reader?.tally;
    if (seq !== waitingForKey && this.#head - seq > playerLagMaxBundles) {
      // Too slow for the stream: skip to the newest keyframe, else wait for the next one.
      const key = this.#lastKey > seq && this.#lastKey >= this.#tail;
      if (tally) tally.droppedFrames += this.#framesBetween(seq, key ? this.#lastKey : this.#head);
      seq = key ? this.#lastKey : waitingForKey;
      player.next = seq;
    }
    if (seq !== waitingForKey && seq < this.#head) {
      const slot = seq % playerLagMaxBundles;
      player.next = seq + 1;
      player.writing = true;
      if (tally) {
        tally.deliveredFrames += this.#ringFrames[slot];
        tally.deliveredBytes += this.#ringBytes[slot];
      }
      player.conn.writeThen(this.#ring[slot]!, player.written);
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
    const seq = this.#head++;
    const slot = seq % playerLagMaxBundles;
    this.#ring[slot] = bytes;
    this.#ringFrames[slot] = this.#pendingFrames;
    this.#ringBytes[slot] = this.#pendingBytes;
    const tally = this.#reader?.tally;
    if (tally) {
      // The shared reader counted these once; players count them as each writes them.
      tally.deliveredFrames -= this.#pendingFrames;
      tally.deliveredBytes -= this.#pendingBytes;
    }
    this.#pendingFrames = 0;
    this.#pendingBytes = 0;
    if (startable) this.#lastKey = seq;
    // Bundles no player will write and none may start at are let go at once.
    let floor = this.#lastKey >= 0 ? this.#lastKey : this.#head;
    for (const player of this.#players) {
      if (player.next === waitingForKey && startable) player.next = seq;
      if (!player.writing) this.feed(player);
      if (player.next !== waitingForKey && player.next < floor) floor = player.next;
    }
    // Slots before `head - playerLagMaxBundles` hold newer bundles already.
    this.#tail = Math.max(this.#tail, this.#head - playerLagMaxBundles);
    for (; this.#tail < floor; this.#tail++) {
      this.#ring[this.#tail % playerLagMaxBundles] = undefined;
    }
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

  /** Frames in the bundles from `from` up to `to` (exclusive) still in the ring. */
  #framesBetween(from: number, to: number): number {
    let frames = 0;
    for (let seq = Math.max(from, this.#head - playerLagMaxBundles); seq < to; seq++) {
      frames += this.#ringFrames[seq % playerLagMaxBundles];
    }
    return frames;
  }

  /**
   * Keeps the `rtmp` reader metrics counting players, not shared readers: the attached
   * reader counts one, and each further player one more.
   */
  #countPlayers(): void {
    const tally = this.#reader?.tally;
    if (!tally) return;
    const attached = !this.#ended && !this.#stream.ended;
    const counted = attached ? Math.max(0, this.#players.size - 1) : this.#players.size;
    tally.attached += counted - this.#countedPlayers;
    this.#countedPlayers = counted;
  }
}
