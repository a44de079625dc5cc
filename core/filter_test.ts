import assert from "node:assert/strict";
import { filterRecords, matchesFilter } from "./filter.ts";

Deno.test("a record matches when every filter field is equal, objects by value", () => {
  const rec = { name: "a", published: true, width: 640, audioState: { muted: false } };
  assert.ok(matchesFilter(rec, {}));
  assert.ok(matchesFilter(rec, { name: "a", published: true }));
  assert.ok(matchesFilter(rec, { audioState: { muted: false } }));
  assert.ok(!matchesFilter(rec, { audioState: { muted: true } }));
  assert.ok(!matchesFilter(rec, { name: "b" }));
  assert.ok(!matchesFilter(rec, { width: "640" }));
  assert.ok(!matchesFilter(rec, { missing: 1 }));
  assert.deepEqual(filterRecords([rec, { ...rec, name: "b" }], { name: "b" }).length, 1);
});
