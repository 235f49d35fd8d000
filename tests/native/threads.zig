//! Releases from many threads at once, through libdlpack's C ABI. Four scenarios, each with
//! `releases` deleter calls spread over `threads` threads started together:
//! 1. imports: foreign tensors imported, each exported once and only the export left holding it;
//!    the consumer threads' export deleters make the producer's deleter run on those threads;
//! 2. one owner: a single import exported `releases` times, all released concurrently, so every
//!    thread races on one reference count and the producer's deleter must run once, at the end;
//! 3. pins: JS-pin owners of two realms (numbering their ids alike, as two JS realms do) exported
//!    and released on the threads while one drainer per realm drains its queue the way the JS
//!    side does; every id must come out exactly once, and only in its own realm;
//! 4. allocations: library allocations exported and released on the threads.
//! Each ends with every per-tensor deleter count at exactly one and the live counters back.

const std = @import("std");
const abi = @import("abi.zig");

comptime {
    _ = @import("libdlpack");
}

pub const Options = struct { releases: usize = 1_000_000, threads: usize = 8 };

// ---------------------------------------------------------------------------------------------
// A foreign producer whose deleters record, per tensor, how often they ran.

const Foreign = extern struct {
    managed: extern union { versioned: abi.Versioned, legacy: abi.Legacy },
    shape: [1]i64,
    strides: [1]i64,
};

var foreign_data = [_]f32{ 1, 2, 3, 4 };
var producer_calls: []std.atomic.Value(u32) = &.{};
var producer_base: usize = 0;

fn recordDeletion(ctx: usize) void {
    _ = producer_calls[ctx - producer_base].fetchAdd(1, .acq_rel);
}

fn foreignVersionedDeleter(m: *abi.Versioned) callconv(.c) void {
    recordDeletion(m.manager_ctx);
}

fn foreignLegacyDeleter(m: *abi.Legacy) callconv(.c) void {
    recordDeletion(m.manager_ctx);
}

