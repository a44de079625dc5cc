/**
 * The native engine runs the ffmpeg of a whole job (snapshot, conversion) reniced, so a burst
 * of them leaves the cores to the server's event loop first.
 */
import assert from "node:assert/strict";
import { NativeEngine, wholeJobNice } from "../media/engine/native.ts";

/** Pids of this process's children. */
function children(): number[] {
  const pids: number[] = [];
  for (const task of Deno.readDirSync("/proc/self/task")) {
    const list = Deno.readTextFileSync(`/proc/self/task/${task.name}/children`);
    pids.push(...list.split(" ").filter(Boolean).map(Number));
  }
  return pids;
}

/** The nice value of the one ffmpeg `job` runs, looked at while it runs. */
async function niceOfJob(live: boolean): Promise<number> {
  const engine = new NativeEngine();
  const { promise: checked, resolve: check } = Promise.withResolvers<void>();
  // Input that ends only once the running ffmpeg was looked at.
  async function* input(): AsyncIterable<Uint8Array> {
    await checked;
    yield new Uint8Array(0);
  }
  const job = engine.run({
    inputArgs: ["-f", "mpegts"],
    input: input(),
    outputArgs: ["-f", "null"],
    live,
  }).catch((err) => err);
  try {
    let pids: number[] = [];
    for (let i = 0; i < 100 && pids.length === 0; i++) {
      pids = children();
      if (pids.length === 0) await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(pids.length, 1);
    // Field 19 of /proc/<pid>/stat, counted after the command name's closing parenthesis.
    const stat = Deno.readTextFileSync(`/proc/${pids[0]}/stat`);
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16]);
  } finally {
    check();
    await job;
    await engine.close();
  }
}

Deno.test("a whole job's ffmpeg runs at nice 10", async () => {
  assert.equal(await niceOfJob(false), wholeJobNice);
  assert.equal(wholeJobNice, 10);
});

Deno.test("a chunk of live audio keeps the server's priority", async () => {
  assert.equal(await niceOfJob(true), 0);
});
