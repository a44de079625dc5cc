/**
 * The audio a call sends, in G.711 packets of 20 ms (160 samples) on a wall clock: each
 * 20 ms slot takes its bytes from the first source that has some — in-band DTMF tones, then
 * an injected sound, then the live audio of the stream sent into the call (which keeps being
 * consumed underneath, so it resumes in time, not late). RTP timestamps follow the slots, so
 * they stay continuous across sources and silences; a packet after a silent slot has the
 * marker bit (RFC 3551 §4.1, the start of a talkspurt). With `idleSilence`, a slot with
 * nothing to send carries silence instead, so RTP never stops.
 */

/** Duration of one packet, in milliseconds. */
export const packetMs = 20;
/** G.711 samples (bytes) in one packet. */
export const packetSamples = 160;
/** Live audio buffered before playing starts again after running dry, in bytes (60 ms). */
export const livePrebufferBytes = 3 * packetSamples;
/** Most live audio held ahead of the clock, in bytes (500 ms); older bytes are dropped. */
export const liveMaxBytes = 25 * packetSamples;
/** Most slots sent at once to catch up after the event loop stalled (100 ms). */
const maxCatchUpSlots = 5;

/** Sends one packet: its payload, RTP timestamp and marker bit. */
export type AudioPacketSink = (payload: Uint8Array, timestamp: number, marker: boolean) => void;

