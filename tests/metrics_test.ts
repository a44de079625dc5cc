/**
 * `GET /metrics` as Prometheus reads it: `promtool check metrics` (Debian package
 * `prometheus`) accepts the exposition, and the counters move when ffmpeg publishes and plays
 * over RTMP, a recording runs, and a lossy WebRTC player joins a WebRTC publisher. The endpoint sits behind REST auth and goes away when off.
 */
import assert from "node:assert/strict";
import { publishRtmp, stopPublisher } from "./helpers/ffmpeg_rtmp.ts";
import { waitFor } from "./helpers/media_fixtures.ts";
import { run } from "../media/formats/test_fixtures.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";
import { sdkConnectionObject, WcsClient } from "./helpers/wcs_client.ts";
import { startHookBackend } from "./helpers/hook_backend.ts";
import {
  startPlaying,
  startPublishing,
  TestPlayer,
  TestPublisher,
  weriftSanitizers,
  withTwoClients,
} from "./webrtc_helpers.ts";

/** Runs `promtool check metrics` on `text`; fails naming the package when promtool is missing. */
async function promtoolCheck(text: string): Promise<void> {
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command("promtool", {
      args: ["check", "metrics"],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw new Error("promtool is not installed: apt-get install prometheus");
    }
    throw err;
  }
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(text));
  await writer.close();
  const out = await child.output();
  const report = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.ok(out.success, `promtool check metrics failed:\n${report}`);
  // Lint findings (naming, units) are printed without failing the exit status.
  assert.equal(report.trim(), "", `promtool findings:\n${report}`);
}

/** The value of the sample `name{labels}` (labels in any order), or undefined. */
function sample(
  text: string,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match || match[1] !== name) continue;
    const have = match[2] ? match[2].split(/,(?=[a-zA-Z_]+=")/) : [];
    if (have.length === wanted.length && wanted.every((w) => have.includes(w))) {
      return Number(match[3]);
    }
  }
  return undefined;
}

async function scrape(server: TestServer, headers: HeadersInit = {}): Promise<string> {
  const res = await fetch(`${server.restUrl}/metrics`, { headers });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("Content-Type") ?? "", /^text\/plain; version=0\.0\.4/);
  return await res.text();
}

async function post(server: TestServer, path: string, body: unknown): Promise<unknown> {
  const res = await server.post(path, body);
  const text = await res.text();
  assert.equal(res.status, 200, `${path}: ${text}`);
  return text === "" ? undefined : JSON.parse(text);
}

Deno.test("metrics: promtool accepts /metrics; RTMP publish, play and a recording move the counters", async () => {
  const server = await startTestServer(testConfig());
  const publisher = publishRtmp(`rtmp://127.0.0.1:${server.rtmpPort}/live/cam`, 30);
  try {
    const idle = await scrape(server);
    await promtoolCheck(idle);
    for (const name of ["process_cpu_seconds_total", "process_resident_memory_bytes"]) {
      assert.ok(sample(idle, name)! > 0, name);
    }
    assert.ok(sample(idle, "process_open_fds")! > 0);
    assert.notEqual(sample(idle, "nodejs_eventloop_lag_seconds"), undefined);
    const before = {
      received: sample(idle, "mediaserver_stream_received_bytes_total", { provider: "RTMP" }) ?? 0,
      played: sample(idle, "mediaserver_reader_delivered_frames_total", { kind: "rtmp" }) ?? 0,
      written: sample(idle, "mediaserver_recorder_written_bytes_total")!,
      files: sample(idle, "mediaserver_recorder_files_total")!,
    };

    const [record] = await waitFor("stream cam", async () => {
      const list = await post(server, "/stream/find", { name: "cam" }) as {
        mediaSessionId: string;
      }[];
      return list.length > 0 ? list : undefined;
    });
    const publishing = await scrape(server);
    assert.equal(
      sample(publishing, "mediaserver_streams", {
        provider: "RTMP",
        status: "PUBLISHING",
        type: "publish",
      }),
      1,
    );

    // A player and a recorder read the stream at the same time.
    const file = await Deno.makeTempFile({ suffix: ".flv" });
    const player = run("ffmpeg", [
      ...["-v", "error", "-y", "-rw_timeout", "10000000"],
      ...["-i", `rtmp://127.0.0.1:${server.rtmpPort}/live/cam`, "-t", "2", "-c", "copy", file],
    ]);
    await post(server, "/stream/startRecording", { mediaSessionId: record.mediaSessionId });
    const during = await waitFor("a player and a recorder", async () => {
      const text = await scrape(server);
      return sample(text, "mediaserver_readers", { kind: "rtmp" }) === 1 &&
          sample(text, "mediaserver_readers", { kind: "recorder" }) === 1
        ? text
        : undefined;
    });
    await promtoolCheck(during);
    await player;
    await Deno.remove(file);
    await new Promise((r) => setTimeout(r, 1500));
    await post(server, "/stream/stopRecording", { mediaSessionId: record.mediaSessionId });

    const after = await scrape(server);
    await promtoolCheck(after);
    assert.ok(
      sample(after, "mediaserver_stream_received_bytes_total", { provider: "RTMP" })! >
        before.received + 50_000,
      "RTMP bytes in",
    );
    // 2 s at 25 fps plus audio, from the cached GOP on.
    assert.ok(
      sample(after, "mediaserver_reader_delivered_frames_total", { kind: "rtmp" })! >=
        before.played + 50,
      "RTMP frames out",
    );
    assert.equal(sample(after, "mediaserver_readers", { kind: "rtmp" }), 0);
    assert.equal(sample(after, "mediaserver_readers", { kind: "recorder" }), 0);
    assert.ok(
      sample(after, "mediaserver_recorder_written_bytes_total")! > before.written + 10_000,
      "recorder bytes",
    );
    assert.equal(sample(after, "mediaserver_recorder_files_total"), before.files + 1);
    assert.ok(
      sample(after, "mediaserver_rest_request_duration_seconds_count", {
        group: "stream",
        operation: "startRecording",
        status: "200",
      })! >= 1,
    );
    assert.ok(
      sample(after, "mediaserver_rest_request_duration_seconds_count", {
        group: "none",
        operation: "metrics",
        status: "200",
      })! >= 3,
    );
  } finally {
    await stopPublisher(publisher);
    await server.stop();
  }
});

