/**
 * WHIP and WHEP at the HTTP level, werift as the client on 127.0.0.1: a WHIP publish of real
 * VP8 + Opus is an ordinary stream (listed with its codecs, a snapshot decodes, a WHEP player
 * gets its packets), a WHEP play of a VOD file gets both tracks (AAC as Opus), trickle PATCH,
 * DELETE, CORS and the refusals (400, 404, 409, 412, 415, 422), REST auth and the `connect`
 * hook.
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import {
  MediaStreamTrack,
  RTCPeerConnection,
  RTCRtpCodecParameters,
  RtpHeader,
  RtpPacket,
} from "werift";
import type { StreamRecord } from "../core/records.ts";
import { openPeerCount } from "../media/protocols/webrtc/peer.ts";
import { run } from "../media/formats/test_fixtures.ts";
import { startHookBackend } from "./helpers/hook_backend.ts";
import { makeClip } from "./helpers/media_fixtures.ts";
import { snapshotPixels } from "./helpers/rest_checks.ts";
import { testConfig, type TestServer, withServer } from "./helpers/test_server.ts";
import { loopbackIce, waitFor, weriftSanitizers } from "./webrtc_helpers.ts";

const fb = [{ type: "nack" }, { type: "nack", parameter: "pli" }];
const opus = () =>
  new RTCRtpCodecParameters({ mimeType: "audio/opus", clockRate: 48000, channels: 2 });

/** A werift peer on 127.0.0.1 without STUN, offering `video`. */
function loopbackPeer(video: "VP8" | "H264"): RTCPeerConnection {
  return new RTCPeerConnection({
    ...loopbackIce(),
    codecs: {
      video: [
        new RTCRtpCodecParameters({
          mimeType: `video/${video}`,
          clockRate: 90000,
          rtcpFeedback: fb,
          parameters: video === "H264"
            ? "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"
            : undefined,
        }),
      ],
      audio: [opus()],
    },
  });
}

/** The frames of a VP8 IVF file. */
function ivfFrames(file: Uint8Array): Uint8Array[] {
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const frames: Uint8Array[] = [];
  for (let at = view.getUint16(6, true); at + 12 <= file.length;) {
    const size = view.getUint32(at, true);
    frames.push(file.subarray(at + 12, at + 12 + size));
    at += 12 + size;
  }
  return frames;
}

/** A WHIP client sending a real VP8 clip (looped, 25 fps) and Opus packets (50/s). */
class WhipPublisher {
  readonly pc = loopbackPeer("VP8");
  readonly #video = new MediaStreamTrack({ kind: "video" });
  readonly #audio = new MediaStreamTrack({ kind: "audio" });
  #timer?: ReturnType<typeof setInterval>;

  constructor(readonly frames: Uint8Array[]) {
    this.pc.addTransceiver(this.#video, { direction: "sendonly" });
    this.pc.addTransceiver(this.#audio, { direction: "sendonly" });
  }

  /** Starts sending; every 2nd tick a video frame, every tick an audio packet. */
  start(): void {
    let tick = 0;
    const seq = [1, 1];
    this.#timer = setInterval(() => {
      if (tick % 2 === 0) {
        const frame = this.frames[(tick / 2) % this.frames.length];
        const ts = (tick / 2) * 3600;
        for (let at = 0; at < frame.length; at += 1000) {
          const chunk = frame.subarray(at, at + 1000);
          const payload = Buffer.concat([Buffer.from([at === 0 ? 0x10 : 0x00]), chunk]);
          const header = new RtpHeader({
            sequenceNumber: seq[0]++ & 0xffff,
            timestamp: ts,
            marker: at + 1000 >= frame.length,
            payloadType: 96,
          });
          this.#video.writeRtp(new RtpPacket(header, payload));
        }
      }
      const header = new RtpHeader({
        sequenceNumber: seq[1]++ & 0xffff,
        timestamp: tick * 960,
        marker: true,
        payloadType: 111,
      });
      this.#audio.writeRtp(new RtpPacket(header, Buffer.alloc(80, 0xf8)));
      tick++;
    }, 20);
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.pc.close();
  }
}

/** A WHEP client counting the RTP packets of each kind. */
class WhepPlayer {
  readonly pc: RTCPeerConnection;
  readonly received = { video: 0, audio: 0 };

