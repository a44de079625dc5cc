/**
 * The GStreamer RTSP camera of the RTSP pull tests (tests/peers/gst_rtsp_server.py), started
 * on a free port of 127.0.0.1 and stopped (or killed, to play a camera that drops) by the test.
 */
import { freePort } from "./process.ts";

/** Longest wait for the server to listen, in milliseconds. */
const readyTimeoutMs = 15_000;
const script = new URL("../peers/gst_rtsp_server.py", import.meta.url).pathname;

/** What the camera serves. */
export interface GstRtspOptions {
  /** Audio codec next to the video. */
  audio?: "aac" | "pcmu" | "opus";
  /** Video: H.264 baseline (default), or H.264 / H.265 with 2 B-frames. */
  video?: "baseline" | "h264-bframes" | "h265-bframes";
  /** Path of the stream. */
  mount?: string;
  /** Require Digest authentication with these credentials. */
  user?: string;
  password?: string;
  /** Port to listen on; a free one when absent (a restarted camera keeps its port). */
  port?: number;
}

/** A running camera. */
export interface GstRtspServer {
  /** rtsp://127.0.0.1:PORT/MOUNT, without credentials. */
  readonly url: string;
  readonly port: number;
  /** Kills the server at once (SIGKILL: a camera that loses power). */
  kill(): Promise<void>;
  /** Stops the server (SIGTERM). */
  stop(): Promise<void>;
}

/** Starts the camera and waits until it listens. */
export async function startGstRtsp(options: GstRtspOptions = {}): Promise<GstRtspServer> {
  const port = options.port ?? freePort();
  const mount = options.mount ?? "/cam";
  const args = [script, String(port), mount, options.audio ?? "aac"];
  if (options.user !== undefined) args.push(options.user, options.password ?? "");
  const child = new Deno.Command("/usr/bin/python3", {
    args: ["-u", ...args],
    env: { GST_RTSP_VIDEO: options.video ?? "baseline" },
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const end = async (signal: Deno.Signal) => {
    clearTimeout(timer);
    try {
      child.kill(signal);
    } catch {
      // exited already
    }
    await reader.cancel();
    await child.status;
  };
  try {
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error("gst rtsp server did not start")), readyTimeoutMs);
    });
    let out = "";
    while (!out.includes("READY")) {
      const { value, done } = await Promise.race([reader.read(), timeout]);
      if (done) throw new Error(`gst rtsp server exited: ${out}`);
      out += value;
    }
    clearTimeout(timer);
  } catch (err) {
    await end("SIGKILL");
    throw err;
  }
  return {
    url: `rtsp://127.0.0.1:${port}${mount}`,
    port,
    kill: () => end("SIGKILL"),
    stop: () => end("SIGTERM"),
  };
}
