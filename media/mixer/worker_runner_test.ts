import assert from "node:assert/strict";
import { buildWasm } from "../../wasm/build.ts";
import { KernelError } from "./errors.ts";
import { black, i420Size } from "./i420.ts";
import type { ComposeJob } from "./kernel_jobs.ts";
import { WorkerRunner } from "./worker_runner.ts";

await buildWasm({ ifStale: true });

function job(width: number, height: number, pictureBytes = i420Size(64, 64)): ComposeJob {
  return {
    op: "compose",
    scene: 1,
    width,
    height,
    background: black,
    fit: "stretch",
    inputs: [{ slot: 0, rect: { x: 0, y: 0, width, height } }],
    pictures: [{ slot: 0, width: 64, height: 64, data: new ArrayBuffer(pictureBytes) }],
    evict: [],
    output: new ArrayBuffer(i420Size(width, height)),
  };
}

function transferOf(j: ComposeJob): ArrayBuffer[] {
  const owned = j.pictures.map((p) => p.data).filter((d) => d instanceof ArrayBuffer);
  return [j.output, ...owned];
}

Deno.test("a failed job rejects with a KernelError and its Worker is replaced", async () => {
  using runner = new WorkerRunner();
  const good = job(32, 32);
  assert.ok(await runner.run(good, transferOf(good)));
  assert.equal(runner.generation(0), 0);

  const bad = job(32, 32, 100); // a 64x64 picture in 100 bytes
  const live = WorkerRunner.liveWorkers;
  await assert.rejects(runner.run(bad, transferOf(bad)), KernelError);
  assert.equal(runner.generation(0), 1);
  assert.equal(WorkerRunner.liveWorkers, live - 1, "the failed Worker is terminated");

  const after = job(48, 16);
  const result = await runner.run(after, transferOf(after));
  assert.equal(result?.output.byteLength, i420Size(48, 16));
  assert.equal(WorkerRunner.liveWorkers, live, "its successor started with the next job");
});

Deno.test("results resolve in submission order across Workers", async () => {
  using runner = new WorkerRunner({ workers: 2 });
  const slow = job(3840, 2160);
  const fast = job(16, 16);
  const order: string[] = [];
  await Promise.all([
    runner.run(slow, transferOf(slow), 0).then(() => order.push("slow")),
    runner.run(fast, transferOf(fast), 1).then(() => order.push("fast")),
  ]);
  assert.deepEqual(order, ["slow", "fast"]);
});

Deno.test("closing the runner rejects pending jobs and ends its Workers", async () => {
  const before = WorkerRunner.liveWorkers;
  const runner = new WorkerRunner({ workers: 2 });
  assert.equal(WorkerRunner.liveWorkers, before + 2);
  const pending = job(1280, 720);
  const result = runner.run(pending, transferOf(pending));
  runner.close();
  await assert.rejects(result, KernelError);
  await assert.rejects(runner.run(job(8, 8)), KernelError);
  assert.equal(WorkerRunner.liveWorkers, before);
});

Deno.test("the runner refuses a worker index it does not have", async () => {
  using runner = new WorkerRunner();
  await assert.rejects(runner.run(job(8, 8), [], 3), RangeError);
});