/** Bytes queued in chunks, taken in packets. */
class ByteQueue {
  bytes = 0;
  #chunks: Uint8Array[] = [];
  #offset = 0;

  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    this.#chunks.push(chunk);
    this.bytes += chunk.length;
  }

  /** Takes `n` bytes (fewer when fewer are queued) into `out` from `at`; returns the count. */
  take(out: Uint8Array, at: number, n: number): number {
    let copied = 0;
    while (copied < n && this.#chunks.length > 0) {
      const chunk = this.#chunks[0];
      const count = Math.min(n - copied, chunk.length - this.#offset);
      out.set(chunk.subarray(this.#offset, this.#offset + count), at + copied);
      copied += count;
      this.#offset += count;
      if (this.#offset === chunk.length) {
        this.#chunks.shift();
        this.#offset = 0;
      }
    }
    this.bytes -= copied;
    return copied;
  }

  /** Drops the oldest bytes down to `keep`. */
  trim(keep: number): void {
    if (this.bytes <= keep) return;
    const drop = new Uint8Array(this.bytes - keep);
    this.take(drop, 0, drop.length);
  }

  clear(): void {
    this.#chunks = [];
    this.#offset = 0;
    this.bytes = 0;
  }
}

/** Clips played one after the other, each with the promise of its end. */
class ClipQueue {
  #clips: { bytes: Uint8Array; offset: number; done: () => void }[] = [];

  get empty(): boolean {
    return this.#clips.length === 0;
  }

  add(bytes: Uint8Array): Promise<void> {
    const { promise, resolve } = Promise.withResolvers<void>();
    if (bytes.length === 0) resolve();
    else this.#clips.push({ bytes, offset: 0, done: resolve });
    return promise;
  }

  /** One packet of the current clip (its last one padded with `silence`), if any. */
  take(silence: number): Uint8Array | undefined {
    const clip = this.#clips[0];
    if (!clip) return undefined;
    const out = new Uint8Array(packetSamples).fill(silence);
    const end = Math.min(clip.offset + packetSamples, clip.bytes.length);
    out.set(clip.bytes.subarray(clip.offset, end));
    clip.offset = end;
    if (end === clip.bytes.length) {
      this.#clips.shift();
      clip.done();
    }
    return out;
  }

  /** Ends every clip now (their promises resolve). */
  clear(): void {
    for (const clip of this.#clips.splice(0)) clip.done();
  }
}

/** The 20 ms send clock of one call's audio. */
export class CallAudioPacer {
  /** RTP timestamp of slot 0. */
  readonly timestampBase = crypto.getRandomValues(new Uint32Array(1))[0];
  /** True while the audio must not be sent (an RFC 4733 event is being sent instead). */
  muted = false;
  /** Live audio bytes dropped because they ran too far ahead of the clock. */
  overflowBytes = 0;
  #send: AudioPacketSink;
  #silence: number;
  #tones = new ClipQueue();
  #sounds = new ClipQueue();
  #live = new ByteQueue();
  #liveAttached = false;
  #idleSilence = false;
  #livePlaying = false;
  #startMs = performance.now();
  #nextSlot = 0;
  #talking = false;
  #timer: ReturnType<typeof setInterval> | undefined;
  #closed = false;

  /** `send` gets each packet; `silence` is the codec's code of a zero sample (for padding). */
  constructor(send: AudioPacketSink, silence: number) {
    this.#send = send;
    this.#silence = silence;
  }

  /** The RTP timestamp of the slot now due. */
  timestampNow(): number {
    return (this.timestampBase + this.#slotNow() * packetSamples) >>> 0;
  }

  /** Changes the padding code (the call's codec changed). */
  set silence(code: number) {
    this.#silence = code;
  }

  /** Sends silence in slots with nothing else (true), or nothing (false, the default). */
  set idleSilence(on: boolean) {
    this.#idleSilence = on;
    if (on) this.#run();
  }

  /** Starts (true) or stops (false) taking live audio; stopping drops what is buffered. */
  set live(attached: boolean) {
    this.#liveAttached = attached;
    if (!attached) {
      this.#live.clear();
      this.#livePlaying = false;
    } else this.#run();
  }

  /** Appends live audio (G.711 bytes of the call's codec). */
  pushLive(bytes: Uint8Array): void {
    if (!this.#liveAttached || this.#closed) return;
    this.#live.push(bytes);
    if (this.#live.bytes > liveMaxBytes) {
      this.overflowBytes += this.#live.bytes - liveMaxBytes;
      this.#live.trim(liveMaxBytes);
    }
  }

  /** Plays DTMF tones over everything else; resolves when played (or on close). */
  playTones(bytes: Uint8Array): Promise<void> {
    return this.#play(this.#tones, bytes);
  }

  /** Plays a sound over the live audio; resolves when played (or on close). */
  playSound(bytes: Uint8Array): Promise<void> {
    return this.#play(this.#sounds, bytes);
  }

  /** Stops the clock; pending plays resolve. */
  close(): void {
    this.#closed = true;
    this.#stop();
    this.#tones.clear();
    this.#sounds.clear();
    this.#live.clear();
  }

  #play(queue: ClipQueue, bytes: Uint8Array): Promise<void> {
    if (this.#closed) return Promise.resolve();
    const played = queue.add(bytes);
    this.#run();
    return played;
  }

  #slotNow(): number {
    return Math.floor((performance.now() - this.#startMs) / packetMs);
  }

  #run(): void {
    if (this.#timer !== undefined || this.#closed) return;
    // Slots passed while idle are skipped: the timestamps keep to the wall clock.
    this.#nextSlot = Math.max(this.#nextSlot, this.#slotNow());
    this.#talking = false;
    this.#timer = setInterval(() => this.#tick(), packetMs);
    this.#tick();
  }

  #stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #tick(): void {
    const due = this.#slotNow();
    if (due - this.#nextSlot >= maxCatchUpSlots) this.#nextSlot = due - maxCatchUpSlots + 1;
    for (; this.#nextSlot <= due; this.#nextSlot++) this.#slot(this.#nextSlot);
    if (!this.#liveAttached && !this.#idleSilence && this.#tones.empty && this.#sounds.empty) {
      this.#stop();
    }
  }

  #slot(slot: number): void {
    const live = this.#takeLive();
    const payload = this.#tones.take(this.#silence) ?? this.#sounds.take(this.#silence) ?? live ??
      (this.#idleSilence ? new Uint8Array(packetSamples).fill(this.#silence) : undefined);
    if (payload === undefined || this.muted) {
      this.#talking = false;
      return;
    }
    this.#send(payload, (this.timestampBase + slot * packetSamples) >>> 0, !this.#talking);
    this.#talking = true;
  }

  /** One packet of live audio, once enough is buffered to play smoothly. */
  #takeLive(): Uint8Array | undefined {
    if (!this.#livePlaying) {
      if (this.#live.bytes < livePrebufferBytes) return undefined;
      this.#livePlaying = true;
    }
    if (this.#live.bytes < packetSamples) {
      this.#livePlaying = false;
      return undefined;
    }
    const out = new Uint8Array(packetSamples);
    this.#live.take(out, 0, packetSamples);
    return out;
  }
}
