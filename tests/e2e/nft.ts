/**
 * nftables for the browser suites (inside their loopback-only namespace): packet loss and
 * transport blocks that a scenario adds and removes. Needs `nft` (Debian package nftables).
 */

/** Runs `nft` with `args`; its output, or an error naming the command and what it printed. */
export async function nft(...args: string[]): Promise<string> {
  const out = await new Deno.Command("nft", { args, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (!out.success) throw new Error(`nft ${args.join(" ")}: ${text}`);
  return text;
}
