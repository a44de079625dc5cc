import assert from "node:assert/strict";
import { BadRequestError, NotFoundError } from "../../core/errors.ts";
import { type LayoutDirResult, LayoutDirWatcher, loadLayoutDir } from "./layout_dir.ts";

const full = { x: 0, y: 0, width: 1, height: 1 };

function layoutText(name?: string): string {
  return JSON.stringify({ name, regions: [full] });
}

Deno.test("loadLayoutDir loads the good files and reports each bad one", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/b.json`, layoutText());
    await Deno.writeTextFile(`${dir}/a.json`, layoutText("Speaker"));
    await Deno.writeTextFile(`${dir}/broken.json`, "{ not json");
    await Deno.writeTextFile(`${dir}/c.json`, layoutText("b")); // the name b.json took
    await Deno.writeTextFile(`${dir}/notes.txt`, "not a layout");
    await Deno.mkdir(`${dir}/sub.json`);
    const { layouts, errors } = await loadLayoutDir(dir);
    assert.deepEqual([...layouts.keys()], ["Speaker", "b"], "in file name order");
    assert.deepEqual(layouts.get("b"), { name: "b", regions: [full] });
    assert.deepEqual(errors.map((e) => e.file), ["broken.json", "c.json"]);
    assert.match(errors[0].message, /not JSON/);
    assert.match(errors[1].message, /"b" is taken/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("loadLayoutDir: a missing folder is a NotFoundError, a file a BadRequestError", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await assert.rejects(loadLayoutDir(`${dir}/missing`), NotFoundError);
    await Deno.writeTextFile(`${dir}/file`, "");
    await assert.rejects(loadLayoutDir(`${dir}/file`), BadRequestError);
    assert.throws(() => new LayoutDirWatcher(`${dir}/missing`, () => {}), Deno.errors.NotFound);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** Collects a watcher's results; `next()` waits for the following one. */
function collector() {
  const results: LayoutDirResult[] = [];
  let wake: (() => void) | undefined;
  return {
    results,
    onChange(result: LayoutDirResult) {
      results.push(result);
      wake?.();
    },
    async next(count: number, timeoutMs = 5000): Promise<LayoutDirResult> {
      let timer: ReturnType<typeof setTimeout> | undefined;
      try {
        while (results.length < count) {
          await new Promise<void>((resolve, reject) => {
            wake = resolve;
            timer = setTimeout(() => reject(new Error(`no result ${count} in time`)), timeoutMs);
          });
          clearTimeout(timer);
        }
      } finally {
        clearTimeout(timer);
      }
      return results[count - 1];
    },
  };
}

Deno.test("LayoutDirWatcher reloads once per burst of changes and keeps good files", async () => {
  const dir = await Deno.makeTempDir();
  const seen = collector();
  const watcher = new LayoutDirWatcher(dir, seen.onChange, { debounceMs: 200 });
  try {
    for (const name of ["one", "two", "three", "four", "five"]) {
      await Deno.writeTextFile(`${dir}/${name}.json`, layoutText());
    }
    const first = await seen.next(1);
    assert.deepEqual([...first.layouts.keys()].sort(), ["five", "four", "one", "three", "two"]);
    assert.deepEqual(first.errors, []);
    // Quiet for longer than the debounce: the burst gave one reload.
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(seen.results.length, 1);

    await Deno.writeTextFile(`${dir}/two.json`, "{");
    const second = await seen.next(2);
    assert.deepEqual(second.errors.map((e) => e.file), ["two.json"]);
    assert.ok(second.layouts.has("one") && !second.layouts.has("two"));

    await Deno.remove(`${dir}/one.json`);
    await Deno.writeTextFile(`${dir}/two.json`, layoutText());
    const third = await seen.next(3);
    assert.deepEqual([...third.layouts.keys()], ["five", "four", "three", "two"]);
    assert.deepEqual(third.errors, []);
  } finally {
    await watcher.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("LayoutDirWatcher: no callback after close, even with a change pending", async () => {
  const dir = await Deno.makeTempDir();
  let calls = 0;
  const watcher = new LayoutDirWatcher(dir, () => calls++, { debounceMs: 300 });
  await Deno.writeTextFile(`${dir}/late.json`, layoutText());
  // The change has arrived and its reload waits for the quiet time when the watcher closes.
  await new Promise((resolve) => setTimeout(resolve, 100));
  await watcher.close();
  await new Promise((resolve) => setTimeout(resolve, 400));
  assert.equal(calls, 0);
  await Deno.remove(dir, { recursive: true });
});
