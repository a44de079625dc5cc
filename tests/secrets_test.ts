/**
 * Secrets never leak: camera passwords and tokens stay out of error bodies, logs, records,
 * stream names and file names; error bodies name no absolute path; control characters in
 * URI and file-name fields are 400s naming the field.
 */
import assert from "node:assert/strict";
import { createLogger } from "../core/log.ts";
import type { RtspPullRecord } from "../core/records.ts";
import { startGstRtsp } from "./helpers/gst_rtsp.ts";
import { freePort } from "./helpers/process.ts";
import { startTestServer, testConfig, type TestServer, withServer } from "./helpers/test_server.ts";

/** A server whose log lines are kept in `lines`. */
async function loggingServer(
  config = testConfig({ rtsp: { transport: "tcp" } }),
): Promise<{ server: TestServer; lines: string[] }> {
  const lines: string[] = [];
  const log = createLogger({ level: "debug", write: (line) => lines.push(line) });
  return { server: await startTestServer(config, log), lines };
}

function assertNoSecret(text: string, what: string): void {
  for (const secret of ["s3cret", "abc123"]) {
    assert.ok(!text.includes(secret), `${what} holds ${secret}: ${text}`);
  }
}

Deno.test("an unreachable camera with credentials: the 502 body and the logs hold no secret", async () => {
  const { server, lines } = await loggingServer();
  try {
    const uri = `rtsp://viewer:s3cret@127.0.0.1:${freePort()}/cam?token=abc123`;
    const res = await server.post("/rtsp/startup", { uri });
    assert.equal(res.status, 502);
    const body = await res.json();
    assert.equal(body.error, "bad gateway");
    assert.match(body.message, /rtsp:\/\/viewer:\*\*\*@127\.0\.0\.1:\d+\/cam\?token=\*\*\*/);
    assertNoSecret(JSON.stringify(body), "the 502 body");
    const bad = await server.post("/rtsp/startup", {
      uri: "rtsp://viewer:s3cret@[::1/x?key=abc123",
    });
    assert.equal(bad.status, 400);
    assertNoSecret(await bad.text(), "the 400 body");
    assert.deepEqual(await (await server.post("/rtsp/find_all")).json(), []);
  } finally {
    await server.stop();
  }
  assert.ok(lines.length > 0);
  assertNoSecret(lines.join("\n"), "the log");
});

Deno.test("a camera pulled with credentials and no name: records, stream name, file name and logs hold no secret", async () => {
  const camera = await startGstRtsp({ user: "viewer", password: "s3cret" });
  const config = testConfig({ rtsp: { transport: "tcp" } });
  const { server, lines } = await loggingServer(config);
  try {
    const uri = camera.url.replace("rtsp://", "rtsp://viewer:s3cret@") + "?token=abc123";
    const res = await server.post("/rtsp/startup", { uri });
    assert.equal(res.status, 200, await res.text());
    const redacted = camera.url.replace("rtsp://", "rtsp://viewer:***@") + "?token=***";
    const pulls: RtspPullRecord[] = await (await server.post("/rtsp/find_all")).json();
    assert.deepEqual(pulls, [{ uri: redacted, toStream: camera.url, status: "PLAYING" }]);
    // A filter may name the pull by its full uri or by the redacted one shown.
    for (const filter of [uri, redacted]) {
      assert.equal((await (await server.post("/rtsp/find", { uri: filter })).json()).length, 1);
    }
    const [stream] = await (await server.post("/stream/find_all")).json();
    assert.equal(stream.name, camera.url);
    assertNoSecret(JSON.stringify(stream), "the stream record");

    const recording = await server.post("/recorder/startup", {
      mediaSessionId: stream.mediaSessionId,
    });
    assert.equal(recording.status, 200, await recording.text());
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const [recorder] = await (await server.post("/recorder/find_all")).json();
    assertNoSecret(recorder.fileName, "the recorder's file name");
    assert.equal(
      (await server.post("/recorder/terminate", { mediaSessionId: stream.mediaSessionId })).status,
      200,
    );
    const files = [...Deno.readDirSync(config.folders.records)].map((e) => e.name);
    assert.equal(files.length, 1, files.join());
    assert.ok(files[0].includes("127.0.0.1"), files[0]);
    assertNoSecret(files[0], "the recording's file name");

    const terminated = await server.post("/rtsp/terminate", { uri: redacted });
    assert.equal(terminated.status, 200, await terminated.text());
    assert.deepEqual(await (await server.post("/rtsp/find_all")).json(), []);
  } finally {
    await server.stop();
    await camera.stop();
  }
  assertNoSecret(lines.join("\n"), "the log");
});

Deno.test("control characters in URI, stream-name and file-name fields are 400s naming the field", async () => {
  await withServer(async (server) => {
    const cases: Array<[string, unknown, string]> = [
      ["/vod/startup", { uri: "vod-live://a\u0000.mp4" }, "uri"],
      ["/vod/startup", { uri: "vod-live://a.mp4", localStreamName: "x\ny" }, "localStreamName"],
      ["/rtsp/startup", { uri: "rtsp://127.0.0.1:1/a\u0000b" }, "uri"],
      ["/pull/rtmp/pull", { uri: "rtmp://127.0.0.1:1/live/a\u0001" }, "uri"],
      [
        "/recorder/startup",
        { mediaSessionId: "m", config: { fileTemplate: "rec\u0000{streamName}" } },
        "config.fileTemplate",
      ],
      [
        "/stream/startRecording",
        { mediaSessionId: "m", config: { fileTemplate: "a\u001b[31m" } },
        "config.fileTemplate",
      ],
      ["/push/sound_on", { mediaSessionId: "m", soundFile: "s\u0000.mp3" }, "soundFile"],
      ["/multipleRecorder/startup", { uri: "multi-recorder://a\u007f" }, "uri"],
    ];
    for (const [path, body, field] of cases) {
      const res = await server.post(path, body);
      assert.equal(res.status, 400, `${path} ${JSON.stringify(body)}`);
      const answer = await res.json();
      assert.equal(answer.field, field, JSON.stringify(answer));
      assert.match(answer.message, /control characters/);
    }
  });
});

