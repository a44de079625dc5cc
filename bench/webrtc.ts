/**
 * WebRTC fan-out: one synthetic 640x480-like stream (VP8-shaped RTP, 25 fps x 4 packets of
 * 1.1 kB plus 50 Opus packets/s: 150 packets/s, ~1 Mbit/s) from a werift publisher, played
 * by N werift subscribers on 127.0.0.1 through our signaling. The server runs in its own
 * process (this file with `--serve`), so its CPU and memory are its own. N grows until a
 * step loses 1% or more of the packets, or the time budget is spent.
 *
 * Reports per step: server cores, packets delivered per core-second, loss, CPU and RSS per
 * subscriber, and the latency the server adds from RTP arrival to its last copy's send
 * (p50/p99).
 *
 * Anchor, in the same run: werift's own fan-out. A process of plain werift
 * RTCPeerConnections (this file with `--werift`, no server, no signaling protocol) receives
 * the same publisher's packets and writes each into one local track per kind that every
 * subscriber's sender shares, for the same N subscribers (the steps ours took, whatever its
 * loss); the last line compares packets delivered per core-second of the fan-out process at
 * the largest N ours kept under 1% loss.
 *
 * `WEBRTC_BENCH_STEPS` sets the N of each step (default "10,30,60"); `WEBRTC_BENCH_ONLY=ours`
 * or `=werift` runs one side.
 */
import {
  MediaStreamTrack,
  RTCPeerConnection,
  RTCRtpCodecParameters,
  type RTCRtpTransceiver,
} from "werift";
import { configSchema } from "../config.ts";
import { silentLogger } from "../core/log.ts";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { WebRtcPublisher } from "../media/providers/webrtc_publisher.ts";
import { startServer } from "../server.ts";
import { WcsClient } from "../tests/helpers/wcs_client.ts";
import { nextStatus, TestPlayer, TestPublisher, waitFor } from "../tests/webrtc_helpers.ts";
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
/** One side only ("ours" or "werift"), when set. */
const only = Deno.env.get("WEBRTC_BENCH_ONLY");
/** Longest wait for a peer of the werift relay to connect, in milliseconds. */
const relayConnectTimeoutMs = 20_000;

/** What the children answer to "stats". */
interface ChildStats {
  p50: number;
  p99: number;
  samples: number;
  peers: number;
}

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

/**
 * Child mode: werift's own fan-out. Each stdin line is an offer (`{"role","sdp"}`) answered
 * with `{"answer"}`, or "stats"/"reset". The publisher's packets go into one local track per
 * kind; every subscriber's sender is attached to that track, so werift copies, encrypts and
 * sends each packet to every subscriber itself.
 */
