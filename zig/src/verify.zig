//! The device claim of an accepted tensor, checked after validation (describe.zig) and before the
//! owner is recorded (admit.zig). A CUDA, CUDAHost or CUDAManaged claim is checked against the
//! driver's pointer attributes at the first and the last byte the tensor reaches when a driver is
//! available (this may open it: dlopen, cuInit), and left unverified otherwise. A false claim is
//! refused (`device_claim`); a driver failure too (`cuda`). Host memory must lie in the process's
//! mappings: every byte the tensor reaches readable, else it is refused (`unmapped_data`), and the
//! import is read-only where any of it cannot be written. The validator checks CPU memory; the
//! host-accessible CUDAHost, CUDAManaged and ROCMHost claims are checked here, after the claim.
//! Device memory is never a host mapping: its data range is left to the driver.

const std = @import("std");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const cuda = @import("cuda.zig");
const dlpack = @import("dlpack.zig");
const mappings = @import("mappings.zig");

const Description = abi.Description;
const Status = abi.Status;
const DeviceType = dlpack.DeviceType;

/// Checks the claim of `out`, which the validator accepted; sets `layout.device_verified` when
/// the claim is confirmed.
pub fn deviceClaim(out: *Description) Status {
    assert(out.status == @intFromEnum(Status.ok));
    assert(out.ndim >= 0 and out.ndim <= dlpack.rank_max);
    // CPU memory: the validator checked its data range already (where the integers are at hand).
    if (out.device_type == @intFromEnum(DeviceType.cpu)) return verified(out);
    return otherClaim(out);
}

/// The data range of other host memory (CUDAHost, CUDAManaged, ROCMHost): readable (else
/// refused), and read-only where it cannot be written.
fn hostData(out: *Description) ?Status {
    if (out.size == 0) return null;
    const range = byteRange(out) orelse return out.refuse(.overflow, abi.detail_dim.none, 0, 0);
    const first, const last = range;
    const len = last - first + 1;
    const perms = mappings.dataAccess(first, len);
    if (perms == 0) {
        const found: i64 = @bitCast(@as(u64, first));
        return out.refuse(.unmapped_data, abi.detail_dim.none, found, @intCast(len));
    }
    if (perms & mappings.perm_write == 0) {
        out.flags |= @truncate(dlpack.flag.read_only);
        out.layout |= abi.layout.data_readonly;
    }
    return null;
}

/// Whether a device type's memory is host memory the CPU reads directly.
fn isHostAccessible(device_type: i32) bool {
    return device_type == @intFromEnum(DeviceType.cpu) or
        device_type == @intFromEnum(DeviceType.cuda_host) or
        device_type == @intFromEnum(DeviceType.cuda_managed) or
        device_type == @intFromEnum(DeviceType.rocm_host);
}

/// A claim other than CPU memory. perf(native import): out of line, as inlined its driver calls
/// and their out-parameters made the whole validator's frame larger and spilled more.
noinline fn otherClaim(out: *Description) Status {
    const device_type = out.device_type;
    const host = isHostAccessible(device_type);
    if (!DeviceType.isCudaFamily(device_type) or !cuda.ensure()) {
        // Unverified; host memory must still be readable before any view reads it.
        if (host) {
            if (hostData(out)) |refused| return refused;
        }
        return .ok;
    }
    if (cudaClaim(out)) |refused| return refused;
    if (host) {
        if (hostData(out)) |refused| return refused;
    }
    return verified(out);
}

