/**
 * Watermark images of transcoders (`encoder.watermark` of /transcoder/startup and
 * /transcoder/set_watermark): a PNG file of the media folder, decoded to the RGBA the video
 * kernels blend. Every refusal names the request field it came from.
 */

import { BadRequestError, ParseError } from "../../core/errors.ts";
import { existingFileInside } from "../../core/paths.ts";
import { type DecodedPng, decodePng, maxPngIdatBytes } from "../formats/png.ts";

/** A decoded watermark: `width` x `height` pixels of straight-alpha RGBA, row after row. */
export type WatermarkImage = DecodedPng;

/**
 * Largest watermark file read, in bytes: the decoder's IDAT limit and room for the other
 * chunks. A bigger file is refused before it is read into memory.
 */
export const maxWatermarkFileBytes = maxPngIdatBytes + 1024 * 1024;

/**
 * Reads and decodes the PNG `fileName` of `mediaFolder` (subfolders allowed, nothing
 * outside). Throws BadRequestError naming `field` for a name with path traversal or control
 * characters, a file that is not a valid PNG or is over the limits; NotFoundError for a
 * missing file. Each call decodes the file again: callers keep the image while it is in use.
 */
export async function loadWatermark(
  mediaFolder: string,
  fileName: string,
  field = "watermark",
): Promise<WatermarkImage> {
  // The file system refuses a NUL with a TypeError; this is the client's bad name.
  if ([...fileName].some((c) => c < " ")) {
    throw new BadRequestError(field, `${JSON.stringify(fileName)} has control characters`);
  }
  const path = await existingFileInside(mediaFolder, fileName, field);
  const bytes = await readBounded(path, fileName, field);
  try {
    return await decodePng(bytes);
  } catch (err) {
    if (!(err instanceof ParseError)) throw err;
    const message = `${JSON.stringify(fileName)} is not a usable PNG: ${err.message}`;
    throw new BadRequestError(field, message, { cause: err });
  }
}

/**
 * The bytes of `path`, refusing a file over `maxWatermarkFileBytes` before reading it. Reads
 * at most the size it had then, so a file that grows meanwhile cannot exceed the bound.
 */
async function readBounded(path: string, fileName: string, field: string): Promise<Uint8Array> {
  using file = await Deno.open(path, { read: true });
  const { size } = await file.stat();
  if (size > maxWatermarkFileBytes) {
    throw new BadRequestError(
      field,
      `${JSON.stringify(fileName)} has ${size} bytes, over the ${maxWatermarkFileBytes} byte ` +
        "limit of a watermark",
    );
  }
  const bytes = new Uint8Array(size);
  let filled = 0;
  while (filled < size) {
    const n = await file.read(bytes.subarray(filled));
    if (n === null) break;
    filled += n;
  }
  return bytes.subarray(0, filled);
}
