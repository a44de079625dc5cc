/**
 * The RTSP server's protocol over a raw connection, with a stream fed by hand: DESCRIBE,
 * SETUP (TCP and UDP), PLAY with RTP-Info, sender reports, PAUSE, TEARDOWN, keepalives,
 * the session timeout, and the refusals (404, 454, 455, 459, 461, 501; 400 and the
 * connection closed for garbage, oversized or unfinished requests; connection caps).
 */
import assert from "node:assert/strict";
import dgram from "node:dgram";
import { configSchema } from "../config.ts";
import { silentLogger } from "../core/log.ts";
import { StreamRegistry } from "../core/stream_registry.ts";
import { joinLengthPrefixed } from "../media/codecs/nalu.ts";
import type { MediaFrame } from "../media/frame.ts";
import { parseSdp } from "../media/formats/sdp/sdp.ts";
import { parseRtpPacket } from "../media/rtp/packet.ts";
import { parseSenderReports } from "../media/rtp/rtcp.ts";
import { type RtspServerTestOptions, startRtspServer } from "../media/publishers/rtsp_server.ts";
import { Stream } from "../media/stream.ts";
import { Authenticator, pickChallenge } from "../media/protocols/rtsp/auth.ts";
import { RawRtspClient } from "./helpers/rtsp_raw_client.ts";
import { aacTrack, h264TrackOf } from "./helpers/media_tracks.ts";

const sps = Uint8Array.of(0x67, 0x42, 0xc0, 0x1e, 0xda, 0x02, 0x80, 0xbf, 0xe5, 0xc0, 0x44);
const pps = Uint8Array.of(0x68, 0xce, 0x3c, 0x80);

function cameraStream(name = "cam"): Stream {
  return new Stream({
    name,
    mediaSessionId: crypto.randomUUID(),
    tracks: [h264TrackOf(sps, pps), aacTrack(2)],
    mediaProvider: "test",
    stopProvider: () => Promise.resolve(),
  });
}

function videoFrame(pts: number, keyframe: boolean, size = 3000): MediaFrame {
  const nal = new Uint8Array(size).fill(7);
  nal[0] = keyframe ? 0x65 : 0x41;
  return { trackId: 0, codec: "H264", pts, dts: pts, keyframe, data: joinLengthPrefixed([nal]) };
}

function audioFrame(pts: number): MediaFrame {
  return {
    trackId: 1,
    codec: "AAC",
    pts,
    dts: pts,
    keyframe: true,
    data: new Uint8Array(200).fill(3),
  };
}

/** Runs `fn` with an RTSP server over a registry holding the stream "cam". */
async function withRtsp(
  fn: (ctx: { port: number; stream: Stream; url: string }) => Promise<void>,
  options: RtspServerTestOptions = {},
  overrides: Record<string, unknown> = {},
): Promise<void> {
  const streams = new StreamRegistry();
  const stream = cameraStream();
  streams.add(stream);
  const config = configSchema.parse({ ports: { rtsp: 0 }, ...overrides });
  const server = startRtspServer({ log: silentLogger, streams, config }, {
    requestTimeoutMs: 300,
    ...options,
  });
  try {
    await fn({ port: server.port, stream, url: `rtsp://127.0.0.1:${server.port}/cam` });
  } finally {
    stream.end();
    await server.close();
  }
}

Deno.test("RTSP server: DESCRIBE gives the tracks' SDP; 404 for an unknown stream; OPTIONS lists the methods", async () => {
  await withRtsp(async ({ port, url }) => {
    const client = await RawRtspClient.connect(port);
    try {
      const options = await client.request("OPTIONS", "*");
      assert.equal(options.status, 200);
      assert.match(
        options.headers.get("public")!,
        /DESCRIBE.*SETUP.*PLAY.*PAUSE.*TEARDOWN.*GET_PARAMETER/,
      );
      const missing = await client.request("DESCRIBE", `${url}-nope`, {
        Accept: "application/sdp",
      });
      assert.equal(missing.status, 404);
      const described = await client.request("DESCRIBE", url, { Accept: "application/sdp" });
      assert.equal(described.status, 200);
      assert.equal(described.headers.get("content-base"), `${url}/`);
      assert.equal(described.headers.get("content-type"), "application/sdp");
      const sdp = parseSdp(new TextDecoder().decode(described.body));
      assert.deepEqual(sdp.media.map((m) => [m.type, m.formats[0]]), [["video", "96"], [
        "audio",
        "97",
      ]]);
      const text = new TextDecoder().decode(described.body);
      assert.match(text, /a=rtpmap:97 MPEG4-GENERIC\/48000\/2/);
      assert.match(text, /a=fmtp:97 .*mode=AAC-hbr.*config=1190/);
      assert.match(text, /a=control:trackID=0/);
    } finally {
      await client.close();
    }
  });
});

