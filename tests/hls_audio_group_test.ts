/**
 * HLS audio groups: variants carrying video only and an audio rendition (`#EXT-X-MEDIA`)
 * they share, of an RTMP-published stream, read as a player would (the master playlist
 * parsed, segments probed, ffmpeg decoding the master playlist); configuration errors name
 * the field.
 */
import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../config.ts";
import type { HlsRecord } from "../core/records.ts";
import { run, tempPath } from "../media/formats/test_fixtures.ts";
import { publishRtmp, stopPublisher } from "./helpers/ffmpeg_rtmp.ts";
import { makeClip, waitFor } from "./helpers/media_fixtures.ts";
import { testConfig, withServer } from "./helpers/test_server.ts";

/** Two profiles and the source, all playing with one 64 kbit/s AAC rendition. */
const hls = {
  segmentDurationSec: 2,
  profiles: [
    { name: "p270", width: 480, height: 270, bitrateKbps: 500, audioGroup: "aac" },
    { name: "p180", width: 320, height: 180, bitrateKbps: 200, audioGroup: "aac" },
  ],
  audioRenditions: [{ name: "aac64", group: "aac", bitrateKbps: 64 }],
  sourceAudioGroup: "aac",
};

/** The attributes of an M3U8 tag line (`KEY=value,KEY="quoted, value"`). */
function attributes(line: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of line.slice(line.indexOf(":") + 1).matchAll(/([A-Z0-9-]+)=("[^"]*"|[^,]*)/g)) {
    out[m[1]] = m[2].replace(/^"|"$/g, "");
  }
  return out;
}

/** ffprobe's streams and duration of a file. */
async function probe(
  path: string,
): Promise<{ streams: string[]; startSec: number; durationSec: number }> {
  const { out } = await run("ffprobe", [
    ...[
      "-v",
      "error",
      "-show_entries",
      "stream=codec_type,codec_name,width,height:format=start_time,duration",
    ],
    ...["-of", "json", path],
  ]);
  const json = JSON.parse(out) as {
    streams: { codec_type: string; codec_name: string; width?: number; height?: number }[];
    format: { start_time: string; duration: string };
  };
  return {
    streams: json.streams.map((s) =>
      s.codec_type === "video" ? `${s.codec_name} ${s.width}x${s.height}` : s.codec_name
    ),
    startSec: Number(json.format.start_time),
    durationSec: Number(json.format.duration),
  };
}

/** The segments of a media playlist: number and EXTINF duration. */
function segments(playlist: string): { msn: number; sec: number }[] {
  return [...playlist.matchAll(/#EXTINF:([\d.]+),\n(\d+)\.ts/g)].map((m) => ({
    msn: Number(m[2]),
    sec: Number(m[1]),
  }));
}

