/**
 * The shared SRT port, checked the way a user would with ffmpeg (libsrt): a caller publishing
 * with `#!::r=cam,m=publish` makes a stream whose snapshot decodes; a caller with
 * `m=request` reads a VOD stream's H.264 + AAC as MPEG-TS without a decode error; an unknown
 * stream (1404), a name already published (1409) and a wrong passphrase (10) are refused at
 * the handshake, as is a publisher outside `mpegts.allowedList` (1403); a player that stops
 * reading is dropped without slowing another; Opus audio is played as AAC; H.265 goes through.
 * (Debian's ffmpeg 5.1 does not URL-decode `streamid`: it is written raw.)
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import type { StreamRecord } from "../core/records.ts";
import { fixture, run } from "../media/formats/test_fixtures.ts";
import type { Stream } from "../media/stream.ts";
import { makeClip, pngSize, probe, waitFor } from "./helpers/media_fixtures.ts";
import { testConfig, type TestServer, withServer } from "./helpers/test_server.ts";

/** The SRT address of `server` asking for `streamId`, ffmpeg in caller mode with 200 ms latency. */
function srtUrl(server: TestServer, streamId: string): string {
  return `srt://127.0.0.1:${server.srtPort}?mode=caller&latency=200000&streamid=${streamId}`;
}

/** ffmpeg publishing `seconds` of 640x360 25 fps H.264 and AAC to `url`. */
function publish(url: string, seconds: number): Deno.ChildProcess {
  return new Deno.Command("ffmpeg", {
    args: [
      ...["-v", "error", "-re", "-f", "lavfi", "-i", "testsrc=size=640x360:rate=25"],
      ...["-f", "lavfi", "-i", "sine=f=440", "-t", String(seconds)],
      ...["-c:v", "libx264", "-preset", "veryfast", "-g", "25", "-c:a", "aac"],
      ...["-f", "mpegts", url],
    ],
    stdout: "null",
    stderr: "piped",
  }).spawn();
}

/** Stops an ffmpeg (ended or not) and waits for it. */
async function stop(child: Deno.ChildProcess): Promise<void> {
  try {
    child.kill();
  } catch {
    // it has ended already
  }
  await child.output();
}

/**
 * ffmpeg reading `seconds` of `url` into the MPEG-TS file `out` (stream copy); resolves with
 * what it wrote on stderr at `-v error` and its exit code.
 */
async function read(url: string, out: string, seconds: number) {
  const result = await new Deno.Command("ffmpeg", {
    args: [
      "-v",
      "error",
      "-y",
      "-i",
      url,
      "-t",
      String(seconds),
      "-c",
      "copy",
      "-f",
      "mpegts",
      out,
    ],
    stdout: "null",
    stderr: "piped",
  }).output();
  return { code: result.code, errors: new TextDecoder().decode(result.stderr) };
}

/** Codec name of each stream of `path`, as ffprobe sees them, and the decoded picture count. */
async function codecsOf(path: string): Promise<{ codecs: string[]; pictures: number }> {
  const { streams } = await probe(path);
  const video = streams.find((s) => s.codec_type === "video");
  return { codecs: streams.map((s) => s.codec_name), pictures: Number(video?.nb_read_frames) };
}

/** The record of the published stream `name`, if any. */
async function findStream(server: TestServer, name: string): Promise<StreamRecord | undefined> {
  const res = await server.post("/stream/find", { name });
  if (res.status !== 200) {
    await res.body?.cancel();
    return undefined;
  }
  const found = await res.json() as StreamRecord[];
  return found.find((s) => s.name === name && s.published);
}

