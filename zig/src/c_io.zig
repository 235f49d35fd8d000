//! The C boundary of the tensors-on-disk entry (io.ts): a file mapped into an owner record that
//! views hold shares of (its last release unmaps it), or read into library memory, and files
//! written atomically. Arguments are checked here, and the error unions of mapped.zig become
//! `abi.IoStatus` codes, their details written into the caller's `Description`. Nothing here may
//! panic or unwind into the host.

const std = @import("std");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const c_core = @import("c_core.zig");
const journal = @import("journal.zig");
const mapped = @import("mapped.zig");
const mappings = @import("mappings.zig");
const owner = @import("owner.zig");

const Description = abi.Description;
const IoStatus = abi.IoStatus;

fn code(status: IoStatus) i32 {
    return @intFromEnum(status);
}

const invalid = c_core.invalid;
const descriptionAt = c_core.descriptionAt;

/// Writes a refusal and its details; returns its status.
fn refuse(out: *Description, status: IoStatus, dim: i32, found: i64, limit: i64) i32 {
    assert(status != .ok);
    out.status = code(status);
    out.detail_dim = dim;
    out.detail_found = found;
    out.detail_limit = limit;
    return code(status);
}

/// The refusal of a mapped.zig error.
fn refuseError(out: *Description, err: anyerror, detail: mapped.Detail) i32 {
    const call: i32 = @intFromEnum(detail.call);
    const size: i64 = @intCast(@min(detail.size, std.math.maxInt(i64)));
    const found: i64 = @intCast(@min(detail.found, std.math.maxInt(i64)));
    return switch (err) {
        error.Os => refuse(out, .os, call, @intFromEnum(detail.failure), detail.errno),
        error.NotRegular => refuse(out, .not_regular, call, @intFromEnum(detail.kind), 0),
        error.TooLarge => refuse(out, .too_large, call, size, 0),
        error.Empty => refuse(out, .empty, call, 0, 0),
        error.Changed => refuse(out, .changed, call, found, size),
        error.Replaced => refuse(out, .replaced, call, 0, 0),
        error.Unsupported => refuse(out, .unsupported, call, 0, 0),
        error.OutOfMemory => refuse(out, .out_of_memory, call, size, 0),
        else => refuse(out, .os, call, @intFromEnum(mapped.Failure.other), 0),
    };
}

/// The path the caller passed (`len` bytes of UTF-8 or any bytes, not NUL-terminated), copied
/// NUL-terminated into `buffer`.
fn pathOf(path: ?[*]const u8, len: u32, buffer: *[mapped.path_max]u8) ?[:0]const u8 {
    const bytes = path orelse return null;
    if (len == 0 or len >= mapped.path_max) return null;
    return mapped.terminated(bytes[0..len], buffer);
}

/// Maps the regular file at `path` (`path_len` bytes) of at most `limit` bytes, read-only and
/// shared, or with `abi.io_option.writable` private and writable; with `abi.io_option.copy` reads
/// it into library memory instead. On success writes element 0's address (the file's first
/// byte), the owner record (one reference, the caller's, journaled for it) and the size
/// (`nbytes`) into the description at `out_address`.
export fn dlpk_io_map(
    path: ?[*]const u8,
    path_len: u32,
    options: u32,
    limit: f64,
    out_address: f64,
) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    const most = abi.integerFromF64(limit) orelse return invalid;
    if (most < 0 or options & ~(abi.io_option.writable | abi.io_option.copy) != 0) return invalid;
    var buffer: [mapped.path_max]u8 = undefined;
    const terminated = pathOf(path, path_len, &buffer) orelse
        return refuse(out, .bad_path, abi.detail_dim.none, path_len, mapped.path_max);
    var detail: mapped.Detail = .{};
    const opened = mapped.open(terminated, @intCast(most), &detail) catch |err|
        return refuseError(out, err, detail);
    defer mapped.close(opened);
    const size: usize = @intCast(opened.size);
    const record = if (options & abi.io_option.copy != 0)
        readWhole(opened, size, &detail)
    else
        mapWhole(opened, size, options & abi.io_option.writable != 0, &detail);
    const made = record catch |err| return refuseError(out, err, detail);
    out.status = 0;
    out.setAddress(made.payload);
    out.setOwner(@intFromPtr(made));
    out.nbytes = @floatFromInt(size);
    c_core.owed(abi.ownerEntry(@intFromPtr(made)));
    return 0;
}

