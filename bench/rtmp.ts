/**
 * RTMP fan-out: one ~2 Mbps H.264+AAC stream (ffmpeg, copied in real time from a CBR file
 * made at start) played by a growing number of RTMP players on 127.0.0.1, served by our
 * server and by nginx-rtmp in the same run. The players are light readers of our own (RTMP
 * client that reassembles and drops the messages), all in this process, so the server's
 * figures are its own: CPU time (utime + stime from /proc/<pid>/stat) and resident memory
 * (lowest sampled in the window) of the serving process, idle and at each step. Per player figures are the least-squares slope
 * from idle through the steps every player kept up with, so no single window decides them.
 * A step keeps up when every player received at least 95% of the source's bytes over the
 * window. Memory is also given as the slope over the steps with players alone ("from the first
 * step"): what one more player costs, without the costs of having any player at all (the
 * stream's shared ring, compiled code), which the fit from idle spreads over the players.
 * Anchors: SRS reports 4,000 players per core, nginx-rtmp 2,400.
 *
 * `RTMP_BENCH_PLAYERS` sets the steps, comma-separated (default 50,200,500); steps the open
 * file limit cannot hold are left out. `RTMP_BENCH_TRANSPORTS` the `rtmp.transport` values our
 * server runs with, one after the other in the same run (default `auto`; `ffi,deno` compares
 * the write paths).
 */
import {
  fanOut,
  fanOutLines,
  keepUpShare,
  makeSource,
  measureMs,
  perPlayer,
  playerSteps,
  publishLoop,
  type Result,
  sourceSeconds,
  stopPublisher,
  videoKbps,
  waitUntilPlayable,
} from "./support/rtmp_fanout.ts";
import { startNginxRtmp } from "../tests/helpers/nginx_rtmp.ts";
import { ServerProcess } from "../tests/helpers/server_process.ts";

const steps = playerSteps("RTMP_BENCH_PLAYERS", "50,200,500");
const transports = (Deno.env.get("RTMP_BENCH_TRANSPORTS") ?? "auto").split(",").map((t) => {
  const name = t.trim();
  if (name !== "auto" && name !== "ffi" && name !== "deno") {
    throw new Error(`RTMP_BENCH_TRANSPORTS: ${name} is not auto, ffi or deno`);
  }
  return name;
});

/** Publishes the source to `url` and measures the fan-out of `pids` serving it. */
async function run(
  label: string,
  url: string,
  pids: () => number[],
  source: string,
  sourceBytesPerSecond: number,
): Promise<Result> {
  const publisher = publishLoop(source, url);
  try {
    await waitUntilPlayable(url, label);
    return await fanOut(label, url, pids, steps, sourceBytesPerSecond);
  } finally {
    await stopPublisher(publisher);
  }
}

const source = await makeSource();
try {
  const sourceBytesPerSecond = (await Deno.stat(source)).size / sourceSeconds;
  const oursResults: Result[] = [];
  for (const transport of transports) {
    // Run as `deno task start` runs it, every port its own (other servers may hold the
    // defaults).
    const dir = await Deno.makeTempDir({ prefix: "bench-rtmp-" });
    const ours = new ServerProcess("ours", dir, { log: { level: "warn" }, rtmp: { transport } });
    try {
      await ours.start();
      oursResults.push(
        await run(
          transports.length > 1 ? `ours ${transport}` : "ours",
          `${ours.rtmpUrl}/bench`,
          () => [ours.pid],
          source,
          sourceBytesPerSecond,
        ),
      );
    } finally {
      await ours.stop();
      await Deno.remove(dir, { recursive: true });
    }
  }
  const nginx = await startNginxRtmp();
  let nginxResult: Result;
  try {
    nginxResult = await run(
      "nginx-rtmp",
      `${nginx.liveUrl}/bench`,
      () => nginxPids(nginx.pid),
      source,
      sourceBytesPerSecond,
    );
  } finally {
    await nginx.stop();
  }
  console.log(
    `RTMP fan-out: 1 stream (${
      (sourceBytesPerSecond * 8 / 1e6).toFixed(2)
    } Mbit/s: ${videoKbps} kbit/s H.264 + 96 kbit/s AAC) to ${
      steps.join(", ")
    } players, 127.0.0.1, ${measureMs / 1000} s windows, kept up = at least ${
      keepUpShare * 100
    }% of the source's bytes`,
  );
  for (const result of [...oursResults, nginxResult]) {
    for (const line of fanOutLines(result)) console.log(line);
  }
  const b = perPlayer(nginxResult);
  for (const result of oursResults) {
    const a = perPlayer(result);
    console.log(
      `ratio ${result.label}/nginx per player: CPU ${
        b.cpu > 0 ? (a.cpu / b.cpu).toFixed(2) : "n/a"
      }, memory ${(a.memKb / Math.max(1, b.memKb)).toFixed(2)} (from the first step: ${
        (a.memKbMarginal / Math.max(1, b.memKbMarginal)).toFixed(2)
      }) (anchors: SRS 4,000 players/core, nginx-rtmp 2,400)`,
    );
  }
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