Deno.test("RTSP server: SETUP over TCP, PLAY with RTP-Info, sender report then RTP on the channels, PAUSE, TEARDOWN; out of order 455, wrong session 454", async () => {
  await withRtsp(async ({ port, url, stream }) => {
    // A keyframe before PLAY: the player starts with it, and RTP-Info can name its time.
    stream.push(videoFrame(90_000, true));
    const client = await RawRtspClient.connect(port);
    try {
      assert.equal((await client.request("PLAY", url)).status, 455);
      assert.equal((await client.request("PAUSE", url)).status, 455);
      assert.equal(
        (await client.request("SETUP", url, { Transport: "RTP/AVP/TCP;unicast;interleaved=0-1" }))
          .status,
        459,
      );
      assert.equal(
        (await client.request("SETUP", `${url}/trackID=0`, { Transport: "RTP/AVP;multicast" }))
          .status,
        461,
      );
      assert.equal(
        (await client.request("SETUP", `${url}/trackID=9`, {
          Transport: "RTP/AVP/TCP;unicast;interleaved=0-1",
        })).status,
        404,
      );
      const video = await client.request("SETUP", `${url}/trackID=0`, {
        Transport: "RTP/AVP/TCP;unicast;interleaved=0-1",
      });
      assert.equal(video.status, 200);
      assert.match(
        video.headers.get("transport")!,
        /^RTP\/AVP\/TCP;unicast;interleaved=0-1;ssrc=[0-9A-F]{8}$/,
      );
      const session = video.headers.get("session")!.split(";")[0];
      assert.match(video.headers.get("session")!, /;timeout=60$/);
      // No interleaved channels asked: the server picks the next free pair.
      const audio = await client.request("SETUP", `${url}/trackID=1`, {
        Transport: "RTP/AVP/TCP;unicast",
        Session: session,
      });
      assert.match(audio.headers.get("transport")!, /interleaved=2-3/);
      assert.equal((await client.request("PLAY", url, { Session: "not-this-one" })).status, 454);

      const play = await client.request("PLAY", url, { Session: session, Range: "npt=now-" });
      assert.equal(play.status, 200);
      const info = play.headers.get("rtp-info")!.split(",");
      assert.equal(info.length, 2);
      const [, seqText, rtptimeText] = /seq=(\d+);rtptime=(\d+)/.exec(info[0])!;
      assert.ok(info[0].startsWith(`url=${url}/trackID=0;`));

      // The keyframe of the GOP cache: a sender report on channel 1, then its RTP on channel 0.
      assert.ok(await client.waitFrames(2));
      assert.equal(client.frames[0].channel, 1);
      const [report] = parseSenderReports(client.frames[0].data);
      assert.equal(report.rtpTimestamp, Number(rtptimeText));
      const first = parseRtpPacket(client.frames[1].data);
      assert.equal(client.frames[1].channel, 0);
      assert.equal(first.payloadType, 96);
      assert.equal(first.sequenceNumber, Number(seqText));
      assert.equal(first.timestamp, Number(rtptimeText));
      assert.equal(first.ssrc, report.ssrc);

      stream.push(audioFrame(48_000 + 480));
      stream.push(videoFrame(90_000 + 3600, false));
      // The keyframe: SR, SPS, PPS (it has none of its own), 3 FU-A; the audio: SR, 1 packet;
      // the next picture: 3 FU-A (its track's report is not due yet).
      assert.ok(await client.waitFrames(6 + 2 + 3));
      assert.equal(client.frames.filter((f) => f.channel === 0).length, 5 + 3);
      const audioPacket = client.frames.find((f) => f.channel === 2)!;
      const parsed = parseRtpPacket(audioPacket.data);
      assert.equal(parsed.payloadType, 97);
      assert.equal(parsed.marker, true);
      assert.deepEqual([...parsed.payload.subarray(0, 4)], [0, 16, 200 >> 5, (200 & 0x1f) << 3]);

      assert.equal(
        (await client.request("SETUP", `${url}/trackID=1`, {
          Transport: "RTP/AVP/TCP;unicast;interleaved=2-3",
          Session: session,
        })).status,
        455,
      );
      assert.equal((await client.request("GET_PARAMETER", url, { Session: session })).status, 200);
      assert.equal((await client.request("PAUSE", url, { Session: session })).status, 200);
      const held = client.frames.length;
      stream.push(videoFrame(90_000 + 7200, false));
      assert.equal((await client.request("GET_PARAMETER", url, { Session: session })).status, 200);
      assert.equal(client.frames.length, held, "nothing is sent while paused");
      const teardown = await client.request("TEARDOWN", url, { Session: session });
      assert.equal(teardown.status, 200);
      assert.equal((await client.request("PLAY", url)).status, 455);
      assert.equal((await client.request("RECORD_IT", url)).status, 501);
    } finally {
      await client.close();
    }
  });
});

