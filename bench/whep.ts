/**
 * WHEP players next to Web SDK players on the fast path: one WebRTC stream (a werift WHIP
 * publisher sending a real 1280x720 25 fps H.264 clip at ~2 Mbit/s plus Opus, looped) played
 * by N werift players that POST their offer to /whep/<stream>, and by N werift players that
 * speak the Web SDK's WebSocket protocol (playStream), in alternated rounds, all on 127.0.0.1
 * with H.264 + Opus offered, so the server forwards the publisher's RTP to each without
 * depacketizing. The server runs in its own process (this file with `--serve`), so its CPU
 * and memory are its own; the publisher and the players share this one.
 *
 * Reports per kind (means of its rounds): server CPU per player (share of one core beyond the
 * publisher alone), players per core at that rate (1 / CPU per player: the N at which the
 * players alone would take one core), V8 heap per player (in use after a GC with the players,
 * minus once they left), resident memory growth per player (noisier: the allocator keeps
 * what it got), packets each player got per second and the worst round's loss; then the
 * ratios WHEP / SDK.
 *
 * Run: deno run -A bench/whep.ts [--players N] (default 20)
 */
import { silentLogger } from "../core/log.ts";
import { startTestServer, testConfig } from "../tests/helpers/test_server.ts";
import { ClipPublisher, makeH264OpusClip } from "../tests/helpers/webrtc_clip_publisher.ts";
import { WcsClient } from "../tests/helpers/wcs_client.ts";
import { nextStatus, TestPlayer, waitFor } from "../tests/webrtc_helpers.ts";
import { lines } from "./support/lines.ts";
import { cpuTicks } from "./support/process_tree.ts";

/** Name of the published stream. */
const streamName = "bench";
/** Time the players run before the window opens, in milliseconds. */
const warmupMs = 3000;
/** Measuring window, in milliseconds. */
const windowMs = 8000;
/** Time given to the server to close the players' peers before the next kind, in milliseconds. */
const settleMs = 2000;
/** Longest wait for a player's first packets, in milliseconds. */
const playerStartTimeoutMs = 15_000;
/** Clock ticks per second of /proc/<pid>/stat (USER_HZ on Linux). */
const clockTicksPerSecond = 100;
/** The rounds, alternated so that the server's warm-up and other load weigh on both kinds. */
const rounds = ["WHEP", "SDK", "WHEP", "SDK"] as const;
/** A kind of player. */
type Kind = (typeof rounds)[number];
/** H.264 bit rate of the source, in kbit/s. */
const videoKbps = 2000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Child mode: the server, until its stdin closes. Each "mem" line is answered with its
 * memory after a full garbage collection (run with --expose-gc): resident and V8 heap in
 * use, in bytes.
 */
async function serve(): Promise<void> {
  const config = testConfig();
  const server = await startTestServer(config, silentLogger);
  console.log(JSON.stringify({ rest: server.restUrl, ws: server.wsUrl }));
  const gc = (globalThis as { gc?: () => void }).gc!;
  for await (const line of lines(Deno.stdin.readable)) {
    if (line !== "mem") continue;
    gc();
    const { rss, heapUsed } = Deno.memoryUsage();
    console.log(JSON.stringify({ rss, heapUsed }));
  }
  await server.stop();
  await Deno.remove(config.folders.media.replace(/\/[^/]+$/, ""), { recursive: true });
  // werift keeps timers (ICE consent, DTLS) a while after close; nothing is left to wait for.
  Deno.exit(0);
}

/** The server child: its pid, and its memory on request. */
interface ServerChild {
  pid: number;
  memory(): Promise<{ rss: number; heapUsed: number }>;
}

/** A connected player and how to end it. */
interface Connected {
  player: TestPlayer;
  close(): Promise<void>;
}

/** A werift player of the stream over WHEP; ended with DELETE on its Location. */
async function connectWhep(restUrl: string): Promise<Connected> {
  const player = new TestPlayer("H264");
  await player.pc.setLocalDescription(await player.pc.createOffer());
  const res = await fetch(`${restUrl}/whep/${streamName}`, {
    method: "POST",
    headers: { "Content-Type": "application/sdp" },
    body: player.pc.localDescription!.sdp,
  });
  const answer = await res.text();
  if (res.status !== 201) throw new Error(`WHEP ${res.status}: ${answer}`);
  const location = new URL(res.headers.get("location")!, restUrl).href;
  await player.pc.setRemoteDescription({ type: "answer", sdp: answer });
  return {
    player,
    close: async () => {
      await (await fetch(location, { method: "DELETE" })).body?.cancel();
      await player.close();
    },
  };
}

/** A werift player of the stream over the Web SDK protocol; ended with its socket. */
async function connectSdk(wsUrl: string): Promise<Connected> {
  const { client } = await WcsClient.connect(wsUrl);
  const player = new TestPlayer("H264");
  const id = crypto.randomUUID();
  await player.play(client, { mediaSessionId: id, name: streamName });
  const status = await nextStatus(client, id, playerStartTimeoutMs);
  if (status.status !== "PLAYING") throw new Error(`SDK player: ${JSON.stringify(status)}`);
  return {
    player,
    close: async () => {
      await player.close();
      await client.close();
    },
  };
}

/** What the server spent on one round of players of a kind over the window. */
interface Sample {
  kind: Kind;
  /** Server cores in use. */
  cores: number;
  /** Server RSS growth from just before the players joined to the window's end, in bytes. */
  rssGrowth: number;
  /** V8 heap in use (after a GC) with the players, minus once they were gone, in bytes. */
  heapHeld: number;
  /** Packets each player got per second. */
  packetsPerPlayer: number;
  /** Share of the publisher's packets the players did not get. */
  loss: number;
}

