//! A FAKE CUDA driver for the test suites (never shipped, never a stand-in for a GPU run). It
//! exports the subset of the driver API libdlpack calls, under the same versioned names, with the
//! documented semantics implemented over host memory, so the driver-facing logic of libdlpack
//! (pointer verification, primary contexts, allocation lifetimes, copies, events and stream
//! waits, error names) runs for real on machines without a GPU. Tests load it through
//! `DLPACK_CUDA_LIB`.
//!
//! Semantics, and how they are made strict enough to catch mistakes:
//! - `cuInit` must come first (`CUDA_ERROR_NOT_INITIALIZED` otherwise). `FAKECUDA_DEVICES` sets the
//!   device count (default 1); `FAKECUDA_INIT_RESULT` makes `cuInit` fail with that CUresult.
//! - Contexts: one primary context per device; a per-thread stack of current contexts. Every
//!   memory, stream and event call needs a current context, and memory of device N may only be
//!   allocated, freed, set or copied with device N's context current (`CUDA_ERROR_INVALID_CONTEXT`,
//!   counted as a wrong-context call).
//! - Device memory is a private mapping with NO host access (PROT_NONE) except inside this
//!   driver's own memset and copy calls: a host dereference of device memory by the library under
//!   test crashes the test process. Pinned host and managed memory are ordinary read-write
//!   mappings.
//! - `cuPointerGetAttributes` answers from the registry of those mappings: DEVICE with the device
//!   ordinal for device and managed memory (managed also IS_MANAGED), HOST for pinned memory, and
//!   zeros (unregistered) anywhere else, including any byte past an allocation's end.
//! - Copies check direction (the host side must not be device memory, the device side must lie
//!   wholly inside one device or managed allocation) and run at once; stream-ordered copies,
//!   events and waits are immediate too, but every record and wait is logged so tests can check
//!   which stream waited on which event recorded on which stream.
//! - `fakecuda_fail_next(name, result)` makes the next call of one driver function fail with
//!   `result`, to test error reporting.

const std = @import("std");

// The driver's own names for its results.
const CUresult = c_int;
const CUDA_SUCCESS: CUresult = 0;
const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
const CUDA_ERROR_NO_DEVICE: CUresult = 100;
const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
const CUDA_ERROR_ILLEGAL_ADDRESS: CUresult = 700;
const CUDA_ERROR_UNKNOWN: CUresult = 999;

const page = std.heap.page_size_min;

var mutex: std.Thread.Mutex = .{};
var initialized = false;
var device_count: c_int = 1;

const Kind = enum { device, host, managed };

const Region = struct {
    mapping: []align(page) u8,
    bytes: usize,
    kind: Kind,
    ordinal: c_int,

    fn base(self: Region) usize {
        return @intFromPtr(self.mapping.ptr);
    }

    fn contains(self: Region, address: usize, len: usize) bool {
        if (address < self.base()) return false;
        const offset = address - self.base();
        return offset <= self.bytes and len <= self.bytes - offset;
    }
};

const Handle = struct {
    id: usize,
    ordinal: c_int,
    /// Events: the stream the last record went to (0 = never recorded).
    recorded_on: usize = 0,
};

const allocator = std.heap.c_allocator;
var regions: std.ArrayListUnmanaged(Region) = .empty;
var streams: std.ArrayListUnmanaged(Handle) = .empty;
var events: std.ArrayListUnmanaged(Handle) = .empty;
var next_handle: usize = 1;
var retains: [64]u32 = [_]u32{0} ** 64;

var waits: u64 = 0;
var syncs: u64 = 0;
var records: u64 = 0;
var wrong_context: u64 = 0;
var sync_copies: u64 = 0;
var async_copies: u64 = 0;
var last_wait: [3]u64 = .{ 0, 0, 0 };

var fail_name: [64]u8 = undefined;
var fail_len: usize = 0;
var fail_result: CUresult = 0;

const context_base: usize = 0xC7C0_0000;
const stream_base: usize = 0x5700_0000;
const event_base: usize = 0xE700_0000;

