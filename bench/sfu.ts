/**
 * SFU rooms: rooms of N werift participants speaking the SFU SDK's protocol (appKey sfuApp),
 * each publishing a 3-layer simulcast H.264 video (rids h/m/l, 25 fps, one single-NAL packet
 * a frame of 900/500/250 bytes, an IDR every second and on PLI) and Opus-shaped audio (50
 * packets/s), and subscribing to every other participant. The server runs in its own process
 * (main.ts, as `deno task start` runs it), so its CPU and memory are its own.
 *
 * Reports per room size: server CPU and RSS per subscriber-track (added over the idle server,
 * divided by the subscriber-tracks: N x (N - 1) video plus as many audio), the latency added
 * between a publisher's send and a subscriber's receipt (send time stamped in the payload,
 * both ends in this process; it includes werift's own SRTP work on both ends) p50/p99, and
 * the layer switch time (changeQuality sent → first packet of the new layer at the subscriber).
 *
 * Anchor, in the same run and on the same engine: plain WebRTC fan-out (Web SDK protocol),
 * one publisher of the same shape as one SFU participant at layer h (25 video + 50 audio
 * packets/s) played by as many werift players as the room has subscribed participants, so
 * one plain player receives what one subscriber gets of one remote participant (its video
 * and audio track). The last lines compare CPU per subscriber-track.
 *
 * `SFU_BENCH_ROOMS` sets the room sizes (default "4,8"; `SFU_BENCH_ROOMS=16`: 240
 * subscriptions, 18,000 packets/s to the participants of this one process on a 2-core
 * machine). From `countOnlyFrom` participants on (and for as many plain players), every
 * participant but p0 counts the media datagrams it receives by SSRC without decrypting them:
 * werift's SRTP in this process could not keep up with 16 (65% of the packets were not read
 * in time, and the NACKs and PLIs for them added to the server's work), and the server's work
 * does not depend on it. On a busy machine this one process may still fall behind even
 * counting (52% read in time at load 1.6-3.6, and the server then had less to send): a run
 * with more than a few % loss measures the bench, not the server. p0 decrypts and measures
 * latency and switches. A layer switch not seen within `switchTimeoutMs` is printed as `>5000`, the
 * room's CPU, memory and latency (measured before the switches) still count.
 */
import { Buffer } from "node:buffer";
import {
  MediaStreamTrack,
  PictureLossIndication,
  type RTCPeerConnection,
  RtcpPayloadSpecificFeedback,
  type RTCRtpTransceiver,
  RtpHeader,
  RtpPacket,
  useSdesRTPStreamId,
} from "werift";
import { ServerProcess } from "../tests/helpers/server_process.ts";
import { SfuClient, type SfuEvent } from "../tests/helpers/sfu_client.ts";
import { WcsClient } from "../tests/helpers/wcs_client.ts";
import { nextStatus, TestPlayer, TestPublisher, waitFor } from "../tests/webrtc_helpers.ts";
import { cpuTicks, rssMiB } from "./support/process_tree.ts";

const roomSizes = (Deno.env.get("SFU_BENCH_ROOMS") ?? "4,8").split(",").map(Number);
/** Room size from which participants but p0 (and plain players) count without decrypting. */
const countOnlyFrom = 16;

/** The werift ICE connection events a datagram goes through. */
interface DatagramEvent {
  execute(data: Uint8Array): void;
}

/**
 * Makes `pc` count its incoming SRTP media by SSRC and drop it before werift decrypts it
 * (RTCP and DTLS pass on): `onMedia` is called per datagram.
 */
