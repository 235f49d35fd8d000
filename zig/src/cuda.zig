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
const describe = @import("describe.zig");
const owner_mod = @import("owner.zig");
const stats = @import("stats.zig");

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
pub const STREAM_LEGACY: usize = 1;
pub const STREAM_PER_THREAD: usize = 2;
/// The protocol's `stream=-1` ("do not synchronize") as an unsigned word.
pub const STREAM_NO_SYNC: usize = std.math.maxInt(usize);

/// DLPack device types this module can check.
pub const DEVICE_CPU: i32 = 1;
pub const DEVICE_CUDA: i32 = 2;
pub const DEVICE_CUDA_HOST: i32 = 3;
pub const DEVICE_CUDA_MANAGED: i32 = 13;

pub fn isCudaFamily(device_type: i32) bool {
    return device_type == DEVICE_CUDA or device_type == DEVICE_CUDA_HOST or device_type == DEVICE_CUDA_MANAGED;
}

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
    cuDeviceGetAttribute: *const fn (value: *c_int, attribute: c_int, device: CUdevice) callconv(.c) CUresult,
    cuDevicePrimaryCtxRetain: *const fn (ctx: *CUcontext, device: CUdevice) callconv(.c) CUresult,
    cuCtxPushCurrent_v2: *const fn (ctx: CUcontext) callconv(.c) CUresult,
    cuCtxPopCurrent_v2: *const fn (ctx: *CUcontext) callconv(.c) CUresult,
    cuPointerGetAttributes: *const fn (count: c_uint, attributes: [*]const c_int, data: [*]const *anyopaque, ptr: CUdeviceptr) callconv(.c) CUresult,
    cuMemAlloc_v2: *const fn (ptr: *CUdeviceptr, bytes: usize) callconv(.c) CUresult,
    cuMemFree_v2: *const fn (ptr: CUdeviceptr) callconv(.c) CUresult,
    cuMemHostAlloc: *const fn (ptr: *?*anyopaque, bytes: usize, flags: c_uint) callconv(.c) CUresult,
    cuMemFreeHost: *const fn (ptr: ?*anyopaque) callconv(.c) CUresult,
    cuMemAllocManaged: *const fn (ptr: *CUdeviceptr, bytes: usize, flags: c_uint) callconv(.c) CUresult,
    cuMemsetD8_v2: *const fn (ptr: CUdeviceptr, value: u8, count: usize) callconv(.c) CUresult,
    cuMemcpyHtoD_v2: *const fn (dst: CUdeviceptr, src: ?*const anyopaque, bytes: usize) callconv(.c) CUresult,
    cuMemcpyDtoH_v2: *const fn (dst: ?*anyopaque, src: CUdeviceptr, bytes: usize) callconv(.c) CUresult,
    cuMemcpyDtoD_v2: *const fn (dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) callconv(.c) CUresult,
    cuMemcpyPeer: *const fn (dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, bytes: usize) callconv(.c) CUresult,
    cuMemcpyHtoDAsync_v2: *const fn (dst: CUdeviceptr, src: ?*const anyopaque, bytes: usize, stream: CUstream) callconv(.c) CUresult,
    cuMemcpyDtoHAsync_v2: *const fn (dst: ?*anyopaque, src: CUdeviceptr, bytes: usize, stream: CUstream) callconv(.c) CUresult,
    cuMemcpyDtoDAsync_v2: *const fn (dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream) callconv(.c) CUresult,
    cuMemcpyPeerAsync: *const fn (dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, bytes: usize, stream: CUstream) callconv(.c) CUresult,
    cuStreamCreate: *const fn (stream: *CUstream, flags: c_uint) callconv(.c) CUresult,
    cuStreamDestroy_v2: *const fn (stream: CUstream) callconv(.c) CUresult,
    cuStreamSynchronize: *const fn (stream: CUstream) callconv(.c) CUresult,
    cuStreamWaitEvent: *const fn (stream: CUstream, event: CUevent, flags: c_uint) callconv(.c) CUresult,
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
var device_count: i32 = 0;
var driver_version: i32 = 0;
var reason_buf: [768]u8 = undefined;
var reason_len: usize = 0;

/// The driver library this process opens: `DLPACK_CUDA_LIB` when set (tests point it at a fake
/// driver), else the soname every CUDA driver installs.
pub const DEFAULT_LIBRARY = "libcuda.so.1";
pub const LIBRARY_ENV = "DLPACK_CUDA_LIB";

fn setReason(comptime fmt: []const u8, args: anytype) void {
    const text = std.fmt.bufPrint(&reason_buf, fmt, args) catch reason_buf[0..];
    reason_len = text.len;
}

