/**
 * REST checks of the media tests: an operation that must succeed or be refused with a
 * status, and the pixels of a stream's snapshot as a user would look at them.
 */
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { run, tempPath } from "../../media/formats/test_fixtures.ts";
import type { TestServer } from "./test_server.ts";

/** Posts `body` to `path` and asserts a 200. */
export async function ok(server: TestServer, path: string, body: unknown): Promise<void> {
  const res = await server.post(path, body);
  const text = await res.text();
  assert.equal(res.status, 200, `${path} ${JSON.stringify(body)}: ${text}`);
}

export async function refused(
  server: TestServer,
  path: string,
  body: unknown,
  status: number,
  message?: RegExp,
): Promise<void> {
  const res = await server.post(path, body);
  const text = await res.text();
  assert.equal(res.status, status, `${path} ${JSON.stringify(body)}: ${text}`);
  if (message) assert.match(text, message);
}

/** The RGB pixels of a snapshot of `name`, decoded by ffmpeg. */
export async function snapshotPixels(
  server: TestServer,
  name: string,
): Promise<{ width: number; height: number; rgb: Uint8Array }> {
  const res = await server.post("/stream/snapshot", { streamName: name });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  const path = await tempPath(`snapshot-${name}-${crypto.randomUUID()}.png`);
  await Deno.writeFile(path, new Uint8Array(Buffer.from(body.data, "base64")));
  const { out } = await run("ffprobe", [
    ...["-v", "error", "-show_entries", "stream=width,height", "-of", "json", path],
  ]);
  const { width, height } = JSON.parse(out).streams[0];
  const raw = await new Deno.Command("ffmpeg", {
    args: ["-v", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
    stdout: "piped",
  }).output();
  return { width, height, rgb: raw.stdout };
}

/** Mean RGB of the `w` x `h` rectangle at (x, y). */
export function meanRgb(
  pixels: { width: number; rgb: Uint8Array },
  x: number,
  y: number,
  w: number,
  h: number,
): [number, number, number] {
  const sum = [0, 0, 0];
  for (let row = y; row < y + h; row++) {
    for (let col = x; col < x + w; col++) {
      const at = (row * pixels.width + col) * 3;
      for (let c = 0; c < 3; c++) sum[c] += pixels.rgb[at + c];
    }
  }
  return sum.map((s) => Math.round(s / (w * h))) as [number, number, number];
}
