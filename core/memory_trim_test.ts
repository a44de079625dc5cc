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

/**
 * In a fresh process (malloc's threshold is process-wide): frees a 1 MiB block, then asks for
 * another; prints the bytes malloc has in mappings of their own while it is held.
 */
const mappedScript = (tune: boolean) => `
  import { tuneMalloc } from "${new URL("./memory_trim.ts", import.meta.url).href}";
  if (${tune} && !tuneMalloc()) throw new Error("mallopt missing");
  const c = Deno.dlopen("libc.so.6", {
    malloc: { parameters: ["usize"], result: "pointer" },
    free: { parameters: ["pointer"], result: "void" },
    mallinfo2: { parameters: [], result: { struct: Array(10).fill("usize") } },
  });
  const size = 1024n * 1024n;
  c.symbols.free(c.symbols.malloc(size));
  const block = c.symbols.malloc(size);
  const words = new BigUint64Array(c.symbols.mallinfo2().buffer);
  console.log(String(words[4]));
  c.symbols.free(block);
`;

async function mappedBytes(tune: boolean): Promise<number> {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=ts", mappedScript(tune)],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(code, 0, new TextDecoder().decode(stderr));
  return Number(new TextDecoder().decode(stdout).trim());
}

Deno.test("tuneMalloc: a large block freed and asked for again is mapped, so a free unmaps it", async () => {
  // glibc's default: the threshold rose to 1 MiB on the free, so the second block comes from
  // the heap (where freeing it returns nothing while anything above it is in use).
  assert.ok(await mappedBytes(false) < 1024 * 1024, "untuned: the second block is in the heap");
  assert.ok(await mappedBytes(true) >= 1024 * 1024, "tuned: the second block is a mapping");
});
