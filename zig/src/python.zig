//! CPython glue for the embedded-Python bridge: loading libpython globally (extension modules such
//! as numpy need its symbols in the global namespace), the PyCapsule side of the DLPack protocol
//! (consuming producers' capsules, making capsules for our exports), and exception text.
//! Everything here runs with the GIL held by the caller: the TS bridge takes it around every call,
//! and Python holds it when it calls `dlpk_py_capsule` through ctypes.PyDLL.

const std = @import("std");
const builtin = @import("builtin");
const dlpack = @import("dlpack.zig");
const describe = @import("describe.zig");
const owner_mod = @import("owner.zig");
const exports = @import("exports.zig");
const memory = @import("memory.zig");

const PyObject = opaque {};
const Destructor = *const fn (*PyObject) callconv(.c) void;

/// The C API functions this module calls, resolved from the loaded libpython.
const Api = struct {
    PyCapsule_New: *const fn (?*anyopaque, [*:0]const u8, ?Destructor) callconv(.c) ?*PyObject,
    PyCapsule_IsValid: *const fn (*PyObject, [*:0]const u8) callconv(.c) c_int,
    PyCapsule_GetPointer: *const fn (*PyObject, [*:0]const u8) callconv(.c) ?*anyopaque,
    PyCapsule_SetName: *const fn (*PyObject, [*:0]const u8) callconv(.c) c_int,
    PyErr_Fetch: *const fn (*?*PyObject, *?*PyObject, *?*PyObject) callconv(.c) void,
    PyErr_NormalizeException: *const fn (*?*PyObject, *?*PyObject, *?*PyObject) callconv(.c) void,
    PyErr_SetString: *const fn (*PyObject, [*:0]const u8) callconv(.c) void,
    PyObject_Str: *const fn (*PyObject) callconv(.c) ?*PyObject,
    PyObject_GetAttrString: *const fn (*PyObject, [*:0]const u8) callconv(.c) ?*PyObject,
    PyUnicode_AsUTF8AndSize: *const fn (*PyObject, *isize) callconv(.c) ?[*]const u8,
    PyErr_Clear: *const fn () callconv(.c) void,
    Py_DecRef: *const fn (?*PyObject) callconv(.c) void,
    PyExc_BufferError: **PyObject,
    _Py_NoneStruct: *PyObject,
};

var api: ?Api = null;
var load_error: [256]u8 = [_]u8{0} ** 256;

pub const NAME_VERSIONED: [*:0]const u8 = "dltensor_versioned";
pub const NAME_LEGACY: [*:0]const u8 = "dltensor";
pub const NAME_USED_VERSIONED: [*:0]const u8 = "used_dltensor_versioned";
pub const NAME_USED_LEGACY: [*:0]const u8 = "used_dltensor";

/// Loads libpython with RTLD_NOW | RTLD_GLOBAL and resolves the API above. Returns 0, or -1 with a
/// message for `loadError`. Loading again is a no-op.
pub fn load(path: [*:0]const u8) i32 {
    if (api != null) return 0;
    if (builtin.os.tag == .windows) return fail("the embedded-Python bridge is not available on Windows");
    const handle = std.c.dlopen(path, .{ .NOW = true, .GLOBAL = true }) orelse {
        const reason = std.c.dlerror();
        return fail(if (reason) |r| std.mem.span(r) else "dlopen failed");
    };
    var resolved: Api = undefined;
    inline for (@typeInfo(Api).@"struct".fields) |field| {
        const symbol = std.c.dlsym(handle, field.name) orelse
            return fail("libpython lacks " ++ field.name);
        @field(resolved, field.name) = @ptrCast(@alignCast(symbol));
    }
    api = resolved;
    return 0;
}

fn fail(message: []const u8) i32 {
    const n = @min(message.len, load_error.len - 1);
    @memcpy(load_error[0..n], message[0..n]);
    load_error[n] = 0;
    return -1;
}

pub fn loadError() [*:0]const u8 {
    return @ptrCast(&load_error);
}

pub fn noneObject() usize {
    const a = api orelse return 0;
    return @intFromPtr(a._Py_NoneStruct);
}

