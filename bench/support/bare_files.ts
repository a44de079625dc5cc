/**
 * An anchor of the HLS viewers benchmark: the runtime's bare HTTP server answering the files
 * of a folder from memory (read once at start), with no per-request work beyond a map lookup.
 * Run: deno run -A bench/support/bare_files.ts <port> <folder>
 */
const [port, root] = [Number(Deno.args[0]), Deno.args[1]];
const files = new Map<string, Uint8Array<ArrayBuffer>>();

function load(dir: string, prefix: string): void {
  for (const entry of Deno.readDirSync(dir)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) load(path, `${prefix}/${entry.name}`);
    else files.set(`${prefix}/${entry.name}`, Deno.readFileSync(path));
  }
}
load(root, "");

Deno.serve({ hostname: "127.0.0.1", port, onListen: () => {} }, (req) => {
  const body = files.get(new URL(req.url).pathname);
  if (!body) return new Response("not found", { status: 404 });
  const playlist = req.url.endsWith(".m3u8");
  return new Response(body, {
    headers: {
      "Content-Type": playlist ? "application/vnd.apple.mpegurl" : "video/mp2t",
      "Cache-Control": playlist ? "no-cache" : "max-age=3600",
      "Access-Control-Allow-Origin": "*",
    },
  });
});
