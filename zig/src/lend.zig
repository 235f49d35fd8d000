//! `toPython(x, py, { as })`: an export of this library handed to a Python type's
//! `managed_tensor_to_py_object_no_sync` (exchange.zig finds the type's table), lent inside a
//! wrapper so that the export is released exactly once whatever the consumer does.

const std = @import("std");
const assert = std.debug.assert;
const cpython = @import("cpython.zig");
const dlpack = @import("dlpack.zig");
const exchange = @import("exchange.zig");
const exports = @import("exports.zig");
const memory = @import("memory.zig");

const PyObject = cpython.PyObject;
const ManagedTensorToPyObject = exchange.ManagedTensorToPyObject;
const Entry = exchange.Entry;
const entryFor = exchange.entryFor;
const raise = exchange.raise;
const count = exchange.count;

// `toPython(x, py, { as })`: an export handed to a type's `managed_tensor_to_py_object_no_sync`.
//
// The header says that function steals the tensor even when it fails; torch 2.15 neither calls the
// deleter nor keeps the tensor when it fails. To never free twice nor leak the JS memory, the
// export is lent inside a wrapper whose deleter, while the call runs, only reports that it ran.

const Lent = extern struct {
    managed: dlpack.ManagedTensorVersioned,
    /// Our export (the template), released by the wrapper's deleter once the call has returned.
    inner: usize,
    /// While the call runs: the address of the caller's `fired` flag.
    guard: usize,
};

fn lentDeleter(self: *dlpack.ManagedTensorVersioned) callconv(.c) void {
    const lent: *Lent = @fieldParentPtr("managed", self);
    const guard = @atomicRmw(usize, &lent.guard, .Xchg, 0, .acq_rel);
    const inner = lent.inner;
    memory.destroy(lent);
    if (guard != 0) {
        @as(*std.atomic.Value(bool), @ptrFromInt(guard)).store(true, .release);
        return; // during the call: the caller decides about `inner`
    }
    if (inner != 0) dlpack.deleteManaged(inner, true);
}

/// A new reference made by `kind`'s `managed_tensor_to_py_object_no_sync` from `template` (a
/// versioned export of ours), or 0 with an exception set; then the template is still the
/// caller's. Read-only data is refused: such functions may ignore READ_ONLY (torch 2.15 does).
pub fn wrapAs(template: usize, kind: usize) usize {
    const a = cpython.api orelse return 0;
    assert(dlpack.isManagedAddress(template));
    const gil = cpython.Gil.take(a);
    defer gil.release();
    const kind_object: *PyObject = @ptrFromInt(kind);
    if (a.PyObject_IsInstance(kind_object, a.PyType_Type) != 1) {
        _ = raise(
            a,
            a.PyExc_TypeError.*,
            "`as` must be a type with __dlpack_c_exchange_api__",
            .{},
        );
        return 0;
    }
    var spare: Entry = undefined;
    const entry = entryFor(a, kind_object, &spare);
    const give = if (entry.api) |t| t.managed_tensor_to_py_object_no_sync else null;
    if (give == null) {
        const shown = entry.name[0..entry.name_len];
        _ = raise(
            a,
            a.PyExc_TypeError.*,
            "{s} has no DLPack C exchange API (__dlpack_c_exchange_api__)",
            .{shown},
        );
        return 0;
    }
    const m: *const dlpack.ManagedTensorVersioned = @ptrFromInt(template);
    if (m.flags & dlpack.flag.read_only != 0) {
        _ = raise(
            a,
            a.PyExc_BufferError.*,
            "read-only data is not handed to managed_tensor_to_py_object_no_sync",
            .{},
        );
        return 0;
    }
    if (exports.hasProducerStream(template)) {
        // That function takes no stream: nothing would order the consumer after ours.
        _ = raise(a, a.PyExc_BufferError.*, "CUDA data with a producer stream is not handed to " ++
            "managed_tensor_to_py_object_no_sync (it cannot wait for that stream)", .{});
        return 0;
    }
    return lend(give.?, template) catch |failure| {
        switch (failure) {
            error.OutOfMemory => _ = raise(a, a.PyExc_MemoryError.*, "out of memory", .{}),
            error.NoObject => _ = raise(
                a,
                a.PyExc_BufferError.*,
                "{s} made no object",
                .{entry.name[0..entry.name_len]},
            ),
            error.Failed => if (a.PyErr_Occurred() == null) {
                _ = raise(
                    a,
                    a.PyExc_BufferError.*,
                    "{s} failed without an exception",
                    .{entry.name[0..entry.name_len]},
                );
            },
        }
        return 0;
    };
}

