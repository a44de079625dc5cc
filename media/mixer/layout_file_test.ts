import assert from "node:assert/strict";
import { LayoutFileError, parseLayoutFile } from "./layout_file.ts";

const half = (x: number) => ({ x, y: 0, width: 0.5, height: 1 });

Deno.test("a layout file gives its regions, byCount and name (default: the file name)", () => {
  const text = JSON.stringify({
    regions: [half(0), half(0.5)],
    byCount: { "3": [half(0), half(0.5), { x: 0.7, y: 0.7, width: 0.3, height: 0.3 }] },
  });
  assert.deepEqual(parseLayoutFile(text, "two-up.json"), {
    name: "two-up",
    regions: [half(0), half(0.5)],
    byCount: { 3: [half(0), half(0.5), { x: 0.7, y: 0.7, width: 0.3, height: 0.3 }] },
  });
  const named = parseLayoutFile(JSON.stringify({ name: "Talk", regions: [half(0)] }), "x.JSON");
  assert.equal(named.name, "Talk");
  // Three thirds written with rounding still fit.
  const third = 0.3333333;
  const thirds = [0, third, 2 * third].map((x) => ({ x, y: 0, width: 0.3333334, height: 1 }));
  assert.equal(parseLayoutFile(JSON.stringify({ regions: thirds }), "t.json").regions?.length, 3);
});

Deno.test("a bad layout file is refused with a message naming what is wrong", () => {
  const cases: [unknown, RegExp][] = [
    ["{", /not JSON/],
    [[half(0)], /must be a JSON object/],
    [{ region: [half(0)] }, /unknown key "region"/],
    [{}, /no regions/],
    [{ regions: [] }, /regions must be a list of 1 to 64/],
    [{ regions: [{ x: 0, y: 0, width: 1.5, height: 1 }] }, /regions\[0\]\.width must be a number/],
    [{ regions: [half(0), { x: 0.6, y: 0, width: 0.5, height: 1 }] }, /regions\[1\]: x \+ width/],
    [{ regions: [{ x: 0, y: 0, width: 0, height: 1 }] }, /regions\[0\] is empty/],
    [{ regions: [{ x: "0", y: 0, width: 1, height: 1 }] }, /regions\[0\]\.x must be/],
    [{ regions: [{ x: 0, y: 0, width: 1, height: 1, z: 1 }] }, /regions\[0\]: unknown key "z"/],
    [{ byCount: { "2": [half(0)] } }, /byCount\.2 has 1 regions, not 2/],
    [{ byCount: { "0": [] } }, /key "0" must be an input count/],
    [{ byCount: { "two": [half(0)] } }, /key "two"/],
    [{ name: "", regions: [half(0)] }, /name must be a non-empty string/],
    [{ name: 7, regions: [half(0)] }, /name must be/],
  ];
  for (const [json, message] of cases) {
    const text = typeof json === "string" ? json : JSON.stringify(json);
    assert.throws(() => parseLayoutFile(text, "bad.json"), (error: unknown) => {
      assert.ok(error instanceof LayoutFileError, text);
      assert.match(error.message, message, text);
      return true;
    });
  }
});
