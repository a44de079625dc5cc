import assert from "node:assert/strict";
import { masterPlaylist, mediaPlaylist, renditionReports } from "./playlist.ts";
import { avcCodecString, codecString } from "./codec_string.ts";
import { buildAsc } from "../../codecs/aac.ts";

const t0 = Date.UTC(2026, 10, 24, 1, 2, 3, 45);

Deno.test("media playlist: MPEG-TS, live, a discontinuity, the longest segment sets the target", () => {
  const text = mediaPlaylist({
    targetDurationSec: 2,
    mediaSequence: 7,
    discontinuitySequence: 1,
    segments: [
      { uri: "7.ts", durationSec: 2, programDateTimeMs: t0 },
      { uri: "8.ts", durationSec: 2.04, programDateTimeMs: t0 + 2000 },
      { uri: "9.ts", durationSec: 1.5, programDateTimeMs: t0 + 9000, discontinuity: true },
    ],
    ended: false,
  });
  assert.equal(
    text,
    `#EXTM3U
#EXT-X-VERSION:3
#EXT-X-TARGETDURATION:3
#EXT-X-MEDIA-SEQUENCE:7
#EXT-X-DISCONTINUITY-SEQUENCE:1
#EXT-X-PROGRAM-DATE-TIME:2026-11-24T01:02:03.045Z
#EXTINF:2.000,
7.ts
#EXT-X-PROGRAM-DATE-TIME:2026-11-24T01:02:05.045Z
#EXTINF:2.040,
8.ts
#EXT-X-DISCONTINUITY
#EXT-X-PROGRAM-DATE-TIME:2026-11-24T01:02:12.045Z
#EXTINF:1.500,
9.ts
`,
  );
});

Deno.test("media playlist: fMP4 ended, tick noise does not raise the target", () => {
  const text = mediaPlaylist({
    targetDurationSec: 2,
    mediaSequence: 0,
    discontinuitySequence: 0,
    mapUri: "init.mp4",
    segments: [{ uri: "0.m4s", durationSec: 2.0000000001 }, { uri: "1.m4s", durationSec: 0.4 }],
    ended: true,
  });
  assert.equal(
    text,
    `#EXTM3U
#EXT-X-VERSION:7
#EXT-X-TARGETDURATION:2
#EXT-X-MEDIA-SEQUENCE:0
#EXT-X-MAP:URI="init.mp4"
#EXTINF:2.000,
0.m4s
#EXTINF:0.400,
1.m4s
#EXT-X-ENDLIST
`,
  );
});

Deno.test("media playlist: LL-HLS parts, the segment in progress and the preload hint", () => {
  const part = (uri: string, independent = false) => ({ uri, durationSec: 0.48, independent });
  const text = mediaPlaylist({
    targetDurationSec: 2,
    mediaSequence: 3,
    discontinuitySequence: 0,
    mapUri: "init.mp4",
    partTargetSec: 0.5,
    segments: [
      { uri: "3.m4s", durationSec: 2, programDateTimeMs: t0 },
      {
        uri: "4.m4s",
        durationSec: 1,
        programDateTimeMs: t0 + 2000,
        parts: [part("4.0.m4s", true), part("4.1.m4s")],
      },
      { durationSec: 0, programDateTimeMs: t0 + 3000, parts: [part("5.0.m4s", true)] },
    ],
    preloadHintUri: "5.1.m4s",
    ended: false,
  });
  assert.equal(
    text,
    `#EXTM3U
#EXT-X-VERSION:7
#EXT-X-TARGETDURATION:2
#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.5
#EXT-X-PART-INF:PART-TARGET=0.5
#EXT-X-MEDIA-SEQUENCE:3
#EXT-X-MAP:URI="init.mp4"
#EXT-X-PROGRAM-DATE-TIME:2026-11-24T01:02:03.045Z
#EXTINF:2.000,
3.m4s
#EXT-X-PROGRAM-DATE-TIME:2026-11-24T01:02:05.045Z
#EXT-X-PART:DURATION=0.480,URI="4.0.m4s",INDEPENDENT=YES
#EXT-X-PART:DURATION=0.480,URI="4.1.m4s"
#EXTINF:1.000,
4.m4s
#EXT-X-PROGRAM-DATE-TIME:2026-11-24T01:02:06.045Z
#EXT-X-PART:DURATION=0.480,URI="5.0.m4s",INDEPENDENT=YES
#EXT-X-PRELOAD-HINT:TYPE=PART,URI="5.1.m4s"
`,
  );
  // A segment in progress with no part yet is not listed; an ended playlist has no hint.
  const ended = mediaPlaylist({
    targetDurationSec: 1,
    mediaSequence: 0,
    discontinuitySequence: 0,
    partTargetSec: 0.2,
    segments: [{ durationSec: 0, programDateTimeMs: t0, parts: [] }],
    preloadHintUri: "0.0.ts",
    ended: true,
  });
  assert.equal(
    ended,
    `#EXTM3U
#EXT-X-VERSION:7
#EXT-X-TARGETDURATION:1
#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=0.6
#EXT-X-PART-INF:PART-TARGET=0.2
#EXT-X-MEDIA-SEQUENCE:0
#EXT-X-ENDLIST
`,
  );
});

