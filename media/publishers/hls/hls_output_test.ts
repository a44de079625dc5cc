import assert from "node:assert/strict";
import { createLogger } from "../../../core/log.ts";
import { Stream } from "../../stream.ts";
import type { HlsSegmenter, HlsSegmenterOptions } from "./hls_segmenter_api.ts";
import { HlsOutput } from "./hls_output.ts";

/** A segmenter standing still at `edge`, its playlist naming its variant. */
function stillSegmenter(
  name: string,
  edge: HlsSegmenter["edge"],
): (options: HlsSegmenterOptions) => HlsSegmenter {
  return () => ({
    push() {},
    discontinuity() {},
    end() {},
    ended: false,
    playlist: (delta = false) => `#EXTM3U\n# ${name}${delta ? " delta" : ""}\n`,
    edge,
    init: () => undefined,
    segment: () => undefined,
    part: () => undefined,
    ready: () => Promise.resolve(true),
    variant: undefined,
    metrics: {
      minFPS: 0,
      avgFPS: 0,
      maxFPS: 0,
      countGaps: 0,
      resolutionChanges: 0,
      queueSize: 0,
      startPts: 0,
      currentPts: 0,
      keyFrameReceived: false,
    },
  });
}

function stream(name: string): Stream {
  return new Stream({
    name,
    mediaSessionId: name,
    tracks: [{ id: 0, kind: "video", codec: "H264", clockRate: 90000 }],
    mediaProvider: "test",
    stopProvider: () => Promise.resolve(),
  });
}

Deno.test("LL-HLS media playlists report the other variants' last segment and part", () => {
  const edges: Record<string, HlsSegmenter["edge"]> = {
    source: { msn: 12, part: 3 },
    "360p": { msn: 11, part: 0 },
    "240 p": undefined, // no segment yet: not reported
  };
  const made: string[] = [];
  const source = stream("cam");
  const output = new HlsOutput(
    "cam",
    source,
    Object.keys(edges).map((name) => ({ name, stream: source, container: "fmp4" })),
    false,
    {
      targetDurationSec: 2,
      partDurationMs: 500,
      windowSegments: 6,
      createSegmenter: (o) => {
        const name = Object.keys(edges)[made.length];
        made.push(name);
        return stillSegmenter(name, edges[name])(o);
      },
      log: createLogger({ level: "error" }),
    },
  );
  try {
    assert.equal(
      output.mediaPlaylist(output.variant("source")!, false),
      `#EXTM3U
# source
#EXT-X-RENDITION-REPORT:URI="../360p/index.m3u8",LAST-MSN=11,LAST-PART=0
`,
    );
    assert.equal(
      output.mediaPlaylist(output.variant("360p")!, true),
      `#EXTM3U
# 360p delta
#EXT-X-RENDITION-REPORT:URI="../source/index.m3u8",LAST-MSN=12,LAST-PART=3
`,
    );
    assert.match(
      output.mediaPlaylist(output.variant("240 p")!, false),
      /URI="\.\.\/source\/index\.m3u8",LAST-MSN=12,LAST-PART=3\n.*URI="\.\.\/360p\/index\.m3u8"/s,
    );
  } finally {
    output.close();
    source.end();
  }
});

Deno.test("plain HLS media playlists carry no rendition report", () => {
  const source = stream("cam");
  const output = new HlsOutput(
    "cam",
    source,
    ["source", "360p"].map((name) => ({ name, stream: source, container: "ts" })),
    false,
    {
      targetDurationSec: 2,
      partDurationMs: 0,
      windowSegments: 6,
      createSegmenter: stillSegmenter("x", { msn: 3 }),
      log: createLogger({ level: "error" }),
    },
  );
  try {
    assert.equal(output.mediaPlaylist(output.variant("source")!, false), "#EXTM3U\n# x\n");
  } finally {
    output.close();
    source.end();
  }
});
