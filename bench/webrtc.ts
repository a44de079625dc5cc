/**
 * WebRTC fan-out: one synthetic 640x480-like stream (VP8-shaped RTP, 25 fps x 4 packets of
 * 1.1 kB plus 50 Opus packets/s: 150 packets/s, ~1 Mbit/s) from a werift publisher, played by
 * N werift subscribers on 127.0.0.1 through our signaling, once per sender of the server:
 * `fast` (media.sendEngine ffi: SRTP and sendmmsg in Workers, on the ICE mux's socket) and
 * `werift` (media.sendEngine werift). N grows until a step loses 1% or more, or the side's
 * time budget is spent.
 *
 * Processes: the server runs alone in a child (this file with `--serve <sender>`), so its CPU
 * (every thread, Workers included) and RSS are its own. The subscribers run in
 * `WEBRTC_BENCH_RECEIVERS` children (default 2; this file with `--receivers <ws>`), each a
 * set of plain werift peers: werift authenticates and decrypts every SRTP packet, and only
 * packets that pass count as received, so loss includes anything sent wrong. The publisher
 * runs in this process and stamps each packet's payload with its send time (epoch ms, one
 * clock for every process of the machine); receivers take the difference at arrival:
 * latency publisher → server → subscriber over loopback, p50/p99.
 *
 * Reports per step: server cores, packets delivered per server core-second, loss, CPU and RSS
 * per subscriber, latency. The last line reads `subscribers/core: fast <N>, werift <M>`:
 * the largest N under 1% loss divided by the server cores it took.
 *
 * `WEBRTC_BENCH_STEPS` sets the N of each step (default "25,50,100,200,400,800");
 * `WEBRTC_BENCH_ONLY=fast` or `=werift` runs one side.
 */
import { Buffer } from "node:buffer";
import { RtpHeader, RtpPacket } from "werift";
import { configSchema } from "../config.ts";
import { silentLogger } from "../core/log.ts";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { startServer } from "../server.ts";
import { WcsClient } from "../tests/helpers/wcs_client.ts";
import { nextStatus, TestPlayer, TestPublisher } from "../tests/webrtc_helpers.ts";
import { lines } from "./support/lines.ts";

/** Length of each measurement window, in milliseconds. */
const measureMs = 5_000;
/** Time given to new subscribers to settle before measuring, in milliseconds. */
const warmupMs = 2_000;
/** Steps of one side stop being started after this much time, in milliseconds. */
const budgetMs = 240_000;
/** Loss at which the fan-out counts as saturated. */
const maxLoss = 0.01;
const clockTicksPerSecond = 100;
const steps = (Deno.env.get("WEBRTC_BENCH_STEPS") ?? "25,50,100,200,400,800").split(",")
  .map(Number);
const receiverProcesses = Number(Deno.env.get("WEBRTC_BENCH_RECEIVERS") ?? 2);
/** One side only ("fast" or "werift"), when set. */
const only = Deno.env.get("WEBRTC_BENCH_ONLY");
/** Offset of the send-time stamp in each payload (after the VP8 descriptor and header). */
const stampOffset = 16;
/** Subscribers connected at once while a step grows. */
const connectBatch = 5;

type Sender = "fast" | "werift";

/** The time of day in ms with sub-ms precision, the same clock in every process. */
function nowEpochMs(): number {
  return performance.timeOrigin + performance.now();
}

/** Child mode: the server with one sender, answering "stats" lines on stdin. */
async function serve(sender: Sender): Promise<void> {
  const config = configSchema.parse({
    ports: { rest: 0, ws: 0, wss: 0, hls: 0, rtmp: 0, rtsp: 0, srt: 0, sip: 0 },
    media: { iceMux: "on", sendEngine: sender === "fast" ? "ffi" : "werift" },
  });
  const server = await startServer(config, silentLogger);
  const { sendPaths } = server.services;
  if ((sender === "fast") !== (sendPaths.engine !== undefined)) {
    throw new Error(`the ${sender} sender did not start`);
  }
  console.log(JSON.stringify({ ws: `ws://127.0.0.1:${server.wsPort}` }));
  for await (const _line of lines(Deno.stdin.readable)) {
    let dropped = 0;
    if (sendPaths.engine) {
      for (const s of (await sendPaths.engine.stats()).values()) dropped += s.dropped;
    }
    console.log(JSON.stringify({ peers: openPeerCount(), engineDropped: dropped }));
  }
  await server.stop();
}

