/**
 * The management API contract: every path exists, validation names the bad field, methods,
 * content types, CORS and preflight behave as the contract and DESIGN.md say.
 */
import assert from "node:assert/strict";
import { operations } from "../routes/mod.ts";
import { contractPaths } from "./contract_paths.ts";
import { type JsonSchema, sampleValue, wrongTypeValue } from "./helpers/sample_body.ts";
import { withServer } from "./helpers/test_server.ts";

type OpenApi = {
  paths: Record<
    string,
    { post: { requestBody: { content: { "application/json": { schema: JsonSchema } } } } }
  >;
};

async function bodySchemas(restUrl: string): Promise<Map<string, JsonSchema>> {
  const doc = await (await fetch(`${restUrl}/rest-api/openapi.json`)).json() as OpenApi;
  return new Map(
    Object.entries(doc.paths).map(([path, item]) => [
      path.slice("/rest-api".length),
      item.post.requestBody.content["application/json"].schema,
    ]),
  );
}

const built = new Set(operations.filter((op) => op.handle).map((op) => op.path));
/**
 * Built operations whose sample body names an outside source (e.g. `rtsp://example`): it
 * cannot be reached from here, so they answer 502 naming the reason, not 200 or 404.
 */
const sourceUnreachableStatus: Record<string, number> = {
  "/rtsp/startup": 502,
  "/pull/rtmp/pull": 502,
  "/pull/pull": 502,
};

Deno.test("every contract path answers; the ones not built answer 501 naming the operation", async () => {
  await withServer(async (server) => {
    const schemas = await bodySchemas(server.restUrl);
    for (const path of contractPaths) {
      const schema = schemas.get(path);
      assert.ok(schema, `${path} is missing from the OpenAPI document`);
      const res = await server.post(path, sampleValue(schema));
      const text = await res.text();
      assert.notEqual(res.status, 405, `${path}: ${text}`);
      if (path.startsWith("/cdn/")) {
        // This server is not a CDN node: the group says so rather than answering for one.
        assert.equal(res.status, 409, `${path}: ${res.status} ${text}`);
        assert.match(JSON.parse(text).message, /cdn\.enabled/);
      } else if (built.has(path)) {
        const allowed = [200, 404, sourceUnreachableStatus[path]];
        assert.ok(allowed.includes(res.status), `${path}: ${res.status} ${text}`);
        if (res.status === 404) assert.match(JSON.parse(text).message, /not found/);
      } else {
        assert.equal(res.status, 501, `${path}: ${res.status} ${text}`);
        assert.deepEqual(JSON.parse(text).operation, path);
        assert.equal(JSON.parse(text).error, "not implemented");
      }
    }
  });
});

Deno.test("an unknown path under /rest-api is a 404 with a JSON body", async () => {
  await withServer(async (server) => {
    const res = await server.post("/stream/no_such_thing", {});
    assert.equal(res.status, 404);
    assert.equal((await res.json()).error, "not found");
  });
});

Deno.test("for every schema: malformed JSON, missing required fields and wrong types are 400s naming the field", async () => {
  await withServer(async (server) => {
    const schemas = await bodySchemas(server.restUrl);
    for (const path of contractPaths) {
      const schema = schemas.get(path)!;
      const malformed = await server.post(path, '{"a":');
      assert.equal(malformed.status, 400, path);
      const malformedBody = await malformed.json();
      assert.equal(malformedBody.field, "body", path);
      assert.match(malformedBody.message, /malformed JSON/, path);

      const valid = sampleValue(schema) as Record<string, unknown>;
      for (const field of schema.required ?? []) {
        const { [field]: _, ...missing } = valid;
        const res = await server.post(path, missing);
        assert.equal(res.status, 400, `${path} without ${field}`);
        const body = await res.json();
        assert.equal(body.field, field, `${path} without ${field}: ${JSON.stringify(body)}`);
        assert.match(body.message, /required/, path);
      }
      for (const [field, fieldSchema] of Object.entries(schema.properties ?? {})) {
        if (Object.keys(fieldSchema).length === 0) continue; // accepts any JSON value
        const res = await server.post(path, { ...valid, [field]: wrongTypeValue(fieldSchema) });
        assert.equal(res.status, 400, `${path} with a wrong ${field}`);
        const body = await res.json();
        assert.equal(body.field.split(".")[0], field, `${path}: ${JSON.stringify(body)}`);
      }
      const notObject = await server.post(path, "[1]");
      assert.equal(notObject.status, 400, path);
      assert.equal((await notObject.json()).field, "body", path);
    }
  });
});

Deno.test("find filters and parameterless operations refuse unknown fields", async () => {
  await withServer(async (server) => {
    const strict = operations.filter((op) =>
      op.path.endsWith("/find") || op.path.endsWith("/find_all")
    );
    assert.ok(strict.length > 20);
    for (const op of strict) {
      const res = await server.post(op.path, { noSuchField: 1 });
      assert.equal(res.status, 400, op.path);
      assert.deepEqual(await res.json(), {
        error: "bad request",
        field: "noSuchField",
        message: "unknown field",
      });
    }
  });
});

