//! The C boundary of CUDA (cuda.zig). The driver is opened with dlopen at first use
//! (`DLPACK_CUDA_LIB`, else libcuda.so.1); nothing here needs CUDA to load. Statuses: 0 ok, a
//! positive CUresult for a driver failure (details from `dlpk_cuda_last_error` on the same
//! thread), or a negative `abi.CudaStatus`. Handles (streams, events) travel as unsigned words; 1
//! and 2 are the legacy and per-thread default streams.

const std = @import("std");
const abi = @import("abi.zig");
const c_core = @import("c_core.zig");
const cuda = @import("cuda.zig");
const exports = @import("exports.zig");
const owner = @import("owner.zig");

fn cudaStatus(status: abi.CudaStatus) i32 {
    return @intFromEnum(status);
}

/// The ABI status of an error: the failing call's CUresult, or a negative library status.
fn cudaStatusOf(err: cuda.Error) i32 {
    return switch (err) {
        error.Driver => cuda.lastResult(),
        error.Unavailable => cudaStatus(.unavailable),
        error.InvalidArgument => cudaStatus(.invalid_argument),
        error.InvalidDevice => cudaStatus(.invalid_device),
        error.OutOfMemory => cudaStatus(.out_of_memory),
    };
}

pub fn cudaResult(result: cuda.Error!void) i32 {
    result catch |err| return cudaStatusOf(err);
    return 0;
}

/// Opens the driver if needed: 0 when it is usable, -1 when not.
export fn dlpk_cuda_status() i32 {
    return if (cuda.ensure()) 0 else cudaStatus(.unavailable);
}

/// Copies why the driver is unavailable into `out` (UTF-8, not terminated); returns the length.
export fn dlpk_cuda_reason(out: [*]u8, capacity: u32) u32 {
    const text = cuda.reason();
    const n = @min(text.len, capacity);
    @memcpy(out[0..n], text[0..n]);
    return @intCast(n);
}

/// This thread's last driver failure as "<call>\n<error name>\n<error string>" (NUL-terminated
/// when it fits); returns its CUresult.
export fn dlpk_cuda_last_error(out: [*]u8, capacity: u32) i32 {
    return cuda.lastError(out[0..capacity]);
}

export fn dlpk_cuda_driver_version() i32 {
    return cuda.driverVersion();
}

/// The number of devices, or -1 without a driver.
export fn dlpk_cuda_device_count() i32 {
    return if (cuda.ensure()) cuda.deviceCount() else cudaStatus(.unavailable);
}

/// Writes total memory, compute capability major and minor, and multiprocessor count into
/// `out[0..4]`, and "<name>\n<pci bus id>" into `text`.
export fn dlpk_cuda_device_info(ordinal: i32, out: *[4]f64, text: [*]u8, capacity: u32) i32 {
    const info = cuda.deviceInfo(ordinal, text[0..capacity]) catch |err| return cudaStatusOf(err);
    out.* = .{
        @floatFromInt(info.total_memory),
        @floatFromInt(info.cc_major),
        @floatFromInt(info.cc_minor),
        @floatFromInt(info.multiprocessors),
    };
    return 0;
}

/// Writes memory type (0 unregistered, 1 host, 2 device, 3 array, 4 unified), device ordinal,
/// managed (0/1), range start and range size (0 when unknown) into `out[0..5]`.
export fn dlpk_cuda_pointer_info(address: f64, out: *[5]f64) i32 {
    const where = abi.addressFromF64(address) orelse return cudaStatus(.invalid_argument);
    const a = cuda.pointerAttributes(where, true) catch |err| return cudaStatusOf(err);
    out.* = .{
        @floatFromInt(a.memory_type),
        @floatFromInt(a.ordinal),
        @floatFromInt(@intFromBool(a.managed)),
        @floatFromInt(a.range_start),
        @floatFromInt(a.range_size),
    };
    return 0;
}

/// Allocates `bytes` of device (kind 0), page-locked host (1) or managed memory (2) in the primary
/// context of `ordinal`, zeroed on request; writes address and owner into the description.
export fn dlpk_cuda_alloc(kind: u32, ordinal: i32, bytes: f64, zero: u32, out_address: f64) i32 {
    const out = c_core.descriptionAt(out_address) orelse return cudaStatus(.invalid_argument);
    const size = abi.integerFromF64(bytes) orelse return cudaStatus(.invalid_argument);
    if (size < 0 or kind > 2) return cudaStatus(.invalid_argument);
    const created = owner.createCuda(
        @enumFromInt(kind),
        ordinal,
        @intCast(size),
        zero != 0,
    ) catch |err|
        return cudaStatusOf(err);
    out.setAddress(created.payload);
    out.setOwner(@intFromPtr(created));
    c_core.owed(abi.ownerEntry(@intFromPtr(created)));
    return 0;
}

