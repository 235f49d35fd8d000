//! `DLPackTensor`'s export templates: the versioned export of this library a `DLPackTensor` holds,
//! kept in a PyCapsule of its own, and the capsules made from it (`__dlpack__`). Python code only
//! ever sees a template through such a capsule: no raw address crosses into Python, a copy of the
//! object shares the capsule (one reference count, one release), and the natives refuse anything
//! else. GIL held throughout.

const std = @import("std");
const assert = std.debug.assert;
const abi = @import("abi.zig");
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

/// The name of the capsule a `DLPackTensor` keeps its export template in.
pub const name_template: [*:0]const u8 = "dlpack_ts.export_template";
/// A template capsule whose `DLPackTensor` could not be made: the template went back to the
/// caller, so the capsule must neither release nor lend it.
const name_disarmed: [*:0]const u8 = "dlpack_ts.disarmed_template";
/// The capsule context of a template over read-only data (NULL for writable data).
var readonly_marker: u8 = 0;
const context_readonly: *anyopaque = &readonly_marker;

/// `dlpack_ts._make_tensor`: the only maker of `DLPackTensor` objects (a reference kept for the
/// process, set by `install`).
var make_tensor: ?*PyObject = null;

/// Keeps `maker` (`_make_tensor`) for `wrapTemplate`. GIL held.
pub fn install(a: Api, maker: *PyObject) void {
    a.Py_IncRef(maker);
    if (make_tensor) |old| a.Py_DecRef(old);
    make_tensor = maker;
}

/// The destructor of capsules this library makes: frees the tensor only if nobody consumed it
/// (a consumer renames the capsule and takes over the deleter).
fn capsuleDestructor(capsule: *PyObject) callconv(.c) void {
    const a = cpython.api orelse return;
    if (a.PyCapsule_IsValid(capsule, name_versioned) != 0) {
        dlpack.deleteManaged(@intFromPtr(a.PyCapsule_GetPointer(capsule, name_versioned)), true);
    } else if (a.PyCapsule_IsValid(capsule, name_legacy) != 0) {
        dlpack.deleteManaged(@intFromPtr(a.PyCapsule_GetPointer(capsule, name_legacy)), false);
    }
}

/// Releases the template when the last reference to its capsule goes (a copied `DLPackTensor`
/// shares the capsule, so this runs once).
fn templateDestructor(capsule: *PyObject) callconv(.c) void {
    const a = cpython.api orelse return;
    if (a.PyCapsule_IsValid(capsule, name_template) == 0) return;
    const template = @intFromPtr(a.PyCapsule_GetPointer(capsule, name_template));
    if (!dlpack.isManagedAddress(template) or !exports.isOwnExport(template, true)) return;
    dlpack.deleteManaged(template, true);
}

/// Whether a template capsule holds read-only data (its context says so).
pub fn isReadOnlyHolder(a: Api, holder: *PyObject) bool {
    return a.PyCapsule_GetContext(holder) == context_readonly;
}

/// The template in a template capsule, or null with a TypeError set for any other object.
pub fn templateOf(a: Api, object: *PyObject) ?usize {
    if (a.PyCapsule_IsValid(object, name_template) == 0) {
        const message = "dlpack-ts: expected the export template of a DLPackTensor";
        a.PyErr_SetString(a.PyExc_TypeError.*, message);
        return null;
    }
    const template = @intFromPtr(a.PyCapsule_GetPointer(object, name_template));
    // Only wrapTemplate makes these capsules; one forged through ctypes is still not trusted.
    if (!dlpack.isManagedAddress(template) or !exports.isOwnExport(template, true)) {
        const message = "dlpack-ts: this template capsule does not hold an export of dlpack-ts";
        a.PyErr_SetString(a.PyExc_TypeError.*, message);
        return null;
    }
    return template;
}

/// A new capsule over a fresh export cloned from the template in `holder` (a template capsule),
/// `flags` a combination of `abi.capsule_flag` bits. Returns a new reference, or 0 with a Python
/// exception set (BufferError for what cannot be exported, TypeError for a holder that is not a
/// template capsule).
pub fn makeCapsule(holder: *PyObject, flags: u32) usize {
    const a = cpython.api orelse return 0;
    const template = templateOf(a, holder) orelse return 0;
    const versioned = flags & abi.capsule_flag.versioned != 0;
    const copy = flags & abi.capsule_flag.copy != 0;
    if (!versioned and !copy and isReadOnlyHolder(a, holder)) {
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

/// A `DLPackTensor` over `template` (a versioned export of ours), which it keeps in a template
/// capsule: a new reference, or 0 with the exception pending (the template is then still the
/// caller's: the capsule is disarmed before its last reference goes).
pub fn wrapTemplate(template: usize, readonly: bool) usize {
    const a = cpython.api orelse return 0;
    const make = make_tensor orelse return 0;
    assert(dlpack.isManagedAddress(template));
    const gil = cpython.Gil.take(a);
    defer gil.release();
    const holder = a.PyCapsule_New(@ptrFromInt(template), name_template, templateDestructor) orelse
        return 0;
    // Our own reference, so the capsule outlives a failed call and can be disarmed first.
    defer a.Py_DecRef(holder);
    const managed: *const dlpack.ManagedTensorVersioned = @ptrFromInt(template);
    const read_only = readonly or managed.flags & dlpack.flag.read_only != 0;
    if (read_only and a.PyCapsule_SetContext(holder, context_readonly) != 0) {
        return disarm(a, holder);
    }
    a.Py_IncRef(holder);
    const args = tensorArgs(a, holder, template, read_only) orelse return disarm(a, holder);
    defer a.Py_DecRef(args);
    const made = a.PyObject_Call(make, args, null) orelse return disarm(a, holder);
    return @intFromPtr(made);
}

/// The template goes back to the caller: the capsule must not release it. Returns 0.
fn disarm(a: Api, holder: *PyObject) usize {
    const renamed = a.PyCapsule_SetName(holder, name_disarmed);
    // Cannot fail: `holder` is a valid capsule this module made.
    assert(renamed == 0);
    return 0;
}

/// `(holder, device_type, device_id, readonly, shape, code, bits)`; steals `holder`.
fn tensorArgs(a: Api, holder: *PyObject, template: usize, readonly: bool) ?*PyObject {
    const m: *const dlpack.ManagedTensorVersioned = @ptrFromInt(template);
    const t = &m.dl_tensor;
    assert(t.ndim >= 0 and t.ndim <= dlpack.rank_max);
    const ndim: usize = @intCast(t.ndim);
    const shape = a.PyTuple_New(@intCast(ndim)) orelse {
        a.Py_DecRef(holder);
        return null;
    };
    for (0..ndim) |d| {
        const extent = a.PyLong_FromLongLong(t.shape.?[d]) orelse {
            a.Py_DecRef(shape);
            a.Py_DecRef(holder);
            return null;
        };
        _ = a.PyTuple_SetItem(shape, @intCast(d), extent);
    }
    return cpython.newTuple(a, &.{
        holder,
        a.PyLong_FromLongLong(t.device.device_type),
        a.PyLong_FromLongLong(t.device.device_id),
        cpython.boolean(a, readonly),
        shape,
        a.PyLong_FromLongLong(t.dtype.code),
        a.PyLong_FromLongLong(t.dtype.bits),
    });
}