threadlocal var context_stack: [16]usize = undefined;
threadlocal var context_depth: usize = 0;

fn injected(comptime name: []const u8) ?CUresult {
    if (fail_len == 0 or !std.mem.eql(u8, fail_name[0..fail_len], name)) return null;
    fail_len = 0;
    return fail_result;
}

/// Common entry checks: injected failure, then initialization.
fn enter(comptime name: []const u8) ?CUresult {
    if (injected(name)) |r| return r;
    if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return null;
}

fn currentOrdinal() ?c_int {
    if (context_depth == 0) return null;
    return @intCast((context_stack[context_depth - 1] - context_base) / 0x100);
}

fn envInt(name: [*:0]const u8, default: c_int) c_int {
    const value = std.c.getenv(name) orelse return default;
    return std.fmt.parseInt(c_int, std.mem.span(value), 10) catch default;
}

fn regionAt(address: usize, len: usize) ?*Region {
    for (regions.items) |*r| {
        if (r.contains(address, len)) return r;
    }
    return null;
}

fn regionIndex(base: usize) ?usize {
    for (regions.items, 0..) |r, i| {
        if (r.base() == base) return i;
    }
    return null;
}

fn protect(r: *Region, writable: bool) void {
    if (r.kind != .device) return;
    const read_write = std.posix.PROT.READ | std.posix.PROT.WRITE;
    const prot: u32 = if (writable) read_write else std.posix.PROT.NONE;
    std.posix.mprotect(r.mapping, prot) catch @panic("fakecuda: mprotect failed");
}

/// The device-side operand of a memory call: inside one device or managed allocation, of the
/// current context's device when it is device memory.
fn deviceOperand(
    address: usize,
    len: usize,
    ordinal: c_int,
) union(enum) { ok: *Region, err: CUresult } {
    const r = regionAt(address, len) orelse return .{ .err = CUDA_ERROR_INVALID_VALUE };
    if (r.kind == .host) return .{ .err = CUDA_ERROR_INVALID_VALUE };
    if (r.kind == .device and r.ordinal != ordinal) {
        wrong_context += 1;
        return .{ .err = CUDA_ERROR_INVALID_CONTEXT };
    }
    return .{ .ok = r };
}

/// The host-side operand: anything but device memory.
fn hostOperand(address: usize, len: usize) bool {
    if (address == 0 and len > 0) return false;
    for (regions.items) |r| {
        const overlaps = address < r.base() + r.mapping.len and r.base() < address + len;
        if (r.kind == .device and overlaps) return false;
    }
    return true;
}

fn validStream(handle: usize, ordinal: c_int) bool {
    if (handle <= 2) return true;
    for (streams.items) |s| {
        if (s.id == handle) return s.ordinal == ordinal;
    }
    return false;
}

fn findEvent(handle: usize) ?*Handle {
    for (events.items) |*e| {
        if (e.id == handle) return e;
    }
    return null;
}

fn normalize(stream: usize) usize {
    return if (stream == 0) 1 else stream;
}

// ---------------------------------------------------------------------------------------------
// Initialization, errors, devices

export fn cuInit(flags: c_uint) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (injected("cuInit")) |r| return r;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    const result = envInt("FAKECUDA_INIT_RESULT", 0);
    if (result != 0) return result;
    device_count = std.math.clamp(envInt("FAKECUDA_DEVICES", 1), 0, 64);
    if (device_count == 0) return CUDA_ERROR_NO_DEVICE;
    initialized = true;
    return CUDA_SUCCESS;
}

export fn cuDriverGetVersion(version: *c_int) CUresult {
    version.* = 12080;
    return CUDA_SUCCESS;
}