/// Formats the pending exception as "Type: message" into `out` (NUL-terminated, truncated) and
/// clears it. Returns the length, or -1 when no exception is pending.
pub fn takeError(out: []u8) i32 {
    const a = api orelse return -1;
    std.debug.assert(out.len > 0);
    var kind: ?*PyObject = null;
    var value: ?*PyObject = null;
    var traceback: ?*PyObject = null;
    a.PyErr_Fetch(&kind, &value, &traceback);
    if (kind == null) return -1;
    a.PyErr_NormalizeException(&kind, &value, &traceback);
    defer {
        a.Py_DecRef(kind);
        a.Py_DecRef(value);
        a.Py_DecRef(traceback);
    }
    var written: usize = 0;
    written += appendText(a, out[written..], kind.?, "__name__");
    written += appendLiteral(out[written..], ": ");
    if (value) |v| {
        if (a.PyObject_Str(v)) |text| {
            defer a.Py_DecRef(text);
            written += appendUnicode(a, out[written..], text);
        }
    }
    out[@min(written, out.len - 1)] = 0;
    // Formatting itself may have raised (a broken __str__): never leak that to the caller.
    a.PyErr_Clear();
    return @intCast(written);
}

fn appendLiteral(out: []u8, text: []const u8) usize {
    if (out.len <= 1) return 0;
    const n = @min(text.len, out.len - 1);
    @memcpy(out[0..n], text[0..n]);
    return n;
}

fn appendUnicode(a: Api, out: []u8, text: *PyObject) usize {
    var len: isize = 0;
    const bytes = a.PyUnicode_AsUTF8AndSize(text, &len) orelse return 0;
    return appendLiteral(out, bytes[0..@intCast(len)]);
}

fn appendText(a: Api, out: []u8, object: *PyObject, attribute: [*:0]const u8) usize {
    const attr = a.PyObject_GetAttrString(object, attribute) orelse return 0;
    defer a.Py_DecRef(attr);
    return appendUnicode(a, out, attr);
}

/// Status of `consume` beyond the validator's: the capsule was already consumed, or is not a
/// DLPack capsule at all.
pub const STATUS_CONSUMED: i32 = 14;
pub const STATUS_CAPSULE_NAME: i32 = 15;
pub const STATUS_NOT_LOADED: i32 = 16;

/// Takes a producer's capsule the way numpy does: check the name, validate the tensor, and only
/// when everything passed rename it to "used_..." and own its deleter (an owner in `out`). A
/// refused capsule is left untouched, so its own destructor still frees the tensor.
pub fn consume(capsule_address: usize, strict_offset: bool, out: *describe.Description) i32 {
    const a = api orelse return STATUS_NOT_LOADED;
    const capsule: *PyObject = @ptrFromInt(capsule_address);
    var versioned = true;
    if (a.PyCapsule_IsValid(capsule, NAME_VERSIONED) == 0) {
        if (a.PyCapsule_IsValid(capsule, NAME_LEGACY) != 0) {
            versioned = false;
        } else if (a.PyCapsule_IsValid(capsule, NAME_USED_VERSIONED) != 0 or a.PyCapsule_IsValid(capsule, NAME_USED_LEGACY) != 0) {
            out.status = STATUS_CONSUMED;
            return STATUS_CONSUMED;
        } else {
            out.status = STATUS_CAPSULE_NAME;
            return STATUS_CAPSULE_NAME;
        }
    }
    const name = if (versioned) NAME_VERSIONED else NAME_LEGACY;
    const managed = @intFromPtr(a.PyCapsule_GetPointer(capsule, name));
    const status = describe.describe(managed, .{ .versioned = versioned, .strict_offset = strict_offset }, out);
    if (status != .ok) return @intFromEnum(status);
    const created = owner_mod.create(if (versioned) .versioned else .legacy, managed, 0) orelse {
        out.status = @intFromEnum(describe.Status.out_of_memory);
        return out.status;
    };
    // Cannot fail: the capsule was just checked valid. From here on our owner calls the deleter.
    const renamed = a.PyCapsule_SetName(capsule, if (versioned) NAME_USED_VERSIONED else NAME_USED_LEGACY);
    std.debug.assert(renamed == 0);
    out.setOwner(@intFromPtr(created));
    // numpy-style importers read the version through the description; nothing else to do.
    return 0;
}

