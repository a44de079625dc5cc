import assert from "node:assert/strict";
import { ConfigError, envName, loadConfig } from "./config.ts";

const noFile = (path: string): string => {
  throw new Deno.errors.NotFound(path);
};

Deno.test("defaults: loopback bind, WCS ports, folders, no hooks backend", () => {
  const config = loadConfig({ readTextFile: noFile });
  assert.equal(config.bind, "127.0.0.1");
  assert.deepEqual(config.ports, {
    cdn: 8084,
    rest: 8081,
    ws: 8080,
    wss: 8443,
    hls: 8082,
    rtmp: 1935,
    rtsp: 554,
    srt: 8890,
    sip: 5060,
    webrtcUdp: 0,
  });
  assert.equal(config.media.iceMux, "auto");
  assert.deepEqual(config.folders, { media: "content", records: "records", logs: "logs" });
  assert.equal(config.log.level, "info");
  assert.equal(config.hooks.url, undefined);
  assert.equal(config.media.engine, "auto");
  assert.equal(config.keepAlive.intervalMs, 5000);
});

Deno.test("the file given with --config is read; server.json is the default name", () => {
  const files: Record<string, string> = {
    "custom.json": JSON.stringify({ ports: { rest: 9000 }, log: { level: "debug" } }),
    "server.json": JSON.stringify({ ports: { rtmp: 1936 } }),
  };
  const read = (p: string) => files[p] ?? noFile(p);
  const custom = loadConfig({ args: ["--config", "custom.json"], readTextFile: read });
  assert.equal(custom.ports.rest, 9000);
  assert.equal(custom.ports.rtmp, 1935);
  assert.equal(custom.log.level, "debug");
  assert.equal(loadConfig({ args: ["--config=custom.json"], readTextFile: read }).ports.rest, 9000);
  assert.equal(loadConfig({ readTextFile: read }).ports.rtmp, 1936);
});

Deno.test("environment variables override the file", () => {
  const read = () => JSON.stringify({ ports: { rest: 9000 }, hooks: { timeoutMs: 100 } });
  const config = loadConfig({
    readTextFile: read,
    env: {
      MEDIASERVER_PORTS_REST: "9100",
      MEDIASERVER_HOOKS_URL: "http://127.0.0.1:9999/app",
      MEDIASERVER_BIND: "0.0.0.0",
      MEDIASERVER_MEDIA_UDP_PORT_MIN: "40000",
      MEDIASERVER_MEDIA_UDP_PORT_MAX: "40100",
    },
  });
  assert.equal(config.ports.rest, 9100);
  assert.equal(config.hooks.url, "http://127.0.0.1:9999/app");
  assert.equal(config.hooks.timeoutMs, 100);
  assert.equal(config.bind, "0.0.0.0");
  assert.equal(config.media.udpPortMin, 40000);
  assert.equal(envName(["media", "udpPortMin"]), "MEDIASERVER_MEDIA_UDP_PORT_MIN");
});

Deno.test("a bad value is a ConfigError naming the field and where it came from", () => {
  const cases: Array<[Record<string, string>, string, string, RegExp]> = [
    [{}, '{"ports":{"rest":70000}}', "ports.rest", /server\.json/],
    [{}, '{"log":{"level":"loud"}}', "log.level", /server\.json/],
    [{}, '{"prots":{}}', "prots", /unknown field/],
    [{}, '{"tls":{"certFile":"a.pem"}}', "tls.keyFile", /go together/],
    [{ MEDIASERVER_PORTS_WS: "eighty" }, "{}", "ports.ws", /env MEDIASERVER_PORTS_WS/],
    [{ MEDIASERVER_HOOKS_URL: "ftp://x" }, "{}", "hooks.url", /env MEDIASERVER_HOOKS_URL/],
    [{}, "{not json", "(file)", /not valid JSON/],
  ];
  for (const [env, file, field, message] of cases) {
    assert.throws(
      () => loadConfig({ env, readTextFile: () => file }),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError, String(err));
        assert.equal(err.field, field, err.message);
        assert.match(err.message, message);
        return true;
      },
    );
  }
});

Deno.test("a missing --config file is an error; a missing default file is not", () => {
  assert.throws(
    () => loadConfig({ args: ["--config", "nope.json"], readTextFile: noFile }),
    ConfigError,
  );
  assert.throws(() => loadConfig({ args: ["--config"], readTextFile: noFile }), ConfigError);
  assert.doesNotThrow(() => loadConfig({ readTextFile: noFile }));
});

Deno.test("list fields come comma-separated from the environment", () => {
  const config = loadConfig({
    readTextFile: noFile,
    env: {
      MEDIASERVER_REST_AUTH_TOKENS: "0123456789abcdef0123, fedcba9876543210fedc",
      MEDIASERVER_REST_BASIC_USERS: "admin:pa:ss,ops:x",
      MEDIASERVER_REST_CORS_ORIGINS: "https://a.example,https://b.example",
      MEDIASERVER_OUTBOUND_ALLOWED_HOSTS: "cam*.example.com,10.0.0.0/8,",
      MEDIASERVER_BINDS_REST: "127.0.0.2",
    },
  });
  assert.deepEqual(config.rest.authTokens, ["0123456789abcdef0123", "fedcba9876543210fedc"]);
  assert.deepEqual(config.rest.basicUsers, ["admin:pa:ss", "ops:x"]);
  assert.deepEqual(config.rest.corsOrigins, ["https://a.example", "https://b.example"]);
  assert.deepEqual(config.outbound.allowedHosts, ["cam*.example.com", "10.0.0.0/8"]);
  assert.equal(config.binds.rest, "127.0.0.2");
  assert.equal(config.binds.ws, undefined);
  assert.throws(
    () =>
      loadConfig({ readTextFile: noFile, env: { MEDIASERVER_OUTBOUND_ALLOWED_HOSTS: "10.0/8" } }),
    (err: unknown) => err instanceof ConfigError && err.field === "outbound.allowedHosts.0",
  );
  assert.throws(
    () => loadConfig({ readTextFile: noFile, env: { MEDIASERVER_REST_AUTH_TOKENS: "short" } }),
    (err: unknown) => err instanceof ConfigError && err.field === "rest.authTokens.0",
  );
});