Deno.test("an fs error's body names no absolute path", async () => {
  const config = testConfig();
  // The media folder is a file: opening a name inside it fails with ENOTDIR, not ENOENT.
  Deno.mkdirSync(config.folders.media.replace(/\/[^/]+$/, ""), { recursive: true });
  Deno.writeTextFileSync(config.folders.media, "not a folder");
  await withServer(async (server) => {
    const res = await server.post("/vod/startup", { uri: "vod-live://clip.mp4" });
    assert.equal(res.status, 500);
    const body = await res.json();
    assert.equal(body.error, "internal error");
    assert.match(body.message, /<path>/);
    assert.ok(!/(^|[\s'"])\/\w/.test(body.message), body.message);
    assert.ok(!body.message.includes(config.folders.media), body.message);
  }, config);
});

Deno.test("outbound.allowedHosts: pulls and pushes to other hosts are 403s naming the field, and nothing connects", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  let accepted = 0;
  const accepting = (async () => {
    for await (const conn of listener) {
      accepted++;
      conn.close();
    }
  })();
  try {
    await withServer(async (server) => {
      const cases: Array<[string, unknown, string]> = [
        ["/rtsp/startup", { uri: `rtsp://u:s3cret@127.0.0.1:${port}/cam` }, "uri"],
        ["/rtsp/startup", { uri: `rtsp://LOCALHOST:${port}/cam` }, "uri"],
        ["/rtsp/startup", { uri: `rtsp://2130706433:${port}/cam` }, "uri"],
        ["/pull/rtmp/pull", { uri: `rtmp://127.0.0.1:${port}/live/s` }, "uri"],
        ["/push/startup", { streamName: "s", rtmpUrl: `rtmp://127.0.0.1:${port}/live` }, "rtmpUrl"],
      ];
      for (const [path, body, field] of cases) {
        const res = await server.post(path, body);
        assert.equal(res.status, 403, `${path} ${JSON.stringify(body)}`);
        const answer = await res.json();
        assert.equal(answer.error, "forbidden");
        assert.equal(answer.field, field);
        assertNoSecret(answer.message, "the 403 body");
      }
      assert.deepEqual(await (await server.post("/rtsp/find_all")).json(), []);
      assert.deepEqual(await (await server.post("/pull/rtmp/find_all")).json(), []);
    }, testConfig({ outbound: { allowedHosts: ["10.0.0.*", "cam*.example.com"] } }));
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(accepted, 0, "no connection reached the refused host");
  } finally {
    listener.close();
    await accepting;
  }
});

/** An RTSP server that answers OPTIONS and redirects every DESCRIBE to `location`. */
function startRedirector(location: string): { port: number; close(): Promise<void> } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns = new Set<Deno.Conn>();
  const serve = async (conn: Deno.Conn) => {
    const decoder = new TextDecoder();
    let buffered = "";
    for await (const chunk of conn.readable) {
      buffered += decoder.decode(chunk);
      let end: number;
      while ((end = buffered.indexOf("\r\n\r\n")) >= 0) {
        const head = buffered.slice(0, end);
        buffered = buffered.slice(end + 4);
        const cseq = /CSeq:\s*(\d+)/i.exec(head)?.[1] ?? "0";
        const answer = head.startsWith("DESCRIBE")
          ? `RTSP/1.0 302 Moved\r\nCSeq: ${cseq}\r\nLocation: ${location}\r\n\r\n`
          : `RTSP/1.0 200 OK\r\nCSeq: ${cseq}\r\nPublic: OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN\r\n\r\n`;
        await conn.write(new TextEncoder().encode(answer));
      }
    }
  };
  const accepting = (async () => {
    for await (const conn of listener) {
      conns.add(conn);
      serve(conn).catch(() => {}).finally(() => conns.delete(conn));
    }
  })();
  return {
    port: listener.addr.port,
    async close() {
      listener.close();
      for (const conn of conns) conn.close();
      await accepting;
    },
  };
}

Deno.test("an RTSP redirect to a host outside outbound.allowedHosts is a 403 and is not followed", async () => {
  const target = Deno.listen({ hostname: "127.0.0.2", port: 0 });
  let accepted = 0;
  const accepting = (async () => {
    for await (const conn of target) {
      accepted++;
      conn.close();
    }
  })();
  const redirector = startRedirector(`rtsp://127.0.0.2:${target.addr.port}/inside`);
  try {
    await withServer(async (server) => {
      const res = await server.post("/rtsp/startup", {
        uri: `rtsp://127.0.0.1:${redirector.port}/cam`,
      });
      assert.equal(res.status, 403);
      const answer = await res.json();
      assert.equal(answer.field, "uri");
      assert.match(answer.message, /127\.0\.0\.2/);
      assert.deepEqual(await (await server.post("/rtsp/find_all")).json(), []);
    }, testConfig({ rtsp: { transport: "tcp" }, outbound: { allowedHosts: ["127.0.0.1"] } }));
    assert.equal(accepted, 0, "the redirect target was never connected to");
  } finally {
    await redirector.close();
    target.close();
    await accepting;
  }
});
