/**
 * WebRTC fan-out: one synthetic 640x480-like stream (VP8-shaped RTP, 25 fps x 4 packets of
 * 1.1 kB plus 50 Opus packets/s: 150 packets/s, ~1 Mbit/s) from a werift publisher, played by
 * N werift subscribers on 127.0.0.1 through our signaling, once per sender of the server:
 * `fast` (media.sendEngine ffi: SRTP and sendmmsg in Workers, on the ICE mux's socket) and
 * `werift` (media.sendEngine werift). N grows until a step does not keep up (loses 1% or
 * more, or receives less than 95% of what was offered in the window: a growing queue, `short`),
 * a subscriber cannot connect, or the side's time budget is spent.
 *
 * Processes: the server runs alone in a child (this file with `--serve <sender>`), so its CPU
 * (every thread, Workers included) and RSS are its own. The subscribers run in
 * `WEBRTC_BENCH_RECEIVERS` children (default 2; this file with `--receivers <ws>`). Each of
 * our subscribers is a werift peer that does ICE, DTLS and RTCP with the server as any
 * player, on a UDP socket that `WEBRTC_BENCH_RECEIVER_WORKERS` Workers per child (default 1)
 * read with recvmmsg (bench/support/srtp_receivers.ts): once DTLS is done, werift's SRTP
 * keys for what it receives go to the socket's Worker, which authenticates and decrypts every
 * SRTP packet with libcrypto over FFI. Only packets that pass count as received; loss is
 * what never came or failed: sequence gaps (`seq-gaps`), failed tags (`auth-fail`) and every
 * packet of a subscriber that got nothing in the window (`silent`), over all packets. werift's
 * own JS SRTP would saturate the machine's cores long before the server. Janus's subscribers
 * stay plain werift peers (werift decrypts; loss there is the shortfall against what was
 * sent). The publisher
 * runs in this process and stamps each packet's payload with its send time (epoch ms, one
 * clock for every process of the machine); receivers take the difference at arrival:
 * latency publisher → server → subscriber over loopback, p50/p99.
 *
 * Reports per step: server cores, packets delivered per server core-second, loss, CPU and RSS
 * per subscriber (RSS as found, garbage included; for our server also after a full GC and a C
 * heap trim at the window's end, per subscriber and per subscriber added since the previous
 * step, `gc:rss/sub` and `gc:rss/added`), latency. The last line reads `subscribers/core: fast <N>, werift <M>`:
 * the largest N that kept up divided by the server cores it took.
 *
 * Janus 1.1 (Debian `janus`, C) is the peer in the same run: its streaming plugin gets the
 * publisher's packets as plain RTP on UDP and its subscribers (the same werift receivers) join
 * through its HTTP API; the run ends with Janus's CPU and memory per subscriber against the
 * fast path's at the largest N both kept under 1% loss (`CPU ours/janus`, `memory ours/janus`).
 * Janus's libnice never offers loopback candidates, so the whole run (every side) happens in
 * a private network namespace (`unshare -n`, needs root) holding only loopback and `bench0`,
 * an ifb interface with 10.254.0.1 that Janus and its subscribers use: nothing can leave the
 * machine.
 *
 * The server child runs as deno.json's start task runs it (`--max-semi-space-size=2`,
 * `MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072`); `WEBRTC_BENCH_SERVER_DEFAULTS=1` runs it
 * with V8's and glibc's defaults.
 *
 * `WEBRTC_BENCH_STEPS` sets the N of each step (default "100,250,500,1000,1500,2000,3000");
 * `WEBRTC_BENCH_ONLY` names the sides to run, comma-separated (`fast,werift` compares the two
 * send paths without Janus; without `janus` the run stays outside the namespace).
 */
import { Buffer } from "node:buffer";
import dgram from "node:dgram";
import {
  RTCPeerConnection,
  RTCRtpCodecParameters,
  RtpHeader,
  RtpPacket,
  type RtpPacket as ReceivedRtp,
} from "werift";
import { configSchema } from "../config.ts";
import { silentLogger } from "../core/log.ts";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { startServer } from "../server.ts";
import { trimMemory } from "../core/memory_trim.ts";
import { WcsClient } from "../tests/helpers/wcs_client.ts";
import { nextStatus, TestPlayer, TestPublisher } from "../tests/webrtc_helpers.ts";
import { lines } from "./support/lines.ts";
import type { ReceiverCounts } from "./support/srtp_receiver_messages.ts";
import { SrtpReceiverPool } from "./support/srtp_receivers.ts";

/** Length of each measurement window, in milliseconds. */
const measureMs = 5_000;
/** Time given to new subscribers to settle before measuring, in milliseconds. */
const warmupMs = 2_000;
/** Steps of one side stop being started after this much time, in milliseconds. */
const budgetMs = 600_000;
/** Loss at which the fan-out counts as saturated. */
const maxLoss = 0.01;
/**
 * Share of the offered packets (sent x N) that may still be on their way at a window's end
 * (queues and answer timing); a larger shortfall is a standing, growing queue: the step did
 * not keep up even when nothing was lost yet.
 */
