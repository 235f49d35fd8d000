//! A foreign producer and consumer for the test suites: builds managed tensors of either
//! generation from an explicit field list (hostile ones included), counts every deleter call, and
//! consumes exports the way another library would (calling their deleters, from other threads too).

const std = @import("std");
const dlpack = @import("dlpack");
const listing = @import("listing.zig");

var made = std.atomic.Value(u32).init(0);
var deleted = std.atomic.Value(u32).init(0);

/// Field positions in the i64 spec array the tests fill (tests/support/producer.ts mirrors them).
const Spec = struct {
    const versioned = 0;
    const major = 1;
    const minor = 2;
    const flags = 3;
    const code = 4;
    const bits = 5;
    const lanes = 6;
    const device_type = 7;
    const device_id = 8;
    const ndim = 9;
    const shape_null = 10;
    const strides_null = 11;
    const byte_offset = 12;
    /// 0: allocate `data_bytes` (zeroed), 1: NULL, 2: use `data_address`.
    const data_mode = 13;
    const data_bytes = 14;
    const data_address = 15;
    /// 0: the counting deleter, 1: a NULL deleter.
    const deleter_mode = 16;
    const shape = 17;
    const strides = 17 + dlpack.rank_max;
    const len = 17 + 2 * dlpack.rank_max;
};

/// One allocation holds the struct, its shape/strides arrays and the data.
const Block = struct {
    versioned: dlpack.ManagedTensorVersioned,
    legacy: dlpack.ManagedTensor,
    shape: [dlpack.rank_max]i64,
    strides: [dlpack.rank_max]i64,
    data: ?[]align(64) u8,
};

fn freeBlock(block: *Block) void {
    if (block.data) |bytes| std.heap.c_allocator.free(bytes);
    std.heap.c_allocator.destroy(block);
    _ = deleted.fetchAdd(1, .acq_rel);
}

fn versionedDeleter(self: *dlpack.ManagedTensorVersioned) callconv(.c) void {
    freeBlock(@ptrCast(@alignCast(self.manager_ctx.?)));
}

fn legacyDeleter(self: *dlpack.ManagedTensor) callconv(.c) void {
    freeBlock(@ptrCast(@alignCast(self.manager_ctx.?)));
}

/// Returns the managed tensor's address, or 0 when out of memory.
export fn tp_make(spec: [*]const i64) usize {
    const block = std.heap.c_allocator.create(Block) catch return 0;
    const ndim_raw = spec[Spec.ndim];
    const stored: usize = @intCast(std.math.clamp(ndim_raw, 0, dlpack.rank_max));
    for (0..stored) |d| {
        block.shape[d] = spec[Spec.shape + d];
        block.strides[d] = spec[Spec.strides + d];
    }
    block.data = null;
    var data: ?*anyopaque = null;
    switch (spec[Spec.data_mode]) {
        0 => {
            const n: usize = @intCast(@max(spec[Spec.data_bytes], 1));
            const bytes = std.heap.c_allocator.alignedAlloc(u8, .@"64", n) catch {
                std.heap.c_allocator.destroy(block);
                return 0;
            };
            @memset(bytes, 0);
            block.data = bytes;
            data = bytes.ptr;
        },
        1 => data = null,
        else => data = @ptrFromInt(@as(usize, @bitCast(spec[Spec.data_address]))),
    }
    const tensor = dlpack.Tensor{
        .data = data,
        .device = .{
            .device_type = @intCast(spec[Spec.device_type]),
            .device_id = @intCast(spec[Spec.device_id]),
        },
        .ndim = @intCast(ndim_raw),
        .dtype = .{
            .code = @intCast(spec[Spec.code]),
            .bits = @intCast(spec[Spec.bits]),
            .lanes = @intCast(spec[Spec.lanes]),
        },
        .shape = if (spec[Spec.shape_null] != 0) null else &block.shape,
        .strides = if (spec[Spec.strides_null] != 0) null else &block.strides,
        .byte_offset = @bitCast(spec[Spec.byte_offset]),
    };
    const counted = spec[Spec.deleter_mode] == 0;
    _ = made.fetchAdd(1, .acq_rel);
    if (spec[Spec.versioned] != 0) {
        block.versioned = .{
            .version = .{
                .major = @intCast(spec[Spec.major]),
                .minor = @intCast(spec[Spec.minor]),
            },
            .manager_ctx = block,
            .deleter = if (counted) versionedDeleter else null,
            .flags = @bitCast(spec[Spec.flags]),
            .dl_tensor = tensor,
        };
        return @intFromPtr(&block.versioned);
    }
    block.legacy = .{
        .dl_tensor = tensor,
        .manager_ctx = block,
        .deleter = if (counted) legacyDeleter else null,
    };
    return @intFromPtr(&block.legacy);
}

