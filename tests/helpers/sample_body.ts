/**
 * Builds the smallest valid body for a JSON Schema (as generated into the OpenAPI document):
 * only required properties, the first example, enum value or union branch, the minimum of a
 * range. Tests post these to reach an operation past validation.
 */

/** A JSON Schema node, loosely typed. */
export type JsonSchema = {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  minItems?: number;
  minimum?: number;
  minLength?: number;
  enum?: unknown[];
  const?: unknown;
  examples?: unknown[];
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  allOf?: JsonSchema[];
};

/** A minimal value that satisfies `schema`. */
export function sampleValue(schema: JsonSchema): unknown {
  if (schema.examples?.length) return schema.examples[0];
  if (schema.const !== undefined) return schema.const;
  if (schema.enum?.length) return schema.enum[0];
  const branches = schema.anyOf ?? schema.oneOf ?? schema.allOf;
  if (branches?.length) return sampleValue(branches[0]);
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  switch (type) {
    case "object": {
      const out: Record<string, unknown> = {};
      for (const key of schema.required ?? []) {
        out[key] = sampleValue(schema.properties?.[key] ?? {});
      }
      return out;
    }
    case "array":
      return Array.from({ length: schema.minItems ?? 0 }, () => sampleValue(schema.items ?? {}));
    case "string":
      return "x".repeat(Math.max(1, schema.minLength ?? 1));
    case "integer":
    case "number":
      return schema.minimum ?? 1;
    case "boolean":
      return true;
    default:
      return {};
  }
}

/** A value of another JSON type than `schema` accepts, to provoke a type error. */
export function wrongTypeValue(schema: JsonSchema): unknown {
  const types = new Set<string>();
  const collect = (s: JsonSchema) => {
    for (const b of s.anyOf ?? s.oneOf ?? []) collect(b);
    if (s.enum) { for (const v of s.enum) types.add(typeof v); }
    if (s.type) { for (const t of Array.isArray(s.type) ? s.type : [s.type]) types.add(t); }
  };
  collect(schema);
  if (!types.has("array")) return [1, 2];
  return 12.5;
}
