/**
 * WebRTC refusals: every bad publish or play ends with its FAILED status and the SDK's info
 * text, and leaves no peer connection open. Also the publishStream/playStream hooks and the
 * recording of a WebRTC publisher.
 */
import assert from "node:assert/strict";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { startHookBackend } from "./helpers/hook_backend.ts";
import { ok } from "./helpers/rest_checks.ts";
import { startTestServer, testConfig } from "./helpers/test_server.ts";
import { sdkConnectionObject, WcsClient } from "./helpers/wcs_client.ts";
import {
  nextStatus,
  startPublishing,
  TestPlayer,
  TestPublisher,
  waitFor,
  weriftSanitizers,
} from "./webrtc_helpers.ts";

const minimalOffer = (codecs: string) =>
  [
    "v=0",
    "o=- 1 2 IN IP4 127.0.0.1",
    "s=-",
    "t=0 0",
    "a=group:BUNDLE 0",
    "m=video 9 UDP/TLS/RTP/SAVPF 98",
    "c=IN IP4 0.0.0.0",
    "a=mid:0",
    "a=sendonly",
    "a=ice-ufrag:abcd",
    "a=ice-pwd:abcdefghijklmnopqrstuvwx",
    "a=fingerprint:sha-256 " + Array(32).fill("AA").join(":"),
    "a=setup:actpass",
    "a=rtcp-mux",
    codecs,
    "",
  ].join("\r\n");

Deno.test({
  name: "webrtc refusals: bad SDP, no codec, unknown name, name and id in use; no peer leaks",
  ...weriftSanitizers,
  fn: async () => {
    const s = await startTestServer();
    const { client } = await WcsClient.connect(s.wsUrl);
    const publisher = new TestPublisher("VP8");
    try {
      const expectFailed = async (
        message: string,
        stream: Record<string, unknown>,
        info: string,
      ) => {
        const id = crypto.randomUUID();
        client.send(message, {
          name: "x",
          published: message === "publishStream",
          ...stream,
          mediaSessionId: id,
        });
        const status = await nextStatus(client, id);
        assert.deepEqual(
          [status.status, status.info],
          ["FAILED", info],
          `${message} ${JSON.stringify(stream)}`,
        );
      };
      await expectFailed("publishStream", { sdp: "hello" }, "Failed by error");
      await expectFailed("publishStream", {}, "Failed by error");
      await expectFailed("publishStream", { name: 5, sdp: minimalOffer("") }, "Failed by error");
      await expectFailed(
        "publishStream",
        { sdp: minimalOffer("a=rtpmap:98 VP9/90000") },
        "No common codecs",
      );
      await expectFailed("playStream", {
        name: "nobody",
        sdp: minimalOffer("a=rtpmap:98 VP8/90000"),
      }, "Stream not found");

      const id = await startPublishing(publisher, client, { name: "cam" });
      await expectFailed("publishStream", {
        name: "cam",
        sdp: minimalOffer("a=rtpmap:98 VP8/90000"),
      }, "Stream name is already in use");
      client.send("publishStream", {
        mediaSessionId: id,
        name: "other",
        sdp: minimalOffer("a=rtpmap:98 VP8/90000"),
      });
      // The reused id's FAILED comes after the running stream's PUBLISHING, with the same id.
      const reused = await nextStatus(client, id);
      assert.deepEqual([reused.status, reused.info], [
        "FAILED",
        "MediaSessionId is already in use",
      ]);

      // A player that cannot take VP8 gets FAILED instead of an answer.
      const h264Player = new TestPlayer("H264");
      const playId = crypto.randomUUID();
      await h264Player.pc.setLocalDescription(await h264Player.pc.createOffer());
      client.send("playStream", {
        mediaSessionId: playId,
        name: "cam",
        sdp: h264Player.pc.localDescription!.sdp,
      });
      const refused = await nextStatus(client, playId);
      assert.deepEqual([refused.status, refused.info], [
        "FAILED",
        "Transcoding required, but disabled",
      ]);
      await h264Player.close();
      assert.ok(!client.messages().slice(-3).includes("setRemoteSDP"));

      client.send("unPublishStream", { mediaSessionId: id, name: "cam" });
      const unpublished = await nextStatus(client, id);
      assert.deepEqual([unpublished.status, unpublished.info], ["UNPUBLISHED", "Stopped by user"]);
      assert.equal(s.services.streams.size, 0);
      assert.equal(openPeerCount(), 0);
    } finally {
      await publisher.close();
      await client.close();
      await s.stop();
    }
  },
});