Deno.test("parameterless operations accept an empty body or {}", async () => {
  await withServer(async (server) => {
    for (const body of [undefined, "{}", ""]) {
      const res = await fetch(`${server.restUrl}/rest-api/stream/find_all`, {
        method: "POST",
        body,
        headers: body ? { "Content-Type": "application/json" } : {},
      });
      assert.equal(res.status, 200);
      assert.deepEqual(await res.json(), []);
    }
  });
});

Deno.test("methods: POST everywhere, GET also on find_all, 405 with Allow otherwise", async () => {
  await withServer(async (server) => {
    for (const method of ["PUT", "DELETE", "PATCH", "GET"]) {
      const res = await fetch(`${server.restUrl}/rest-api/stream/terminate`, { method });
      assert.equal(res.status, 405, method);
      assert.equal(res.headers.get("Allow"), "POST");
      await res.body?.cancel();
    }
    const get = await fetch(`${server.restUrl}/rest-api/stream/find_all`);
    assert.equal(get.status, 200);
    assert.deepEqual(await get.json(), []);
    const put = await fetch(`${server.restUrl}/rest-api/stream/find_all`, { method: "PUT" });
    assert.equal(put.status, 405);
    assert.equal(put.headers.get("Allow"), "GET, POST");
    await put.body?.cancel();
  });
});

Deno.test("content type: JSON with a UTF-8 charset is accepted, anything else is a 415", async () => {
  await withServer(async (server) => {
    const ok = await server.post("/stream/find", { name: "a" }, {
      "Content-Type": "application/json;charset=UTF-8",
    });
    assert.equal(ok.status, 200);
    await ok.body?.cancel();
    for (
      const type of [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/json; charset=latin1",
      ]
    ) {
      const res = await server.post("/stream/find", { name: "a" }, { "Content-Type": type });
      assert.equal(res.status, 415, type);
      assert.equal((await res.json()).error, "unsupported media type");
    }
    const none = await fetch(`${server.restUrl}/rest-api/stream/find`, {
      method: "POST",
      body: "{}",
    });
    assert.equal(none.status, 415);
    await none.body?.cancel();
  });
});

Deno.test("CORS: any origin by default, never with credentials; OPTIONS preflight answered", async () => {
  await withServer(async (server) => {
    const browser = { Origin: "http://example.test" };
    for (
      const res of [
        await server.post("/stream/find_all", undefined, browser),
        await server.post("/stream/terminate", {}, browser),
        await server.post(
          "/call/startup",
          { callee: "a", sipLogin: "b", sipDomain: "c" },
          browser,
        ),
        await fetch(`${server.restUrl}/health`),
        await fetch(`${server.restUrl}/rest-api/stream/find_all`),
      ]
    ) {
      assert.equal(res.headers.get("Access-Control-Allow-Origin"), "*", res.url);
      assert.equal(res.headers.get("Access-Control-Allow-Credentials"), null);
      await res.body?.cancel();
    }
    // A POST without Origin comes from no browser: it gets no CORS header (nor a 400 one).
    for (
      const res of [
        await server.post("/stream/find_all"),
        await server.post("/stream/find_all", { x: 1 }),
      ]
    ) {
      assert.equal(res.headers.get("Access-Control-Allow-Origin"), null);
      await res.body?.cancel();
    }
    const pre = await fetch(`${server.restUrl}/rest-api/stream/find_all`, {
      method: "OPTIONS",
      headers: {
        "Origin": "http://example.test",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
      },
    });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get("Access-Control-Allow-Origin"), "*");
    assert.equal(pre.headers.get("Access-Control-Allow-Credentials"), null);
    assert.match(pre.headers.get("Access-Control-Allow-Methods")!, /POST/);
    assert.equal(pre.headers.get("Access-Control-Allow-Headers"), "content-type");
  });
});

Deno.test("operations with nothing to return answer 200 with an empty body", async () => {
  // stream/terminate needs a stream; a fake one records that terminate really ran.
  await withServer(async (server) => {
    const ended: string[] = [];
    server.services.streams.add({
      mediaSessionId: "m1",
      name: "s1",
      published: true,
      record: () => ({ name: "s1", mediaSessionId: "m1" }) as never,
      terminate: (info) => {
        ended.push(info);
        return Promise.resolve();
      },
    });
    const res = await server.post("/stream/terminate", { mediaSessionId: "m1" });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), "");
    assert.deepEqual(ended, ["Stopped by rest /terminate"]);
  });
});

Deno.test("a body over the size limit is a 413", async () => {
  await withServer(async (server) => {
    const big = JSON.stringify({ name: "x".repeat(2 * 1024 * 1024) });
    const res = await server.post("/stream/find", big);
    assert.equal(res.status, 413);
    await res.body?.cancel();
  });
});
