/** The OpenAPI 3.1 document of the management API, generated from the operations' schemas. */
import { z } from "zod";
import type { Operation } from "./operation.ts";

/** Path of the document below the REST port. */
export const openApiPath = "/rest-api/openapi.json";

const errorBody = {
  type: "object",
  properties: {
    error: { type: "string" },
    field: {
      type: "string",
      description: "dotted path of the offending field (400; 403 when a field named the target)",
    },
    operation: { type: "string", description: "the operation not built yet (501 only)" },
    message: { type: "string" },
  },
  required: ["error", "message"],
};

const errorResponses = {
  "400": { description: "Malformed JSON, a wrong type or a missing field", ref: "Error" },
  "401": {
    description: "REST auth is on (rest.authTokens, rest.basicUsers) and no valid credentials came",
    ref: "Error",
  },
  "403": {
    description:
      "Refused by policy: a host outside outbound.allowedHosts, or a foreign Host header",
    ref: "Error",
  },
  "404": { description: "The target does not exist", ref: "Error" },
  "409": { description: "The entry exists already", ref: "Error" },
  "405": { description: "A method other than the ones the operation answers", ref: "Error" },
  "413": { description: "The body is larger than rest.maxBodyBytes", ref: "Error" },
  "415": { description: "The body is not application/json", ref: "Error" },
  "500": { description: "An unexpected failure of the server (logged)", ref: "Error" },
  "501": { description: "The capability is not built yet", ref: "Error" },
  "502": {
    description: "The upstream source (a camera, a remote server, a peer) failed or refused",
    ref: "Error",
  },
  "503": {
    description: "A cap of the server (limits.*) is reached; retry later",
    ref: "Error",
  },
};

function jsonSchema(schema: z.ZodType, io: "input" | "output"): Record<string, unknown> {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, {
    target: "draft-2020-12",
    io,
    unrepresentable: "any",
  });
  return rest;
}

/** Builds the document for the given operations. */
export function buildOpenApi(operations: readonly Operation[], version: string): object {
  const paths: Record<string, unknown> = {};
  for (const op of operations) {
    const responses: Record<string, unknown> = {
      "200": op.response
        ? {
          description: "Success",
          content: { "application/json": { schema: jsonSchema(op.response, "output") } },
        }
        : { description: "Success, empty body" },
    };
    for (const [code, { description }] of Object.entries(errorResponses)) {
      responses[code] = {
        description,
        content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } },
      };
    }
    const post = {
      operationId: op.path.slice(1).replaceAll("/", "_"),
      summary: op.summary,
      tags: [op.group],
      requestBody: {
        required: false,
        content: { "application/json": { schema: jsonSchema(op.body, "input") } },
      },
      responses,
    };
    const item: Record<string, unknown> = { post };
    if (op.allowGet) {
      const { requestBody: _, ...get } = post;
      item.get = { ...get, operationId: post.operationId + "_get" };
    }
    paths["/rest-api" + op.path] = item;
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "Media server management API",
      version,
      description: "WCS-compatible management REST API. Every operation is POST with a JSON body.",
    },
    // No credentials is an option: REST auth is off unless configured, as in WCS.
    security: [{}, { bearer: [] }, { basic: [] }],
    paths,
    components: {
      schemas: { Error: errorBody },
      securitySchemes: {
        bearer: { type: "http", scheme: "bearer", description: "a token of rest.authTokens" },
        basic: { type: "http", scheme: "basic", description: "a user of rest.basicUsers" },
      },
    },
  };
}
