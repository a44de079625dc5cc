/**
 * Names given by clients (VOD files, recording templates) resolved inside a configured
 * folder. A name that would leave the folder, by `..`, an absolute path or a symlink, is a
 * BadRequestError naming the field.
 */
import { isAbsolute, join, relative, resolve } from "node:path";
import { BadRequestError, NotFoundError } from "./errors.ts";

/** Absolute path of `name` inside `folder`; refuses absolute names and `..` segments. */
export function pathInside(folder: string, name: string, field: string): string {
  // deno-lint-ignore no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(name)) {
    throw new BadRequestError(field, `${JSON.stringify(name)} has control characters`);
  }
  if (name === "" || isAbsolute(name) || name.split(/[/\\]/).includes("..")) {
    throw new BadRequestError(field, `${JSON.stringify(name)} must name a path inside its folder`);
  }
  const base = resolve(folder);
  const path = resolve(base, name);
  if (!within(base, path)) {
    throw new BadRequestError(field, `${JSON.stringify(name)} leaves its folder`);
  }
  return path;
}

/**
 * The real path of an existing file `name` inside `folder`: a missing file is a
 * NotFoundError, a symlink that resolves outside the folder a BadRequestError.
 */
export async function existingFileInside(
  folder: string,
  name: string,
  field: string,
): Promise<string> {
  const path = pathInside(folder, name, field);
  let real: string;
  try {
    real = await Deno.realPath(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) throw new NotFoundError(`file ${name} not found`);
    throw err;
  }
  const base = await Deno.realPath(folder);
  if (!within(base, real)) {
    throw new BadRequestError(field, `${JSON.stringify(name)} links outside its folder`);
  }
  const info = await Deno.stat(real);
  if (!info.isFile) throw new BadRequestError(field, `${JSON.stringify(name)} is not a file`);
  return real;
}

function within(base: string, path: string): boolean {
  const rel = relative(base, path);
  return rel !== "" && !rel.startsWith("..") && !isAbsolute(rel) && join(base, rel) === path;
}