fn mapWhole(
    opened: mapped.Opened,
    size: usize,
    writable: bool,
    detail: *mapped.Detail,
) !*owner.Owner {
    const at = try mapped.map(opened, writable, detail);
    return owner.create(.mapping, @intFromPtr(at), size) catch |err| {
        mapped.unmap(@intFromPtr(at), size);
        detail.size = size;
        return err;
    };
}

fn readWhole(opened: mapped.Opened, size: usize, detail: *mapped.Detail) !*owner.Owner {
    const record = owner.createNative(size, 64, false) catch |err| {
        detail.size = size;
        return err;
    };
    errdefer owner.release(record);
    const into: [*]u8 = @ptrFromInt(record.payload);
    try mapped.read(opened, into[0..size], detail);
    return record;
}

fn writerAt(value: f64) ?*mapped.Writer {
    const address = abi.addressFromF64(value) orelse return null;
    if (address == 0 or address % @alignOf(mapped.Writer) != 0) return null;
    if (!mappings.readable(address, @sizeOf(mapped.Writer))) return null;
    const writer: *mapped.Writer = @ptrFromInt(address);
    return if (mapped.isWriter(writer)) writer else null;
}

/// Starts writing the file at `path` (`path_len` bytes): a new temporary file in the same folder,
/// which `dlpk_io_finish` renames over it. Writes the writer's handle as the description's
/// address.
export fn dlpk_io_create(path: ?[*]const u8, path_len: u32, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    var buffer: [mapped.path_max]u8 = undefined;
    const terminated = pathOf(path, path_len, &buffer) orelse
        return refuse(out, .bad_path, abi.detail_dim.none, path_len, mapped.path_max);
    var detail: mapped.Detail = .{};
    const writer = mapped.create(terminated, &detail) catch |err|
        return refuseError(out, err, detail);
    out.status = 0;
    out.setAddress(@intFromPtr(writer));
    return 0;
}

/// Appends `bytes` bytes from `data` to the writer's file.
export fn dlpk_io_write(writer_address: f64, data: f64, bytes: f64, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    const writer = writerAt(writer_address) orelse return refuse(out, .bad_writer, -1, 0, 0);
    const from = abi.addressFromF64(data) orelse return invalid;
    const count = abi.integerFromF64(bytes) orelse return invalid;
    if (count < 0 or (count > 0 and from == 0)) return invalid;
    if (count == 0) return 0;
    const source: [*]const u8 = @ptrFromInt(from);
    var detail: mapped.Detail = .{};
    mapped.write(writer, source[0..@intCast(count)], &detail) catch |err|
        return refuseError(out, err, detail);
    return 0;
}