Deno.test("RTSP server: the stream's end closes its players' connections", async () => {
  await withRtsp(async ({ port, url, stream }) => {
    stream.push(videoFrame(0, true));
    const client = await RawRtspClient.connect(port);
    try {
      await client.request("SETUP", `${url}/trackID=0`, {
        Transport: "RTP/AVP/TCP;unicast;interleaved=0-1",
      });
      await client.request("PLAY", url);
      assert.ok(await client.waitFrames(2));
      stream.end();
      assert.ok(await client.closedWithin(2000));
    } finally {
      await client.close();
    }
  });
});

Deno.test("RTSP server: SETUP over UDP sends RTP and RTCP to the client's ports; without keepalives the session times out", async () => {
  await withRtsp(async ({ port, url, stream }) => {
    stream.push(videoFrame(0, true));
    const rtp = dgram.createSocket("udp4");
    const rtcp = dgram.createSocket("udp4");
    const rtpPackets: Uint8Array[] = [];
    const rtcpPackets: Uint8Array[] = [];
    rtp.on("message", (m: Uint8Array) => rtpPackets.push(m));
    rtcp.on("message", (m: Uint8Array) => rtcpPackets.push(m));
    await new Promise<void>((r) => rtp.bind(0, "127.0.0.1", r));
    await new Promise<void>((r) => rtcp.bind(0, "127.0.0.1", r));
    const client = await RawRtspClient.connect(port);
    try {
      const clientPorts = `${rtp.address().port}-${rtcp.address().port}`;
      const setup = await client.request("SETUP", `${url}/trackID=0`, {
        Transport: `RTP/AVP;unicast;client_port=${clientPorts}`,
      });
      assert.equal(setup.status, 200);
      const [, s0, s1] = /server_port=(\d+)-(\d+)/.exec(setup.headers.get("transport")!)!;
      assert.equal(Number(s1), Number(s0) + 1);
      assert.ok(Number(s0) >= 31000 && Number(s0) <= 31999, "server ports from the media range");
      assert.match(setup.headers.get("transport")!, new RegExp(`client_port=${clientPorts};`));
      const session = setup.headers.get("session")!.split(";")[0];
      assert.equal((await client.request("PLAY", url, { Session: session })).status, 200);
      const deadline = Date.now() + 3000;
      while ((rtpPackets.length < 4 || rtcpPackets.length < 1) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.ok(rtpPackets.length >= 4, `${rtpPackets.length} RTP packets`);
      assert.equal(parseRtpPacket(rtpPackets[0]).payloadType, 96);
      assert.equal(parseSenderReports(rtcpPackets[0]).length, 1);
      // No request and no RTCP from the client for the 1 s timeout: the server hangs up.
      assert.ok(await client.closedWithin(3000));
    } finally {
      await client.close();
      await new Promise<void>((r) => rtp.close(() => r()));
      await new Promise<void>((r) => rtcp.close(() => r()));
    }
  }, { sessionTimeoutSec: 1 });
});

Deno.test("RTSP server: garbage, oversized and unfinished requests are answered 400 and the connection closed", async () => {
  await withRtsp(async ({ port, url }) => {
    const cases: (string | Uint8Array)[] = [
      "\x00\x01\x02garbage\r\n\r\n",
      "HELLO WORLD\r\n\r\n",
      `DESCRIBE ${url} RTSP/1.0\r\n\r\n`, // no CSeq
      `DESCRIBE ${url} RTSP/1.0\r\nCSeq: 1\r\nX: ${"a".repeat(20_000)}\r\n\r\n`,
      `DESCRIBE ${url} RTSP/1.0\r\nCSeq: 1\r\nContent-Length: 999999999\r\n\r\n`,
      `DESCRIBE ${url} RTSP/1.0\r\nCSeq: 1\r\n`, // never finished: 400 after the request timeout
      `DESCRIBE rtsp://127.0.0.1/%zz RTSP/1.0\r\nCSeq: 1\r\n\r\n`,
    ];
    // Random bytes of a fixed seed, and truncations of a valid request.
    let seed = 12345;
    const random = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) & 0xff;
    for (let i = 0; i < 8; i++) cases.push(Uint8Array.from({ length: 64 + i * 97 }, random));
    for (const cut of [3, 10, 30]) {
      cases.push(`OPTIONS * RTSP/1.0\r\nCSeq: 2\r\n\r\n`.slice(0, cut));
    }
    for (const bytes of cases) {
      const client = await RawRtspClient.connect(port);
      try {
        await client.writeRaw(bytes);
        const response = await client.response(3000);
        assert.equal(
          response?.status,
          400,
          `answer to ${JSON.stringify(String(bytes).slice(0, 40))}`,
        );
        assert.ok(await client.closedWithin(2000), "connection closed");
      } finally {
        await client.close();
      }
    }
  });
});

