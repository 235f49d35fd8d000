//! The C ABI of libdlpack: the only symbols the TS side binds (ffi/symbols.ts lists the same
//! ones), in one file per area: c_core.zig (imports, exports, owner records, the journal, pins,
//! stats, allocations, copies), c_python.zig (the embedded-Python bridge), c_cuda.zig (CUDA),
//! c_io.zig (tensors on disk: files mapped or read, files written).
//! Each returns a status code or writes into caller-owned memory; nothing may panic or unwind into
//! the host. Those files are where arguments are checked and where the error unions of the modules
//! below become the ABI's statuses (abi.zig).
//!
//! The modules import only downward, in layers (tools/tidy.zig checks there is no import cycle):
//! - facts: dlpack.zig (the DLPack header), abi.zig (this library's ABI), stats.zig;
//! - plumbing: mappings.zig, memory.zig (with transpose.zig, stream.zig), mapped.zig, cuda.zig,
//!   cpython.zig;
//! - records: owner.zig, exports.zig, journal.zig;
//! - imports: describe.zig (validate), verify.zig (device claims), admit.zig (the sequence);
//! - Python: templates.zig, tensor.zig, guards.zig, exchange.zig, lend.zig, python.zig;
//! - the C boundary: c_core.zig, c_cuda.zig, c_python.zig, c_io.zig;
//! - this file, the entry.

const std = @import("std");

/// The facts module of the DLPack header (the fuzzer's model reads its dtype table).
pub const dlpack = @import("dlpack.zig");

comptime {
    _ = @import("c_core.zig");
    _ = @import("c_cuda.zig");
    _ = @import("c_io.zig");
    _ = @import("c_python.zig");
}

test {
    std.testing.refAllDecls(@This());
    _ = @import("abi.zig");
    _ = @import("admit.zig");
    _ = @import("c_core.zig");
    _ = @import("c_cuda.zig");
    _ = @import("c_io.zig");
    _ = @import("c_python.zig");
    _ = @import("cpython.zig");
    _ = @import("cuda.zig");
    _ = @import("describe.zig");
    _ = @import("exchange.zig");
    _ = @import("exports.zig");
    _ = @import("journal.zig");
    _ = @import("lend.zig");
    _ = @import("mapped.zig");
    _ = @import("mappings.zig");
    _ = @import("memory.zig");
    _ = @import("owner.zig");
    _ = @import("python.zig");
    _ = @import("stats.zig");
    _ = @import("templates.zig");
    _ = @import("tensor.zig");
    _ = @import("verify.zig");
}
