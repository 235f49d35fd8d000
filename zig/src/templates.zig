//! The capsules `DLPackTensor.__dlpack__` makes from its export template (the versioned export
//! of this library a `DLPackTensor` holds, tensor.zig): a clone of the template, or a contiguous
//! copy, in a PyCapsule whose destructor frees it only if nobody consumed it. GIL held throughout.

const std = @import("std");
const assert = std.debug.assert;
const cpython = @import("cpython.zig");
const dlpack = @import("dlpack.zig");
const exports = @import("exports.zig");
const memory = @import("memory.zig");
const owner_mod = @import("owner.zig");

const PyObject = cpython.PyObject;
const Api = cpython.Api;

/// The DLPack protocol's capsule names.
pub const name_versioned: [*:0]const u8 = "dltensor_versioned";
pub const name_legacy: [*:0]const u8 = "dltensor";
pub const name_used_versioned: [*:0]const u8 = "used_dltensor_versioned";
pub const name_used_legacy: [*:0]const u8 = "used_dltensor";

/// What `__dlpack__` asks `makeCapsule` for.
pub const capsule_flag = struct {
    /// The versioned struct (else the legacy one).
    pub const versioned: u32 = 1 << 0;
    /// A contiguous copy of the data (IS_COPIED).
    pub const copy: u32 = 1 << 1;
};

/// The destructor of capsules this library makes: frees the tensor only if nobody consumed it
/// (a consumer renames the capsule and takes over the deleter).
fn capsuleDestructor(capsule: *PyObject) callconv(.c) void {
    const a = cpython.api orelse return;
    // A consumer that took the export renamed the capsule ("used_..."): one byte says so, without
    // the two name comparisons below (a capsule is legal here, so GetName raises nothing).
    const name = a.PyCapsule_GetName(capsule) orelse return;
    if (name[0] != name_legacy[0]) return;
    if (a.PyCapsule_IsValid(capsule, name_versioned) != 0) {
        dlpack.deleteManaged(@intFromPtr(a.PyCapsule_GetPointer(capsule, name_versioned)), true);
    } else if (a.PyCapsule_IsValid(capsule, name_legacy) != 0) {
        dlpack.deleteManaged(@intFromPtr(a.PyCapsule_GetPointer(capsule, name_legacy)), false);
    }
}

/// A new capsule over a fresh export cloned from `template` (a versioned export of ours, held by
/// a `DLPackTensor`), `flags` a combination of `capsule_flag` bits. Returns a new reference, or 0
/// with a BufferError set for what cannot be exported. GIL held.
pub fn makeCapsule(a: Api, template: usize, readonly: bool, flags: u32) usize {
    assert(exports.isOwnExport(template, true));
    const versioned = flags & capsule_flag.versioned != 0;
    const copy = flags & capsule_flag.copy != 0;
    if (!versioned and !copy and readonly) {
        a.PyErr_SetString(a.PyExc_BufferError.*, "dlpack-ts: read-only data cannot be exported " ++
            "through the legacy DLPack struct (ask for max_version >= (1, 0))");
        return 0;
    }
    const made = if (copy) copyExport(template, versioned) else exports.clone(template, versioned);
    const managed = made catch {
        a.PyErr_SetString(a.PyExc_BufferError.*, "dlpack-ts: out of memory (or data that cannot " ++
            "be copied) making the export");
        return 0;
    };
    const name = if (versioned) name_versioned else name_legacy;
    const capsule = a.PyCapsule_New(@ptrFromInt(managed), name, capsuleDestructor) orelse {
        dlpack.deleteManaged(managed, versioned);
        return 0;
    };
    return @intFromPtr(capsule);
}

const CopyError = error{ OutOfMemory, NotCopyable };

/// A contiguous copy of the template's data in library memory, exported with IS_COPIED.
fn copyExport(template: usize, versioned: bool) CopyError!usize {
    const source: *const dlpack.ManagedTensorVersioned = @ptrFromInt(template);
    const t = &source.dl_tensor;
    if (!dlpack.DeviceType.isHostAccessible(t.device.device_type)) return error.NotCopyable;
    const bits: usize = t.dtype.bits;
    if (bits % 8 != 0) return error.NotCopyable; // packed sub-byte copies are not supported here
    // Our own export: its layout was validated when it was made.
    assert(t.ndim >= 0 and t.ndim <= dlpack.rank_max);
    const ndim: usize = @intCast(t.ndim);
    var shape: [dlpack.rank_max]i64 = undefined;
    var source_strides: [dlpack.rank_max]i64 = undefined;
    var size: usize = 1;
    for (0..ndim) |d| {
        shape[d] = t.shape.?[d];
        source_strides[d] = t.strides.?[d];
        size *= @intCast(shape[d]);
    }
    const itemsize = bits / 8;
    const created = try owner_mod.createNative(size * itemsize, 64, false);
    errdefer owner_mod.release(created);
    if (size > 0) {
        const src: [*]const u8 = @ptrFromInt(@intFromPtr(t.data) + t.byte_offset);
        const dst: [*]u8 = @ptrFromInt(created.payload);
        memory.copyStrided(dst, src, itemsize, shape[0..ndim], source_strides[0..ndim]);
    }
    var strides: [dlpack.rank_max]i64 = undefined;
    var step: i64 = 1;
    var d = ndim;
    while (d > 0) {
        d -= 1;
        strides[d] = step;
        step *= shape[d];
    }
    return exports.create(.{
        .data = created.payload,
        .device = .{ .device_type = @intFromEnum(dlpack.DeviceType.cpu), .device_id = 0 },
        .dtype = t.dtype,
        .shape = shape[0..ndim],
        .strides = strides[0..ndim],
        .flags = dlpack.flag.is_copied,
        .versioned = versioned,
        .adopt_owner = true,
        .owner = created,
    });
}