/// The destructor of capsules this library makes: frees the tensor only if nobody consumed it
/// (a consumer renames the capsule and takes over the deleter).
fn capsuleDestructor(capsule: *PyObject) callconv(.c) void {
    const a = api orelse return;
    if (a.PyCapsule_IsValid(capsule, NAME_VERSIONED) != 0) {
        dlpack.deleteManaged(@intFromPtr(a.PyCapsule_GetPointer(capsule, NAME_VERSIONED)), true);
    } else if (a.PyCapsule_IsValid(capsule, NAME_LEGACY) != 0) {
        dlpack.deleteManaged(@intFromPtr(a.PyCapsule_GetPointer(capsule, NAME_LEGACY)), false);
    }
}

pub const CAPSULE_VERSIONED: u32 = 1;
pub const CAPSULE_COPY: u32 = 2;

/// A new capsule over a fresh export cloned from `template` (one of our versioned exports, kept by
/// the Python object that `toPython` made). Returns a new reference, or 0 with a Python exception
/// set (BufferError for what cannot be exported).
pub fn makeCapsule(template: usize, flags: u32) usize {
    const a = api orelse return 0;
    const versioned = flags & CAPSULE_VERSIONED != 0;
    const managed = (if (flags & CAPSULE_COPY != 0) copyExport(template, versioned) else exports.clone(template, versioned)) orelse {
        a.PyErr_SetString(a.PyExc_BufferError.*, "dlpack-ts: out of memory (or data that cannot be copied) making the export");
        return 0;
    };
    const capsule = a.PyCapsule_New(@ptrFromInt(managed), if (versioned) NAME_VERSIONED else NAME_LEGACY, capsuleDestructor) orelse {
        dlpack.deleteManaged(managed, versioned);
        return 0;
    };
    return @intFromPtr(capsule);
}

/// A contiguous copy of the template's data in library memory, exported with IS_COPIED.
fn copyExport(template: usize, versioned: bool) ?usize {
    const source: *const dlpack.ManagedTensorVersioned = @ptrFromInt(template);
    const t = &source.dl_tensor;
    if (!dlpack.DeviceType.isHostAccessible(t.device.device_type)) return null;
    const bits: usize = t.dtype.bits;
    if (bits % 8 != 0) return null; // packed sub-byte copies are not supported here
    const ndim: usize = @intCast(t.ndim);
    var shape: [dlpack.MAX_RANK]i64 = undefined;
    var source_strides: [dlpack.MAX_RANK]i64 = undefined;
    var size: usize = 1;
    for (0..ndim) |d| {
        shape[d] = t.shape.?[d];
        source_strides[d] = t.strides.?[d];
        size *= @intCast(shape[d]);
    }
    const itemsize = bits / 8;
    const created = memory.allocate(size * itemsize, 64, false) orelse return null;
    if (size > 0) {
        const src: [*]const u8 = @ptrFromInt(@intFromPtr(t.data) + t.byte_offset);
        memory.copyStrided(@ptrFromInt(created.payload), src, itemsize, shape[0..ndim], source_strides[0..ndim]);
    }
    var strides: [dlpack.MAX_RANK]i64 = undefined;
    var step: i64 = 1;
    var d = ndim;
    while (d > 0) {
        d -= 1;
        strides[d] = step;
        step *= shape[d];
    }
    return exports.create(.{
        .data = created.payload,
        .device = .{ .device_type = 1, .device_id = 0 },
        .dtype = t.dtype,
        .shape = shape[0..ndim],
        .strides = strides[0..ndim],
        .flags = dlpack.FLAG_IS_COPIED,
        .versioned = versioned,
        .adopt_owner = true,
        .owner = created,
    }) orelse {
        owner_mod.release(created);
        return null;
    };
}
