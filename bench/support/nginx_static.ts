/**
 * nginx (Debian `nginx`) serving a folder over HTTP on 127.0.0.1, as benchmarks' static-file
 * anchor: its own config in a temp dir, one worker, sendfile, no access log, HLS content
 * types and CORS as an HLS origin serves them; /etc/nginx is never read.
 */
import { freePort } from "../../tests/helpers/process.ts";

const nginxBinary = "/usr/sbin/nginx";
/** Longest nginx may take to listen, in milliseconds. */
const startTimeoutMs = 10_000;

/** A running nginx. */
export interface NginxStatic {
  /** e.g. http://127.0.0.1:40123 */
  readonly url: string;
  /** The master process; its worker is a child. */
  readonly pid: number;
  /** Stops nginx and waits for it. */
  stop(): Promise<void>;
}

/** Starts nginx serving `root` (with `worker_connections` for `connections` clients). */
export async function startNginxStatic(root: string, connections: number): Promise<NginxStatic> {
  try {
    Deno.statSync(nginxBinary);
  } catch {
    throw new Error(`${nginxBinary} is missing: apt-get install nginx`);
  }
  // Started as root, nginx's worker runs as `nobody`: it must be able to read the folder
  // (temp folders are made 0700).
  await Deno.chmod(root, 0o755);
  const port = freePort();
  const dir = await Deno.makeTempDir({ prefix: "nginx-static-" });
  const conf = `${dir}/nginx.conf`;
  await Deno.writeTextFile(
    conf,
    `worker_processes 1;
worker_rlimit_nofile ${connections * 2 + 100};
error_log ${dir}/error.log warn;
pid ${dir}/nginx.pid;
events { worker_connections ${connections + 100}; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  types {
    application/vnd.apple.mpegurl m3u8;
    video/mp2t ts;
    video/mp4 mp4 m4s;
  }
  server {
    listen 127.0.0.1:${port};
    root ${root};
    location ~ \\.m3u8$ { add_header Cache-Control "max-age=1"; add_header Access-Control-Allow-Origin *; }
    location / { add_header Cache-Control "max-age=3600"; add_header Access-Control-Allow-Origin *; }
  }
}
`,
  );
  const child = new Deno.Command(nginxBinary, {
    args: ["-p", dir, "-c", conf, "-g", "daemon off;"],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const stop = async () => {
    try {
      child.kill("SIGTERM");
    } catch {
      // Exited already.
    }
    await child.status;
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  };
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    try {
      const res = await fetch(`${url}/`);
      await res.body?.cancel();
      break;
    } catch {
      if (Date.now() > deadline) {
        const log = await Deno.readTextFile(`${dir}/error.log`).catch(() => "");
        await stop();
        throw new Error(`nginx did not listen on ${port}: ${log.slice(-500)}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return { url, pid: child.pid, stop };
}