async function serveWerift(): Promise<void> {
  const fb = [{ type: "nack" }, { type: "nack", parameter: "pli" }];
  const codecs = {
    video: [
      new RTCRtpCodecParameters({ mimeType: "video/VP8", clockRate: 90000, rtcpFeedback: fb }),
    ],
    audio: [new RTCRtpCodecParameters({ mimeType: "audio/opus", clockRate: 48000, channels: 2 })],
  };
  const out = {
    video: new MediaStreamTrack({ kind: "video" }),
    audio: new MediaStreamTrack({ kind: "audio" }),
  };
  const peers: RTCPeerConnection[] = [];
  for await (const line of lines(Deno.stdin.readable)) {
    if (line === "stats" || line === "reset") {
      const stats: ChildStats = { p50: 0, p99: 0, samples: 0, peers: peers.length };
      console.log(JSON.stringify(stats));
      continue;
    }
    const { role, sdp } = JSON.parse(line) as { role: "publish" | "play"; sdp: string };
    const pc = new RTCPeerConnection({
      iceServers: [],
      codecs,
      headerExtensions: { video: [], audio: [] },
      iceUseIpv4: false,
      iceUseIpv6: false,
      iceAdditionalHostAddresses: ["127.0.0.1"],
      iceInterfaceAddresses: { udp4: "127.0.0.1" },
    });
    peers.push(pc);
    if (role === "publish") {
      pc.onTrack.subscribe((track) => {
        const kind = track.kind as "video" | "audio";
        track.onReceiveRtp.subscribe((rtp) => out[kind].writeRtp(rtp));
      });
    }
    await pc.setRemoteDescription({ type: "offer", sdp });
    if (role === "play") {
      for (const transceiver of pc.getTransceivers() as RTCRtpTransceiver[]) {
        transceiver.setDirection("sendonly");
        await transceiver.sender.replaceTrack(out[transceiver.kind as "video" | "audio"]);
      }
    }
    await pc.setLocalDescription(await pc.createAnswer());
    if (pc.iceGatheringState !== "complete") {
      await new Promise<void>((resolve) => {
        const sub = pc.iceGatheringStateChange.subscribe((state) => {
          if (state !== "complete") return;
          sub.unSubscribe();
          resolve();
        });
      });
    }
    console.log(JSON.stringify({ answer: pc.localDescription!.sdp }));
  }
  await Promise.all(peers.map((pc) => pc.close()));
  Deno.exit(0);
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

/** A child (our server or the werift relay): its pid and a line channel over stdin/stdout. */
async function startChild(mode: "--serve" | "--werift") {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL(import.meta.url).pathname, mode],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = lines(child.stdout);
  const writer = child.stdin.getWriter();
  const readLine = async () => JSON.parse((await reader.next()).value ?? "null");
  const write = (line: string) => writer.write(new TextEncoder().encode(`${line}\n`));
  const { ws } = mode === "--serve" ? await readLine() : { ws: "" };
  return {
    child,
    ws: ws as string,
    async ask(command: "stats" | "reset") {
      await write(command);
      return await readLine() as ChildStats;
    },
    /** The werift relay's answer to an offer. */
    async offer(role: "publish" | "play", sdp: string): Promise<string> {
      await write(JSON.stringify({ role, sdp }));
      return (await readLine()).answer as string;
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
  /** Packets the subscribers received per second of the fan-out's CPU. */
  deliveredPerCore: number;
  p50: number;
  p99: number;
}

type Child = Awaited<ReturnType<typeof startChild>>;

/**
 * Stands in for the WCS client of TestPublisher and TestPlayer when they talk to the werift
 * relay: their offer goes to the relay, whose answer comes back as setRemoteSDP.
 */
class RelaySignaling {
  #answer?: Promise<string>;
  constructor(readonly relay: Child) {}
  send(_method: string, data: { published: boolean; sdp: string }): void {
    this.#answer = this.relay.offer(data.published ? "publish" : "play", data.sdp);
  }
  async next(): Promise<[string, string, boolean]> {
    return ["", await this.#answer!, false];
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

/** How the peers of a run reach the fan-out: our signaling, or the werift relay's lines. */
interface Fanout {
  label: string;
  child: Child;
  /** Connects a peer; resolves once it publishes (sending) or plays. */
  publish(publisher: TestPublisher): Promise<{ close(): Promise<unknown> }>;
  play(player: TestPlayer): Promise<{ close(): Promise<unknown> }>;
}

async function oursFanout(): Promise<Fanout> {
  const child = await startChild("--serve");
  const join = async (peer: TestPublisher | TestPlayer, expected: string) => {
    const { client } = await WcsClient.connect(child.ws);
    const id = crypto.randomUUID();
    if (peer instanceof TestPublisher) {
      await peer.publish(client, { mediaSessionId: id, name: "bench" });
      // The stream is PUBLISHING once its media flows.
      peer.start();
    } else await peer.play(client, { mediaSessionId: id, name: "bench" });
    const status = await nextStatus(client, id, 20_000).catch((err) => ({ status: String(err) }));
    if (status.status !== expected) {
      throw new Error(
        `${expected} got ${JSON.stringify(status)}, ` +
          `ICE ${peer.pc.iceConnectionState}, DTLS ${peer.pc.connectionState}`,
      );
    }
    return client;
  };
  return {
    label: "ours",
    child,
    publish: (publisher) => join(publisher, "PUBLISHING"),
    play: (player) => join(player, "PLAYING"),
  };
}

async function weriftFanout(): Promise<Fanout> {
  const child = await startChild("--werift");
  const join = async (peer: TestPublisher | TestPlayer) => {
    // The helpers speak to a WCS client; the relay needs only its send and setRemoteSDP.
    const signaling = new RelaySignaling(child) as unknown as WcsClient;
    if (peer instanceof TestPublisher) {
      await peer.publish(signaling, {});
      peer.start();
    } else await peer.play(signaling, {});
    await waitFor(
      () => peer.pc.connectionState === "connected",
      relayConnectTimeoutMs,
      "a werift relay peer to connect",
    );
    return signaling;
  };
  return { label: "werift", child, publish: join, play: join };
}

/**
 * One publisher and N subscribers through `fanout`, N growing by `ns`; with `stopAtLoss`,
 * until a step loses 1% or more.
 */
async function measureFanout(
  fanout: Fanout,
  ns: readonly number[],
  stopAtLoss: boolean,
): Promise<StepResult[]> {
  const started = performance.now();
  const server = fanout.child;
  const publisher = new TestPublisher("VP8", 4);
  const pubSignaling = await fanout.publish(publisher);
  const players: { player: TestPlayer; signaling: { close(): Promise<unknown> } }[] = [];

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
      deliveredPerCore: cores > 0 ? received / seconds / cores : 0,
      p50: stats.p50,
      p99: stats.p99,
    };
  };

  const idle = await window(0);
  const results: StepResult[] = [];
  console.log(`\n${fanout.label}:`);
  console.log(
    "subscribers  in-pkts/s  server-cores  delivered/core-s  loss    cpu/sub(ms/s)  rss/sub(KB)  added-latency p50/p99 (ms)",
  );
  for (const n of ns) {
    if (stopAtLoss && performance.now() - started > budgetMs) break;
    // werift's DTLS handshakes in this process fail now and then under full media load.
    publisher.pause();
    while (players.length < n) {
      const player = new TestPlayer("VP8");
      players.push({ player, signaling: await fanout.play(player) });
    }
    publisher.start();
    const r = await window(n);
    results.push(r);
    const cpuPerSub = (r.cores - idle.cores) / n * 1000;
    const rssPerSub = (r.rssKb - idle.rssKb) / n;
    console.log(
      `${String(n).padStart(11)}  ${Math.round(r.inRate).toString().padStart(9)}  ${
        r.cores.toFixed(2).padStart(12)
      }  ${Math.round(r.deliveredPerCore).toString().padStart(16)}  ${
        (r.loss * 100).toFixed(2).padStart(5)
      }%  ${cpuPerSub.toFixed(1).padStart(13)}  ${Math.round(rssPerSub).toString().padStart(11)}  ${
        fanout.label === "ours" ? `${r.p50.toFixed(3)} / ${r.p99.toFixed(3)}` : "not measured"
      }`,
    );
    if (stopAtLoss && r.loss >= maxLoss) break;
  }
  console.log(`idle (publisher only): ${idle.cores.toFixed(2)} cores`);

  await Promise.all(players.map(async ({ player, signaling }) => {
    await player.close();
    await signaling.close();
  }));
  await publisher.close();
  await pubSignaling.close();
  // Sessions end (and their peers close) as the server sees the sockets close.
  await new Promise((r) => setTimeout(r, 1000));
  if (fanout.label === "ours") {
    const { peers } = await server.ask("stats");
    console.log(`server peer connections left after closing: ${peers}`);
  }
  await server.stop();
  return results;
}

/** The largest step under 1% loss. */
function lastGood(results: StepResult[]): StepResult | undefined {
  return results.filter((r) => r.loss < maxLoss).at(-1);
}

async function run(): Promise<void> {
  const ours = only === "werift" ? [] : await measureFanout(await oursFanout(), steps, true);
  // werift's own fan-out takes the same steps as ours did, whatever its loss, so that every
  // N of ours has its anchor.
  const werift = only === "ours"
    ? []
    : await measureFanout(await weriftFanout(), ours.length ? ours.map((r) => r.n) : steps, false);
  const good = lastGood(ours);
  if (good) {
    console.log(
      `\nours: largest N under 1% loss: ${good.n} subscribers on ${good.cores.toFixed(2)} cores ` +
        `= ${Math.round(good.n / Math.max(good.cores, 0.01))} subscribers per core, ` +
        `${Math.round(good.deliveredPerCore)} packets delivered/s per core`,
    );
  } else console.log("\nours: no step stayed under 1% loss");
  // At the largest N ours kept under 1% loss: packets delivered per core-second on each side.
  const w = good && werift.find((x) => x.n === good.n);
  if (good && w) {
    console.log(
      `vs werift's own fan-out at N=${good.n}: ours ${
        Math.round(good.deliveredPerCore)
      } packets delivered/s per core (loss ${(good.loss * 100).toFixed(2)}%), werift ${
        Math.round(w.deliveredPerCore)
      } (loss ${(w.loss * 100).toFixed(2)}%); ratio ours/werift ${
        (good.deliveredPerCore / Math.max(w.deliveredPerCore, 1)).toFixed(2)
      }`,
    );
  } else console.log("no ratio: ours kept no step under 1% loss, or werift was not run");
  // werift keeps timers (ICE consent, DTLS) a while after close; nothing is left to wait for.
  Deno.exit(0);
}

if (Deno.args[0] === "--serve") await serve();
else if (Deno.args[0] === "--werift") await serveWerift();
else await run();
