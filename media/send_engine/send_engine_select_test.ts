import assert from "node:assert/strict";
import { chooseSendEngine } from "./send_engine_select.ts";

Deno.test("media.sendEngine: auto takes the FFI engine where libc and libcrypto load; werift stays werift", () => {
  assert.deepEqual(chooseSendEngine("auto"), {
    engine: "ffi",
    srtpBackend: "ffi",
    reason: "libc and libcrypto load over FFI",
  });
  assert.equal(chooseSendEngine("ffi").engine, "ffi");
  assert.equal(chooseSendEngine("werift").engine, "werift");
});

Deno.test("media.sendEngine: auto falls back to werift without --allow-ffi", async () => {
  const code = `import { chooseSendEngine } from ${
    JSON.stringify(import.meta.resolve("./send_engine_select.ts"))
  };
    console.log(JSON.stringify(chooseSendEngine("auto")));`;
  // `deno eval` grants everything; `deno run -` reads the module from stdin with what it is given.
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--no-prompt", "--allow-read", "--allow-env", "-"],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(code));
  await writer.close();
  const output = await child.output();
  const choice = JSON.parse(new TextDecoder().decode(output.stdout));
  assert.equal(choice.engine, "werift");
  assert.match(choice.reason, /ffi/i);
});