Deno.test("RTSP server: connections past the per-address cap are closed at once", async () => {
  await withRtsp(
    async ({ port }) => {
      const held = [await RawRtspClient.connect(port), await RawRtspClient.connect(port)];
      const refused = await RawRtspClient.connect(port);
      try {
        assert.equal((await held[0].request("OPTIONS", "*")).status, 200);
        assert.ok(await refused.closedWithin(2000));
        assert.equal((await held[1].request("OPTIONS", "*")).status, 200);
      } finally {
        for (const c of [...held, refused]) await c.close();
      }
    },
    {},
    { limits: { connectionsPerAddress: 2 } },
  );
});

Deno.test("RTSP server: ANNOUNCE refusals: 409 for a name in use, 400 for a broken SDP, 415 for another body type; RECORD before ANNOUNCE is 455", async () => {
  await withRtsp(async ({ port, url }) => {
    const sdp = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nt=0 0\r\n" +
      "m=audio 0 RTP/AVP 0\r\na=control:streamid=0\r\n";
    const client = await RawRtspClient.connect(port);
    try {
      const base = url.replace(/\/cam$/, "");
      assert.equal((await client.request("RECORD", `${base}/pub`)).status, 455);
      assert.equal(
        (await client.request("ANNOUNCE", url, { "Content-Type": "application/sdp" }, sdp)).status,
        409,
      );
      assert.equal(
        (await client.request("ANNOUNCE", `${base}/pub`, { "Content-Type": "text/plain" }, sdp))
          .status,
        415,
      );
      assert.equal(
        (await client.request(
          "ANNOUNCE",
          `${base}/pub`,
          { "Content-Type": "application/sdp" },
          "v=9\r\nzz",
        )).status,
        400,
      );
      const video =
        "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 VP9/90000\r\n";
      assert.equal(
        (await client.request(
          "ANNOUNCE",
          `${base}/pub`,
          { "Content-Type": "application/sdp" },
          video,
        )).status,
        400,
        "no codec the server carries",
      );
      const announced = await client.request("ANNOUNCE", `${base}/pub`, {
        "Content-Type": "application/sdp",
      }, sdp);
      assert.equal(announced.status, 200);
      assert.equal((await client.request("PLAY", `${base}/pub`)).status, 455);
      const setup = await client.request("SETUP", `${base}/pub/streamid=0`, {
        Transport: "RTP/AVP/TCP;unicast;interleaved=0-1;mode=record",
      });
      assert.equal(setup.status, 200);
      assert.equal(
        setup.headers.get("transport"),
        "RTP/AVP/TCP;unicast;interleaved=0-1;mode=record",
      );
      assert.equal((await client.request("RECORD", `${base}/pub`)).status, 200);
    } finally {
      await client.close();
    }
  });
});

