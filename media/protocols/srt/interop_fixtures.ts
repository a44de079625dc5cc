/**
 * Test helpers for SRT interop with libsrt peers (ffmpeg, srt-live-transmit): a TS clip made
 * at run time, peers spawned as callers, and what a user checks in the bytes received
 * (frames per track, continuity counter errors).
 */
import { TsDemuxer } from "../../formats/mpegts/demuxer.ts";
import { codecKind } from "../../frame.ts";

/** Fails, naming the Debian package, when srt-live-transmit is missing. */
export function requireSrtTools(): void {
  try {
    new Deno.Command("srt-live-transmit", { args: ["-version"], stdout: "null", stderr: "null" })
      .outputSync();
  } catch {
    throw new Error("srt-live-transmit is missing: apt-get install -y srt-tools");
  }
}

/** Writes an H.264 + AAC MPEG-TS clip (testsrc, 25 fps, GOP 25) of `seconds` at `videoKbps`. */
export async function makeTsClip(path: string, seconds: number, videoKbps = 800): Promise<void> {
  const args = [
    "-v",
    "error",
    "-y",
    "-f",
    "lavfi",
    "-i",
    "testsrc=size=640x360:rate=25",
    "-f",
    "lavfi",
    "-i",
    "sine=frequency=440:sample_rate=48000",
    "-t",
    String(seconds),
    "-c:v",
    "libx264",
    "-preset",
    "ultrafast",
    "-pix_fmt",
    "yuv420p",
    "-g",
    "25",
    "-b:v",
    `${videoKbps}k`,
    "-maxrate",
    `${videoKbps}k`,
    "-bufsize",
    `${videoKbps}k`,
    "-threads",
    "1",
    "-c:a",
    "aac",
    "-b:a",
    "64k",
    "-f",
    "mpegts",
    path,
  ];
  const out = await new Deno.Command("ffmpeg", { args, stderr: "piped" }).output();
  if (!out.success) throw new Error(`ffmpeg clip: ${new TextDecoder().decode(out.stderr)}`);
}

/** What the bytes of an MPEG-TS stream hold. */
export interface TsSummary {
  videoFrames: number;
  audioFrames: number;
  /** TS packets whose continuity counter skipped (lost or damaged data). */
  continuityErrors: number;
  bytes: number;
}

/** Demuxes `bytes` and counts frames and continuity errors. */
export function summarizeTs(chunks: Uint8Array[]): TsSummary {
  const demuxer = new TsDemuxer();
  const summary: TsSummary = { videoFrames: 0, audioFrames: 0, continuityErrors: 0, bytes: 0 };
  const lastCc = new Map<number, number>();
  let carry = new Uint8Array(0);
  const count = (frames: ReturnType<TsDemuxer["push"]>) => {
    for (const f of frames) {
      if (codecKind(f.codec) === "video") summary.videoFrames++;
      else summary.audioFrames++;
    }
  };
  for (const chunk of chunks) {
    summary.bytes += chunk.length;
    count(demuxer.push(chunk));
    const joined = new Uint8Array(carry.length + chunk.length);
    joined.set(carry);
    joined.set(chunk, carry.length);
    let off = 0;
    for (; off + 188 <= joined.length; off += 188) {
      if (joined[off] !== 0x47) {
        summary.continuityErrors++;
        continue;
      }
      const pid = ((joined[off + 1] & 0x1f) << 8) | joined[off + 2];
      const hasPayload = (joined[off + 3] & 0x10) !== 0;
      const cc = joined[off + 3] & 0x0f;
      if (pid === 0x1fff || !hasPayload) continue;
      const last = lastCc.get(pid);
      if (last !== undefined && cc !== ((last + 1) & 15) && cc !== last) {
        summary.continuityErrors++;
      }
      lastCc.set(pid, cc);
    }
    carry = joined.slice(off);
  }
  count(demuxer.flush());
  return summary;
}

/** Spawned peer processes with their stderr collected. */
export interface Peer {
  processes: Deno.ChildProcess[];
  /** Resolves with the last process's exit code and every stderr once all exited. */
  done: Promise<{ code: number; stderr: string }>;
}

function spawn(command: string, args: string[], stdin?: ReadableStream<Uint8Array>): Peer {
  const process = new Deno.Command(command, {
    args,
    stdin: stdin ? "piped" : "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const piping = stdin ? stdin.pipeTo(process.stdin).catch(() => {}) : Promise.resolve();
  const done = (async () => {
    const stderr = await new Response(process.stderr).text();
    const { code } = await process.status;
    await piping;
    return { code, stderr };
  })();
  return { processes: [process], done };
}

/** ffmpeg sending a TS file in real time to an SRT URL (the query holds the SRT options). */
export function ffmpegSend(clip: string, url: string): Peer {
  return spawn("ffmpeg", ["-v", "error", "-re", "-i", clip, "-c", "copy", "-f", "mpegts", url]);
}

/** ffmpeg reading an SRT URL into a TS file for up to `seconds`. */
export function ffmpegReceive(url: string, out: string, seconds: number): Peer {
  const args = ["-v", "error", "-y", "-i", url, "-t", String(seconds), "-c", "copy", out];
  return spawn("ffmpeg", args);
}

/** Time srt-live-transmit gets to send its last packets once its input ended, ms. */
const srtLiveTransmitDrainMs = 1500;

/**
 * srt-live-transmit sending a TS file, fed in real time by ffmpeg through a pipe. It does not
 * exit at the end of its input, so it is stopped (SIGTERM) shortly after ffmpeg ends; `done`
 * has ffmpeg's exit code.
 */
export function srtLiveTransmitSend(clip: string, url: string): Peer {
  const feeder = new Deno.Command("ffmpeg", {
    args: ["-v", "error", "-re", "-i", clip, "-c", "copy", "-f", "mpegts", "-"],
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const sender = spawn("srt-live-transmit", ["-chunk:1316", "file://con", url], feeder.stdout);
  const done = feeder.status.then(async ({ code }) => {
    await new Promise((resolve) => setTimeout(resolve, srtLiveTransmitDrainMs));
    try {
      sender.processes[0].kill("SIGTERM");
    } catch {
      // stopped already (stopPeer)
    }
    const { stderr } = await sender.done;
    return { code, stderr };
  });
  return { processes: [feeder, ...sender.processes], done };
}

/** Stops a peer (SIGTERM to each process) and waits for it. */
export async function stopPeer(peer: Peer): Promise<void> {
  for (const process of peer.processes) {
    try {
      process.kill("SIGTERM");
    } catch {
      // exited already
    }
  }
  await peer.done;
}

/** Polls `check` every 50 ms until true or `timeoutMs`; throws naming `what` on timeout. */
export async function waitUntil(check: () => boolean, timeoutMs: number, what: string) {
  const start = performance.now();
  while (!check()) {
    if (performance.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
