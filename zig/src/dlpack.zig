//! The DLPack 1.3 ABI: structs, enums, flags, and the one table of dtypes this library describes,
//! with the layout pinned at compile time. Everything here mirrors the C header; nothing here
//! allocates, validates or imports anything but std (src/facts/abi.ts is generated from it, with
//! abi.zig: `zig build abi`).

const std = @import("std");
const assert = std.debug.assert;

/// The highest rank the library accepts; numpy uses the same limit.
pub const rank_max: usize = 64;

/// The DLPack version this library speaks and writes into the versioned exports it makes.
pub const version_major: u32 = 1;
pub const version_minor: u32 = 3;

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

    /// Memory the CUDA driver manages: device, page-locked host, or managed memory.
    pub fn isCudaFamily(value: i32) bool {
        return switch (value) {
            2, 3, 13 => true,
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

/// A dtype this library describes element by element: its name (as the TypeScript and Python
/// sides spell it), its type code and its bits; lanes are always 1.
pub const DType = struct {
    name: []const u8,
    code: TypeCode,
    bits: u8,
};

/// Every dtype the library accepts, once: the validator (`DataType.isSupported`), the fuzzer's
/// model and src/facts/abi.ts read this table. Opaque handles and vector lanes are not in it: no JS
/// type could hold them.
pub const dtypes = [_]DType{
    .{ .name = "bool", .code = .bool, .bits = 8 },
    .{ .name = "int8", .code = .int, .bits = 8 },
    .{ .name = "int16", .code = .int, .bits = 16 },
    .{ .name = "int32", .code = .int, .bits = 32 },
    .{ .name = "int64", .code = .int, .bits = 64 },
    .{ .name = "uint8", .code = .uint, .bits = 8 },
    .{ .name = "uint16", .code = .uint, .bits = 16 },
    .{ .name = "uint32", .code = .uint, .bits = 32 },
    .{ .name = "uint64", .code = .uint, .bits = 64 },
    .{ .name = "float16", .code = .float, .bits = 16 },
    .{ .name = "float32", .code = .float, .bits = 32 },
    .{ .name = "float64", .code = .float, .bits = 64 },
    .{ .name = "bfloat16", .code = .bfloat, .bits = 16 },
    // complex32 is two float16 (PyTorch's chalf).
    .{ .name = "complex32", .code = .complex, .bits = 32 },
    .{ .name = "complex64", .code = .complex, .bits = 64 },
    .{ .name = "complex128", .code = .complex, .bits = 128 },
    .{ .name = "float8_e3m4", .code = .float8_e3m4, .bits = 8 },
    .{ .name = "float8_e4m3", .code = .float8_e4m3, .bits = 8 },
    .{ .name = "float8_e4m3b11fnuz", .code = .float8_e4m3b11fnuz, .bits = 8 },
    .{ .name = "float8_e4m3fn", .code = .float8_e4m3fn, .bits = 8 },
    .{ .name = "float8_e4m3fnuz", .code = .float8_e4m3fnuz, .bits = 8 },
    .{ .name = "float8_e5m2", .code = .float8_e5m2, .bits = 8 },
    .{ .name = "float8_e5m2fnuz", .code = .float8_e5m2fnuz, .bits = 8 },
    .{ .name = "float8_e8m0fnu", .code = .float8_e8m0fnu, .bits = 8 },
    .{ .name = "float6_e2m3fn", .code = .float6_e2m3fn, .bits = 6 },
    .{ .name = "float6_e3m2fn", .code = .float6_e3m2fn, .bits = 6 },
    .{ .name = "float4_e2m1fn", .code = .float4_e2m1fn, .bits = 4 },
};

/// The bit widths a dtype of the table may have, as an index into a per-code mask.
fn widthIndex(bits: u8) ?u3 {
    return switch (bits) {
        4 => 0,
        6 => 1,
        8 => 2,
        16 => 3,
        32 => 4,
        64 => 5,
        128 => 6,
        else => null,
    };
}

/// `dtypes` as one mask of width bits per type code, and each bit count's width bit (0 for a
/// width no dtype has), built at compile time: the check on the import path is two lookups.
const widths_of_code: [256]u8 = blk: {
    var table = [_]u8{0} ** 256;
    for (dtypes) |d| {
        const bit = @as(u8, 1) << widthIndex(d.bits).?;
        // Each (code, bits) pair once.
        assert(table[@intFromEnum(d.code)] & bit == 0);
        table[@intFromEnum(d.code)] |= bit;
    }
    break :blk table;
};
const width_bit: [256]u8 = blk: {
    var table = [_]u8{0} ** 256;
    for (0..256) |bits| {
        if (widthIndex(bits)) |index| table[bits] = @as(u8, 1) << index;
    }
    break :blk table;
};

pub const DataType = extern struct {
    code: u8,
    bits: u8,
    lanes: u16,

    /// Whether (code, bits, lanes) is a dtype of the table (`dtypes`).
    pub fn isSupported(self: DataType) bool {
        if (self.lanes != 1) return false;
        return widths_of_code[self.code] & width_bit[self.bits] != 0;
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

/// `DLManagedTensorVersioned`: version, context, deleter and flags come first and are frozen
/// forever, so a consumer can always find the deleter even for a major version it does not know.
pub const ManagedTensorVersioned = extern struct {
    version: Version,
    manager_ctx: ?*anyopaque,
    deleter: ?VersionedDeleter,
    flags: u64,
    dl_tensor: Tensor,
};

/// The bits of `ManagedTensorVersioned.flags`.
pub const flag = struct {
    pub const read_only: u64 = 1 << 0;
    pub const is_copied: u64 = 1 << 1;
    pub const is_subbyte_type_padded: u64 = 1 << 2;
};
pub const flags_known: u64 = flag.read_only | flag.is_copied | flag.is_subbyte_type_padded;

comptime {
    // The ABI is defined for 64-bit targets; these numbers are the header's, not Zig's choice.
    assert(@sizeOf(Version) == 8);
    assert(@sizeOf(Device) == 8);
    assert(@sizeOf(DataType) == 4);
    assert(@offsetOf(DataType, "bits") == 1);
    assert(@offsetOf(DataType, "lanes") == 2);

    assert(@sizeOf(Tensor) == 48);
    assert(@offsetOf(Tensor, "data") == 0);
    assert(@offsetOf(Tensor, "device") == 8);
    assert(@offsetOf(Tensor, "ndim") == 16);
    assert(@offsetOf(Tensor, "dtype") == 20);
    assert(@offsetOf(Tensor, "shape") == 24);
    assert(@offsetOf(Tensor, "strides") == 32);
    assert(@offsetOf(Tensor, "byte_offset") == 40);

    assert(@sizeOf(ManagedTensor) == 64);
    assert(@offsetOf(ManagedTensor, "dl_tensor") == 0);
    assert(@offsetOf(ManagedTensor, "manager_ctx") == 48);
    assert(@offsetOf(ManagedTensor, "deleter") == 56);

    assert(@sizeOf(ManagedTensorVersioned) == 80);
    assert(@offsetOf(ManagedTensorVersioned, "version") == 0);
    assert(@offsetOf(ManagedTensorVersioned, "manager_ctx") == 8);
    assert(@offsetOf(ManagedTensorVersioned, "deleter") == 16);
    assert(@offsetOf(ManagedTensorVersioned, "flags") == 24);
    assert(@offsetOf(ManagedTensorVersioned, "dl_tensor") == 32);
}

/// Where the deleter sits in each generation's struct.
pub fn deleterOffset(versioned: bool) usize {
    if (versioned) return @offsetOf(ManagedTensorVersioned, "deleter");
    return @offsetOf(ManagedTensor, "deleter");
}

/// The size of each generation's struct.
pub fn managedSize(versioned: bool) usize {
    return if (versioned) @sizeOf(ManagedTensorVersioned) else @sizeOf(ManagedTensor);
}

/// Managed tensors are 8-byte aligned structs; anything else is not a managed tensor at all.
pub fn isManagedAddress(managed: usize) bool {
    return managed != 0 and managed % @alignOf(ManagedTensorVersioned) == 0;
}

/// How many producer deleters this thread is inside right now. A deleter may be a JS function
/// (a runtime's FFI callback) that calls back into the library while a release JS journaled is
/// still under way; JS asks this before it replays its journal, so it never releases twice.
threadlocal var deleters_running: u32 = 0;

/// Whether this thread is inside a producer's deleter (see `deleters_running`).
pub fn insideDeleter() bool {
    return deleters_running != 0;
}

/// Calls a producer's deleter if it has one. The only place the library hands a managed tensor
/// back; callers have checked the struct (readable, deleter is code or NULL).
pub fn deleteManaged(managed: usize, versioned: bool) void {
    assert(isManagedAddress(managed));
    // Nesting is bounded by the thread's stack, far below 2^32.
    deleters_running += 1;
    defer deleters_running -= 1;
    if (versioned) {
        const m: *ManagedTensorVersioned = @ptrFromInt(managed);
        if (m.deleter) |d| d(m);
    } else {
        const m: *ManagedTensor = @ptrFromInt(managed);
        if (m.deleter) |d| d(m);
    }
}

var nested_seen: bool = false;

fn nestedDeleter(m: *ManagedTensorVersioned) callconv(.c) void {
    _ = m;
    nested_seen = insideDeleter();
}

// ---------------------------------------------------------------------------------------------
// The exchange API of DLPack 1.3 (`DLPackExchangeAPI`; exchange.zig implements and consumes it).
// Pointer arguments are words: the same registers as pointers in the C ABI, and
// each is checked (NULL, misaligned, in the first page) before it is dereferenced.

/// `void (*SetError)(void* error_ctx, const char* kind, const char* message)`.
pub const SetError = *const fn (usize, ?[*:0]const u8, ?[*:0]const u8) callconv(.c) void;
/// `int (*)(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx, SetError)`.
pub const ManagedTensorAllocator = *const fn (usize, usize, usize, ?SetError) callconv(.c) c_int;
/// `int (*)(void* py_object, DLManagedTensorVersioned** out)`.
pub const ManagedTensorFromPyObject = *const fn (usize, usize) callconv(.c) c_int;
/// `int (*)(DLManagedTensorVersioned* tensor, void** out_py_object)`.
pub const ManagedTensorToPyObject = *const fn (usize, usize) callconv(.c) c_int;
/// `int (*)(void* py_object, DLTensor* out)`.
pub const DLTensorFromPyObject = *const fn (usize, usize) callconv(.c) c_int;
/// `int (*)(DLDeviceType device_type, int32_t device_id, void** out_current_stream)`.
pub const CurrentWorkStream = *const fn (i32, i32, usize) callconv(.c) c_int;

/// `DLPackExchangeAPIHeader`: the part every version keeps.
pub const ExchangeHeader = extern struct {
    version: Version,
    prev_api: ?*const ExchangeHeader,
};

/// `DLPackExchangeAPI`. Function pointers are optional: a foreign table may hold NULLs
/// (`dltensor_from_py_object_no_sync` may be NULL by the header; others in broken tables).
pub const ExchangeApi = extern struct {
    header: ExchangeHeader,
    managed_tensor_allocator: ?ManagedTensorAllocator,
    managed_tensor_from_py_object_no_sync: ?ManagedTensorFromPyObject,
    managed_tensor_to_py_object_no_sync: ?ManagedTensorToPyObject,
    dltensor_from_py_object_no_sync: ?DLTensorFromPyObject,
    current_work_stream: ?CurrentWorkStream,
};

comptime {
    // The 1.3 header's layout on 64-bit targets.
    assert(@sizeOf(ExchangeHeader) == 16);
    assert(@offsetOf(ExchangeHeader, "version") == 0);
    assert(@offsetOf(ExchangeHeader, "prev_api") == 8);
    assert(@sizeOf(ExchangeApi) == 56);
    assert(@offsetOf(ExchangeApi, "header") == 0);
    assert(@offsetOf(ExchangeApi, "managed_tensor_allocator") == 16);
    assert(@offsetOf(ExchangeApi, "managed_tensor_from_py_object_no_sync") == 24);
    assert(@offsetOf(ExchangeApi, "managed_tensor_to_py_object_no_sync") == 32);
    assert(@offsetOf(ExchangeApi, "dltensor_from_py_object_no_sync") == 40);
    assert(@offsetOf(ExchangeApi, "current_work_stream") == 48);
}

/// The capsule name and the type attribute of the 1.3 discovery protocol.
pub const exchange_capsule_name: [*:0]const u8 = "dlpack_exchange_api";
pub const exchange_attribute: [*:0]const u8 = "__dlpack_c_exchange_api__";

test "a deleter runs inside deleteManaged's count, which is back to zero after it" {
    var managed = std.mem.zeroes(ManagedTensorVersioned);
    managed.deleter = nestedDeleter;
    nested_seen = false;
    try std.testing.expect(!insideDeleter());
    deleteManaged(@intFromPtr(&managed), true);
    try std.testing.expect(nested_seen);
    try std.testing.expect(!insideDeleter());
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
    while (code <= 14) : (code += 1) {
        try std.testing.expect((DataType{ .code = code, .bits = 8, .lanes = 1 }).isSupported());
    }

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

test "the dtype check is exactly the table, for every (code, bits, lanes)" {
    for (0..256) |code| for (0..256) |bits| {
        var listed = false;
        for (dtypes) |d| {
            if (@intFromEnum(d.code) == code and d.bits == bits) listed = true;
        }
        const dt = DataType{ .code = @intCast(code), .bits = @intCast(bits), .lanes = 1 };
        try std.testing.expectEqual(listed, dt.isSupported());
        const vector = DataType{ .code = @intCast(code), .bits = @intCast(bits), .lanes = 2 };
        try std.testing.expect(!vector.isSupported());
    };
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
    // `isKnown` is exactly the enum's named values.
    for (0..32) |value| {
        var named = false;
        inline for (@typeInfo(DeviceType).@"enum".fields) |field| {
            if (field.value == value) named = true;
        }
        try std.testing.expectEqual(named, DeviceType.isKnown(@intCast(value)));
    }
    try std.testing.expect(DeviceType.isCudaFamily(@intFromEnum(DeviceType.cuda_managed)));
    try std.testing.expect(!DeviceType.isCudaFamily(@intFromEnum(DeviceType.rocm)));
}
