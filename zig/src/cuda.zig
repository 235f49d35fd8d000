//! The CUDA driver API, opened at first use with the real dlopen: libdlpack has no link-time CUDA
//! dependency and loads (and works) on machines without CUDA. Only the few driver types and
//! functions this library calls are declared here, from NVIDIA's documented driver API, and they
//! are resolved by their versioned names (`cuMemAlloc_v2`, ...).
//!
//! Every call runs with the primary context of its device made current around it. Every driver
//! failure is recorded per thread (which call, its CUresult, the driver's error name and text) so
//! the JS side can report it; the ABI functions return the CUresult (positive) or a negative
//! library status.

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;

// ---------------------------------------------------------------------------------------------
// Driver types and constants (from the driver API documentation).

pub const CUresult = c_int;
pub const CUdevice = c_int;
pub const CUcontext = ?*anyopaque;
pub const CUstream = ?*anyopaque;
pub const CUevent = ?*anyopaque;
pub const CUdeviceptr = u64;

const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
const CU_POINTER_ATTRIBUTE_IS_MANAGED: c_int = 8;
const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
const CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: c_int = 11;
const CU_POINTER_ATTRIBUTE_RANGE_SIZE: c_int = 12;

pub const CU_MEMORYTYPE_HOST: u32 = 1;
pub const CU_MEMORYTYPE_DEVICE: u32 = 2;

const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;

const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
const CU_MEM_ATTACH_GLOBAL: c_uint = 1;
const CU_STREAM_NON_BLOCKING: c_uint = 1;
const CU_EVENT_DISABLE_TIMING: c_uint = 2;

/// The stream handle values with a fixed meaning in the driver API (and in the DLPack protocol).
pub const stream_legacy: usize = 1;
pub const stream_per_thread: usize = 2;
/// The protocol's `stream=-1` ("do not synchronize") as an unsigned word.
pub const stream_no_sync: usize = std.math.maxInt(usize);

