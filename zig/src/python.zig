//! The embedded-Python bridge's imports and the helper module's natives: consuming producers'
//! PyCapsules the way numpy does, `fromPython`'s fast path, and the builtins `_native_capsule`,
//! `_native_fence` and `_native_exchange_counts` installed on the helper module. Everything here
//! runs with the GIL held by the caller or takes it (PyGILState is reentrant); errors are error
//! unions, which root.zig turns into `abi.PythonStatus` values and the natives into exceptions.

const std = @import("std");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const admit = @import("admit.zig");
const cpython = @import("cpython.zig");
const exchange = @import("exchange.zig");
const exports = @import("exports.zig");
const mappings = @import("mappings.zig");
const templates = @import("templates.zig");

const PyObject = cpython.PyObject;
const Api = cpython.Api;
const Description = abi.Description;

pub const ImportError = error{
    /// libpython is not loaded, or the helper module not installed.
    NotLoaded,
    /// The capsule's name starts with "used_".
    Consumed,
    /// Not a DLPack capsule.
    CapsuleName,
    /// The tensor was refused: `out.status` says why.
    Refused,
    /// A call into Python raised: the exception is pending.
    Raised,
    /// The object has no `__dlpack__` but an `__array_interface__`.
    ArrayInterface,
};

/// Takes a producer's capsule the way numpy does: check the name, validate the tensor, and only
/// when everything passed rename it to "used_..." and own its deleter (an owner in `out`). A
/// refused capsule is left untouched, so its own destructor still frees the tensor.
pub fn consume(capsule_address: usize, strict_offset: bool, out: *Description) ImportError!void {
    const a = cpython.api orelse return error.NotLoaded;
    const capsule = cpython.objectAt(capsule_address);
    const versioned = try capsuleGeneration(a, capsule);
    const name = if (versioned) templates.name_versioned else templates.name_legacy;
    const managed = @intFromPtr(a.PyCapsule_GetPointer(capsule, name));
    var own: ?exports.Own = null;
    const options: admit.Options = .{ .versioned = versioned, .strict_offset = strict_offset };
    if (admit.inspect(managed, options, out, &own) != .ok) return error.Refused;
    // One of this library's exports goes to one import only, whichever way it arrives: a raw
    // import of the same struct must not take it a second time (the capsule keeps a refused one).
    if (own) |found| {
        if (admit.take(managed, found, out) != .ok) return error.Refused;
    }
    _ = admit.record(managed, versioned, out) catch {
        if (own != null) exports.unclaim(managed);
        return error.Refused;
    };
    // Cannot fail: the capsule was just checked valid. From here on our owner calls the deleter.
    const used = if (versioned) templates.name_used_versioned else templates.name_used_legacy;
    const renamed = a.PyCapsule_SetName(capsule, used);
    assert(renamed == 0);
}

/// Whether a DLPack capsule holds the versioned struct (true) or the legacy one (false).
fn capsuleGeneration(a: Api, capsule: *PyObject) ImportError!bool {
    if (a.PyCapsule_IsValid(capsule, templates.name_versioned) != 0) return true;
    if (a.PyCapsule_IsValid(capsule, templates.name_legacy) != 0) return false;
    if (a.PyCapsule_IsValid(capsule, templates.name_used_versioned) != 0 or
        a.PyCapsule_IsValid(capsule, templates.name_used_legacy) != 0)
    {
        return error.Consumed;
    }
    return error.CapsuleName;
}

// ---------------------------------------------------------------------------------------------
// The helper module's natives.

/// `dlpack_ts._capsule_of`: the numpy-style negotiation `from` calls (a reference kept for the
/// process, set by `install`).
var capsule_of: ?*PyObject = null;