Deno.test("HLS audio group: three video-only variants share one AAC rendition; playlists, segments and decode", async () => {
  await withServer(async (server) => {
    const text = async (path: string) => {
      const res = await fetch(`${server.hlsUrl}${path}`);
      const body = await res.text();
      assert.equal(res.status, 200, `${path}: ${body}`);
      return body;
    };
    const bytes = async (path: string) => {
      const res = await fetch(`${server.hlsUrl}${path}`);
      assert.equal(res.status, 200, path);
      return new Uint8Array(await res.arrayBuffer());
    };
    const publisher = publishRtmp(`rtmp://127.0.0.1:${server.rtmpPort}/live/cam`, 90);
    try {
      await waitFor("the RTMP stream", async () => {
        const list = await (await server.post("/stream/find_all")).json() as { name: string }[];
        return list.some((s) => s.name === "cam") || undefined;
      }, 15_000);
      const started = await server.post("/hls/startup", { name: "cam" });
      assert.equal(started.status, 200, await started.text());
      // The master lists what has segments: wait for every variant and the rendition.
      const master = await waitFor("every variant in the master playlist", async () => {
        const body = await text("/cam/cam.m3u8");
        return (body.match(/#EXT-X-STREAM-INF/g)?.length ?? 0) === 3 &&
            body.includes("#EXT-X-MEDIA")
          ? body
          : undefined;
      }, 30_000);
      const lines = master.split("\n");
      const media = lines.filter((l) => l.startsWith("#EXT-X-MEDIA:")).map(attributes);
      assert.deepEqual(media, [{
        TYPE: "AUDIO",
        "GROUP-ID": "aac",
        NAME: "aac64",
        DEFAULT: "YES",
        AUTOSELECT: "YES",
        URI: "aac64/index.m3u8",
      }]);
      const variants = lines.flatMap((l, i) =>
        l.startsWith("#EXT-X-STREAM-INF:")
          ? [{ ...attributes(l), uri: lines[i + 1] } as Record<string, string>]
          : []
      );
      assert.deepEqual(variants.map((v) => [v.uri, v.RESOLUTION, v.AUDIO]), [
        ["source/index.m3u8", "640x360", "aac"],
        ["p270/index.m3u8", "480x270", "aac"],
        ["p180/index.m3u8", "320x180", "aac"],
      ]);
      for (const v of variants) assert.match(v.CODECS, /^avc1\.[0-9a-f]{6},mp4a\.40\.2$/);
      // BANDWIDTH counts the audio rendition too: above the 200 kbit/s video of p180.
      assert.ok(Number(variants[2].BANDWIDTH) > 200_000, variants[2].BANDWIDTH);

      // A viewer's access key (the CDN's) is copied into the rendition's URI too.
      const keyed = await text("/cam/cam.m3u8?aclAuth=k1");
      assert.match(keyed, /#EXT-X-MEDIA:[^\n]*URI="aac64\/index\.m3u8\?aclAuth=k1"/);
      assert.match(keyed, /\np180\/index\.m3u8\?aclAuth=k1\n/);

      // Segments: video only in the variants, AAC only in the rendition, aligned.
      const audioPlaylist = await text("/cam/aac64/index.m3u8");
      const videoPlaylist = await text("/cam/p180/index.m3u8");
      const sourcePlaylist = await text("/cam/source/index.m3u8");
      for (const p of [audioPlaylist, videoPlaylist, sourcePlaylist]) {
        assert.match(p, /#EXT-X-TARGETDURATION:2\n/);
      }
      const audioSegments = segments(audioPlaylist);
      const sourceSegments = segments(sourcePlaylist);
      const shared = audioSegments.filter((a) => sourceSegments.some((s) => s.msn === a.msn));
      assert.ok(shared.length >= 2, `${audioPlaylist}\n${sourcePlaylist}`);
      const dir = await tempPath("hls-audio-group");
      await Deno.mkdir(dir, { recursive: true });
      // The oldest segments listed in both (the first ones may start apart at the very start).
      const msn = shared.at(-1)!.msn;
      const audioFile = `${dir}/audio.ts`;
      const videoFile = `${dir}/video.ts`;
      await Deno.writeFile(audioFile, await bytes(`/cam/aac64/${msn}.ts`));
      await Deno.writeFile(videoFile, await bytes(`/cam/source/${msn}.ts`));
      const audio = await probe(audioFile);
      const video = await probe(videoFile);
      assert.deepEqual(audio.streams, ["aac"]);
      assert.deepEqual(video.streams, ["h264 640x360"]);
      assert.ok(
        Math.abs(audio.durationSec - video.durationSec) < 0.1,
        `segment ${msn}: audio ${audio.durationSec} s, video ${video.durationSec} s`,
      );
      // One timeline: the segment's audio starts with its video (the source has no B-frames).
      assert.ok(
        Math.abs(audio.startSec - video.startSec) < 0.05,
        `segment ${msn}: audio from ${audio.startSec} s, video from ${video.startSec} s`,
      );
      const extinf = (list: { msn: number; sec: number }[]) => list.find((s) => s.msn === msn)!.sec;
      assert.ok(Math.abs(extinf(audioSegments) - extinf(sourceSegments)) < 0.05);
      const p180 = segments(videoPlaylist).at(-1)!.msn;
      await Deno.writeFile(videoFile, await bytes(`/cam/p180/${p180}.ts`));
      assert.deepEqual((await probe(videoFile)).streams, ["h264 320x180"]);

      // A player: ffmpeg reads the master playlist, every video variant and the audio.
      const decoded = await run("ffmpeg", [
        ...["-loglevel", "level+info", "-nostats", "-i", `${server.hlsUrl}/cam/cam.m3u8`],
        ...["-map", "0", "-t", "4", "-f", "null", "-"],
      ]);
      const errors = decoded.err.split("\n").filter((l) => /\[(error|fatal|panic)\]/.test(l));
      assert.deepEqual(errors, []);
      // The summary: decoded video and audio both reached the (null) output.
      const summary = /video:(\d+)\S* audio:(\d+)/.exec(decoded.err);
      assert.ok(summary && Number(summary[1]) > 0 && Number(summary[2]) > 0, decoded.err);
      // One audio stream (the rendition) and the three video variants.
      const { streams } = await probe(`${server.hlsUrl}/cam/cam.m3u8`);
      assert.deepEqual(streams.sort(), ["aac", "h264 320x180", "h264 480x270", "h264 640x360"]);

      // /hls/profiles: the rendition's measured metrics; variants name their group.
      const [record] = await (await server.post("/hls/find_all", {})).json() as HlsRecord[];
      assert.deepEqual(record.profiles, ["source", "p270", "p180", "aac64"]);
      const profile = async (profileName: string) => {
        const res = await server.post("/hls/profiles", { hlsId: record.id, profileName });
        assert.equal(res.status, 200);
        return await res.json();
      };
      const rendition = await profile("aac64");
      assert.equal(rendition.stream.name, "cam-aac64");
      assert.deepEqual(rendition.videoProfile, {
        type: "audio",
        width: 0,
        height: 0,
        fps: 0,
        bitrate: 64,
        codec: "AAC",
        quality: 0,
        audioGroupId: "aac",
      });
      assert.equal(rendition.keyFrameReceived, true);
      // AAC at 48 kHz: 46.875 frames/s.
      assert.ok(Math.abs(rendition.metrics.avgFPS - 46.9) < 3, `${rendition.metrics.avgFPS}`);
      assert.ok(rendition.metrics.currentPts > rendition.metrics.startPts);
      const p270 = await profile("p270");
      assert.equal(p270.videoProfile.audioGroupId, "aac");
      assert.equal(p270.videoProfile.width, 480);
    } finally {
      await stopPublisher(publisher);
    }
  }, testConfig({ hls }));
});

Deno.test("HLS audio group in fMP4 of an Opus stream: the rendition is its audio converted to AAC; the muxed source beside a video-only profile", async () => {
  const config = testConfig({
    hls: {
      container: "fmp4",
      segmentDurationSec: 2,
      profiles: [{ name: "p120", width: 160, height: 120, bitrateKbps: 150, audioGroup: "main" }],
      audioRenditions: [{ name: "stereo", group: "main" }],
    },
  });
  await Deno.mkdir(config.folders.media, { recursive: true });
  await makeClip(`${config.folders.media}/opus.mp4`, { seconds: 30, audio: "opus" });
  await withServer(async (server) => {
    const vod = await server.post("/vod/startup", {
      uri: "vod-live://opus.mp4",
      localStreamName: "op",
    });
    assert.equal(vod.status, 200, await vod.text());
    const master = await waitFor(
      "the profile and the rendition in the master playlist",
      async () => {
        const res = await fetch(`${server.hlsUrl}/op/op.m3u8`);
        const body = await res.text();
        return body.includes("AUDIO=") ? body : undefined;
      },
      30_000,
    );
    assert.match(
      master,
      /#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="main",NAME="stereo",DEFAULT=YES,AUTOSELECT=YES,URI="stereo\/index\.m3u8"/,
    );
    // The source keeps its audio (no AUDIO attribute); the profile plays with the group.
    assert.match(
      master,
      /CODECS="avc1\.[0-9a-f]{6},mp4a\.40\.2",RESOLUTION=320x240(,FRAME-RATE=[\d.]+)?\nsource\//,
    );
    assert.match(
      master,
      /CODECS="avc1\.[0-9a-f]{6},mp4a\.40\.2",RESOLUTION=160x120[^\n]*,AUDIO="main"\np120\//,
    );
    const dir = await tempPath("hls-audio-group-fmp4");
    await Deno.mkdir(dir, { recursive: true });
    /** The variant's init segment and its last segment, as one file ffprobe reads. */
    const lastSegment = async (variant: string) => {
      const playlist = await (await fetch(`${server.hlsUrl}/op/${variant}/index.m3u8`)).text();
      assert.match(playlist, /#EXT-X-MAP:URI="init\.mp4"/);
      const uri = [...playlist.matchAll(/^(\d+\.m4s)$/gm)].at(-1)![1];
      const parts = await Promise.all(["init.mp4", uri].map(async (file) => {
        const res = await fetch(`${server.hlsUrl}/op/${variant}/${file}`);
        assert.equal(res.status, 200, `${variant}/${file}`);
        return new Uint8Array(await res.arrayBuffer());
      }));
      const path = `${dir}/${variant}.mp4`;
      await Deno.writeFile(path, new Uint8Array([...parts[0], ...parts[1]]));
      return path;
    };
    assert.deepEqual((await probe(await lastSegment("stereo"))).streams, ["aac"]);
    assert.deepEqual((await probe(await lastSegment("p120"))).streams, ["h264 160x120"]);
    assert.deepEqual((await probe(await lastSegment("source"))).streams.sort(), [
      "aac",
      "h264 320x240",
    ]);
    const decoded = await run("ffmpeg", [
      ...["-v", "error", "-i", `${server.hlsUrl}/op/op.m3u8`, "-map", "0", "-t", "3"],
      ...["-f", "null", "-"],
    ]);
    assert.equal(decoded.err.trim(), "");
  }, config);
});

Deno.test("HLS audio group configuration: an unknown group or a taken name names its field", () => {
  const profile = { name: "p180", width: 320, height: 180, bitrateKbps: 200 };
  const cases: [Record<string, unknown>, string][] = [
    [{ profiles: [{ ...profile, audioGroup: "aac" }] }, "hls.profiles.0.audioGroup"],
    [{
      profiles: [profile],
      audioRenditions: [{ name: "a", group: "aac" }],
      sourceAudioGroup: "other",
    }, "hls.sourceAudioGroup"],
    [{
      profiles: [{ ...profile, audioGroup: "aac" }],
      audioRenditions: [{ name: "p180", group: "aac" }],
    }, "hls.audioRenditions.0.name"],
    [{
      audioRenditions: [{ name: "a", group: "aac" }, { name: "a", group: "aac", bitrateKbps: 96 }],
    }, "hls.audioRenditions.1.name"],
    [{ audioRenditions: [{ name: "a", group: "a b" }] }, "hls.audioRenditions.0.group"],
  ];
  for (const [hls, field] of cases) {
    assert.throws(
      () => loadConfig({ readTextFile: () => JSON.stringify({ hls }) }),
      (err: unknown) => err instanceof ConfigError && err.field === field,
      field,
    );
  }
  const ok = loadConfig({
    readTextFile: () =>
      JSON.stringify({
        hls: {
          profiles: [{ ...profile, audioGroup: "lo" }],
          audioRenditions: [{ name: "a64", group: "lo", bitrateKbps: 64 }, {
            name: "a128",
            group: "hi",
          }],
        },
      }),
  });
  assert.equal(ok.hls.audioRenditions[1].codec, "AAC");
});