/// The driver functions used, under their exported (versioned) names.
const Api = struct {
    cuInit: *const fn (flags: c_uint) callconv(.c) CUresult,
    cuDriverGetVersion: *const fn (version: *c_int) callconv(.c) CUresult,
    cuGetErrorName: *const fn (result: CUresult, name: *?[*:0]const u8) callconv(.c) CUresult,
    cuGetErrorString: *const fn (result: CUresult, text: *?[*:0]const u8) callconv(.c) CUresult,
    cuDeviceGetCount: *const fn (count: *c_int) callconv(.c) CUresult,
    cuDeviceGet: *const fn (device: *CUdevice, ordinal: c_int) callconv(.c) CUresult,
    cuDeviceGetName: *const fn (name: [*]u8, len: c_int, device: CUdevice) callconv(.c) CUresult,
    cuDeviceGetPCIBusId: *const fn (id: [*]u8, len: c_int, device: CUdevice) callconv(.c) CUresult,
    cuDeviceTotalMem_v2: *const fn (bytes: *usize, device: CUdevice) callconv(.c) CUresult,
    cuDeviceGetAttribute: *const fn (
        value: *c_int,
        attribute: c_int,
        device: CUdevice,
    ) callconv(.c) CUresult,
    cuDevicePrimaryCtxRetain: *const fn (ctx: *CUcontext, device: CUdevice) callconv(.c) CUresult,
    cuCtxPushCurrent_v2: *const fn (ctx: CUcontext) callconv(.c) CUresult,
    cuCtxPopCurrent_v2: *const fn (ctx: *CUcontext) callconv(.c) CUresult,
    cuPointerGetAttributes: *const fn (
        count: c_uint,
        attributes: [*]const c_int,
        data: [*]const *anyopaque,
        ptr: CUdeviceptr,
    ) callconv(.c) CUresult,
    cuMemAlloc_v2: *const fn (ptr: *CUdeviceptr, bytes: usize) callconv(.c) CUresult,
    cuMemFree_v2: *const fn (ptr: CUdeviceptr) callconv(.c) CUresult,
    cuMemHostAlloc: *const fn (
        ptr: *?*anyopaque,
        bytes: usize,
        flags: c_uint,
    ) callconv(.c) CUresult,
    cuMemFreeHost: *const fn (ptr: ?*anyopaque) callconv(.c) CUresult,
    cuMemAllocManaged: *const fn (
        ptr: *CUdeviceptr,
        bytes: usize,
        flags: c_uint,
    ) callconv(.c) CUresult,
    cuMemsetD8_v2: *const fn (ptr: CUdeviceptr, value: u8, count: usize) callconv(.c) CUresult,
    cuMemcpyHtoD_v2: *const fn (
        dst: CUdeviceptr,
        src: ?*const anyopaque,
        bytes: usize,
    ) callconv(.c) CUresult,
    cuMemcpyDtoH_v2: *const fn (
        dst: ?*anyopaque,
        src: CUdeviceptr,
        bytes: usize,
    ) callconv(.c) CUresult,
    cuMemcpyDtoD_v2: *const fn (
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
    ) callconv(.c) CUresult,
    cuMemcpyPeer: *const fn (
        dst: CUdeviceptr,
        dst_ctx: CUcontext,
        src: CUdeviceptr,
        src_ctx: CUcontext,
        bytes: usize,
    ) callconv(.c) CUresult,
    cuMemcpyHtoDAsync_v2: *const fn (
        dst: CUdeviceptr,
        src: ?*const anyopaque,
        bytes: usize,
        stream: CUstream,
    ) callconv(.c) CUresult,
    cuMemcpyDtoHAsync_v2: *const fn (
        dst: ?*anyopaque,
        src: CUdeviceptr,
        bytes: usize,
        stream: CUstream,
    ) callconv(.c) CUresult,
    cuMemcpyDtoDAsync_v2: *const fn (
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
        stream: CUstream,
    ) callconv(.c) CUresult,
    cuMemcpyPeerAsync: *const fn (
        dst: CUdeviceptr,
        dst_ctx: CUcontext,
        src: CUdeviceptr,
        src_ctx: CUcontext,
        bytes: usize,
        stream: CUstream,
    ) callconv(.c) CUresult,
    cuStreamCreate: *const fn (stream: *CUstream, flags: c_uint) callconv(.c) CUresult,
    cuStreamDestroy_v2: *const fn (stream: CUstream) callconv(.c) CUresult,
    cuStreamSynchronize: *const fn (stream: CUstream) callconv(.c) CUresult,
    cuStreamWaitEvent: *const fn (
        stream: CUstream,
        event: CUevent,
        flags: c_uint,
    ) callconv(.c) CUresult,
    cuEventCreate: *const fn (event: *CUevent, flags: c_uint) callconv(.c) CUresult,
    cuEventRecord: *const fn (event: CUevent, stream: CUstream) callconv(.c) CUresult,
    cuEventDestroy_v2: *const fn (event: CUevent) callconv(.c) CUresult,
};

// ---------------------------------------------------------------------------------------------
// Loading, once per process.

const State = enum(u8) { unopened, unavailable, ready };

var state = std.atomic.Value(State).init(.unopened);
var open_mutex: std.Thread.Mutex = .{};
var api: Api = undefined;
/// Set once every symbol of `api` is resolved (before cuInit runs).
var api_loaded = false;
var device_count: i32 = 0;
var driver_version: i32 = 0;
var reason_buf: [768]u8 = undefined;
var reason_len: usize = 0;

/// The driver library this process opens: `DLPACK_CUDA_LIB` when set (tests point it at a fake
/// driver), else the soname every CUDA driver installs.
pub const library_default = "libcuda.so.1";
pub const library_env = "DLPACK_CUDA_LIB";

fn setReason(comptime fmt: []const u8, args: anytype) void {
    const text = std.fmt.bufPrint(&reason_buf, fmt, args) catch reason_buf[0..];
    reason_len = text.len;
    assert(reason_len <= reason_buf.len);
}

fn errorName(result: CUresult) []const u8 {
    assert(api_loaded);
    var name: ?[*:0]const u8 = null;
    if (api.cuGetErrorName(result, &name) != 0) return "unknown CUresult";
    return if (name) |n| std.mem.span(n) else "unknown CUresult";
}

fn errorString(result: CUresult) []const u8 {
    assert(api_loaded);
    var text: ?[*:0]const u8 = null;
    if (api.cuGetErrorString(result, &text) != 0) return "";
    return if (text) |t| std.mem.span(t) else "";
}