/// Copies `bytes`: direction 0 host->device, 1 device->host, 2 device->device, 3 device->device
/// across devices (`ordinal` the destination's, `src_ordinal` the source's). `stream` 0 uses the
/// synchronous calls; otherwise the copy is queued on `stream` and, with `wait`, awaited.
export fn dlpk_cuda_copy(
    direction: u32,
    dst_address: f64,
    src_address: f64,
    bytes: f64,
    ordinal: i32,
    src_ordinal: i32,
    stream: usize,
    wait: u32,
) i32 {
    const size = abi.integerFromF64(bytes) orelse return cudaStatus(.invalid_argument);
    const dst = abi.addressFromF64(dst_address) orelse return cudaStatus(.invalid_argument);
    const src = abi.addressFromF64(src_address) orelse return cudaStatus(.invalid_argument);
    if (size < 0 or direction > 3) return cudaStatus(.invalid_argument);
    return cudaResult(cuda.copy(.{
        .direction = @enumFromInt(direction),
        .dst = dst,
        .src = src,
        .bytes = @intCast(size),
        .ordinal = ordinal,
        .src_ordinal = src_ordinal,
    }, stream, wait != 0));
}

export fn dlpk_cuda_stream_create(ordinal: i32, out: *u64) i32 {
    out.* = cuda.streamCreate(ordinal) catch |err| return cudaStatusOf(err);
    return 0;
}

export fn dlpk_cuda_stream_destroy(ordinal: i32, stream: usize) i32 {
    return cudaResult(cuda.streamDestroy(ordinal, stream));
}

export fn dlpk_cuda_stream_synchronize(ordinal: i32, stream: usize) i32 {
    return cudaResult(cuda.streamSynchronize(ordinal, stream));
}

export fn dlpk_cuda_event_create(ordinal: i32, out: *u64) i32 {
    out.* = cuda.eventCreate(ordinal) catch |err| return cudaStatusOf(err);
    return 0;
}

export fn dlpk_cuda_event_record(ordinal: i32, event: usize, stream: usize) i32 {
    return cudaResult(cuda.eventRecord(ordinal, event, stream));
}

export fn dlpk_cuda_event_destroy(ordinal: i32, event: usize) i32 {
    return cudaResult(cuda.eventDestroy(ordinal, event));
}

export fn dlpk_cuda_stream_wait_event(ordinal: i32, stream: usize, event: usize) i32 {
    return cudaResult(cuda.streamWaitEvent(ordinal, stream, event));
}

/// Makes stream `consumer` wait for the work queued so far on stream `producer` (both handles of
/// device `ordinal`'s context; nothing to do when they are the same stream).
export fn dlpk_cuda_fence(ordinal: i32, producer: usize, consumer: usize) i32 {
    return cudaResult(cuda.fence(ordinal, producer, consumer));
}

/// Attaches a producer stream to one of this library's exports of CUDA-family data: an event is
/// recorded on it now and released with the export.
export fn dlpk_cuda_export_attach_stream(
    managed_address: f64,
    versioned: u32,
    ordinal: i32,
    stream: usize,
) i32 {
    const managed = abi.addressFromF64(managed_address) orelse return cudaStatus(.invalid_argument);
    return cudaResult(exports.attachStream(managed, versioned != 0, ordinal, stream));
}

/// `__dlpack__(stream=...)` for one of this library's exports, callable from any thread: `stream`
/// is the protocol value as an unsigned word (all ones for -1: no synchronization; 0: refused with
/// -2; 1 legacy default, 2 per-thread default, else a handle). Python's None is 1. Takes plain
/// words (not f64 addresses) because Python calls it through ctypes, like `dlpk_py_capsule`.
export fn dlpk_cuda_export_fence(managed: usize, versioned: u32, stream: usize) i32 {
    return cudaResult(exports.fenceForConsumer(managed, versioned != 0, stream));
}

/// Live CUDA allocations and bytes (device, host, managed), live events, and failed frees.
export fn dlpk_cuda_stats(out: *[cuda.counter_count]f64) u32 {
    return @intCast(cuda.snapshot(out));
}

test "CUDA errors map to ABI statuses" {
    const testing = std.testing;
    try testing.expectEqual(cudaStatus(.unavailable), cudaStatusOf(error.Unavailable));
    try testing.expectEqual(cudaStatus(.invalid_device), cudaStatusOf(error.InvalidDevice));
    try testing.expectEqual(@as(i32, -1), cudaStatusOf(error.Unavailable));
    try testing.expectEqual(cuda.lastResult(), cudaStatusOf(error.Driver));
}