const maxShortfall = 0.05;
const clockTicksPerSecond = 100;
const steps = (Deno.env.get("WEBRTC_BENCH_STEPS") ?? "100,250,500,1000,1500,2000,3000")
  .split(",").map(Number);
const receiverProcesses = Number(Deno.env.get("WEBRTC_BENCH_RECEIVERS") ?? 2);
/** Workers of each receiver child that read and verify its subscribers' SRTP. */
const receiverWorkers = Number(Deno.env.get("WEBRTC_BENCH_RECEIVER_WORKERS") ?? 1);
/** The sides to run ("fast", "werift", "janus", comma-separated), when set. */
const only = Deno.env.get("WEBRTC_BENCH_ONLY")?.split(",");
/** Whether side `name` runs. */
const runs = (name: string) => !only || only.includes(name);
/** Offset of the send-time stamp in each payload (after the VP8 descriptor and header). */
const stampOffset = 16;
/** Set in the run inside the bench's network namespace. */
const netnsEnv = "WEBRTC_BENCH_NETNS";
/** Janus's one ICE candidate: bench0's address inside the namespace. */
const janusAddress = "10.254.0.1";
/** Longest wait for a player's SRTP keys after PLAYING, in milliseconds. */
const keysTimeoutMs = 10_000;
/** Attempts to connect one subscriber before the step fails. */
const connectAttempts = 5;
/** The server's WebSocket connections per address (every subscriber is on 127.0.0.1). */
const connectionsPerAddress = 100_000;
/** Subscribers connected at once while a step grows. */
const connectBatch = 10;

type Sender = "fast" | "werift";

/** The time of day in ms with sub-ms precision, the same clock in every process. */
function nowEpochMs(): number {
  return performance.timeOrigin + performance.now();
}

/** Time for V8 to unmap the pages a full GC freed before RSS is read again, in ms. */
const gcSettleMs = 1_000;

/**
 * Period of the server child's event-loop probe, in ms: a timer that fires this often and
 * records how late it ran, i.e. how long a packet that arrived then waited for the server's
 * main thread (werift's RTCP and DTLS, the publisher's depacketizing, GC pauses, a busy core).
 */
const loopProbeMs = 5;

/** How late the server's loop ran a timer: p99 and max over a window, in ms. */
interface LoopLag {
  p99Ms: number;
  maxMs: number;
}

/** Child mode: the server with one sender, answering "stats" (and "gc") lines on stdin. */
async function serve(sender: Sender): Promise<void> {
  const config = configSchema.parse({
    ports: { rest: 0, ws: 0, wss: 0, hls: 0, rtmp: 0, rtsp: 0, srt: 0, sip: 0 },
    media: { iceMux: "on", sendEngine: sender === "fast" ? "ffi" : "werift" },
    // Every subscriber connects from 127.0.0.1.
    limits: { connectionsPerAddress: connectionsPerAddress },
  });
  const server = await startServer(config, silentLogger);
  const { sendPaths } = server.services;
  if ((sender === "fast") !== (sendPaths.engine !== undefined)) {
    throw new Error(`the ${sender} sender did not start`);
  }
  console.log(JSON.stringify({ ws: `ws://127.0.0.1:${server.wsPort}` }));
  // Lateness of each probe tick since the last "stats" line.
  let lags: number[] = [];
  let due = performance.now() + loopProbeMs;
  const probe = setInterval(() => {
    const now = performance.now();
    lags.push(Math.max(0, now - due));
    due = now + loopProbeMs;
  }, loopProbeMs);
  for await (const line of lines(Deno.stdin.readable)) {
    if (line === "gc") {
      // What the server still holds: V8 collects everything (the child runs with
      // --expose-gc; the server has no GC hook) and glibc gives back its free pages, as the
      // server's own trim does every 10 s (core/memory_trim.ts).
      (globalThis as { gc?: () => void }).gc?.();
      trimMemory();
      await new Promise((r) => setTimeout(r, gcSettleMs));
      console.log(JSON.stringify({ collected: true }));
      continue;
    }
    let dropped = 0;
    if (sendPaths.engine) {
      for (const s of (await sendPaths.engine.stats()).values()) dropped += s.dropped;
    }
    const sorted = lags.sort((a, b) => a - b);
    lags = [];
    const loopLag: LoopLag = { p99Ms: percentile(sorted, 0.99), maxMs: sorted.at(-1) ?? 0 };
    console.log(JSON.stringify({ peers: openPeerCount(), engineDropped: dropped, loopLag }));
  }
  clearInterval(probe);
  await server.stop();
}

/** What a receiver child answers to "stats" (counts are monotonic). */
interface ReceiverStats extends ReceiverCounts {
  players: number;
  /** Whether the counts come from verifying receivers that track sequence gaps. */
  verified: boolean;
}

/** A subscriber of a receiver child. */
interface Subscriber {
  /** Packets werift received (SRTP authenticated and decrypted); 0 on a pool socket. */
  received(): number;
  close(): Promise<void>;
}

/** Connects one subscriber; `onRtp` sees each packet it receives. */
type Connect = (onRtp: (rtp: ReceivedRtp) => void) => Promise<Subscriber>;

