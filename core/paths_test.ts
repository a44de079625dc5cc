import assert from "node:assert/strict";
import { BadRequestError, NotFoundError } from "./errors.ts";
import { existingFileInside, pathInside } from "./paths.ts";

Deno.test("names with control characters, `..`, or absolute are a 400 naming the field", async () => {
  const folder = await Deno.makeTempDir();
  try {
    for (const name of ["a\u0000b.mp4", "x\n.mp4", "../a.mp4", "/etc/passwd", ""]) {
      assert.throws(() => pathInside(folder, name, "uri"), (err: Error) => {
        assert.ok(err instanceof BadRequestError, `${JSON.stringify(name)}: ${err}`);
        assert.equal(err.field, "uri");
        return true;
      });
      await assert.rejects(existingFileInside(folder, name, "uri"), BadRequestError);
    }
    await assert.rejects(existingFileInside(folder, "missing.mp4", "uri"), NotFoundError);
    await Deno.writeTextFile(`${folder}/ok.mp4`, "");
    assert.equal(
      await existingFileInside(folder, "ok.mp4", "uri"),
      await Deno.realPath(`${folder}/ok.mp4`),
    );
  } finally {
    await Deno.remove(folder, { recursive: true });
  }
});