/// A CUDA-family claim against the driver's pointer attributes (a driver is open).
fn cudaClaim(out: *Description) ?Status {
    const device_type = out.device_type;
    const device_id = out.device_id;
    const device_count = cuda.deviceCount();
    if (device_type == @intFromEnum(DeviceType.cuda) and device_id >= device_count) {
        return out.refuse(.device_claim, abi.detail_dim.claim_ordinal, device_id, device_count);
    }
    if (out.size == 0) return null;
    const ends = byteRange(out) orelse return out.refuse(.overflow, abi.detail_dim.none, 0, 0);
    for (ends, 0..) |end, which| {
        const a = cuda.pointerAttributes(end, false) catch
            return out.refuse(.cuda, @intCast(which), cuda.lastResult(), 0);
        if (!confirms(device_type, device_id, a)) {
            const found: i64 = @as(i64, a.memory_type) | (@as(i64, @intFromBool(a.managed)) << 8);
            return out.refuse(.device_claim, @intCast(which), found, a.ordinal);
        }
    }
    return null;
}

fn verified(out: *Description) Status {
    out.layout |= abi.layout.device_verified;
    return .ok;
}

/// The first and the last byte a non-empty tensor reaches, as the validator computed its span, in
/// integers (the offsets are exact below 2^53, the item at most 128 bits: every product fits an
/// i64); null when they do not fit an address.
fn byteRange(out: *const Description) ?[2]usize {
    assert(out.size > 0);
    const padded = out.flags & dlpack.flag.is_subbyte_type_padded != 0;
    const bits: i64 = if (out.dtype_bits < 8 and padded) 8 else out.dtype_bits;
    assert(bits > 0 and bits <= 128);
    const min = abi.integerFromF64(out.min_offset) orelse return null;
    const max = abi.integerFromF64(out.max_offset) orelse return null;
    assert(min <= 0 and max >= 0);
    const lo = @divFloor(min * bits, 8);
    const hi = @divFloor((max + 1) * bits + 7, 8);
    assert(lo <= 0 and hi > lo);
    // i128: a producer's address may lie anywhere in [0, 2^64); the validator checked that the
    // whole range does, so both ends fit a usize.
    const address: i128 = out.address();
    const first = address + lo;
    const last = address + hi - 1;
    if (first < 0 or last > std.math.maxInt(usize)) return null;
    return .{ @intCast(first), @intCast(last) };
}

/// Whether the driver's view of a byte confirms a tensor's device claim.
pub fn confirms(device_type: i32, device_id: i32, a: cuda.PointerAttributes) bool {
    return switch (device_type) {
        // Device memory of that device, or managed memory (which every device can reach).
        @intFromEnum(DeviceType.cuda) => a.managed or
            (a.memory_type == cuda.CU_MEMORYTYPE_DEVICE and a.ordinal == device_id),
        // Page-locked host memory the driver knows (cuMemHostAlloc / cuMemHostRegister).
        @intFromEnum(DeviceType.cuda_host) => !a.managed and
            a.memory_type == cuda.CU_MEMORYTYPE_HOST,
        @intFromEnum(DeviceType.cuda_managed) => a.managed,
        else => true,
    };
}

const fresh = @import("fresh_pages.zig");
const testing = std.testing;

test "claims are confirmed only by matching pointer attributes" {
    const device = cuda.CU_MEMORYTYPE_DEVICE;
    const host = cuda.CU_MEMORYTYPE_HOST;
    const device0 = cuda.PointerAttributes{ .memory_type = device, .ordinal = 0, .managed = false };
    const pinned = cuda.PointerAttributes{ .memory_type = host, .ordinal = 0, .managed = false };
    const managed = cuda.PointerAttributes{ .memory_type = device, .ordinal = 0, .managed = true };
    const pageable = cuda.PointerAttributes{ .memory_type = 0, .ordinal = 0, .managed = false };
    const on_device: i32 = @intFromEnum(DeviceType.cuda);
    const on_host: i32 = @intFromEnum(DeviceType.cuda_host);
    const in_managed: i32 = @intFromEnum(DeviceType.cuda_managed);
    try testing.expect(confirms(on_device, 0, device0));
    try testing.expect(!confirms(on_device, 1, device0));
    try testing.expect(confirms(on_device, 1, managed));
    try testing.expect(!confirms(on_device, 0, pinned));
    try testing.expect(!confirms(on_device, 0, pageable));
    try testing.expect(confirms(on_host, 0, pinned));
    try testing.expect(!confirms(on_host, 0, pageable));
    try testing.expect(!confirms(on_host, 0, device0));
    try testing.expect(!confirms(on_host, 0, managed));
    try testing.expect(confirms(in_managed, 0, managed));
    try testing.expect(!confirms(in_managed, 0, device0));
}