const ErrorText = struct { code: CUresult, name: [*:0]const u8, text: [*:0]const u8 };
const error_texts = [_]ErrorText{
    .{ .code = CUDA_SUCCESS, .name = "CUDA_SUCCESS", .text = "no error" },
    .{
        .code = CUDA_ERROR_INVALID_VALUE,
        .name = "CUDA_ERROR_INVALID_VALUE",
        .text = "invalid argument",
    },
    .{
        .code = CUDA_ERROR_OUT_OF_MEMORY,
        .name = "CUDA_ERROR_OUT_OF_MEMORY",
        .text = "out of memory",
    },
    .{
        .code = CUDA_ERROR_NOT_INITIALIZED,
        .name = "CUDA_ERROR_NOT_INITIALIZED",
        .text = "initialization error",
    },
    .{
        .code = CUDA_ERROR_NO_DEVICE,
        .name = "CUDA_ERROR_NO_DEVICE",
        .text = "no CUDA-capable device is detected",
    },
    .{
        .code = CUDA_ERROR_INVALID_DEVICE,
        .name = "CUDA_ERROR_INVALID_DEVICE",
        .text = "invalid device ordinal",
    },
    .{
        .code = CUDA_ERROR_INVALID_CONTEXT,
        .name = "CUDA_ERROR_INVALID_CONTEXT",
        .text = "invalid device context",
    },
    .{
        .code = CUDA_ERROR_INVALID_HANDLE,
        .name = "CUDA_ERROR_INVALID_HANDLE",
        .text = "invalid resource handle",
    },
    .{
        .code = CUDA_ERROR_ILLEGAL_ADDRESS,
        .name = "CUDA_ERROR_ILLEGAL_ADDRESS",
        .text = "an illegal memory access was encountered",
    },
    .{ .code = CUDA_ERROR_UNKNOWN, .name = "CUDA_ERROR_UNKNOWN", .text = "unknown error" },
};

fn errorText(result: CUresult) ?ErrorText {
    for (error_texts) |e| {
        if (e.code == result) return e;
    }
    return null;
}

export fn cuGetErrorName(result: CUresult, name: *?[*:0]const u8) CUresult {
    const e = errorText(result) orelse {
        name.* = null;
        return CUDA_ERROR_INVALID_VALUE;
    };
    name.* = e.name;
    return CUDA_SUCCESS;
}

export fn cuGetErrorString(result: CUresult, text: *?[*:0]const u8) CUresult {
    const e = errorText(result) orelse {
        text.* = null;
        return CUDA_ERROR_INVALID_VALUE;
    };
    text.* = e.text;
    return CUDA_SUCCESS;
}

export fn cuDeviceGetCount(count: *c_int) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuDeviceGetCount")) |r| return r;
    count.* = device_count;
    return CUDA_SUCCESS;
}

export fn cuDeviceGet(device: *c_int, ordinal: c_int) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuDeviceGet")) |r| return r;
    if (ordinal < 0 or ordinal >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    device.* = ordinal;
    return CUDA_SUCCESS;
}

fn writeText(out: [*]u8, len: c_int, comptime fmt: []const u8, args: anytype) CUresult {
    if (len <= 0) return CUDA_ERROR_INVALID_VALUE;
    const n: usize = @intCast(len);
    const text = std.fmt.bufPrintZ(out[0..n], fmt, args) catch return CUDA_ERROR_INVALID_VALUE;
    _ = text;
    return CUDA_SUCCESS;
}

export fn cuDeviceGetName(name: [*]u8, len: c_int, device: c_int) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuDeviceGetName")) |r| return r;
    if (device < 0 or device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    return writeText(name, len, "Fake CUDA Device {d} (host memory)", .{device});
}

export fn cuDeviceGetPCIBusId(id: [*]u8, len: c_int, device: c_int) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuDeviceGetPCIBusId")) |r| return r;
    if (device < 0 or device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    return writeText(id, len, "0000:{x:0>2}:00.0", .{@as(u32, @intCast(device + 1))});
}

export fn cuDeviceTotalMem_v2(bytes: *usize, device: c_int) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuDeviceTotalMem_v2")) |r| return r;
    if (device < 0 or device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    bytes.* = 1 << 30;
    return CUDA_SUCCESS;
}

