/**
 * WebRTC fan-out: one synthetic 640x480-like stream (VP8-shaped RTP, 25 fps x 4 packets of
 * 1.1 kB plus 50 Opus packets/s: 150 packets/s, ~1 Mbit/s) from a werift publisher, played
 * by N werift subscribers on 127.0.0.1 through our signaling. The server runs in its own
 * process (this file with `--serve`), so its CPU and memory are its own. N grows until a
 * step loses 1% or more of the packets, or the time budget is spent.
 *
 * Reports per step: server cores, packets sent per core-second, loss, CPU and RSS per
 * subscriber, and the latency the server adds from RTP arrival to its last copy's send
 * (p50/p99). Anchor: werift's send path in Deno measured ~10k SRTP packets/s per core.
 *
 * `WEBRTC_BENCH_STEPS` sets the N of each step (default "10,30,60").
 */
import { configSchema } from "../config.ts";
import { silentLogger } from "../core/log.ts";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { WebRtcPublisher } from "../media/providers/webrtc_publisher.ts";
import { startServer } from "../server.ts";
import { WcsClient } from "../tests/helpers/wcs_client.ts";
import { nextStatus, TestPlayer, TestPublisher } from "../tests/webrtc_helpers.ts";
import { lines } from "./support/lines.ts";

/** Length of each measurement window, in milliseconds. */
const measureMs = 5_000;
/** Time given to new subscribers to settle before measuring, in milliseconds. */
const warmupMs = 2_000;
/** Steps stop being started after this much time, in milliseconds. */
const budgetMs = 90_000;
/** Loss at which the fan-out counts as saturated. */
const maxLoss = 0.01;
const clockTicksPerSecond = 100;
const steps = (Deno.env.get("WEBRTC_BENCH_STEPS") ?? "10,30,60").split(",").map(Number);

/** Child mode: the server, answering "stats" and "reset" lines on stdin. */
async function serve(): Promise<void> {
  const config = configSchema.parse({ ports: { rest: 0, ws: 0, wss: 0, hls: 0, rtmp: 0 } });
  const server = await startServer(config, silentLogger);
  console.log(JSON.stringify({ ws: `ws://127.0.0.1:${server.wsPort}` }));
  for await (const line of lines(Deno.stdin.readable)) {
    const publisher = server.services.streams.published("bench");
    const latency = publisher instanceof WebRtcPublisher ? publisher.forwardLatency : undefined;
    if (line === "reset") latency?.reset();
    console.log(JSON.stringify({
      p50: latency?.percentile(0.5) ?? 0,
      p99: latency?.percentile(0.99) ?? 0,
      samples: latency?.count ?? 0,
      peers: openPeerCount(),
    }));
  }
  await server.stop();
}

interface Usage {
  cpuSeconds: number;
  rssKb: number;
}

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

/** The server child: its pid and a request/answer channel over its stdin/stdout. */
async function startChild() {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL(import.meta.url).pathname, "--serve"],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = lines(child.stdout);
  const writer = child.stdin.getWriter();
  const readLine = async () => JSON.parse((await reader.next()).value ?? "null");
  const { ws } = await readLine();
  return {
    child,
    ws: ws as string,
    async ask(command: "stats" | "reset") {
      await writer.write(new TextEncoder().encode(`${command}\n`));
      return await readLine() as { p50: number; p99: number; samples: number; peers: number };
    },
    async stop() {
      await writer.close();
      await child.status;
      await reader.return(undefined);
    },
  };
}

interface StepResult {
  n: number;
  /** Packets per second the publisher sent during the window. */
  inRate: number;
  cores: number;
  rssKb: number;
  loss: number;
  sentPerCore: number;
  p50: number;
  p99: number;
}