/// Ends a writer: `commit` 1 syncs the file and renames it over the target; 0 (or a failure on
/// the way) removes it. The handle is invalid afterwards either way.
export fn dlpk_io_finish(writer_address: f64, commit: u32, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    const writer = writerAt(writer_address) orelse return refuse(out, .bad_writer, -1, 0, 0);
    var detail: mapped.Detail = .{};
    mapped.finish(writer, commit != 0, &detail) catch |err| return refuseError(out, err, detail);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Tests

const stats = @import("stats.zig");
const testing = std.testing;

test "a mapped file's owner counts in stats and unmaps on its last release; refusals say why" {
    if (!mapped.supported) return error.SkipZigTest;
    var tmp = testing.tmpDir(.{});
    defer tmp.cleanup();
    try tmp.dir.writeFile(.{ .sub_path = "t.bin", .data = "0123456789abcdef" });
    var dir: [mapped.path_max]u8 = undefined;
    var path_buffer: [mapped.path_max]u8 = undefined;
    const folder = try tmp.dir.realpath(".", &dir);
    const path = try std.fmt.bufPrint(&path_buffer, "{s}/t.bin", .{folder});
    const len: u32 = @intCast(path.len);
    var out = std.mem.zeroes(Description);
    const at: f64 = @floatFromInt(@intFromPtr(&out));
    const before = stats.get(.mappings);
    const bytes_before = stats.get(.mapped_bytes);
    for ([_]u32{ 0, abi.io_option.writable, abi.io_option.copy }) |options| {
        try testing.expectEqual(@as(i32, 0), dlpk_io_map(path.ptr, len, options, 64, at));
        try testing.expectEqual(@as(f64, 16), out.nbytes);
        const data: [*]const u8 = @ptrFromInt(out.address());
        try testing.expectEqualStrings("0123456789abcdef", data[0..16]);
        const record: *owner.Owner = @ptrFromInt(@as(usize, out.owner_hi) << 32 | out.owner_lo);
        // Journaled for the caller, as the top entry; a holder ends it.
        const j = journal.local();
        const entry = abi.ownerEntry(@intFromPtr(record));
        try testing.expectEqual(entry, j.entries[@intCast(j.count - 1)]);
        journal.end(j, entry);
        const counted: i64 = if (options & abi.io_option.copy != 0) 0 else 1;
        try testing.expectEqual(before + counted, stats.get(.mappings));
        try testing.expectEqual(bytes_before + 16 * counted, stats.get(.mapped_bytes));
        owner.retain(record);
        owner.release(record);
        try testing.expectEqual(before + counted, stats.get(.mappings));
        owner.release(record);
        try testing.expectEqual(before, stats.get(.mappings));
        try testing.expectEqual(bytes_before, stats.get(.mapped_bytes));
    }
    try testing.expectEqual(code(.too_large), dlpk_io_map(path.ptr, len, 0, 15, at));
    try testing.expectEqual(@as(i64, 16), out.detail_found);
    try testing.expectEqual(code(.bad_path), dlpk_io_map(path.ptr, 0, 0, 64, at));
    try testing.expectEqual(code(.bad_path), dlpk_io_map("a\x00b", 3, 0, 64, at));
    try testing.expectEqual(code(.not_regular), dlpk_io_map("/", 1, 0, 64, at));
    try testing.expectEqual(@as(i64, @intFromEnum(mapped.Kind.directory)), out.detail_found);
    try testing.expectEqual(invalid, dlpk_io_map(path.ptr, len, 4, 64, at));
}

test "writers: a committed file appears whole, and a handle that is no writer is refused" {
    if (!mapped.supported) return error.SkipZigTest;
    var tmp = testing.tmpDir(.{});
    defer tmp.cleanup();
    var dir: [mapped.path_max]u8 = undefined;
    var path_buffer: [mapped.path_max]u8 = undefined;
    const folder = try tmp.dir.realpath(".", &dir);
    const path = try std.fmt.bufPrint(&path_buffer, "{s}/w.bin", .{folder});
    var out = std.mem.zeroes(Description);
    const at: f64 = @floatFromInt(@intFromPtr(&out));
    try testing.expectEqual(@as(i32, 0), dlpk_io_create(path.ptr, @intCast(path.len), at));
    const handle: f64 = @floatFromInt(out.address());
    const text = "written";
    const data: f64 = @floatFromInt(@intFromPtr(text.ptr));
    try testing.expectEqual(@as(i32, 0), dlpk_io_write(handle, data, text.len, at));
    try testing.expectEqual(@as(i32, 0), dlpk_io_finish(handle, 1, at));
    var content: [16]u8 = undefined;
    try testing.expectEqualStrings("written", try tmp.dir.readFile("w.bin", &content));
    const bad = code(.bad_writer);
    try testing.expectEqual(bad, dlpk_io_write(8, data, 1, at));
    try testing.expectEqual(bad, dlpk_io_finish(@floatFromInt(@intFromPtr(&out)), 1, at));
}
