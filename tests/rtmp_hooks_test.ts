/**
 * RTMP clients go through the backend's REST hooks like Web SDK clients: `connect` with the
 * RTMP address's query as `custom` (application `flashStreamingApp` unless the app path names
 * another), then `publishStream` or `playStream`; a refusal ends the RTMP client with an
 * error status carrying the reason.
 */
import assert from "node:assert/strict";
import { publishRtmp, stopPublisher } from "./helpers/ffmpeg_rtmp.ts";
import { type HookCall, startHookBackend } from "./helpers/hook_backend.ts";
import { waitFor } from "./helpers/media_fixtures.ts";
import { startTestServer, testConfig, type TestServer } from "./helpers/test_server.ts";

/** Runs ffmpeg to its end; exit status and error output. */
async function ffmpeg(args: string[]): Promise<{ code: number; stderr: string }> {
  const out = await new Deno.Command("ffmpeg", {
    args: ["-hide_banner", "-nostdin", ...args],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).output();
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
}

/** ffmpeg publishing two seconds of H.264 to `url`. */
function publishBriefly(url: string) {
  return ffmpeg([
    ...["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-t", "2"],
    ...["-c:v", "libx264", "-preset", "ultrafast", "-threads", "1", "-f", "flv", url],
  ]);
}

async function published(server: TestServer, name: string): Promise<unknown[]> {
  const res = await server.post("/stream/find", { name });
  if (res.status === 404) {
    await res.body?.cancel();
    return [];
  }
  return await res.json();
}

/** The calls of `hook` whose body names the stream `name` (or any, for `connect`). */
function callsOf(calls: HookCall[], hook: string, name?: string): HookCall[] {
  return calls.filter((c) => c.hook === hook && (name === undefined || c.body.name === name));
}

Deno.test("RTMP connect, publishStream and playStream hooks: bodies carry the app and the query; refusals end the client", async () => {
  const backend = await startHookBackend((call) => {
    const custom = call.body.custom as Record<string, unknown> | undefined;
    if (call.hook === "connect") {
      if (custom?.token !== "abc") return { status: 403 };
      const failOnRefusal = { restOnError: "FAIL" };
      return {
        status: 200,
        body: {
          ...call.body,
          restClientConfig: { publishStream: failOnRefusal, playStream: failOnRefusal },
        },
      };
    }
    if (call.body.name === "forbidden") return { status: 403 };
    return { status: 200, body: call.body };
  });
  const server = await startTestServer(testConfig({ hooks: { url: backend.url } }));
  const base = `rtmp://127.0.0.1:${server.rtmpPort}`;
  let publisher: Deno.ChildProcess | undefined;
  try {
    // Refused by publishStream: ffmpeg fails with the reason; no stream appears.
    const refused = await publishBriefly(`${base}/live?token=abc/forbidden`);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /forbidden refused by the backend: HTTP 403/);
    assert.deepEqual(await published(server, "forbidden"), []);
    const [connect] = callsOf(backend.calls, "connect");
    assert.equal(connect.body.appKey, "flashStreamingApp");
    assert.deepEqual(connect.body.custom, { token: "abc" });
    assert.equal(typeof connect.body.nodeId, "string");
    assert.match(String(connect.body.sessionId), /^\/127\.0\.0\.1:\d+-/);
    const [publish] = callsOf(backend.calls, "publishStream", "forbidden");
    assert.deepEqual(
      [publish.body.appKey, publish.body.sessionId, publish.body.published, publish.body.custom],
      ["flashStreamingApp", connect.body.sessionId, true, { token: "abc" }],
    );
    assert.equal(publish.body.mediaProvider, "RTMP");

    // Refused by connect (no token): NetConnection.Connect.Rejected with the reason.
    const rejected = await publishBriefly(`${base}/live/cam`);
    assert.notEqual(rejected.code, 0);
    assert.match(rejected.stderr, /connection refused by the backend: HTTP 403/);

    // Admitted under an app of its own; a player's query travels in playStream's custom.
    publisher = publishRtmp(`${base}/studio?token=abc/cam`, 20);
    await waitFor("the stream", async () => (await published(server, "cam"))[0]);
    const studio = callsOf(backend.calls, "connect").at(-1)!;
    assert.equal(studio.body.appKey, "studio");
    const played = await ffmpeg([
      ...["-v", "error", "-rw_timeout", "10000000", "-i", `${base}/live?token=abc/cam?seat=7`],
      ...["-t", "1", "-f", "null", "-"],
    ]);
    assert.equal(played.code, 0, played.stderr);
    const [play] = callsOf(backend.calls, "playStream", "cam");
    assert.deepEqual([play.body.published, play.body.custom], [false, { token: "abc", seat: "7" }]);
    await stopPublisher(publisher);
    publisher = undefined;
    // The events of both sessions, as a Web SDK client's: connection and stream statuses.
    const statuses = (hook: string, sessionId: unknown) =>
      backend.calls.filter((c) => c.hook === hook && c.body.sessionId === sessionId)
        .map((c) => c.body.status);
    await waitFor(
      "UNPUBLISHED and DISCONNECTED",
      () =>
        statuses("ConnectionStatusEvent", studio.body.sessionId).length === 2 ? true : undefined,
    );
    assert.deepEqual(statuses("StreamStatusEvent", studio.body.sessionId), [
      "PUBLISHING",
      "UNPUBLISHED",
    ]);
    assert.deepEqual(statuses("ConnectionStatusEvent", studio.body.sessionId), [
      "ESTABLISHED",
      "DISCONNECTED",
    ]);
    assert.deepEqual(statuses("StreamStatusEvent", play.body.sessionId), ["PLAYING", "STOPPED"]);
    const [publishing] = callsOf(backend.calls, "StreamStatusEvent", "cam");
    assert.equal(
      publishing.body.mediaSessionId,
      callsOf(backend.calls, "publishStream", "cam")[0].body.mediaSessionId,
    );

    const forbiddenPlay = await ffmpeg([
      ...["-v", "error", "-rw_timeout", "5000000", "-i", `${base}/live?token=abc/forbidden`],
      ...["-t", "1", "-f", "null", "-"],
    ]);
    assert.notEqual(forbiddenPlay.code, 0);
    assert.match(forbiddenPlay.stderr, /forbidden refused by the backend: HTTP 403/);
  } finally {
    if (publisher) await stopPublisher(publisher);
    await server.stop();
    await backend.close();
  }
});