Deno.test("RTSP server: a client that stops reading is dropped by the write timeout while another keeps receiving", async () => {
  await withRtsp(async ({ port, url, stream }) => {
    stream.push(videoFrame(0, true, 60_000));
    const stalled = await RawRtspClient.connect(port);
    const reading = await RawRtspClient.connect(port);
    try {
      for (const client of [stalled, reading]) {
        await client.request("SETUP", `${url}/trackID=0`, {
          Transport: "RTP/AVP/TCP;unicast;interleaved=0-1",
        });
        assert.equal((await client.request("PLAY", url)).status, 200);
      }
      // 60 kB pictures at 100 per second: the stalled client's socket buffers fill at once.
      let pts = 0;
      const feeder = setInterval(() => stream.push(videoFrame(pts += 900, false, 60_000)), 10);
      try {
        const startMs = Date.now();
        let received = 0;
        while (Date.now() - startMs < 2000) {
          assert.ok(
            await reading.waitFrames(reading.frames.length + 10),
            "the reader keeps receiving",
          );
          received += reading.frames.length;
          reading.frames.length = 0;
        }
        assert.ok(received > 500, `${received} packets to the reader`);
        // The stalled one is closed by the server: reading now finds the end after its backlog.
        assert.ok(await stalled.closedWithin(5000), "the stalled client was dropped");
      } finally {
        clearInterval(feeder);
      }
    } finally {
      await stalled.close();
      await reading.close();
    }
  }, { writeTimeoutMs: 500 });
});

Deno.test("RTSP server with users: 401 with Digest and Basic challenges; Digest (the pull's own client) and Basic get in; wrong passwords do not", async () => {
  await withRtsp(
    async ({ port, url }) => {
      const client = await RawRtspClient.connect(port);
      try {
        assert.equal((await client.request("OPTIONS", "*")).status, 200);
        const refused = await client.request("DESCRIBE", url);
        assert.equal(refused.status, 401);
        const challenges = refused.headers.getAll("www-authenticate");
        assert.equal(challenges.length, 2);
        const digest = pickChallenge(challenges)!;
        assert.equal(digest.scheme, "digest");
        const as = (user: string, password: string) =>
          new Authenticator(user, password, digest).authorization("DESCRIBE", url);
        assert.equal(
          (await client.request("DESCRIBE", url, { Authorization: as("alice", "secret") })).status,
          200,
        );
        assert.equal(
          (await client.request("DESCRIBE", url, { Authorization: as("alice", "wrong") })).status,
          401,
        );
        assert.equal(
          (await client.request("DESCRIBE", url, { Authorization: as("bob", "secret") })).status,
          401,
        );
        const basic = (text: string) => `Basic ${btoa(text)}`;
        assert.equal(
          (await client.request("DESCRIBE", url, { Authorization: basic("alice:secret") })).status,
          200,
        );
        assert.equal(
          (await client.request("DESCRIBE", url, { Authorization: basic("alice:nope") })).status,
          401,
        );
        assert.equal(
          (await client.request("DESCRIBE", url, { Authorization: "Digest garbage" })).status,
          401,
        );
      } finally {
        await client.close();
      }
    },
    {},
    { rtsp: { serverUsers: ["alice:secret"] } },
  );
});
