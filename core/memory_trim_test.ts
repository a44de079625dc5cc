/**
 * A trim gives back what glibc's malloc keeps of freed memory: 128 MiB freed in 64 KiB blocks
 * (below the size malloc maps on its own) under one block still held, so malloc cannot shrink
 * its heap by itself.
 */
import assert from "node:assert/strict";
import { trimMemory } from "./memory_trim.ts";

function rssMiB(): number {
  const status = Deno.readTextFileSync("/proc/self/status");
  return Number(status.match(/VmRSS:\s+(\d+)/)?.[1]) / 1024;
}

Deno.test("trimMemory returns memory freed to malloc to the system", () => {
  const c = Deno.dlopen("libc.so.6", {
    malloc: { parameters: ["usize"], result: "pointer" },
    memset: { parameters: ["pointer", "i32", "usize"], result: "pointer" },
    free: { parameters: ["pointer"], result: "void" },
  });
  try {
    const blockBytes = 64n * 1024n;
    const blocks = Array.from({ length: 2048 }, () => {
      const block = c.symbols.malloc(blockBytes);
      c.symbols.memset(block, 1, blockBytes); // touched: resident
      return block;
    });
    const held = c.symbols.malloc(blockBytes);
    for (const block of blocks) c.symbols.free(block);
    const before = rssMiB();
    assert.ok(trimMemory(), "malloc_trim is available (glibc, --allow-ffi)");
    const after = rssMiB();
    c.symbols.free(held);
    assert.ok(before - after >= 100, `RSS ${before.toFixed(1)} -> ${after.toFixed(1)} MiB`);
  } finally {
    c.close();
  }
});