export fn cuDeviceGetAttribute(value: *c_int, attribute: c_int, device: c_int) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuDeviceGetAttribute")) |r| return r;
    if (device < 0 or device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    value.* = switch (attribute) {
        16 => 4, // multiprocessors
        75 => 9, // compute capability major
        76 => 0, // compute capability minor
        else => return CUDA_ERROR_INVALID_VALUE,
    };
    return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Contexts

export fn cuDevicePrimaryCtxRetain(ctx: *usize, device: c_int) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuDevicePrimaryCtxRetain")) |r| return r;
    if (device < 0 or device >= device_count) return CUDA_ERROR_INVALID_DEVICE;
    retains[@intCast(device)] += 1;
    ctx.* = context_base + @as(usize, @intCast(device)) * 0x100;
    return CUDA_SUCCESS;
}

export fn cuCtxPushCurrent_v2(ctx: usize) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuCtxPushCurrent_v2")) |r| return r;
    if (ctx < context_base or (ctx - context_base) % 0x100 != 0 or
        (ctx - context_base) / 0x100 >= device_count)
    {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (context_depth == context_stack.len) return CUDA_ERROR_INVALID_VALUE;
    context_stack[context_depth] = ctx;
    context_depth += 1;
    return CUDA_SUCCESS;
}

export fn cuCtxPopCurrent_v2(ctx: *usize) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuCtxPopCurrent_v2")) |r| return r;
    if (context_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
    context_depth -= 1;
    ctx.* = context_stack[context_depth];
    return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Pointer attributes

export fn cuPointerGetAttributes(
    count: c_uint,
    attributes: [*]const c_int,
    data: [*]const *anyopaque,
    ptr: u64,
) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuPointerGetAttributes")) |r| return r;
    const found = regionAt(@intCast(ptr), 1);
    for (0..count) |i| {
        const slot = data[i];
        switch (attributes[i]) {
            2 => {
                const memory_type: u32 = if (found) |r| (if (r.kind == .host) 1 else 2) else 0;
                @as(*u32, @ptrCast(@alignCast(slot))).* = memory_type;
            },
            8 => @as(*bool, @ptrCast(slot)).* = if (found) |r| r.kind == .managed else false,
            9 => @as(*c_int, @ptrCast(@alignCast(slot))).* = if (found) |r| r.ordinal else -2,
            11 => @as(*u64, @ptrCast(@alignCast(slot))).* = if (found) |r| r.base() else 0,
            12 => @as(*u64, @ptrCast(@alignCast(slot))).* = if (found) |r| r.bytes else 0,
            else => return CUDA_ERROR_INVALID_VALUE,
        }
    }
    return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Memory

fn mapRegion(kind: Kind, bytes: usize, ordinal: c_int) ?usize {
    const len = std.mem.alignForward(usize, bytes, page);
    const read_write = std.posix.PROT.READ | std.posix.PROT.WRITE;
    const prot: u32 = if (kind == .device) std.posix.PROT.NONE else read_write;
    const mapping = std.posix.mmap(
        null,
        len,
        prot,
        .{ .TYPE = .PRIVATE, .ANONYMOUS = true },
        -1,
        0,
    ) catch return null;
    regions.append(
        allocator,
        .{ .mapping = mapping, .bytes = bytes, .kind = kind, .ordinal = ordinal },
    ) catch {
        std.posix.munmap(mapping);
        return null;
    };
    return @intFromPtr(mapping.ptr);
}

fn allocate(comptime name: []const u8, kind: Kind, out: *u64, bytes: usize) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter(name)) |r| return r;
    const ordinal = currentOrdinal() orelse return CUDA_ERROR_INVALID_CONTEXT;
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    out.* = mapRegion(kind, bytes, ordinal) orelse return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

export fn cuMemAlloc_v2(ptr: *u64, bytes: usize) CUresult {
    return allocate("cuMemAlloc_v2", .device, ptr, bytes);
}

export fn cuMemHostAlloc(ptr: *u64, bytes: usize, flags: c_uint) CUresult {
    if (flags & ~@as(c_uint, 7) != 0) return CUDA_ERROR_INVALID_VALUE;
    return allocate("cuMemHostAlloc", .host, ptr, bytes);
}

export fn cuMemAllocManaged(ptr: *u64, bytes: usize, flags: c_uint) CUresult {
    if (flags != 1 and flags != 2) return CUDA_ERROR_INVALID_VALUE;
    return allocate("cuMemAllocManaged", .managed, ptr, bytes);
}

