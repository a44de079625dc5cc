/**
 * A werift peer standing for a Web SDK browser in a SIP call, for latency benchmarks: its
 * microphone plays Opus frames of a pattern (tone bursts in silence) in real time, and the
 * start of each burst it sends and of each burst it hears back are timed. A burst starts at
 * the first packet with a payload of `loudBytes` or more after `quietPackets` smaller ones
 * (Opus spends a few bytes on silence and far more on a tone).
 */
import { Buffer } from "node:buffer";
import {
  MediaStreamTrack,
  RTCPeerConnection,
  RTCRtpCodecParameters,
  RtpHeader,
  RtpPacket,
} from "werift";
import { TsDemuxer } from "../../media/formats/mpegts/demuxer.ts";

/** Opus payloads at least this large are sound, smaller ones silence, in bytes. */
const loudBytes = 40;
/** Silent packets that must come before a loud one for it to start a burst. */
const quietPackets = 5;
/** Duration of one Opus frame, in milliseconds. */
const frameMs = 20;

/**
 * `seconds` of 20 ms Opus frames (ffmpeg's libopus, 64 kbit/s, 48 kHz stereo): a 440 Hz tone
 * for the first `burstMs` of every second, silence in between.
 */
export async function opusBursts(seconds: number, burstMs: number): Promise<Uint8Array[]> {
  const gate = `volume='if(lt(mod(t,1),${burstMs / 1000}),1,0)':eval=frame`;
  const out = await new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-f", "lavfi", "-i", `sine=frequency=440:sample_rate=48000:d=${seconds}`],
      ...["-af", gate, "-ac", "2", "-c:a", "libopus", "-b:a", "64k", "-frame_duration", "20"],
      ...["-f", "mpegts", "-"],
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) throw new Error(`ffmpeg: ${new TextDecoder().decode(out.stderr)}`);
  return new TsDemuxer().push(out.stdout).filter((f) => f.codec === "OPUS").map((f) => f.data);
}

/** Times, from `performance.now()`, at which bursts start in `sizes` (payload sizes in order). */
class BurstClock {
  readonly starts: number[] = [];
  #quiet = 0;

  push(size: number, atMs: number): void {
    if (size < loudBytes) {
      this.#quiet++;
      return;
    }
    if (this.#quiet >= quietPackets) this.starts.push(atMs);
    this.#quiet = 0;
  }
}

/** The peer: one sendrecv Opus transceiver, ICE on 127.0.0.1 only. */
export class BurstPhone {
  readonly pc = new RTCPeerConnection({
    iceServers: [],
    iceUseIpv4: false,
    iceUseIpv6: false,
    iceAdditionalHostAddresses: ["127.0.0.1"],
    iceInterfaceAddresses: { udp4: "127.0.0.1" },
    codecs: {
      audio: [new RTCRtpCodecParameters({ mimeType: "audio/opus", clockRate: 48000, channels: 2 })],
    },
  });
  readonly #mic = new MediaStreamTrack({ kind: "audio" });
  readonly #sent = new BurstClock();
  readonly #heard = new BurstClock();
  #timer?: ReturnType<typeof setInterval>;

  constructor() {
    this.pc.onTrack.subscribe((track) => {
      track.onReceiveRtp.subscribe((rtp) =>
        this.#heard.push(rtp.payload.length, performance.now())
      );
    });
  }

  /** The offer of an outgoing call. */
  async offer(): Promise<string> {
    this.pc.addTransceiver(this.#mic, { direction: "sendrecv" });
    await this.pc.setLocalDescription(await this.pc.createOffer());
    return this.pc.localDescription!.sdp;
  }

  /** Plays `frames` as the microphone, one every 20 ms on the wall clock, looping. */
  speak(frames: Uint8Array[]): void {
    const startMs = performance.now();
    let sent = 0;
    this.#timer = setInterval(() => {
      // Catch up on the wall clock: a late timer sends what is due, not a slower stream.
      while (sent * frameMs <= performance.now() - startMs) {
        const payload = frames[sent % frames.length];
        const header = new RtpHeader({
          sequenceNumber: (sent + 1) & 0xffff,
          timestamp: (sent * 960) >>> 0,
          payloadType: 111,
        });
        this.#mic.writeRtp(new RtpPacket(header, Buffer.from(payload)));
        this.#sent.push(payload.length, performance.now());
        sent++;
      }
    }, frameMs / 2);
  }

  /**
   * Delay from each burst sent to the first burst heard after it (and before the next one
   * sent), in milliseconds, for the bursts sent from `fromMs` on.
   */
  delays(fromMs: number): number[] {
    const out: number[] = [];
    const sent = this.#sent.starts;
    for (let i = 0; i < sent.length; i++) {
      if (sent[i] < fromMs) continue;
      const next = sent[i + 1] ?? Infinity;
      const heard = this.#heard.starts.find((t) => t >= sent[i] && t < next);
      if (heard !== undefined) out.push(heard - sent[i]);
    }
    return out;
  }

  /** Bursts sent since `fromMs`. */
  sentSince(fromMs: number): number {
    return this.#sent.starts.filter((t) => t >= fromMs).length;
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.pc.close();
  }
}