const LendError = error{ OutOfMemory, Failed, NoObject };

/// Hands `template` to `give` inside a wrapper; on success the consumer owns it, on failure it is
/// still the caller's (whatever the consumer did with the wrapper).
fn lend(give: ManagedTensorToPyObject, template: usize) LendError!usize {
    const lent = try memory.create(Lent);
    var fired = std.atomic.Value(bool).init(false);
    const source: *const dlpack.ManagedTensorVersioned = @ptrFromInt(template);
    lent.* = .{
        .managed = .{
            .version = source.version,
            .manager_ctx = lent,
            .deleter = lentDeleter,
            .flags = source.flags,
            // Its arrays live in the template, which the wrapper keeps.
            .dl_tensor = source.dl_tensor,
        },
        .inner = template,
        .guard = @intFromPtr(&fired),
    };
    var made: usize = 0;
    const status = give(@intFromPtr(&lent.managed), @intFromPtr(&made));
    const succeeded = status == 0 and made != 0;
    if (fired.load(.acquire)) {
        // The consumer released the wrapper already (a copy, or a failure as the header says).
        if (succeeded) dlpack.deleteManaged(template, true);
    } else if (succeeded) {
        @atomicStore(usize, &lent.guard, 0, .release); // the consumer owns the wrapper now
    } else {
        // Failed without releasing: the wrapper may still be referenced, so it is only disarmed
        // (a few bytes leak, never a double free); the template goes back to the caller.
        lent.inner = 0;
        @atomicStore(usize, &lent.guard, 0, .release);
    }
    if (status != 0) return error.Failed;
    if (made == 0) return error.NoObject;
    count(.consumer_to_py_object);
    return made;
}

// ---------------------------------------------------------------------------------------------
// Tests

const testing = std.testing;
const stats = @import("stats.zig");
const testExport = exchange.testExport;

/// Consumers of a lent export, each behaving as some real one does.
const Consumers = struct {
    var kept: usize = 0;
    /// Keeps the tensor and returns an object (the usual success).
    fn keep(tensor: usize, out: usize) callconv(.c) c_int {
        kept = tensor;
        @as(*usize, @ptrFromInt(out)).* = 0x1000;
        return 0;
    }
    /// Copies the data and releases the tensor at once.
    fn copy(tensor: usize, out: usize) callconv(.c) c_int {
        const m: *dlpack.ManagedTensorVersioned = @ptrFromInt(tensor);
        m.deleter.?(m);
        @as(*usize, @ptrFromInt(out)).* = 0x2000;
        return 0;
    }
    /// Fails and releases, as the header says a failing consumer does.
    fn failReleasing(tensor: usize, _: usize) callconv(.c) c_int {
        const m: *dlpack.ManagedTensorVersioned = @ptrFromInt(tensor);
        m.deleter.?(m);
        return -1;
    }
    /// Fails without releasing (what torch 2.15 does); it may call the deleter much later.
    fn failKeeping(tensor: usize, _: usize) callconv(.c) c_int {
        kept = tensor;
        return -1;
    }
};

test "a lent export is released exactly once whatever the consumer does" {
    const exported = stats.get(.exports);
    // Kept: the consumer's later release frees wrapper and export.
    var template = try testExport();
    try testing.expectEqual(@as(usize, 0x1000), try lend(Consumers.keep, template));
    try testing.expectEqual(exported + 1, stats.get(.exports));
    var m: *dlpack.ManagedTensorVersioned = @ptrFromInt(Consumers.kept);
    const lent_template: *dlpack.ManagedTensorVersioned = @ptrFromInt(template);
    try testing.expect(m.dl_tensor.data == lent_template.dl_tensor.data);
    m.deleter.?(m);
    try testing.expectEqual(exported, stats.get(.exports));
    // Copied and released during the call: the export is released by lend.
    template = try testExport();
    try testing.expectEqual(@as(usize, 0x2000), try lend(Consumers.copy, template));
    try testing.expectEqual(exported, stats.get(.exports));
    // Failed, released or not: the export is still the caller's, and a late release of the
    // wrapper leaves it alone.
    template = try testExport();
    try testing.expectError(error.Failed, lend(Consumers.failReleasing, template));
    try testing.expectEqual(exported + 1, stats.get(.exports));
    try testing.expectError(error.Failed, lend(Consumers.failKeeping, template));
    m = @ptrFromInt(Consumers.kept);
    m.deleter.?(m);
    try testing.expectEqual(exported + 1, stats.get(.exports));
    dlpack.deleteManaged(template, true);
    try testing.expectEqual(exported, stats.get(.exports));
}
