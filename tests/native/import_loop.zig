//! `zig build bench-import [-- --count N --rounds R]`: the native cost of one import + release of
//! a foreign tensor, without any JS: the shipped library (zig-out/lib, opened as the runtimes open
//! it) imports the test producer's static float32 tensor, N times a round, and prints the median
//! and the best round in thread CPU time (ns per import + release, the producer's counting deleter
//! included, as numpy's import is timed with its own). First through the general door `dlpk_import`
//! released through `dlpk_owner_release`; then the native calls of a JS import + dispose: the
//! one-argument `dlpk_import_versioned`, which journals the owner record, released through
//! `dlpk_journal_release`, which ends that entry (JS ends it when the view holds the record and
//! journals the release again: one store each way on the JS side).

const std = @import("std");
const abi = @import("abi");

const Import = *const fn (usize, u32) callconv(.c) i32;
const Release = *const fn (f64) callconv(.c) void;
const ImportOne = *const fn (f64) callconv(.c) i32;
const Scratch = *const fn () callconv(.c) f64;
const Journal = *const fn () callconv(.c) f64;
const Size = *const fn () callconv(.c) u32;
const Static = *const fn (f64, u32) callconv(.c) usize;

const versioned_option = abi.import_option.versioned;

fn threadNs() u64 {
    const ts = std.posix.clock_gettime(.THREAD_CPUTIME_ID) catch return 0;
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

fn symbol(comptime T: type, lib: *std.DynLib, name: [:0]const u8) !T {
    return lib.lookup(T, name) orelse {
        std.debug.print("missing symbol {s}\n", .{name});
        return error.MissingSymbol;
    };
}

const Entries = struct {
    import: Import,
    release: Release,
    versioned: ImportOne,
    journal_release: Release,
    scratch: *const abi.KeyedDescription,
    /// This thread's journal count (zig/src/journal.zig: the first word).
    journal_count: *i32,
};

const Mode = enum { import, versioned };

/// One round: ns per import + release.
fn round(e: Entries, managed: usize, count: usize, mode: Mode) !f64 {
    const began = threadNs();
    for (0..count) |_| {
        if (mode == .versioned) {
            if (e.versioned(@floatFromInt(managed)) != 0) return error.Refused;
            e.journal_release(e.scratch.owner);
            continue;
        }
        if (e.import(managed, versioned_option) != 0) return error.Refused;
        // The holder of the record takes the journal entry the import made, as a JS view does.
        e.journal_count.* -= 1;
        e.release(e.scratch.owner);
    }
    const elapsed: f64 = @floatFromInt(threadNs() - began);
    return elapsed / @as(f64, @floatFromInt(count));
}

fn report(name: []const u8, times: []f64) void {
    std.mem.sort(f64, times, {}, std.sort.asc(f64));
    std.debug.print("{s}: median {d:.1} ns, best {d:.1} ns ({d} rounds)\n", .{
        name,
        times[times.len / 2],
        times[0],
        times.len,
    });
}

pub fn main() !void {
    var gpa: std.heap.DebugAllocator(.{}) = .init;
    defer _ = gpa.deinit();
    const allocator = gpa.allocator();
    const args = try std.process.argsAlloc(allocator);
    defer std.process.argsFree(allocator, args);
    if (args.len < 3) return error.Usage;
    var count: usize = 2_000_000;
    var rounds: usize = 9;
    var i: usize = 3;
    while (i + 1 < args.len) : (i += 2) {
        const value = try std.fmt.parseInt(usize, args[i + 1], 10);
        if (std.mem.eql(u8, args[i], "--count")) count = @max(value, 1);
        if (std.mem.eql(u8, args[i], "--rounds")) rounds = std.math.clamp(value, 1, 64);
    }
    var lib = try std.DynLib.open(args[1]);
    defer lib.close();
    var producer = try std.DynLib.open(args[2]);
    defer producer.close();
    const scratch = (try symbol(Scratch, &lib, "dlpk_scratch"))();
    const journal = (try symbol(Journal, &lib, "dlpk_journal"))();
    const e: Entries = .{
        .import = try symbol(Import, &lib, "dlpk_import"),
        .release = try symbol(Release, &lib, "dlpk_owner_release"),
        .versioned = try symbol(ImportOne, &lib, "dlpk_import_versioned"),
        .journal_release = try symbol(Release, &lib, "dlpk_journal_release"),
        .scratch = @ptrFromInt(@as(usize, @intFromFloat(scratch))),
        .journal_count = @ptrFromInt(@as(usize, @intFromFloat(journal))),
    };
    // A library built from other sources would read and write another layout.
    if ((try symbol(Size, &lib, "dlpk_description_size"))() != @sizeOf(abi.Description)) {
        return error.StaleLibrary;
    }
    const managed = (try symbol(Static, &producer, "tp_static_tensor"))(4096, 1);
    if (managed == 0) return error.OutOfMemory;
    var times: [64]f64 = undefined;
    const names = [_][]const u8{ "import + release", "versioned import + journal release" };
    for ([_]Mode{ .import, .versioned }, names) |mode, name| {
        _ = try round(e, managed, count / 10 + 1, mode);
        for (times[0..rounds]) |*t| t.* = try round(e, managed, count, mode);
        report(name, times[0..rounds]);
    }
}
