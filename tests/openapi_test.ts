import assert from "node:assert/strict";
import { Validator } from "@seriousme/openapi-schema-validator";
import * as errors from "../core/errors.ts";
import { contractPaths } from "./contract_paths.ts";
import { checkResponse, withServer } from "./helpers/test_server.ts";

Deno.test("GET /rest-api/openapi.json is a valid OpenAPI 3.1 document listing every contract path", async () => {
  await withServer(async (server) => {
    const res = await fetch(`${server.restUrl}/rest-api/openapi.json`);
    assert.equal(res.status, 200);
    const doc = await res.json();
    const validator = new Validator();
    const result = await validator.validate(doc);
    assert.deepEqual(result.errors ?? [], []);
    assert.equal(result.valid, true);
    assert.equal(validator.version, "3.1");
    const documented = Object.keys(doc.paths).map((p) => p.slice("/rest-api".length));
    assert.deepEqual([...documented].sort(), [...contractPaths].sort());
    for (const path of contractPaths) {
      const item = doc.paths[`/rest-api${path}`];
      assert.ok(item.post.requestBody.content["application/json"].schema.type, path);
      assert.equal(item.get !== undefined, path.endsWith("/find_all"), path);
    }
    const startup = doc.paths["/rest-api/vod/startup"].post;
    assert.equal(
      startup.requestBody.content["application/json"].schema.properties.uri.type,
      "string",
    );
    assert.deepEqual(Object.keys(startup.responses).filter((c) => c.startsWith("40")).sort(), [
      "400",
      "401",
      "403",
      "404",
      "405",
      "409",
    ]);
    assert.deepEqual(Object.keys(doc.components.securitySchemes).sort(), ["basic", "bearer"]);
  });
});

Deno.test("every operation documents every error status the server answers", async () => {
  // Each typed error of core/errors.ts, plus what the routes answer themselves (401 without
  // credentials, 405 wrong method, 413 body too large, 415 not JSON, 500 unexpected failure).
  const statuses = new Set(["401", "405", "413", "415", "500"]);
  for (const value of Object.values(errors)) {
    if (typeof value !== "function" || !(value.prototype instanceof errors.MediaServerError)) {
      continue;
    }
    const ErrorClass = value as unknown as new (message: string) => errors.MediaServerError;
    statuses.add(String(new ErrorClass("probe").status));
  }
  for (const code of ["400", "403", "404", "409", "501", "502", "503"]) {
    assert.ok(statuses.has(code), code);
  }
  await withServer(async (server) => {
    const doc = await (await fetch(`${server.restUrl}/rest-api/openapi.json`)).json();
    for (const path of contractPaths) {
      const responses = doc.paths[`/rest-api${path}`].post.responses;
      const missing = [...statuses].filter((code) => !(code in responses));
      assert.deepEqual(missing, [], path);
      assert.equal(
        responses["502"].content["application/json"].schema.$ref,
        "#/components/schemas/Error",
      );
    }
  });
});

Deno.test("test servers check every 200 answer against the operation's response schema", () => {
  const record = {
    localMediaSessionId: "id",
    localStreamName: "cam",
    uri: "rtmp://127.0.0.1/live/cam",
    status: "PROCESSED_REMOTE",
    hasAudio: true,
    hasVideo: true,
    record: false,
  };
  checkResponse("/pull/rtmp/find_all", JSON.stringify([record]));
  checkResponse("/pull/rtmp/terminate", "");
  assert.throws(
    () => checkResponse("/pull/rtmp/find_all", JSON.stringify([{ ...record, hasAudio: "yes" }])),
    /0\.hasAudio/,
  );
  assert.throws(
    () => checkResponse("/pull/rtmp/find_all", JSON.stringify([{ ...record, extra: 1 }])),
    /lacks: 0\.extra/,
  );
  assert.throws(() => checkResponse("/pull/rtmp/terminate", "{}"), /declares no response/);
});
