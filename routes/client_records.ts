/**
 * `GET /client/records/<file>`: recordings served read-only on the REST port, where WCS's
 * recording demo downloads `stream.getRecordInfo()`. Byte ranges (RFC 9110 §14) let players
 * seek. Only plain files directly in the recordings folder are served: a name with a path
 * separator, a control character, or that is `.`/`..` is a 400, and a symlink that leads
 * out of the folder is refused.
 */
import { BadRequestError, NotFoundError } from "../core/errors.ts";
import { existingFileInside } from "../core/paths.ts";

/** Path prefix of the recordings, followed by one file name. */
export const clientRecordsPrefix = "/client/records/";
/** Bytes read from the file per chunk of a response body. */
const readChunkBytes = 64 * 1024;
/** The field named in 400 answers. */
const field = "file";

/** A byte range to send: first and last byte, inclusive. */
interface ByteRange {
  start: number;
  end: number;
}

/**
 * Serves the recording named by the request's path (after `clientRecordsPrefix`) from
 * `folder`. Bad names are BadRequestError, missing files NotFoundError.
 */
export async function serveClientRecord(req: Request, folder: string): Promise<Response> {
  const name = fileName(req.url);
  const path = await existingFileInside(folder, name, field);
  const file = await Deno.open(path, { read: true });
  let size: number;
  let modified: Date | null;
  try {
    ({ size, mtime: modified } = await file.stat());
  } catch (err) {
    file.close();
    throw err;
  }
  const common: Record<string, string> = {
    "Content-Type": name.toLowerCase().endsWith(".mp4") ? "video/mp4" : "application/octet-stream",
    "Accept-Ranges": "bytes",
    "X-Content-Type-Options": "nosniff",
  };
  if (modified) common["Last-Modified"] = modified.toUTCString();
  const range = parseRange(req.headers.get("Range"), size);
  if (range === "unsatisfiable") {
    file.close();
    return new Response(null, {
      status: 416,
      headers: { ...common, "Content-Range": `bytes */${size}` },
    });
  }
  const { start, end } = range ?? { start: 0, end: size - 1 };
  const length = Math.max(0, end - start + 1);
  const status = range ? 206 : 200;
  const responseHeaders: Record<string, string> = { ...common, "Content-Length": String(length) };
  if (range) responseHeaders["Content-Range"] = `bytes ${start}-${end}/${size}`;
  if (req.method === "HEAD" || length === 0) {
    file.close();
    return new Response(null, { status, headers: responseHeaders });
  }
  return new Response(fileSlice(file, start, length), { status, headers: responseHeaders });
}

/** The decoded file name of the URL's path; a 400 when it is not a plain name. */
function fileName(url: string): string {
  const pathname = new URL(url).pathname;
  const raw = pathname.slice(pathname.indexOf(clientRecordsPrefix) + clientRecordsPrefix.length);
  let name: string;
  try {
    name = decodeURIComponent(raw);
  } catch {
    throw new BadRequestError(field, "the file name is not valid percent-encoding");
  }
  if (name === "") throw new NotFoundError("no file named");
  // deno-lint-ignore no-control-regex
  if (/[/\\\u0000-\u001f\u007f]/.test(name) || name === "." || name === "..") {
    throw new BadRequestError(field, "the file name must be one plain name in the folder");
  }
  return name;
}

/**
 * The one byte range a `Range` header asks for; undefined for the whole file (no header, a
 * malformed one, or several ranges, which RFC 9110 lets a server answer in full).
 */
export function parseRange(
  header: string | null,
  size: number,
): ByteRange | "unsatisfiable" | undefined {
  const match = header?.match(/^bytes=(\d*)-(\d*)$/);
  if (!match || (match[1] === "" && match[2] === "")) return undefined;
  if (match[1] === "") {
    const suffix = Number(match[2]);
    if (suffix === 0 || size === 0) return "unsatisfiable";
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(match[1]);
  const end = match[2] === "" ? size - 1 : Math.min(Number(match[2]), size - 1);
  if (match[2] !== "" && Number(match[2]) < start) return undefined;
  if (start >= size) return "unsatisfiable";
  return { start, end };
}

/** `length` bytes of `file` from `start`, read as the client takes them; closes the file. */
function fileSlice(file: Deno.FsFile, start: number, length: number): ReadableStream<Uint8Array> {
  let left = length;
  let positioned = false;
  let open = true;
  const close = () => {
    if (open) file.close();
    open = false;
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        if (!positioned) {
          await file.seek(start, Deno.SeekMode.Start);
          positioned = true;
        }
        const buffer = new Uint8Array(Math.min(readChunkBytes, left));
        const read = await file.read(buffer);
        // null: the file shrank since its size was read; end here rather than hang.
        if (read !== null) {
          left -= read;
          controller.enqueue(buffer.subarray(0, read));
        }
        if (read === null || left === 0) {
          close();
          controller.close();
        }
      } catch (err) {
        close();
        controller.error(err);
      }
    },
    cancel: close,
  }, { highWaterMark: 0 });
}
