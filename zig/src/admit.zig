//! The steps of every import, in the order each entry that imports takes them (`sequence`: the C
//! imports of c_core.zig, python.zig's capsules, exchange.zig's tables):
//! 1. validate the struct (describe.zig: reads memory, calls nothing; last, the data range of
//!    CPU memory against the process's mappings);
//! 2. check its device claim (verify.zig: CUDA claims against the driver, which it may open; the
//!    data range of other host memory against the mappings);
//! 3. take it when it is one of this library's exports (one export, one import);
//! 4. record the owner that will call its deleter (owner.zig).
//! What a refusal does to the producer differs per entry (`Refusal`); and a struct that is not
//! imported at all is deleted with the same checks (`deleteChecked`).

const std = @import("std");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const describe = @import("describe.zig");
const dlpack = @import("dlpack.zig");
const exports = @import("exports.zig");
const mappings = @import("mappings.zig");
const owner = @import("owner.zig");
const stats = @import("stats.zig");
const verify = @import("verify.zig");

const Description = abi.Description;
const Status = abi.Status;

pub const Options = describe.Options;

/// What an import that refuses a tensor does with it.
pub const Refusal = enum {
    /// Hands it back to its producer (deleter called once, where that is safe).
    release,
    /// Leaves it to the caller (a capsule's destructor frees it): an export of this library that
    /// the import took goes back to live.
    keep,
};

/// The one sequence every import takes: validate -> verify -> take this library's own export ->
/// record the owner, whose address `out` then holds. A refusal is written into `out` and the
/// tensor released or kept as `refusal` says; returns the status to report (a lost race for an
/// export of this library turns into `already_imported`). perf(native import): inlined into each
/// entry, as its own frame and the owner record's in it were measurable (`zig build bench-import`).
pub inline fn sequence(
    managed: usize,
    options: Options,
    out: *Description,
    refusal: Refusal,
) Status {
    var own: ?exports.Own = null;
    var status = @call(.always_inline, inspect, .{ managed, options, out, &own });
    var claimed = false;
    if (status == .ok) {
        if (own) |found| {
            status = take(managed, found, out);
            claimed = status == .ok;
        }
    }
    if (status == .ok) {
        _ = @call(.always_inline, record, .{ managed, options.versioned, out }) catch {
            status = .out_of_memory;
        };
        if (status == .ok) return .ok;
    }
    if (refusal == .keep) {
        if (claimed) exports.unclaim(managed);
        return status;
    }
    return releaseRefused(managed, options.versioned, status, out, claimed);
}

/// Steps 1 and 2: validates `managed` and checks its device claim, filling `out`. Sets `own` when
/// the struct is one of this library's exports (steps 3 and 4 need it).
pub fn inspect(managed: usize, options: Options, out: *Description, own: *?exports.Own) Status {
    const status = describe.validate(managed, options, out, own);
    if (status != .ok) return status;
    return verify.deviceClaim(out);
}

/// Step 3: takes one of this library's exports that `inspect` accepted; the first import to
/// claim it takes it, any later one is refused (`already_imported`).
pub fn take(managed: usize, own: exports.Own, out: *Description) Status {
    assert(out.status == @intFromEnum(Status.ok));
    if (own.state == .live and exports.claim(managed)) return .ok;
    return refuseTaken(managed, own, out);
}

/// The refusal of an export of this library that another import took (or that was released).
pub fn refuseTaken(managed: usize, own: exports.Own, out: *Description) Status {
    const found: i64 = @bitCast(@as(u64, managed));
    return out.refuse(.already_imported, abi.detail_dim.none, found, @intFromBool(own.versioned));
}

/// Step 4: an owner holding the accepted tensor, its address written into `out`. When out of
/// memory, `out` says so and the tensor is still the caller's.
pub fn record(managed: usize, versioned: bool, out: *Description) error{OutOfMemory}!*owner.Owner {
    assert(out.status == @intFromEnum(Status.ok));
    // perf(native import): inlined, as its own frame looked the thread-local spares up in a call
    // of its own.
    const created = @call(.always_inline, owner.createImport, .{ versioned, managed }) catch |err| {
        _ = out.refuse(.out_of_memory, abi.detail_dim.none, 0, 0);
        return err;
    };
    out.setOwner(@intFromPtr(created));
    return created;
}

/// Hands a refused tensor back: calls its deleter once, where that is safe. Never for a struct
/// that could not be read, a deleter that is not code, or an export of this library that another
/// import holds or that was released; this library's own export passed as the other generation
/// goes through its real deleter. `claimed`: step 3 took this library's export (then refused for
/// want of memory). Returns the status to report (a lost race for an export of this library
/// turns into `already_imported`).
pub fn releaseRefused(
    managed: usize,
    versioned: bool,
    status: Status,
    out: *Description,
    claimed: bool,
) Status {
    assert(status != .ok);
    if (claimed) {
        // An export of this library this import took, of the generation claimed.
        deleteKeeping(managed, versioned, out);
        stats.add(.deleters_called, 1);
        return status;
    }
    switch (status) {
        .null_managed,
        .bad_address,
        .unmapped_struct,
        .bad_deleter,
        .already_imported,
        .released_export,
        => return status,
        else => {},
    }
    // Every other refusal comes after the validator checked the struct readable and its deleter.
    assert(abi.plausible(dlpack.ManagedTensorVersioned, managed));
    if (exports.recognize(managed)) |own| {
        if (own.state != .live or !exports.claim(managed)) return refuseTaken(managed, own, out);
        deleteKeeping(managed, own.versioned, out);
    } else {
        deleteKeeping(managed, versioned, out);
    }
    stats.add(.deleters_called, 1);
    return status;
}

