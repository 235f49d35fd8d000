//! The cases of `zig build bench-import` beyond one known tensor (tests/native/import_loop.zig):
//! - misses: an import of a tensor (struct, shape and data in one block) in a mapping the library
//!   has never seen (a producer whose allocations keep mapping new memory), against the same import
//!   in a known mapping, with the process's own mappings and again with 20,000 more;
//! - threads: imports (and exports of a thread's own buffer) on 1 and on T threads at once, each
//!   thread with a tensor of its own made on that thread (in its own malloc arena, its deleter
//!   counting per thread), as throughput.
//! Misses are timed call by call (wall time, medians: the mapping and unmapping around each call is
//! left out); threads in wall time with thread CPU time beside it.

const std = @import("std");
const abi = @import("abi");

/// The general door, `dlpk_import(address, options)`: into this thread's scratch, the owner record
/// journaled.
pub const Import = *const fn (usize, u32) callconv(.c) i32;
pub const Release = *const fn (f64) callconv(.c) void;
pub const ImportOne = *const fn (f64) callconv(.c) i32;
pub const RealmNew = *const fn () callconv(.c) f64;
pub const ExportArray = *const fn (?[*]u8, f64, f64, f64, u32) callconv(.c) f64;
pub const ExportDispose = *const fn (f64) callconv(.c) f64;

/// The library's entries these cases call.
pub const Entries = struct {
    import: Import,
    release: Release,
    versioned: ImportOne,
    journal_release: Release,
    /// `dlpk_scratch`: this thread's keyed description (each thread has its own).
    scratch: *const fn () callconv(.c) f64,
    realm_new: RealmNew,
    export_array: ExportArray,
    export_dispose: ExportDispose,
};