fn errorName(result: CUresult) []const u8 {
    var name: ?[*:0]const u8 = null;
    if (api.cuGetErrorName(result, &name) != 0) return "unknown CUresult";
    return if (name) |n| std.mem.span(n) else "unknown CUresult";
}

fn errorString(result: CUresult) []const u8 {
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

fn open() State {
    // The CUDA driver this module speaks to is Linux's libcuda.so.1 (macOS has none; Windows'
    // nvcuda.dll is not wired up). Other builds load and work, reporting this reason.
    if (builtin.os.tag != .linux) {
        setReason("CUDA is supported on Linux only; this build is for {s}", .{@tagName(builtin.os.tag)});
        return .unavailable;
    }
    const env = std.c.getenv(LIBRARY_ENV);
    const from_env = env != null and env.?[0] != 0;
    const path: [*:0]const u8 = if (from_env) env.? else DEFAULT_LIBRARY;
    const shown: []const u8 = cSpan(path);
    const via: []const u8 = if (from_env) " (from " ++ LIBRARY_ENV ++ ")" else "";
    const handle = std.c.dlopen(path, .{ .NOW = true }) orelse {
        const why: []const u8 = if (std.c.dlerror()) |e| cSpan(e) else "dlopen failed";
        setReason("{s}{s} could not be loaded: {s}", .{ shown, via, why });
        return .unavailable;
    };
    inline for (@typeInfo(Api).@"struct".fields) |field| {
        const symbol = std.c.dlsym(handle, field.name) orelse {
            setReason("{s}{s} has no symbol {s}: not a CUDA driver, or one too old", .{ shown, via, field.name });
            return .unavailable;
        };
        @field(api, field.name) = @ptrCast(@alignCast(symbol));
    }
    const init = api.cuInit(0);
    if (init != 0) {
        setReason("cuInit failed: {s} ({d}): {s} [driver {s}{s}]", .{ errorName(init), init, errorString(init), shown, via });
        return .unavailable;
    }
    var version: c_int = 0;
    _ = api.cuDriverGetVersion(&version);
    driver_version = version;
    var count: c_int = 0;
    const counted = api.cuDeviceGetCount(&count);
    if (counted != 0) {
        setReason("cuDeviceGetCount failed: {s} ({d}): {s}", .{ errorName(counted), counted, errorString(counted) });
        return .unavailable;
    }
    if (count <= 0) {
        setReason("the CUDA driver ({s}{s}) sees no device", .{ shown, via });
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
    return state.load(.acquire) == .ready;
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

/// Negative ABI statuses (a positive status is a CUresult).
pub const STATUS_UNAVAILABLE: i32 = -1;
pub const STATUS_INVALID_ARGUMENT: i32 = -2;
pub const STATUS_INVALID_DEVICE: i32 = -3;
pub const STATUS_OUT_OF_MEMORY: i32 = -4;

threadlocal var last_result: CUresult = 0;
threadlocal var last_call: []const u8 = "";

/// The ABI status of an error: the failing call's CUresult, or a negative library status.
pub fn statusOf(err: Error) i32 {
    return switch (err) {
        error.Driver => last_result,
        error.Unavailable => STATUS_UNAVAILABLE,
        error.InvalidArgument => STATUS_INVALID_ARGUMENT,
        error.InvalidDevice => STATUS_INVALID_DEVICE,
        error.OutOfMemory => STATUS_OUT_OF_MEMORY,
    };
}

/// Calls a driver function; a non-zero CUresult is recorded for this thread and becomes
/// `error.Driver`.
fn call(comptime name: []const u8, args: anytype) Error!void {
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
    const text = std.fmt.bufPrint(out, "{s}\n{s}\n{s}", .{ last_call, errorName(last_result), errorString(last_result) }) catch out;
    if (text.len < out.len) out[text.len] = 0;
    return last_result;
}

fn ready() Error!void {
    if (!ensure()) return error.Unavailable;
}

// ---------------------------------------------------------------------------------------------
// Primary contexts: retained once per device for the life of the process, pushed around calls.

const MAX_DEVICES = 64;
var contexts: [MAX_DEVICES]CUcontext = [_]CUcontext{null} ** MAX_DEVICES;
var context_mutex: std.Thread.Mutex = .{};

fn primaryContext(ordinal: i32) Error!CUcontext {
    try ready();
    if (ordinal < 0 or ordinal >= device_count or ordinal >= MAX_DEVICES) return error.InvalidDevice;
    const index: usize = @intCast(ordinal);
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
}

fn leave() void {
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
    try call("cuDeviceGetAttribute", .{ &info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device });
    try call("cuDeviceGetAttribute", .{ &info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device });
    try call("cuDeviceGetAttribute", .{ &info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device });
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
    const attributes = [_]c_int{ CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL };
    const data = [_]*anyopaque{ &slots[0], &slots[1], &slots[2] };
    try call("cuPointerGetAttributes", .{ @as(c_uint, attributes.len), &attributes, &data, @as(CUdeviceptr, address) });
    var out = PointerAttributes{
        .memory_type = @truncate(slots[0]),
        .managed = slots[1] != 0,
        .ordinal = @bitCast(@as(u32, @truncate(slots[2]))),
    };
    if (with_range and out.memory_type != 0) {
        var range = [_]u64{ 0, 0 };
        const range_attributes = [_]c_int{ CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE };
        const range_data = [_]*anyopaque{ &range[0], &range[1] };
        // Older drivers do not know these attributes; the range then stays unknown.
        if (api.cuPointerGetAttributes(2, &range_attributes, &range_data, address) == 0) {
            out.range_start = range[0];
            out.range_size = range[1];
        }
    }
    return out;
}

/// Whether the driver's view of a byte confirms a tensor's device claim.
pub fn confirms(device_type: i32, device_id: i32, a: PointerAttributes) bool {
    return switch (device_type) {
        // Device memory of that device, or managed memory (which every device can reach).
        DEVICE_CUDA => a.managed or (a.memory_type == CU_MEMORYTYPE_DEVICE and a.ordinal == device_id),
        // Page-locked host memory the driver knows (cuMemHostAlloc / cuMemHostRegister).
        DEVICE_CUDA_HOST => !a.managed and a.memory_type == CU_MEMORYTYPE_HOST,
        DEVICE_CUDA_MANAGED => a.managed,
        else => true,
    };
}

/// `Description.layout` bit: the device claim was confirmed (host memory, or the CUDA driver
/// agreed). Without it the view is unverified.
pub const DEVICE_VERIFIED: u32 = 0x100;

/// `detail_dim` of a device-claim refusal that concerns the ordinal, not a byte.
pub const CLAIM_ORDINAL: i32 = -2;

fn refuseClaim(out: *describe.Description, status: describe.Status, dim: i32, found: i64, limit: i64) describe.Status {
    out.status = @intFromEnum(status);
    out.detail_dim = dim;
    out.detail_found = found;
    out.detail_limit = limit;
    return status;
}

/// Import-time device check on an accepted description: CPU memory is verified as is; a CUDA,
/// CUDAHost or CUDAManaged claim is checked against the driver's pointer attributes at the first
/// and the last byte the tensor reaches when a driver is available, and left unverified
/// otherwise. A false claim is refused (`device_claim`); a driver failure is refused (`cuda`).
pub fn checkImport(out: *describe.Description) describe.Status {
    const device_type = out.device_type;
    if (device_type == DEVICE_CPU) {
        out.layout |= DEVICE_VERIFIED;
        return .ok;
    }
    if (!isCudaFamily(device_type) or !ensure()) return .ok;
    const device_id = out.device_id;
    if (device_type == DEVICE_CUDA and device_id >= device_count) {
        return refuseClaim(out, .device_claim, CLAIM_ORDINAL, device_id, device_count);
    }
    if (out.size == 0) {
        out.layout |= DEVICE_VERIFIED;
        return .ok;
    }
    // The byte range, as describe computed it (exact: every value is below 2^53).
    const padded = out.flags & 4 != 0;
    const bits: f64 = @floatFromInt(if (out.dtype_bits < 8 and padded) 8 else out.dtype_bits);
    // i128: a producer's address may lie anywhere in [0, 2^64); describe checked that the whole
    // range does, so both ends fit a usize.
    const lo: i128 = @intFromFloat(@floor(out.min_offset * bits / 8));
    const hi: i128 = @intFromFloat(@ceil((out.max_offset + 1) * bits / 8));
    const address: i128 = @as(u64, out.address_hi) << 32 | out.address_lo;
    const ends = [_]i128{ address + lo, address + hi - 1 };
    for (ends, 0..) |end, which| {
        if (end < 0 or end > std.math.maxInt(usize)) return refuseClaim(out, .overflow, -1, 0, 0);
        const a = pointerAttributes(@intCast(end), false) catch
            return refuseClaim(out, .cuda, @intCast(which), last_result, 0);
        if (!confirms(device_type, device_id, a)) {
            const found: i64 = @as(i64, a.memory_type) | (@as(i64, @intFromBool(a.managed)) << 8);
            return refuseClaim(out, .device_claim, @intCast(which), found, a.ordinal);
        }
    }
    out.layout |= DEVICE_VERIFIED;
    return .ok;
}

// ---------------------------------------------------------------------------------------------
// Memory

pub const AllocKind = enum(u32) { device = 0, host = 1, managed = 2 };

const Counter = enum(u8) {
    device_allocations,
    device_bytes,
    host_allocations,
    host_bytes,
    managed_allocations,
    managed_bytes,
    events,
    free_failures,
};
pub const COUNTERS = @typeInfo(Counter).@"enum".fields.len;
var counters = [_]std.atomic.Value(i64){std.atomic.Value(i64).init(0)} ** COUNTERS;

fn bump(counter: Counter, delta: i64) void {
    _ = counters[@intFromEnum(counter)].fetchAdd(delta, .monotonic);
}

pub fn snapshot(out: []f64) usize {
    const n = @min(out.len, COUNTERS);
    for (out[0..n], 0..) |*slot, i| slot.* = @floatFromInt(counters[i].load(.monotonic));
    return n;
}

fn ownerKind(kind: AllocKind) owner_mod.Kind {
    return switch (kind) {
        .device => .cuda_device,
        .host => .cuda_host,
        .managed => .cuda_managed,
    };
}

fn countAllocation(kind: owner_mod.Kind, bytes: usize, sign: i64) void {
    const size = sign * @as(i64, @intCast(bytes));
    switch (kind) {
        .cuda_device => {
            bump(.device_allocations, sign);
            bump(.device_bytes, size);
        },
        .cuda_host => {
            bump(.host_allocations, sign);
            bump(.host_bytes, size);
        },
        .cuda_managed => {
            bump(.managed_allocations, sign);
            bump(.managed_bytes, size);
        },
        else => {},
    }
}

fn freeRaw(kind: owner_mod.Kind, address: usize) CUresult {
    return switch (kind) {
        .cuda_host => api.cuMemFreeHost(@ptrFromInt(address)),
        else => api.cuMemFree_v2(address),
    };
}

/// Allocates device, page-locked host or managed memory (at least 1 byte, so the address is never
/// NULL) in the primary context of `ordinal`, inside a new owner that frees it.
pub fn allocate(kind: AllocKind, ordinal: i32, bytes: usize, zero: bool) Error!*owner_mod.Owner {
    try enter(ordinal);
    defer leave();
    const size = @max(bytes, 1);
    var address: usize = 0;
    switch (kind) {
        .device => {
            var ptr: CUdeviceptr = 0;
            try call("cuMemAlloc_v2", .{ &ptr, size });
            address = @intCast(ptr);
        },
        .host => {
            var ptr: ?*anyopaque = null;
            try call("cuMemHostAlloc", .{ &ptr, size, CU_MEMHOSTALLOC_PORTABLE });
            address = @intFromPtr(ptr);
        },
        .managed => {
            var ptr: CUdeviceptr = 0;
            try call("cuMemAllocManaged", .{ &ptr, size, CU_MEM_ATTACH_GLOBAL });
            address = @intCast(ptr);
        },
    }
    const okind = ownerKind(kind);
    errdefer _ = freeRaw(okind, address);
    if (zero) switch (kind) {
        .host => @memset(@as([*]u8, @ptrFromInt(address))[0..size], 0),
        else => try call("cuMemsetD8_v2", .{ @as(CUdeviceptr, address), 0, size }),
    };
    const created = owner_mod.create(okind, address, bytes) orelse return error.OutOfMemory;
    created.device = ordinal;
    countAllocation(okind, bytes, 1);
    return created;
}

/// Frees what `allocate` made, with its device's context current (owner release; any thread).
/// A failure cannot be reported to anyone: it is counted instead.
pub fn freeOwned(o: *const owner_mod.Owner) void {
    countAllocation(o.kind, o.bytes, -1);
    enter(o.device) catch {
        bump(.free_failures, 1);
        return;
    };
    defer leave();
    if (freeRaw(o.kind, o.payload) != 0) bump(.free_failures, 1);
}

pub const Direction = enum(u32) { host_to_device = 0, device_to_host = 1, device_to_device = 2, peer = 3 };

/// Copies `bytes` in the context of `ordinal` (for `peer`: `ordinal` is the destination's device,
/// `src_ordinal` the source's). `stream` 0 uses the synchronous calls; any other value enqueues on
/// that stream, and `wait` then synchronizes it before returning.
pub fn copy(direction: Direction, dst: usize, src: usize, bytes: usize, ordinal: i32, src_ordinal: i32, stream: usize, wait: bool) Error!void {
    if (bytes == 0) return;
    try enter(ordinal);
    defer leave();
    const d: CUdeviceptr = dst;
    const s: CUdeviceptr = src;
    if (stream == 0) {
        switch (direction) {
            .host_to_device => try call("cuMemcpyHtoD_v2", .{ d, @as(?*const anyopaque, @ptrFromInt(src)), bytes }),
            .device_to_host => try call("cuMemcpyDtoH_v2", .{ @as(?*anyopaque, @ptrFromInt(dst)), s, bytes }),
            .device_to_device => try call("cuMemcpyDtoD_v2", .{ d, s, bytes }),
            .peer => try call("cuMemcpyPeer", .{ d, try primaryContext(ordinal), s, try primaryContext(src_ordinal), bytes }),
        }
        return;
    }
    const st = streamOf(stream);
    switch (direction) {
        .host_to_device => try call("cuMemcpyHtoDAsync_v2", .{ d, @as(?*const anyopaque, @ptrFromInt(src)), bytes, st }),
        .device_to_host => try call("cuMemcpyDtoHAsync_v2", .{ @as(?*anyopaque, @ptrFromInt(dst)), s, bytes, st }),
        .device_to_device => try call("cuMemcpyDtoDAsync_v2", .{ d, s, bytes, st }),
        .peer => try call("cuMemcpyPeerAsync", .{ d, try primaryContext(ordinal), s, try primaryContext(src_ordinal), bytes, st }),
    }
    if (wait) try call("cuStreamSynchronize", .{st});
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
    if (stream <= STREAM_PER_THREAD) return error.InvalidArgument;
    try enter(ordinal);
    defer leave();
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
    const na = if (a == 0) STREAM_LEGACY else a;
    const nb = if (b == 0) STREAM_LEGACY else b;
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
    if (value == STREAM_NO_SYNC) return null;
    if (value == 0) return error.InvalidArgument;
    return value;
}

// ---------------------------------------------------------------------------------------------
// Tests (the driver-free parts; tests/cuda*.test.ts drive the rest through a fake driver)

const testing = std.testing;

test "claims are confirmed only by matching pointer attributes" {
    const device0 = PointerAttributes{ .memory_type = CU_MEMORYTYPE_DEVICE, .ordinal = 0, .managed = false };
    const pinned = PointerAttributes{ .memory_type = CU_MEMORYTYPE_HOST, .ordinal = 0, .managed = false };
    const managed = PointerAttributes{ .memory_type = CU_MEMORYTYPE_DEVICE, .ordinal = 0, .managed = true };
    const pageable = PointerAttributes{ .memory_type = 0, .ordinal = 0, .managed = false };
    try testing.expect(confirms(DEVICE_CUDA, 0, device0));
    try testing.expect(!confirms(DEVICE_CUDA, 1, device0));
    try testing.expect(confirms(DEVICE_CUDA, 1, managed));
    try testing.expect(!confirms(DEVICE_CUDA, 0, pinned));
    try testing.expect(!confirms(DEVICE_CUDA, 0, pageable));
    try testing.expect(confirms(DEVICE_CUDA_HOST, 0, pinned));
    try testing.expect(!confirms(DEVICE_CUDA_HOST, 0, pageable));
    try testing.expect(!confirms(DEVICE_CUDA_HOST, 0, device0));
    try testing.expect(!confirms(DEVICE_CUDA_HOST, 0, managed));
    try testing.expect(confirms(DEVICE_CUDA_MANAGED, 0, managed));
    try testing.expect(!confirms(DEVICE_CUDA_MANAGED, 0, device0));
}

test "protocol stream values" {
    try testing.expectEqual(@as(?usize, null), try consumerStream(STREAM_NO_SYNC));
    try testing.expectError(error.InvalidArgument, consumerStream(0));
    try testing.expectEqual(@as(?usize, 1), try consumerStream(1));
    try testing.expectEqual(@as(?usize, 2), try consumerStream(2));
    try testing.expectEqual(@as(?usize, 0x7f00_1234), try consumerStream(0x7f00_1234));
    try testing.expect(sameStream(0, STREAM_LEGACY));
    try testing.expect(!sameStream(STREAM_LEGACY, STREAM_PER_THREAD));
}

test "errors map to ABI statuses" {
    try testing.expectEqual(STATUS_UNAVAILABLE, statusOf(error.Unavailable));
    try testing.expectEqual(STATUS_INVALID_DEVICE, statusOf(error.InvalidDevice));
    last_result = 2;
    try testing.expectEqual(@as(i32, 2), statusOf(error.Driver));
    last_result = 0;
}
