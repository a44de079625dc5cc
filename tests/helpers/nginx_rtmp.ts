/**
 * nginx with libnginx-mod-rtmp as a third-party RTMP server for tests and benchmarks: its own
 * config in a temp dir (one worker, `application live { live on; }`), bound to 127.0.0.1 on a
 * free port, never touching /etc/nginx.
 */
import { freePort } from "./process.ts";

/** The RTMP module of the Debian package libnginx-mod-rtmp. */
export const nginxRtmpModule = "/usr/lib/nginx/modules/ngx_rtmp_module.so";
const nginxBinary = "/usr/sbin/nginx";
/** Longest nginx may take to listen, in milliseconds. */
const nginxStartTimeoutMs = 10_000;

/** A running nginx-rtmp. */
export interface NginxRtmp {
  readonly port: number;
  /** rtmp://127.0.0.1:port/live */
  readonly liveUrl: string;
  /** Process id of the nginx master (changes on restart). */
  readonly pid: number;
  /** Stops nginx (master and worker) and waits for it. */
  stop(): Promise<void>;
  /** Stops nginx and starts it again on the same port and config. */
  restart(): Promise<void>;
}

/** Fails naming the packages when nginx or its RTMP module is missing. */
export function requireNginxRtmp(): void {
  for (const path of [nginxBinary, nginxRtmpModule]) {
    try {
      Deno.statSync(path);
    } catch {
      throw new Error(`${path} is missing: apt-get install nginx libnginx-mod-rtmp`);
    }
  }
}

/** Starts nginx-rtmp on a free port of 127.0.0.1. */
export async function startNginxRtmp(port = freePort()): Promise<NginxRtmp> {
  requireNginxRtmp();
  const dir = await Deno.makeTempDir({ prefix: "nginx-rtmp-" });
  const conf = `${dir}/nginx.conf`;
  await Deno.writeTextFile(
    conf,
    `load_module ${nginxRtmpModule};
worker_processes 1;
error_log ${dir}/error.log info;
pid ${dir}/nginx.pid;
events { worker_connections 1024; }
rtmp {
  server {
    listen 127.0.0.1:${port};
    chunk_size 4096;
    application live { live on; record off; }
  }
}
`,
  );
  let child = await launch(dir, conf, port);
  return {
    port,
    liveUrl: `rtmp://127.0.0.1:${port}/live`,
    get pid() {
      return child.pid;
    },
    async stop() {
      await halt(child);
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
    async restart() {
      await halt(child);
      child = await launch(dir, conf, port);
    },
  };
}

async function launch(dir: string, conf: string, port: number): Promise<Deno.ChildProcess> {
  const child = new Deno.Command(nginxBinary, {
    args: ["-p", dir, "-c", conf, "-g", "daemon off;"],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const deadline = Date.now() + nginxStartTimeoutMs;
  for (;;) {
    try {
      // nginx-rtmp takes a bare connect and close without harm.
      const probe = await Deno.connect({ hostname: "127.0.0.1", port });
      probe.close();
      return child;
    } catch {
      if (Date.now() > deadline) {
        await halt(child);
        const log = await Deno.readTextFile(`${dir}/error.log`).catch(() => "");
        throw new Error(`nginx-rtmp did not listen on ${port}: ${log.slice(-500)}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/** SIGTERM is nginx's fast shutdown: the master stops its worker, then exits. */
async function halt(child: Deno.ChildProcess): Promise<void> {
  try {
    child.kill("SIGTERM");
  } catch {
    // Exited already.
  }
  await child.status;
}
