/** Sizes of the fuzz runs: the default one (`deno task fuzz`) and the short CI pass. */

/** Inputs of a default run, over all targets. */
export const defaultTotalInputs = 1_000_000;
/** Inputs per target of `--short` and of the CI test. */
export const shortInputsPerTarget = 2_000;
