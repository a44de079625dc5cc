/** What an RTMP player reads, for the fan-out and packager tests. */
import { ChunkReader } from "../../media/protocols/rtmp/chunk_reader.ts";
import { outChunkBytes, writeChunks } from "../../media/protocols/rtmp/chunk_writer.ts";
import { buildSetChunkSize, MessageType } from "../../media/protocols/rtmp/message.ts";

/** A chunk reader as a player has it: told the server's chunk size first, as a real one is. */
export function playerChunkReader(): ChunkReader {
  const reader = new ChunkReader();
  reader.push(writeChunks(2, {
    type: MessageType.setChunkSize,
    streamId: 0,
    timestamp: 0,
    payload: buildSetChunkSize(outChunkBytes),
  }, 128));
  return reader;
}