export fn tp_spec_len() u32 {
    return Spec.len;
}

/// The data pointer the producer allocated (before byte_offset).
export fn tp_data(managed: usize, versioned: u32) usize {
    const tensor = tensorOf(managed, versioned != 0);
    return @intFromPtr(tensor.data);
}

/// Frees a block made with a NULL deleter (nobody else can).
export fn tp_free_uncounted(managed: usize, versioned: u32) void {
    const ctx = if (versioned != 0)
        @as(*dlpack.ManagedTensorVersioned, @ptrFromInt(managed)).manager_ctx
    else
        @as(*dlpack.ManagedTensor, @ptrFromInt(managed)).manager_ctx;
    const block: *Block = @ptrCast(@alignCast(ctx.?));
    if (block.data) |bytes| std.heap.c_allocator.free(bytes);
    std.heap.c_allocator.destroy(block);
}

export fn tp_made() u32 {
    return made.load(.acquire);
}

export fn tp_deleted() u32 {
    return deleted.load(.acquire);
}

fn tensorOf(managed: usize, versioned: bool) *dlpack.Tensor {
    if (versioned) return &@as(*dlpack.ManagedTensorVersioned, @ptrFromInt(managed)).dl_tensor;
    return &@as(*dlpack.ManagedTensor, @ptrFromInt(managed)).dl_tensor;
}

// ---------------------------------------------------------------------------------------------
// The consumer side: what another library does with a tensor this library exported.

/// Copies the fields a consumer sees into `out` (i64 words: data, device type, device id, ndim,
/// code, bits, lanes, byte_offset, flags, version major, minor, then shape and strides). Returns
/// ndim, or -1 when the strides pointer is NULL for ndim > 0.
export fn tp_inspect(managed: usize, versioned: u32, out: [*]i64) i32 {
    const t = tensorOf(managed, versioned != 0);
    out[0] = @bitCast(@as(u64, @intFromPtr(t.data)));
    out[1] = t.device.device_type;
    out[2] = t.device.device_id;
    out[3] = t.ndim;
    out[4] = t.dtype.code;
    out[5] = t.dtype.bits;
    out[6] = t.dtype.lanes;
    out[7] = @bitCast(t.byte_offset);
    if (versioned != 0) {
        const m: *dlpack.ManagedTensorVersioned = @ptrFromInt(managed);
        out[8] = @bitCast(m.flags);
        out[9] = m.version.major;
        out[10] = m.version.minor;
    } else {
        out[8] = 0;
        out[9] = -1;
        out[10] = -1;
    }
    const ndim: usize = @intCast(@max(t.ndim, 0));
    for (0..@min(ndim, dlpack.rank_max)) |d| {
        out[11 + d] = if (t.shape) |s| s[d] else -1;
        out[11 + dlpack.rank_max + d] = if (t.strides) |s| s[d] else 0;
    }
    if (ndim > 0 and t.strides == null) return -1;
    return t.ndim;
}

/// Calls the tensor's deleter, as a consumer does when it is done.
export fn tp_consume(managed: usize, versioned: u32) void {
    dlpack.deleteManaged(managed, versioned != 0);
}

