/** Picks the codec engine of the configuration: `auto` means native when ffmpeg is on PATH. */
import type { CodecEngine } from "./engine.ts";
import { NativeEngine } from "./native.ts";
import { WasmEngine } from "./wasm.ts";

/** The engine for `media.engine` of the configuration. */
export function createEngine(choice: "auto" | "native" | "wasm"): CodecEngine {
  if (choice === "native") return new NativeEngine();
  if (choice === "wasm") return new WasmEngine();
  return findOnPath("ffmpeg") ? new NativeEngine() : new WasmEngine();
}

/** True when an executable file `name` is in one of the PATH directories. */
function findOnPath(name: string): boolean {
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    if (!dir) continue;
    try {
      const info = Deno.statSync(`${dir}/${name}`);
      if (info.isFile && ((info.mode ?? 0o111) & 0o111) !== 0) return true;
    } catch {
      // Not in this directory.
    }
  }
  return false;
}
