//! `zig build bench-import [-- --count N --rounds R]`: the native cost of one import + release of
//! a foreign tensor, without any JS: the shipped library (zig-out/lib, opened as the runtimes open
//! it) imports the test producer's static float32 tensor, N times a round, and prints the median
//! and the best round in thread CPU time (ns per import + release, the producer's counting deleter
//! included, as numpy's import is timed with its own). First through the general door `dlpk_import`
//! released through `dlpk_owner_release`; then the native calls of a JS import + dispose: the
//! one-argument `dlpk_import_versioned`, which journals the owner record, released through
//! `dlpk_journal_release`, which ends that entry (JS ends it when the view holds the record and
//! journals the release again: one store each way on the JS side).
//! Then (tests/native/import_cases.zig) imports whose data lies in a mapping never seen, with the
//! process's mappings and with `--extra-mappings M` (20,000) more, `--misses N` (2,000) a round;
//! and imports and exports on `--threads T` (2) threads against 1, `--thread-count K` (500,000)
//! each. `--misses 0` or `--threads 0` leaves those out. `--json 1` adds one JSON line on stdout
//! (bench/run.ts reads it): the thread ratios, and the native part of a JS import + dispose and of
//! a JS export + dispose (the floor's), thread CPU ns on one thread.

const std = @import("std");
const abi = @import("abi");
const cases = @import("import_cases.zig");

const Import = cases.Import;
const Release = cases.Release;
const ImportOne = cases.ImportOne;
const Scratch = *const fn () callconv(.c) f64;
const Journal = *const fn () callconv(.c) f64;
const Size = *const fn () callconv(.c) u32;
const Static = *const fn (f64, u32) callconv(.c) usize;

const versioned_option = abi.import_option.versioned;

const threadNs = cases.threadNs;

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

const Options = struct {
    count: usize = 2_000_000,
    rounds: usize = 9,
    misses: usize = 2_000,
    extra_mappings: usize = 20_000,
    threads: usize = 2,
    thread_count: usize = 500_000,
    json: usize = 0,
};

fn parseOptions(args: []const [:0]u8) !Options {
    var o: Options = .{};
    var i: usize = 3;
    while (i + 1 < args.len) : (i += 2) {
        const value = try std.fmt.parseInt(usize, args[i + 1], 10);
        const name = args[i];
        if (std.mem.eql(u8, name, "--count")) o.count = @max(value, 1);
        if (std.mem.eql(u8, name, "--rounds")) o.rounds = std.math.clamp(value, 1, 64);
        if (std.mem.eql(u8, name, "--misses")) o.misses = value;
        if (std.mem.eql(u8, name, "--extra-mappings")) o.extra_mappings = value;
        if (std.mem.eql(u8, name, "--threads")) o.threads = @min(value, 16);
        if (std.mem.eql(u8, name, "--thread-count")) o.thread_count = @max(value, 1);
        if (std.mem.eql(u8, name, "--json")) o.json = value;
    }
    return o;
}

pub fn main() !void {
    var gpa: std.heap.DebugAllocator(.{}) = .init;
    defer _ = gpa.deinit();
    const allocator = gpa.allocator();
    const args = try std.process.argsAlloc(allocator);
    defer std.process.argsFree(allocator, args);
    if (args.len < 3) return error.Usage;
    const o = try parseOptions(args);
    var lib = try std.DynLib.open(args[1]);
    defer lib.close();
    var producer = try std.DynLib.open(args[2]);
    defer producer.close();
    const scratch = try symbol(Scratch, &lib, "dlpk_scratch");
    const journal = (try symbol(Journal, &lib, "dlpk_journal"))();
    const e: Entries = .{
        .import = try symbol(Import, &lib, "dlpk_import"),
        .release = try symbol(Release, &lib, "dlpk_owner_release"),
        .versioned = try symbol(ImportOne, &lib, "dlpk_import_versioned"),
        .journal_release = try symbol(Release, &lib, "dlpk_journal_release"),
        .scratch = @ptrFromInt(@as(usize, @intFromFloat(scratch()))),
        .journal_count = @ptrFromInt(@as(usize, @intFromFloat(journal))),
    };
    // A library built from other sources would read and write another layout.
    if ((try symbol(Size, &lib, "dlpk_description_size"))() != @sizeOf(abi.Description)) {
        return error.StaleLibrary;
    }
    const static_tensor = try symbol(Static, &producer, "tp_static_tensor");
    try knownRows(e, static_tensor, o);
    const more: cases.Entries = .{
        .import = e.import,
        .release = e.release,
        .versioned = e.versioned,
        .journal_release = e.journal_release,
        .scratch = scratch,
        .realm_new = try symbol(cases.RealmNew, &lib, "dlpk_realm_new"),
        .export_array = try symbol(cases.ExportArray, &lib, "dlpk_export_array"),
        .export_dispose = try symbol(cases.ExportDispose, &lib, "dlpk_export_dispose"),
    };
    var ratios: [3]f64 = @splat(std.math.nan(f64));
    const thread_rounds = @min(o.rounds, 7);
    if (o.threads > 0) ratios = try cases.scaling(more, o.threads, o.thread_count, thread_rounds);
    if (o.misses > 0) try cases.misses(more, o.misses, o.rounds, o.extra_mappings);
    if (o.json != 0) try printJson(more, o, ratios);
}

fn printJson(e: cases.Entries, o: Options, ratios: [3]f64) !void {
    const rounds = @min(o.rounds, 7);
    const import_ns = try cases.singleNs(e, .import, o.thread_count, rounds);
    const export_ns = try cases.singleNs(e, .export_array, o.thread_count, rounds);
    const format = "{{\"native_import_ns\":{d:.2},\"native_export_ns\":{d:.2}," ++
        "\"native_import_2_threads\":{d:.3},\"native_export_2_threads\":{d:.3}," ++
        "\"native_arithmetic_2_threads\":{d:.3}}}\n";
    var buffer: [512]u8 = undefined;
    const values = .{ import_ns, export_ns, ratios[0], ratios[1], ratios[2] };
    try std.fs.File.stdout().writeAll(try std.fmt.bufPrint(&buffer, format, values));
}

/// The rows of one known tensor, imported over and over.
fn knownRows(e: Entries, static_tensor: Static, o: Options) !void {
    const managed = static_tensor(4096, 1);
    if (managed == 0) return error.OutOfMemory;
    var times: [64]f64 = undefined;
    const names = [_][]const u8{ "import + release", "versioned import + journal release" };
    for ([_]Mode{ .import, .versioned }, names) |mode, name| {
        _ = try round(e, managed, o.count / 10 + 1, mode);
        for (times[0..o.rounds]) |*t| t.* = try round(e, managed, o.count, mode);
        report(name, times[0..o.rounds]);
    }
}