fn consumeWorker(managed: usize, versioned: bool) void {
    dlpack.deleteManaged(managed, versioned);
}

/// Calls the deleter from a new thread and waits for it: exports must tolerate any thread.
export fn tp_consume_on_thread(managed: usize, versioned: u32) i32 {
    const thread = std.Thread.spawn(
        .{},
        consumeWorker,
        .{ managed, versioned != 0 },
    ) catch return -1;
    thread.join();
    return 0;
}

const Batch = struct {
    items: []const usize,
    versioned: bool,
    fn run(self: Batch) void {
        for (self.items) |m| dlpack.deleteManaged(m, self.versioned);
    }
};

/// Releases `count` tensors from `threads` threads at once (each thread takes an interleaved
/// share).
export fn tp_consume_many(managed: [*]const f64, count: u32, versioned: u32, threads: u32) i32 {
    const n_threads: usize = std.math.clamp(threads, 1, 64);
    const all = std.heap.c_allocator.alloc(usize, count) catch return -1;
    defer std.heap.c_allocator.free(all);
    for (all, 0..) |*slot, i| slot.* = @intFromFloat(managed[i]);
    var handles: [64]std.Thread = undefined;
    const chunk = (all.len + n_threads - 1) / n_threads;
    var started: usize = 0;
    while (started < n_threads) : (started += 1) {
        const lo = @min(started * chunk, all.len);
        const hi = @min(lo + chunk, all.len);
        handles[started] = std.Thread.spawn(
            .{},
            Batch.run,
            .{Batch{ .items = all[lo..hi], .versioned = versioned != 0 }},
        ) catch {
            Batch.run(.{ .items = all[lo..], .versioned = versioned != 0 });
            break;
        };
    }
    for (handles[0..started]) |h| h.join();
    return 0;
}

/// Makes this library look like a libdlpack of another ABI, so the loader's mismatch error can be
/// tested (DLPACK_LIB pointed here).
export fn dlpk_abi_version() u32 {
    return 0xFFFF;
}

fn readElement(base: usize, dtype: dlpack.DataType) f64 {
    return switch (dtype.code) {
        0 => switch (dtype.bits) {
            8 => @floatFromInt(@as(*const i8, @ptrFromInt(base)).*),
            16 => @floatFromInt(@as(*align(1) const i16, @ptrFromInt(base)).*),
            32 => @floatFromInt(@as(*align(1) const i32, @ptrFromInt(base)).*),
            64 => @floatFromInt(@as(*align(1) const i64, @ptrFromInt(base)).*),
            else => std.math.nan(f64),
        },
        1, 6 => switch (dtype.bits) {
            8 => @floatFromInt(@as(*const u8, @ptrFromInt(base)).*),
            16 => @floatFromInt(@as(*align(1) const u16, @ptrFromInt(base)).*),
            32 => @floatFromInt(@as(*align(1) const u32, @ptrFromInt(base)).*),
            64 => @floatFromInt(@as(*align(1) const u64, @ptrFromInt(base)).*),
            else => std.math.nan(f64),
        },
        2 => switch (dtype.bits) {
            16 => @floatCast(@as(*align(1) const f16, @ptrFromInt(base)).*),
            32 => @floatCast(@as(*align(1) const f32, @ptrFromInt(base)).*),
            64 => @as(*align(1) const f64, @ptrFromInt(base)).*,
            else => std.math.nan(f64),
        },
        else => std.math.nan(f64),
    };
}