Deno.test("metrics: /metrics asks for REST credentials when auth is on", async () => {
  const token = "metrics-test-token-0123456789";
  const server = await startTestServer(testConfig({ rest: { authTokens: [token] } }));
  try {
    const refused = await fetch(`${server.restUrl}/metrics`);
    assert.equal(refused.status, 401);
    await refused.body?.cancel();
    const text = await scrape(server, { Authorization: `Bearer ${token}` });
    assert.equal(sample(text, "mediaserver_sessions"), 0);
  } finally {
    await server.stop();
  }
});

Deno.test("metrics: metrics.enabled false serves no /metrics; streamLabels adds per-stream series", async () => {
  const off = await startTestServer(testConfig({ metrics: { enabled: false } }));
  try {
    const res = await fetch(`${off.restUrl}/metrics`);
    assert.equal(res.status, 404);
    await res.body?.cancel();
  } finally {
    await off.stop();
  }
  const labelled = await startTestServer(testConfig({ metrics: { streamLabels: true } }));
  const publisher = publishRtmp(`rtmp://127.0.0.1:${labelled.rtmpPort}/live/labelled`, 20);
  try {
    const text = await waitFor("per-stream series", async () => {
      const text = await scrape(labelled);
      return sample(text, "mediaserver_stream_readers", { stream: "labelled" }) === 0
        ? text
        : undefined;
    });
    await promtoolCheck(text);
  } finally {
    await stopPublisher(publisher);
    await labelled.stop();
  }
});

Deno.test({
  name:
    "metrics: a lossy WebRTC player moves sessions, PLI and NACK counters, which outlive the stream",
  ...weriftSanitizers,
  fn: async () => {
    const publisher = new TestPublisher("VP8");
    // Dropping a tenth of the packets makes the player send NACKs.
    const player = new TestPlayer("VP8", 90);
    await withTwoClients([publisher, player], async (server, pubClient, playClient) => {
      const idle = await scrape(server);
      assert.equal(sample(idle, "mediaserver_sessions"), 2);
      const pubId = await startPublishing(publisher, pubClient, { name: "cam" });
      await startPlaying(player, playClient, { name: "cam" });
      // The first NACK and PLI can come before 50 packets arrived (a loss early on).
      const playing = await waitFor("NACKs, a PLI and 50 packets in", async () => {
        const text = await scrape(server);
        return sample(text, "mediaserver_webrtc_nacks_total")! > 0 &&
            sample(text, "mediaserver_webrtc_plis_total")! > 0 &&
            sample(text, "mediaserver_webrtc_received_packets_total")! > 50
          ? text
          : undefined;
      });
      await promtoolCheck(playing);
      const labels = { provider: "WebRTC", status: "PUBLISHING", type: "publish" };
      assert.equal(sample(playing, "mediaserver_streams", labels), 1);
      assert.ok(sample(playing, "mediaserver_webrtc_received_packets_total")! > 50);
      assert.ok(sample(playing, "mediaserver_webrtc_received_bytes_total")! > 10_000);
      assert.ok(sample(playing, "mediaserver_webrtc_sent_packets_total")! > 20);
      const nacks = sample(playing, "mediaserver_webrtc_nacks_total")!;

      pubClient.send("unPublishStream", { mediaSessionId: pubId, name: "cam" });
      const ended = await waitFor("the stream gone", async () => {
        const text = await scrape(server);
        return sample(text, "mediaserver_streams", labels) === undefined ? text : undefined;
      });
      assert.ok(sample(ended, "mediaserver_webrtc_nacks_total")! >= nacks, "NACKs kept");
    }, () => startTestServer(testConfig()));
  },
});

Deno.test("metrics: hook calls are timed by hook, and failures counted", async () => {
  const backend = await startHookBackend();
  const server = await startTestServer(testConfig({ hooks: { url: backend.url } }));
  try {
    const before = await scrape(server);
    const count = (text: string) =>
      sample(text, "mediaserver_hook_duration_seconds_count", { hook: "connect" }) ?? 0;
    const failures = (text: string) =>
      sample(text, "mediaserver_hook_failures_total", { hook: "connect" }) ?? 0;
    const { client } = await WcsClient.connect(server.wsUrl);
    await client.close();
    // A refusing backend: the connection is refused and the failure counted.
    backend.respond(() => ({ status: 500 }));
    const refused = await WcsClient.open(server.wsUrl);
    refused.send("connection", sdkConnectionObject());
    await refused.closed;
    const after = await scrape(server);
    assert.equal(count(after), count(before) + 2);
    assert.equal(failures(after), failures(before) + 1);
    assert.ok(
      sample(after, "mediaserver_hook_duration_seconds_bucket", { hook: "connect", le: "+Inf" }),
    );
  } finally {
    await server.stop();
    await backend.close();
  }
});
