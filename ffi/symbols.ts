/**
 * The one symbol table of libdlpack, shared by the Deno and Bun bindings. It lists exactly the
 * functions the library exports (zig/src/c_core.zig, c_cuda.zig, c_python.zig), one of them twice
 * with other parameter types (`symbol` names the function then); `ABI_VERSION` must match the
 * library's `dlpk_abi_version()`.
 * @module
 */
import type { SymbolTable } from "./types.ts";

// The native ABI this TypeScript expects and the size of the `Description` record, generated from
// zig/src/abi.zig (`zig build abi`).
export { ABI_VERSION, DESCRIPTION_BYTES } from "../src/facts/abi.ts";

/** libdlpack's functions. */
export const symbols = {
  // Addresses (managed tensors, owners, the scratch and other long-lived buffers) cross as f64:
  // exact below 2^53, and f64 arguments take the fast FFI path in both runtimes where u64 numbers
  // do not (Deno converts number -> u64 on a slow path).
  dlpk_abi_version: { args: [], returns: "u32" },
  dlpk_description_size: { args: [], returns: "u32" },
  dlpk_retain_library: { args: [], returns: "i32" },
  dlpk_owner_retain: { args: ["f64"], returns: "void" },
  dlpk_owner_release: { args: ["f64"], returns: "void" },
  // The release journal (zig/src/journal.zig): this thread's, its top entry, and a replay of it.
  dlpk_journal: { args: [], returns: "f64" },
  dlpk_journal_release: { args: ["f64"], returns: "void" },
  dlpk_journal_replay: { args: [], returns: "void" },
  dlpk_inside_deleter: { args: [], returns: "u32" },
  dlpk_realm_new: { args: [], returns: "f64" },
  dlpk_pin_new: { args: ["f64", "f64", "f64", "f64"], returns: "i32" },
  // A TypedArray pinned for a view over its memory: the runtime passes its data pointer.
  dlpk_pin_buffer: { args: ["buffer", "f64", "f64", "f64"], returns: "i32" },
  dlpk_pins_drain: { args: ["f64", "f64", "u32"], returns: "u32" },
  dlpk_pin_share: { args: ["f64"], returns: "f64" },
  dlpk_pin_keep: { args: ["f64", "f64", "f64", "f64"], returns: "i32" },
  dlpk_pin_kept: { args: ["f64"], returns: "i32" },
  dlpk_realms_live: { args: [], returns: "u32" },
  dlpk_stats: { args: ["f64"], returns: "u32" },
  dlpk_export: { args: ["u32", "f64"], returns: "i32" },
  // The TypedArray itself is the first argument: the runtime passes its data pointer.
  dlpk_export_buffer: { args: ["buffer", "f64", "f64", "f64", "u32", "f64"], returns: "i32" },
  // A whole TypedArray: every fact an argument (the dtype, flags and options in one word:
  // perf(export), each argument costs Bun's calls); returns the struct's address or minus a status.
  dlpk_export_array: { args: ["buffer", "f64", "f64", "f64", "u32"], returns: "f64" },
  dlpk_managed_delete: { args: ["f64", "u32"], returns: "void" },
  // A capsule disposed from JS: returns the id of a pin freed at once (0: none).
  dlpk_export_dispose: { args: ["f64"], returns: "f64" },
  dlpk_is_own_export: { args: ["f64", "u32"], returns: "u32" },
  dlpk_alloc: { args: ["f64", "f64", "u32", "f64"], returns: "i32" },
  dlpk_copy: { args: ["f64", "f64", "u32"], returns: "i32" },
  // One scalar of host memory (src/facts/abi.ts `Load`: its type), where the runtime's own pointer
  // reads cost more than this call (Deno).
  dlpk_load: { args: ["f64", "u32"], returns: "f64" },
  // set()'s element, staged in JS memory, copied into the view (1-16 bytes).
  dlpk_store: { args: ["f64", "f64", "u32"], returns: "i32" },
  // The embedded-Python bridge (GIL held by the caller).
  dlpk_py_load: { args: ["buffer"], returns: "i32" },
  dlpk_py_load_error: { args: ["buffer", "u32"], returns: "u32" },
  dlpk_py_none: { args: [], returns: "usize" },
  dlpk_py_take_error: { args: ["buffer", "u32"], returns: "i32" },
  dlpk_py_install: { args: ["f64"], returns: "i32" },
  dlpk_py_attach_thread: { args: [], returns: "i32" },
  dlpk_py_burst: { args: [], returns: "i32" },
  dlpk_py_burst_end: { args: [], returns: "void" },
  dlpk_py_decref: { args: ["f64"], returns: "void" },
  dlpk_py_call1: { args: ["f64", "f64"], returns: "f64" },
  dlpk_py_wrap: { args: ["f64", "u32"], returns: "f64" },
  dlpk_py_wrap_as: { args: ["f64", "f64"], returns: "f64" },
  // toPython of a known whole TypedArray: dlpk_export_array's export in a new DLPackTensor (0:
  // a Python exception, the export deleted; minus a status: nothing made).
  dlpk_py_wrap_array: { args: ["buffer", "f64", "f64", "f64", "u32"], returns: "f64" },
  dlpk_py_check_object: { args: ["f64"], returns: "i32" },
  // Into this thread's scratch, as the imports write it.
  dlpk_py_from: {
    args: ["f64", "i32", "i32", "i32", "i32", "i32", "f64", "u32", "f64", "u32"],
    returns: "i32",
  },

  // CUDA (zig/src/cuda.zig; the driver is dlopen'ed at first use, so none of these needs CUDA to
  // load). Statuses: 0 ok, > 0 a CUresult, < 0 a library status (-1: no driver). Data addresses
  // and managed tensors cross as f64 like above; stream and event handles as unsigned words
  // (bigints), and dlpk_cuda_export_fence takes words because Python calls it through ctypes.
  dlpk_cuda_status: { args: [], returns: "i32" },
  dlpk_cuda_reason: { args: ["buffer", "u32"], returns: "u32" },
  dlpk_cuda_last_error: { args: ["buffer", "u32"], returns: "i32" },
  dlpk_cuda_driver_version: { args: [], returns: "i32" },
  dlpk_cuda_device_count: { args: [], returns: "i32" },
  dlpk_cuda_device_info: { args: ["i32", "buffer", "buffer", "u32"], returns: "i32" },
  dlpk_cuda_pointer_info: { args: ["f64", "buffer"], returns: "i32" },
  dlpk_cuda_alloc: { args: ["u32", "i32", "f64", "u32", "f64"], returns: "i32" },
  dlpk_cuda_copy: { args: ["u32", "f64", "f64", "f64", "i32", "i32", "usize", "u32"], returns: "i32" },
  dlpk_cuda_stream_create: { args: ["i32", "buffer"], returns: "i32" },
  dlpk_cuda_stream_destroy: { args: ["i32", "usize"], returns: "i32" },
  dlpk_cuda_stream_synchronize: { args: ["i32", "usize"], returns: "i32" },
  dlpk_cuda_event_create: { args: ["i32", "buffer"], returns: "i32" },
  dlpk_cuda_event_record: { args: ["i32", "usize", "usize"], returns: "i32" },
  dlpk_cuda_event_destroy: { args: ["i32", "usize"], returns: "i32" },
  dlpk_cuda_stream_wait_event: { args: ["i32", "usize", "usize"], returns: "i32" },
  dlpk_cuda_fence: { args: ["i32", "usize", "usize"], returns: "i32" },
  dlpk_cuda_export_attach_stream: { args: ["f64", "u32", "i32", "usize"], returns: "i32" },
  dlpk_cuda_export_fence: { args: ["usize", "u32", "usize"], returns: "i32" },
  dlpk_cuda_stats: { args: ["buffer"], returns: "u32" },

  // The imports, into this thread's KeyedDescription, which src/native/scratch.ts views as its
  // scratch (its generation tells the view layer in one word whether the facts it built last still
  // apply). The one-argument versioned door takes the address as an f64 (perf(import+dispose): each
  // argument costs Bun's FFI); the general door takes it as a 64-bit word, bound once per JS form of it, so
  // that each binding converts one type (Bun's slows down when one binding gets numbers and
  // bigints): a bigint passed as it is (converting it costs more than the call in Deno), a number,
  // and a pointer object of Deno's FFI, so JS never converts it to a number.
  dlpk_scratch: { args: [], returns: "f64" },
  dlpk_import_versioned: { args: ["f64"], returns: "i32" },
  dlpk_import: { args: ["usize", "u32"], returns: "i32" },
  dlpk_import_number: { symbol: "dlpk_import", args: ["usize", "u32"], returns: "i32" },
  dlpk_import_pointer: { symbol: "dlpk_import", args: ["pointer", "u32"], returns: "i32" },

  // Tensors on disk (zig/src/c_io.zig). A path is its UTF-8 bytes and their count (no NUL); a
  // writer handle crosses as f64 like the addresses. Statuses: 0, or an `IoStatus` with its details
  // in the description.
  dlpk_io_map: { args: ["buffer", "u32", "u32", "f64", "f64"], returns: "i32" },
  dlpk_io_create: { args: ["buffer", "u32", "f64"], returns: "i32" },
  dlpk_io_write: { args: ["f64", "f64", "f64", "f64"], returns: "i32" },
  dlpk_io_finish: { args: ["f64", "u32", "f64"], returns: "i32" },
} as const satisfies SymbolTable;

/** The bound form of {@link symbols}. */
export type Symbols = typeof symbols;