fn free(comptime name: []const u8, address: usize, host: bool) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter(name)) |r| return r;
    const ordinal = currentOrdinal() orelse return CUDA_ERROR_INVALID_CONTEXT;
    const index = regionIndex(address) orelse return CUDA_ERROR_INVALID_VALUE;
    const r = regions.items[index];
    if ((r.kind == .host) != host) return CUDA_ERROR_INVALID_VALUE;
    if (r.kind != .host and r.ordinal != ordinal) {
        wrong_context += 1;
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    std.posix.munmap(r.mapping);
    _ = regions.swapRemove(index);
    return CUDA_SUCCESS;
}

export fn cuMemFree_v2(ptr: u64) CUresult {
    return free("cuMemFree_v2", @intCast(ptr), false);
}

export fn cuMemFreeHost(ptr: usize) CUresult {
    return free("cuMemFreeHost", ptr, true);
}

export fn cuMemsetD8_v2(ptr: u64, value: u8, count: usize) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuMemsetD8_v2")) |r| return r;
    const ordinal = currentOrdinal() orelse return CUDA_ERROR_INVALID_CONTEXT;
    const r = switch (deviceOperand(@intCast(ptr), count, ordinal)) {
        .ok => |r| r,
        .err => |e| return e,
    };
    protect(r, true);
    defer protect(r, false);
    @memset(@as([*]u8, @ptrFromInt(@as(usize, @intCast(ptr))))[0..count], value);
    return CUDA_SUCCESS;
}

const Side = enum { host, device };

/// One copy, any direction. `dst_ordinal`/`src_ordinal` are the devices the operands must
/// belong to (the current context's, or the peer contexts given).
fn copy(
    dst: usize,
    dst_side: Side,
    dst_ordinal: c_int,
    src: usize,
    src_side: Side,
    src_ordinal: c_int,
    bytes: usize,
) CUresult {
    if (bytes == 0) return CUDA_SUCCESS;
    var dst_region: ?*Region = null;
    var src_region: ?*Region = null;
    switch (dst_side) {
        .host => if (!hostOperand(dst, bytes)) return CUDA_ERROR_INVALID_VALUE,
        .device => dst_region = switch (deviceOperand(dst, bytes, dst_ordinal)) {
            .ok => |r| r,
            .err => |e| return e,
        },
    }
    switch (src_side) {
        .host => if (!hostOperand(src, bytes)) return CUDA_ERROR_INVALID_VALUE,
        .device => src_region = switch (deviceOperand(src, bytes, src_ordinal)) {
            .ok => |r| r,
            .err => |e| return e,
        },
    }
    if (dst_region) |r| protect(r, true);
    if (src_region) |r| protect(r, true);
    std.mem.copyForwards(
        u8,
        @as([*]u8, @ptrFromInt(dst))[0..bytes],
        @as([*]const u8, @ptrFromInt(src))[0..bytes],
    );
    if (dst_region) |r| protect(r, false);
    if (src_region) |r| protect(r, false);
    return CUDA_SUCCESS;
}

fn copyCall(
    comptime name: []const u8,
    dst: usize,
    dst_side: Side,
    src: usize,
    src_side: Side,
    bytes: usize,
    stream: ?usize,
) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter(name)) |r| return r;
    const ordinal = currentOrdinal() orelse return CUDA_ERROR_INVALID_CONTEXT;
    if (stream) |s| {
        if (!validStream(s, ordinal)) return CUDA_ERROR_INVALID_HANDLE;
        async_copies += 1;
    } else sync_copies += 1;
    return copy(dst, dst_side, ordinal, src, src_side, ordinal, bytes);
}

export fn cuMemcpyHtoD_v2(dst: u64, src: usize, bytes: usize) CUresult {
    return copyCall("cuMemcpyHtoD_v2", @intCast(dst), .device, src, .host, bytes, null);
}

export fn cuMemcpyDtoH_v2(dst: usize, src: u64, bytes: usize) CUresult {
    return copyCall("cuMemcpyDtoH_v2", dst, .host, @intCast(src), .device, bytes, null);
}

