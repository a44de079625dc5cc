/**
 * The audio a call sends, in packets of 20 ms on a wall clock (G.711 and G.722: 160 bytes;
 * Opus: one 20 ms Opus packet): each 20 ms slot takes its packet from the first source that has one —
 * in-band DTMF tones, then an injected sound, then the live audio of the stream sent into the
 * call (which keeps being consumed underneath, so it resumes in time, not late). RTP
 * timestamps follow the slots, so they stay continuous across sources and silences; a packet
 * after a silent slot has the marker bit (RFC 3551 §4.1, the start of a talkspurt). With
 * `idleSilence`, a slot with nothing to send carries silence instead, so RTP never stops.
 */
import { g711Silence } from "../codecs/g711.ts";

/** Duration of one packet, in milliseconds. */
export const packetMs = 20;
/** G.711 samples (bytes, and G.722 bytes and clock units) in one packet. */
export const packetSamples = 160;
/** RTP clock units of one Opus packet of 20 ms (48 kHz clock). */
export const opusPacketSamples = 960;
/** Live packets buffered before playing starts again after running dry (60 ms). */
export const livePrebufferPackets = 3;
/** Most live packets held ahead of the clock (500 ms); older ones are dropped. */
export const liveMaxPackets = 25;
/**
 * A 20 ms Opus packet that decodes to silence (TOC 0xf8: CELT fullband 20 ms, one frame; the
 * two bytes code a silent frame): what browsers send in DTX, three bytes a slot.
 */
export const opusSilencePacket = new Uint8Array([0xf8, 0xff, 0xfe]);
/** A G.722 byte that decodes to silence (a steady -2 of 32768 from ffmpeg's decoder). */
export const g722SilenceByte = 0xff;
/** Most slots sent at once to catch up after the event loop stalled (100 ms). */
const maxCatchUpSlots = 5;

/** Codecs the pacer sends. */
export type PacedCodec = "PCMU" | "PCMA" | "G722" | "OPUS";

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

  clear(): void {
    this.#chunks = [];
    this.#offset = 0;
    this.bytes = 0;
  }
}

/** Idle G.711/G.722 packets by their silence byte (read-only: the sender copies them). */
const silencePackets = new Map<number, Uint8Array>();

/** G.711 or G.722 bytes cut into packets, the last one padded with `silence`. */
export function bytePackets(bytes: Uint8Array, silence: number): Uint8Array[] {
  const packets: Uint8Array[] = [];
  for (let at = 0; at < bytes.length; at += packetSamples) {
    const packet = new Uint8Array(packetSamples).fill(silence);
    packet.set(bytes.subarray(at, at + packetSamples));
    packets.push(packet);
  }
  return packets;
}

/** Clips played one after the other, each with the promise of its end. */
class ClipQueue {
  #clips: { packets: Uint8Array[]; offset: number; done: () => void }[] = [];

  get empty(): boolean {
    return this.#clips.length === 0;
  }

  add(packets: Uint8Array[]): Promise<void> {
    const { promise, resolve } = Promise.withResolvers<void>();
    if (packets.length === 0) resolve();
    else this.#clips.push({ packets, offset: 0, done: resolve });
    return promise;
  }

