import assert from "node:assert/strict";
import { WasmHeap } from "./wasm_heap.ts";

function heapOfOnePage(): WasmHeap {
  return new WasmHeap(new WebAssembly.Memory({ initial: 1, maximum: 1024 }));
}

Deno.test("blocks are aligned, disjoint and grow the memory when it is full", () => {
  const heap = heapOfOnePage();
  const a = heap.alloc(10);
  const b = heap.alloc(100_000);
  const c = heap.alloc(1);
  for (const ptr of [a, b, c]) assert.equal(ptr % 16, 0);
  assert.ok(a >= 65536, "the module's own first page is left alone");
  assert.ok(b >= a + 10 + 16 && c >= b + 100_000 + 16, "16 spare bytes after each block");
  assert.ok(heap.memoryBytes >= c + 16);
});

Deno.test("freed blocks are reused and merged with their neighbours", () => {
  const heap = heapOfOnePage();
  const a = heap.alloc(1000);
  const b = heap.alloc(1000);
  heap.alloc(1000);
  heap.free(a);
  heap.free(b);
  // a and b merged: a block of their total size fits where a was.
  assert.equal(heap.alloc(2000), a);
  assert.throws(() => heap.free(a + 16), RangeError);
});

Deno.test("freeing the last block returns its space to the top", () => {
  const heap = heapOfOnePage();
  const a = heap.alloc(64);
  const b = heap.alloc(64);
  heap.free(b);
  heap.free(a);
  assert.equal(heap.alloc(500), a);
});

Deno.test("a view made before the memory grows is detached, a fresh one works", () => {
  const heap = heapOfOnePage();
  const ptr = heap.alloc(16);
  const stale = heap.bytes(ptr, 16);
  stale[0] = 7;
  heap.alloc(1 << 20);
  assert.equal(stale.length, 0, "growing detached the old view");
  assert.equal(heap.bytes(ptr, 16)[0], 7);
});