/// A C string as a slice, read byte by byte: std.mem.span's SIMD scan reads past the terminator
/// into bytes libc never initialised (dlerror's buffer), which valgrind rightly reports.
fn cSpan(text: [*:0]const u8) []const u8 {
    var length: usize = 0;
    while (text[length] != 0) length += 1;
    return text[0..length];
}

/// Which library `open` loads, and how its reason texts name it.
const Library = struct {
    path: [*:0]const u8,
    shown: []const u8,
    via: []const u8,

    fn chosen() Library {
        const env = std.c.getenv(library_env);
        const from_env = env != null and env.?[0] != 0;
        const path: [*:0]const u8 = if (from_env) env.? else library_default;
        const via: []const u8 = if (from_env) " (from " ++ library_env ++ ")" else "";
        return .{ .path = path, .shown = cSpan(path), .via = via };
    }
};

/// Loads the driver library and resolves every symbol of `api`; false with a reason set.
fn load(library: Library) bool {
    assert(!api_loaded);
    const handle = std.c.dlopen(library.path, .{ .NOW = true }) orelse {
        const why: []const u8 = if (std.c.dlerror()) |e| cSpan(e) else "dlopen failed";
        setReason("{s}{s} could not be loaded: {s}", .{ library.shown, library.via, why });
        return false;
    };
    inline for (@typeInfo(Api).@"struct".fields) |field| {
        const symbol = std.c.dlsym(handle, field.name) orelse {
            setReason("{s}{s} has no symbol {s}: not a CUDA driver, or one too old", .{
                library.shown,
                library.via,
                field.name,
            });
            return false;
        };
        @field(api, field.name) = @ptrCast(@alignCast(symbol));
    }
    api_loaded = true;
    return true;
}

/// Opens the driver: load, cuInit, count the devices. Runs once, under `open_mutex`.
fn open() State {
    assert(state.load(.acquire) == .unopened);
    // The CUDA driver this module speaks to is Linux's libcuda.so.1 (macOS has none; Windows'
    // nvcuda.dll is not wired up). Other builds load and work, reporting this reason.
    if (builtin.os.tag != .linux) {
        setReason(
            "CUDA is supported on Linux only; this build is for {s}",
            .{@tagName(builtin.os.tag)},
        );
        return .unavailable;
    }
    const library = Library.chosen();
    if (!load(library)) return .unavailable;
    const init = api.cuInit(0);
    if (init != 0) {
        setReason("cuInit failed: {s} ({d}): {s} [driver {s}{s}]", .{
            errorName(init), init, errorString(init), library.shown, library.via,
        });
        return .unavailable;
    }
    var version: c_int = 0;
    _ = api.cuDriverGetVersion(&version);
    driver_version = version;
    var count: c_int = 0;
    const counted = api.cuDeviceGetCount(&count);
    if (counted != 0) {
        setReason("cuDeviceGetCount failed: {s} ({d}): {s}", .{
            errorName(counted), counted, errorString(counted),
        });
        return .unavailable;
    }
    if (count <= 0) {
        setReason("the CUDA driver ({s}{s}) sees no device", .{ library.shown, library.via });
        return .unavailable;
    }
    device_count = count;
    reason_len = 0;
    return .ready;
}

/// Opens the driver on first use. True when it is usable.
pub fn ensure() bool {
    switch (state.load(.acquire)) {
        .ready => return true,
        .unavailable => return false,
        .unopened => {},
    }
    open_mutex.lock();
    defer open_mutex.unlock();
    if (state.load(.acquire) == .unopened) state.store(open(), .release);
    const opened = state.load(.acquire);
    assert(opened != .unopened);
    // A usable driver sees a device and has no reason to be unavailable.
    assert(opened != .ready or (device_count > 0 and reason_len == 0));
    return opened == .ready;
}

/// Why the driver is unavailable (empty when it is available or not opened yet).
pub fn reason() []const u8 {
    if (state.load(.acquire) != .unavailable) return "";
    return reason_buf[0..reason_len];
}

pub fn deviceCount() i32 {
    return if (ensure()) device_count else 0;
}

pub fn driverVersion() i32 {
    return if (ensure()) driver_version else 0;
}

// ---------------------------------------------------------------------------------------------
// Errors

pub const Error = error{ Driver, Unavailable, InvalidArgument, InvalidDevice, OutOfMemory };

threadlocal var last_result: CUresult = 0;
threadlocal var last_call: []const u8 = "";