/// Keeps the helper module's `_capsule_of` and `_make_tensor` for the fast paths, and installs the
/// native functions `_native_capsule(holder, flags)` and `_native_fence(holder, stream)` on the
/// module (`holder` is a DLPackTensor's template capsule; no raw address is taken from Python).
pub fn install(
    module: usize,
    capsule_of_fn: usize,
    make_tensor_fn: usize,
) error{ NotLoaded, Raised }!void {
    const a = cpython.api orelse return error.NotLoaded;
    const gil = cpython.Gil.take(a);
    defer gil.release();
    a.Py_IncRef(cpython.objectAt(capsule_of_fn));
    if (capsule_of) |old| a.Py_DecRef(old);
    capsule_of = cpython.objectAt(capsule_of_fn);
    templates.install(a, cpython.objectAt(make_tensor_fn));
    for (&methods) |*def| {
        const function = a.PyCFunction_NewEx(def, null, null) orelse return error.Raised;
        defer a.Py_DecRef(function);
        if (a.PyObject_SetAttrString(cpython.objectAt(module), def.name, function) != 0) {
            return error.Raised;
        }
    }
    // DLPackTensor gets its `__dlpack_c_exchange_api__` (exchange.zig).
    const cls = a.PyObject_GetAttrString(cpython.objectAt(module), "DLPackTensor") orelse
        return error.Raised;
    defer a.Py_DecRef(cls);
    try exchange.install(a, cls);
}

var methods = [_]cpython.MethodDef{
    .{
        .name = "_native_capsule",
        .method = nativeCapsule,
        .flags = cpython.METH_VARARGS,
        .doc = "capsule over a clone of an export template",
    },
    .{
        .name = "_native_fence",
        .method = nativeFence,
        .flags = cpython.METH_VARARGS,
        .doc = "order a consumer stream after the producer",
    },
    .{
        .name = "_native_exchange_counts",
        .method = nativeExchangeCounts,
        .flags = cpython.METH_VARARGS,
        .doc = "calls of the DLPack C exchange API, per path",
    },
};

fn nativeExchangeCounts(_: ?*PyObject, _: ?*PyObject) callconv(.c) ?*PyObject {
    return exchange.countsTuple(cpython.api.?);
}

/// `(holder, word)` arguments: the holder object (borrowed) and an int as an unsigned word.
const HolderArgs = struct { holder: *PyObject, word: u64 };

fn holderArgs(a: Api, args: ?*PyObject) ?HolderArgs {
    const tuple = args orelse return null;
    if (a.PyTuple_Size(tuple) != 2) {
        a.PyErr_SetString(a.PyExc_TypeError.*, "dlpack-ts: expected (template, int)");
        return null;
    }
    // Items of a tuple of two: never NULL.
    const holder = a.PyTuple_GetItem(tuple, 0).?;
    const word = a.PyLong_AsUnsignedLongLongMask(a.PyTuple_GetItem(tuple, 1).?);
    if (a.PyErr_Occurred() != null) return null;
    return .{ .holder = holder, .word = word };
}

fn nativeCapsule(_: ?*PyObject, args: ?*PyObject) callconv(.c) ?*PyObject {
    const parsed = holderArgs(cpython.api.?, args) orelse return null;
    const made = templates.makeCapsule(parsed.holder, @truncate(parsed.word));
    return if (made == 0) null else @ptrFromInt(made);
}

/// Returns the fence status as an int (0 ok, -2 stream 0, other negatives: failures).
fn nativeFence(_: ?*PyObject, args: ?*PyObject) callconv(.c) ?*PyObject {
    const a = cpython.api.?;
    const parsed = holderArgs(a, args) orelse return null;
    const template = templates.templateOf(a, parsed.holder) orelse return null;
    const status = fence_hook(template, @intCast(parsed.word));
    return a.PyLong_FromLongLong(status);
}

/// Set by root.zig: the CUDA fence and its status (statuses are mapped at the C boundary).
pub var fence_hook: *const fn (usize, usize) i32 = noFence;

fn noFence(_: usize, _: usize) i32 {
    return -1;
}

// ---------------------------------------------------------------------------------------------
// `fromPython`'s fast path.