fn makeForeign(records: []Foreign) void {
    producer_base = 1;
    for (records, 0..) |*r, i| {
        r.shape = .{4};
        r.strides = .{1};
        const tensor = abi.Tensor{
            .data = @intFromPtr(&foreign_data),
            .device_type = 1,
            .device_id = 0,
            .ndim = 1,
            .code = 2,
            .bits = 32,
            .lanes = 1,
            .shape = @intFromPtr(&r.shape),
            .strides = @intFromPtr(&r.strides),
            .byte_offset = 0,
        };
        // manager_ctx is the record's index (+1, so it is never NULL).
        if (i % 2 == 0) {
            r.managed = .{ .versioned = .{
                .major = 1,
                .minor = 3,
                .manager_ctx = i + 1,
                .deleter = foreignVersionedDeleter,
                .flags = 0,
                .dl_tensor = tensor,
            } };
        } else {
            r.managed = .{ .legacy = .{
                .dl_tensor = tensor,
                .manager_ctx = i + 1,
                .deleter = foreignLegacyDeleter,
            } };
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running consumers on many threads at once

const Exported = struct { managed: usize, versioned: bool };

const Gate = struct {
    ready: std.atomic.Value(usize) = std.atomic.Value(usize).init(0),
    go: std.atomic.Value(bool) = std.atomic.Value(bool).init(false),

    /// Every worker spins here until all have started, so the releases really overlap.
    fn wait(self: *Gate) void {
        _ = self.ready.fetchAdd(1, .acq_rel);
        while (!self.go.load(.acquire)) std.atomic.spinLoopHint();
    }
};

fn consumeShare(gate: *Gate, items: []const Exported, stride: usize, first: usize) void {
    gate.wait();
    var i = first;
    while (i < items.len) : (i += stride) abi.consume(items[i].managed, items[i].versioned);
}

/// Releases `items` from `threads` threads (thread t takes items t, t + threads, ...).
fn consumeAll(items: []const Exported, threads: usize) !void {
    var gate = Gate{};
    var handles: [64]std.Thread = undefined;
    const n = @min(threads, handles.len);
    for (0..n) |t| handles[t] = try std.Thread.spawn(.{}, consumeShare, .{ &gate, items, n, t });
    while (gate.ready.load(.acquire) < n) std.atomic.spinLoopHint();
    gate.go.store(true, .release);
    for (handles[0..n]) |h| h.join();
}

fn exportOf(d: *abi.Description, versioned: bool) !Exported {
    var spec = d.*;
    const status = abi.dlpk_export(if (versioned) abi.export_versioned else 0, @intFromPtr(&spec));
    if (status != 0) return error.ExportFailed;
    return .{ .managed = @intCast(spec.address()), .versioned = versioned };
}

const Counters = struct {
    imports: i64,
    exports: i64,
    allocations: i64,
    allocation_bytes: i64,
    pins: i64,
    pinned_bytes: i64,

    fn now() Counters {
        return .{
            .imports = abi.stat(.imports),
            .exports = abi.stat(.exports),
            .allocations = abi.stat(.allocations),
            .allocation_bytes = abi.stat(.allocation_bytes),
            .pins = abi.stat(.pins),
            .pinned_bytes = abi.stat(.pinned_bytes),
        };
    }
};

fn expectCountersBack(before: Counters, what: []const u8) !void {
    const after = Counters.now();
    if (!std.meta.eql(before, after)) {
        std.debug.print(
            "threads: {s}: live counters did not return: {any} -> {any}\n",
            .{ what, before, after },
        );
        return error.CountersLeaked;
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios

fn importsReleasedOnThreads(n: usize, threads: usize) !void {
    const before = Counters.now();
    const records = try std.heap.c_allocator.alloc(Foreign, n);
    defer std.heap.c_allocator.free(records);
    const calls = try std.heap.c_allocator.alloc(std.atomic.Value(u32), n);
    defer std.heap.c_allocator.free(calls);
    @memset(calls, std.atomic.Value(u32).init(0));
    producer_calls = calls;
    makeForeign(records);
    const exported = try std.heap.c_allocator.alloc(Exported, n);
    defer std.heap.c_allocator.free(exported);
    var d: abi.Description = undefined;
    for (records, 0..) |*r, i| {
        const versioned = i % 2 == 0;
        const options: u32 = if (versioned) abi.import_versioned else 0;
        if (abi.dlpk_import(@intFromPtr(&r.managed), options, @intFromPtr(&d)) != 0) {
            return error.ImportRefused;
        }
        exported[i] = try exportOf(&d, i % 3 == 0);
        // Only the export holds the import now: its deleter, on a consumer thread, ends it.
        abi.dlpk_owner_release(d.owner());
    }
    for (calls) |*c| if (c.load(.acquire) != 0) return error.DeletedTooEarly;
    try consumeAll(exported, threads);
    for (calls, 0..) |*c, i| {
        const count = c.load(.acquire);
        if (count != 1) {
            std.debug.print("threads: import {d}: producer deleter ran {d} times\n", .{ i, count });
            return error.NotExactlyOnce;
        }
    }
    try expectCountersBack(before, "imports");
}

fn oneOwnerManyExports(n: usize, threads: usize) !void {
    const before = Counters.now();
    var record: [1]Foreign = undefined;
    var calls = [_]std.atomic.Value(u32){std.atomic.Value(u32).init(0)};
    producer_calls = &calls;
    makeForeign(&record);
    var d: abi.Description = undefined;
    const managed = @intFromPtr(&record[0].managed);
    const status = abi.dlpk_import(managed, abi.import_versioned, @intFromPtr(&d));
    if (status != 0) return error.ImportRefused;
    const exported = try std.heap.c_allocator.alloc(Exported, n);
    defer std.heap.c_allocator.free(exported);
    for (exported, 0..) |*e, i| e.* = try exportOf(&d, i % 2 == 0);
    abi.dlpk_owner_release(d.owner());
    try consumeAll(exported, threads);
    if (calls[0].load(.acquire) != 1) {
        std.debug.print(
            "threads: shared owner: producer deleter ran {d} times\n",
            .{calls[0].load(.acquire)},
        );
        return error.NotExactlyOnce;
    }
    try expectCountersBack(before, "one owner");
}

var realms_made: [4][2]usize = undefined;
var realm_count: usize = 0;

const Drainer = struct {
    realm: usize,
    seen: []std.atomic.Value(u8),
    duplicates: usize = 0,
    unknown: usize = 0,
    total: usize = 0,
    gate: *Gate,

    fn run(self: *Drainer) void {
        self.gate.wait();
        var buf: [256]f64 = undefined;
        // Drain concurrently with the releases, as the JS side's sweep does, until every id came.
        while (self.total < self.seen.len) {
            const got = abi.dlpk_pins_drain_in(self.realm, &buf, buf.len);
            for (buf[0..got]) |raw| {
                const id: usize = @intFromFloat(raw);
                if (id == 0 or id > self.seen.len) {
                    self.unknown += 1;
                    continue;
                }
                if (self.seen[id - 1].swap(1, .acq_rel) != 0) self.duplicates += 1;
            }
            self.total += got;
            if (got == 0) std.Thread.yield() catch {};
        }
    }
};

/// One export per pin, the pins of the two realms interleaved, so both realms' releases happen on
/// every thread at once. Each export holds the only reference to its pin.
fn exportPins(realms: [2]usize, exported: []Exported) !void {
    var d: abi.Description = undefined;
    for (exported, 0..) |*e, i| {
        const id: f64 = @floatFromInt(i / 2 + 1);
        const status = abi.dlpk_pin_new_in(realms[i % 2], id, 16, @intFromPtr(&d));
        if (status != 0) return error.PinFailed;
        // The export describes some JS memory; its address is never read here.
        d.address_lo = 0x1000;
        d.address_hi = 0;
        d.ndim = 1;
        d.shape[0] = 4;
        d.strides[0] = 1;
        d.device_type = 1;
        d.device_id = 0;
        d.code = 2;
        d.bits = 32;
        d.flags = 0;
        e.* = try exportOf(&d, i % 3 == 1);
        abi.dlpk_owner_release(d.owner());
    }
}

fn pinsReleasedOnThreads(n: usize, threads: usize) !void {
    const before = Counters.now();
    const realms = [2]usize{ abi.dlpk_realm_new(), abi.dlpk_realm_new() };
    if (realms[0] == 0 or realms[1] == 0) return error.RealmFailed;
    // Realm records live for the process (as a JS realm's do); keep them reachable for valgrind.
    realms_made[realm_count % realms_made.len] = realms;
    realm_count += 1;
    std.mem.doNotOptimizeAway(&realms_made);
    const per_realm = n / 2;
    var seen: [2][]std.atomic.Value(u8) = undefined;
    for (&seen) |*s| {
        s.* = try std.heap.c_allocator.alloc(std.atomic.Value(u8), per_realm);
        @memset(s.*, std.atomic.Value(u8).init(0));
    }
    defer for (seen) |s| std.heap.c_allocator.free(s);
    const exported = try std.heap.c_allocator.alloc(Exported, 2 * per_realm);
    defer std.heap.c_allocator.free(exported);
    try exportPins(realms, exported);
    var gate = Gate{};
    var drainers: [2]Drainer = undefined;
    var drain_threads: [2]std.Thread = undefined;
    for (&drainers, &drain_threads, 0..) |*dr, *t, r| {
        dr.* = .{ .realm = realms[r], .seen = seen[r], .gate = &gate };
        t.* = try std.Thread.spawn(.{}, Drainer.run, .{dr});
    }
    var handles: [64]std.Thread = undefined;
    const t_count = @min(threads, handles.len);
    for (0..t_count) |t| handles[t] = try std.Thread.spawn(
        .{},
        consumeShare,
        .{ &gate, exported, t_count, t },
    );
    while (gate.ready.load(.acquire) < t_count + 2) std.atomic.spinLoopHint();
    gate.go.store(true, .release);
    for (handles[0..t_count]) |h| h.join();
    for (drain_threads) |t| t.join();
    for (drainers, 0..) |dr, r| {
        if (dr.duplicates != 0 or dr.unknown != 0 or dr.total != per_realm) {
            std.debug.print("threads: pins of realm {d}: {d} drained, {d} duplicates, " ++
                "{d} unknown ids (expected {d})\n", .{
                r, dr.total, dr.duplicates, dr.unknown, per_realm,
            });
            return error.NotExactlyOnce;
        }
        for (dr.seen, 0..) |*s, i| if (s.load(.acquire) != 1) {
            std.debug.print("threads: pin {d} of realm {d} never drained\n", .{ i + 1, r });
            return error.NotExactlyOnce;
        };
    }
    try expectCountersBack(before, "pins");
}

fn allocationsReleasedOnThreads(n: usize, threads: usize) !void {
    const before = Counters.now();
    // Two exports per allocation, so the last release happens on whichever thread loses the race.
    const count = n / 2;
    const exported = try std.heap.c_allocator.alloc(Exported, count * 2);
    defer std.heap.c_allocator.free(exported);
    var d: abi.Description = undefined;
    for (0..count) |i| {
        if (abi.dlpk_alloc(16, 64, 1, @intFromPtr(&d)) != 0) return error.AllocFailed;
        d.ndim = 1;
        d.shape[0] = 4;
        d.strides[0] = 1;
        d.device_type = 1;
        d.device_id = 0;
        d.code = 2;
        d.bits = 32;
        d.flags = 0;
        exported[2 * i] = try exportOf(&d, true);
        exported[2 * i + 1] = try exportOf(&d, false);
        abi.dlpk_owner_release(d.owner());
    }
    try consumeAll(exported, threads);
    try expectCountersBack(before, "allocations");
}

pub fn runAll(options: Options, report: bool) !void {
    const scenarios = .{
        .{ "imports", importsReleasedOnThreads },
        .{ "one owner", oneOwnerManyExports },
        .{ "pins", pinsReleasedOnThreads },
        .{ "allocations", allocationsReleasedOnThreads },
    };
    var timer = try std.time.Timer.start();
    inline for (scenarios) |s| {
        const start = timer.read();
        try s[1](options.releases, options.threads);
        if (report) {
            const seconds = @as(f64, @floatFromInt(timer.read() - start)) / 1e9;
            std.debug.print("threads: {s}: {d} releases on {d} threads, each deleter exactly " ++
                "once, counters back ({d:.2} s)\n", .{
                s[0], options.releases, options.threads, seconds,
            });
        }
    }
}

/// `reliability threads [--releases N] [--threads T]`
pub fn run(args: *std.process.ArgIterator) !void {
    var options = Options{};
    while (args.next()) |arg| {
        const value = args.next() orelse return error.InvalidArguments;
        if (std.mem.eql(u8, arg, "--releases")) {
            options.releases = try std.fmt.parseInt(usize, value, 10);
        } else if (std.mem.eql(u8, arg, "--threads")) {
            options.threads = try std.fmt.parseInt(usize, value, 10);
        } else return error.InvalidArguments;
    }
    runAll(options, true) catch |e| {
        std.debug.print("threads: FAILED: {s}\n", .{@errorName(e)});
        std.process.exit(1);
    };
}

test "every scenario with 20,000 releases on 8 threads" {
    try runAll(.{ .releases = 20_000, .threads = 8 }, false);
}