/// This thread's last driver failure (0 when there was none): what `error.Driver` stands for.
pub fn lastResult() CUresult {
    return last_result;
}

/// Calls a driver function; a non-zero CUresult is recorded for this thread and becomes
/// `error.Driver`.
fn call(comptime name: []const u8, args: anytype) Error!void {
    assert(state.load(.monotonic) == .ready);
    const result: CUresult = @call(.auto, @field(api, name), args);
    if (result == 0) return;
    last_result = result;
    last_call = name;
    return error.Driver;
}

/// Writes "<call>\n<error name>\n<error string>" of this thread's last driver failure into `out`;
/// returns its CUresult (0 when there was none).
pub fn lastError(out: []u8) CUresult {
    if (last_result == 0 or state.load(.acquire) != .ready) {
        if (out.len > 0) out[0] = 0;
        return last_result;
    }
    // Only `call` records failures, and it names the call.
    assert(last_call.len > 0);
    const text = std.fmt.bufPrint(out, "{s}\n{s}\n{s}", .{
        last_call,
        errorName(last_result),
        errorString(last_result),
    }) catch out;
    if (text.len < out.len) out[text.len] = 0;
    return last_result;
}

fn ready() Error!void {
    if (!ensure()) return error.Unavailable;
}

// ---------------------------------------------------------------------------------------------
// Primary contexts: retained once per device for the life of the process, pushed around calls.

const devices_max = 64;
var contexts: [devices_max]CUcontext = [_]CUcontext{null} ** devices_max;
var context_mutex: std.Thread.Mutex = .{};
/// Contexts this thread pushed (`enter`) and has not popped (`leave`) yet.
threadlocal var contexts_entered: u32 = 0;

fn primaryContext(ordinal: i32) Error!CUcontext {
    try ready();
    if (ordinal < 0 or ordinal >= device_count) return error.InvalidDevice;
    if (ordinal >= devices_max) return error.InvalidDevice;
    const index: usize = @intCast(ordinal);
    assert(index < devices_max);
    context_mutex.lock();
    defer context_mutex.unlock();
    if (contexts[index]) |ctx| return ctx;
    var device: CUdevice = 0;
    try call("cuDeviceGet", .{ &device, ordinal });
    var ctx: CUcontext = null;
    try call("cuDevicePrimaryCtxRetain", .{ &ctx, device });
    contexts[index] = ctx;
    return ctx;
}

/// Makes the primary context of `ordinal` current on this thread; pair with `leave()`.
fn enter(ordinal: i32) Error!void {
    const ctx = try primaryContext(ordinal);
    try call("cuCtxPushCurrent_v2", .{ctx});
    contexts_entered += 1;
}

fn leave() void {
    assert(contexts_entered > 0);
    contexts_entered -= 1;
    var previous: CUcontext = null;
    _ = api.cuCtxPopCurrent_v2(&previous);
}

fn streamOf(handle: usize) CUstream {
    return @ptrFromInt(handle);
}

// ---------------------------------------------------------------------------------------------
// Devices and pointers

pub const DeviceInfo = struct {
    total_memory: usize = 0,
    cc_major: c_int = 0,
    cc_minor: c_int = 0,
    multiprocessors: c_int = 0,
};

/// Name and PCI bus id go into `text` as "<name>\n<pci bus id>".
pub fn deviceInfo(ordinal: i32, text: []u8) Error!DeviceInfo {
    try ready();
    if (ordinal < 0 or ordinal >= device_count) return error.InvalidDevice;
    var device: CUdevice = 0;
    try call("cuDeviceGet", .{ &device, ordinal });
    var info = DeviceInfo{};
    try call("cuDeviceTotalMem_v2", .{ &info.total_memory, device });
    const attributes = [_]struct { *c_int, c_int }{
        .{ &info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR },
        .{ &info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR },
        .{ &info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT },
    };
    for (attributes) |a| try call("cuDeviceGetAttribute", .{ a[0], a[1], device });
    var name = [_]u8{0} ** 256;
    try call("cuDeviceGetName", .{ &name, @as(c_int, name.len - 1), device });
    var bus = [_]u8{0} ** 64;
    try call("cuDeviceGetPCIBusId", .{ &bus, @as(c_int, bus.len - 1), device });
    const written = std.fmt.bufPrint(text, "{s}\n{s}", .{
        std.mem.sliceTo(&name, 0),
        std.mem.sliceTo(&bus, 0),
    }) catch text;
    if (written.len < text.len) text[written.len] = 0;
    return info;
}

