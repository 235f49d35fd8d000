/**
 * ABI limits the pure layers need (the layout checks), kept below the native plumbing so that
 * `src/facts/` imports nothing above it. The generated ABI module takes these over.
 * @module
 */

/** Must equal `MAX_RANK` in zig/src/dlpack.zig. */
export const MAX_RANK = 64;
