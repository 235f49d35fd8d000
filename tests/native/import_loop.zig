//! `zig build bench-import [-- --count N --rounds R]`: the native cost of one import + release of
//! a foreign tensor, without any JS: the shipped library (zig-out/lib, opened as the runtimes open
//! it) imports the test producer's static float32 tensor through `dlpk_import` and releases the
//! owner through `dlpk_owner_release`, N times a round. Prints the median and the best round in
//! thread CPU time (ns per import + release, the producer's counting deleter included, as numpy's
//! import is timed with its own), then the same through `dlpk_import_keyed` (what the JS imports
//! call: from the second import on, the validator has the last import's facts to compare with),
//! then the one-argument `dlpk_import_versioned` into the thread's own scratch released through
//! `dlpk_journal_release` (the native calls of a JS import + dispose), then `dlpk_describe` alone,
//! then `dlpk_export_array` + `dlpk_export_dispose` of a 1 KiB buffer (the native calls of a JS
//! export + dispose). `--threads T` adds the throughput of T threads doing versioned imports
//! (and exports) of their own tensors (and buffers) against one thread's, in wall-clock time, and
//! the same for an arithmetic loop (what two threads get on the machine at all).
//! `--json`: one JSON object of the medians instead of the text report (bench/run.ts reads it).

const std = @import("std");
const abi = @import("abi");

const Import = *const fn (f64, u32, f64) callconv(.c) i32;
const Release = *const fn (f64) callconv(.c) void;
const ImportOne = *const fn (f64) callconv(.c) i32;
const Scratch = *const fn () callconv(.c) f64;
const Size = *const fn () callconv(.c) u32;
const Static = *const fn (f64, u32) callconv(.c) usize;
const ExportArray = *const fn ([*]u8, f64, f64, f64, u32) callconv(.c) f64;
const Dispose = *const fn (f64) callconv(.c) f64;
const RealmNew = *const fn () callconv(.c) f64;

const versioned_option = abi.import_option.versioned;
/// The owner address's 32-bit halves in the description, as 32-bit word indices.
const owner_lo_word = @offsetOf(abi.Description, "owner_lo") / 4;
comptime {
    const lo = @offsetOf(abi.Description, "owner_lo");
    std.debug.assert(@offsetOf(abi.Description, "owner_hi") == lo + 4);
}

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
    keyed: Import,
    describe: Import,
    release: Release,
    versioned: ImportOne,
    journal_release: Release,
    scratch: Scratch,
    export_array: ExportArray,
    export_dispose: Dispose,
    realm_new: RealmNew,
};

/// `arithmetic`: the thread-scaling control, a loop that shares nothing and calls nothing.
const Mode = enum { import, keyed, versioned, describe, export_array, arithmetic };

/// A float32 1 KiB buffer exported whole, versioned (a JS `exportDLPack(new Float32Array(256))`).
const export_word: u32 = 2 | 32 << abi.array_word.bits_shift |
    abi.export_option.versioned << abi.array_word.options_shift;

/// The export of one 1 KiB buffer, then its dispose as a JS capsule's (`-(address * 2 + 1)`).
fn exportOnce(e: Entries, buffer: []u8, realm: f64, id: f64) !void {
    const made = e.export_array(buffer.ptr, realm, id, @floatFromInt(buffer.len), export_word);
    if (made <= 0) return error.Refused;
    _ = e.export_dispose(-(made * 2 + 1));
}

/// One round: ns per call (pair). `.describe`: `dlpk_describe` alone.
fn round(e: Entries, managed: f64, out: []align(8) u8, count: usize, mode: Mode) !f64 {
    const words: [*]const u32 = @ptrCast(out.ptr);
    const out_address: f64 = @floatFromInt(@intFromPtr(out.ptr));
    const import = if (mode == .keyed) e.keyed else e.import;
    var buffer: [1024]u8 align(64) = undefined;
    const realm = if (mode == .export_array) e.realm_new() else 0;
    const scratch = scratchOf(e);
    const began = threadNs();
    for (0..count) |k| {
        if (mode == .export_array) {
            try exportOnce(e, &buffer, realm, @floatFromInt(k % 1000 + 1));
            continue;
        }
        if (mode == .describe) {
            if (e.describe(managed, versioned_option, out_address) != 0) return error.Refused;
            continue;
        }
        if (mode == .versioned) {
            if (e.versioned(managed) != 0) return error.Refused;
            e.journal_release(scratch.owner);
            continue;
        }
        if (import(managed, versioned_option, out_address) != 0) return error.Refused;
        const owner = @as(u64, words[owner_lo_word + 1]) << 32 | words[owner_lo_word];
        e.release(@floatFromInt(owner));
    }
    const elapsed: f64 = @floatFromInt(threadNs() - began);
    return elapsed / @as(f64, @floatFromInt(count));
}

