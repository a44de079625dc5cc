import assert from "node:assert/strict";
import { freePort } from "../../tests/helpers/process.ts";
import { heapGrowth, Inspector } from "./inspector.ts";

/**
 * A process that keeps three `Kept` objects and lets one object go that only a full collection
 * takes (too small to start one by itself); it prints `finalized` once that object is collected.
 */
const target = `
class Kept {}
globalThis.kept = [new Kept(), new Kept(), new Kept()];
const registry = new FinalizationRegistry(() => console.log("finalized"));
(() => registry.register({ payload: new Array(100).fill(1) }, "dropped"))();
setInterval(() => {}, 1000);
`;

/** Lines of `stream` as they come. */
async function* linesOf(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  let buffered = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    buffered += chunk;
    const lines = buffered.split("\n");
    buffered = lines.pop()!;
    yield* lines;
  }
}

Deno.test("Inspector: a forced GC collects what nothing holds; heap counts by constructor", async () => {
  const dir = await Deno.makeTempDir();
  const file = `${dir}/target.js`;
  await Deno.writeTextFile(file, target);
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", `--inspect=127.0.0.1:${port}`, file],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stdout = linesOf(child.stdout);
  const stderr = linesOf(child.stderr);
  let inspector: Inspector | undefined;
  try {
    for await (const line of stderr) if (line.startsWith("Debugger listening")) break;
    inspector = await Inspector.connect(port);

    // First the collection: a heap snapshot collects garbage too.
    await inspector.collectGarbage();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const first = await Promise.race([
      stdout.next(),
      new Promise((resolve) => timer = setTimeout(() => resolve({ value: "(nothing)" }), 5000)),
    ]);
    clearTimeout(timer);
    assert.deepEqual((first as IteratorResult<string>).value, "finalized");

    const counts = await inspector.heapCounts();
    assert.equal(counts.get("Kept")?.count, 3);
    assert.ok((await inspector.memoryUsage()).heapUsed > 0);
  } finally {
    await inspector?.close();
    child.kill();
    await child.status;
    await stdout.return(undefined);
    for await (const _ of stderr) {
      // Drained so the pipe is closed.
    }
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("heapGrowth lists what changed, largest growth in bytes first", () => {
  const before = new Map([["A", { count: 1, bytes: 100 }], ["B", { count: 5, bytes: 500 }]]);
  const after = new Map([
    ["A", { count: 1, bytes: 100 }],
    ["B", { count: 3, bytes: 300 }],
    ["C", { count: 10, bytes: 2048 }],
  ]);
  assert.deepEqual(heapGrowth(before, after), ["+10 C (+2.0 KiB)", "-2 B (-0.2 KiB)"]);
});