Deno.test("SRT port: publish by stream id (snapshot decodes, read:<name> plays it back), a name in use and an unknown stream are refused", async () => {
  const config = testConfig();
  await withServer(async (server) => {
    const sender = publish(srtUrl(server, "#!::r=cam,m=publish"), 20);
    try {
      const stream = await waitFor("stream cam", () => findStream(server, "cam"));
      assert.equal(stream.mediaProvider, "MPEGTS");
      assert.equal(stream.hasVideo && stream.hasAudio, true);
      const snapshot = await server.post("/stream/snapshot", { streamName: "cam" });
      const png = await snapshot.json();
      assert.equal(snapshot.status, 200, JSON.stringify(png));
      assert.deepEqual(pngSize(new Uint8Array(Buffer.from(png.data, "base64"))), {
        width: 640,
        height: 360,
      });

      await Deno.mkdir(config.folders.records, { recursive: true });
      const out = `${config.folders.records}/cam.ts`;
      const played = await read(srtUrl(server, "read:cam"), out, 2);
      assert.equal(played.errors, "", "ffmpeg reads the live stream without error");
      const live = await codecsOf(out);
      assert.deepEqual(live.codecs, ["h264", "aac"]);
      assert.ok(live.pictures >= 40, `${live.pictures} pictures in 2 s`);

      const second = await publish(srtUrl(server, "publish:cam"), 2).output();
      assert.notEqual(second.code, 0, "a second publisher of cam cannot connect");
      const unknown = await new Deno.Command("ffmpeg", {
        args: ["-v", "error", "-i", srtUrl(server, "#!::r=nothing,m=request"), "-f", "null", "-"],
        stdout: "null",
        stderr: "piped",
      }).output();
      assert.notEqual(unknown.code, 0, "an unknown stream cannot be read");
      const health = await (await fetch(`${server.restUrl}/health`)).json();
      const { rejected, publishers } = health.limits.listeners.srt;
      assert.ok(rejected["1409"] >= 1, `1409 counted in /health: ${JSON.stringify(rejected)}`);
      assert.ok(rejected["1404"] >= 1, `1404 counted in /health: ${JSON.stringify(rejected)}`);
      assert.equal(publishers, 1);
      assert.equal((await findStream(server, "cam"))?.mediaSessionId, stream.mediaSessionId);
    } finally {
      await stop(sender);
    }
    await waitFor(
      "cam unpublished",
      async () => await findStream(server, "cam") ? undefined : true,
    );
  }, config);
});

