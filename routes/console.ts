/**
 * The web console on the REST port: the page and its files from the repository's `web/`
 * folder (plain HTML, JS and CSS, no build step), and a few JSON answers the management API
 * lacks — reader counts, the recordings on disk, recent log lines. The files hold no secret
 * and answer without credentials so a token user can reach the page's own login form; every
 * JSON answer here and every operation the page calls stays behind REST auth.
 */
import type { Hono } from "hono";
import type { Services } from "../core/services.ts";
import { serverVersion } from "../core/version.ts";
import { Stream } from "../media/stream.ts";
import { clientRecordsPrefix } from "./client_records.ts";

/** Path of the console page. */
export const consolePath = "/console";
/** Prefix of the console's JSON answers. */
const apiPrefix = `${consolePath}/api`;
/** Recordings listed at most (the newest). */
const maxRecordingsListed = 500;
/** Log lines the page gets at most in one answer. */
const maxLogLinesPerAnswer = 500;

/** The page's files by request path: file name in web/ and media type. */
const webFiles: Record<string, { file: string; type: string }> = {
  [consolePath]: { file: "console.html", type: "text/html; charset=utf-8" },
  [`${consolePath}/`]: { file: "console.html", type: "text/html; charset=utf-8" },
  [`${consolePath}/console.js`]: { file: "console.js", type: "text/javascript; charset=utf-8" },
  [`${consolePath}/console.css`]: { file: "console.css", type: "text/css; charset=utf-8" },
};
const webFolder = new URL("../web/", import.meta.url);

/** True for the console's static files, which answer without credentials. */
export function isConsoleFile(method: string, path: string): boolean {
  return (method === "GET" || method === "HEAD") && path in webFiles;
}

/** A recording on disk, as the console lists it. */
interface RecordingFile {
  name: string;
  bytes: number;
  modified: number | null;
  url: string;
}

/** Adds the console page, its files and its JSON answers to the REST app. */
export function registerConsole(app: Hono, services: Services): void {
  for (const [path, { file, type }] of Object.entries(webFiles)) {
    // Read per request: the files are small and an edited page shows without a restart.
    app.get(path, async (c) =>
      c.body(await Deno.readFile(new URL(file, webFolder)), 200, {
        "Content-Type": type,
        "Cache-Control": "no-cache",
        "X-Content-Type-Options": "nosniff",
        // The page runs its own script and loads media from this origin only.
        "Content-Security-Policy":
          "default-src 'self'; media-src 'self' blob: mediastream:; img-src 'self' data: blob:; frame-ancestors 'none'",
      }));
  }

  app.get(`${apiPrefix}/info`, (c) =>
    c.json({
      version: serverVersion,
      whepPath: services.config.whip.playPath,
      recordsPath: clientRecordsPrefix,
    }));

  app.get(`${apiPrefix}/readers`, (c) => {
    const readers: Record<string, number> = {};
    for (const stream of services.streams.list()) {
      if (stream instanceof Stream) readers[stream.mediaSessionId] = stream.readerCount;
    }
    return c.json(readers);
  });

  app.get(`${apiPrefix}/records`, async (c) => c.json(await recordingFiles(services)));

  app.get(`${apiPrefix}/logs`, (c) => {
    const lines = services.log.recent?.lines(maxLogLinesPerAnswer) ?? [];
    return c.json({ kept: services.log.recent !== undefined, lines });
  });
}

/** The newest plain files of the recordings folder; none when it does not exist yet. */
async function recordingFiles(services: Services): Promise<RecordingFile[]> {
  const folder = services.config.folders.records;
  const files: RecordingFile[] = [];
  try {
    for await (const entry of Deno.readDir(folder)) {
      if (!entry.isFile) continue;
      const info = await Deno.stat(`${folder}/${entry.name}`).catch(() => undefined);
      if (!info) continue;
      files.push({
        name: entry.name,
        bytes: info.size,
        modified: info.mtime?.getTime() ?? null,
        url: clientRecordsPrefix + encodeURIComponent(entry.name),
      });
    }
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  return files.sort((a, b) => (b.modified ?? 0) - (a.modified ?? 0)).slice(0, maxRecordingsListed);
}