/// Reads every element of a tensor in C order, honouring shape, strides and byte_offset the way a
/// consumer must, into `out` as f64 (int, uint, bool and float dtypes). Returns the element count,
/// or -1 when it exceeds `capacity`.
export fn tp_read_values(managed: usize, versioned: u32, out: [*]f64, capacity: u32) f64 {
    const t = tensorOf(managed, versioned != 0);
    const ndim: usize = @intCast(t.ndim);
    var size: usize = 1;
    for (0..ndim) |d| size *= @intCast(t.shape.?[d]);
    if (size > capacity) return -1;
    if (size == 0) return 0;
    const itemsize: i64 = t.dtype.bits / 8;
    const base: i64 = @intCast(@intFromPtr(t.data) + t.byte_offset);
    var index: [dlpack.rank_max]i64 = [_]i64{0} ** dlpack.rank_max;
    for (0..size) |k| {
        var offset: i64 = 0;
        for (0..ndim) |d| {
            const stride = if (t.strides) |s| s[d] else blk: {
                var step: i64 = 1;
                for (d + 1..ndim) |e| step *= t.shape.?[e];
                break :blk step;
            };
            offset += index[d] * stride;
        }
        out[k] = readElement(@intCast(base + offset * itemsize), t.dtype);
        var d = ndim;
        while (d > 0) {
            d -= 1;
            index[d] += 1;
            if (index[d] < t.shape.?[d]) break;
            index[d] = 0;
        }
    }
    return @floatFromInt(size);
}

// ---------------------------------------------------------------------------------------------
// Benchmark producer: one reusable tensor whose deleter only counts, so a benchmark loop measures
// the consumer's import and release alone (the producer does no work per iteration).

const StaticTensor = struct {
    managed: dlpack.ManagedTensorVersioned,
    shape: [2]i64,
    strides: [2]i64,
};

fn countingDeleter(self: *dlpack.ManagedTensorVersioned) callconv(.c) void {
    _ = self;
    _ = deleted.fetchAdd(1, .monotonic);
}

/// A versioned float32 tensor over `bytes` of fresh, untouched memory (so importing a huge one
/// shows whether the consumer touches the data), shaped [rows, bytes / 4 / rows]. Never freed.
export fn tp_static_tensor(bytes: f64, rows: u32) usize {
    const size: usize = @intFromFloat(bytes);
    const memory = std.c.malloc(@max(size, 1)) orelse return 0;
    const t = std.heap.c_allocator.create(StaticTensor) catch return 0;
    const r: i64 = @max(rows, 1);
    const cols: i64 = @divTrunc(@as(i64, @intCast(size / 4)), r);
    t.shape = .{ r, cols };
    t.strides = .{ cols, 1 };
    t.managed = .{
        .version = .{ .major = 1, .minor = 3 },
        .manager_ctx = null,
        .deleter = countingDeleter,
        .flags = 0,
        .dl_tensor = .{
            .data = memory,
            .device = .{ .device_type = 1, .device_id = 0 },
            .ndim = 2,
            .dtype = .{ .code = 2, .bits = 32, .lanes = 1 },
            .shape = &t.shape,
            .strides = &t.strides,
            .byte_offset = 0,
        },
    };
    return @intFromPtr(&t.managed);
}

/// `tp_static_tensor` whose deleter counts in a counter of the calling thread (`tp_deleted_here`):
/// threads importing their own tensors then write no cache line in common, which a shared atomic
/// counter would make them fight over (the benchmark's thread-scaling rows).
export fn tp_static_tensor_local(bytes: f64, rows: u32) usize {
    const address = tp_static_tensor(bytes, rows);
    if (address == 0) return 0;
    const managed: *dlpack.ManagedTensorVersioned = @ptrFromInt(address);
    managed.deleter = threadCountingDeleter;
    return address;
}

threadlocal var deleted_here: u64 = 0;

fn threadCountingDeleter(self: *dlpack.ManagedTensorVersioned) callconv(.c) void {
    _ = self;
    deleted_here += 1;
}

/// How many `tp_static_tensor_local` deleters ran on this thread.
export fn tp_deleted_here() f64 {
    return @floatFromInt(deleted_here);
}

// Empty functions of the signatures the JS import and export call (dlpk_import_versioned,
// dlpk_journal_release, dlpk_export_array, dlpk_export_dispose): the benchmark's floor is their
// FFI cost plus the native work alone.
export fn tp_nop_import(address: f64) i32 {
    _ = address;
    return 0;
}

