//! The DLPack 1.3 ABI: structs, enums and flags, with their layout pinned at compile time.
//! Everything here mirrors the C header's memory layout; nothing here allocates or validates.

const std = @import("std");

/// The highest rank the library accepts; numpy uses the same limit.
pub const MAX_RANK: usize = 64;

/// The DLPack version this library speaks and writes into the versioned exports it makes.
pub const VERSION_MAJOR: u32 = 1;
pub const VERSION_MINOR: u32 = 3;

pub const Version = extern struct {
    major: u32,
    minor: u32,
};

pub const DeviceType = enum(i32) {
    cpu = 1,
    cuda = 2,
    cuda_host = 3,
    opencl = 4,
    vulkan = 7,
    metal = 8,
    vpi = 9,
    rocm = 10,
    rocm_host = 11,
    ext_dev = 12,
    cuda_managed = 13,
    oneapi = 14,
    webgpu = 15,
    hexagon = 16,
    maia = 17,
    trn = 18,
    _,

    /// Only released enum values count: an unknown device cannot be reasoned about.
    pub fn isKnown(value: i32) bool {
        return switch (value) {
            1...4, 7...18 => true,
            else => false,
        };
    }

    /// Memory the CPU may dereference directly.
    pub fn isHostAccessible(value: i32) bool {
        return switch (value) {
            1, 3, 11, 13 => true,
            else => false,
        };
    }
};

pub const Device = extern struct {
    device_type: i32,
    device_id: i32,
};

pub const TypeCode = enum(u8) {
    int = 0,
    uint = 1,
    float = 2,
    opaque_handle = 3,
    bfloat = 4,
    complex = 5,
    bool = 6,
    float8_e3m4 = 7,
    float8_e4m3 = 8,
    float8_e4m3b11fnuz = 9,
    float8_e4m3fn = 10,
    float8_e4m3fnuz = 11,
    float8_e5m2 = 12,
    float8_e5m2fnuz = 13,
    float8_e8m0fnu = 14,
    float6_e2m3fn = 15,
    float6_e3m2fn = 16,
    float4_e2m1fn = 17,
    _,
};

pub const DataType = extern struct {
    code: u8,
    bits: u8,
    lanes: u16,

    /// Whether (code, bits, lanes) names a dtype this library can describe element by element.
    /// Opaque handles and vector lanes are refused: no JS type could hold them.
    pub fn isSupported(self: DataType) bool {
        if (self.lanes != 1) return false;
        const code: TypeCode = @enumFromInt(self.code);
        return switch (code) {
            .int, .uint => switch (self.bits) {
                8, 16, 32, 64 => true,
                else => false,
            },
            .float => switch (self.bits) {
                16, 32, 64 => true,
                else => false,
            },
            .bfloat => self.bits == 16,
            // complex32 (two float16, PyTorch's chalf), complex64, complex128.
            .complex => switch (self.bits) {
                32, 64, 128 => true,
                else => false,
            },
            .bool => self.bits == 8,
            .float8_e3m4,
            .float8_e4m3,
            .float8_e4m3b11fnuz,
            .float8_e4m3fn,
            .float8_e4m3fnuz,
            .float8_e5m2,
            .float8_e5m2fnuz,
            .float8_e8m0fnu,
            => self.bits == 8,
            .float6_e2m3fn, .float6_e3m2fn => self.bits == 6,
            .float4_e2m1fn => self.bits == 4,
            .opaque_handle => false,
            _ => false,
        };
    }
};

pub const Tensor = extern struct {
    data: ?*anyopaque,
    device: Device,
    ndim: i32,
    dtype: DataType,
    /// align(1): a producer's arrays are read as given; a misaligned one must not trap.
    shape: ?[*]align(1) const i64,
    strides: ?[*]align(1) const i64,
    byte_offset: u64,
};

pub const LegacyDeleter = *const fn (self: *ManagedTensor) callconv(.c) void;
pub const VersionedDeleter = *const fn (self: *ManagedTensorVersioned) callconv(.c) void;

/// `DLManagedTensor`: the pre-1.0 struct, still what JAX and many others send.
pub const ManagedTensor = extern struct {
    dl_tensor: Tensor,
    manager_ctx: ?*anyopaque,
    deleter: ?LegacyDeleter,
};

/// `DLManagedTensorVersioned`: version, context, deleter and flags come first and are frozen forever,
/// so a consumer can always find the deleter even for a major version it does not understand.
pub const ManagedTensorVersioned = extern struct {
    version: Version,
    manager_ctx: ?*anyopaque,
    deleter: ?VersionedDeleter,
    flags: u64,
    dl_tensor: Tensor,
};

pub const FLAG_READ_ONLY: u64 = 1 << 0;
pub const FLAG_IS_COPIED: u64 = 1 << 1;
pub const FLAG_IS_SUBBYTE_TYPE_PADDED: u64 = 1 << 2;
pub const FLAGS_KNOWN: u64 = FLAG_READ_ONLY | FLAG_IS_COPIED | FLAG_IS_SUBBYTE_TYPE_PADDED;