  /** The next packet of the current clip, if any. */
  take(): Uint8Array | undefined {
    const clip = this.#clips[0];
    if (!clip) return undefined;
    const out = clip.packets[clip.offset++];
    if (clip.offset === clip.packets.length) {
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
  #codec: PacedCodec = "PCMU";
  #tones = new ClipQueue();
  #sounds = new ClipQueue();
  /** G.711 or G.722 live bytes not yet a whole packet. */
  #liveBytes = new ByteQueue();
  #live: Uint8Array[] = [];
  #liveAttached = false;
  #idleSilence = false;
  #livePlaying = false;
  #startMs = performance.now();
  #nextSlot = 0;
  #talking = false;
  #timer: ReturnType<typeof setInterval> | undefined;
  #closed = false;

  /** `send` gets each packet of `codec`. */
  constructor(send: AudioPacketSink, codec: PacedCodec) {
    this.#send = send;
    this.#codec = codec;
  }

  /** The RTP timestamp of the slot now due. */
  timestampNow(): number {
    return (this.timestampBase + this.#slotNow() * this.#slotClock) >>> 0;
  }

  /** The codec sent (the call's codec changed): live audio of the old one is dropped. */
  set codec(codec: PacedCodec) {
    if (codec === this.#codec) return;
    this.#codec = codec;
    this.#clearLive();
  }

  /** G.711 or G.722 silence byte, for padding. */
  get #silence(): number {
    if (this.#codec === "G722") return g722SilenceByte;
    return g711Silence(this.#codec === "PCMA" ? "PCMA" : "PCMU");
  }

  /** RTP clock units of one slot. */
  get #slotClock(): number {
    return this.#codec === "OPUS" ? opusPacketSamples : packetSamples;
  }

  /** Sends silence in slots with nothing else (true), or nothing (false, the default). */
  set idleSilence(on: boolean) {
    this.#idleSilence = on;
    if (on) this.#run();
  }

  /** Starts (true) or stops (false) taking live audio; stopping drops what is buffered. */
  set live(attached: boolean) {
    this.#liveAttached = attached;
    if (!attached) this.#clearLive();
    else this.#run();
  }

  /**
   * Appends live audio of the call's codec: G.711 or G.722 bytes (any amount), or one 20 ms Opus
   * packet. Empty input is nothing.
   */
  pushLive(data: Uint8Array): void {
    if (!this.#liveAttached || this.#closed || data.length === 0) return;
    if (this.#codec === "OPUS") this.#live.push(data);
    else {
      this.#liveBytes.push(data);
      while (this.#liveBytes.bytes >= packetSamples) {
        const packet = new Uint8Array(packetSamples);
        this.#liveBytes.take(packet, 0, packetSamples);
        this.#live.push(packet);
      }
    }
    while (this.#live.length > liveMaxPackets) this.overflowBytes += this.#live.shift()!.length;
  }

  /**
   * Plays DTMF tones over everything else (G.711 or G.722 bytes, or 20 ms packets of the call's
   * codec); resolves when played (or on close).
   */
  playTones(clip: Uint8Array | Uint8Array[]): Promise<void> {
    return this.#play(this.#tones, clip);
  }

  /** Plays a sound over the live audio (as `playTones` takes it); resolves when played. */
  playSound(clip: Uint8Array | Uint8Array[]): Promise<void> {
    return this.#play(this.#sounds, clip);
  }

  /** Stops the clock; pending plays resolve. */
  close(): void {
    this.#closed = true;
    this.#stop();
    this.#tones.clear();
    this.#sounds.clear();
    this.#clearLive();
  }

  #clearLive(): void {
    this.#liveBytes.clear();
    this.#live = [];
    this.#livePlaying = false;
  }

  #play(queue: ClipQueue, clip: Uint8Array | Uint8Array[]): Promise<void> {
    if (this.#closed) return Promise.resolve();
    const played = queue.add(Array.isArray(clip) ? clip : bytePackets(clip, this.#silence));
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
    const payload = this.#tones.take() ?? this.#sounds.take() ?? live ??
      (this.#idleSilence ? this.#silencePacket() : undefined);
    if (payload === undefined || this.muted) {
      this.#talking = false;
      return;
    }
    this.#send(payload, (this.timestampBase + slot * this.#slotClock) >>> 0, !this.#talking);
    this.#talking = true;
  }

  /**
   * One slot of silence: G.711 or G.722 silence, or Opus's silent frame (sending nothing would
   * stall a far end's jitter buffer and symmetric RTP as much as with G.711).
   */
  #silencePacket(): Uint8Array {
    if (this.#codec === "OPUS") return opusSilencePacket;
    // One packet per silence byte, shared: sending copies it into the RTP packet, and an idle
    // call sends one every 20 ms for its whole life.
    const silence = this.#silence;
    let packet = silencePackets.get(silence);
    if (!packet) silencePackets.set(silence, packet = new Uint8Array(packetSamples).fill(silence));
    return packet;
  }

  /** One packet of live audio, once enough is buffered to play smoothly. */
  #takeLive(): Uint8Array | undefined {
    if (!this.#livePlaying) {
      if (this.#live.length < livePrebufferPackets) return undefined;
      this.#livePlaying = true;
    }
    const packet = this.#live.shift();
    if (!packet) this.#livePlaying = false;
    return packet;
  }
}