export fn tp_nop_release(owner: f64) void {
    _ = owner;
}

export fn tp_nop_export(buffer: ?[*]u8, realm: f64, id: f64, bytes: f64, word: u32) f64 {
    _ = .{ buffer, realm, id, bytes, word };
    return 1;
}

export fn tp_nop_dispose(entry: f64) f64 {
    _ = entry;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Benchmark producer of tensors in memory nobody has seen: each in a page mapped for it alone
// (the struct, its shape and 512 float32), at an address no earlier page used, as a producer whose
// allocations keep mapping new memory. Their deleter does nothing: the pages are unmapped after a
// timed loop, so the loop times the consumer alone.

const page_bytes = std.heap.page_size_min;
var fresh_next = std.atomic.Value(usize).init(0x3a80_0000_0000);

const FreshTensor = struct {
    managed: dlpack.ManagedTensorVersioned,
    shape: [1]i64,
};

fn idleDeleter(_: *dlpack.ManagedTensorVersioned) callconv(.c) void {}

/// Makes `count` versioned float32 tensors, each in a page of its own, writing their addresses
/// into `out`; returns how many were made.
export fn tp_fresh_tensors(count: u32, out: [*]f64) u32 {
    const prot = std.posix.PROT.READ | std.posix.PROT.WRITE;
    const anonymous: std.posix.MAP = .{ .TYPE = .PRIVATE, .ANONYMOUS = true };
    for (0..count) |i| {
        const at = fresh_next.fetchAdd(16 * page_bytes, .monotonic);
        const region = std.posix.mmap(@ptrFromInt(at), page_bytes, prot, anonymous, -1, 0) catch
            return @intCast(i);
        const t: *FreshTensor = @ptrCast(@alignCast(region.ptr));
        t.shape = .{512};
        t.managed = .{
            .version = .{ .major = 1, .minor = 3 },
            .manager_ctx = null,
            .deleter = idleDeleter,
            .flags = 0,
            .dl_tensor = .{
                .data = region.ptr + 128,
                .device = .{ .device_type = 1, .device_id = 0 },
                .ndim = 1,
                .dtype = .{ .code = 2, .bits = 32, .lanes = 1 },
                .shape = &t.shape,
                .strides = null,
                .byte_offset = 0,
            },
        };
        out[i] = @floatFromInt(@intFromPtr(t));
    }
    return count;
}

/// Unmaps the pages of `count` tensors `tp_fresh_tensors` made (after they were released).
export fn tp_fresh_unmap(tensors: [*]const f64, count: u32) void {
    for (tensors[0..count]) |address| {
        const region: [*]align(page_bytes) u8 = @ptrFromInt(@as(usize, @intFromFloat(address)));
        std.posix.munmap(region[0..page_bytes]);
    }
}

/// Maps `pairs` more pairs of pages, a read-write one next to a read-only one (two mappings that
/// never merge); never unmapped. Returns how many pairs were mapped.
export fn tp_add_mappings(pairs: u32) u32 {
    const prot = std.posix.PROT.READ | std.posix.PROT.WRITE;
    const anonymous: std.posix.MAP = .{ .TYPE = .PRIVATE, .ANONYMOUS = true };
    for (0..pairs) |i| {
        const region = std.posix.mmap(null, 2 * page_bytes, prot, anonymous, -1, 0) catch
            return @intCast(i);
        std.posix.mprotect(@alignCast(region[page_bytes..]), std.posix.PROT.READ) catch
            return @intCast(i);
    }
    return pairs;
}

// ---------------------------------------------------------------------------------------------
// Bulk helpers for the thread and soak tests (tests/reliability/threads.test.ts, tests/soak/):
// many tensors per FFI call, and releases that run on native threads while the JS thread keeps
// working.

/// Makes `count` tensors from one spec; writes their addresses into `out`. Returns how many were
/// made (fewer when out of memory).
export fn tp_make_many(spec: [*]const i64, count: u32, out: [*]f64) u32 {
    for (0..count) |i| {
        const address = tp_make(spec);
        if (address == 0) return @intCast(i);
        out[i] = @floatFromInt(address);
    }
    return count;
}

/// A batch of releases running on native threads. Entries are `address * 2 + versioned`.
const Release = struct {
    items: []usize,
    threads: [64]std.Thread = undefined,
    /// The number of workers; also the stride each one walks `items` with.
    workers: usize = 0,
    /// Threads to join (0 when the releases ran on the caller's thread).
    joinable: usize = 0,
    go: std.atomic.Value(bool) = std.atomic.Value(bool).init(false),
    ready: std.atomic.Value(usize) = std.atomic.Value(usize).init(0),
    finished: std.atomic.Value(usize) = std.atomic.Value(usize).init(0),

    fn work(self: *Release, first: usize) void {
        _ = self.ready.fetchAdd(1, .acq_rel);
        // All threads start releasing together, so the releases really overlap.
        while (!self.go.load(.acquire)) std.atomic.spinLoopHint();
        var i = first;
        while (i < self.items.len) : (i += self.workers) {
            const tagged = self.items[i];
            dlpack.deleteManaged(tagged / 2, tagged % 2 == 1);
        }
        _ = self.finished.fetchAdd(1, .acq_rel);
    }
};

/// Starts releasing `count` tagged tensors on `threads` threads and returns at once with a handle
/// for `tp_release_done` / `tp_release_wait`; 0 when out of memory (nothing released then).
export fn tp_release_start(tagged: [*]const f64, count: u32, threads: u32) usize {
    const self = std.heap.c_allocator.create(Release) catch return 0;
    const items = std.heap.c_allocator.alloc(usize, count) catch {
        std.heap.c_allocator.destroy(self);
        return 0;
    };
    for (items, 0..) |*slot, i| slot.* = @intFromFloat(tagged[i]);
    self.* = .{ .items = items };
    const wanted: usize = std.math.clamp(threads, 1, 64);
    var spawned: usize = 0;
    while (spawned < wanted) : (spawned += 1) {
        self.threads[spawned] = std.Thread.spawn(.{}, Release.work, .{ self, spawned }) catch break;
    }
    if (spawned == 0) {
        // No thread at all: release on this one, so no tensor is lost.
        self.workers = 1;
        self.go.store(true, .release);
        Release.work(self, 0);
        return @intFromPtr(self);
    }
    // Workers read the stride only after `go`, so fewer threads than asked still cover every item.
    self.workers = spawned;
    self.joinable = spawned;
    while (self.ready.load(.acquire) < spawned) std.atomic.spinLoopHint();
    self.go.store(true, .release);
    return @intFromPtr(self);
}

/// Whether every release of a handle has finished (1) or not yet (0), without waiting.
export fn tp_release_done(handle: usize) u32 {
    const self: *Release = @ptrFromInt(handle);
    return @intFromBool(self.finished.load(.acquire) == self.workers);
}

/// Waits for the releases of a handle and frees it.
export fn tp_release_wait(handle: usize) void {
    const self: *Release = @ptrFromInt(handle);
    for (self.threads[0..self.joinable]) |t| t.join();
    std.heap.c_allocator.free(self.items);
    std.heap.c_allocator.destroy(self);
}

// ---------------------------------------------------------------------------------------------
// Hostile memory for the address tests (tests/reliability/addresses.test.ts): pages that are not
// readable, structs of random bytes, and fields overwritten in place.

var guard_region = std.atomic.Value(usize).init(0);

/// Three pages at an address this process never used before (so no table of mappings can remember
/// them as readable): the first read-write, the second PROT_NONE, the third unmapped. Made once per
/// process; returns the first page's address, or 0 when the platform or the address refuses.
export fn tp_guard_region() usize {
    if (guard_region.load(.acquire) != 0) return guard_region.load(.acquire);
    const page = std.heap.page_size_min;
    const region = mapAt(0x3d00_0000_0000, 3) orelse return 0;
    std.posix.mprotect(@alignCast(region[page .. 2 * page]), std.posix.PROT.NONE) catch return 0;
    std.posix.munmap(@alignCast(region[2 * page ..]));
    guard_region.store(@intFromPtr(region.ptr), .release);
    return @intFromPtr(region.ptr);
}

/// `pages` read-write pages mapped at `hint` exactly (Linux), else null.
fn mapAt(hint: usize, pages: usize) ?[]align(std.heap.page_size_min) u8 {
    if (@import("builtin").os.tag != .linux) return null;
    const region = std.posix.mmap(
        @ptrFromInt(hint),
        pages * std.heap.page_size_min,
        std.posix.PROT.READ | std.posix.PROT.WRITE,
        .{ .TYPE = .PRIVATE, .ANONYMOUS = true },
        -1,
        0,
    ) catch return null;
    if (@intFromPtr(region.ptr) == hint) return region;
    std.posix.munmap(region);
    return null;
}

/// The permissions every byte of [first, end) has, from this process's /proc/self/maps, read
/// here independently of the library (tests/native/listing.zig): 0 when any byte is not readable,
/// 1 when all are readable, 3 when all are also writable (-1: no listing). For the models of the JS
/// fuzz tests (a Deno test may not read /proc/self/maps without --allow-all). Addresses as 32-bit
/// halves, so any 64-bit value crosses every runtime's FFI exactly.
export fn tp_listed_access(first_lo: u32, first_hi: u32, end_lo: u32, end_hi: u32) i32 {
    const first = @as(u64, first_hi) << 32 | first_lo;
    const end = @as(u64, end_hi) << 32 | end_lo;
    return @intFromEnum(listing.access(first, end) orelse return -1);
}

var readonly_region = std.atomic.Value(usize).init(0);

/// Two pages at an address this process never used before: the first read-write, the second
/// read-only (PROT_READ), both holding the float32 values 0, 1, 2, ... Made once per process;
/// returns the first page's address, or 0 when the platform or the address refuses.
export fn tp_readonly_region() usize {
    if (readonly_region.load(.acquire) != 0) return readonly_region.load(.acquire);
    const page = std.heap.page_size_min;
    const region = mapAt(0x3d10_0000_0000, 2) orelse return 0;
    const values: [*]f32 = @ptrCast(region.ptr);
    for (0..2 * page / 4) |i| values[i] = @floatFromInt(i);
    std.posix.mprotect(@alignCast(region[page..]), std.posix.PROT.READ) catch return 0;
    readonly_region.store(@intFromPtr(region.ptr), .release);
    return @intFromPtr(region.ptr);
}

/// The page size the guard region uses.
export fn tp_page_size() u32 {
    return std.heap.page_size_min;
}

/// Overwrites the 8-byte word at `offset` bytes into a struct (a shape, strides or deleter field)
/// with `hi << 32 | lo` (halves, so any 64-bit value crosses every runtime's FFI exactly).
export fn tp_set_word(managed: usize, offset: u32, lo: u32, hi: u32) void {
    const word: *align(1) u64 = @ptrFromInt(managed + offset);
    word.* = @as(u64, hi) << 32 | lo;
}

/// Reads the 8-byte word at `offset` bytes into a struct.
export fn tp_get_word(managed: usize, offset: u32) f64 {
    const word: *align(1) const u64 = @ptrFromInt(managed + offset);
    return @floatFromInt(word.*);
}

/// 256 bytes of random bytes from `seed`, 16-byte aligned: a "struct" that is nothing. Never freed.
export fn tp_random_bytes(seed: u32) usize {
    const bytes = std.heap.c_allocator.alignedAlloc(u8, .@"16", 256) catch return 0;
    var prng = std.Random.DefaultPrng.init(seed);
    prng.random().bytes(bytes);
    return @intFromPtr(bytes.ptr);
}
