//! The embedded-Python bridge's imports and the helper module's setup: consuming producers'
//! PyCapsules the way numpy does, `fromPython`'s fast path (the `__dlpack__` negotiation in C),
//! and `install`, which makes `DLPackTensor` (tensor.zig) and adds `_native_exchange_counts`.
//! Everything here runs with the GIL held by the caller or takes it (PyGILState is reentrant);
//! errors are error unions, which c_python.zig turns into `abi.PythonStatus` values.

const std = @import("std");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const admit = @import("admit.zig");
const cpython = @import("cpython.zig");
const exchange = @import("exchange.zig");
const dlpack = @import("dlpack.zig");
const guards = @import("guards.zig");
const mappings = @import("mappings.zig");
const templates = @import("templates.zig");
const tensor = @import("tensor.zig");

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
    const options: admit.Options = .{ .versioned = versioned, .strict_offset = strict_offset };
    // One of this library's exports goes to one import only, whichever way it arrives: a raw
    // import of the same struct must not take it a second time. A refused one stays the
    // capsule's, whose destructor frees it.
    if (admit.sequence(managed, options, out, .keep) != .ok) return error.Refused;
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
// The helper module: the DLPackTensor type and the natives installed on it, and the Python
// functions the negotiation falls back on (references kept for the process, set by `install`).

/// `dlpack_ts._capsule_of`: the whole negotiation in Python, for objects without `__dlpack__`.
var capsule_of: ?*PyObject = null;
/// `dlpack_ts._not_capsule(obj, value)`: raises the TypeError for a `__dlpack__` that returned
/// something else than a capsule.
var not_capsule: ?*PyObject = null;
/// Interned "__dlpack__", and the keyword names of the calls `negotiate` makes, by which optional
/// keywords they add (bit 0: dl_device, bit 1: copy; 4: only `stream`).
var dunder_dlpack: ?*PyObject = null;
var call_names: [5]?*PyObject = .{ null, null, null, null, null };
/// The last `max_version` tuple asked for (nearly always (1, 3)), reused while it is the same.
var version_tuple: ?*PyObject = null;
var version_asked: [2]i32 = .{ -1, -1 };

/// Makes `dlpack_ts.DLPackTensor` (tensor.zig) with its `__dlpack_c_exchange_api__`, installs
/// `_native_exchange_counts` on the helper module and keeps the functions the negotiation falls
/// back on.
pub fn install(module: usize) error{ NotLoaded, Raised }!void {
    const a = cpython.api orelse return error.NotLoaded;
    const gil = cpython.Gil.take(a);
    defer gil.release();
    const m = cpython.objectAt(module);
    capsule_of = try kept(a, capsule_of, m, "_capsule_of");
    not_capsule = try kept(a, not_capsule, m, "_not_capsule");
    try internNames(a);
    try guards.install(a);
    for (&methods) |*def| {
        const function = a.PyCFunction_NewEx(def, null, null) orelse return error.Raised;
        defer a.Py_DecRef(function);
        if (a.PyObject_SetAttrString(m, def.name.?, function) != 0) return error.Raised;
    }
    const cls = tensor.install(a, m) catch |err| switch (err) {
        error.Raised => return error.Raised,
        error.UnknownLayout => {
            _ = cpython.raise(a, a.PyExc_TypeError.*, "dlpack-ts: this CPython's object " ++
                "layout is not one dlpack-ts knows", .{});
            return error.Raised;
        },
    };
    try exchange.install(a, cls);
}

/// `module.name`, replacing a reference kept before.
fn kept(a: Api, old: ?*PyObject, module: *PyObject, name: [*:0]const u8) error{Raised}!*PyObject {
    const found = a.PyObject_GetAttrString(module, name) orelse return error.Raised;
    if (old) |o| a.Py_DecRef(o);
    return found;
}

