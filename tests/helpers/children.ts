/** Subprocesses of the test process, as the kernel lists them. */

/** Running children of this process whose command name is `name` (e.g. "ffmpeg"). */
export function childrenNamed(name: string): number {
  let count = 0;
  for (const task of Deno.readDirSync(`/proc/${Deno.pid}/task`)) {
    let children: string;
    try {
      children = Deno.readTextFileSync(`/proc/${Deno.pid}/task/${task.name}/children`);
    } catch {
      continue; // The thread ended meanwhile.
    }
    for (const pid of children.split(" ").filter(Boolean)) {
      try {
        if (Deno.readTextFileSync(`/proc/${pid}/comm`).trim() === name) count++;
      } catch {
        // Exited meanwhile.
      }
    }
  }
  return count;
}