pub fn threadNs() u64 {
    const ts = std.posix.clock_gettime(.THREAD_CPUTIME_ID) catch return 0;
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

fn wallNs() u64 {
    const ts = std.posix.clock_gettime(.MONOTONIC) catch return 0;
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

// ---------------------------------------------------------------------------------------------
// Misses

/// A producer's tensor of 512 float32, its struct, shape and data in one page (as a producer
/// that allocates each tensor in one block lays them out).
const Fresh = extern struct {
    major: u32 = 1,
    minor: u32 = 3,
    manager_ctx: usize = 0,
    deleter: ?*const fn (*Fresh) callconv(.c) void = freshDeleter,
    flags: u64 = 0,
    data: usize = 0,
    device_type: i32 = 1,
    device_id: i32 = 0,
    ndim: i32 = 1,
    code: u8 = 2,
    bits: u8 = 32,
    lanes: u16 = 1,
    shape: usize = 0,
    strides: usize = 0,
    byte_offset: u64 = 0,
    extent: i64 = 512,

    /// Lays a tensor out in `block`: the struct, its shape, then the data from byte 128.
    fn in(block: []align(page) u8) usize {
        const t: *Fresh = @ptrCast(block.ptr);
        t.* = .{};
        t.shape = @intFromPtr(&t.extent);
        t.data = @intFromPtr(block.ptr) + 128;
        return @intFromPtr(t);
    }
};

comptime {
    std.debug.assert(@offsetOf(Fresh, "extent") == 80);
    std.debug.assert(@sizeOf(Fresh) + 512 * 4 <= 4096);
}

/// Per thread: a deleter that writes memory other threads write too would be a limit of the
/// producer's, not the library's.
threadlocal var fresh_deletes: usize = 0;

fn freshDeleter(_: *Fresh) callconv(.c) void {
    fresh_deletes += 1;
}

const page = std.heap.page_size_min;
/// Where fresh mappings go: each at an address no earlier one used, so nothing remembers it.
var fresh_next: usize = 0x3a00_0000_0000;

fn mapFresh() ![]align(page) u8 {
    const at = fresh_next;
    fresh_next += 16 * page;
    return std.posix.mmap(
        @ptrFromInt(at),
        page,
        std.posix.PROT.READ | std.posix.PROT.WRITE,
        .{ .TYPE = .PRIVATE, .ANONYMOUS = true },
        -1,
        0,
    );
}

/// The median ns of one import + release (wall time of that call pair alone, minus the clock's
/// own cost) of a tensor in a page mapped just before (and unmapped after) when `known` is null,
/// else in `known`, mapped and imported before.
fn missRound(e: Entries, samples: []u64, known: ?[]align(page) u8) !f64 {
    const keyed: *const KeyedDescription = @ptrFromInt(@as(usize, @intFromFloat(e.scratch())));
    for (samples) |*sample| {
        const region = if (known == null) try mapFresh() else null;
        defer if (region) |r| std.posix.munmap(r);
        const managed = Fresh.in(region orelse known.?);
        const began = wallNs();
        if (e.import(managed, abi.import_option.versioned) != 0) return error.Refused;
        // The release ends the entry the import journaled, as a JS dispose does.
        e.journal_release(keyed.owner);
        sample.* = wallNs() - began;
    }
    return @as(f64, @floatFromInt(medianNs(samples))) - clockNs(samples);
}

fn medianNs(samples: []u64) u64 {
    std.mem.sort(u64, samples, {}, std.sort.asc(u64));
    return samples[samples.len / 2];
}

/// The median cost of reading the clock twice, as the rounds above do around each call pair.
fn clockNs(samples: []u64) f64 {
    for (samples) |*sample| {
        const began = wallNs();
        sample.* = wallNs() - began;
    }
    return @floatFromInt(medianNs(samples));
}

const KeyedDescription = abi.KeyedDescription;

/// Adds `pairs` x 2 mappings (a read-write page next to a read-only one, so none merge).
fn addMappings(pairs: usize) !void {
    for (0..pairs) |_| {
        const region = try std.posix.mmap(
            null,
            2 * page,
            std.posix.PROT.READ | std.posix.PROT.WRITE,
            .{ .TYPE = .PRIVATE, .ANONYMOUS = true },
            -1,
            0,
        );
        try std.posix.mprotect(@alignCast(region[page..]), std.posix.PROT.READ);
    }
}

fn mappingCount() usize {
    const file = std.fs.openFileAbsolute("/proc/self/maps", .{}) catch return 0;
    defer file.close();
    const text = file.readToEndAlloc(std.heap.page_allocator, 64 << 20) catch return 0;
    defer std.heap.page_allocator.free(text);
    return std.mem.count(u8, text, "\n");
}

/// The miss rows: at the process's mappings, then with `extra` more, each against a known-mapping
/// import timed the same way in the same round (medians of `rounds` rounds of `count` calls).
pub fn misses(e: Entries, count: usize, rounds: usize, extra: usize) !void {
    const samples = try std.heap.page_allocator.alloc(u64, count);
    defer std.heap.page_allocator.free(samples);
    const known = try mapFresh();
    defer std.posix.munmap(known);
    var stage: usize = 0;
    while (stage < 2) : (stage += 1) {
        if (stage == 1) try addMappings(extra / 2);
        var missed: [64]f64 = undefined;
        var hit: [64]f64 = undefined;
        _ = try missRound(e, samples, null);
        _ = try missRound(e, samples, known);
        for (0..rounds) |i| {
            missed[i] = try missRound(e, samples, null);
            hit[i] = try missRound(e, samples, known);
        }
        std.mem.sort(f64, missed[0..rounds], {}, std.sort.asc(f64));
        std.mem.sort(f64, hit[0..rounds], {}, std.sort.asc(f64));
        const m = missed[rounds / 2];
        const h = hit[rounds / 2];
        std.debug.print(
            "import + release of a tensor in a mapping never seen ({d} mappings): " ++
                "median {d:.1} ns (best round {d:.1}), {d:.1}x the same import of known data " ++
                "({d:.1} ns, timed alike)\n",
            .{ mappingCount(), m, missed[0], m / h, h },
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Threads

/// `control`: arithmetic only, what the machine lets two threads get at all.
pub const Mode = enum { import, export_array, control };

const Worker = struct {
    e: Entries,
    mode: Mode,
    count: usize,
    gate: *std.atomic.Value(bool),
    cpu_ns: u64 = 0,
    failed: bool = false,
    /// The control's result, kept so the arithmetic is not optimised away.
    sink: u64 = 0,

    fn run(self: *Worker) void {
        self.loop() catch {
            self.failed = true;
        };
    }

    fn loop(self: *Worker) !void {
        const e = self.e;
        // Made on this thread: its memory comes from this thread's malloc arena.
        const block = try std.heap.c_allocator.alignedAlloc(u8, .fromByteUnits(page), page);
        defer std.heap.c_allocator.free(block);
        const managed: f64 = @floatFromInt(Fresh.in(block));
        const buffer = try std.heap.c_allocator.alloc(u8, 1024);
        defer std.heap.c_allocator.free(buffer);
        const realm = e.realm_new();
        const keyed: *const KeyedDescription = @ptrFromInt(@as(usize, @intFromFloat(e.scratch())));
        while (!self.gate.load(.acquire)) std.atomic.spinLoopHint();
        const began = threadNs();
        // Versioned float32 (code 2, 32 bits), no flags.
        const word: u32 = 2 | 32 << 8 | 1 << 24;
        for (0..self.count) |i| switch (self.mode) {
            .import => {
                if (e.versioned(managed) != 0) return error.Refused;
                e.journal_release(keyed.owner);
            },
            .export_array => {
                const id: f64 = @floatFromInt(i + 1);
                const m = e.export_array(buffer.ptr, realm, id, 1024, word);
                if (m <= 0) return error.Refused;
                _ = e.export_dispose(abi.structEntry(@intFromFloat(m), true));
            },
            .control => {
                var x = self.sink +% i;
                for (0..64) |k| x = x *% 6364136223846793005 +% k;
                self.sink = x;
            },
        };
        self.cpu_ns = threadNs() - began;
    }
};

/// Runs `threads` workers of `mode` started together; returns operations per second of wall time
/// and the mean thread CPU ns per operation.
fn throughput(e: Entries, mode: Mode, threads: usize, count: usize) ![2]f64 {
    var gate = std.atomic.Value(bool).init(false);
    var workers: [16]Worker = undefined;
    var handles: [16]std.Thread = undefined;
    for (0..threads) |t| {
        workers[t] = .{ .e = e, .mode = mode, .count = count, .gate = &gate };
        handles[t] = try std.Thread.spawn(.{}, Worker.run, .{&workers[t]});
    }
    std.Thread.sleep(20 * std.time.ns_per_ms);
    const began = wallNs();
    gate.store(true, .release);
    var cpu: f64 = 0;
    for (handles[0..threads], workers[0..threads]) |h, *w| {
        h.join();
        if (w.failed) return error.Refused;
        cpu += @floatFromInt(w.cpu_ns);
    }
    const seconds = @as(f64, @floatFromInt(wallNs() - began)) / 1e9;
    const ops: f64 = @floatFromInt(threads * count);
    return .{ ops / seconds, cpu / ops };
}

/// The thread rows: 1 thread, then `threads` at once, alternated `rounds` times (medians).
/// Returns the throughput ratios of imports, exports and the control.
pub fn scaling(e: Entries, threads: usize, count: usize, rounds: usize) ![3]f64 {
    var ratios: [3]f64 = undefined;
    for ([_]Mode{ .import, .export_array, .control }, &ratios) |mode, *ratio| {
        var one: [64][2]f64 = undefined;
        var many: [64][2]f64 = undefined;
        for (0..rounds) |i| {
            one[i] = try throughput(e, mode, 1, count);
            many[i] = try throughput(e, mode, threads, count);
        }
        const rate_one = medianOf(one[0..rounds], 0);
        const rate_many = medianOf(many[0..rounds], 0);
        const cpu_one = medianOf(one[0..rounds], 1);
        const cpu_many = medianOf(many[0..rounds], 1);
        ratio.* = rate_many / rate_one;
        std.debug.print(
            "{s} on {d} threads: {d:.2}x the throughput of 1 ({d:.1} vs {d:.1} M/s wall); " ++
                "thread CPU per operation {d:.1} vs {d:.1} ns, so {d:.2}x where the threads " ++
                "had the cores ({d} rounds)\n",
            .{
                switch (mode) {
                    .import => "versioned import + journal release",
                    .export_array => "export + dispose",
                    .control => "arithmetic control",
                },
                threads,
                rate_many / rate_one,
                rate_many / 1e6,
                rate_one / 1e6,
                cpu_many,
                cpu_one,
                cpu_one / cpu_many * @as(f64, @floatFromInt(threads)),
                rounds,
            },
        );
    }
    return ratios;
}

/// The median thread CPU ns of one `mode` operation on one thread (`rounds` rounds of `count`):
/// the native part of a JS import + dispose, or export + dispose.
pub fn singleNs(e: Entries, mode: Mode, count: usize, rounds: usize) !f64 {
    var samples: [64][2]f64 = undefined;
    for (samples[0..rounds]) |*s| s.* = try throughput(e, mode, 1, count);
    return medianOf(samples[0..rounds], 1);
}

fn medianOf(samples: [][2]f64, field: usize) f64 {
    var values: [64]f64 = undefined;
    for (samples, 0..) |s, i| values[i] = s[field];
    std.mem.sort(f64, values[0..samples.len], {}, std.sort.asc(f64));
    return values[samples.len / 2];
}