function countWithoutDecrypt(pc: RTCPeerConnection, onMedia: (ssrc: number) => void): void {
  for (const transport of pc.dtlsTransports) {
    const onData = transport.iceTransport.connection.onData as unknown as DatagramEvent;
    const execute = onData.execute.bind(onData);
    onData.execute = (data: Uint8Array) => {
      // RFC 7983: RTP/RTCP start with 128-191; RTCP packet types are 192-223.
      const rtp = data[0] >= 128 && data[0] <= 191 && !(data[1] >= 192 && data[1] <= 223);
      if (!rtp || data.length < 12) return execute(data);
      onMedia(((data[8] << 24) | (data[9] << 16) | (data[10] << 8) | data[11]) >>> 0);
    };
  }
}
/** Length of each measurement window, in milliseconds. */
const measureMs = 6_000;
/** Time given to the media to settle before measuring, in milliseconds. */
const warmupMs = 3_000;
/** Time an idle server is watched, in milliseconds. */
const idleMs = 3_000;
/** Longest wait for a room or a fan-out to be set up, in milliseconds. */
const setupTimeoutMs = 60_000;
/** Longest wait for a layer switch, in milliseconds. */
const switchTimeoutMs = 5_000;
/** Layer switches measured per direction and room. */
const switchesPerRoom = 3;
const clockTicksPerSecond = 100;
/** Audio packet interval, in ms; a video frame goes with every second one (25 fps). */
const audioPacketMs = 20;
/** Frames between two IDRs of a layer (a 1 s GOP, as the browser's encoder about has). */
const gopFrames = 25;
/** Simulcast layers: rid and single-NAL slice size in bytes. Index = layer byte of the stamp. */
const layers = [{ rid: "h", bytes: 900 }, { rid: "m", bytes: 500 }, { rid: "l", bytes: 250 }];
/** Where the stamp (float64 send time, then the layer index) starts in a video slice. */
const videoStampAt = 4;
/** Where the float64 send time starts in an audio packet. */
const audioStampAt = 1;
const audioBytes = 80;
/** STAP-A with the SPS and PPS of 640x480, sent before each IDR. */
const spsPps = Buffer.from("1800096742c01eda0280f6400004" + "68ce3c80", "hex");

/** CPU time (s) and RSS (MiB) of the server process. */
function usage(pid: number): { cpuSeconds: number; rssMiB: number } {
  return { cpuSeconds: (cpuTicks(pid) ?? 0) / clockTicksPerSecond, rssMiB: rssMiB(pid) };
}

/** Server cores used over `ms`, and its RSS at the end. */
async function watch(pid: number, ms: number): Promise<{ cores: number; rssMiB: number }> {
  const before = usage(pid);
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, ms));
  const after = usage(pid);
  return {
    cores: (after.cpuSeconds - before.cpuSeconds) / ((performance.now() - t0) / 1000),
    rssMiB: after.rssMiB,
  };
}

function percentile(sorted: number[], q: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : NaN;
}

/** A fresh server process for one scenario (its idle CPU and RSS are the baseline). */
async function startServer(name: string, dir: string): Promise<ServerProcess> {
  const server = new ServerProcess(name, dir, { log: { level: "warn" } });
  await server.start();
  return server;
}

/**
 * One participant: its SFU client, its stamped simulcast video and audio, and what it
 * received (latency samples, and the layer of each incoming video mid with the time it began).
 */
class Participant {
  readonly latencyMs: number[] = [];
  /** Latency samples are kept only while recording. */
  recording = false;
  /** Layer index last received on each video mid, and when its first packet came. */
  readonly layerOf = new Map<string, { layer: number; sinceMs: number }>();
  received = 0;
  /** SSRCs of the media received (counted without decrypting). */
  readonly ssrcs = new Set<number>();
  #timer?: ReturnType<typeof setInterval>;
  #forceKey = new Set<number>();

  private constructor(
    readonly client: SfuClient,
    readonly video: RTCRtpTransceiver,
    readonly audio: MediaStreamTrack,
  ) {
    client.pc.onTrack.subscribe((track) => {
      const mid = client.pc.getTransceivers().find((t) => t.receiver.tracks.includes(track))
        ?.mid ?? "?";
      track.onReceiveRtp.subscribe((p) => this.#receive(mid, track.kind, p.payload));
    });
  }

  /** `countOnly`: counts its media by SSRC without decrypting it (countWithoutDecrypt). */
  static async join(
    url: string,
    nickname: string,
    room: string,
    countOnly = false,
  ): Promise<Participant> {
    const client = await SfuClient.connect(url, nickname, room, { simulcast: true });
    const video = client.pc.addTransceiver("video", {
      direction: "sendonly",
      sendEncodings: layers.map(({ rid }) => ({ rid })),
    });
    const audio = new MediaStreamTrack({ kind: "audio" });
    client.pc.addTransceiver(audio, { direction: "sendonly" });
    const participant = new Participant(client, video, audio);
    await client.join(room, "1");
    if (countOnly) {
      countWithoutDecrypt(client.pc, (ssrc) => {
        participant.received++;
        participant.ssrcs.add(ssrc);
      });
    }
    await client.until(() => client.pc.connectionState === "connected", `${nickname} connected`);
    return participant;
  }

  #receive(mid: string, kind: string, payload: Buffer): void {
    const now = performance.now();
    this.received++;
    if (kind === "audio") {
      if (this.recording) this.latencyMs.push(now - payload.readDoubleBE(audioStampAt));
      return;
    }
    const type = payload[0] & 0x1f;
    if (type !== 1 && type !== 5) return; // the STAP-A before an IDR carries no stamp
    if (this.recording) this.latencyMs.push(now - payload.readDoubleBE(videoStampAt));
    const layer = payload[videoStampAt + 8];
    if (this.layerOf.get(mid)?.layer !== layer) this.layerOf.set(mid, { layer, sinceMs: now });
  }