Deno.test("SRT port: m=request reads a VOD stream's H.264 + AAC as MPEG-TS without error, a frozen player is dropped without slowing another, an Opus VOD's audio comes as AAC", async () => {
  const config = testConfig();
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/clip.mp4`, { seconds: 30, audio: "aac" });
  await makeClip(`${config.folders.media}/opus.mp4`, { seconds: 10, audio: "opus" });
  await withServer(async (server) => {
    const res = await server.post("/vod/startup", {
      uri: "vod-live://clip.mp4",
      localStreamName: "vod",
    });
    assert.equal(res.status, 200, await res.text());
    const out = `${config.folders.records}/srt_play.ts`;
    await Deno.mkdir(config.folders.records, { recursive: true });
    const vod = await read(srtUrl(server, "#!::r=vod,m=request"), out, 3);
    assert.equal(vod.errors, "", "ffmpeg reads without error");
    assert.equal(vod.code, 0);
    const { streams } = await probe(out);
    assert.deepEqual(streams.map((s) => [s.codec_type, s.codec_name, s.width, s.height]), [
      ["video", "h264", 320, 240],
      ["audio", "aac", undefined, undefined],
    ]);
    assert.ok(Number(streams[0].nb_read_frames) >= 70, `${streams[0].nb_read_frames} pictures`);
    const { err } = await run("ffmpeg", ["-v", "error", "-i", out, "-f", "null", "-"]);
    assert.equal(err.trim(), "", "the recording decodes without error");

    // A player that stops reading (SIGSTOP: no ACK, no keepalive) slows no other player and
    // is dropped by the peer idle timeout (5 s).
    const vodStream = server.services.streams.published("vod") as Stream;
    const frozen = new Deno.Command("ffmpeg", {
      args: ["-v", "error", "-i", srtUrl(server, "#!::r=vod,m=request"), "-f", "null", "-"],
      stdout: "null",
      stderr: "null",
    }).spawn();
    try {
      await waitFor("the player attached", () => vodStream.readerCount === 1 || undefined);
      frozen.kill("SIGSTOP");
      const other = await read(srtUrl(server, "#!::r=vod,m=request"), out, 3);
      assert.equal(other.errors, "", "the other player reads without error");
      assert.ok((await codecsOf(out)).pictures >= 70, "the other player got 3 s of pictures");
      await waitFor("the frozen player dropped", () => vodStream.readerCount === 0 || undefined);
    } finally {
      frozen.kill("SIGKILL");
      await frozen.status;
    }

    const opus = await server.post("/vod/startup", {
      uri: "vod-live://opus.mp4",
      localStreamName: "opusvod",
    });
    assert.equal(opus.status, 200, await opus.text());
    const converted = `${config.folders.records}/opus_as_aac.ts`;
    const played = await read(srtUrl(server, "#!::r=opusvod,m=request"), converted, 2);
    assert.equal(played.errors, "", "ffmpeg reads the converted stream without error");
    assert.deepEqual((await codecsOf(converted)).codecs, ["h264", "aac"], "Opus goes out as AAC");
  }, config);
});

Deno.test("SRT port with mpegts.srtPassphrase: a plain stream id publishes with the passphrase, a wrong one is refused", async () => {
  const passphrase = "correct-horse-battery";
  await withServer(async (server) => {
    const wrong = await publish(`${srtUrl(server, "guarded")}&passphrase=wrong-horse-battery`, 2)
      .output();
    assert.notEqual(wrong.code, 0, "a wrong passphrase cannot connect");
    assert.ok((server.srt.figures().rejected[10] ?? 0) >= 1, "refused as a bad secret (10)");
    assert.equal(await findStream(server, "guarded"), undefined, "no stream");
    const sender = publish(`${srtUrl(server, "guarded")}&passphrase=${passphrase}&pbkeylen=32`, 20);
    try {
      const stream = await waitFor("stream guarded", () => findStream(server, "guarded"));
      assert.equal(stream.mediaProvider, "MPEGTS");
      assert.equal(
        server.srt.publisher("guarded")?.stream?.tracks.map((t) => t.codec).join(),
        "H264,AAC",
      );
    } finally {
      await stop(sender);
    }
  }, testConfig({ mpegts: { srtPassphrase: passphrase } }));
});

Deno.test("SRT port: an H.265 + AAC publisher is played back as H.265 + AAC", async () => {
  const config = testConfig();
  await Deno.mkdir(config.folders.records, { recursive: true });
  const clip = await fixture("h265_aac", "ts");
  await withServer(async (server) => {
    const sender = new Deno.Command("ffmpeg", {
      args: [
        ...["-v", "error", "-re", "-stream_loop", "-1", "-i", clip, "-t", "20", "-c", "copy"],
        ...["-f", "mpegts", srtUrl(server, "#!::r=hevc,m=publish")],
      ],
      stdout: "null",
      stderr: "null",
    }).spawn();
    try {
      await waitFor("stream hevc", () => findStream(server, "hevc"));
      const out = `${config.folders.records}/hevc.ts`;
      const played = await read(srtUrl(server, "#!::r=hevc,m=request"), out, 2);
      assert.equal(played.errors, "", "ffmpeg reads without error");
      const { codecs, pictures } = await codecsOf(out);
      assert.deepEqual(codecs, ["hevc", "aac"]);
      assert.ok(pictures >= 40, `${pictures} pictures in 2 s`);
    } finally {
      await stop(sender);
    }
  }, config);
});

Deno.test("SRT port: a publisher outside mpegts.allowedList is refused at the handshake (1403), no stream", async () => {
  const config = testConfig({ mpegts: { allowedList: ["10.0.0.0/8"] } });
  await withServer(async (server) => {
    const refused = await publish(srtUrl(server, "#!::r=outside,m=publish"), 2).output();
    assert.notEqual(refused.code, 0, "the publisher cannot connect");
    assert.ok((server.srt.figures().rejected[1403] ?? 0) >= 1, "refused as forbidden (1403)");
    assert.equal(await findStream(server, "outside"), undefined, "no stream");
  }, config);
});