/** What a receiver child answers to "stats". */
interface ReceiverStats {
  players: number;
  received: number;
  /** Latencies sampled since the last stats, in ms. */
  latencies: number[];
}

/**
 * Child mode: subscribers. "add <k>" connects k more players of stream "bench" (answers
 * {players}); "stats" answers ReceiverStats.
 */
async function receivers(ws: string): Promise<void> {
  const players: { player: TestPlayer; client: WcsClient }[] = [];
  let latencies: number[] = [];
  /** Players that failed to connect (each is tried again). */
  let failures = 0;
  const addOne = async (): Promise<void> => {
    for (;;) {
      try {
        return await connectOne();
      } catch (err) {
        if (++failures > 20) throw err;
      }
    }
  };
  const connectOne = async () => {
    const player = new TestPlayer("VP8");
    player.pc.onTrack.subscribe((track) => {
      track.onReceiveRtp.subscribe((rtp) => {
        // One sample in 8 is enough for percentiles and keeps the receivers light.
        if ((rtp.header.sequenceNumber & 7) !== 0 || rtp.payload.length < stampOffset + 8) {
          return;
        }
        latencies.push(nowEpochMs() - rtp.payload.readDoubleLE(stampOffset));
      });
    });
    const { client } = await WcsClient.connect(ws);
    const id = crypto.randomUUID();
    await player.play(client, { mediaSessionId: id, name: "bench" });
    const status = await nextStatus(client, id, 30_000).catch((e) => ({ status: String(e) }));
    if (status.status !== "PLAYING") {
      await player.close();
      await client.close();
      throw new Error(`PLAYING got ${JSON.stringify(status)}`);
    }
    players.push({ player, client });
  };
  for await (const line of lines(Deno.stdin.readable)) {
    if (line.startsWith("add ")) {
      let left = Number(line.slice(4));
      while (left > 0) {
        const batch = Math.min(left, connectBatch);
        await Promise.all(Array.from({ length: batch }, addOne));
        left -= batch;
      }
      console.log(JSON.stringify({ players: players.length, failures }));
    } else {
      const stats: ReceiverStats = {
        players: players.length,
        received: players.reduce(
          (n, p) => n + p.player.received.video + p.player.received.audio,
          0,
        ),
        latencies,
      };
      latencies = [];
      console.log(JSON.stringify(stats));
    }
  }
  for (const { player, client } of players) {
    await player.close();
    await client.close();
  }
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

/** A child of this file: its pid and a line channel over stdin/stdout. */
function startChild(args: string[]) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL(import.meta.url).pathname, ...args],
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

/** The bench's publisher: TestPublisher's negotiation, its own paced and stamped packets. */
class StampedPublisher {
  readonly peer = new TestPublisher("VP8");
  sent = 0;
  #timer?: ReturnType<typeof setInterval>;
  #seq = [1000, 5000];
  #ts = [90000, 48000];
  #frame = 0;

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
      payloadType: 96,
    });
    this.#seq[index] = (this.#seq[index] + 1) & 0xffff;
    this.sent++;
    (index === 0 ? this.peer.video : this.peer.audio).writeRtp(new RtpPacket(header, payload));
  }
}

interface StepResult {
  n: number;
  /** Packets per second the publisher sent during the window. */
  inRate: number;
  cores: number;
  rssKb: number;
  loss: number;
  /** Packets the subscribers received per second of the server's CPU. */
  deliveredPerCore: number;
  p50: number;
  p99: number;
  engineDropped: number;
}

function percentile(sorted: number[], p: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] : 0;
}