  /** Sends every layer and the audio, paced by the clock (late timer runs catch up). */
  start(): void {
    const ridId = this.video.headerExtensions.find((e) => e.uri === useSdesRTPStreamId().uri)!.id;
    const payloadType = this.video.codecs[0].payloadType;
    const base = Math.floor(Math.random() * 0x7fff0000);
    const headers = layers.map(({ rid }, i) =>
      new RtpHeader({
        ssrc: base + i,
        payloadType,
        sequenceNumber: 100 * i,
        extension: true,
        extensions: [{ id: ridId, payload: Buffer.from(rid) }],
      })
    );
    // A PLI names the layer by its SSRC; its next frame is an IDR.
    this.video.sender.dtlsTransport.onRtcp.subscribe((rtcp) => {
      if (
        rtcp instanceof RtcpPayloadSpecificFeedback &&
        rtcp.feedback instanceof PictureLossIndication
      ) this.#forceKey.add(rtcp.feedback.mediaSsrc - base);
    });
    const transport = this.video.sender.dtlsTransport;
    const slices = layers.map(({ bytes }) => Buffer.alloc(bytes, 0x11));
    const audioPayload = Buffer.alloc(audioBytes, 0xf8);
    let audioSeq = 0;
    let tick = 0;
    const startMs = performance.now();
    this.#timer = setInterval(() => {
      while (tick <= (performance.now() - startMs) / audioPacketMs) {
        const now = performance.now();
        audioPayload.writeDoubleBE(now, audioStampAt);
        this.audio.writeRtp(
          new RtpPacket(
            new RtpHeader({
              payloadType: 111,
              sequenceNumber: audioSeq = (audioSeq + 1) & 0xffff,
              timestamp: (tick * 960) >>> 0,
              marker: true,
            }),
            audioPayload,
          ),
        );
        if (tick % 2 === 0) {
          const frame = tick / 2;
          layers.forEach((_, i) => {
            const h = headers[i];
            h.timestamp = (frame * 3600) >>> 0;
            const key = frame % gopFrames === 0 || this.#forceKey.delete(i);
            const send = (payload: Buffer, marker: boolean) => {
              h.marker = marker;
              transport.sendRtp(payload, h).catch(() => {});
              h.sequenceNumber = (h.sequenceNumber + 1) & 0xffff;
            };
            if (key) send(spsPps, false);
            // nal_unit_type 5 (IDR) or 1 (P: first_mb 0, slice_type 5), then the stamp.
            const slice = slices[i];
            slice[0] = key ? 0x65 : 0x41;
            slice[1] = key ? 0x88 : 0x9a;
            slice.writeDoubleBE(now, videoStampAt);
            slice[videoStampAt + 8] = i;
            send(slice, true);
          });
        }
        tick++;
      }
    }, 10);
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.client.close();
  }
}

/** Video tracks of others announced to `client` (ADD_TRACKS): id, mid and owner. */
function videoTracks(client: SfuClient): { id: string; mid: string; nickName: string }[] {
  return client.events.filter((e: SfuEvent) => e.type === "ADD_TRACKS").flatMap((e) => {
    const info = e.info as { nickName: string; info: { id: string; mid: string; type: string }[] };
    return info.info.filter((t) => t.type === "VIDEO").map((t) => ({
      ...t,
      nickName: info.nickName,
    }));
  });
}

interface RoomResult {
  n: number;
  subscriberTracks: number;
  cpuPerTrackMs: number;
  rssPerTrackKiB: number;
  cores: number;
  loss: number;
  p50: number;
  p99: number;
  down: number[];
  up: number[];
}