/// This thread's scratch (the library keeps one per thread).
fn scratchOf(e: Entries) *const abi.KeyedDescription {
    return @ptrFromInt(@as(usize, @intFromFloat(e.scratch())));
}

/// Sorts `times` and returns the median.
fn report(name: []const u8, times: []f64, json: bool) f64 {
    std.mem.sort(f64, times, {}, std.sort.asc(f64));
    const median = times[times.len / 2];
    if (!json) std.debug.print("{s}: median {d:.1} ns, best {d:.1} ns ({d} rounds)\n", .{
        name,
        median,
        times[0],
        times.len,
    });
    return median;
}

// ---------------------------------------------------------------------------------------------
// Thread scaling: T threads, each importing its own tensor (or exporting its own buffer), started
// together; the figure is the operations of all threads per wall-clock second.

const Worker = struct {
    e: Entries,
    static_local: Static,
    mode: Mode,
    count: usize,
    ready: *std.atomic.Value(usize),
    go: *std.atomic.Value(bool),
    failed: *std.atomic.Value(bool),
    finished_ns: u64 = 0,

    fn run(self: *Worker) void {
        const managed: f64 = @floatFromInt(self.static_local(4096, 1));
        var buffer: [1024]u8 align(64) = undefined;
        const realm = self.e.realm_new();
        _ = self.ready.fetchAdd(1, .acq_rel);
        while (!self.go.load(.acquire)) std.atomic.spinLoopHint();
        const scratch = scratchOf(self.e);
        var x: u64 = 0;
        for (0..self.count) |k| {
            if (self.mode == .arithmetic) {
                for (0..64) |j| x = x *% 31 +% j;
            } else if (self.mode == .export_array) {
                exportOnce(self.e, &buffer, realm, @floatFromInt(k % 1000 + 1)) catch
                    self.failed.store(true, .release);
            } else {
                if (self.e.versioned(managed) != 0) self.failed.store(true, .release);
                self.e.journal_release(scratch.owner);
            }
        }
        std.mem.doNotOptimizeAway(x);
        self.finished_ns = wallNs();
    }
};