Deno.test({
  name: "stream names with NUL or control characters are FAILED before any hook, stream or file",
  ...weriftSanitizers,
  fn: async () => {
    // The backend renames one stream to a name with a control character: refused as well.
    const backend = await startHookBackend((call) => {
      if (call.hook === "connect") {
        const overwriteName = { restPolicy: "OVERWRITE", restOverwrite: "name" };
        return {
          status: 200,
          body: { ...call.body, restClientConfig: { publishStream: overwriteName } },
        };
      }
      if (call.hook === "publishStream" && call.body.name === "renamed") {
        return { status: 200, body: { ...call.body, name: "cam\u0007" } };
      }
      return { status: 200, body: call.body };
    });
    const s = await startTestServer(testConfig({ hooks: { url: backend.url } }));
    const { client } = await WcsClient.connect(s.wsUrl);
    try {
      const offer = minimalOffer("a=rtpmap:98 VP8/90000");
      const expectBadName = async (message: string, name: string) => {
        const id = crypto.randomUUID();
        client.send(message, { mediaSessionId: id, name, record: true, sdp: offer });
        const status = await nextStatus(client, id);
        assert.deepEqual(
          [status.status, status.info],
          ["FAILED", "bad stream name: control characters"],
          `${message} ${JSON.stringify(name)}`,
        );
      };
      await expectBadName("publishStream", "cam\u0000.mp4");
      await expectBadName("publishStream", "cam\r\nINFO forged line");
      await expectBadName("playStream", "cam\u001b[2J");
      await expectBadName("publishStream", "renamed");
      const streamHooks = backend.calls.filter((c) => /^(publish|play)Stream$/.test(c.hook));
      assert.deepEqual(streamHooks.map((c) => c.body.name), ["renamed"]);
      assert.ok(!client.messages().includes("setRemoteSDP"), "an answer was made");
      assert.equal(s.services.streams.size, 0);
      assert.equal(openPeerCount(), 0);
      const folder = s.services.config.folders.records;
      const files = await Array.fromAsync(Deno.readDir(folder)).catch(() => []);
      assert.deepEqual(files, []);
    } finally {
      await client.close();
      await s.stop();
      await backend.close();
    }
  },
});

Deno.test({
  name:
    "webrtc: a backend refusing publishStream under restOnError FAIL fails the publish; events reach it",
  ...weriftSanitizers,
  fn: async () => {
    const backend = await startHookBackend((call) => {
      if (call.hook === "connect") {
        return {
          status: 200,
          body: { ...call.body, restClientConfig: { publishStream: { restOnError: "FAIL" } } },
        };
      }
      if (call.hook === "publishStream" && call.body.name === "forbidden") return { status: 403 };
      return { status: 200, body: call.body };
    });
    const s = await startTestServer(testConfig({ hooks: { url: backend.url } }));
    const { client } = await WcsClient.connect(s.wsUrl, sdkConnectionObject());
    const publisher = new TestPublisher("VP8");
    try {
      const denied = crypto.randomUUID();
      client.send("publishStream", { mediaSessionId: denied, name: "forbidden", sdp: "v=0" });
      const status = await nextStatus(client, denied);
      assert.deepEqual([status.status, status.info], ["FAILED", "Restricted access"]);
      assert.equal(openPeerCount(), 0);

      await startPublishing(publisher, client, { name: "allowed" });
      const hook = await backend.waitFor("StreamStatusEvent");
      assert.equal(hook.body.name, "forbidden");
      assert.equal(hook.body.status, "FAILED");
      await waitFor(
        () =>
          backend.calls.some((c) =>
            c.hook === "StreamStatusEvent" && c.body.status === "PUBLISHING"
          ),
        5000,
        "the PUBLISHING hook",
      );
      assert.ok(backend.calls.some((c) => c.hook === "publishStream" && c.body.name === "allowed"));
    } finally {
      await publisher.close();
      await client.close();
      await s.stop();
      await backend.close();
    }
  },
});

Deno.test({
  name:
    "webrtc: recording an H.264 publisher gives an MP4 that ffprobe reads as h264 640x480 + opus",
  ...weriftSanitizers,
  fn: async () => {
    const s = await startTestServer();
    const { client } = await WcsClient.connect(s.wsUrl);
    const publisher = new TestPublisher("H264");
    try {
      const id = await startPublishing(publisher, client, { name: "rec" });
      const plis = publisher.plis;
      await ok(s, "/stream/startRecording", { mediaSessionId: id });
      await new Promise((r) => setTimeout(r, 3000));
      assert.ok(
        publisher.plis > plis,
        "attaching a frame reader asked the publisher for a keyframe",
      );
      await ok(s, "/stream/stopRecording", { mediaSessionId: id });
      const folder = s.services.config.folders.records;
      const [file] = [...Deno.readDirSync(folder)].map((e) => `${folder}/${e.name}`);
      const probe = new Deno.Command("ffprobe", {
        args: [
          "-v",
          "error",
          "-show_entries",
          "stream=codec_name,width,height",
          "-of",
          "json",
          file,
        ],
      }).outputSync();
      assert.ok(probe.success, new TextDecoder().decode(probe.stderr));
      const streams = JSON.parse(new TextDecoder().decode(probe.stdout)).streams;
      assert.deepEqual(
        streams.map((x: Record<string, unknown>) => x.codec_name).sort(),
        ["h264", "opus"],
      );
      const video = streams.find((x: Record<string, unknown>) => x.codec_name === "h264");
      assert.deepEqual([video.width, video.height], [640, 480]);
    } finally {
      await publisher.close();
      await client.close();
      await s.stop();
    }
  },
});