pub const FromOptions = struct {
    /// -1: ask for the legacy struct (max_version None).
    max_major: i32,
    max_minor: i32,
    /// -1 None, 0 False, 1 True.
    copy: i32,
    /// -1: no dl_device.
    device_type: i32,
    device_id: i32,
    /// null: stream None.
    stream: ?i64,
    strict_offset: bool,
};

/// Whether a producer's C exchange table can serve these options: it always returns a versioned
/// struct of the data where it is, without a copy and without stream handshakes, so a legacy
/// struct, a copy, another device or a consumer stream go through `__dlpack__`.
fn exchangeApplies(options: FromOptions) bool {
    return options.max_major >= 1 and options.copy != 1 and options.device_type < 0 and
        options.stream == null;
}

/// `fromPython`'s fast path: the producer type's C exchange table when it has one (exchange.zig),
/// else the numpy-style negotiation in `_capsule_of`, then `consume`. Writes the producer's name
/// (UTF-8, NUL-terminated, truncated) into `name`.
pub fn from(obj: usize, options: FromOptions, out: *Description, name: []u8) ImportError!void {
    assert(name.len > 0);
    const a = cpython.api orelse return error.NotLoaded;
    const negotiate = capsule_of orelse return error.NotLoaded;
    const gil = cpython.Gil.take(a);
    defer gil.release();
    if (exchangeApplies(options)) {
        const object = cpython.objectAt(obj);
        if (try exchange.importFrom(a, object, options.strict_offset, out, name)) return;
    }
    const args = negotiationArgs(a, obj, options) orelse return error.Raised;
    defer a.Py_DecRef(args);
    const result = a.PyObject_Call(negotiate, args, null) orelse return error.Raised;
    defer a.Py_DecRef(result);
    const written = if (a.PyTuple_GetItem(result, 1)) |producer|
        cpython.appendUnicode(a, name, producer)
    else
        0;
    name[written] = 0;
    const capsule = a.PyTuple_GetItem(result, 0) orelse return error.Raised;
    if (capsule == a._Py_NoneStruct) return error.ArrayInterface;
    return consume(@intFromPtr(capsule), options.strict_offset, out);
}

/// `(obj, max_version, copy, device, stream)` for `_capsule_of`, or null with the exception set.
fn negotiationArgs(a: Api, obj: usize, options: FromOptions) ?*PyObject {
    a.Py_IncRef(cpython.objectAt(obj));
    const max_version = if (options.max_major < 0) cpython.none(a) else cpython.newTuple(a, &.{
        a.PyLong_FromLongLong(options.max_major),
        a.PyLong_FromLongLong(options.max_minor),
    });
    const copy: ?*PyObject = if (options.copy < 0) cpython.none(a) else cpython.boolean(
        a,
        options.copy != 0,
    );
    const device = if (options.device_type < 0) cpython.none(a) else cpython.newTuple(a, &.{
        a.PyLong_FromLongLong(options.device_type),
        a.PyLong_FromLongLong(options.device_id),
    });
    const stream = if (options.stream) |value| a.PyLong_FromLongLong(value) else cpython.none(a);
    return cpython.newTuple(a, &.{ cpython.objectAt(obj), max_version, copy, device, stream });
}

// ---------------------------------------------------------------------------------------------
// Handles that did not come from this bridge (`{ handle }` objects): checked before the first
// dereference, against the same table of mappings the imports use.

/// Results of `checkObject`: dereferenceable, or which part is not.
pub const object_ok: i32 = 0;
pub const object_header: i32 = 1;
pub const object_type: i32 = 2;
pub const object_metatype: i32 = 3;

/// Bytes of a type object that must be readable: `PyTypeObject` up to `tp_vectorcall` is 400 to
/// 416 bytes from CPython 3.9 on (the slots Python reads when it calls or releases an object).
const type_bytes: usize = 400;
/// Metatypes followed before giving up (`type(type(x))`...; real chains end at `type` within 3).
const meta_depth_max: usize = 8;

fn wordAt(address: usize) usize {
    std.debug.assert(address != 0 and address % @alignOf(usize) == 0);
    return @as(*const usize, @ptrFromInt(address)).*;
}

