/**
 * The HLS server: `/hls/*` REST operations and the HLS listener, read by ffprobe and ffmpeg
 * as a player would, with VOD and RTMP-published streams.
 */
import assert from "node:assert/strict";
import type { HlsRecord } from "../core/records.ts";
import { run } from "../media/formats/test_fixtures.ts";
import { publishRtmp, stopPublisher } from "./helpers/ffmpeg_rtmp.ts";
import { makeClip, waitFor } from "./helpers/media_fixtures.ts";
import { startTestServer, testConfig, type TestServer, withServer } from "./helpers/test_server.ts";

async function records(server: TestServer, page: { offset?: number; size?: number } = {}) {
  const res = await server.post("/hls/find_all", page);
  assert.equal(res.status, 200);
  return await res.json() as HlsRecord[];
}

/** GETs an HLS URL; the body as text (binary bodies are only counted). */
async function get(
  server: TestServer,
  path: string,
  init: RequestInit = {},
): Promise<{ status: number; headers: Headers; text: string; bytes: number }> {
  const res = await fetch(`${server.hlsUrl}${path}`, init);
  const data = new Uint8Array(await res.arrayBuffer());
  return {
    status: res.status,
    headers: res.headers,
    text: new TextDecoder().decode(data),
    bytes: data.length,
  };
}

/** ffprobe's streams of a URL (no frame counting: a live playlist would be read to its end). */
async function probeUrl(url: string) {
  const { out } = await run("ffprobe", [
    ...["-v", "error", "-show_entries", "stream=codec_type,codec_name,width,height"],
    ...["-of", "json", url],
  ]);
  return (JSON.parse(out).streams as {
    codec_type: string;
    codec_name: string;
    width?: number;
    height?: number;
  }[]);
}

/** Decodes `seconds` of a URL with ffmpeg; its error output (empty when clean). */
async function decodeErrors(url: string, seconds: number): Promise<string> {
  const { err } = await run("ffmpeg", [
    "-v",
    "error",
    "-i",
    url,
    "-t",
    String(seconds),
    "-f",
    "null",
    "-",
  ]);
  return err.trim();
}

/** A raw request line sent as is (fetch would normalize `..` away); the status code. */
async function rawStatus(port: number, target: string): Promise<number> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(
      new TextEncoder().encode(
        `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`,
      ),
    );
    const buf = new Uint8Array(4096);
    let text = "";
    for (;;) {
      const n = await conn.read(buf);
      if (n === null) break;
      text += new TextDecoder().decode(buf.subarray(0, n));
    }
    return Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
  } finally {
    conn.close();
  }
}

