/**
 * RTMP fan-out: one ~2 Mbps H.264+AAC stream (ffmpeg, copied in real time from a CBR file
 * made at start) played by N RTMP players on 127.0.0.1, served by our server and by
 * nginx-rtmp in the same run. The players are light readers of our own (RTMP client that
 * reassembles and drops the messages), all in this process, so the server's figures are
 * its own: CPU and resident memory of the serving process with N players minus with none,
 * per player. Anchors: SRS reports 4,000 players per core, nginx-rtmp 2,400.
 *
 * `RTMP_BENCH_PLAYERS` sets N (default 50).
 */
import { openRtmpClient, type RtmpClientSession } from "../media/protocols/rtmp/client.ts";
import { parseRtmpUrl } from "../media/protocols/rtmp/url.ts";
import { startNginxRtmp } from "../tests/helpers/nginx_rtmp.ts";
import { freePort, spawnDeno, waitForHttp } from "../tests/helpers/process.ts";

const players = Number(Deno.env.get("RTMP_BENCH_PLAYERS") ?? 50);
/** Length of each measurement window, in milliseconds. */
const measureMs = 5_000;
/** Time given to players to settle before measuring, in milliseconds. */
const warmupMs = 2_000;
/** Video bitrate of the source, in kbit/s (plus 96 kbit/s AAC). */
const videoKbps = 1900;
const startTimeoutMs = 15_000;
const clockTicksPerSecond = 100;

interface Usage {
  cpuSeconds: number;
  rssKb: number;
}

function usage(pids: number[]): Usage {
  let ticks = 0;
  let rssKb = 0;
  for (const pid of pids) {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    ticks += Number(fields[11]) + Number(fields[12]); // utime, stime
    const status = Deno.readTextFileSync(`/proc/${pid}/status`);
    rssKb += Number(status.match(/VmRSS:\s+(\d+)/)?.[1] ?? 0);
  }
  return { cpuSeconds: ticks / clockTicksPerSecond, rssKb };
}

/** CPU share (cores) and RSS of `pids` over `ms`. */
async function measure(pids: number[], ms: number): Promise<{ cores: number; rssKb: number }> {
  const before = usage(pids);
  const started = performance.now();
  await new Promise((r) => setTimeout(r, ms));
  const after = usage(pids);
  const seconds = (performance.now() - started) / 1000;
  return { cores: (after.cpuSeconds - before.cpuSeconds) / seconds, rssKb: after.rssKb };
}

async function makeSource(): Promise<string> {
  const path = await Deno.makeTempFile({ suffix: ".flv" });
  const out = await new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25"],
      ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "10"],
      ...["-c:v", "libx264", "-preset", "ultrafast", "-g", "50", "-pix_fmt", "yuv420p"],
      ...["-b:v", `${videoKbps}k`, "-minrate", `${videoKbps}k`, "-maxrate", `${videoKbps}k`],
      ...["-bufsize", `${videoKbps}k`, "-x264-params", "nal-hrd=cbr", "-threads", "2"],
      ...["-c:a", "aac", "-b:a", "96k", "-f", "flv", path],
    ],
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!out.success) throw new Error(new TextDecoder().decode(out.stderr));
  return path;
}

function publishLoop(source: string, url: string): Deno.ChildProcess {
  return new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-re", "-stream_loop", "-1", "-i", source],
      ...["-c", "copy", "-f", "flv", url],
    ],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
}

/** A player that reads and drops everything; counts the media bytes it got. */
class LightPlayer {
  bytes = 0;
  #session: RtmpClientSession | undefined;
  #done: Promise<void> | undefined;

  async open(url: string): Promise<void> {
    this.#session = await openRtmpClient(parseRtmpUrl(url, "url"), "play");
    const session = this.#session;
    this.#done = (async () => {
      try {
        for await (const m of session.messages) this.bytes += m.payload.length;
      } catch {
        // Closed at the end of the run.
      }
    })();
  }

  async close(): Promise<void> {
    this.#session?.conn.close();
    await this.#done;
  }
}

interface Result {
  label: string;
  idle: { cores: number; rssKb: number };
  loaded: { cores: number; rssKb: number };
  mbpsPerPlayer: number;
}