/**
 * A Web SDK player (werift) of stream "bench" of our server at `ws` on a socket of `pool`,
 * whose Worker verifies its media once it has the keys.
 */
function oursSubscriber(ws: string, pool: SrtpReceiverPool): Connect {
  return async () => {
    const player = new TestPlayer("VP8");
    const connected = await WcsClient.connect(ws).catch(async (err) => {
      await player.close();
      throw err;
    });
    const client = connected.client;
    const close = async () => {
      await player.close();
      await client.close();
    };
    try {
      const id = crypto.randomUUID();
      await player.play(client, { mediaSessionId: id, name: "bench" });
      const status = await nextStatus(client, id, 30_000).catch((e) => ({ status: String(e) }));
      if (status.status !== "PLAYING") throw new Error(`PLAYING got ${JSON.stringify(status)}`);
      const deadline = Date.now() + keysTimeoutMs;
      while (!pool.useKeys(player.pc)) {
        if (Date.now() > deadline) throw new Error("no SRTP keys on a pool socket after PLAYING");
        await new Promise((r) => setTimeout(r, 20));
      }
    } catch (err) {
      await close();
      throw err;
    }
    return { received: () => 0, close };
  };
}

/**
 * A werift viewer of Janus's streaming mountpoint `mount` through its HTTP API at `base`:
 * create a session, attach the plugin, "watch" (Janus offers), answer with "start".
 */