pub const PointerAttributes = struct {
    memory_type: u32,
    ordinal: i32,
    managed: bool,
    /// Zero when the driver could not say (unregistered memory, or a driver without the query).
    range_start: u64 = 0,
    range_size: u64 = 0,
};

/// What the driver knows about an address. Unregistered host memory is not an error: its memory
/// type is 0.
pub fn pointerAttributes(address: usize, with_range: bool) Error!PointerAttributes {
    try ready();
    // 8-byte zeroed slots: the driver writes 1 (bool) or 4 bytes (enums, ints) into them.
    var slots = [_]u64{ 0, 0, 0 };
    const attributes = [_]c_int{
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    };
    const data = [_]*anyopaque{ &slots[0], &slots[1], &slots[2] };
    const count: c_uint = attributes.len;
    try call("cuPointerGetAttributes", .{ count, &attributes, &data, @as(CUdeviceptr, address) });
    var out = PointerAttributes{
        .memory_type = @truncate(slots[0]),
        .managed = slots[1] != 0,
        .ordinal = @bitCast(@as(u32, @truncate(slots[2]))),
    };
    if (with_range and out.memory_type != 0) {
        var range = [_]u64{ 0, 0 };
        const range_attributes = [_]c_int{
            CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
            CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        };
        const range_data = [_]*anyopaque{ &range[0], &range[1] };
        // Older drivers do not know these attributes; the range then stays unknown.
        if (api.cuPointerGetAttributes(2, &range_attributes, &range_data, address) == 0) {
            out.range_start = range[0];
            out.range_size = range[1];
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Memory

pub const AllocKind = enum(u32) { device = 0, host = 1, managed = 2 };

/// The order `dlpk_cuda_stats` writes the counters in (src/facts/abi.ts `CudaCounter`).
pub const Counter = enum(u8) {
    device_allocations,
    device_bytes,
    host_allocations,
    host_bytes,
    managed_allocations,
    managed_bytes,
    events,
    free_failures,
};
pub const counter_count = @typeInfo(Counter).@"enum".fields.len;
var counters = [_]std.atomic.Value(i64){std.atomic.Value(i64).init(0)} ** counter_count;

fn bump(counter: Counter, delta: i64) void {
    _ = counters[@intFromEnum(counter)].fetchAdd(delta, .monotonic);
}

pub fn snapshot(out: []f64) usize {
    const n = @min(out.len, counter_count);
    for (out[0..n], 0..) |*slot, i| slot.* = @floatFromInt(counters[i].load(.monotonic));
    assert(n <= counter_count);
    return n;
}

fn countAllocation(kind: AllocKind, bytes: usize, sign: i64) void {
    assert(sign == 1 or sign == -1);
    assert(bytes <= std.math.maxInt(i64));
    const size = sign * @as(i64, @intCast(bytes));
    switch (kind) {
        .device => {
            bump(.device_allocations, sign);
            bump(.device_bytes, size);
        },
        .host => {
            bump(.host_allocations, sign);
            bump(.host_bytes, size);
        },
        .managed => {
            bump(.managed_allocations, sign);
            bump(.managed_bytes, size);
        },
    }
}

fn freeRaw(kind: AllocKind, address: usize) CUresult {
    return switch (kind) {
        .host => api.cuMemFreeHost(@ptrFromInt(address)),
        .device, .managed => api.cuMemFree_v2(address),
    };
}

fn allocRaw(kind: AllocKind, size: usize) Error!usize {
    assert(size > 0);
    switch (kind) {
        .device => {
            var ptr: CUdeviceptr = 0;
            try call("cuMemAlloc_v2", .{ &ptr, size });
            return @intCast(ptr);
        },
        .host => {
            var ptr: ?*anyopaque = null;
            try call("cuMemHostAlloc", .{ &ptr, size, CU_MEMHOSTALLOC_PORTABLE });
            return @intFromPtr(ptr);
        },
        .managed => {
            var ptr: CUdeviceptr = 0;
            try call("cuMemAllocManaged", .{ &ptr, size, CU_MEM_ATTACH_GLOBAL });
            return @intCast(ptr);
        },
    }
}

/// Allocates device, page-locked host or managed memory (at least 1 byte, so the address is never
/// NULL) in the primary context of `ordinal`; `free` gives it back (owner.zig keeps the record).
pub fn allocate(kind: AllocKind, ordinal: i32, bytes: usize, zero: bool) Error!usize {
    try enter(ordinal);
    defer leave();
    const size = @max(bytes, 1);
    const address = try allocRaw(kind, size);
    errdefer _ = freeRaw(kind, address);
    if (zero) switch (kind) {
        .host => @memset(@as([*]u8, @ptrFromInt(address))[0..size], 0),
        .device, .managed => try call("cuMemsetD8_v2", .{ @as(CUdeviceptr, address), 0, size }),
    };
    countAllocation(kind, bytes, 1);
    return address;
}

/// Frees what `allocate` made, with its device's context current (owner release; any thread).
/// A failure cannot be reported to anyone: it is counted instead.
pub fn free(kind: AllocKind, ordinal: i32, address: usize, bytes: usize) void {
    countAllocation(kind, bytes, -1);
    enter(ordinal) catch {
        bump(.free_failures, 1);
        return;
    };
    defer leave();
    if (freeRaw(kind, address) != 0) bump(.free_failures, 1);
}

pub const Direction = enum(u32) {
    host_to_device = 0,
    device_to_host = 1,
    device_to_device = 2,
    peer = 3,
};

/// A copy's operands: `ordinal` is the destination's device (the context the copy runs in),
/// `src_ordinal` the source's (peer copies only).
pub const Copy = struct {
    direction: Direction,
    dst: usize,
    src: usize,
    bytes: usize,
    ordinal: i32,
    src_ordinal: i32,
};

/// Copies in the context of `c.ordinal`. `stream` 0 uses the synchronous calls; any other value
/// enqueues on that stream, and `wait` then synchronizes it before returning.
pub fn copy(c: Copy, stream: usize, wait: bool) Error!void {
    if (c.bytes == 0) return;
    try enter(c.ordinal);
    defer leave();
    if (stream == 0) return copySync(c);
    const st = streamOf(stream);
    const d: CUdeviceptr = c.dst;
    const s: CUdeviceptr = c.src;
    const host_src: ?*const anyopaque = @ptrFromInt(c.src);
    const host_dst: ?*anyopaque = @ptrFromInt(c.dst);
    switch (c.direction) {
        .host_to_device => try call("cuMemcpyHtoDAsync_v2", .{ d, host_src, c.bytes, st }),
        .device_to_host => try call("cuMemcpyDtoHAsync_v2", .{ host_dst, s, c.bytes, st }),
        .device_to_device => try call("cuMemcpyDtoDAsync_v2", .{ d, s, c.bytes, st }),
        .peer => {
            const dst_ctx = try primaryContext(c.ordinal);
            const src_ctx = try primaryContext(c.src_ordinal);
            try call("cuMemcpyPeerAsync", .{ d, dst_ctx, s, src_ctx, c.bytes, st });
        },
    }
    if (wait) try call("cuStreamSynchronize", .{st});
}

fn copySync(c: Copy) Error!void {
    assert(c.bytes > 0);
    assert(contexts_entered > 0);
    const d: CUdeviceptr = c.dst;
    const s: CUdeviceptr = c.src;
    switch (c.direction) {
        .host_to_device => {
            try call(
                "cuMemcpyHtoD_v2",
                .{ d, @as(?*const anyopaque, @ptrFromInt(c.src)), c.bytes },
            );
        },
        .device_to_host => {
            try call("cuMemcpyDtoH_v2", .{ @as(?*anyopaque, @ptrFromInt(c.dst)), s, c.bytes });
        },
        .device_to_device => try call("cuMemcpyDtoD_v2", .{ d, s, c.bytes }),
        .peer => {
            const dst_ctx = try primaryContext(c.ordinal);
            const src_ctx = try primaryContext(c.src_ordinal);
            try call("cuMemcpyPeer", .{ d, dst_ctx, s, src_ctx, c.bytes });
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Streams and events

pub fn streamCreate(ordinal: i32) Error!usize {
    try enter(ordinal);
    defer leave();
    var stream: CUstream = null;
    try call("cuStreamCreate", .{ &stream, CU_STREAM_NON_BLOCKING });
    return @intFromPtr(stream);
}

pub fn streamDestroy(ordinal: i32, stream: usize) Error!void {
    if (stream <= stream_per_thread) return error.InvalidArgument;
    try enter(ordinal);
    defer leave();
    assert(stream > stream_per_thread);
    try call("cuStreamDestroy_v2", .{streamOf(stream)});
}

pub fn streamSynchronize(ordinal: i32, stream: usize) Error!void {
    try enter(ordinal);
    defer leave();
    try call("cuStreamSynchronize", .{streamOf(stream)});
}

pub fn eventCreate(ordinal: i32) Error!usize {
    try enter(ordinal);
    defer leave();
    var event: CUevent = null;
    try call("cuEventCreate", .{ &event, CU_EVENT_DISABLE_TIMING });
    bump(.events, 1);
    return @intFromPtr(event);
}

pub fn eventRecord(ordinal: i32, event: usize, stream: usize) Error!void {
    if (event == 0) return error.InvalidArgument;
    try enter(ordinal);
    defer leave();
    try call("cuEventRecord", .{ @as(CUevent, @ptrFromInt(event)), streamOf(stream) });
}

pub fn eventDestroy(ordinal: i32, event: usize) Error!void {
    if (event == 0) return error.InvalidArgument;
    try enter(ordinal);
    defer leave();
    try call("cuEventDestroy_v2", .{@as(CUevent, @ptrFromInt(event))});
    bump(.events, -1);
}

pub fn streamWaitEvent(ordinal: i32, stream: usize, event: usize) Error!void {
    if (event == 0) return error.InvalidArgument;
    try enter(ordinal);
    defer leave();
    try call("cuStreamWaitEvent", .{ streamOf(stream), @as(CUevent, @ptrFromInt(event)), 0 });
}

/// The NULL stream handle means the legacy default stream in the (non-`_ptds`) driver calls.
pub fn sameStream(a: usize, b: usize) bool {
    const na = if (a == 0) stream_legacy else a;
    const nb = if (b == 0) stream_legacy else b;
    return na == nb;
}

/// Makes `consumer` wait for the work queued on `producer` so far: an event recorded on the
/// producer, waited on by the consumer, then released (the driver keeps it until the wait is done).
pub fn fence(ordinal: i32, producer: usize, consumer: usize) Error!void {
    if (sameStream(producer, consumer)) return;
    try enter(ordinal);
    defer leave();
    var event: CUevent = null;
    try call("cuEventCreate", .{ &event, CU_EVENT_DISABLE_TIMING });
    defer _ = api.cuEventDestroy_v2(event);
    try call("cuEventRecord", .{ event, streamOf(producer) });
    try call("cuStreamWaitEvent", .{ streamOf(consumer), event, 0 });
}

/// The consumer stream of a `__dlpack__(stream=...)` value given as an unsigned word: null for -1
/// (no synchronization), an error for 0 (ambiguous, refused by the protocol), else the handle (1:
/// legacy default stream, 2: per-thread default stream, above: a `cudaStream_t`). Python's None
/// means the legacy default stream: callers pass 1.
pub fn consumerStream(value: usize) Error!?usize {
    if (value == stream_no_sync) return null;
    if (value == 0) return error.InvalidArgument;
    assert(value != 0 and value != stream_no_sync);
    return value;
}

// ---------------------------------------------------------------------------------------------
// Tests (the driver-free parts; tests/cuda*.test.ts drive the rest through a fake driver)

const testing = std.testing;

test "protocol stream values" {
    try testing.expectEqual(@as(?usize, null), try consumerStream(stream_no_sync));
    try testing.expectError(error.InvalidArgument, consumerStream(0));
    try testing.expectEqual(@as(?usize, 1), try consumerStream(1));
    try testing.expectEqual(@as(?usize, 2), try consumerStream(2));
    try testing.expectEqual(@as(?usize, 0x7f00_1234), try consumerStream(0x7f00_1234));
    try testing.expect(sameStream(0, stream_legacy));
    try testing.expect(!sameStream(stream_legacy, stream_per_thread));
}

test "driver failures are recorded per thread" {
    try testing.expectEqual(@as(CUresult, 0), lastResult());
    var out: [8]u8 = undefined;
    try testing.expectEqual(@as(CUresult, 0), lastError(&out));
    try testing.expectEqual(@as(u8, 0), out[0]);
}