comptime {
    // The ABI is defined for 64-bit targets; these numbers are the header's, not Zig's choice.
    std.debug.assert(@sizeOf(Version) == 8);
    std.debug.assert(@sizeOf(Device) == 8);
    std.debug.assert(@sizeOf(DataType) == 4);
    std.debug.assert(@offsetOf(DataType, "bits") == 1);
    std.debug.assert(@offsetOf(DataType, "lanes") == 2);

    std.debug.assert(@sizeOf(Tensor) == 48);
    std.debug.assert(@offsetOf(Tensor, "data") == 0);
    std.debug.assert(@offsetOf(Tensor, "device") == 8);
    std.debug.assert(@offsetOf(Tensor, "ndim") == 16);
    std.debug.assert(@offsetOf(Tensor, "dtype") == 20);
    std.debug.assert(@offsetOf(Tensor, "shape") == 24);
    std.debug.assert(@offsetOf(Tensor, "strides") == 32);
    std.debug.assert(@offsetOf(Tensor, "byte_offset") == 40);

    std.debug.assert(@sizeOf(ManagedTensor) == 64);
    std.debug.assert(@offsetOf(ManagedTensor, "dl_tensor") == 0);
    std.debug.assert(@offsetOf(ManagedTensor, "manager_ctx") == 48);
    std.debug.assert(@offsetOf(ManagedTensor, "deleter") == 56);

    std.debug.assert(@sizeOf(ManagedTensorVersioned) == 80);
    std.debug.assert(@offsetOf(ManagedTensorVersioned, "version") == 0);
    std.debug.assert(@offsetOf(ManagedTensorVersioned, "manager_ctx") == 8);
    std.debug.assert(@offsetOf(ManagedTensorVersioned, "deleter") == 16);
    std.debug.assert(@offsetOf(ManagedTensorVersioned, "flags") == 24);
    std.debug.assert(@offsetOf(ManagedTensorVersioned, "dl_tensor") == 32);
}

/// Managed tensors are 8-byte aligned structs; anything else is not a managed tensor at all.
pub fn isManagedAddress(managed: usize) bool {
    return managed != 0 and managed % @alignOf(ManagedTensorVersioned) == 0;
}

/// Calls a producer's deleter if it has one. The only place the library hands a managed tensor back.
pub fn deleteManaged(managed: usize, versioned: bool) void {
    std.debug.assert(isManagedAddress(managed));
    if (versioned) {
        const m: *ManagedTensorVersioned = @ptrFromInt(managed);
        if (m.deleter) |d| d(m);
    } else {
        const m: *ManagedTensor = @ptrFromInt(managed);
        if (m.deleter) |d| d(m);
    }
}

test "supported dtypes follow the 1.3 table" {
    const ok = [_]DataType{
        .{ .code = 0, .bits = 8, .lanes = 1 },  .{ .code = 1, .bits = 64, .lanes = 1 },
        .{ .code = 2, .bits = 16, .lanes = 1 }, .{ .code = 4, .bits = 16, .lanes = 1 },
        .{ .code = 5, .bits = 64, .lanes = 1 }, .{ .code = 5, .bits = 128, .lanes = 1 },
        .{ .code = 6, .bits = 8, .lanes = 1 },  .{ .code = 15, .bits = 6, .lanes = 1 },
        .{ .code = 17, .bits = 4, .lanes = 1 },
    };
    for (ok) |dt| try std.testing.expect(dt.isSupported());
    var code: u8 = 7;
    while (code <= 14) : (code += 1) try std.testing.expect((DataType{ .code = code, .bits = 8, .lanes = 1 }).isSupported());

    const bad = [_]DataType{
        .{ .code = 0, .bits = 7, .lanes = 1 }, // Int 7
        .{ .code = 2, .bits = 32, .lanes = 4 }, // vector lanes
        .{ .code = 15, .bits = 8, .lanes = 1 }, // fp6 must be 6 bits
        .{ .code = 17, .bits = 8, .lanes = 1 }, // fp4 must be 4 bits
        .{ .code = 10, .bits = 16, .lanes = 1 }, // fp8 must be 8 bits
        .{ .code = 3, .bits = 64, .lanes = 1 }, // opaque handle
        .{ .code = 18, .bits = 32, .lanes = 1 }, // unreleased bcomplex
        .{ .code = 99, .bits = 8, .lanes = 1 },
        .{ .code = 6, .bits = 1, .lanes = 1 },
        .{ .code = 4, .bits = 32, .lanes = 1 },
    };
    for (bad) |dt| try std.testing.expect(!dt.isSupported());
}

test "device types: released values only" {
    try std.testing.expect(DeviceType.isKnown(1));
    try std.testing.expect(DeviceType.isKnown(18));
    try std.testing.expect(!DeviceType.isKnown(5));
    try std.testing.expect(!DeviceType.isKnown(6));
    try std.testing.expect(!DeviceType.isKnown(0));
    try std.testing.expect(!DeviceType.isKnown(99));
    try std.testing.expect(!DeviceType.isKnown(-1));
    try std.testing.expect(DeviceType.isHostAccessible(13));
    try std.testing.expect(!DeviceType.isHostAccessible(2));
}
