import assert from "node:assert/strict";
import { type G711Codec, g711Decode, g711Encode, g711Silence } from "./g711.ts";

/** Runs ffmpeg on raw bytes from stdin, returns its stdout. */
async function ffmpeg(args: string[], input: Uint8Array): Promise<Uint8Array> {
  const child = new Deno.Command("ffmpeg", {
    args: ["-v", "error", ...args],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(input);
  await writer.close();
  const out = await child.output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  return out.stdout;
}

Deno.test("G.711 known values: silence, extremes, sign symmetry", () => {
  assert.deepEqual([...g711Encode("PCMU", [0, -1, 32767, -32768])], [0xff, 0x7e, 0x80, 0x00]);
  assert.deepEqual([...g711Decode("PCMU", Uint8Array.of(0x00, 0x80, 0xff, 0x7f))], [
    -32124,
    32124,
    0,
    0,
  ]);
  assert.deepEqual([...g711Encode("PCMA", [0, -1, 32767, -32768])], [0xd5, 0x55, 0xaa, 0x2a]);
  assert.deepEqual([...g711Decode("PCMA", Uint8Array.of(0xd5, 0x55, 0xaa, 0x2a))], [
    8,
    -8,
    32256,
    -32256,
  ]);
  assert.equal(g711Silence("PCMU"), 0xff);
  assert.equal(g711Silence("PCMA"), 0xd5);
  // Out-of-range input clips rather than wrapping.
  assert.deepEqual([...g711Encode("PCMU", [40000, -40000])], [0x80, 0x00]);
});

Deno.test("G.711: decode then encode gives every code back", () => {
  for (const codec of ["PCMU", "PCMA"] as G711Codec[]) {
    const codes = Uint8Array.from({ length: 256 }, (_, i) => i);
    const again = g711Encode(codec, g711Decode(codec, codes));
    // μ-law has two zeros (0x7f, 0xff): both decode to 0, which encodes as 0xff.
    for (let i = 0; i < 256; i++) {
      if (codec === "PCMU" && i === 0x7f) assert.equal(again[i], 0xff);
      else assert.equal(again[i], i, `${codec} code ${i}`);
    }
  }
});

Deno.test("G.711 matches ffmpeg's pcm_mulaw and pcm_alaw on every sample and code", async () => {
  const all = new Int16Array(65536);
  for (let i = 0; i < all.length; i++) all[i] = i - 32768;
  const pcm = new Uint8Array(all.buffer);
  const codes = Uint8Array.from({ length: 256 }, (_, i) => i);
  for (const [codec, format] of [["PCMU", "mulaw"], ["PCMA", "alaw"]] as const) {
    const encoded = await ffmpeg(
      ["-f", "s16le", "-ar", "8000", "-ac", "1", "-i", "pipe:0", "-f", format, "pipe:1"],
      pcm,
    );
    assert.deepEqual(g711Encode(codec, all), encoded, `${codec} encode`);
    const decoded = await ffmpeg(
      ["-f", format, "-ar", "8000", "-ac", "1", "-i", "pipe:0", "-f", "s16le", "pipe:1"],
      codes,
    );
    assert.deepEqual(new Uint8Array(g711Decode(codec, codes).buffer), decoded, `${codec} decode`);
  }
});
