/**
 * hls.js (npm `hls.js`) in headless Chromium, for the HLS browser tests and bench/hls.ts:
 * a page (tests/e2e/hls_page.html) and the hls.js bundle served from 127.0.0.1, one Chromium
 * for every player. And the publisher that makes glass-to-player latency readable: ffmpeg
 * burning its wall clock into the picture as boxes the page reads back.
 */
import { createRequire } from "node:module";
import { type BrowserContext, chromium, type Page } from "playwright-core";
import { chromiumArgs } from "../e2e/netns.ts";

/** What the page reports of its player (see hls_page.html `state()`). */
export interface PlayerState {
  waiting: number;
  /** `waiting` events after playback first started: stalls. */
  waitingAfterStart: number;
  playing: boolean;
  errors: { type: string; details: string; fatal: boolean }[];
  /** hls.js LEVEL_SWITCHED events, in order. */
  levelSwitches: { level: number; height: number; bitrate: number; atMs: number }[];
  /** LL-HLS parts and whole segments hls.js loaded. */
  partsLoaded: number;
  fragsLoaded: number;
  /** Segments of audio renditions (EXT-X-MEDIA) loaded, apart from the video's. */
  audioFragsLoaded: number;
  /** hls.js's audio tracks (EXT-X-MEDIA renditions) and the index of the one playing. */
  audioTracks: { name: string; groupId: string }[];
  audioTrack: number;
  /** Audio bytes Chromium decoded (`webkitAudioDecodedByteCount`). */
  audioDecodedBytes: number;
  /** Glass-to-player samples waiting to be read. */
  latencies: number;
  currentTime: number;
  videoWidth: number;
  videoHeight: number;
  totalVideoFrames: number;
  droppedVideoFrames: number;
  lowLatencyMode: boolean;
  /** hls.js's estimate of the distance to the live edge, in seconds. */
  latency: number;
  targetLatency: number;
  /** Wall clock minus the EXT-X-PROGRAM-DATE-TIME of the playhead, in ms. */
  programDateLagMs: number;
  currentLevel: number;
  levels: { width: number; height: number; bitrate: number }[];
}

/** One hls.js player page. */
export interface HlsPlayer {
  readonly page: Page;
  /** Loads `url` with hls.js `config`; resolves once the video element plays. */
  play(url: string, config?: Record<string, unknown>): Promise<void>;
  state(): Promise<PlayerState>;
  /** Starts reading the burnt-in clock of every presented frame (see `stampFilter`). */
  readStamps(): Promise<void>;
  /** Glass-to-player latencies measured since the last call, in ms. */
  glassLatencies(): Promise<number[]>;
  close(): Promise<void>;
}

/** A Chromium and the server of the test page. */
export interface HlsBrowser {
  /** Origin of the page, e.g. http://127.0.0.1:40123 */
  readonly origin: string;
  readonly context: BrowserContext;
  /** A fresh page playing nothing yet. */
  newPlayer(): Promise<HlsPlayer>;
  close(): Promise<void>;
}

/** The driver functions of hls_page.html (page.evaluate sends a function's text only). */
type PageGlobals = {
  play(url: string, config: Record<string, unknown>): Promise<boolean>;
  state(): PlayerState;
  readStamps(): void;
  glassLatencies(): number[];
};