async function run(): Promise<void> {
  const started = performance.now();
  const server = await startChild();
  const { client: pubClient } = await WcsClient.connect(server.ws);
  const publisher = new TestPublisher("VP8", 4);
  const pubId = crypto.randomUUID();
  await publisher.publish(pubClient, { mediaSessionId: pubId, name: "bench" });
  publisher.start();
  const publishing = await nextStatus(pubClient, pubId);
  if (publishing.status !== "PUBLISHING") throw new Error(`publish: ${JSON.stringify(publishing)}`);
  const players: { player: TestPlayer; client: WcsClient }[] = [];

  /** Measures one window with the current players. */
  const window = async (n: number): Promise<StepResult> => {
    await new Promise((r) => setTimeout(r, warmupMs));
    await server.ask("reset");
    const before = usage(server.child.pid);
    const sentBefore = publisher.sent;
    const receivedBefore = players.map((p) => p.player.received.video + p.player.received.audio);
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, measureMs));
    const seconds = (performance.now() - t0) / 1000;
    const after = usage(server.child.pid);
    const sent = publisher.sent - sentBefore;
    const received = players.reduce(
      (sum, p, i) => sum + p.player.received.video + p.player.received.audio - receivedBefore[i],
      0,
    );
    const stats = await server.ask("stats");
    const cores = (after.cpuSeconds - before.cpuSeconds) / seconds;
    return {
      n,
      inRate: sent / seconds,
      cores,
      rssKb: after.rssKb,
      loss: n === 0 ? 0 : Math.max(0, 1 - received / (sent * n)),
      sentPerCore: cores > 0 ? sent * n / seconds / cores : 0,
      p50: stats.p50,
      p99: stats.p99,
    };
  };

  const idle = await window(0);
  const results: StepResult[] = [];
  console.log(
    "subscribers  in-pkts/s  server-cores  pkts-sent/core-s  loss    cpu/sub(ms/s)  rss/sub(KB)  added-latency p50/p99 (ms)",
  );
  for (const n of steps) {
    if (performance.now() - started > budgetMs) break;
    // werift's DTLS handshakes in this process fail now and then under full media load.
    publisher.pause();
    while (players.length < n) {
      const { client } = await WcsClient.connect(server.ws);
      const player = new TestPlayer("VP8");
      const id = crypto.randomUUID();
      await player.play(client, { mediaSessionId: id, name: "bench" });
      players.push({ player, client });
      const status = await nextStatus(client, id, 20_000).catch((err) => ({ status: String(err) }));
      if (status.status !== "PLAYING") {
        throw new Error(
          `subscriber ${players.length} got ${JSON.stringify(status)}, ` +
            `ICE ${player.pc.iceConnectionState}, DTLS ${player.pc.connectionState}`,
        );
      }
    }
    publisher.start();
    const r = await window(n);
    results.push(r);
    const cpuPerSub = (r.cores - idle.cores) / n * 1000;
    const rssPerSub = (r.rssKb - idle.rssKb) / n;
    console.log(
      `${String(n).padStart(11)}  ${Math.round(r.inRate).toString().padStart(9)}  ${
        r.cores.toFixed(2).padStart(12)
      }  ${Math.round(r.sentPerCore).toString().padStart(16)}  ${
        (r.loss * 100).toFixed(2).padStart(5)
      }%  ${cpuPerSub.toFixed(1).padStart(13)}  ${Math.round(rssPerSub).toString().padStart(11)}  ${
        r.p50.toFixed(3)
      } / ${r.p99.toFixed(3)}`,
    );
    if (r.loss >= maxLoss) break;
  }
  const good = results.filter((r) => r.loss < maxLoss).at(-1);
  console.log(`idle server (publisher only): ${idle.cores.toFixed(2)} cores`);
  if (good) {
    console.log(
      `largest N under 1% loss: ${good.n} subscribers on ${good.cores.toFixed(2)} cores ` +
        `= ${Math.round(good.n / Math.max(good.cores, 0.01))} subscribers per core; ` +
        `${Math.round(good.sentPerCore)} packets/s per core vs ~10,000 for werift in Deno ` +
        `(ratio ${(good.sentPerCore / 10_000).toFixed(2)})`,
    );
  } else console.log("no step stayed under 1% loss");

  await Promise.all(players.map(async ({ player, client }) => {
    await player.close();
    await client.close();
  }));
  await publisher.close();
  await pubClient.close();
  // Sessions end (and their peers close) as the server sees the sockets close.
  await new Promise((r) => setTimeout(r, 1000));
  const { peers } = await server.ask("stats");
  console.log(`server peer connections left after closing: ${peers}`);
  await server.stop();
  // werift keeps timers (ICE consent, DTLS) a while after close; nothing is left to wait for.
  Deno.exit(0);
}

if (Deno.args[0] === "--serve") await serve();
else await run();
