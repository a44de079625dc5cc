/** Validation of a client message's `data[0]` against a schema. */
import type { z } from "zod";
import { BadRequestError } from "../core/errors.ts";

/** The payload parsed by `schema`, or a BadRequestError naming the first bad field. */
export function parsePayload<S extends z.ZodType>(schema: S, payload: unknown): z.output<S> {
  const parsed = schema.safeParse(payload);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const field = issue.path.join(".") || "data";
  throw new BadRequestError(field, `${field}: ${issue.message}`);
}