export fn cuMemcpyDtoD_v2(dst: u64, src: u64, bytes: usize) CUresult {
    return copyCall("cuMemcpyDtoD_v2", @intCast(dst), .device, @intCast(src), .device, bytes, null);
}

export fn cuMemcpyHtoDAsync_v2(dst: u64, src: usize, bytes: usize, stream: usize) CUresult {
    return copyCall("cuMemcpyHtoDAsync_v2", @intCast(dst), .device, src, .host, bytes, stream);
}

export fn cuMemcpyDtoHAsync_v2(dst: usize, src: u64, bytes: usize, stream: usize) CUresult {
    return copyCall("cuMemcpyDtoHAsync_v2", dst, .host, @intCast(src), .device, bytes, stream);
}

export fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, bytes: usize, stream: usize) CUresult {
    return copyCall(
        "cuMemcpyDtoDAsync_v2",
        @intCast(dst),
        .device,
        @intCast(src),
        .device,
        bytes,
        stream,
    );
}

fn contextOrdinal(ctx: usize) ?c_int {
    if (ctx < context_base or (ctx - context_base) % 0x100 != 0) return null;
    const ordinal: c_int = @intCast((ctx - context_base) / 0x100);
    return if (ordinal < device_count) ordinal else null;
}

fn peerCall(
    comptime name: []const u8,
    dst: u64,
    dst_ctx: usize,
    src: u64,
    src_ctx: usize,
    bytes: usize,
    stream: ?usize,
) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter(name)) |r| return r;
    const current = currentOrdinal() orelse return CUDA_ERROR_INVALID_CONTEXT;
    const dst_ordinal = contextOrdinal(dst_ctx) orelse return CUDA_ERROR_INVALID_CONTEXT;
    const src_ordinal = contextOrdinal(src_ctx) orelse return CUDA_ERROR_INVALID_CONTEXT;
    if (stream) |s| {
        if (!validStream(s, current)) return CUDA_ERROR_INVALID_HANDLE;
        async_copies += 1;
    } else sync_copies += 1;
    return copy(@intCast(dst), .device, dst_ordinal, @intCast(src), .device, src_ordinal, bytes);
}

export fn cuMemcpyPeer(dst: u64, dst_ctx: usize, src: u64, src_ctx: usize, bytes: usize) CUresult {
    return peerCall("cuMemcpyPeer", dst, dst_ctx, src, src_ctx, bytes, null);
}

export fn cuMemcpyPeerAsync(
    dst: u64,
    dst_ctx: usize,
    src: u64,
    src_ctx: usize,
    bytes: usize,
    stream: usize,
) CUresult {
    return peerCall("cuMemcpyPeerAsync", dst, dst_ctx, src, src_ctx, bytes, stream);
}

// ---------------------------------------------------------------------------------------------
// Streams and events

export fn cuStreamCreate(stream: *usize, flags: c_uint) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuStreamCreate")) |r| return r;
    const ordinal = currentOrdinal() orelse return CUDA_ERROR_INVALID_CONTEXT;
    if (flags > 1) return CUDA_ERROR_INVALID_VALUE;
    const id = stream_base + next_handle * 0x10;
    streams.append(
        allocator,
        .{ .id = id, .ordinal = ordinal },
    ) catch return CUDA_ERROR_OUT_OF_MEMORY;
    next_handle += 1;
    stream.* = id;
    return CUDA_SUCCESS;
}

export fn cuStreamDestroy_v2(stream: usize) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuStreamDestroy_v2")) |r| return r;
    for (streams.items, 0..) |s, i| {
        if (s.id == stream) {
            _ = streams.swapRemove(i);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_HANDLE;
}

export fn cuStreamSynchronize(stream: usize) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuStreamSynchronize")) |r| return r;
    const ordinal = currentOrdinal() orelse return CUDA_ERROR_INVALID_CONTEXT;
    if (!validStream(stream, ordinal)) return CUDA_ERROR_INVALID_HANDLE;
    syncs += 1;
    return CUDA_SUCCESS;
}