/** A room of `n` participants on a fresh server. */
async function measureRoom(n: number, dir: string): Promise<RoomResult> {
  const server = await startServer(`sfu-${n}`, dir);
  const participants: Participant[] = [];
  try {
    const idle = await watch(server.pid, idleMs);
    for (let i = 0; i < n; i++) {
      const countOnly = n >= countOnlyFrom && i > 0;
      participants.push(await Participant.join(server.wsUrl, `p${i}`, `bench${n}`, countOnly));
    }
    // Media starts once all have joined: werift's DTLS handshakes in this process fail now
    // and then under full media load.
    participants.forEach((p) => p.start());
    // Every participant receives every other's video and audio.
    await waitFor(
      () =>
        participants.every((p) =>
          videoTracks(p.client).length === n - 1 &&
          ([...p.layerOf.values()].filter((l) => l.layer === 0).length === n - 1 ||
            p.ssrcs.size === 2 * (n - 1))
        ),
      setupTimeoutMs,
      `every participant of ${n} receiving ${n - 1} videos at layer h`,
    ).catch((error) => {
      const state = participants.map((p) =>
        `${p.client.nickname}: ${videoTracks(p.client).length} announced, layers ${
          JSON.stringify([...p.layerOf].map(([mid, l]) => [mid, l.layer]))
        }, ${p.received} packets`
      );
      throw new Error(`${error.message}\n${state.join("\n")}`);
    });
    await new Promise((r) => setTimeout(r, warmupMs));
    const receivedBefore = participants.reduce((s, p) => s + p.received, 0);
    participants.forEach((p) => p.recording = true);
    const busy = await watch(server.pid, measureMs);
    participants.forEach((p) => p.recording = false);
    const received = participants.reduce((s, p) => s + p.received, 0) - receivedBefore;
    // Expected: per subscription 25 video + 50 audio packets/s, plus a STAP-A a second.
    const expected = n * (n - 1) * (75 + 1) * measureMs / 1000;
    const latencies = participants.flatMap((p) => p.latencyMs).sort((a, b) => a - b);
    const subscriberTracks = 2 * n * (n - 1);

    // Layer switches at p0: down to l, then back to h, each on another remote track.
    const sub = participants[0];
    const tracks = videoTracks(sub.client);
    const down: number[] = [];
    const up: number[] = [];
    for (let i = 0; i < Math.min(switchesPerRoom, tracks.length); i++) {
      for (const [quality, layer, out] of [["l", 2, down], ["h", 0, up]] as const) {
        const track = tracks[i];
        const sentMs = performance.now();
        const id = sub.client.request("changeQuality", {
          roomId: `bench${n}`,
          id: track.id,
          quality,
        });
        await sub.client.result(id, "ACK");
        // A switch that does not come in time is reported as such; the room's figures stand.
        const reached = await sub.client.until(
          () => sub.layerOf.get(track.mid)?.layer === layer,
          `layer ${quality} on ${track.mid}`,
          switchTimeoutMs,
        ).then(() => true, () => false);
        out.push(reached ? sub.layerOf.get(track.mid)!.sinceMs - sentMs : NaN);
        // The next switch up finds this layer's subscription warm, as a viewer's would be.
        await new Promise((r) => setTimeout(r, 1500));
      }
    }
    return {
      n,
      subscriberTracks,
      cores: busy.cores,
      cpuPerTrackMs: (busy.cores - idle.cores) / subscriberTracks * 1000,
      rssPerTrackKiB: (busy.rssMiB - idle.rssMiB) * 1024 / subscriberTracks,
      loss: Math.max(0, 1 - received / expected),
      p50: percentile(latencies, 0.5),
      p99: percentile(latencies, 0.99),
      down,
      up,
    };
  } finally {
    await Promise.allSettled(participants.map((p) => p.close()));
    await server.stop();
  }
}

interface PlainResult {
  players: number;
  cores: number;
  cpuPerTrackMs: number;
  rssPerTrackKiB: number;
  loss: number;
}

