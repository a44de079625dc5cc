import assert from "node:assert/strict";
import { buildWasm, isStale, wasmModuleNames, wasmOutputUrl } from "./build.ts";

Deno.test("--if-stale builds what is missing or stale and then nothing", async () => {
  await buildWasm({ ifStale: true });
  for (const name of wasmModuleNames) assert.equal(isStale(name), false, name);

  // An output older than its source is stale and gets rebuilt.
  const output = wasmOutputUrl("audio");
  Deno.utimeSync(output, new Date(0), new Date(0));
  assert.equal(isStale("audio"), true);
  assert.deepEqual(await buildWasm({ ifStale: true }), ["audio"]);

  const started = performance.now();
  assert.deepEqual(await buildWasm({ ifStale: true }), []);
  assert.ok(performance.now() - started < 50, "the fresh check is a few stat calls");
});

Deno.test("the built modules export their kernels", async () => {
  await buildWasm({ ifStale: true });
  const video = await WebAssembly.compile(await Deno.readFile(wasmOutputUrl("video")));
  const exports = WebAssembly.Module.exports(video).map((e) => e.name);
  for (const kernel of ["scaleI420", "fillI420", "blendOverlay", "rgbaToI420", "i420ToRgba"]) {
    assert.ok(exports.includes(kernel), kernel);
  }
  const audio = await WebAssembly.compile(await Deno.readFile(wasmOutputUrl("audio")));
  assert.ok(WebAssembly.Module.exports(audio).some((e) => e.name === "resample"));
});