fn wallNs() u64 {
    const ts = std.posix.clock_gettime(.MONOTONIC) catch return 0;
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

/// Operations per second of `threads` threads doing `count` operations each.
fn throughput(e: Entries, static_local: Static, mode: Mode, threads: usize, count: usize) !f64 {
    var ready = std.atomic.Value(usize).init(0);
    var go = std.atomic.Value(bool).init(false);
    var failed = std.atomic.Value(bool).init(false);
    var workers: [8]Worker = undefined;
    var handles: [8]std.Thread = undefined;
    const n = @min(threads, workers.len);
    for (workers[0..n], handles[0..n]) |*w, *h| {
        w.* = .{
            .e = e,
            .static_local = static_local,
            .mode = mode,
            .count = count,
            .ready = &ready,
            .go = &go,
            .failed = &failed,
        };
        h.* = try std.Thread.spawn(.{}, Worker.run, .{w});
    }
    while (ready.load(.acquire) < n) std.atomic.spinLoopHint();
    const began = wallNs();
    go.store(true, .release);
    var last: u64 = began;
    for (handles[0..n], workers[0..n]) |h, *w| {
        h.join();
        last = @max(last, w.finished_ns);
    }
    if (failed.load(.acquire)) return error.Refused;
    const seconds = @as(f64, @floatFromInt(last - began)) / std.time.ns_per_s;
    return @as(f64, @floatFromInt(n * count)) / seconds;
}

/// Median over `rounds` of 2 threads' throughput over 1 thread's, the two measured alternately.
fn scaling(e: Entries, static_local: Static, mode: Mode, rounds: usize, count: usize) !f64 {
    var ratios: [64]f64 = undefined;
    _ = try throughput(e, static_local, mode, 2, count / 10 + 1);
    for (ratios[0..rounds]) |*r| {
        const one = try throughput(e, static_local, mode, 1, count);
        const two = try throughput(e, static_local, mode, 2, count);
        r.* = two / one;
    }
    std.mem.sort(f64, ratios[0..rounds], {}, std.sort.asc(f64));
    return ratios[rounds / 2];
}

const Options = struct {
    count: usize = 2_000_000,
    rounds: usize = 9,
    threads: bool = false,
    json: bool = false,
};

fn parse(args: []const [:0]u8) !Options {
    var o: Options = .{};
    var i: usize = 3;
    while (i < args.len) : (i += 1) {
        if (std.mem.eql(u8, args[i], "--json")) {
            o.json = true;
        } else if (std.mem.eql(u8, args[i], "--threads")) {
            o.threads = true;
        } else if (i + 1 < args.len) {
            const value = try std.fmt.parseInt(usize, args[i + 1], 10);
            if (std.mem.eql(u8, args[i], "--count")) o.count = @max(value, 1);
            if (std.mem.eql(u8, args[i], "--rounds")) o.rounds = std.math.clamp(value, 1, 64);
            i += 1;
        }
    }
    return o;
}

fn entries(lib: *std.DynLib) !Entries {
    // A library built from other sources would read and write another layout.
    if ((try symbol(Size, lib, "dlpk_description_size"))() != @sizeOf(abi.Description)) {
        return error.StaleLibrary;
    }
    return .{
        .import = try symbol(Import, lib, "dlpk_import"),
        .keyed = try symbol(Import, lib, "dlpk_import_keyed"),
        .describe = try symbol(Import, lib, "dlpk_describe"),
        .release = try symbol(Release, lib, "dlpk_owner_release"),
        .versioned = try symbol(ImportOne, lib, "dlpk_import_versioned"),
        .journal_release = try symbol(Release, lib, "dlpk_journal_release"),
        .scratch = try symbol(Scratch, lib, "dlpk_scratch"),
        .export_array = try symbol(ExportArray, lib, "dlpk_export_array"),
        .export_dispose = try symbol(Dispose, lib, "dlpk_export_dispose"),
        .realm_new = try symbol(RealmNew, lib, "dlpk_realm_new"),
    };
}

pub fn main() !void {
    var gpa: std.heap.DebugAllocator(.{}) = .init;
    defer _ = gpa.deinit();
    const allocator = gpa.allocator();
    const args = try std.process.argsAlloc(allocator);
    defer std.process.argsFree(allocator, args);
    if (args.len < 3) return error.Usage;
    const o = try parse(args);
    var lib = try std.DynLib.open(args[1]);
    defer lib.close();
    var producer = try std.DynLib.open(args[2]);
    defer producer.close();
    const e = try entries(&lib);
    // A keyed record (the keyed import writes past the description), zeroed as the library's is.
    const out = try allocator.alignedAlloc(u8, .@"8", @sizeOf(abi.KeyedDescription));
    defer allocator.free(out);
    @memset(out, 0);
    const static = try symbol(Static, &producer, "tp_static_tensor");
    const managed: f64 = @floatFromInt(static(4096, 1));
    if (managed == 0) return error.OutOfMemory;
    var times: [64]f64 = undefined;
    const modes = [_]Mode{ .import, .keyed, .versioned, .describe, .export_array };
    const names = [_][]const u8{
        "import + release",
        "keyed import + release",
        "versioned import + journal release",
        "describe alone",
        "export of 1 KiB + dispose",
    };
    var medians: [modes.len]f64 = undefined;
    for (modes, names, &medians) |mode, name, *median| {
        _ = try round(e, managed, out, o.count / 10 + 1, mode);
        for (times[0..o.rounds]) |*t| t.* = try round(e, managed, out, o.count, mode);
        median.* = report(name, times[0..o.rounds], o.json);
    }
    var scale: [3]f64 = @splat(std.math.nan(f64));
    if (o.threads) {
        const local = try symbol(Static, &producer, "tp_static_tensor_local");
        for ([_]Mode{ .versioned, .export_array, .arithmetic }, &scale) |mode, *s| {
            s.* = try scaling(e, local, mode, o.rounds, o.count / 4 + 1);
            if (!o.json) std.debug.print("2 threads / 1, {s}: {d:.2}\n", .{ @tagName(mode), s.* });
        }
    }
    if (!o.json) return;
    var buffer: [512]u8 = undefined;
    const format = "{{\"native_import_ns\":{d:.2},\"native_export_ns\":{d:.2}," ++
        "\"native_import_2_threads\":{d:.3},\"native_export_2_threads\":{d:.3}," ++
        "\"native_arithmetic_2_threads\":{d:.3}}}\n";
    const line = try std.fmt.bufPrint(&buffer, format, .{
        medians[2], medians[4], scale[0], scale[1], scale[2],
    });
    try std.fs.File.stdout().writeAll(line);
}