/// A description of `count` float32 elements from `address` on `device_type`, as the validator
/// leaves it.
fn hostDescription(device_type: DeviceType, address: usize, count: f64) Description {
    var out = std.mem.zeroes(Description);
    out.device_type = @intFromEnum(device_type);
    out.dtype_bits = 32;
    out.size = count;
    out.max_offset = count - 1;
    out.setAddress(address);
    return out;
}

test "CPU memory is verified; other claims are not without a driver check" {
    var data = [_]f32{ 1, 2 };
    var out = hostDescription(.cpu, @intFromPtr(&data), 2);
    try testing.expectEqual(Status.ok, deviceClaim(&out));
    try testing.expect(out.layout & abi.layout.device_verified != 0);
    try testing.expectEqual(@as(u32, 0), out.layout & abi.layout.data_readonly);
    // ROCm memory cannot be checked by this library: accepted, never verified.
    out = hostDescription(.rocm, 0x1000, 2);
    try testing.expectEqual(Status.ok, deviceClaim(&out));
    try testing.expectEqual(@as(u32, 0), out.layout & abi.layout.device_verified);
}

test "other host data must be readable; read-only memory makes a read-only import" {
    if (@import("builtin").os.tag != .linux or !mappings.available()) return error.SkipZigTest;
    const page = std.heap.page_size_min;
    const prot = std.posix.PROT;
    const region = try fresh.freshPages(&.{ prot.READ | prot.WRITE, prot.READ, prot.NONE });
    defer std.posix.munmap(region);
    const base = @intFromPtr(region.ptr);
    const elements: f64 = @floatFromInt(page / 4);
    // With a driver, CUDAHost and CUDAManaged claims on plain memory are false claims.
    const hosts = [_]DeviceType{ .rocm_host, .cuda_host, .cuda_managed };
    const checked: usize = if (cuda.ensure()) 1 else hosts.len;
    for (hosts[0..checked]) |device| {
        var out = hostDescription(device, base, elements);
        try testing.expectEqual(Status.ok, deviceClaim(&out));
        try testing.expectEqual(@as(u32, 0), out.flags);
        out = hostDescription(device, base + page - 8, 4);
        try testing.expectEqual(Status.ok, deviceClaim(&out));
        try testing.expectEqual(@as(u32, 1), out.flags);
        try testing.expect(out.layout & abi.layout.data_readonly != 0);
        for ([_]usize{ base + 2 * page, base + 2 * page - 8, 16, (1 << 47) - 8 }) |bad| {
            out = hostDescription(device, bad, 4);
            try testing.expectEqual(Status.unmapped_data, deviceClaim(&out));
            try testing.expectEqual(@as(i64, @intCast(bad)), out.detail_found);
            try testing.expectEqual(@as(i64, 16), out.detail_limit);
        }
    }
    // Device memory is no host mapping: its range is the driver's to check.
    var device = hostDescription(.cuda, 16, 4);
    try testing.expectEqual(Status.ok, deviceClaim(&device));
    // Negative strides reach below element 0; an empty tensor reaches nothing.
    var below = hostDescription(.rocm_host, base + 8, 4);
    below.min_offset = -3;
    below.max_offset = 0;
    try testing.expectEqual(Status.unmapped_data, deviceClaim(&below));
    try testing.expectEqual(@as(i64, @intCast(base - 4)), below.detail_found);
    var empty = hostDescription(.rocm_host, 16, 0);
    empty.max_offset = 0;
    try testing.expectEqual(Status.ok, deviceClaim(&empty));
}