/** Server CPU over `ms`, in cores, with the publisher's packets and bytes sent meanwhile. */
async function window(pid: number, publisher: ClipPublisher, ms: number) {
  const ticks = cpuTicks(pid)!;
  const packets = publisher.packets;
  const bytes = publisher.payloadBytes;
  const startMs = performance.now();
  await sleep(ms);
  const seconds = (performance.now() - startMs) / 1000;
  return {
    seconds,
    cores: (cpuTicks(pid)! - ticks) / clockTicksPerSecond / seconds,
    packets: publisher.packets - packets,
    kbps: (publisher.payloadBytes - bytes) * 8 / 1000 / seconds,
  };
}

/** Connects `n` players with `connect`, measures the server over the window, ends them. */
async function measure(
  kind: Kind,
  n: number,
  server: ServerChild,
  publisher: ClipPublisher,
  connect: () => Promise<Connected>,
): Promise<Sample> {
  const before = await server.memory();
  const players: Connected[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const p = await connect();
      players.push(p);
      await waitFor(() => p.player.received.video > 0, playerStartTimeoutMs, `${kind} player ${i}`);
    }
    await sleep(warmupMs);
    const received = () =>
      players.reduce((sum, p) => sum + p.player.received.video + p.player.received.audio, 0);
    const receivedBefore = received();
    const w = await window(server.pid, publisher, windowMs);
    const got = received() - receivedBefore;
    const held = await server.memory();
    await Promise.all(players.splice(0).map((p) => p.close()));
    await sleep(settleMs);
    const after = await server.memory();
    return {
      kind,
      cores: w.cores,
      rssGrowth: held.rss - before.rss,
      heapHeld: held.heapUsed - after.heapUsed,
      packetsPerPlayer: got / n / w.seconds,
      loss: Math.max(0, 1 - got / (w.packets * n)),
    };
  } finally {
    await Promise.all(players.map((p) => p.close()));
  }
}

/** The mean of `values`. */
const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;

async function run(n: number): Promise<void> {
  const clip = await makeH264OpusClip({ seconds: 4, width: 1280, height: 720, videoKbps });
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--v8-flags=--expose-gc", new URL(import.meta.url).pathname, "--serve"],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const out = lines(child.stdout);
  const writer = child.stdin.getWriter();
  const readLine = async () => JSON.parse((await out.next()).value ?? "null");
  const { rest, ws } = await readLine() as { rest: string; ws: string };
  const server: ServerChild = {
    pid: child.pid,
    async memory() {
      await writer.write(new TextEncoder().encode("mem\n"));
      return await readLine();
    },
  };
  const publisher = new ClipPublisher(clip);
  try {
    await publisher.publish(rest, streamName);
    await waitFor(() => publisher.pc.connectionState === "connected", 10_000, "publisher");
    await sleep(warmupMs);
    const idle = await window(server.pid, publisher, windowMs);
    const connect = { WHEP: () => connectWhep(rest), SDK: () => connectSdk(ws) };
    const samples: Sample[] = [];
    for (const kind of rounds) {
      samples.push(await measure(kind, n, server, publisher, connect[kind]));
    }
    console.log(
      `source: 1280x720 25 fps H.264 + Opus over WHIP, ${idle.kbps.toFixed(0)} kbit/s ` +
        `RTP payload; server with the publisher alone: ${(idle.cores * 100).toFixed(1)}% of a core`,
    );
    console.log(
      "kind  players  server-cpu  cpu/player  players/core  heap/player  rss/player  pkts/s each  loss",
    );
    const kib = (bytes: number) => `${(bytes / 1024 / n).toFixed(0)} KiB`;
    const per = (["WHEP", "SDK"] as const).map((kind) => {
      const mine = samples.filter((s) => s.kind === kind);
      const cores = mean(mine.map((s) => s.cores));
      const cpuPerPlayer = (cores - idle.cores) / n;
      const heap = mean(mine.map((s) => s.heapHeld));
      const rss = mean(mine.map((s) => s.rssGrowth));
      console.log([
        kind.padEnd(4),
        String(n).padStart(7),
        `${(cores * 100).toFixed(1)}%`.padStart(10),
        `${(cpuPerPlayer * 100).toFixed(2)}%`.padStart(10),
        (1 / cpuPerPlayer).toFixed(0).padStart(12),
        kib(heap).padStart(11),
        kib(rss).padStart(10),
        mean(mine.map((s) => s.packetsPerPlayer)).toFixed(0).padStart(11),
        `${(Math.max(...mine.map((s) => s.loss)) * 100).toFixed(2)}%`,
      ].join("  "));
      return { playersPerCore: 1 / cpuPerPlayer, heap };
    });
    const [whep, sdk] = per;
    console.log(
      `WHEP / SDK: players per core ${(whep.playersPerCore / sdk.playersPerCore).toFixed(2)}, ` +
        `heap per player ${(whep.heap / sdk.heap).toFixed(2)} ` +
        `(means of ${rounds.length / 2} rounds each, alternated)`,
    );
  } finally {
    await publisher.close();
    await writer.close();
    await child.status;
    await out.return(undefined);
  }
  Deno.exit(0);
}

const playersFlag = Deno.args.indexOf("--players");
if (Deno.args[0] === "--serve") await serve();
else await run(playersFlag >= 0 ? Number(Deno.args[playersFlag + 1]) : 20);
