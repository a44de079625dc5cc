import assert from "node:assert/strict";
import type { MediaFrame, Track } from "../../frame.ts";
import { TsDemuxer } from "../../formats/mpegts/demuxer.ts";
import { decode, probeStreams, run, tempPath } from "../../formats/test_fixtures.ts";
import { mediaPlaylist } from "../../formats/hls/playlist.ts";
import { concatBytes } from "../../../signaling/websocket/bytes.ts";
import { createHlsSegmenter, HlsCodecError, type MemoryHlsSegmenter } from "./segmenter.ts";
import type { HlsSegmenterOptions } from "./hls_segmenter_api.ts";
import { HlsTimeline } from "./hls_timeline.ts";
import { onBodyReleased } from "./hls_body_release.ts";

const clips = new Map<string, Promise<{ tracks: Track[]; frames: MediaFrame[] }>>();

/** A 10 s 25 fps clip (320x240 unless said) with a keyframe every second, B-frames and AAC. */
function clip(
  video: "h264" | "h265",
  size = "320x240",
): Promise<{ tracks: Track[]; frames: MediaFrame[] }> {
  const key = `${video}-${size}`;
  let p = clips.get(key);
  if (!p) {
    p = (async () => {
      const path = await tempPath(`hls-${key}-10s.ts`);
      await run("ffmpeg", [
        ...["-v", "error", "-y", "-f", "lavfi", "-i", `testsrc2=size=${size}:rate=25`],
        ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", "10"],
        "-pix_fmt",
        "yuv420p",
        ...(video === "h264" ? ["-c:v", "libx264", "-g", "25", "-bf", "2"] : [
          "-c:v",
          "libx265",
          "-x265-params",
          "log-level=error:keyint=25:min-keyint=25:scenecut=0:open-gop=0",
        ]),
        ...["-c:a", "aac", "-f", "mpegts", path],
      ]);
      const demuxer = new TsDemuxer();
      const frames = [...demuxer.push(await Deno.readFile(path)), ...demuxer.flush()];
      return { tracks: demuxer.tracks, frames };
    })();
    clips.set(key, p);
  }
  return p;
}

function options(tracks: Track[], more: Partial<HlsSegmenterOptions>): HlsSegmenterOptions {
  return {
    tracks,
    container: "ts",
    targetDurationSec: 2,
    partDurationMs: 0,
    windowSegments: 3,
    ...more,
  };
}

/** Writes the playlist, init and window segments (and parts) of `s` into a new folder. */
async function writeFolder(s: MemoryHlsSegmenter, name: string): Promise<string> {
  const dir = await tempPath(name);
  await Deno.mkdir(dir, { recursive: true });
  const text = s.playlist();
  await Deno.writeTextFile(`${dir}/index.m3u8`, text);
  const init = s.init();
  if (init) await Deno.writeFile(`${dir}/init.mp4`, init);
  for (const uri of uris(text)) {
    const [msn, part] = uri.split(".").map(Number);
    const bytes = uri.split(".").length === 3 ? s.part(msn, part) : s.segment(msn);
    assert.ok(bytes, `${uri} is served`);
    await Deno.writeFile(`${dir}/${uri}`, bytes);
  }
  return dir;
}

