/**
 * `/metrics` cost. (1) Scrape time and size with 1,000 streams and 10,000 readers: synthetic
 * Streams registered in-process (H.264 + AAC, frames pushed so every counter has values),
 * the exposition read through the REST handler as Prometheus would, with and without
 * per-stream labels. (2) REST throughput with the metrics middleware on and off: the server
 * in a child process, wrk on POST /rest-api/stream/find_all, on/off runs alternated so the
 * machine's other load falls on both; the ratio of medians is the figure (goal >= 0.95).
 */
import { type Config, configSchema } from "../config.ts";
import { silentLogger } from "../core/log.ts";
import { createServices, type Services } from "../core/services.ts";
import { createRestHandler } from "../routes/http.ts";
import { operations } from "../routes/mod.ts";
import type { MediaFrame, Track } from "../media/frame.ts";
import { Stream, type StreamReader } from "../media/stream.ts";
import type { ReaderKind } from "../media/stream_tally.ts";
import { freePort, spawnDeno, waitForHttp } from "../tests/helpers/process.ts";
import { requireWrk, runWrk } from "./support/wrk.ts";

const streamCount = 1_000;
const readersPerStream = 10;
const scrapes = 20;
const readerKinds: ReaderKind[] = ["webrtc", "rtmp", "hls", "recorder", "rtsp"];
const wrkSeconds = 5;
const wrkConnections = 50;
const rounds = 3;
const startTimeoutMs = 10_000;

const tracks: Track[] = [
  { id: 0, kind: "video", codec: "H264", clockRate: 90000, width: 640, height: 360 },
  { id: 1, kind: "audio", codec: "AAC", clockRate: 48000, sampleRate: 48000, channels: 2 },
];

/** A server's services holding `streamCount` streams of `readersPerStream` readers each. */
function populated(config: Config): { services: Services; readers: StreamReader[] } {
  const services = createServices(config, silentLogger);
  const readers: StreamReader[] = [];
  for (let i = 0; i < streamCount; i++) {
    const stream = new Stream({
      name: `bench-${i}`,
      mediaSessionId: crypto.randomUUID(),
      tracks,
      mediaProvider: i % 2 === 0 ? "RTMP" : "RTSP",
      stopProvider: () => Promise.resolve(),
    });
    services.streams.add(stream);
    for (let r = 0; r < readersPerStream; r++) {
      readers.push(stream.reader(undefined, readerKinds[r % readerKinds.length]));
    }
    for (let f = 0; f < 30; f++) {
      const frame: MediaFrame = {
        trackId: f % 3 === 2 ? 1 : 0,
        codec: f % 3 === 2 ? "AAC" : "H264",
        pts: f * 3600,
        dts: f * 3600,
        keyframe: f === 0,
        data: new Uint8Array(f === 0 ? 20_000 : 2_000),
      };
      stream.push(frame);
    }
  }
  return { services, readers };
}

/** Median of `values`. */
function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

async function scrapeFigures(streamLabels: boolean) {
  const config = configSchema.parse({ metrics: { streamLabels } });
  const { services, readers } = populated(config);
  const handler = createRestHandler({ services, operations });
  const request = () => new Request("http://127.0.0.1/metrics", { headers: { host: "127.0.0.1" } });
  let bytes = 0;
  const times: number[] = [];
  for (let i = 0; i < scrapes + 2; i++) {
    const started = performance.now();
    const res = await handler(request());
    const text = await res.text();
    if (res.status !== 200) throw new Error(`/metrics answered ${res.status}: ${text}`);
    if (i >= 2) times.push(performance.now() - started); // the first two warm up
    bytes = new TextEncoder().encode(text).length;
  }
  for (const reader of readers) reader.close();
  return { bytes, p50Ms: median(times), maxMs: Math.max(...times) };
}

async function throughput(metricsEnabled: boolean): Promise<number> {
  const env: Record<string, string> = Object.fromEntries(
    ["REST", "WS", "WSS", "HLS", "RTMP", "RTSP"].map((p) => [
      `MEDIASERVER_PORTS_${p}`,
      String(freePort()),
    ]),
  );
  env.MEDIASERVER_METRICS_ENABLED = String(metricsEnabled);
  const rest = `http://127.0.0.1:${env.MEDIASERVER_PORTS_REST}`;
  const child = spawnDeno(["run", "-A", "main.ts"], env, "null");
  try {
    await waitForHttp(`${rest}/health`, startTimeoutMs);
    const url = `${rest}/rest-api/stream/find_all`;
    await runWrk({ url, durationSeconds: 1, connections: wrkConnections, method: "POST" });
    const result = await runWrk({
      url,
      durationSeconds: wrkSeconds,
      connections: wrkConnections,
      method: "POST",
    });
    if (result.errors > 0) throw new Error(`${result.errors} errors`);
    return result.requestsPerSecond;
  } finally {
    child.kill("SIGTERM");
    await child.status;
  }
}

console.log(
  `/metrics scrape, ${streamCount} streams, ${streamCount * readersPerStream} readers ` +
    `(median of ${scrapes}, in-process through the REST handler):`,
);
for (const streamLabels of [false, true]) {
  const r = await scrapeFigures(streamLabels);
  console.log(
    `  streamLabels ${String(streamLabels).padEnd(5)}  ${r.p50Ms.toFixed(1)} ms p50, ` +
      `${r.maxMs.toFixed(1)} ms max, ${(r.bytes / 1024).toFixed(1)} KiB`,
  );
}

await requireWrk();
const on: number[] = [];
const off: number[] = [];
for (let round = 0; round < rounds; round++) {
  off.push(await throughput(false));
  on.push(await throughput(true));
}
console.log(
  `REST throughput, POST /rest-api/stream/find_all (wrk -t1 -c${wrkConnections} -d${wrkSeconds}s, ` +
    `${rounds} alternated rounds, medians):`,
);
console.log(`  metrics off  ${median(off).toFixed(0)} req/s  (${off.map((n) => n.toFixed(0))})`);
console.log(`  metrics on   ${median(on).toFixed(0)} req/s  (${on.map((n) => n.toFixed(0))})`);
console.log(`  ratio on/off ${(median(on) / median(off)).toFixed(3)} (goal >= 0.95)`);