/** One publisher and N subscribers through the server with `sender`, N growing by `steps`. */
async function measure(sender: Sender): Promise<StepResult[]> {
  const started = performance.now();
  const server = startChild(["--serve", sender]);
  const { ws } = await server.read<{ ws: string }>();
  const children = Array.from(
    { length: receiverProcesses },
    () => startChild(["--receivers", ws]),
  );
  const publisher = new StampedPublisher();
  const { client: pubClient } = await WcsClient.connect(ws);
  const pubId = crypto.randomUUID();
  await publisher.peer.publish(pubClient, { mediaSessionId: pubId, name: "bench" });
  publisher.start();
  const published = await nextStatus(pubClient, pubId, 20_000);
  if (published.status !== "PUBLISHING") throw new Error(JSON.stringify(published));
  let players = 0;

  const receiverStats = () => Promise.all(children.map((c) => c.ask<ReceiverStats>("stats")));
  const window = async (n: number): Promise<StepResult> => {
    await new Promise((r) => setTimeout(r, warmupMs));
    const before = usage(server.child.pid);
    const receivedBefore = (await receiverStats()).reduce((s, r) => s + r.received, 0);
    const { engineDropped: droppedBefore } = await server.ask<{ engineDropped: number }>("stats");
    const sentBefore = publisher.sent;
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, measureMs));
    const seconds = (performance.now() - t0) / 1000;
    const sent = publisher.sent - sentBefore;
    const after = usage(server.child.pid);
    const stats = await receiverStats();
    const received = stats.reduce((s, r) => s + r.received, 0) - receivedBefore;
    const { engineDropped } = await server.ask<{ engineDropped: number }>("stats");
    const latencies = stats.flatMap((r) => r.latencies).sort((a, b) => a - b);
    const cores = (after.cpuSeconds - before.cpuSeconds) / seconds;
    return {
      n,
      inRate: sent / seconds,
      cores,
      rssKb: after.rssKb,
      loss: n === 0 ? 0 : Math.max(0, 1 - received / (sent * n)),
      deliveredPerCore: cores > 0 ? received / seconds / cores : 0,
      p50: percentile(latencies, 0.5),
      p99: percentile(latencies, 0.99),
      engineDropped: engineDropped - droppedBefore,
    };
  };

  const idle = await window(0);
  const results: StepResult[] = [];
  console.log(
    `\n${sender} (server with media.sendEngine ${sender === "fast" ? "ffi" : "werift"}):`,
  );
  console.log(
    "subscribers  in-pkts/s  server-cores  subs/core  delivered/core-s  loss    engine-drops  cpu/sub(ms/s)  rss/sub(KB)  latency p50/p99 (ms)",
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
      return share > 0 ? c.ask<{ failures: number }>(`add ${share}`) : { failures: 0 };
    }));
    const failures = added.reduce((sum, a) => sum + a.failures, 0);
    if (failures) console.log(`(${failures} subscribers failed to connect and were tried again)`);
    players = n;
    publisher.start();
    const r = await window(n);
    results.push(r);
    const cpuPerSub = (r.cores - idle.cores) / n * 1000;
    const rssPerSub = (r.rssKb - idle.rssKb) / n;
    console.log(
      `${String(n).padStart(11)}  ${Math.round(r.inRate).toString().padStart(9)}  ${
        r.cores.toFixed(2).padStart(12)
      }  ${Math.round(n / Math.max(r.cores, 0.01)).toString().padStart(9)}  ${
        Math.round(r.deliveredPerCore).toString().padStart(16)
      }  ${(r.loss * 100).toFixed(2).padStart(5)}%  ${String(r.engineDropped).padStart(12)}  ${
        cpuPerSub.toFixed(1).padStart(13)
      }  ${Math.round(rssPerSub).toString().padStart(11)}  ${r.p50.toFixed(2)} / ${
        r.p99.toFixed(2)
      }`,
    );
    if (r.loss >= maxLoss) break;
  }
  console.log(`idle (publisher only): ${idle.cores.toFixed(2)} cores, RSS ${idle.rssKb} KB`);

  publisher.pause();
  await Promise.all(children.map((c) => c.stop()));
  await publisher.peer.close();
  await pubClient.close();
  // Sessions end (and their peers close) as the server sees the sockets close.
  await new Promise((r) => setTimeout(r, 1500));
  const { peers } = await server.ask<{ peers: number }>("stats");
  console.log(`server peer connections left after closing: ${peers}`);
  await server.stop();
  return results;
}

/** Subscribers per server core at the largest N under 1% loss (0 when none). */
function perCore(results: StepResult[]): number {
  const good = results.filter((r) => r.loss < maxLoss).at(-1);
  return good ? Math.round(good.n / Math.max(good.cores, 0.01)) : 0;
}

async function run(): Promise<void> {
  console.log(
    `receivers: ${receiverProcesses} child processes of werift peers; ${navigator.hardwareConcurrency} cores; load ${
      Deno.loadavg().map((x) => x.toFixed(2)).join(" ")
    }`,
  );
  const fast = only === "werift" ? [] : await measure("fast");
  const werift = only === "fast" ? [] : await measure("werift");
  // werift keeps timers (ICE consent, DTLS) a while after close; nothing is left to wait for.
  console.log(`subscribers/core: fast ${perCore(fast)}, werift ${perCore(werift)}`);
  Deno.exit(0);
}

if (Deno.args[0] === "--serve") await serve(Deno.args[1] as Sender);
else if (Deno.args[0] === "--receivers") await receivers(Deno.args[1]);
else await run();