  constructor(video: "VP8" | "H264" = "H264") {
    this.pc = loopbackPeer(video);
    this.pc.addTransceiver("video", { direction: "recvonly" });
    this.pc.addTransceiver("audio", { direction: "recvonly" });
    this.pc.onTrack.subscribe((track) => {
      track.onReceiveRtp.subscribe(() => this.received[track.kind as "audio" | "video"]++);
    });
  }

  close(): Promise<void> {
    return this.pc.close();
  }
}

/** POSTs the peer's offer to `path`; on 201 applies the answer. */
async function offer(
  server: TestServer,
  path: string,
  pc: RTCPeerConnection,
  headers: Record<string, string> = {},
): Promise<Response> {
  await pc.setLocalDescription(await pc.createOffer());
  const res = await fetch(`${server.restUrl}${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/sdp", ...headers },
    body: pc.localDescription!.sdp,
  });
  if (res.status !== 201) return res;
  const answer = await res.text();
  await pc.setRemoteDescription({ type: "answer", sdp: answer });
  return new Response(answer, { status: res.status, headers: res.headers });
}

async function send(
  server: TestServer,
  method: string,
  path: string,
  body?: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; text: string }> {
  const res = await fetch(`${server.restUrl}${path}`, { method, body, headers });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

const sdpfrag = { "Content-Type": "application/trickle-ice-sdpfrag" };

async function streams(server: TestServer): Promise<StreamRecord[]> {
  return await (await server.post("/stream/find_all")).json();
}

Deno.test({
  name:
    "WHIP publish of VP8 + Opus: listed, snapshot decodes, recorded, WHEP plays it, PATCH, DELETE",
  ...weriftSanitizers,
  fn: async () => {
    const dir = await Deno.makeTempDir();
    await run("ffmpeg", [
      ...["-v", "error", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-t", "2"],
      ...["-c:v", "libvpx", "-g", "25", "-deadline", "realtime", "-b:v", "500k"],
      ...["-f", "ivf", `${dir}/clip.ivf`],
    ]);
    const frames = ivfFrames(await Deno.readFile(`${dir}/clip.ivf`));
    await Deno.remove(dir, { recursive: true });
    const config = testConfig();
    await withServer(async (server) => {
      const publisher = new WhipPublisher(frames);
      const player = new WhepPlayer("VP8");
      try {
        const res = await offer(server, "/whip/cam", publisher.pc);
        assert.equal(res.status, 201);
        assert.equal(res.headers.get("content-type"), "application/sdp");
        const location = res.headers.get("location")!;
        assert.match(location, /^\/whip\/cam\/[A-Za-z0-9]{32}$/);
        const etag = res.headers.get("etag")!;
        assert.match(etag, /^"[A-Za-z0-9]+"$/);
        assert.match(res.headers.get("access-control-expose-headers")!, /Location/);
        assert.match(await res.text(), /a=recvonly/);
        publisher.start();
        await waitFor(() => publisher.pc.connectionState === "connected", 10_000, "connected");

        let record: StreamRecord | undefined;
        for (let i = 0; i < 100 && record?.status !== "PUBLISHING"; i++) {
          record = (await streams(server)).find((s) => s.name === "cam");
          await new Promise((r) => setTimeout(r, 50));
        }
        assert.equal(record?.status, "PUBLISHING");
        assert.equal(record.published, true);
        assert.equal(record.mediaProvider, "WebRTC");
        assert.equal(record.videoCodec, "VP8");
        assert.equal(record.audioCodec, "OPUS");
        const pixels = await snapshotPixels(server, "cam");
        assert.deepEqual([pixels.width, pixels.height], [320, 240]);
        const recorder = await server.post("/recorder/startup", {
          mediaSessionId: record.mediaSessionId,
        });
        assert.equal(recorder.status, 200);
        await recorder.body?.cancel();

        // The WHIP stream is played over WHEP: RTP of both tracks arrives.
        const played = await offer(server, "/whep/cam", player.pc);
        assert.equal(played.status, 201);
        await played.body?.cancel();
        await waitFor(
          () => player.received.video > 20 && player.received.audio > 20,
          10_000,
          "packets of the WHIP stream over WHEP",
        );

        // Trickle: a candidate of the current ICE session is taken, with or without If-Match.
        const frag = "a=mid:0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 9 typ host\r\n";
        assert.equal((await send(server, "PATCH", location, frag, sdpfrag)).status, 204);
        assert.equal(
          (await send(server, "PATCH", location, frag, { ...sdpfrag, "If-Match": etag })).status,
          204,
        );
        const stale = await send(server, "PATCH", location, frag, {
          ...sdpfrag,
          "If-Match": '"stale"',
        });
        assert.equal(stale.status, 412);
        const restart = await send(
          server,
          "PATCH",
          location,
          "a=ice-ufrag:newU\r\na=ice-pwd:newpasswordnewpassword12\r\n",
          { ...sdpfrag, "If-Match": "*" },
        );
        assert.equal(restart.status, 422);
        assert.match(restart.text, /ICE restart/);
        const garbage = await send(server, "PATCH", location, "a=candidate:nonsense\r\n", sdpfrag);
        assert.equal(garbage.status, 400);
        assert.match(garbage.text, /bad candidate/);
        const wrongType = await send(server, "PATCH", location, frag, {
          "Content-Type": "application/sdp",
        });
        assert.equal(wrongType.status, 415);
        const otherId = location.replace(/[A-Za-z0-9]{32}$/, "x".repeat(32));
        assert.equal((await send(server, "PATCH", otherId, frag, sdpfrag)).status, 404);

        // DELETE ends the publish and its player; the resource is gone afterwards.
        assert.equal((await send(server, "DELETE", location)).status, 200);
        assert.deepEqual(await streams(server), []);
        assert.equal(server.services.whip.size, 0);
        assert.equal((await send(server, "DELETE", location)).status, 404);
        await waitFor(() => openPeerCount() === 0, 5000, "server peers closed");
        // The recording, closed with the stream, holds the published picture.
        let file = "";
        for (let i = 0; i < 100 && !file; i++) {
          const list = await (await server.post("/recorder/find_all")).json() as unknown[];
          const names = list.length > 0 ? [] : [...Deno.readDirSync(config.folders.records)];
          file = names.find((e) => e.isFile)?.name ?? "";
          if (!file) await new Promise((r) => setTimeout(r, 50));
        }
        const { out } = await run("ffprobe", [
          ...[
            "-v",
            "error",
            "-count_frames",
            "-show_entries",
            "stream=codec_name,width,nb_read_frames",
          ],
          ...["-of", "json", `${config.folders.records}/${file}`],
        ]);
        const video = JSON.parse(out).streams.find((s: { width?: number }) => s.width);
        assert.equal(video.codec_name, "vp8");
        assert.equal(video.width, 320);
        assert.ok(Number(video.nb_read_frames) > 10, out);
      } finally {
        await publisher.close();
        await player.close();
      }
    }, config);
  },
});

Deno.test({
  name: "WHEP play of a VOD file (H.264 + AAC): packets of both tracks, DELETE ends",
  ...weriftSanitizers,
  fn: async () => {
    const config = testConfig();
    await Deno.mkdir(config.folders.media, { recursive: true });
    await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 10, audio: "aac" });
    await withServer(async (server) => {
      const started = await server.post("/vod/startup", {
        uri: "vod-live://clip.mp4",
        localStreamName: "film",
      });
      assert.equal(started.status, 200);
      await started.body?.cancel();
      const player = new WhepPlayer("H264");
      try {
        const res = await offer(server, "/whep/film", player.pc);
        assert.equal(res.status, 201);
        const location = res.headers.get("location")!;
        assert.match(location, /^\/whep\/film\/[A-Za-z0-9]{32}$/);
        assert.match(await res.text(), /a=sendonly/);
        await waitFor(
          () => player.received.video > 30 && player.received.audio > 30,
          15_000,
          "packets of both tracks",
        );
        const players = (await streams(server)).filter((s) => !s.published);
        assert.equal(players.length, 1);
        assert.equal(players[0].name, "film");
        assert.equal((await send(server, "DELETE", location)).status, 200);
        assert.deepEqual((await streams(server)).map((s) => s.name), ["film"]);
        await waitFor(() => openPeerCount() === 0, 5000, "server peers closed");
      } finally {
        await player.close();
      }
    }, config);
  },
});

Deno.test({
  name: "WHIP/WHEP refusals: 400 malformed SDP, 404 unknown stream, 409 name in use, 415, OPTIONS",
  ...weriftSanitizers,
  fn: async () => {
    const config = testConfig({ whip: { publishPath: "/in", playPath: "/out" } });
    await Deno.mkdir(config.folders.media, { recursive: true });
    await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 5 });
    await withServer(async (server) => {
      const sdp = { "Content-Type": "application/sdp" };
      const malformed = await send(server, "POST", "/in/x", "hello", sdp);
      assert.equal(malformed.status, 400);
      assert.match(JSON.parse(malformed.text).message, /not an SDP/);
      const noMedia = await send(server, "POST", "/in/x", "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\n", sdp);
      assert.equal(noMedia.status, 400);
      assert.match(noMedia.text, /no audio or video/);
      const wrongType = await send(server, "POST", "/in/x", "v=0\r\n", {
        "Content-Type": "application/json",
      });
      assert.equal(wrongType.status, 415);
      // The default prefixes are not served once others are configured.
      assert.equal((await send(server, "POST", "/whip/x", "v=0\r\n", sdp)).status, 404);

      const unknown = new WhepPlayer();
      try {
        const res = await offer(server, "/out/nobody", unknown.pc);
        assert.equal(res.status, 404);
        assert.match((await res.json()).message, /nobody/);
      } finally {
        await unknown.close();
      }
      await (await server.post("/vod/startup", {
        uri: "vod-live://clip.mp4",
        localStreamName: "taken",
      }))
        .body?.cancel();
      const twice = new WhipPublisher([]);
      try {
        const res = await offer(server, "/in/taken", twice.pc);
        assert.equal(res.status, 409);
        await res.body?.cancel();
      } finally {
        await twice.close();
      }

      const preflight = await send(server, "OPTIONS", "/in/cam", undefined, {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
      });
      assert.equal(preflight.status, 200);
      assert.equal(preflight.headers.get("accept-post"), "application/sdp");
      assert.equal(preflight.headers.get("access-control-allow-origin"), "*");
      assert.match(preflight.headers.get("access-control-allow-methods")!, /POST/);
      assert.equal(
        preflight.headers.get("access-control-allow-headers"),
        "authorization, content-type",
      );
      const resource = await send(server, "OPTIONS", `/out/cam/${"a".repeat(32)}`);
      assert.equal(resource.headers.get("accept-patch"), "application/trickle-ice-sdpfrag");
      assert.match(resource.headers.get("access-control-allow-methods")!, /PATCH, DELETE/);
      assert.equal((await send(server, "DELETE", `/out/cam/${"a".repeat(32)}`)).status, 404);
      assert.equal((await send(server, "PUT", "/in/cam", "")).status, 405);
      assert.equal(server.services.whip.size, 0);
      assert.equal(openPeerCount(), 0);
    }, config);
  },
});

Deno.test({
  name: "WHIP auth: REST bearer tokens, and the connect hook gets the token and may refuse",
  ...weriftSanitizers,
  fn: async () => {
    const backend = await startHookBackend();
    const token = "whip-token-0123456789";
    const config = testConfig({ rest: { authTokens: [token] }, hooks: { url: backend.url } });
    try {
      await withServer(async (server) => {
        const anonymous = new WhipPublisher([]);
        const refused = new WhipPublisher([]);
        const admitted = new WhipPublisher([]);
        try {
          const res = await offer(server, "/whip/cam", anonymous.pc);
          assert.equal(res.status, 401);
          await res.body?.cancel();

          backend.respond((call) =>
            call.hook === "connect" ? { status: 403 } : { status: 200, body: call.body }
          );
          const no = await offer(server, "/whip/cam", refused.pc, {
            Authorization: `Bearer ${token}`,
          });
          assert.equal(no.status, 403);
          assert.match((await no.json()).message, /refused by the backend/);

          backend.respond((call) => ({ status: 200, body: call.body }));
          const from = backend.calls.length;
          const yes = await offer(server, "/whip/cam", admitted.pc, {
            Authorization: `Bearer ${token}`,
          });
          assert.equal(yes.status, 201);
          await yes.body?.cancel();
          const connect = await backend.waitFor("connect", 2000, from);
          assert.deepEqual(connect.body.custom, { token });
          assert.equal(connect.body.clientVersion, "WHIP");
          const publish = await backend.waitFor("publishStream", 2000, from);
          assert.equal(publish.body.name, "cam");
          assert.equal(publish.body.sessionId, connect.body.sessionId);
          const location = yes.headers.get("location")!;
          const gone = await send(server, "DELETE", location, undefined, {
            Authorization: `Bearer ${token}`,
          });
          assert.equal(gone.status, 200);
          const status = await backend.waitFor("StreamStatusEvent", 2000, from);
          assert.equal(status.body.name, "cam");
        } finally {
          await anonymous.close();
          await refused.close();
          await admitted.close();
        }
      }, config);
    } finally {
      await backend.close();
    }
  },
});
