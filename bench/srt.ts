/**
 * SRT receive cost: our stack against srt-live-transmit (libsrt, C++) in one run.
 *
 * Two ffmpeg callers send the same 5 Mbit/s MPEG-TS (H.264 + AAC, padded to a constant
 * mux rate) in real time, one into our listener (bench/support/srt_receiver.ts, a process of
 * its own that discards the payloads) and one into srt-live-transmit relaying to /dev/null,
 * each through a loss relay on 127.0.0.1 dropping 0% then 2% of data packets. CPU of both
 * receiving processes is measured over the same window (share of one core per stream); the
 * ratio is ours over theirs. Then the path of both is cut for 500 ms: recovery is the time
 * from the end of the outage to the first payload delivered again.
 * Run: deno run -A bench/srt.ts
 */
import { cpuTicks } from "./support/process_tree.ts";
import { LossRelay } from "../media/protocols/srt/loss_relay.ts";
import { makeTsClip, requireSrtTools } from "../media/protocols/srt/interop_fixtures.ts";

/** Mux rate of the stream, bit/s. */
const streamBps = 5_000_000;
const latencyMs = 120;
/** Time the streams run before the window opens, ms. */
const warmupMs = 3000;
/** Measuring window, ms. */
const windowMs = 8000;
/** Length of the cut path, ms. */
const outageMs = 500;
/** Clock ticks per second of /proc/<pid>/stat (USER_HZ on Linux). */
const clockTicksPerSecond = 100;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

requireSrtTools();
const dir = await Deno.makeTempDir({ prefix: "bench_srt_" });
const clip = `${dir}/clip.ts`;
await makeTsClip(clip, 10, 4500);

/** A receiver whose output is read line by line (ours) or as bytes (srt-live-transmit). */
interface Receiver {
  pid: number;
  port: number;
  /** Delivery pauses longer than 100 ms, ms, as they end. */
  gaps: number[];
  /** Payload bytes delivered so far. */
  bytes: () => number;
  /** Packets given up and retransmissions received so far (ours only). */
  counters: () => { dropped: number; retransmitted: number } | undefined;
  stop: () => Promise<void>;
}

async function startOurs(): Promise<Receiver> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("./support/srt_receiver.ts", import.meta.url).pathname,
      String(latencyMs),
    ],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const gaps: number[] = [];
  let bytes = 0;
  let counters = { dropped: 0, retransmitted: 0 };
  const port = Promise.withResolvers<number>();
  const reading = (async () => {
    let text = "";
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
      text += chunk;
      const lines = text.split("\n");
      text = lines.pop()!;
      for (const line of lines) {
        const [key, value, dropped, retransmitted] = line.split(" ");
        if (key === "port") port.resolve(Number(value));
        if (key === "gap") gaps.push(Number(value));
        if (key === "bytes") {
          bytes = Number(value);
          counters = { dropped: Number(dropped), retransmitted: Number(retransmitted) };
        }
      }
    }
  })();
  return {
    pid: child.pid,
    port: await port.promise,
    gaps,
    bytes: () => bytes,
    counters: () => counters,
    stop: async () => {
      child.kill("SIGTERM");
      await child.status;
      await reading;
    },
  };
}

async function startSrtLiveTransmit(): Promise<Receiver> {
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (probe.addr as Deno.NetAddr).port;
  probe.close();
  const child = new Deno.Command("srt-live-transmit", {
    args: ["-q", `srt://127.0.0.1:${port}?mode=listener&latency=${latencyMs}`, "file://con"],
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const gaps: number[] = [];
  let bytes = 0;
  let last = 0;
  const reading = (async () => {
    for await (const chunk of child.stdout) {
      const now = performance.now();
      if (last && now - last > 100) gaps.push(Math.round(now - last));
      last = now;
      bytes += chunk.length;
    }
  })();
  await sleep(300); // bound
  return {
    pid: child.pid,
    port,
    gaps,
    bytes: () => bytes,
    counters: () => undefined,
    stop: async () => {
      child.kill("SIGTERM");
      await child.status;
      await reading;
    },
  };
}

function startSender(port: number): Deno.ChildProcess {
  return new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-re", "-stream_loop", "-1", "-i", clip, "-c", "copy"],
      ...["-f", "mpegts", "-muxrate", String(streamBps)],
      `srt://127.0.0.1:${port}?mode=caller&latency=${latencyMs * 1000}&pkt_size=1316`,
    ],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
}

async function run(dropRatio: number, measureOutage: boolean) {
  const ours = await startOurs();
  const theirs = await startSrtLiveTransmit();
  const relays = await Promise.all(
    [ours, theirs].map((r) => LossRelay.open({ targetPort: r.port, dropRatio, seed: 7 })),
  );
  const senders = relays.map((relay) => startSender(relay.port));
  try {
    await sleep(warmupMs);
    const t0 = performance.now();
    const ticks0 = [cpuTicks(ours.pid) ?? 0, cpuTicks(theirs.pid) ?? 0];
    const bytes0 = [ours.bytes(), theirs.bytes()];
    await sleep(windowMs);
    const seconds = (performance.now() - t0) / 1000;
    const ticks1 = [cpuTicks(ours.pid) ?? 0, cpuTicks(theirs.pid) ?? 0];
    const cpu = ticks1.map((t, i) => (t - ticks0[i]) / clockTicksPerSecond / seconds);
    const mbps = [ours.bytes(), theirs.bytes()].map((b, i) => (b - bytes0[i]) * 8 / seconds / 1e6);
    console.log(
      `loss ${dropRatio * 100}%: CPU per 5 Mbit/s stream ours ${(cpu[0] * 100).toFixed(1)}% ` +
        `(${mbps[0].toFixed(2)} Mbit/s delivered), srt-live-transmit ${
          (cpu[1] * 100).toFixed(1)
        }% ` +
        `(${mbps[1].toFixed(2)} Mbit/s); ratio ${(cpu[0] / cpu[1]).toFixed(2)}; ours: ` +
        `${ours.counters()?.retransmitted} retransmissions received, ` +
        `${ours.counters()?.dropped} packets given up`,
    );
    if (measureOutage) {
      const before = [ours.gaps.length, theirs.gaps.length];
      for (const relay of relays) relay.blackout = true;
      await sleep(outageMs);
      for (const relay of relays) relay.blackout = false;
      await sleep(2000);
      // Packets sent just before the cut play `latencyMs` later, the first ones after it as
      // late when nothing more is lost: the output stalls for the outage plus what recovery
      // added (a few ms either way from the stream's own burstiness).
      const stalls = [ours, theirs].map((r, i) => Math.max(0, ...r.gaps.slice(before[i])));
      const recovery = stalls.map((stall) => Math.max(0, stall - outageMs));
      console.log(
        `outage ${outageMs} ms: output stalled ${stalls[0]} ms (ours), ${stalls[1]} ms ` +
          `(srt-live-transmit): recovery ${recovery[0]} ms, ${recovery[1]} ms`,
      );
    }
  } finally {
    for (const sender of senders) {
      sender.kill("SIGTERM");
      await sender.status;
    }
    await Promise.all(relays.map((r) => r.close()));
    await ours.stop();
    await theirs.stop();
  }
}

try {
  await run(0, true);
  await run(0.02, false);
} finally {
  await Deno.remove(dir, { recursive: true });
}