fn internNames(a: Api) error{Raised}!void {
    if (dunder_dlpack != null) return;
    const intern = a.PyUnicode_InternFromString;
    const stream = intern("stream") orelse return error.Raised;
    const max_version = intern("max_version") orelse return error.Raised;
    const dl_device = intern("dl_device") orelse return error.Raised;
    const copy = intern("copy") orelse return error.Raised;
    const lists = [_][]const *PyObject{
        &.{ stream, max_version },
        &.{ stream, max_version, dl_device },
        &.{ stream, max_version, copy },
        &.{ stream, max_version, dl_device, copy },
        &.{stream},
    };
    for (lists, 0..) |list, i| {
        const tuple = a.PyTuple_New(@intCast(list.len)) orelse return error.Raised;
        for (list, 0..) |name, j| {
            a.Py_IncRef(name);
            _ = a.PyTuple_SetItem(tuple, @intCast(j), name);
        }
        call_names[i] = tuple;
    }
    dunder_dlpack = intern("__dlpack__") orelse return error.Raised;
}

var methods = [_]cpython.MethodDef{
    .{
        .name = "_native_exchange_counts",
        .method = @ptrCast(&nativeExchangeCounts),
        .flags = cpython.meth.varargs,
        .doc = "calls of the DLPack C exchange API, per path",
    },
};

