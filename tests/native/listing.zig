//! This process's /proc/self/maps as the test harnesses read it, independently of the library's
//! own reading (zig/src/mappings.zig): the models of the fuzzers judge addresses with it.

const std = @import("std");

/// What every byte of a range allows.
pub const Access = enum(i32) { none = 0, read = 1, read_write = 3 };

/// One line's range and its first two permission letters.
const Line = struct { lo: u64, hi: u64, read: bool, write: bool, exec: bool };

fn parse(line: []const u8) ?Line {
    const dash = std.mem.indexOfScalar(u8, line, '-') orelse return null;
    const space = std.mem.indexOfScalarPos(u8, line, dash, ' ') orelse return null;
    if (line.len < space + 4) return null;
    return .{
        .lo = std.fmt.parseInt(u64, line[0..dash], 16) catch return null,
        .hi = std.fmt.parseInt(u64, line[dash + 1 .. space], 16) catch return null,
        .read = line[space + 1] == 'r',
        .write = line[space + 2] == 'w',
        .exec = line[space + 3] == 'x',
    };
}

fn read() ?[]u8 {
    const file = std.fs.openFileAbsolute("/proc/self/maps", .{}) catch return null;
    defer file.close();
    return file.readToEndAlloc(std.heap.c_allocator, 64 << 20) catch null;
}

/// What every byte of [first, end) allows; null when the listing cannot be read.
pub fn access(first: u64, end: u64) ?Access {
    const text = read() orelse return null;
    defer std.heap.c_allocator.free(text);
    var at = first;
    var writable = true;
    var lines = std.mem.tokenizeScalar(u8, text, '\n');
    while (lines.next()) |text_line| {
        const line = parse(text_line) orelse continue;
        if (line.hi <= at) continue;
        if (line.lo > at or !line.read) return .none;
        if (!line.write) writable = false;
        at = line.hi;
        if (at >= end) return if (writable) .read_write else .read;
    }
    return .none;
}

/// Whether the listing has `address` in executable memory.
pub fn executable(address: u64) bool {
    const text = read() orelse return false;
    defer std.heap.c_allocator.free(text);
    var lines = std.mem.tokenizeScalar(u8, text, '\n');
    while (lines.next()) |text_line| {
        const line = parse(text_line) orelse continue;
        if (address >= line.lo and address < line.hi) return line.exec;
    }
    return false;
}