/** One Web SDK publisher of one participant's shape and `players` players, on a fresh server. */
async function measurePlain(players: number, dir: string): Promise<PlainResult> {
  const server = await startServer(`plain-${players}`, dir);
  const clients: WcsClient[] = [];
  const publisher = new TestPublisher("H264");
  const peers: TestPlayer[] = [];
  const join = async (peer: TestPublisher | TestPlayer, expected: string) => {
    const { client } = await WcsClient.connect(server.wsUrl);
    clients.push(client);
    const id = crypto.randomUUID();
    if (peer instanceof TestPublisher) {
      await peer.publish(client, { mediaSessionId: id, name: "bench" });
      peer.start();
    } else await peer.play(client, { mediaSessionId: id, name: "bench" });
    const status = await nextStatus(client, id, 20_000);
    if (status.status !== expected) throw new Error(`${expected}: ${JSON.stringify(status)}`);
  };
  try {
    const idle = await watch(server.pid, idleMs);
    await join(publisher, "PUBLISHING");
    // werift's DTLS handshakes in this process fail now and then under full media load.
    publisher.pause();
    let counted = 0;
    for (let i = 0; i < players; i++) {
      const player = new TestPlayer("H264");
      peers.push(player);
      await join(player, "PLAYING");
      // As in the room of the same size: all but the first count without decrypting.
      if (players >= countOnlyFrom * (countOnlyFrom - 1) && i > 0) {
        countWithoutDecrypt(player.pc, () => counted++);
      }
    }
    publisher.start();
    await new Promise((r) => setTimeout(r, warmupMs));
    const count = () =>
      counted + peers.reduce((s, p) => s + p.received.video + p.received.audio, 0);
    const sentBefore = publisher.sent;
    const receivedBefore = count();
    const busy = await watch(server.pid, measureMs);
    const sent = publisher.sent - sentBefore;
    const received = count() - receivedBefore;
    // A plain player gets one video and one audio track: two subscriber-tracks.
    const subscriberTracks = 2 * players;
    return {
      players,
      cores: busy.cores,
      cpuPerTrackMs: (busy.cores - idle.cores) / subscriberTracks * 1000,
      rssPerTrackKiB: (busy.rssMiB - idle.rssMiB) * 1024 / subscriberTracks,
      loss: Math.max(0, 1 - received / (sent * players)),
    };
  } finally {
    await Promise.allSettled(peers.map((p) => p.close()));
    await publisher.close();
    await Promise.allSettled(clients.map((c) => c.close()));
    await server.stop();
  }
}

/**
 * werift's SCTP in this process now and then flushes a data channel before it knows its
 * stream id parity (seen with 16 participants joining): the `control` channel of that
 * participant is lost, its media not, and the SFU's costs do not depend on it. Counted.
 */
let lostControlChannels = 0;
globalThis.addEventListener("unhandledrejection", (event) => {
  const stack = String((event.reason as Error)?.stack ?? "");
  if (!stack.includes("dataChannelFlush")) return;
  event.preventDefault();
  lostControlChannels++;
});

const fmt = (x: number, digits = 2) => x.toFixed(digits);
/** A switch time, or how long it was waited for in vain. */
const switchMs = (x: number) => Number.isNaN(x) ? `>${switchTimeoutMs}` : x.toFixed(0);

async function run(): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "bench-sfu-" });
  console.log(
    "participants  sub-tracks  server-cores  loss    cpu/sub-track(ms/s)  rss/sub-track(KiB)  " +
      "latency p50/p99 (ms)  switch to l / back to h (ms)",
  );
  const rooms: RoomResult[] = [];
  for (const n of roomSizes) {
    const r = await measureRoom(n, dir);
    rooms.push(r);
    console.log(
      `${String(n).padStart(12)}  ${String(r.subscriberTracks).padStart(10)}  ${
        fmt(r.cores).padStart(12)
      }  ${fmt(r.loss * 100).padStart(5)}%  ${fmt(r.cpuPerTrackMs, 3).padStart(19)}  ${
        fmt(r.rssPerTrackKiB, 0).padStart(18)
      }  ${fmt(r.p50, 1)} / ${fmt(r.p99, 1)}`.padEnd(124) +
        `${r.down.map(switchMs).join(",")} / ${r.up.map(switchMs).join(",")}`,
    );
  }
  console.log(
    "\nplain WebRTC fan-out (Web SDK publisher → N players, same packets as one participant):",
  );
  console.log("players  sub-tracks  server-cores  loss    cpu/sub-track(ms/s)  rss/sub-track(KiB)");
  for (const r of rooms) {
    const p = await measurePlain(r.n * (r.n - 1), dir);
    console.log(
      `${String(p.players).padStart(7)}  ${String(2 * p.players).padStart(10)}  ${
        fmt(p.cores).padStart(12)
      }  ${fmt(p.loss * 100).padStart(5)}%  ${fmt(p.cpuPerTrackMs, 3).padStart(19)}  ${
        fmt(p.rssPerTrackKiB, 0).padStart(18)
      }`,
    );
    console.log(
      `  room of ${r.n}: SFU/plain CPU per subscriber-track ${
        fmt(r.cpuPerTrackMs / Math.max(p.cpuPerTrackMs, 1e-6))
      } (goal ≤ 1.2), RSS ${fmt(r.rssPerTrackKiB / Math.max(p.rssPerTrackKiB, 1e-6))}`,
    );
  }
  if (lostControlChannels) {
    console.log(`werift lost ${lostControlChannels} control data channels in this process`);
  }
  await Deno.remove(dir, { recursive: true }).catch(() => {});
  // werift keeps timers (ICE consent, DTLS) a while after close; nothing is left to wait for.
  Deno.exit(0);
}

await run();