/** Segment and part URIs named by a playlist. */
function uris(text: string): string[] {
  const out: string[] = [];
  for (const line of text.split("\n")) {
    if (line && !line.startsWith("#")) out.push(line);
    const m = line.match(/^#EXT-X-PART:.*URI="([^"]+)"/);
    if (m) out.push(m[1]);
  }
  return out;
}

/** The bytes start with a TS packet of PID 0 (the PAT). */
function startsWithPat(bytes: Uint8Array): boolean {
  return bytes[0] === 0x47 && (((bytes[1] & 0x1f) << 8) | bytes[2]) === 0;
}

function extinfs(text: string): number[] {
  return [...text.matchAll(/#EXTINF:([\d.]+),/g)].map((m) => Number(m[1]));
}

async function probeDurationOf(path: string): Promise<number> {
  const { out } = await run("ffprobe", [
    ...["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", path],
  ]);
  return Number(out.trim());
}

/** ffprobe and ffmpeg read the folder's playlist: both streams, no errors, the duration. */
async function assertPlays(
  dir: string,
  expect: { video: string; durationSec: number; playlist?: string },
): Promise<void> {
  const path = `${dir}/${expect.playlist ?? "index.m3u8"}`;
  const streams = await probeStreams(path);
  assert.deepEqual(streams.map((s) => s.codec_name).sort(), ["aac", expect.video]);
  const video = streams.find((s) => s.codec_type === "video")!;
  assert.deepEqual([video.width, video.height], [320, 240]);
  const decoded = await decode(path);
  assert.equal(decoded.errors, "");
  assert.ok(
    Math.abs(decoded.video - expect.durationSec * 25) <= 2,
    `decoded ${decoded.video} video frames for ${expect.durationSec} s`,
  );
  assert.ok(decoded.audio > 0);
  const duration = await probeDurationOf(path);
  assert.ok(Math.abs(duration - expect.durationSec) < 0.2, `duration ${duration}`);
}

for (const container of ["ts", "fmp4"] as const) {
  Deno.test(`HLS segmenter (${container}): keyframe cuts, window, ENDLIST, ffmpeg plays it`, async () => {
    const { tracks, frames } = await clip("h264");
    const s = createHlsSegmenter(options(tracks, { container }));
    assert.equal(s.playlist().includes("#EXTINF"), false);
    for (const f of frames) s.push(f);
    // 10 s in 2 s segments: 4 complete, the fifth in progress; 3 in the window.
    assert.deepEqual(extinfs(s.playlist()), [2, 2, 2]);
    assert.match(s.playlist(), /#EXT-X-MEDIA-SEQUENCE:1\n/);
    assert.equal(s.segment(0), undefined, "dropped from the window");
    assert.equal(s.segment(4), undefined, "not complete yet");
    assert.ok(s.segment(1));
    assert.equal(s.playlist().includes("#EXT-X-ENDLIST"), false);
    s.end();
    const text = s.playlist();
    assert.equal(s.ended, true);
    assert.deepEqual(extinfs(text), [2, 2, 2]);
    assert.match(text, /#EXT-X-MEDIA-SEQUENCE:2\n/);
    assert.match(text, /#EXT-X-TARGETDURATION:2\n/);
    assert.match(text, /#EXT-X-ENDLIST\n$/);
    assert.equal(
      (text.match(/#EXT-X-PROGRAM-DATE-TIME:\d{4}-\d\d-\d\dT[\d:]+\.\d{3}Z/g) ?? []).length,
      3,
    );
    if (container === "ts") {
      assert.match(text, /#EXT-X-VERSION:3\n/);
      assert.equal(s.init(), undefined);
      for (const msn of [2, 3, 4]) {
        const seg = s.segment(msn)!;
        // Each segment starts with a PAT (PID 0) then the PMT, so it decodes alone.
        assert.ok(startsWithPat(seg));
        assert.equal(seg.length % 188, 0);
      }
    } else {
      assert.match(text, /#EXT-X-VERSION:7\n/);
      assert.match(text, /#EXT-X-MAP:URI="init.mp4"\n/);
      assert.equal(new TextDecoder().decode(s.init()!.subarray(4, 8)), "ftyp");
      assert.equal(new TextDecoder().decode(s.segment(2)!.subarray(4, 8)), "moof");
    }
    const variant = s.variant!;
    assert.match(variant.codecs, /^avc1\.64000d,mp4a\.40\.2$/);
    assert.deepEqual([variant.width, variant.height, variant.frameRate], [320, 240, 25]);
    assert.ok(variant.bandwidth >= variant.averageBandwidth && variant.averageBandwidth > 10_000);
    const dir = await writeFolder(s, `hls-${container}`);
    await assertPlays(dir, { video: "h264", durationSec: 6 });
    // Each segment alone decodes too (a player may start at any of them).
    const alone = `${dir}/alone.m3u8`;
    await Deno.writeTextFile(
      alone,
      mediaPlaylist({
        targetDurationSec: 2,
        mediaSequence: 3,
        discontinuitySequence: 0,
        mapUri: container === "fmp4" ? "init.mp4" : undefined,
        segments: [{ uri: `3.${container === "ts" ? "ts" : "m4s"}`, durationSec: 2 }],
        ended: true,
      }),
    );
    await assertPlays(dir, { video: "h264", durationSec: 2, playlist: "alone.m3u8" });
  });
}

Deno.test("HLS segmenter: H.265 in fMP4 plays with an hvc1 codec; in MPEG-TS it is refused", async () => {
  const { tracks, frames } = await clip("h265");
  assert.throws(() => createHlsSegmenter(options(tracks, {})), HlsCodecError);
  const s = createHlsSegmenter(options(tracks, { container: "fmp4", windowSegments: 10 }));
  for (const f of frames) s.push(f);
  s.end();
  assert.deepEqual(extinfs(s.playlist()), [2, 2, 2, 2, 2]);
  // Main profile (1, compatible with 1 and 2: reversed flags 6), level 2 (60), x265's
  // constraint byte 0x90 (progressive source, frame only).
  assert.equal(s.variant!.codecs, "hvc1.1.6.L60.90,mp4a.40.2");
  await assertPlays(await writeFolder(s, "hls-h265"), { video: "hevc", durationSec: 10 });
});

for (const container of ["ts", "fmp4"] as const) {
  Deno.test(`LL-HLS segmenter (${container}): parts, preload hint, ready(), ffmpeg plays parts`, async () => {
    const { tracks, frames } = await clip("h264");
    const s = createHlsSegmenter(options(tracks, { container, partDurationMs: 500 }));
    const ext = container === "ts" ? "ts" : "m4s";
    const t0 = frames[0].dts;
    const half = frames.findIndex((f) => f.trackId === tracks[0].id && f.dts - t0 >= 5 * 90000);
    for (const f of frames.slice(0, half)) s.push(f);
    const live = s.playlist();
    assert.match(
      live,
      /#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.5\n#EXT-X-PART-INF:PART-TARGET=0.5\n/,
    );
    // At 5 s: segments 0, 1 complete, segment 2 has parts 0 and 1 (4.00-4.48, 4.48-4.96 s):
    // 25 fps makes parts of 12 frames, the longest within the 0.5 s part target.
    assert.match(
      live,
      new RegExp(
        `#EXT-X-PART:DURATION=0.480,URI="2.0.${ext}",INDEPENDENT=YES\n` +
          `#EXT-X-PART:DURATION=0.480,URI="2.1.${ext}"\n` +
          `#EXT-X-PRELOAD-HINT:TYPE=PART,URI="2.2.${ext}"\n$`,
      ),
    );
    assert.ok(s.part(2, 1));
    assert.equal(s.part(2, 2), undefined);
    // Blocking reload: part 2.2 completes once frames past 5.44 s arrive; 9.0 never in time.
    const next = s.ready(2, 2, 5000);
    const late = s.ready(9, 0, 20);
    const afterEnd = s.ready(9, 0, 5000);
    assert.equal(await s.ready(1, 3, 10), true, "a part past the last is the next segment's");
    assert.equal(await late, false, "timed out");
    for (const f of frames.slice(half)) s.push(f);
    assert.equal(await next, true);
    s.end();
    assert.equal(await afterEnd, false, "false at the end");
    assert.equal(await s.ready(4, 0, 10), true);

    // A segment's bytes are its parts' bytes.
    for (const msn of [2, 3, 4]) {
      const parts = [0, 1, 2, 3, 4].map((i) => s.part(msn, i)!);
      assert.equal(s.part(msn, 5), undefined);
      assert.deepEqual(concatBytes(parts), s.segment(msn));
    }
    const text = s.playlist();
    assert.equal(text.includes("PRELOAD-HINT"), false);
    assert.match(text, /#EXT-X-ENDLIST\n$/);
    const dir = await writeFolder(s, `ll-hls-${container}`);
    await assertPlays(dir, { video: "h264", durationSec: 6 });
    // The parts as segments of their own play too (what an LL-HLS player fetches).
    await Deno.writeTextFile(
      `${dir}/parts.m3u8`,
      mediaPlaylist({
        targetDurationSec: 1,
        mediaSequence: 0,
        discontinuitySequence: 0,
        mapUri: container === "fmp4" ? "init.mp4" : undefined,
        segments: [3, 4].flatMap((msn) =>
          [0.48, 0.48, 0.48, 0.48, 0.08].map((durationSec, i) => ({
            uri: `${msn}.${i}.${ext}`,
            durationSec,
          }))
        ),
        ended: true,
      }),
    );
    await assertPlays(dir, { video: "h264", durationSec: 4, playlist: "parts.m3u8" });
  });
}

for (const [container, explicit] of [["ts", true], ["fmp4", true], ["ts", false]] as const) {
  Deno.test(`HLS segmenter (${container}): a restarted publisher makes a discontinuity${explicit ? "" : " (a clock jumping back, not announced)"}; the timeline goes on`, async () => {
    const { tracks, frames } = await clip("h264");
    const s = createHlsSegmenter(options(tracks, { windowSegments: 6, container }));
    for (const f of frames) s.push(f);
    if (explicit) s.discontinuity();
    for (const f of frames.slice(0, frames.length / 2)) s.push(f); // same clock again
    s.end();
    const text = s.playlist();
    // 5 segments, then 2 of the second run (+ its tail): 6 in the window from msn 2.
    assert.match(text, /#EXT-X-MEDIA-SEQUENCE:2\n/);
    assert.equal(text.match(/#EXT-X-DISCONTINUITY\n/g)?.length, 1);
    assert.equal(text.includes("DISCONTINUITY-SEQUENCE"), false);
    const durations = extinfs(text);
    assert.deepEqual(durations.slice(0, 5), [2, 2, 2, 2, 2]);
    await assertPlays(await writeFolder(s, `hls-discontinuity-${container}-${explicit}`), {
      video: "h264",
      durationSec: durations.reduce((a, b) => a + b),
    });
  });
}

Deno.test("HLS segmenter: a discontinuity leaving the window is counted in its sequence", async () => {
  const { tracks, frames } = await clip("h264");

  // Once the discontinuity leaves the window, the sequence counts it.
  const small = createHlsSegmenter(options(tracks, { windowSegments: 2 }));
  for (const f of frames.slice(0, 60)) small.push(f);
  small.discontinuity();
  for (const f of frames) small.push(f);
  assert.match(small.playlist(), /#EXT-X-DISCONTINUITY-SEQUENCE:1\n/);
  assert.equal(small.playlist().includes("#EXT-X-DISCONTINUITY\n"), false);
  small.end();
});

Deno.test("HLS segmenter: no keyframe for long: forced cuts keep memory bounded", async () => {
  const { tracks, frames } = await clip("h264");
  const s = createHlsSegmenter(options(tracks, { windowSegments: 2, targetDurationSec: 1 }));
  let seenKey = false;
  for (const f of frames) {
    const key = f.keyframe && f.trackId === tracks[0].id;
    s.push(key && seenKey ? { ...f, keyframe: false } : f);
    if (key) seenKey = true;
  }
  // 10 s of frames, one keyframe: cut every 3 s (3 target durations).
  assert.equal(s.forcedCuts, 3);
  assert.deepEqual(extinfs(s.playlist()), [3, 3]);
  assert.ok(s.metrics.queueSize < 3 * 25 + 3 * 50);
  // Cut at any frame, each segment still starts with the tables.
  assert.ok(startsWithPat(s.segment(1)!) && startsWithPat(s.segment(2)!));
  assert.equal(s.playlist().includes("#EXT-X-DISCONTINUITY"), false);
  s.end();
});

Deno.test("HLS segmenter: video stopping while audio goes on: bounded, a discontinuity when video is back", async () => {
  const { tracks, frames } = await clip("h264");
  const s = createHlsSegmenter(options(tracks, { windowSegments: 10, targetDurationSec: 1 }));
  const t0 = frames[0].dts;
  const videoId = tracks[0].id;
  // Video for 2 s, then audio only until 9 s, then both again.
  const stalled = (f: MediaFrame) => {
    const sec = f.trackId === videoId ? (f.dts - t0) / 90000 : f.dts / 48000 - t0 / 90000;
    return f.trackId === videoId && sec >= 2.5 && sec < 9;
  };
  let maxQueue = 0;
  let checked = false;
  for (const f of frames) {
    if (stalled(f)) continue;
    s.push(f);
    maxQueue = Math.max(maxQueue, s.metrics.queueSize);
    if (!checked && f.trackId !== videoId && f.dts / 48000 - t0 / 90000 > 7) {
      // 4 s (3 targets + 1) of audio past the segment's start at 2 s: it ended.
      assert.equal(s.metrics.queueSize, 0);
      assert.deepEqual(extinfs(s.playlist()), [1, 1, 0.52]);
      checked = true;
    }
  }
  assert.ok(checked);
  s.end();
  const text = s.playlist();
  assert.equal(text.match(/#EXT-X-DISCONTINUITY\n/g)?.length, 1);
  assert.deepEqual(extinfs(text), [1, 1, 0.52, 1]);
  // Queued frames: at most 4 s of audio and a target of video.
  assert.ok(maxQueue < 4 * 47 + 25, `queue ${maxQueue}`);
  assert.equal((await decode(`${await writeFolder(s, "hls-video-stall")}/index.m3u8`)).errors, "");
});

Deno.test("HLS segmenter: metrics (fps, gaps, pts, queue) and frames before the keyframe dropped", async () => {
  const { tracks, frames } = await clip("h264");
  const s = createHlsSegmenter(options(tracks, {}));
  assert.equal(s.metrics.keyFrameReceived, false);
  // Audio and a non-key video frame first: dropped, nothing starts.
  const firstVideo = frames.findIndex((f) => f.trackId === tracks[0].id);
  s.push({ ...frames[firstVideo], keyframe: false, dts: frames[firstVideo].dts - 3600 });
  assert.equal(s.metrics.queueSize, 0);
  // Leave out 1.5 s of the middle (a gap).
  const gapFrom = 4 * 90000;
  const gapTo = 5.5 * 90000;
  for (const f of frames) {
    const t = f.dts * 90000 / (f.trackId === tracks[0].id ? 90000 : 48000);
    if (t >= gapFrom && t < gapTo) continue;
    s.push(f);
  }
  const m = s.metrics;
  assert.equal(m.keyFrameReceived, true);
  assert.equal(m.countGaps, 1);
  assert.equal(m.resolutionChanges, 0);
  assert.ok(m.minFPS >= 24 && m.maxFPS <= 26.5, `fps ${m.minFPS}..${m.maxFPS}`);
  assert.ok(m.avgFPS > 20 && m.avgFPS < 25, `avg ${m.avgFPS} counts the gap`);
  assert.ok(m.startPts >= 1300 && m.startPts < 1500, `startPts ${m.startPts}`);
  assert.ok(m.currentPts > m.startPts + 9800, `currentPts ${m.currentPts}`);
  assert.ok(m.queueSize > 0);
  s.end();
});

Deno.test("HLS segmenter: audio only is cut by duration, no segment longer than the target", async () => {
  const { tracks, frames } = await clip("h264");
  const audio = tracks.filter((t) => t.kind === "audio");
  const s = createHlsSegmenter(options(audio, { partDurationMs: 200 }));
  for (const f of frames) s.push(f);
  s.end();
  const durations = extinfs(s.playlist());
  assert.equal(durations.length, 3);
  for (const d of durations.slice(0, -1)) assert.ok(d > 1.9 && d <= 2, `${d}`);
  assert.match(s.playlist(), /#EXT-X-TARGETDURATION:2\n/);
  assert.equal(s.variant!.codecs, "mp4a.40.2");
  for (const msn of [3, 4, 5]) assert.ok(startsWithPat(s.segment(msn)!), `segment ${msn}`);
  assert.equal(s.variant!.frameRate, undefined);
  const decoded = await decode(`${await writeFolder(s, "hls-audio")}/index.m3u8`);
  assert.equal(decoded.errors, "");
  // Window: two 1.984 s segments and the 0.085 s tail.
  assert.ok(Math.abs(decoded.audio - 4.053 * 48000 / 1024) < 2, `${decoded.audio} audio frames`);
  for (const m of s.playlist().matchAll(/#EXT-X-PART:DURATION=([\d.]+)/g)) {
    assert.ok(Number(m[1]) <= 0.2, `part ${m[1]}`);
  }
});

Deno.test("HLS segmenter: a new picture size from the SPS is a resolution change", async () => {
  const small = await clip("h264");
  const large = await clip("h264", "640x360");
  const s = createHlsSegmenter(options(small.tracks, {}));
  for (const f of small.frames.slice(0, 100)) s.push(f);
  assert.equal(s.metrics.resolutionChanges, 0);
  s.discontinuity();
  for (const f of large.frames.slice(0, 200)) s.push(f);
  assert.equal(s.metrics.resolutionChanges, 1);
  assert.deepEqual([s.variant!.width, s.variant!.height], [640, 360]);
  s.end();
});

Deno.test("LL-HLS segmenter: parts are listed for the last 3 target durations only", async () => {
  const { tracks, frames } = await clip("h264");
  const s = createHlsSegmenter(options(tracks, { partDurationMs: 500, windowSegments: 5 }));
  for (const f of frames) s.push(f);
  s.end();
  const text = s.playlist();
  assert.deepEqual(extinfs(text), [2, 2, 2, 2, 2]);
  const partSegments = [...text.matchAll(/#EXT-X-PART:.*URI="(\d+)\.\d+\.ts"/g)].map((m) => m[1]);
  assert.deepEqual([...new Set(partSegments)], ["2", "3", "4"]);
  assert.ok(s.part(0, 0), "older parts are still served while their segment is in the window");
});

Deno.test("LL-HLS segmenter: delta updates with a long window; the edge is the last part listed", async () => {
  const { tracks, frames } = await clip("h264");
  const s = createHlsSegmenter(options(tracks, { partDurationMs: 500, windowSegments: 10 }));
  for (const f of frames) s.push(f);
  s.discontinuity();
  for (const f of frames) s.push(f);
  const full = s.playlist();
  assert.match(full, /CAN-SKIP-UNTIL=12,/);
  const delta = s.playlist(true);
  const skipped = Number(/#EXT-X-SKIP:SKIPPED-SEGMENTS=(\d+)\n/.exec(delta)?.[1]);
  assert.ok(skipped >= 1, delta);
  // The delta lists what the full playlist lists after the skipped segments.
  const listed = (text: string) => uris(text).filter((u) => !u.includes(".", u.indexOf(".") + 1));
  assert.deepEqual(listed(delta), listed(full).slice(skipped));
  const lastPart = [...full.matchAll(/#EXT-X-PART:[^\n]*URI="(\d+)\.(\d+)\.ts"/g)].at(-1)!;
  assert.deepEqual(s.edge, { msn: Number(lastPart[1]), part: Number(lastPart[2]) });
  s.end();

  const short = createHlsSegmenter(options(tracks, { partDurationMs: 500, windowSegments: 6 }));
  for (const f of frames) short.push(f);
  assert.equal(short.playlist().includes("CAN-SKIP-UNTIL"), false);
  assert.equal(short.playlist(true), short.playlist());
  short.end();
  const plain = createHlsSegmenter(options(tracks, {}));
  for (const f of frames) plain.push(f);
  assert.deepEqual(plain.edge, { msn: 3, part: undefined });
  plain.end();
});

Deno.test("HLS segmenters on a shared timeline: an audio-only one cuts where the video-only one does, same numbers, clock and times", async () => {
  const { tracks, frames } = await clip("h264");
  const timeline = new HlsTimeline();
  const video = createHlsSegmenter(
    options(tracks.filter((t) => t.kind === "video"), { timeline, windowSegments: 10 }),
  );
  const audio = createHlsSegmenter(
    options(tracks.filter((t) => t.kind === "audio"), { timeline, windowSegments: 10 }),
  );
  for (const f of frames) {
    video.push(f);
    audio.push(f);
  }
  video.end();
  audio.end();
  assert.equal(video.variant!.codecs.startsWith("avc1."), true);
  assert.equal(audio.variant!.codecs, "mp4a.40.2");
  const list = (text: string) =>
    [...text.matchAll(/#EXT-X-PROGRAM-DATE-TIME:(\S+)\n#EXTINF:([\d.]+),\n(\d+)\.ts/g)].map((
      m,
    ) => ({
      pdtMs: Date.parse(m[1]),
      sec: Number(m[2]),
      msn: Number(m[3]),
    }));
  const v = list(video.playlist());
  const a = list(audio.playlist());
  assert.ok(v.length >= 4, video.playlist());
  assert.deepEqual(a.map((s) => s.msn), v.map((s) => s.msn));
  const audioFrameSec = 1024 / 48000;
  // The first audio segment starts at the clip's first audio frame, the last ends with it.
  for (let i = 1; i < v.length - 1; i++) {
    assert.ok(
      Math.abs(a[i].sec - v[i].sec) <= audioFrameSec,
      `segment ${i}: ${a[i].sec} vs ${v[i].sec}`,
    );
    assert.ok(Math.abs(a[i].pdtMs - v[i].pdtMs) <= audioFrameSec * 1000, `segment ${i} clock`);
  }
  // One time origin: a segment's first audio and video frames are decoded at the same time.
  const startSec = async (bytes: Uint8Array) => {
    const path = await tempPath("hls-timeline-seg.ts");
    await Deno.writeFile(path, bytes);
    const { out } = await run("ffprobe", [
      ...["-v", "error", "-read_intervals", "%+#1", "-show_entries", "packet=dts_time"],
      ...["-of", "csv=p=0", path],
    ]);
    return parseFloat(out);
  };
  const msn = v[1].msn;
  const [vStart, aStart] = [
    await startSec(video.segment(msn)!),
    await startSec(audio.segment(msn)!),
  ];
  assert.ok(Math.abs(vStart - aStart) <= audioFrameSec, `video ${vStart} s, audio ${aStart} s`);
  // The audio rendition's own rates are measured (AAC at 48 kHz: 46.875 frames/s).
  assert.ok(Math.abs(audio.metrics.avgFPS - 46.88) < 0.5, `${audio.metrics.avgFPS}`);
});

Deno.test("LL-HLS segmenters on a shared timeline: after a new publisher (a new epoch) the audio still follows the video", async () => {
  const { tracks, frames } = await clip("h264");
  const timeline = new HlsTimeline();
  const more = { timeline, windowSegments: 20, partDurationMs: 500 };
  const video = createHlsSegmenter(options(tracks.filter((t) => t.kind === "video"), more));
  const audio = createHlsSegmenter(options(tracks.filter((t) => t.kind === "audio"), more));
  const push = (list: MediaFrame[]) => {
    for (const f of list) {
      video.push(f);
      audio.push(f);
    }
  };
  // 5 s of the first publisher, then the second one, its clock from 0 again.
  const firstRun = frames.filter((f) => f.dts / tracks[f.trackId].clockRate < 5);
  push(firstRun);
  timeline.nextEpoch();
  video.discontinuity();
  audio.discontinuity();
  push(frames);
  video.end();
  audio.end();
  const list = (text: string) =>
    [...text.matchAll(
      /(#EXT-X-DISCONTINUITY\n)?#EXT-X-PROGRAM-DATE-TIME:\S+\n(?:#EXT-X-PART:[^\n]*\n)*#EXTINF:([\d.]+),\n(\d+)\.ts/g,
    )]
      .map((m) => ({ discontinuity: m[1] !== undefined, sec: Number(m[2]), msn: Number(m[3]) }));
  const v = list(video.playlist());
  const a = list(audio.playlist());
  assert.deepEqual(a.map((s) => [s.msn, s.discontinuity]), v.map((s) => [s.msn, s.discontinuity]));
  assert.ok(v.some((s) => s.discontinuity), video.playlist());
  const after = v.findIndex((s) => s.discontinuity);
  // The segments after the discontinuity's first line up as before it.
  for (let i = after + 1; i < v.length - 1; i++) {
    assert.ok(
      Math.abs(a[i].sec - v[i].sec) <= 1024 / 48000,
      `segment ${v[i].msn}: ${a[i].sec} vs ${v[i].sec}`,
    );
  }
  assert.match(audio.playlist(), /#EXT-X-TARGETDURATION:2\n/);
  assert.match(audio.playlist(), /#EXT-X-PART:DURATION=0\.\d+,URI="\d+\.\d+\.ts"/);
});

Deno.test("LL-HLS segmenter: bodies leaving the window (segments and their parts) are released, those in it are not", async () => {
  const { tracks, frames } = await clip("h264");
  const released = new Set<Uint8Array>();
  const stop = onBodyReleased((body) => released.add(body));
  try {
    const s = createHlsSegmenter(options(tracks, { partDurationMs: 500, windowSegments: 2 }));
    const seen = new Map<number, Uint8Array>();
    const parts = new Map<number, Uint8Array[]>();
    const record = () => {
      for (let msn = 0; msn < 8; msn++) {
        const bytes = s.segment(msn);
        if (!bytes || seen.has(msn)) continue;
        seen.set(msn, bytes);
        const list: Uint8Array[] = [];
        for (let part = 0; s.part(msn, part); part++) list.push(s.part(msn, part)!);
        parts.set(msn, list);
      }
    };
    for (const f of frames) {
      s.push(f);
      record();
    }
    s.end();
    record();
    assert.ok(seen.size >= 4, `${seen.size} segments cut`);
    let inWindow = 0;
    for (const [msn, bytes] of seen) {
      const served = s.segment(msn) !== undefined;
      if (served) inWindow++;
      assert.equal(released.has(bytes), !served, `segment ${msn}`);
      for (const part of parts.get(msn)!) assert.equal(released.has(part), !served);
    }
    assert.equal(inWindow, 2);
  } finally {
    stop();
  }
});
