/**
 * Watermark files of the media folder: a PNG decodes to the pixels ffmpeg sees; names that
 * leave the folder, missing files, files that are not PNGs and files over the limits are
 * 400 or 404 errors naming the request field.
 */
import assert from "node:assert/strict";
import { BadRequestError, NotFoundError } from "../../core/errors.ts";
import { run } from "../formats/test_fixtures.ts";
import { loadWatermark, maxWatermarkFileBytes } from "./watermark.ts";

/** A media folder with `logo.png` (40x20, half-transparent red left, opaque blue right). */
async function mediaFolder(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "watermark-test-" });
  await run("ffmpeg", [
    "-v",
    "error",
    "-f",
    "lavfi",
    "-i",
    "color=c=red@0.5:s=20x20,format=rgba[l];color=c=blue:s=20x20,format=rgba[r];[l][r]hstack",
    "-frames:v",
    "1",
    "-pix_fmt",
    "rgba",
    `${dir}/logo.png`,
  ]);
  return dir;
}

async function withMediaFolder(test: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mediaFolder();
  try {
    await test(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Asserts that `load` fails with a 400 naming `field` and matching `message`. */
async function assertBadRequest(
  load: Promise<unknown>,
  field: string,
  message: RegExp,
): Promise<void> {
  await assert.rejects(load, (err: Error) => {
    assert.ok(err instanceof BadRequestError, `${err.name}: ${err.message}`);
    assert.equal(err.status, 400);
    assert.equal(err.field, field);
    assert.match(err.message, message);
    return true;
  });
}

Deno.test("a PNG of the media folder loads as its RGBA pixels", async () => {
  await withMediaFolder(async (dir) => {
    const image = await loadWatermark(dir, "logo.png");
    assert.deepEqual([image.width, image.height], [40, 20]);
    assert.equal(image.rgba.length, 40 * 20 * 4);
    const pixel = (
      x: number,
      y: number,
    ) => [...image.rgba.subarray((y * 40 + x) * 4, (y * 40 + x) * 4 + 4)];
    assert.deepEqual(pixel(0, 0), [255, 0, 0, 127]); // red@0.5 is alpha 127 in ffmpeg
    assert.deepEqual(pixel(39, 19), [0, 0, 255, 255]);
    await run("ffmpeg", [
      "-v",
      "error",
      "-i",
      `${dir}/logo.png`,
      "-f",
      "rawvideo",
      "-pix_fmt",
      "rgba",
      `${dir}/logo.rgba`,
    ]);
    assert.deepEqual(
      image.rgba,
      await Deno.readFile(`${dir}/logo.rgba`),
      "the pixels ffmpeg decodes",
    );

    await Deno.mkdir(`${dir}/logos`);
    await Deno.copyFile(`${dir}/logo.png`, `${dir}/logos/small.png`);
    const nested = await loadWatermark(dir, "logos/small.png");
    assert.deepEqual(nested.rgba, image.rgba, "a subfolder of the media folder is inside it");
  });
});

Deno.test("names that leave the media folder are 400 naming the field", async () => {
  await withMediaFolder(async (dir) => {
    const outside = await Deno.makeTempDir({ prefix: "watermark-outside-" });
    try {
      await Deno.copyFile(`${dir}/logo.png`, `${outside}/logo.png`);
      await Deno.symlink(`${outside}/logo.png`, `${dir}/link.png`);
      for (
        const name of [
          "../logo.png",
          `${outside}/logo.png`,
          "logos/../../logo.png",
          "..\\logo.png",
          "",
        ]
      ) {
        await assertBadRequest(loadWatermark(dir, name), "watermark", /inside its folder|leaves/);
      }
      await assertBadRequest(
        loadWatermark(dir, "link.png", "encoder.watermark"),
        "encoder.watermark",
        /links outside/,
      );
      await assertBadRequest(loadWatermark(dir, "logo\0.png"), "watermark", /control characters/);
      await Deno.mkdir(`${dir}/folder.png`);
      await assertBadRequest(loadWatermark(dir, "folder.png"), "watermark", /is not a file/);
    } finally {
      await Deno.remove(outside, { recursive: true });
    }
  });
});

Deno.test("a missing watermark file is a 404", async () => {
  await withMediaFolder(async (dir) => {
    await assert.rejects(loadWatermark(dir, "nothing.png"), (err: Error) => {
      assert.ok(err instanceof NotFoundError);
      assert.equal(err.status, 404);
      assert.match(err.message, /nothing\.png not found/);
      return true;
    });
  });
});

Deno.test("a file that is not a valid PNG is a 400 naming the field and the problem", async () => {
  await withMediaFolder(async (dir) => {
    const png = await Deno.readFile(`${dir}/logo.png`);
    await Deno.writeTextFile(`${dir}/text.png`, "not a picture");
    await assertBadRequest(
      loadWatermark(dir, "text.png"),
      "watermark",
      /"text\.png" is not a usable PNG: .*signature/,
    );
    await Deno.writeFile(`${dir}/cut.png`, png.subarray(0, png.length - 20));
    await assertBadRequest(
      loadWatermark(dir, "cut.png", "encoder.watermark"),
      "encoder.watermark",
      /not a usable PNG: .*truncated/,
    );
    const badCrc = png.slice();
    badCrc[29] ^= 1; // the IHDR CRC
    await Deno.writeFile(`${dir}/crc.png`, badCrc);
    await assertBadRequest(
      loadWatermark(dir, "crc.png"),
      "watermark",
      /IHDR chunk at byte 8 has CRC/,
    );
    await Deno.writeFile(`${dir}/empty.png`, new Uint8Array());
    await assertBadRequest(loadWatermark(dir, "empty.png"), "watermark", /signature/);
  });
});

Deno.test("a PNG over the pixel limit or a file over the byte limit is a 400", async () => {
  await withMediaFolder(async (dir) => {
    await run("ffmpeg", [
      "-v",
      "error",
      "-f",
      "lavfi",
      "-i",
      "color=c=white:s=4098x2",
      "-frames:v",
      "1",
      `${dir}/wide.png`,
    ]);
    await assertBadRequest(
      loadWatermark(dir, "wide.png"),
      "watermark",
      /4098x2 is over the 4096x4096 pixel limit/,
    );
    // A sparse file: as big as it says, nothing written to disk.
    using huge = await Deno.open(`${dir}/huge.png`, { write: true, create: true });
    await huge.truncate(maxWatermarkFileBytes + 1);
    await assertBadRequest(
      loadWatermark(dir, "huge.png"),
      "watermark",
      /over the \d+ byte limit of a watermark/,
    );
  });
});