Deno.test("master playlist: variants in the order given, optional attributes left out", () => {
  const text = masterPlaylist([
    {
      uri: "720p/index.m3u8",
      info: {
        bandwidth: 2_500_000.4,
        averageBandwidth: 2_000_000,
        codecs: "avc1.64001f,mp4a.40.2",
        width: 1280,
        height: 720,
        frameRate: 29.97,
      },
    },
    {
      uri: "audio/index.m3u8",
      info: { bandwidth: 130_000, averageBandwidth: 128_000, codecs: "mp4a.40.2" },
    },
  ]);
  assert.equal(
    text,
    `#EXTM3U
#EXT-X-VERSION:3
#EXT-X-STREAM-INF:BANDWIDTH=2500000,AVERAGE-BANDWIDTH=2000000,CODECS="avc1.64001f,mp4a.40.2",RESOLUTION=1280x720,FRAME-RATE=29.970
720p/index.m3u8
#EXT-X-STREAM-INF:BANDWIDTH=130000,AVERAGE-BANDWIDTH=128000,CODECS="mp4a.40.2"
audio/index.m3u8
`,
  );
});

Deno.test("master playlist: audio renditions as EXT-X-MEDIA, video variants name their group", () => {
  const video = (uri: string, width: number, height: number, bandwidth: number) => ({
    uri,
    info: {
      bandwidth,
      averageBandwidth: bandwidth,
      codecs: "avc1.42c01e,mp4a.40.2",
      width,
      height,
    },
    audioGroup: "aac",
  });
  const text = masterPlaylist(
    [video("p360/index.m3u8", 640, 360, 900_000), video("p180/index.m3u8", 320, 180, 300_000)],
    [
      { group: "aac", name: "aac128", uri: "aac128/index.m3u8", isDefault: true },
      { group: "aac", name: "aac64", uri: "aac64/index.m3u8", isDefault: false },
    ],
  );
  assert.equal(
    text,
    `#EXTM3U
#EXT-X-VERSION:3
#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="aac",NAME="aac128",DEFAULT=YES,AUTOSELECT=YES,URI="aac128/index.m3u8"
#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="aac",NAME="aac64",DEFAULT=NO,AUTOSELECT=YES,URI="aac64/index.m3u8"
#EXT-X-STREAM-INF:BANDWIDTH=900000,AVERAGE-BANDWIDTH=900000,CODECS="avc1.42c01e,mp4a.40.2",RESOLUTION=640x360,AUDIO="aac"
p360/index.m3u8
#EXT-X-STREAM-INF:BANDWIDTH=300000,AVERAGE-BANDWIDTH=300000,CODECS="avc1.42c01e,mp4a.40.2",RESOLUTION=320x180,AUDIO="aac"
p180/index.m3u8
`,
  );
});

