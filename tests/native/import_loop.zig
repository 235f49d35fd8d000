//! `zig build bench-import [-- --count N --rounds R]`: the native cost of one import + release of
//! a foreign tensor, without any JS: the shipped library (zig-out/lib, opened as the runtimes open
//! it) imports the test producer's static float32 tensor through `dlpk_import` and releases the
//! owner through `dlpk_owner_release`, N times a round. Prints the median and the best round in
//! thread CPU time (ns per import + release, the producer's counting deleter included, as numpy's
//! import is timed with its own), then the same through `dlpk_import_keyed` (what the JS imports
//! call: from the second import on, the validator has the last import's facts to compare with),
//! then the one-argument `dlpk_import_versioned` into the thread's own scratch released through
//! `dlpk_journal_release` (the native calls of a JS import + dispose), then `dlpk_describe` alone.
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
const Size = *const fn () callconv(.c) u32;
const Static = *const fn (f64, u32) callconv(.c) usize;

const versioned_option = abi.import_option.versioned;
/// The owner address's 32-bit halves in the description, as 32-bit word indices.
const owner_lo_word = @offsetOf(abi.Description, "owner_lo") / 4;
comptime {
    const lo = @offsetOf(abi.Description, "owner_lo");
    std.debug.assert(@offsetOf(abi.Description, "owner_hi") == lo + 4);
}

const threadNs = cases.threadNs;

fn symbol(comptime T: type, lib: *std.DynLib, name: [:0]const u8) !T {
    return lib.lookup(T, name) orelse {
        std.debug.print("missing symbol {s}\n", .{name});
        return error.MissingSymbol;
    };
}

const Entries = struct {
    import: Import,
    keyed: Import,
    describe: Import,
    release: Release,
    versioned: ImportOne,
    journal_release: Release,
    scratch: *const abi.KeyedDescription,
};

const Mode = enum { import, keyed, versioned, describe };

/// One round: ns per call (pair). `.describe`: `dlpk_describe` alone.
fn round(e: Entries, managed: f64, out: []align(8) u8, count: usize, mode: Mode) !f64 {
    const words: [*]const u32 = @ptrCast(out.ptr);
    const out_address: f64 = @floatFromInt(@intFromPtr(out.ptr));
    const import = if (mode == .keyed) e.keyed else e.import;
    const began = threadNs();
    for (0..count) |_| {
        if (mode == .describe) {
            if (e.describe(managed, versioned_option, out_address) != 0) return error.Refused;
            continue;
        }
        if (mode == .versioned) {
            if (e.versioned(managed) != 0) return error.Refused;
            e.journal_release(e.scratch.owner);
            continue;
        }
        if (import(managed, versioned_option, out_address) != 0) return error.Refused;
        const owner = @as(u64, words[owner_lo_word + 1]) << 32 | words[owner_lo_word];
        e.release(@floatFromInt(owner));
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
    var e: Entries = .{
        .import = try symbol(Import, &lib, "dlpk_import"),
        .keyed = try symbol(Import, &lib, "dlpk_import_keyed"),
        .describe = try symbol(Import, &lib, "dlpk_describe"),
        .release = try symbol(Release, &lib, "dlpk_owner_release"),
        .versioned = try symbol(ImportOne, &lib, "dlpk_import_versioned"),
        .journal_release = try symbol(Release, &lib, "dlpk_journal_release"),
        .scratch = undefined,
    };
    const scratch = try symbol(Scratch, &lib, "dlpk_scratch");
    e.scratch = @ptrFromInt(@as(usize, @intFromFloat(scratch())));
    // A library built from other sources would read and write another layout.
    if ((try symbol(Size, &lib, "dlpk_description_size"))() != @sizeOf(abi.Description)) {
        return error.StaleLibrary;
    }
    // A keyed record (the keyed import writes past the description), zeroed as the library's is.
    const out = try allocator.alignedAlloc(u8, .@"8", @sizeOf(abi.KeyedDescription));
    defer allocator.free(out);
    @memset(out, 0);
    const static_tensor = try symbol(Static, &producer, "tp_static_tensor");
    try knownRows(e, static_tensor, out, o);
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
    if (o.misses > 0) try cases.misses(more, out, o.misses, o.rounds, o.extra_mappings);
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
fn knownRows(e: Entries, static_tensor: Static, out: []align(8) u8, o: Options) !void {
    const managed = static_tensor(4096, 1);
    if (managed == 0) return error.OutOfMemory;
    var times: [64]f64 = undefined;
    const names = [_][]const u8{
        "import + release",
        "keyed import + release",
        "versioned import + journal release",
        "describe alone",
    };
    for ([_]Mode{ .import, .keyed, .versioned, .describe }, names) |mode, name| {
        _ = try round(e, @floatFromInt(managed), out, o.count / 10 + 1, mode);
        for (times[0..o.rounds]) |*t| {
            t.* = try round(e, @floatFromInt(managed), out, o.count, mode);
        }
        report(name, times[0..o.rounds]);
    }
}