fn nativeExchangeCounts(_: ?*PyObject, _: ?*PyObject) callconv(.c) ?*PyObject {
    return exchange.countsTuple(cpython.api.?);
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
/// else the numpy-style negotiation (`negotiate`), then `consume`; first, what the tensor holds
/// that DLPack cannot say (guards.zig) decides between them, or resolves it. Writes the
/// producer's name (UTF-8, NUL-terminated, truncated) into `name`.
pub fn from(obj: usize, options: FromOptions, out: *Description, name: []u8) ImportError!void {
    assert(name.len > 0);
    const a = cpython.api orelse return error.NotLoaded;
    if (capsule_of == null) return error.NotLoaded;
    const gil = cpython.Gil.take(a);
    defer gil.release();
    const object = cpython.objectAt(obj);
    var spare: exchange.Entry = undefined;
    const entry = exchange.entryOf(a, object, &spare);
    exchange.writeName(entry, name);
    const producer = entry.name[0..entry.name_len];
    return switch (guards.verdictOn(a, entry.framework, object) orelse return error.Raised) {
        .plain => fromEither(a, entry, object, options, exchangeApplies(options), out),
        // The framework's `__dlpack__` refuses it (its table would not): the caller sees that.
        .dunder_only => fromEither(a, entry, object, options, false, out),
        .lazy => fromResolved(a, entry, object, options, out, producer),
    };
}

/// The table of `entry` when `use_table` (and it serves), else `__dlpack__`.
fn fromEither(
    a: Api,
    entry: *const exchange.Entry,
    object: *PyObject,
    options: FromOptions,
    use_table: bool,
    out: *Description,
) ImportError!void {
    if (use_table) {
        if (try exchange.importFrom(a, entry, object, options.strict_offset, out)) return;
    }
    const capsule = try negotiate(a, object, options, entry.name[0..entry.name_len]);
    defer a.Py_DecRef(capsule);
    return consume(@intFromPtr(capsule), options.strict_offset, out);
}

/// A torch tensor with its conjugate or negative bit set: its memory holds other values than it
/// stands for. With a copy allowed (copy None or True) torch resolves them into a new tensor,
/// which is imported (IS_COPIED); with copy False it is refused with BufferError.
fn fromResolved(
    a: Api,
    entry: *const exchange.Entry,
    object: *PyObject,
    options: FromOptions,
    out: *Description,
    producer: []const u8,
) ImportError!void {
    if (options.copy == 0) {
        _ = cpython.raise(a, a.PyExc_BufferError.*, "dlpack-ts: {s} has its conjugate or " ++
            "negative bit set, so its memory holds other values than it stands for: allow a " ++
            "copy (copy true or null), or resolve_conj() / resolve_neg() it first", .{producer});
        return error.Raised;
    }
    const resolved = guards.resolveLazy(a, entry.framework, object) orelse return error.Raised;
    defer a.Py_DecRef(resolved);
    var spare: exchange.Entry = undefined;
    const resolved_entry = exchange.entryOf(a, resolved, &spare);
    var copied = options;
    copied.copy = -1; // torch has copied already
    try fromEither(a, resolved_entry, resolved, copied, exchangeApplies(copied), out);
    out.flags |= @intCast(dlpack.flag.is_copied);
}

fn isCapsule(a: Api, object: *PyObject) bool {
    const kind = a.PyObject_Type(object).?;
    a.Py_DecRef(kind); // the object holds its type
    return kind == a.PyCapsule_Type;
}

/// The producer's capsule, as numpy asks for it: a raw PyCapsule as it is, else one call of
/// `obj.__dlpack__(stream=..., max_version=..., [dl_device=...], [copy=...])`. A new reference;
/// error.ArrayInterface when the object has no `__dlpack__` but an `__array_interface__`.
fn negotiate(
    a: Api,
    object: *PyObject,
    options: FromOptions,
    producer: []const u8,
) ImportError!*PyObject {
    if (isCapsule(a, object)) {
        a.Py_IncRef(object);
        return object;
    }
    var values: [5]?*PyObject = .{ object, null, null, null, null };
    var count: usize = 3;
    values[1] = if (options.stream) |stream| a.PyLong_FromLongLong(stream) else cpython.none(a);
    values[2] = maxVersion(a, options);
    var which: usize = 0;
    if (options.device_type >= 0) {
        which |= 1;
        values[count] = cpython.newTuple(a, &.{
            a.PyLong_FromLongLong(options.device_type),
            a.PyLong_FromLongLong(options.device_id),
        });
        count += 1;
    }
    if (options.copy >= 0) {
        which |= 2;
        values[count] = cpython.boolean(a, options.copy != 0);
        count += 1;
    }
    defer for (values[1..count]) |value| a.Py_DecRef(value);
    for (values[1..count]) |value| if (value == null) return error.Raised;
    const names = call_names[which].?;
    const result = a.PyObject_VectorcallMethod(dunder_dlpack.?, &values, 1, names) orelse
        return afterFailure(a, object, options, values[1].?, producer);
    return checkCapsule(a, object, result);
}

/// `(major, minor)` (the last one reused), or None for the legacy struct: a new reference.
fn maxVersion(a: Api, options: FromOptions) ?*PyObject {
    if (options.max_major < 0) return cpython.none(a);
    const asked = [2]i32{ options.max_major, options.max_minor };
    if (version_tuple == null or !std.mem.eql(i32, &asked, &version_asked)) {
        const made = cpython.newTuple(a, &.{
            a.PyLong_FromLongLong(options.max_major),
            a.PyLong_FromLongLong(options.max_minor),
        }) orelse return null;
        if (version_tuple) |old| a.Py_DecRef(old);
        version_tuple = made;
        version_asked = asked;
    }
    a.Py_IncRef(version_tuple.?);
    return version_tuple.?;
}

/// `__dlpack__` raised. An object without one (or with None) goes to `_capsule_of`'s
/// `__array_interface__` path; a TypeError from a producer older than the 2023 keywords gets the
/// call it understands (`stream` only), unless dl_device or copy were asked for.
fn afterFailure(
    a: Api,
    object: *PyObject,
    options: FromOptions,
    stream: *PyObject,
    producer: []const u8,
) ImportError!*PyObject {
    const type_error = a.PyErr_ExceptionMatches(a.PyExc_TypeError.*) != 0;
    if (!type_error and a.PyErr_ExceptionMatches(a.PyExc_AttributeError.*) == 0) {
        return error.Raised;
    }
    var kind: ?*PyObject = null;
    var value: ?*PyObject = null;
    var traceback: ?*PyObject = null;
    a.PyErr_Fetch(&kind, &value, &traceback);
    if (!hasMethod(a, object)) {
        a.Py_DecRef(kind);
        a.Py_DecRef(value);
        a.Py_DecRef(traceback);
        return slowPath(a, object, options);
    }
    if (!type_error) {
        a.PyErr_Restore(kind, value, traceback);
        return error.Raised;
    }
    if (options.device_type >= 0 or options.copy >= 0) {
        a.PyErr_Restore(kind, value, traceback);
        _ = cpython.raise(a, a.PyExc_BufferError.*, "{s}.__dlpack__ does not accept dl_device " ++
            "or copy", .{producer});
        return error.Raised;
    }
    a.Py_DecRef(kind);
    a.Py_DecRef(value);
    a.Py_DecRef(traceback);
    const args = [2]?*PyObject{ object, stream };
    const result = if (options.stream != null)
        a.PyObject_VectorcallMethod(dunder_dlpack.?, &args, 1, call_names[4].?)
    else
        a.PyObject_VectorcallMethod(dunder_dlpack.?, &args, 1, null);
    return checkCapsule(a, object, result orelse return error.Raised);
}

/// Whether `object.__dlpack__` is something other than missing or None.
fn hasMethod(a: Api, object: *PyObject) bool {
    const method = a.PyObject_GetAttr(object, dunder_dlpack.?) orelse {
        a.PyErr_Clear();
        return false;
    };
    defer a.Py_DecRef(method);
    return method != a._Py_NoneStruct;
}

/// `result` when it is a capsule; else `_not_capsule` raises the TypeError. Steals `result`.
fn checkCapsule(a: Api, object: *PyObject, result: *PyObject) ImportError!*PyObject {
    if (isCapsule(a, result)) return result;
    defer a.Py_DecRef(result);
    a.Py_IncRef(object);
    a.Py_IncRef(result);
    const args = cpython.newTuple(a, &.{ object, result }) orelse return error.Raised;
    defer a.Py_DecRef(args);
    const none = a.PyObject_Call(not_capsule.?, args, null) orelse return error.Raised;
    a.Py_DecRef(none);
    _ = cpython.raise(a, a.PyExc_TypeError.*, "__dlpack__ did not return a PyCapsule", .{});
    return error.Raised;
}

/// The whole negotiation in `_capsule_of` (Python): for objects without `__dlpack__`.
fn slowPath(a: Api, object: *PyObject, options: FromOptions) ImportError!*PyObject {
    const args = negotiationArgs(a, object, options) orelse return error.Raised;
    defer a.Py_DecRef(args);
    const result = a.PyObject_Call(capsule_of.?, args, null) orelse return error.Raised;
    defer a.Py_DecRef(result);
    const capsule = a.PyTuple_GetItem(result, 0) orelse return error.Raised;
    if (capsule == a._Py_NoneStruct) return error.ArrayInterface;
    a.Py_IncRef(capsule);
    return capsule;
}

/// `(obj, max_version, copy, device, stream)` for `_capsule_of`, or null with the exception set.
fn negotiationArgs(a: Api, object: *PyObject, options: FromOptions) ?*PyObject {
    a.Py_IncRef(object);
    const max_version = maxVersion(a, options);
    const copy: ?*PyObject = if (options.copy < 0) cpython.none(a) else cpython.boolean(
        a,
        options.copy != 0,
    );
    const device = if (options.device_type < 0) cpython.none(a) else cpython.newTuple(a, &.{
        a.PyLong_FromLongLong(options.device_type),
        a.PyLong_FromLongLong(options.device_id),
    });
    const stream = if (options.stream) |value| a.PyLong_FromLongLong(value) else cpython.none(a);
    return cpython.newTuple(a, &.{ object, max_version, copy, device, stream });
}

// ---------------------------------------------------------------------------------------------
// Handles that did not come from this bridge (`{ handle }` objects): checked before the first
// dereference, against the same table of mappings the imports use.

/// Results of `checkObject` (`abi.ObjectCheck`).
pub const object_ok: i32 = @intFromEnum(abi.ObjectCheck.ok);
pub const object_header: i32 = @intFromEnum(abi.ObjectCheck.header);
pub const object_type: i32 = @intFromEnum(abi.ObjectCheck.type_object);
pub const object_metatype: i32 = @intFromEnum(abi.ObjectCheck.metatype);

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
    const region = try @import("fresh_pages.zig").freshRegion(1);
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