Deno.test("a VOD stream over HLS: startup, master playlist with the source and a 360p profile, ffprobe and ffmpeg read both, metrics, ENDLIST then 404", async () => {
  const config = testConfig({
    hls: {
      segmentDurationSec: 2,
      windowSegments: 3,
      endedKeepSec: 2,
      profiles: [{ name: "360p", width: 640, height: 360, bitrateKbps: 600 }],
    },
  });
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/hd.mp4`, {
    seconds: 16,
    width: 1280,
    height: 720,
    audio: "aac",
  });
  await withServer(async (server) => {
    const unknown = await server.post("/hls/startup", { name: "nothing" });
    assert.equal(unknown.status, 404);
    assert.match((await unknown.json()).message, /not found/);
    const pathy = await server.post("/hls/startup", { name: "a/b" });
    assert.equal(pathy.status, 400);
    assert.equal((await pathy.json()).field, "name");

    const vod = await server.post("/vod/startup", {
      uri: "vod-live://hd.mp4",
      localStreamName: "hd",
    });
    assert.equal(vod.status, 200, await vod.text());
    const started = await server.post("/hls/startup", { name: "hd" });
    assert.equal(started.status, 200);
    assert.equal(await started.text(), "");
    const again = await server.post("/hls/startup", { name: "hd" });
    assert.equal(again.status, 409);

    const master = await get(server, "/hd/hd.m3u8", { headers: { "User-Agent": "test-player/1" } });
    assert.equal(master.status, 200, master.text);
    assert.equal(master.headers.get("content-type"), "application/vnd.apple.mpegurl");
    assert.equal(master.headers.get("access-control-allow-origin"), "*");
    assert.equal(master.headers.get("cache-control"), "no-cache");
    assert.match(master.text, /^#EXTM3U/);
    assert.match(
      master.text,
      /#EXT-X-STREAM-INF:[^\n]*CODECS="avc1\.[0-9a-f]{6},mp4a\.40\.2"[^\n]*RESOLUTION=1280x720[^\n]*\nsource\/index\.m3u8/,
    );
    assert.match(master.text, /RESOLUTION=640x360[^\n]*\n360p\/index\.m3u8/);

    const media = await get(server, "/hd/source/index.m3u8", {
      headers: { "User-Agent": "test-player/1" },
    });
    assert.equal(media.status, 200);
    assert.match(media.text, /#EXT-X-TARGETDURATION:2/);
    const firstSegment = /^(\d+)\.ts$/m.exec(media.text)![1];
    const segment = await get(server, `/hd/source/${firstSegment}.ts`, {
      headers: { "User-Agent": "test-player/1" },
    });
    assert.equal(segment.status, 200);
    assert.equal(segment.headers.get("content-type"), "video/mp2t");
    assert.match(segment.headers.get("cache-control")!, /max-age=3600/);
    assert.ok(segment.bytes > 10_000, `${segment.bytes} bytes`);
    const head = await fetch(`${server.hlsUrl}/hd/source/${firstSegment}.ts`, { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(head.headers.get("content-type"), "video/mp2t");
    assert.equal((await head.arrayBuffer()).byteLength, 0);

    const streams = await probeUrl(`${server.hlsUrl}/hd/hd.m3u8`);
    const sizes = streams.filter((s) => s.codec_type === "video").map((s) =>
      `${s.codec_name} ${s.width}x${s.height}`
    );
    assert.deepEqual(sizes.sort(), ["h264 1280x720", "h264 640x360"]);
    assert.ok(streams.some((s) => s.codec_type === "audio" && s.codec_name === "aac"));
    for (const [variant, size] of [["source", "1280x720"], ["360p", "640x360"]]) {
      const probed = await probeUrl(`${server.hlsUrl}/hd/${variant}/index.m3u8`);
      assert.deepEqual(
        probed.map((s) => s.codec_type === "video" ? `h264 ${s.width}x${s.height}` : s.codec_name)
          .sort(),
        ["aac", `h264 ${size}`],
        variant,
      );
      assert.equal(await decodeErrors(`${server.hlsUrl}/hd/${variant}/index.m3u8`, 4), "", variant);
    }
    assert.equal(await decodeErrors(`${server.hlsUrl}/hd/hd.m3u8`, 4), "");

    // WCS names a profile's playlist after the stream and the profile; its segments follow.
    const alias = await get(server, "/hd-360p/hd-360p.m3u8");
    assert.equal(alias.status, 200, alias.text);
    assert.match(alias.text, /^#EXTM3U\n[^]*#EXTINF:/);
    assert.equal(alias.text.includes("#EXT-X-STREAM-INF"), false, "a media playlist");
    const aliasSegment = /^(\d+)\.ts$/m.exec(alias.text)![1];
    const aliased = await get(server, `/hd-360p/${aliasSegment}.ts`);
    assert.equal(aliased.status, 200);
    assert.ok(aliased.bytes > 1000, `${aliased.bytes} bytes`);
    assert.deepEqual(
      (await probeUrl(`${server.hlsUrl}/hd-360p/hd-360p.m3u8`)).filter((s) =>
        s.codec_type === "video"
      ).map((s) => `${s.width}x${s.height}`),
      ["640x360"],
    );
    assert.equal((await get(server, "/hd-1080p/hd-1080p.m3u8")).status, 404);

    const [record] = await records(server);
    assert.equal(record.streamName, "hd");
    assert.equal(record.status, "ACTIVE");
    assert.deepEqual(record.profiles, ["source", "360p"]);
    assert.ok(record.subscribers >= 1, `${record.subscribers} subscribers`);
    assert.match(record.playlist, /#EXT-X-STREAM-INF/);
    assert.deepEqual(record.logs, []);

    const subscribers = await (await server.post("/hls/subscribers", { hlsId: record.id })).json();
    const viewer = subscribers.find((s: { userAgent: string }) => s.userAgent === "test-player/1");
    assert.ok(viewer, JSON.stringify(subscribers));
    assert.equal(viewer.ip, "127.0.0.1");
    assert.equal(viewer.active, true);
    assert.equal(viewer.metrics.requestsNumber, 3);
    assert.deepEqual(viewer.metrics.requestsStatuses, { "200 OK": 3 });
    assert.ok(viewer.metrics.profileTime.source >= 0);

    const profile = await (await server.post("/hls/profiles", {
      hlsId: record.id,
      profileName: "360p",
    })).json();
    assert.equal(profile.name, "360p");
    assert.equal(profile.stream.mediaProvider, "HLS");
    assert.equal(profile.keyFrameReceived, true);
    assert.equal(profile.videoProfile.width, 640);
    assert.equal(profile.videoProfile.height, 360);
    assert.equal(profile.videoProfile.codec, "H264");
    assert.equal(profile.videoProfile.bitrate, 600);
    assert.ok(profile.metrics.avgFPS > 20, `avgFPS ${profile.metrics.avgFPS}`);
    assert.ok(profile.metrics.currentPts > profile.metrics.startPts);
    const source = await (await server.post("/hls/profiles", {
      hlsId: record.id,
      profileName: "source",
    })).json();
    assert.equal(source.videoProfile.width, 1280);
    assert.ok(source.metrics.maxFPS >= 24, `maxFPS ${source.metrics.maxFPS}`);
    assert.equal(
      (await server.post("/hls/profiles", { hlsId: record.id, profileName: "1080p" })).status,
      404,
    );
    assert.equal((await server.post("/hls/subscribers", { hlsId: "nope" })).status, 404);

    // Out of the window (3 segments of 2 s) once the stream has run on.
    await waitFor("segment 0 to leave the window", async () => {
      const text = (await get(server, "/hd/source/index.m3u8")).text;
      return /^0\.ts$/m.test(text) ? undefined : true;
    }, 15_000);
    assert.equal((await get(server, "/hd/source/0.ts")).status, 404);
    assert.equal((await get(server, "/hd/source/99999.ts")).status, 404);
    assert.equal((await get(server, "/hd/source/0.m4s")).status, 404);
    assert.equal((await get(server, "/nothing/nothing.m3u8")).status, 404);
    assert.equal(await rawStatus(server.hlsPort, "/hd/../hd/hd.m3u8"), 400);
    assert.equal(await rawStatus(server.hlsPort, "/hd/%2e%2e/hd.m3u8"), 400);
    assert.equal((await get(server, "/hd/source/index.m3u8?_HLS_msn=x")).status, 400);
    assert.equal((await get(server, "/hd/source/index.m3u8?_HLS_part=1")).status, 400);
    const post = await fetch(`${server.hlsUrl}/hd/hd.m3u8`, { method: "POST", body: "x" });
    assert.equal(post.status, 405);
    await post.body?.cancel();

    for (const variant of ["source", "360p"]) {
      await waitFor(`ENDLIST in ${variant} at the end of the file`, async () => {
        const text = (await get(server, `/hd/${variant}/index.m3u8`)).text;
        return text.includes("#EXT-X-ENDLIST") ? true : undefined;
      }, 20_000);
    }
    await waitFor("the output to go away", async () => {
      return (await get(server, "/hd/hd.m3u8")).status === 404 ? true : undefined;
    }, 5_000);
    assert.deepEqual(await records(server), []);
  }, config);
});

Deno.test("HLS on demand: a playlist request starts the output, idle ones stop; terminate; find_all pages", async () => {
  const config = testConfig({ hls: { idleTimeoutSec: 2 } });
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 30, audio: "aac" });
  await withServer(async (server) => {
    for (const name of ["od", "p1", "p2"]) {
      const res = await server.post("/vod/startup", {
        uri: "vod-live://clip.mp4",
        localStreamName: name,
      });
      assert.equal(res.status, 200, await res.text());
    }
    assert.deepEqual(await records(server), []);
    assert.equal((await get(server, "/od/source/0.ts")).status, 404, "segments start nothing");
    assert.deepEqual(await records(server), []);

    const master = await get(server, "/od/od.m3u8");
    assert.equal(master.status, 200, master.text);
    assert.match(master.text, /RESOLUTION=320x240[^\n]*\nsource\/index\.m3u8/);
    const [first] = await records(server);
    assert.equal(first.streamName, "od");
    assert.equal(first.subscribers, 1);

    // Nobody asks for 2 s: the output stops and its URLs answer 404.
    await waitFor(
      "the idle output to stop",
      async () => (await records(server)).length === 0 || undefined,
      6_000,
    );
    assert.equal(
      (await get(server, "/od/source/index.m3u8?_HLS_msn=0")).status,
      200,
      "a playlist starts it again",
    );
    const [second] = await records(server);
    assert.notEqual(second.id, first.id);

    const terminated = await server.post("/hls/terminate", { name: "od" });
    assert.equal(terminated.status, 200);
    assert.equal(await terminated.text(), "");
    assert.deepEqual(await records(server), []);
    assert.equal((await server.post("/hls/terminate", { name: "od" })).status, 404);

    for (const name of ["p1", "p2", "od"]) {
      assert.equal((await server.post("/hls/startup", { name })).status, 200);
    }
    assert.deepEqual((await records(server)).map((r) => r.streamName), ["p1", "p2", "od"]);
    assert.deepEqual((await records(server, { offset: 1, size: 1 })).map((r) => r.streamName), [
      "p2",
    ]);
    assert.deepEqual((await records(server, { offset: 2, size: 5 })).map((r) => r.streamName), [
      "od",
    ]);
    assert.deepEqual(await records(server, { offset: 3 }), []);
    assert.equal((await server.post("/hls/find_all", { offset: -1 })).status, 400);
    // Started by REST: not stopped for lack of viewers.
    await new Promise((r) => setTimeout(r, 2_500));
    assert.equal((await records(server)).length, 3);
    for (const name of ["od", "p1", "p2"]) {
      await server.post("/vod/terminate", { uri: "vod-live://clip.mp4", localStreamName: name });
    }
  }, config);
});

Deno.test("an RTMP-published stream over HLS: ffprobe and ffmpeg read it; a publisher back within endedKeepSec continues the output", async () => {
  const config = testConfig({ hls: { endedKeepSec: 20 } });
  await withServer(async (server) => {
    const url = `rtmp://127.0.0.1:${server.rtmpPort}/live/cam`;
    const published = async () => {
      const res = await server.post("/stream/find_all");
      const list = await res.json() as { name: string }[];
      return list.some((s) => s.name === "cam") || undefined;
    };
    let publisher = publishRtmp(url, 60);
    try {
      await waitFor("the RTMP stream", published, 15_000);
      const master = await get(server, "/cam/cam.m3u8");
      assert.equal(master.status, 200, master.text);
      assert.match(master.text, /CODECS="avc1\.[0-9a-f]{6},mp4a\.40\.2",RESOLUTION=640x360/);
      const streams = await probeUrl(`${server.hlsUrl}/cam/cam.m3u8`);
      assert.deepEqual(
        streams.map((s) =>
          s.codec_type === "video" ? `${s.codec_name} ${s.width}x${s.height}` : s.codec_name
        ).sort(),
        ["aac", "h264 640x360"],
      );
      assert.equal(await decodeErrors(`${server.hlsUrl}/cam/cam.m3u8`, 4), "");
      const [record] = await records(server);

      await stopPublisher(publisher);
      const ended = await waitFor("ENDLIST once the publisher left", async () => {
        const text = (await get(server, "/cam/source/index.m3u8")).text;
        return text.includes("#EXT-X-ENDLIST") ? text : undefined;
      }, 10_000);
      const lastBefore = lastSegment(ended);
      publisher = publishRtmp(url, 60);
      const live = await waitFor("a new segment after the old ones", async () => {
        const res = await get(server, "/cam/source/index.m3u8");
        return res.status === 200 && !res.text.includes("#EXT-X-ENDLIST") &&
            lastSegment(res.text) > lastBefore
          ? res.text
          : undefined;
      }, 15_000);
      const [again] = await records(server);
      assert.equal(again.id, record.id, "the same output continues");
      // The numbering continues after a discontinuity: no media sequence number is reused.
      assert.match(live, new RegExp(`${lastBefore}\\.ts\\n#EXT-X-DISCONTINUITY\\n`));
      assert.equal(await decodeErrors(`${server.hlsUrl}/cam/cam.m3u8`, 3), "");
    } finally {
      await stopPublisher(publisher);
    }
  }, config);
});

