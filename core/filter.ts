/**
 * Equality filters of the `find` operations: a record matches when every field named in the
 * filter has the wanted value (objects and arrays compared by value).
 */

/** True when `record` has every field of `filter` with an equal value. */
export function matchesFilter(record: object, filter: Record<string, unknown>): boolean {
  const fields = record as Record<string, unknown>;
  for (const [key, wanted] of Object.entries(filter)) {
    if (wanted === undefined) continue;
    if (!deepEqual(fields[key], wanted)) return false;
  }
  return true;
}

/** The records matching the filter, in their original order. */
export function filterRecords<T extends object>(
  records: T[],
  filter: Record<string, unknown>,
): T[] {
  return records.filter((r) => matchesFilter(r, filter));
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  const ra = a as Record<string, unknown>;
  const rb = b as Record<string, unknown>;
  return ka.every((k) => deepEqual(ra[k], rb[k]));
}
