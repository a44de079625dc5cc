/** A ByteSource over an open file, for the MP4 demuxer: reads only the ranges asked for. */
import type { ByteSource } from "../formats/mp4/demuxer.ts";

/** A random-access file; `close()` releases it. Reads must not overlap in time. */
export interface FileByteSource extends ByteSource {
  close(): void;
}

/** Opens `path` for reading as a ByteSource. */
export async function openFileByteSource(path: string): Promise<FileByteSource> {
  const file = await Deno.open(path, { read: true });
  try {
    const { size } = await file.stat();
    return {
      size,
      async read(offset, length) {
        const out = new Uint8Array(Math.max(0, Math.min(length, size - offset)));
        await file.seek(offset, Deno.SeekMode.Start);
        let filled = 0;
        while (filled < out.length) {
          const n = await file.read(out.subarray(filled));
          if (n === null) break;
          filled += n;
        }
        return out.subarray(0, filled);
      },
      close: () => file.close(),
    };
  } catch (err) {
    file.close();
    throw err;
  }
}