/// Where `ob_type` sits: after `ob_refcnt` (8) in default builds, after the thread id, flags and
/// split reference counts (24) in free-threaded ones. `type` is its own type, so the offset holding
/// its own address is the one; 0 when neither does (an unknown layout: nothing is checked).
fn typeOffset(type_type: usize) usize {
    std.debug.assert(type_type != 0);
    if (type_type % @alignOf(usize) != 0) return 0;
    for ([_]usize{ 8, 24 }) |offset| {
        if (wordAt(type_type + offset) == type_type) return offset;
    }
    return 0;
}

/// Whether `address` can be dereferenced as a `PyObject*`: its header readable, its type a
/// readable type object whose chain of metatypes reaches `type_type` through readable type
/// objects. A readable object of the wrong kind (freed, or a forgery) still passes.
fn checkHeader(address: usize, offset: usize, type_type: usize) i32 {
    std.debug.assert(offset == 8 or offset == 24);
    std.debug.assert(type_type != 0);
    const word = @alignOf(usize);
    if (address % word != 0 or !mappings.readable(address, offset + word)) return object_header;
    var kind = wordAt(address + offset);
    var depth: usize = 0;
    while (depth < meta_depth_max) : (depth += 1) {
        if (kind == 0 or kind % word != 0 or !mappings.readable(kind, type_bytes)) {
            return if (depth == 0) object_type else object_metatype;
        }
        if (kind == type_type) return object_ok;
        kind = wordAt(kind + offset);
    }
    return object_metatype;
}

/// `checkHeader` for the loaded libpython; `PythonStatus.not_loaded` before `load`. Without a
/// table of mappings (the listing failed) or with an unknown object layout, nothing can be
/// checked: 0.
pub fn checkObject(address: usize) i32 {
    const a = cpython.api orelse return @intFromEnum(abi.PythonStatus.not_loaded);
    if (address == 0) return object_header;
    if (!mappings.available()) return object_ok;
    const type_type = @intFromPtr(a.PyType_Type);
    const offset = typeOffset(type_type);
    if (offset == 0) return object_ok;
    return checkHeader(address, offset, type_type);
}

test "checkHeader: readable chains pass, unmapped headers, types and metatypes are refused" {
    if (!mappings.available()) return error.SkipZigTest;
    const region = try mappings.freshRegion(1);
    defer std.posix.munmap(region);
    const words: [*]usize = @ptrCast(region.ptr);
    // A fake `type` at word 0 (its own type at +8), a metatype at word 64, an object at word 128.
    const type_type = @intFromPtr(region.ptr);
    words[1] = type_type;
    words[64 + 1] = type_type;
    words[128 + 1] = @intFromPtr(&words[64]);
    try std.testing.expectEqual(@as(usize, 8), typeOffset(type_type));
    try std.testing.expectEqual(object_ok, checkHeader(@intFromPtr(&words[128]), 8, type_type));
    try std.testing.expectEqual(object_ok, checkHeader(type_type, 8, type_type));
    try std.testing.expectEqual(object_header, checkHeader(4096, 8, type_type));
    const misaligned = @intFromPtr(&words[128]) + 1;
    try std.testing.expectEqual(object_header, checkHeader(misaligned, 8, type_type));
    // The type's last 400 bytes run past the page: not a readable type object.
    words[128 + 1] = @intFromPtr(region.ptr) + region.len - 64;
    const object = @intFromPtr(&words[128]);
    try std.testing.expectEqual(object_type, checkHeader(object, 8, type_type));
    words[128 + 1] = 4096;
    try std.testing.expectEqual(object_type, checkHeader(object, 8, type_type));
    // A readable type whose own type is unmapped, and a chain that never reaches `type`.
    words[128 + 1] = @intFromPtr(&words[64]);
    words[64 + 1] = 8192;
    try std.testing.expectEqual(object_metatype, checkHeader(object, 8, type_type));
    words[64 + 1] = @intFromPtr(&words[64]);
    try std.testing.expectEqual(object_metatype, checkHeader(object, 8, type_type));
}
