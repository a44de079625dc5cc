/** A node:dgram socket on 127.0.0.1 that keeps every datagram it receives (send tests). */
import dgram from "node:dgram";

/** A bound collector: its port, what it received so far, and its close. */
export interface UdpCollector {
  port: number;
  got: Uint8Array[];
  close(): Promise<void>;
}

/** Binds a collector on an ephemeral 127.0.0.1 port. */
export async function udpCollector(): Promise<UdpCollector> {
  const socket = dgram.createSocket("udp4");
  const got: Uint8Array[] = [];
  socket.on("message", (message: Uint8Array) => got.push(new Uint8Array(message)));
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  return {
    port: socket.address().port,
    got,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

/** Resolves once `check` is true, polling every 5 ms; throws after `timeoutMs`. */
export async function until(check: () => boolean, timeoutMs = 3000): Promise<void> {
  const start = Date.now();
  while (!check()) {
    if (Date.now() - start > timeoutMs) throw new Error("timed out");
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/**
 * Distinct sockets this process has open (the sanitizers do not see FFI sockets; a Worker
 * briefly holds duplicates of the process's own, hence distinct inodes).
 */
export function openSocketCount(): number {
  const sockets = new Set<string>();
  for (const entry of Deno.readDirSync("/proc/self/fd")) {
    try {
      const target = Deno.readLinkSync(`/proc/self/fd/${entry.name}`);
      if (target.startsWith("socket:")) sockets.add(target);
    } catch {
      // closed while listing
    }
  }
  return sockets.size;
}

/**
 * The open socket count once it is back to `expected`, or after `timeoutMs`: a node:dgram
 * close calls back before Deno closes the OS socket.
 */
export async function settledSocketCount(expected: number, timeoutMs = 1000): Promise<number> {
  await until(() => openSocketCount() === expected, timeoutMs).catch(() => {});
  return openSocketCount();
}