export fn cuEventCreate(event: *usize, flags: c_uint) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuEventCreate")) |r| return r;
    const ordinal = currentOrdinal() orelse return CUDA_ERROR_INVALID_CONTEXT;
    if (flags & ~@as(c_uint, 7) != 0) return CUDA_ERROR_INVALID_VALUE;
    const id = event_base + next_handle * 0x10;
    events.append(
        allocator,
        .{ .id = id, .ordinal = ordinal },
    ) catch return CUDA_ERROR_OUT_OF_MEMORY;
    next_handle += 1;
    event.* = id;
    return CUDA_SUCCESS;
}

export fn cuEventRecord(event: usize, stream: usize) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuEventRecord")) |r| return r;
    const e = findEvent(event) orelse return CUDA_ERROR_INVALID_HANDLE;
    // The default streams are the current context's; a created stream must share the event's.
    if (stream <= 2) {
        const ordinal = currentOrdinal() orelse return CUDA_ERROR_INVALID_CONTEXT;
        if (ordinal != e.ordinal) return CUDA_ERROR_INVALID_HANDLE;
    } else if (!validStream(stream, e.ordinal)) return CUDA_ERROR_INVALID_HANDLE;
    e.recorded_on = normalize(stream);
    records += 1;
    return CUDA_SUCCESS;
}

export fn cuStreamWaitEvent(stream: usize, event: usize, flags: c_uint) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuStreamWaitEvent")) |r| return r;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    const e = findEvent(event) orelse return CUDA_ERROR_INVALID_HANDLE;
    if (stream <= 2) {
        if (currentOrdinal() == null) return CUDA_ERROR_INVALID_CONTEXT;
    } else {
        var known = false;
        for (streams.items) |s| known = known or s.id == stream;
        if (!known) return CUDA_ERROR_INVALID_HANDLE;
    }
    waits += 1;
    last_wait = .{ normalize(stream), event, e.recorded_on };
    return CUDA_SUCCESS;
}

export fn cuEventDestroy_v2(event: usize) CUresult {
    mutex.lock();
    defer mutex.unlock();
    if (enter("cuEventDestroy_v2")) |r| return r;
    for (events.items, 0..) |e, i| {
        if (e.id == event) {
            _ = events.swapRemove(i);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_HANDLE;
}

// ---------------------------------------------------------------------------------------------
// Test hooks (not driver API)

/// The next call of driver function `name` returns `result`.
export fn fakecuda_fail_next(name: [*:0]const u8, result: c_int) void {
    mutex.lock();
    defer mutex.unlock();
    const text = std.mem.span(name);
    fail_len = @min(text.len, fail_name.len);
    @memcpy(fail_name[0..fail_len], text[0..fail_len]);
    fail_result = result;
}

/// Live device, pinned host and managed allocations; live events and streams; waits, stream
/// synchronizations and event records so far; wrong-context calls; this thread's context depth;
/// primary-context retains; synchronous and stream-ordered copies.
export fn fakecuda_stats(out: *[13]f64) u32 {
    mutex.lock();
    defer mutex.unlock();
    var by_kind = [_]f64{ 0, 0, 0 };
    for (regions.items) |r| by_kind[@intFromEnum(r.kind)] += 1;
    var retained: f64 = 0;
    for (retains) |n| retained += @floatFromInt(n);
    out.* = .{
        by_kind[0],
        by_kind[1],
        by_kind[2],
        @floatFromInt(events.items.len),
        @floatFromInt(streams.items.len),
        @floatFromInt(waits),
        @floatFromInt(syncs),
        @floatFromInt(records),
        @floatFromInt(wrong_context),
        @floatFromInt(context_depth),
        retained,
        @floatFromInt(sync_copies),
        @floatFromInt(async_copies),
    };
    return out.len;
}

/// The last stream wait: the waiting stream, the event, and the stream that event was recorded on
/// (0 and 1 both read as 1, the legacy default stream).
export fn fakecuda_last_wait(out: *[3]u64) void {
    mutex.lock();
    defer mutex.unlock();
    out.* = last_wait;
}
