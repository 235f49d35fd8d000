//! The device claim of an accepted tensor, checked after validation (describe.zig) and before the
//! owner is recorded (admit.zig): CPU memory is verified as is; a CUDA, CUDAHost or CUDAManaged
//! claim is checked against the driver's pointer attributes at the first and the last byte the
//! tensor reaches when a driver is available (this may open it: dlopen, cuInit), and left
//! unverified otherwise. A false claim is refused (`device_claim`); a driver failure too (`cuda`).

const std = @import("std");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const cuda = @import("cuda.zig");
const dlpack = @import("dlpack.zig");

const Description = abi.Description;
const Status = abi.Status;
const DeviceType = dlpack.DeviceType;

/// Checks the claim of `out`, which the validator accepted; sets `layout.device_verified` when
/// the claim is confirmed.
pub fn deviceClaim(out: *Description) Status {
    assert(out.status == @intFromEnum(Status.ok));
    assert(out.ndim >= 0 and out.ndim <= dlpack.rank_max);
    if (out.device_type == @intFromEnum(DeviceType.cpu)) return verified(out);
    return cudaClaim(out);
}

/// A claim other than CPU memory. Out of line: inlined, its driver calls and their out-parameters
/// made the whole validator's frame larger and spilled more (host imports 1.5 ns slower).
noinline fn cudaClaim(out: *Description) Status {
    const device_type = out.device_type;
    if (!DeviceType.isCudaFamily(device_type) or !cuda.ensure()) return .ok;
    const device_id = out.device_id;
    const device_count = cuda.deviceCount();
    if (device_type == @intFromEnum(DeviceType.cuda) and device_id >= device_count) {
        return out.refuse(.device_claim, abi.detail_dim.claim_ordinal, device_id, device_count);
    }
    if (out.size == 0) return verified(out);
    const ends = byteRange(out) orelse return out.refuse(.overflow, abi.detail_dim.none, 0, 0);
    for (ends, 0..) |end, which| {
        const a = cuda.pointerAttributes(end, false) catch
            return out.refuse(.cuda, @intCast(which), cuda.lastResult(), 0);
        if (!confirms(device_type, device_id, a)) {
            const found: i64 = @as(i64, a.memory_type) | (@as(i64, @intFromBool(a.managed)) << 8);
            return out.refuse(.device_claim, @intCast(which), found, a.ordinal);
        }
    }
    return verified(out);
}

fn verified(out: *Description) Status {
    out.layout |= abi.layout.device_verified;
    return .ok;
}

/// The first and the last byte a non-empty tensor reaches, as the validator computed its span
/// (exact: every value is below 2^53); null when they do not fit an address.
fn byteRange(out: *const Description) ?[2]usize {
    assert(out.size > 0);
    assert(out.min_offset <= 0 and out.max_offset >= 0);
    const padded = out.flags & dlpack.flag.is_subbyte_type_padded != 0;
    const bits: f64 = @floatFromInt(if (out.dtype_bits < 8 and padded) 8 else out.dtype_bits);
    // i128: a producer's address may lie anywhere in [0, 2^64); the validator checked that the
    // whole range does, so both ends fit a usize.
    const lo: i128 = @intFromFloat(@floor(out.min_offset * bits / 8));
    const hi: i128 = @intFromFloat(@ceil((out.max_offset + 1) * bits / 8));
    assert(lo <= 0 and hi > lo);
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

test "CPU memory is verified; other claims are not without a driver check" {
    var out = std.mem.zeroes(Description);
    out.device_type = @intFromEnum(DeviceType.cpu);
    out.size = 2;
    try testing.expectEqual(Status.ok, deviceClaim(&out));
    try testing.expect(out.layout & abi.layout.device_verified != 0);
    // ROCm memory cannot be checked by this library: accepted, never verified.
    out.layout = 0;
    out.device_type = @intFromEnum(DeviceType.rocm);
    try testing.expectEqual(Status.ok, deviceClaim(&out));
    try testing.expectEqual(@as(u32, 0), out.layout & abi.layout.device_verified);
}
