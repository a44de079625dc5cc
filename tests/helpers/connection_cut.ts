/**
 * Cuts TCP connections from the server side, as a lost network looks to the server: `ss -K`
 * aborts the server's sockets in the kernel, so the server reads an error and the client gets
 * a reset, with no WebSocket close on either side.
 */

/**
 * Aborts every server-side TCP connection of `serverPort` on 127.0.0.1 (only the one from
 * `clientPort` when given); throws when none was cut (needs root and a kernel with
 * CONFIG_INET_DIAG_DESTROY).
 */
export async function cutServerConnections(serverPort: number, clientPort?: number): Promise<void> {
  const filter = ["src", "127.0.0.1", "sport", "=", `:${serverPort}`];
  if (clientPort !== undefined) filter.push("dport", "=", `:${clientPort}`);
  const out = await new Deno.Command("ss", {
    args: ["-K", "-H", "-t", ...filter],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const cut = new TextDecoder().decode(out.stdout).trim();
  if (!out.success || cut === "") {
    const err = new TextDecoder().decode(out.stderr);
    throw new Error(
      `ss -K cut no connection of port ${serverPort} (root? ss from iproute2): ${err}`,
    );
  }
}