Deno.test("codec strings: avc1 from the SPS bytes, mp4a from the ASC object type", () => {
  // SPS header byte, profile 66 (Baseline), constraint flags 0xe0, level 31.
  assert.equal(avcCodecString(new Uint8Array([0x67, 0x42, 0xe0, 0x1f, 0xab])), "avc1.42e01f");
  assert.equal(codecString({ codec: "AAC", asc: buildAsc(2, 48000, 2) }), "mp4a.40.2");
  // HE-AAC: object type 5, 24 kHz core, stereo, 48 kHz SBR, core AAC-LC.
  const heAac = new Uint8Array([0x2b, 0x11, 0x88, 0x00]);
  assert.equal(codecString({ codec: "AAC", asc: heAac }), "mp4a.40.5");
  assert.equal(codecString({ codec: "OPUS" }), "opus");
  assert.equal(codecString(undefined), undefined);
});

Deno.test("media playlist: a delta update skips the segments ending before CAN-SKIP-UNTIL", () => {
  const part = (uri: string) => ({ uri, durationSec: 0.5, independent: true });
  const playlist = (delta: boolean) =>
    mediaPlaylist({
      targetDurationSec: 2,
      mediaSequence: 10,
      discontinuitySequence: 0,
      mapUri: "init.mp4",
      partTargetSec: 0.5,
      skipUntilSec: 12,
      delta,
      // 8 segments of 2 s, then 1 s of parts: 17 s. Segments ending 12 s or more before the
      // end are 10 and 11 (ending 15 s and 13 s before it); 12 ends 11 s before it.
      segments: [
        ...Array.from({ length: 8 }, (_, i) => ({
          uri: `${10 + i}.m4s`,
          durationSec: 2,
          programDateTimeMs: t0 + i * 2000,
          discontinuity: i === 1,
        })),
        { durationSec: 0, parts: [part("18.0.m4s"), part("18.1.m4s")] },
      ],
      preloadHintUri: "18.2.m4s",
      ended: false,
    });
  const full = playlist(false);
  assert.match(
    full,
    /#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,CAN-SKIP-UNTIL=12,PART-HOLD-BACK=1\.5\n/,
  );
  assert.match(full, /#EXT-X-VERSION:7\n/);
  assert.equal(full.includes("#EXT-X-SKIP"), false);
  const delta = playlist(true);
  assert.match(delta, /#EXT-X-VERSION:9\n/);
  assert.match(delta, /#EXT-X-MEDIA-SEQUENCE:10\n/);
  assert.match(delta, /#EXT-X-MAP:URI="init\.mp4"\n#EXT-X-SKIP:SKIPPED-SEGMENTS=2\n/);
  assert.equal(delta.includes("10.m4s"), false);
  assert.equal(delta.includes("11.m4s"), false);
  // The skipped segment's discontinuity goes with it.
  assert.equal(delta.includes("#EXT-X-DISCONTINUITY\n"), false);
  // The rest is the full playlist's from segment 12 on.
  const from12 = (text: string) =>
    text.slice(text.indexOf("#EXT-X-PROGRAM-DATE-TIME", text.indexOf("11.m4s")));
  assert.equal(delta.slice(delta.indexOf("#EXT-X-PROGRAM-DATE-TIME")), from12(full));
});

Deno.test("media playlist: a window shorter than CAN-SKIP-UNTIL skips nothing", () => {
  const text = mediaPlaylist({
    targetDurationSec: 2,
    mediaSequence: 0,
    discontinuitySequence: 0,
    partTargetSec: 0.5,
    skipUntilSec: 12,
    delta: true,
    segments: Array.from({ length: 6 }, (_, i) => ({ uri: `${i}.ts`, durationSec: 2 })),
    ended: false,
  });
  assert.equal(text.includes("#EXT-X-SKIP"), false);
  assert.match(text, /#EXT-X-VERSION:7\n/);
});

Deno.test("rendition reports: LAST-PART only when the rendition has parts", () => {
  assert.equal(
    renditionReports([
      { uri: "../360p/index.m3u8", lastMsn: 41, lastPart: 2 },
      { uri: "../audio/index.m3u8", lastMsn: 40 },
    ]),
    `#EXT-X-RENDITION-REPORT:URI="../360p/index.m3u8",LAST-MSN=41,LAST-PART=2
#EXT-X-RENDITION-REPORT:URI="../audio/index.m3u8",LAST-MSN=40
`,
  );
});