/** The media sequence number of the last complete segment of a media playlist. */
function lastSegment(playlist: string): number {
  const first = Number(/#EXT-X-MEDIA-SEQUENCE:(\d+)/.exec(playlist)?.[1] ?? 0);
  return first + (playlist.match(/#EXTINF:/g)?.length ?? 0) - 1;
}

Deno.test("LL-HLS in fMP4 of an Opus stream (converted to AAC): parts, preload hints, blocking reload, init.mp4; stop does not wait for blocked requests", async () => {
  const config = testConfig({
    hls: { lowLatency: true, partDurationMs: 500, container: "fmp4", segmentDurationSec: 2 },
  });
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/opus.mp4`, { seconds: 30, audio: "opus" });
  const server = await startTestServer(config);
  let stopped = false;
  try {
    const vod = await server.post("/vod/startup", {
      uri: "vod-live://opus.mp4",
      localStreamName: "ll",
    });
    assert.equal(vod.status, 200);
    const master = await get(server, "/ll/ll.m3u8");
    assert.equal(master.status, 200, master.text);
    assert.match(master.text, /CODECS="avc1\.[0-9a-f]{6},mp4a\.40\.2",RESOLUTION=320x240/);

    const playlist = (await get(server, "/ll/source/index.m3u8")).text;
    assert.match(playlist, /#EXT-X-SERVER-CONTROL:[^\n]*CAN-BLOCK-RELOAD=YES/);
    assert.match(playlist, /#EXT-X-PART-INF:PART-TARGET=0\.5/);
    assert.match(playlist, /#EXT-X-MAP:URI="init\.mp4"/);
    assert.match(playlist, /#EXT-X-PART:[^\n]*URI="\d+\.\d+\.m4s"/);
    const hint = /#EXT-X-PRELOAD-HINT:TYPE=PART,URI="([^"]+)"/.exec(playlist)![1];

    const init = await get(server, "/ll/source/init.mp4");
    assert.equal(init.status, 200);
    assert.equal(init.headers.get("content-type"), "video/mp4");
    const partUri = /#EXT-X-PART:[^\n]*URI="(\d+\.\d+\.m4s)"/.exec(playlist)![1];
    const part = await get(server, `/ll/source/${partUri}`);
    assert.equal(part.status, 200);
    assert.equal(part.headers.get("content-type"), "video/iso.segment");
    assert.ok(part.bytes > 0);
    // The hinted part does not exist yet: the request waits for it.
    const hinted = await get(server, `/ll/source/${hint}`);
    assert.equal(hinted.status, 200, `${hint}: ${hinted.text}`);

    const last = lastSegment((await get(server, "/ll/source/index.m3u8")).text);
    const asked = performance.now();
    const blocked = await get(server, `/ll/source/index.m3u8?_HLS_msn=${last + 1}`);
    const waitedMs = performance.now() - asked;
    assert.equal(blocked.status, 200);
    assert.ok(lastSegment(blocked.text) >= last + 1, blocked.text);
    assert.ok(waitedMs > 100 && waitedMs < 4500, `waited ${waitedMs} ms`);
    const partBlocked = await get(
      server,
      `/ll/source/index.m3u8?_HLS_msn=${lastSegment(blocked.text) + 1}&_HLS_part=0`,
    );
    assert.equal(partBlocked.status, 200);
    assert.match(
      partBlocked.text,
      new RegExp(`URI="${lastSegment(blocked.text) + 1}\\.0\\.m4s"`),
    );
    assert.equal((await get(server, `/ll/source/index.m3u8?_HLS_msn=${last + 50}`)).status, 400);
    // A part further ahead than the Advance Part Limit (3 s of parts) is a 400 too.
    const edgeMsn = Number(
      [...(await get(server, "/ll/source/index.m3u8")).text.matchAll(/URI="(\d+)\.\d+\.m4s"/g)]
        .at(-1)![1],
    );
    const farPart = await get(server, `/ll/source/index.m3u8?_HLS_msn=${edgeMsn}&_HLS_part=50`);
    assert.equal(farPart.status, 400, farPart.text);
    assert.equal((await get(server, "/ll/source/index.m3u8?_HLS_skip=NO")).status, 400);
    // A window of 6 segments is no longer than CAN-SKIP-UNTIL (6 targets): no delta updates.
    const skipAsked = await get(server, "/ll/source/index.m3u8?_HLS_skip=YES");
    assert.equal(skipAsked.status, 200);
    assert.equal(skipAsked.text.includes("#EXT-X-SKIP"), false);

    const probed = await probeUrl(`${server.hlsUrl}/ll/source/index.m3u8`);
    assert.deepEqual(
      probed.map((s) =>
        s.codec_type === "video" ? `${s.codec_name} ${s.width}x${s.height}` : s.codec_name
      )
        .sort(),
      ["aac", "h264 320x240"],
    );
    assert.equal(await decodeErrors(`${server.hlsUrl}/ll/ll.m3u8`, 3), "");

    // A reload blocked on a segment 2 ahead is answered at stop, not after its wait.
    const current = lastSegment((await get(server, "/ll/source/index.m3u8")).text);
    const pending = fetch(`${server.hlsUrl}/ll/source/index.m3u8?_HLS_msn=${current + 2}`)
      .then(async (res) => {
        await res.body?.cancel();
        return res.status;
      }, () => 0);
    await new Promise((r) => setTimeout(r, 100));
    const stopAt = performance.now();
    await server.stop();
    stopped = true;
    const stopMs = performance.now() - stopAt;
    await pending;
    assert.ok(stopMs < 3000, `stop took ${stopMs} ms`);
  } finally {
    if (!stopped) await server.stop();
  }
});

Deno.test("HLS CORS follows hls.corsOrigins; OPTIONS preflights; other methods 405", async () => {
  const config = testConfig({ hls: { corsOrigins: ["https://app.example"] } });
  await withServer(async (server) => {
    const listed = await get(server, "/none/none.m3u8", {
      headers: { Origin: "https://app.example" },
    });
    assert.equal(listed.status, 404);
    assert.match(listed.text, /no HLS output of none/);
    assert.equal(listed.headers.get("access-control-allow-origin"), "https://app.example");
    assert.equal(listed.headers.get("vary"), "Origin");
    const other = await get(server, "/none/none.m3u8", {
      headers: { Origin: "https://evil.example" },
    });
    assert.equal(other.headers.get("access-control-allow-origin"), null);
    const preflight = await get(server, "/none/none.m3u8", {
      method: "OPTIONS",
      headers: { Origin: "https://app.example", "Access-Control-Request-Method": "GET" },
    });
    assert.equal(preflight.status, 204);
    assert.match(preflight.headers.get("access-control-allow-methods")!, /GET, HEAD/);
    assert.equal(preflight.headers.get("access-control-allow-origin"), "https://app.example");
    const del = await get(server, "/none/none.m3u8", { method: "DELETE" });
    assert.equal(del.status, 405);
    assert.equal(del.headers.get("allow"), "GET, HEAD, OPTIONS");
    assert.equal((await get(server, "/none/source/%zz.ts")).status, 400);
    assert.equal((await get(server, "/none/%5C/index.m3u8")).status, 400);
    assert.equal((await get(server, "/none/source/index.m3u8")).status, 404);
  }, config);
});

Deno.test("a VP8 stream (a transcoder's output) is served as an H.264 rendition of its size", async () => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 30, audio: "aac" });
  await withServer(async (server) => {
    assert.equal(
      (await server.post("/vod/startup", { uri: "vod-live://clip.mp4", localStreamName: "cam" }))
        .status,
      200,
    );
    const transcoder = await server.post("/transcoder2/startup", {
      uri: "transcoder2://vp8",
      remoteStreamName: "cam",
      localStreamName: "vp8",
      encoder: { width: 320, height: 240, fps: 25, keyFrameInterval: 25, videoCodec: "VP8" },
    });
    assert.equal(transcoder.status, 200, await transcoder.text());
    await waitFor("the VP8 stream", async () => {
      const list = await (await server.post("/stream/find_all")).json() as {
        name: string;
        videoCodec: string;
      }[];
      return list.some((s) => s.name === "vp8" && s.videoCodec === "VP8") || undefined;
    }, 20_000);
    const master = await get(server, "/vp8/vp8.m3u8");
    assert.equal(master.status, 200, master.text);
    assert.match(master.text, /CODECS="avc1\.[0-9a-f]{6},mp4a\.40\.2",RESOLUTION=320x240/);
    const streams = await probeUrl(`${server.hlsUrl}/vp8/source/index.m3u8`);
    assert.deepEqual(
      streams.map((s) =>
        s.codec_type === "video" ? `${s.codec_name} ${s.width}x${s.height}` : s.codec_name
      )
        .sort(),
      ["aac", "h264 320x240"],
    );
    assert.equal(await decodeErrors(`${server.hlsUrl}/vp8/vp8.m3u8`, 3), "");
    assert.equal((await server.post("/hls/terminate", { name: "vp8" })).status, 200);
    await server.post("/transcoder2/terminate", { uri: "transcoder2://vp8" });
    await server.post("/vod/terminate", { uri: "vod-live://clip.mp4", localStreamName: "cam" });
  }, config);
});