/** Starts Chromium (/usr/bin/chromium, the flags of netns.ts) and the page server. */
export async function startHlsBrowser(): Promise<HlsBrowser> {
  const bundle = await Deno.readFile(
    createRequire(import.meta.url).resolve("hls.js/dist/hls.min.js"),
  );
  const html = await Deno.readFile(new URL("../e2e/hls_page.html", import.meta.url));
  const pages = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const path = new URL(req.url).pathname;
    if (path === "/") return new Response(html, { headers: { "Content-Type": "text/html" } });
    if (path === "/hls.min.js") {
      return new Response(bundle, { headers: { "Content-Type": "text/javascript" } });
    }
    return new Response("not found", { status: 404 });
  });
  const origin = `http://127.0.0.1:${pages.addr.port}`;
  const profile = await Deno.makeTempDir({ prefix: "hls-chromium-" });
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: "/usr/bin/chromium",
      headless: true,
      args: chromiumArgs,
    });
  } catch (err) {
    await pages.shutdown();
    await Deno.remove(profile, { recursive: true });
    throw err;
  }
  return {
    origin,
    context,
    async newPlayer() {
      const page = await context.newPage();
      page.on("pageerror", (err) => console.error("[page error]", err.message));
      await page.goto(`${origin}/`);
      return {
        page,
        async play(url, config = {}) {
          await page.evaluate(
            ([u, c]) => (globalThis as unknown as PageGlobals).play(u, c),
            [url, config] as const,
          );
        },
        state: () => page.evaluate(() => (globalThis as unknown as PageGlobals).state()),
        readStamps: () => page.evaluate(() => (globalThis as unknown as PageGlobals).readStamps()),
        glassLatencies: () =>
          page.evaluate(() => (globalThis as unknown as PageGlobals).glassLatencies()),
        close: () => page.close(),
      };
    },
    async close() {
      await context.close();
      await Deno.remove(profile, { recursive: true });
      await pages.shutdown();
    },
  };
}

/** Boxes of the burnt-in clock (hls_page.html reads the same layout). */
const stampBits = 16;
/** Unit of the burnt-in clock, in ms (16 bits of it wrap after 655 s). */
const stampUnitMs = 10;

/**
 * An ffmpeg video filter that burns the wall clock at the moment each frame passes through it
 * into the top of a `width`-wide picture: a black band with `stampBits` boxes, box k white
 * when bit k of floor(ms / stampUnitMs) is set. With a real-time (`-re`) source the filter
 * runs as the frame is made, so the stamp is the frame's glass time.
 */
export function stampFilter(width: number): string {
  const box = Math.floor(width / stampBits);
  const boxes = Array.from(
    { length: stampBits },
    (_, k) =>
      `drawbox=x=${k * box}:y=0:w=${box}:h=${box}:color=white:t=fill:` +
      `enable='mod(floor(time(0)*${1000 / stampUnitMs}/pow(2,${k})),2)'`,
  );
  return [`drawbox=x=0:y=0:w=${width}:h=${box}:color=black:t=fill`, ...boxes].join(",");
}

/** Options of publishStamped. */
export interface StampedOptions {
  /** Where to, e.g. rtmp://127.0.0.1:1935/live/s1 (FLV) or any ffmpeg output. */
  url: string;
  /** ffmpeg output format, `flv` by default. */
  format?: string;
  /** Extra ffmpeg output options (before the URL). */
  outputArgs?: string[];
  seconds: number;
  width?: number;
  height?: number;
  fps?: number;
  /** Keyframe interval, in frames. */
  gop?: number;
  /** Video bitrate, in kbit/s. */
  videoKbps?: number;
}

/**
 * Starts ffmpeg publishing a real-time testsrc2 picture with the burnt-in wall clock and a
 * 440 Hz tone (H.264 + AAC 48 kHz) for `seconds`; stop it with tests/helpers/ffmpeg_rtmp.ts
 * `stopPublisher`.
 */
export function publishStamped(options: StampedOptions): Deno.ChildProcess {
  const { width = 640, height = 360, fps = 25, gop = 25, videoKbps = 1000 } = options;
  return new Deno.Command("ffmpeg", {
    args: [
      ...["-hide_banner", "-nostdin", "-loglevel", "error", "-re"],
      ...["-f", "lavfi", "-i", `testsrc2=size=${width}x${height}:rate=${fps}`],
      ...["-re", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"],
      ...["-t", String(options.seconds), "-vf", stampFilter(width)],
      ...["-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency"],
      ...["-b:v", `${videoKbps}k`, "-maxrate", `${videoKbps}k`, "-bufsize", `${videoKbps}k`],
      ...["-g", String(gop), "-pix_fmt", "yuv420p", "-threads", "1"],
      ...["-c:a", "aac", "-b:a", "64k", "-ar", "48000", "-ac", "1"],
      ...(options.outputArgs ?? []),
      ...["-f", options.format ?? "flv", options.url],
    ],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
}

/** The `p`-th percentile (0..100) of `values` (nearest rank); NaN when empty. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p / 100 * sorted.length) - 1))];
}