async function run(label: string, url: string, pids: () => number[], source: string) {
  const publisher = publishLoop(source, url);
  const list: LightPlayer[] = [];
  try {
    const probe = new LightPlayer();
    const deadline = Date.now() + startTimeoutMs;
    for (;;) {
      try {
        await probe.open(url);
        await new Promise((r) => setTimeout(r, 1000));
        await probe.close();
        if (probe.bytes > 0) break;
      } catch {
        // Not published yet.
      }
      if (Date.now() > deadline) throw new Error(`${label}: the stream never played`);
      await new Promise((r) => setTimeout(r, 300));
    }
    const idle = await measure(pids(), measureMs);
    for (let i = 0; i < players; i++) {
      const player = new LightPlayer();
      await player.open(url);
      list.push(player);
    }
    await new Promise((r) => setTimeout(r, warmupMs));
    const bytesBefore = list.reduce((sum, p) => sum + p.bytes, 0);
    const loaded = await measure(pids(), measureMs);
    const bytes = list.reduce((sum, p) => sum + p.bytes, 0) - bytesBefore;
    const mbpsPerPlayer = bytes * 8 / (measureMs / 1000) / players / 1e6;
    return { label, idle, loaded, mbpsPerPlayer } satisfies Result;
  } finally {
    await Promise.all(list.map((p) => p.close()));
    try {
      publisher.kill("SIGKILL");
    } catch {
      // Exited already.
    }
    await publisher.status;
  }
}

function perPlayer(r: Result) {
  const cpu = Math.max(0, r.loaded.cores - r.idle.cores) / players;
  const memKb = Math.max(0, r.loaded.rssKb - r.idle.rssKb) / players;
  return { cpu, memKb, perCore: cpu > 0 ? (1 / cpu).toFixed(0) : "n/a (below the tick)" };
}

function line(r: Result): string {
  const p = perPlayer(r);
  return `${r.label.padEnd(12)} idle ${(r.idle.cores * 100).toFixed(1).padStart(5)}% CPU ${
    (r.idle.rssKb / 1024).toFixed(1).padStart(6)
  } MiB | ${players} players ${(r.loaded.cores * 100).toFixed(1).padStart(5)}% CPU ${
    (r.loaded.rssKb / 1024).toFixed(1).padStart(6)
  } MiB | per player ${(p.cpu * 100).toFixed(3)}% CPU ${p.memKb.toFixed(0)} KiB, ${
    r.mbpsPerPlayer.toFixed(2)
  } Mbit/s received | ~${p.perCore} players/core`;
}

const source = await makeSource();
try {
  const ourRtmp = freePort();
  const ourRest = freePort();
  const env: Record<string, string> = {
    MEDIASERVER_PORTS_REST: String(ourRest),
    MEDIASERVER_PORTS_WS: String(freePort()),
    MEDIASERVER_PORTS_WSS: String(freePort()),
    MEDIASERVER_PORTS_HLS: String(freePort()),
    MEDIASERVER_PORTS_RTMP: String(ourRtmp),
    MEDIASERVER_LOG_LEVEL: "warn",
  };
  const ours = spawnDeno(["run", "-A", "main.ts"], env, "null");
  let oursResult: Result;
  try {
    await waitForHttp(`http://127.0.0.1:${ourRest}/health`, startTimeoutMs);
    oursResult = await run(
      "ours",
      `rtmp://127.0.0.1:${ourRtmp}/live/bench`,
      () => [ours.pid],
      source,
    );
  } finally {
    ours.kill("SIGTERM");
    await ours.status;
  }
  const nginx = await startNginxRtmp();
  let nginxResult: Result;
  try {
    nginxResult = await run(
      "nginx-rtmp",
      `${nginx.liveUrl}/bench`,
      () => nginxPids(nginx.pid),
      source,
    );
  } finally {
    await nginx.stop();
  }
  console.log(
    `RTMP fan-out: 1 stream (${videoKbps} kbit/s H.264 + 96 kbit/s AAC) to ${players} players, 127.0.0.1, ${
      measureMs / 1000
    } s windows`,
  );
  console.log(line(oursResult));
  console.log(line(nginxResult));
  const a = perPlayer(oursResult);
  const b = perPlayer(nginxResult);
  console.log(
    `ratio ours/nginx per player: CPU ${b.cpu > 0 ? (a.cpu / b.cpu).toFixed(2) : "n/a"}, memory ${
      (a.memKb / Math.max(1, b.memKb)).toFixed(2)
    } (anchors: SRS 4,000 players/core, nginx-rtmp 2,400)`,
  );
} finally {
  await Deno.remove(source);
}

/** The nginx master `master` and its workers (children found through /proc). */
function nginxPids(master: number): number[] {
  const pids = [master];
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
      const parent = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (parent === master) pids.push(Number(entry.name));
    } catch {
      // Gone meanwhile.
    }
  }
  return pids;
}