function janusSubscriber(base: string, mount: number): Connect {
  const post = async (path: string, body: Record<string, unknown>) => {
    const res = await fetch(`${base}${path}`, {
      method: "POST",
      body: JSON.stringify({ ...body, transaction: crypto.randomUUID() }),
    });
    const answer = await res.json();
    if (answer.janus === "error") throw new Error(JSON.stringify(answer.error));
    return answer;
  };
  return async (onRtp) => {
    const session = (await post("", { janus: "create" })).data.id;
    const handle =
      (await post(`/${session}`, { janus: "attach", plugin: "janus.plugin.streaming" }))
        .data.id;
    const pc = new RTCPeerConnection({
      iceServers: [],
      iceUseIpv4: false,
      iceUseIpv6: false,
      // Janus's libnice neither gathers nor reaches loopback: both ends use bench0.
      iceAdditionalHostAddresses: [janusAddress],
      iceInterfaceAddresses: { udp4: janusAddress },
      codecs: {
        video: [
          new RTCRtpCodecParameters({
            mimeType: "video/VP8",
            clockRate: 90000,
            rtcpFeedback: [{ type: "nack" }, { type: "nack", parameter: "pli" }],
          }),
        ],
        audio: [
          new RTCRtpCodecParameters({ mimeType: "audio/opus", clockRate: 48000, channels: 2 }),
        ],
      },
    });
    let received = 0;
    pc.onTrack.subscribe((track) =>
      track.onReceiveRtp.subscribe((rtp) => {
        received++;
        onRtp(rtp);
      })
    );
    const close = async () => {
      await pc.close();
      await post(`/${session}`, { janus: "destroy" }).catch(() => {});
    };
    try {
      await post(`/${session}/${handle}`, {
        janus: "message",
        body: { request: "watch", id: mount },
      });
      let offer: string | undefined;
      while (!offer) {
        const events = await (await fetch(`${base}/${session}?maxev=5`)).json();
        for (const event of Array.isArray(events) ? events : [events]) {
          if (event.jsep?.type === "offer") offer = event.jsep.sdp;
        }
      }
      await pc.setRemoteDescription({ type: "offer", sdp: offer });
      await pc.setLocalDescription(await pc.createAnswer());
      while (pc.iceGatheringState !== "complete") await new Promise((r) => setTimeout(r, 20));
      await post(`/${session}/${handle}`, {
        janus: "message",
        body: { request: "start" },
        jsep: { type: "answer", sdp: pc.localDescription!.sdp },
      });
      const deadline = Date.now() + 30_000;
      while (pc.connectionState !== "connected") {
        if (Date.now() > deadline) throw new Error(`Janus viewer: ${pc.connectionState}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    } catch (err) {
      await close();
      throw err;
    }
    return { received: () => received, close };
  };
}

/**
 * Child mode: subscribers. "add <k>" connects k more (answers {players, failures}); "stats"
 * answers ReceiverStats, with the counts of `pool` when there is one.
 */
async function receivers(connect: Connect, pool?: SrtpReceiverPool): Promise<void> {
  const players: Subscriber[] = [];
  let latencies: number[] = [];
  /** Players that failed to connect (each is tried again). */
  let failures = 0;
  const addOne = async (): Promise<void> => {
    for (let attempt = 1;; attempt++) {
      try {
        return await connectOne();
      } catch (err) {
        failures++;
        if (attempt >= connectAttempts) throw err;
      }
    }
  };
  const sample = (rtp: ReceivedRtp) => {
    // One sample in 8 is enough for percentiles and keeps the receivers light.
    if ((rtp.header.sequenceNumber & 7) !== 0 || rtp.payload.length < stampOffset + 8) return;
    latencies.push(nowEpochMs() - rtp.payload.readDoubleLE(stampOffset));
  };
  const connectOne = async () => {
    players.push(await connect(sample));
  };
  for await (const line of lines(Deno.stdin.readable)) {
    if (line.startsWith("add ")) {
      let left = Number(line.slice(4));
      let error: string | undefined;
      while (left > 0 && !error) {
        const batch = Math.min(left, connectBatch);
        const settled = await Promise.allSettled(Array.from({ length: batch }, addOne));
        const failed = settled.find((r) => r.status === "rejected");
        if (failed) error = String((failed as PromiseRejectedResult).reason);
        left -= batch;
      }
      console.log(JSON.stringify({ players: players.length, failures, error }));
    } else {
      const counts = pool ? await pool.counts() : undefined;
      const stats: ReceiverStats = {
        players: players.length,
        verified: pool !== undefined,
        received: players.reduce((n, p) => n + p.received(), counts?.received ?? 0),
        failed: counts?.failed ?? 0,
        gaps: counts?.gaps ?? 0,
        waiting: counts?.waiting ?? 0,
        silent: counts?.silent ?? 0,
        latencies: latencies.concat(counts?.latencies ?? []),
      };
      latencies = [];
      console.log(JSON.stringify(stats));
    }
  }
  for (const player of players) await player.close();
  await pool?.close();
  Deno.exit(0);
}

interface Usage {
  cpuSeconds: number;
  rssKb: number;
}

/** CPU (all threads) and RSS of a process. */
function usage(pid: number): Usage {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  return {
    cpuSeconds: ticks / clockTicksPerSecond,
    rssKb: Number(status.match(/VmRSS:\s+(\d+)/)?.[1] ?? 0),
  };
}

/**
 * How the server runs as deployed (deno.json's start task, the Dockerfile): V8's young
 * generation held at 2 MiB semi-spaces and malloc at 2 arenas with a fixed 128 KiB mapping
 * threshold. `WEBRTC_BENCH_SERVER_DEFAULTS=1` runs it with V8's and glibc's defaults instead.
 */
const deployedV8Flags = ["--max-semi-space-size=2"];
const deployedEnv = { MALLOC_ARENA_MAX: "2", MALLOC_MMAP_THRESHOLD_: "131072" };
const serverDefaults = Deno.env.get("WEBRTC_BENCH_SERVER_DEFAULTS") === "1";

/** A child of this file: its pid and a line channel over stdin/stdout. */
function startChild(args: string[]) {
  // The server child can be asked for a full GC (see `serve`).
  const server = args[0] === "--serve";
  const v8Flags = ["--expose-gc", ...(serverDefaults ? [] : deployedV8Flags)];
  const flags = server ? [`--v8-flags=${v8Flags.join(",")}`] : [];
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ...flags, new URL(import.meta.url).pathname, ...args],
    ...(server && !serverDefaults ? { env: deployedEnv } : {}),
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = lines(child.stdout);
  const writer = child.stdin.getWriter();
  return {
    child,
    async ask<T>(line: string): Promise<T> {
      await writer.write(new TextEncoder().encode(`${line}\n`));
      return JSON.parse((await reader.next()).value ?? "null") as T;
    },
    async read<T>(): Promise<T> {
      return JSON.parse((await reader.next()).value ?? "null") as T;
    },
    async stop() {
      await writer.close();
      await child.status;
      await reader.return(undefined);
    },
  };
}

/** Where the bench's publisher writes a packet (index 0 video, 1 audio). */
type PacketSink = (index: number, packet: RtpPacket) => void;

/** The bench's publisher: paced, stamped packets written to a sink (a werift peer's tracks). */
class StampedPublisher {
  sent = 0;
  readonly #sink: PacketSink;
  #timer?: ReturnType<typeof setInterval>;
  #seq = [1000, 5000];
  #ts = [90000, 48000];
  #frame = 0;

  constructor(sink: PacketSink) {
    this.#sink = sink;
  }

  /** Starts 25 fps x 4 video packets (keyframe every 50 frames) and 50 audio packets/s. */
  start(): void {
    let tick = 0;
    const startMs = performance.now();
    this.#timer = setInterval(() => {
      while (tick <= (performance.now() - startMs) / 20) {
        if (tick++ % 2 === 0) this.#videoFrame();
        this.#send(1, Buffer.alloc(80, 0xf8), true);
        this.#ts[1] += 960;
      }
    }, 20);
  }

  pause(): void {
    clearInterval(this.#timer);
  }

  #videoFrame(): void {
    const key = this.#frame++ % 50 === 0;
    for (let i = 0; i < 4; i++) {
      const p = Buffer.alloc(1100, 0x22);
      p[0] = i === 0 ? 0x10 : 0x00; // S bit on the first packet only
      if (i === 0) {
        p[1] = key ? 0x00 : 0x01;
        p.set([0x9d, 0x01, 0x2a], 4);
        p.writeUInt16LE(640, 7);
        p.writeUInt16LE(480, 9);
      }
      this.#send(0, p, i === 3);
    }
    this.#ts[0] += 3600;
  }

  #send(index: number, payload: Buffer, marker: boolean): void {
    payload.writeDoubleLE(nowEpochMs(), stampOffset);
    const header = new RtpHeader({
      sequenceNumber: this.#seq[index],
      timestamp: this.#ts[index],
      marker,
      payloadType: index === 0 ? 96 : 111,
    });
    this.#seq[index] = (this.#seq[index] + 1) & 0xffff;
    this.sent++;
    this.#sink(index, new RtpPacket(header, payload));
  }
}

interface StepResult {
  n: number;
  /** Packets per second the publisher sent during the window. */
  inRate: number;
  cores: number;
  rssKb: number;
  /** RSS after a full garbage collection and a C heap trim (ours only), in KB. */
  rssAfterGcKb?: number;
  loss: number;
  /** Share of the offered packets (sent x N) not received within the window. */
  shortfall: number;
  /** Packets the subscribers received per second of the server's CPU. */
  deliveredPerCore: number;
  p50: number;
  p99: number;
  engineDropped: number;
  /** The server's event-loop lag over the window (ours only). */
  loopLag?: LoopLag;
  /** SRTP packets that failed authentication at the receivers. */
  authFailed: number;
  /** Sequence numbers the receivers never got. */
  seqGaps: number;
  /** Subscribers that received nothing during the window (each loses every packet). */
  silent: number;
  /** Server CPU (ms per s) and RSS (KB) per subscriber above the publisher-only idle. */
  cpuPerSubMs?: number;
  rssPerSubKb?: number;
  /** The same after a full GC and trim, at this step and since the previous one (KB). */
  rssPerSubAfterGcKb?: number;
  rssPerAddedSubAfterGcKb?: number;
}

function percentile(sorted: number[], p: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] : 0;
}

/** A fan-out under test: its process, how receivers reach it, and its publisher. */
interface Target {
  label: string;
  /** The process whose CPU and RSS are measured. */
  pid: number;
  /** Arguments of a receiver child (after `--receivers`). */
  receiverArgs: string[];
  publisher: StampedPublisher;
  /** Packets the send engine dropped so far (0 elsewhere). */
  engineDropped(): Promise<number>;
  /** The server's event-loop lag between the last two engineDropped calls (ours only). */
  loopLag?(): LoopLag | undefined;
  /** Has the process collect its garbage and trim its C heap (ours only). */
  collectGarbage?(): Promise<void>;
  /** Stops the publisher and the fan-out, once the receivers have left. */
  close(): Promise<void>;
}

/** Our server in a child with `sender`, published to by a werift Web SDK publisher. */
async function oursTarget(sender: Sender): Promise<Target> {
  const server = startChild(["--serve", sender]);
  const { ws } = await server.read<{ ws: string }>();
  const peer = new TestPublisher("VP8");
  const publisher = new StampedPublisher((index, packet) =>
    (index === 0 ? peer.video : peer.audio).writeRtp(packet)
  );
  const { client } = await WcsClient.connect(ws);
  const id = crypto.randomUUID();
  await peer.publish(client, { mediaSessionId: id, name: "bench" });
  publisher.start();
  const published = await nextStatus(client, id, 20_000);
  if (published.status !== "PUBLISHING") throw new Error(JSON.stringify(published));
  let loopLag: LoopLag | undefined;
  return {
    label: `${sender} (our server, media.sendEngine ${sender === "fast" ? "ffi" : "werift"})`,
    pid: server.child.pid,
    receiverArgs: ["ours", ws],
    publisher,
    async engineDropped() {
      const stats = await server.ask<{ engineDropped: number; loopLag: LoopLag }>("stats");
      loopLag = stats.loopLag;
      return stats.engineDropped;
    },
    loopLag: () => loopLag,
    async collectGarbage() {
      await server.ask("gc");
    },
    async close() {
      publisher.pause();
      await peer.close();
      await client.close();
      // Sessions end (and their peers close) as the server sees the sockets close.
      await new Promise((r) => setTimeout(r, 1500));
      const { peers } = await server.ask<{ peers: number }>("stats");
      console.log(`server peer connections left after closing: ${peers}`);
      await server.stop();
    },
  };
}

/** A free local port of `type`. */
async function freePort(type: "udp4" | "tcp"): Promise<number> {
  if (type === "tcp") {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const { port } = listener.addr as Deno.NetAddr;
    listener.close();
    return port;
  }
  const socket = dgram.createSocket("udp4");
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  const { port } = socket.address();
  await new Promise<void>((resolve) => socket.close(() => resolve()));
  return port;
}

/**
 * Janus 1.1 (Debian `janus`) with its streaming plugin: one RTP mountpoint fed the same
 * packets over UDP; sessions never time out (no keepalives needed), other plugins and
 * transports off.
 */
async function janusTarget(): Promise<Target> {
  const dir = await Deno.makeTempDir({ prefix: "janus-bench-" });
  const [httpPort, videoPort, audioPort] = [
    await freePort("tcp"),
    await freePort("udp4"),
    await freePort("udp4"),
  ];
  const plugins = [...Deno.readDirSync("/usr/lib/x86_64-linux-gnu/janus/plugins")]
    .map((e) => e.name).filter((n) => n.endsWith(".so") && !n.includes("streaming"));
  const transports = [...Deno.readDirSync("/usr/lib/x86_64-linux-gnu/janus/transports")]
    .map((e) => e.name).filter((n) => n.endsWith(".so") && !n.includes("http"));
  const main = Deno.readTextFileSync("/etc/janus/janus.jcfg")
    .replace("#session_timeout = 60", "session_timeout = 0")
    .replace(
      '#disable = "libjanus_voicemail.so,libjanus_recordplay.so"',
      `disable = "${plugins.join(",")}"`,
    )
    .replace('#disable = "libjanus_rabbitmq.so"', `disable = "${transports.join(",")}"`);
  Deno.writeTextFileSync(`${dir}/janus.jcfg`, main);
  Deno.writeTextFileSync(
    `${dir}/janus.transport.http.jcfg`,
    Deno.readTextFileSync("/etc/janus/janus.transport.http.jcfg")
      .replace("port = 8088", `port = ${httpPort}`),
  );
  Deno.writeTextFileSync(
    `${dir}/janus.plugin.streaming.jcfg`,
    `general: {\n}\nbench: {\n\ttype = "rtp"\n\tid = 1\n\tdescription = "bench"\n` +
      `\tmedia = (\n\t\t{ type = "video" mid = "v" port = ${videoPort} pt = 96 codec = "vp8" },\n` +
      `\t\t{ type = "audio" mid = "a" port = ${audioPort} pt = 111 codec = "opus" }\n\t)\n}\n`,
  );
  const janus = new Deno.Command("janus", {
    args: [
      ...["-F", dir, "-i", janusAddress, "-E", "bench0", "-r", "40000-40999", "-N"],
      ...["-L", `${dir}/janus.log`],
    ],
    stdout: "null",
    stderr: "null",
  }).spawn();
  const base = `http://127.0.0.1:${httpPort}/janus`;
  const deadline = Date.now() + 10_000;
  for (;;) {
    const info = await fetch(`${base}/info`).then((r) => r.json()).catch(() => undefined);
    if (info?.plugins?.["janus.plugin.streaming"]) break;
    if (Date.now() > deadline) {
      janus.kill("SIGTERM");
      await janus.status;
      throw new Error(`Janus did not start (see ${dir}/janus.log)`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const feed = dgram.createSocket("udp4");
  const publisher = new StampedPublisher((index, packet) =>
    feed.send(packet.serialize(), index === 0 ? videoPort : audioPort, "127.0.0.1")
  );
  publisher.start();
  return {
    label: "janus (Janus 1.1.2 streaming plugin, plain RTP in)",
    pid: janus.pid,
    receiverArgs: ["janus", base],
    publisher,
    engineDropped: () => Promise.resolve(0),
    async close() {
      publisher.pause();
      await new Promise<void>((resolve) => feed.close(() => resolve()));
      janus.kill("SIGTERM");
      await janus.status;
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** One publisher and N subscribers through `target`, N growing by `steps`. */
async function measure(target: Target): Promise<StepResult[]> {
  const started = performance.now();
  const children = Array.from(
    { length: receiverProcesses },
    () => startChild(["--receivers", ...target.receiverArgs]),
  );
  const publisher = target.publisher;
  let players = 0;

  const receiverStats = () => Promise.all(children.map((c) => c.ask<ReceiverStats>("stats")));
  const window = async (n: number): Promise<StepResult> => {
    await new Promise((r) => setTimeout(r, warmupMs));
    // Packets are counted from one answer of the receivers to the next (a busy receiver child
    // answers late), the server's CPU over its own interval.
    const countsBefore = await receiverStats();
    const sentBefore = publisher.sent;
    const countedFrom = performance.now();
    const droppedBefore = await target.engineDropped();
    const before = usage(target.pid);
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, measureMs));
    const after = usage(target.pid);
    const cpuSeconds = (performance.now() - t0) / 1000;
    const stats = await receiverStats();
    const sent = publisher.sent - sentBefore;
    const seconds = (performance.now() - countedFrom) / 1000;
    const total = (all: ReceiverStats[], key: "received" | "failed" | "gaps") =>
      all.reduce((s, r) => s + r[key], 0);
    const received = total(stats, "received") - total(countsBefore, "received");
    const failed = total(stats, "failed") - total(countsBefore, "failed");
    const gaps = total(stats, "gaps") - total(countsBefore, "gaps");
    const silent = stats.reduce((s, r) => s + r.silent, 0);
    // Verifying receivers know which packets never came (sequence gaps, failed tags, silent
    // subscribers): packets still queued at the window's end are not lost. werift's receivers
    // (Janus's side) only count, so there the shortfall against what was sent is the loss.
    const lost = gaps + failed + silent * sent;
    const loss = stats.every((r) => r.verified)
      ? lost / Math.max(1, received + lost)
      : 1 - received / (sent * n);
    const engineDropped = await target.engineDropped();
    const loopLag = target.loopLag?.();
    const latencies = stats.flatMap((r) => r.latencies).sort((a, b) => a - b);
    const cores = (after.cpuSeconds - before.cpuSeconds) / cpuSeconds;
    // After everything else of the window was read: the collection pauses the server.
    let rssAfterGcKb: number | undefined;
    if (target.collectGarbage) {
      await target.collectGarbage();
      rssAfterGcKb = usage(target.pid).rssKb;
    }
    return {
      n,
      inRate: sent / seconds,
      cores,
      rssKb: after.rssKb,
      rssAfterGcKb,
      loss: n === 0 ? 0 : Math.max(0, loss),
      shortfall: n === 0 ? 0 : Math.max(0, 1 - received / (sent * n)),
      deliveredPerCore: cores > 0 ? received / seconds / cores : 0,
      p50: percentile(latencies, 0.5),
      p99: percentile(latencies, 0.99),
      engineDropped: engineDropped - droppedBefore,
      loopLag,
      authFailed: failed,
      seqGaps: gaps,
      silent,
    };
  };

  const idle = await window(0);
  const results: StepResult[] = [];
  console.log(`\n${target.label}:`);
  console.log(
    "subscribers  in-pkts/s  server-cores  subs/core  delivered/core-s  short  loss    engine-drops  auth-fail  seq-gaps  silent  cpu/sub(ms/s)  rss/sub(KB)  gc:rss/sub  gc:rss/added  latency p50/p99 (ms)  loop lag p99/max (ms)  load",
  );
  for (const n of steps) {
    if (performance.now() - started > budgetMs) {
      console.log(`(time budget spent before N=${n})`);
      break;
    }
    // werift's DTLS handshakes fail now and then under full media load.
    publisher.pause();
    const add = n - players;
    const added = await Promise.all(children.map((c, i) => {
      const share = Math.floor(add / children.length) + (i < add % children.length ? 1 : 0);
      return share > 0
        ? c.ask<{ failures: number; error?: string }>(`add ${share}`)
        : { failures: 0, error: undefined };
    }));
    const failures = added.reduce((sum, a) => sum + a.failures, 0);
    if (failures) console.log(`(${failures} subscribers failed to connect and were tried again)`);
    const error = added.find((a) => a.error)?.error;
    if (error) {
      console.log(`(N=${n} not reached: a subscriber failed ${connectAttempts} times: ${error})`);
      break;
    }
    players = n;
    publisher.start();
    const r = await window(n);
    results.push(r);
    r.cpuPerSubMs = (r.cores - idle.cores) / n * 1000;
    r.rssPerSubKb = (r.rssKb - idle.rssKb) / n;
    if (r.rssAfterGcKb !== undefined && idle.rssAfterGcKb !== undefined) {
      r.rssPerSubAfterGcKb = (r.rssAfterGcKb - idle.rssAfterGcKb) / n;
      // Per subscriber added since the previous step: what one more costs once the code,
      // caches and Workers the first ones brought up are there.
      const previous = results.at(-2);
      const from = previous?.rssAfterGcKb ?? idle.rssAfterGcKb;
      r.rssPerAddedSubAfterGcKb = (r.rssAfterGcKb - from) / (n - (previous?.n ?? 0));
    }
    console.log(
      `${String(n).padStart(11)}  ${Math.round(r.inRate).toString().padStart(9)}  ${
        r.cores.toFixed(2).padStart(12)
      }  ${Math.round(n / Math.max(r.cores, 0.01)).toString().padStart(9)}  ${
        Math.round(r.deliveredPerCore).toString().padStart(16)
      }  ${(r.shortfall * 100).toFixed(1).padStart(4)}%  ${
        (r.loss * 100).toFixed(2).padStart(5)
      }%  ${String(r.engineDropped).padStart(12)}  ${String(r.authFailed).padStart(9)}  ${
        String(r.seqGaps).padStart(8)
      }  ${String(r.silent).padStart(6)}  ${r.cpuPerSubMs.toFixed(2).padStart(13)}  ${
        Math.round(r.rssPerSubKb).toString().padStart(11)
      }  ${gcCell(r.rssPerSubAfterGcKb, 10)}  ${gcCell(r.rssPerAddedSubAfterGcKb, 12)}  ${
        `${r.p50.toFixed(2)} / ${r.p99.toFixed(2)}`.padEnd(20)
      }  ${
        (r.loopLag ? `${r.loopLag.p99Ms.toFixed(2)} / ${r.loopLag.maxMs.toFixed(2)}` : "-")
          .padEnd(21)
      }  ${Deno.loadavg()[0].toFixed(2)}`,
    );
    if (!keptUp(r)) break;
  }
  console.log(
    `idle (publisher only): ${idle.cores.toFixed(2)} cores, RSS ${idle.rssKb} KB${
      idle.rssAfterGcKb === undefined ? "" : ` (${idle.rssAfterGcKb} KB after a full GC)`
    }`,
  );
  await Promise.all(children.map((c) => c.stop()));
  await target.close();
  return results;
}

/** A KB figure of the table, "-" where not measured (Janus). */
function gcCell(kb: number | undefined, width: number): string {
  return (kb === undefined ? "-" : Math.round(kb).toString()).padStart(width);
}

/** Whether a step lost under 1% and delivered all but `maxShortfall` of what was offered. */
function keptUp(r: StepResult): boolean {
  return r.loss < maxLoss && r.shortfall <= maxShortfall;
}

/** Subscribers per server core at the largest N that kept up (0 when none). */
function perCore(results: StepResult[]): number {
  const good = results.filter(keptUp).at(-1);
  return good ? Math.round(good.n / Math.max(good.cores, 0.01)) : 0;
}

/** Ours vs Janus at the largest N both kept under 1% loss: CPU and memory per subscriber. */
function compareWithJanus(fast: StepResult[], janus: StepResult[]): void {
  const common = fast.filter(keptUp).map((r) => r.n)
    .filter((n) => janus.some((j) => j.n === n && keptUp(j))).at(-1);
  if (!common) {
    console.log("\nfast vs Janus: no N where both stayed under 1% loss");
    return;
  }
  const ours = fast.find((r) => r.n === common)!;
  const theirs = janus.find((r) => r.n === common)!;
  console.log(
    `\nfast vs Janus at N=${common}: CPU per subscriber ${ours.cpuPerSubMs!.toFixed(2)} vs ${
      theirs.cpuPerSubMs!.toFixed(2)
    } ms/s, server cores ${ours.cores.toFixed(2)} vs ${theirs.cores.toFixed(2)}, RSS per ` +
      `subscriber ${Math.round(ours.rssPerSubKb!)} vs ${Math.round(theirs.rssPerSubKb!)} KB`,
  );
  console.log(
    `CPU ours/janus ${(ours.cpuPerSubMs! / theirs.cpuPerSubMs!).toFixed(2)}, memory ours/janus ${
      (ours.rssPerSubKb! / theirs.rssPerSubKb!).toFixed(2)
    }`,
  );
}

async function run(): Promise<void> {
  console.log(
    `receivers: ${receiverProcesses} child processes of werift peers (ours: SRTP verified by ${receiverWorkers} FFI Worker(s) each); ${navigator.hardwareConcurrency} cores; load ${
      Deno.loadavg().map((x) => x.toFixed(2)).join(" ")
    }; server: ${
      serverDefaults
        ? "V8 and glibc defaults"
        : `as the start task runs it (${deployedV8Flags.join(" ")}, ${
          Object.entries(deployedEnv).map(([k, v]) => `${k}=${v}`).join(" ")
        })`
    }`,
  );
  const fast = runs("fast") ? await measure(await oursTarget("fast")) : [];
  const werift = runs("werift") ? await measure(await oursTarget("werift")) : [];
  const janus = runs("janus") ? await measure(await janusTarget()) : [];
  if (fast.length && janus.length) compareWithJanus(fast, janus);
  // werift keeps timers (ICE consent, DTLS) a while after close; nothing is left to wait for.
  console.log(`subscribers/core: fast ${perCore(fast)}, werift ${perCore(werift)}`);
  Deno.exit(0);
}

function onPath(command: string): boolean {
  return (Deno.env.get("PATH") ?? "").split(":").concat(["/usr/sbin", "/sbin"]).some((dir) => {
    try {
      return Deno.statSync(`${dir}/${command}`).isFile;
    } catch {
      return false;
    }
  });
}

/**
 * Runs this file again inside a new network namespace holding only loopback and `bench0`
 * (an ifb interface with janusAddress: libnice never gathers loopback, and this kernel has
 * no `dummy` module), so no packet of the run can leave the machine. Fails naming what is
 * missing.
 */
async function runInNetns(): Promise<never> {
  const missing = [
    Deno.uid() === 0 ? "" : "root (unshare -n needs it)",
    onPath("janus") ? "" : "janus (Debian package janus; scripts/peers.sh scripts/bench_peers.txt)",
    onPath("unshare") ? "" : "unshare (Debian package util-linux)",
    onPath("ip") ? "" : "ip (Debian package iproute2)",
  ].filter(Boolean);
  if (missing.length) {
    throw new Error(
      `the Janus comparison needs ${missing.join(", ")}; ` +
        "WEBRTC_BENCH_ONLY=fast,werift runs without it",
    );
  }
  const file = new URL(import.meta.url).pathname;
  // npm packages are fetched here: inside the namespace there is no route to any registry.
  const cached = await new Deno.Command(Deno.execPath(), { args: ["cache", file] }).output();
  if (!cached.success) throw new Error(`deno cache ${file} failed`);
  const setup = "ip link set lo up && ip link add bench0 type ifb && " +
    `ip addr add ${janusAddress}/24 dev bench0 && ip link set bench0 up && ` +
    'exec "$0" run -A "$1"';
  const { code } = await new Deno.Command("unshare", {
    args: ["-n", "sh", "-c", setup, Deno.execPath(), file],
    env: { [netnsEnv]: "1" },
  }).spawn().status;
  Deno.exit(code);
}

if (Deno.args[0] === "--serve") await serve(Deno.args[1] as Sender);
else if (Deno.args[0] === "--receivers") {
  const [kind, base] = Deno.args.slice(1);
  if (kind === "janus") await receivers(janusSubscriber(base, 1));
  else {
    const pool = new SrtpReceiverPool(receiverWorkers, stampOffset);
    pool.install();
    await receivers(oursSubscriber(base, pool), pool);
  }
} else if (Deno.env.get(netnsEnv) || !runs("janus")) await run();
else await runInNetns();