/// Calls a managed tensor's deleter (a struct no import took: a capsule disposed before anyone
/// took it, a journal entry replayed), with the checks of an import: nothing happens for a struct
/// that is not readable, a deleter that is not code, or an export of this library that an import
/// took or that was released already. Returns whether the deleter ran.
pub fn deleteChecked(managed: usize, versioned: bool) bool {
    if (!abi.plausible(dlpack.ManagedTensorVersioned, managed)) return false;
    if (!mappings.readable(managed, dlpack.managedSize(versioned))) return false;
    if (exports.recognize(managed)) |own| {
        if (own.state != .live or !exports.claim(managed)) return false;
        dlpack.deleteManaged(managed, own.versioned);
        return true;
    }
    const deleter = @as(*const usize, @ptrFromInt(managed + dlpack.deleterOffset(versioned))).*;
    if (deleter != 0 and (exports.isExportDeleter(deleter) or !mappings.executable(deleter))) {
        return false;
    }
    dlpack.deleteManaged(managed, versioned);
    return true;
}

/// Calls a refused tensor's deleter with the refusal's description kept as it was: the deleter may
/// be a JS callback that imports again into the same description (its thread's scratch, which
/// every copy of the JS module in that thread writes, one loading the library even copies its own
/// placeholder over it) before JS has read why this tensor was refused.
fn deleteKeeping(managed: usize, versioned: bool, out: *Description) void {
    const kept = out.*;
    dlpack.deleteManaged(managed, versioned);
    out.* = kept;
}

const testing = std.testing;

var test_deleter_calls: u32 = 0;

fn countingDeleter(_: *dlpack.ManagedTensorVersioned) callconv(.c) void {
    test_deleter_calls += 1;
}

test "a refused tensor is released once, and only where that is safe" {
    var out = std.mem.zeroes(Description);
    var foreign = std.mem.zeroes(dlpack.ManagedTensorVersioned);
    foreign.deleter = countingDeleter;
    const managed = @intFromPtr(&foreign);
    const before = test_deleter_calls;
    // Refusals made before the struct or its deleter could be trusted call nothing.
    for ([_]Status{ .bad_address, .unmapped_struct, .bad_deleter, .already_imported }) |status| {
        try testing.expectEqual(status, releaseRefused(managed, true, status, &out, false));
    }
    try testing.expectEqual(before, test_deleter_calls);
    // A refusal of a readable struct with a code deleter hands it back once.
    try testing.expectEqual(Status.dtype, releaseRefused(managed, true, .dtype, &out, false));
    try testing.expectEqual(before + 1, test_deleter_calls);

    // One of this library's exports that an import took is not released again.
    var data = [_]f32{ 1, 2 };
    const export_managed = try exports.create(.{
        .data = @intFromPtr(&data),
        .device = .{ .device_type = 1, .device_id = 0 },
        .dtype = .{ .code = 2, .bits = 32, .lanes = 1 },
        .shape = &.{2},
        .strides = &.{1},
        .flags = 0,
        .versioned = true,
        .adopt_owner = false,
        .owner = null,
    });
    try testing.expect(exports.claim(export_managed));
    const status = releaseRefused(export_managed, false, .generation, &out, false);
    try testing.expectEqual(Status.already_imported, status);
    try testing.expectEqual(exports.State.taken, exports.recognize(export_managed).?.state);
    dlpack.deleteManaged(export_managed, true);
}

var scribbled: ?*Description = null;

/// A deleter that, like a JS callback importing again, writes the description being reported.
fn scribblingDeleter(_: *dlpack.ManagedTensorVersioned) callconv(.c) void {
    const out = scribbled.?;
    out.* = std.mem.zeroes(Description);
    out.status = @intFromEnum(Status.ok);
    out.device_type = 1;
}

test "a refusal's description survives a deleter that writes it" {
    var out = std.mem.zeroes(Description);
    _ = out.refuse(.device, abi.detail_dim.none, 99, 18);
    out.device_type = 99;
    var foreign = std.mem.zeroes(dlpack.ManagedTensorVersioned);
    foreign.deleter = scribblingDeleter;
    scribbled = &out;
    defer scribbled = null;
    const status = releaseRefused(@intFromPtr(&foreign), true, .device, &out, false);
    try testing.expectEqual(Status.device, status);
    try testing.expectEqual(@as(i32, @intFromEnum(Status.device)), out.status);
    try testing.expectEqual(@as(i32, 99), out.device_type);
    try testing.expectEqual(@as(i64, 99), out.detail_found);
}
