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
const exchange = @import("exchange.zig");
const mappings = @import("mappings.zig");

pub const PyObject = opaque {};
const Destructor = *const fn (*PyObject) callconv(.c) void;
const CFunction = *const fn (?*PyObject, ?*PyObject) callconv(.c) ?*PyObject;

/// CPython's `PyMethodDef` (stable ABI).
const MethodDef = extern struct {
    name: [*:0]const u8,
    method: CFunction,
    flags: c_int,
    doc: ?[*:0]const u8,
};
const METH_VARARGS: c_int = 1;

/// The C API functions this module calls, resolved from the loaded libpython.
pub const Api = struct {
    PyCapsule_New: *const fn (?*anyopaque, [*:0]const u8, ?Destructor) callconv(.c) ?*PyObject,
    PyCapsule_IsValid: *const fn (*PyObject, [*:0]const u8) callconv(.c) c_int,
    PyCapsule_GetPointer: *const fn (*PyObject, [*:0]const u8) callconv(.c) ?*anyopaque,
    PyCapsule_SetName: *const fn (*PyObject, [*:0]const u8) callconv(.c) c_int,
    PyCapsule_GetContext: *const fn (*PyObject) callconv(.c) ?*anyopaque,
    PyCapsule_SetContext: *const fn (*PyObject, ?*anyopaque) callconv(.c) c_int,
    PyErr_Fetch: *const fn (*?*PyObject, *?*PyObject, *?*PyObject) callconv(.c) void,
    PyErr_NormalizeException: *const fn (*?*PyObject, *?*PyObject, *?*PyObject) callconv(.c) void,
    PyErr_SetString: *const fn (*PyObject, [*:0]const u8) callconv(.c) void,
    PyObject_Str: *const fn (*PyObject) callconv(.c) ?*PyObject,
    PyObject_GetAttrString: *const fn (*PyObject, [*:0]const u8) callconv(.c) ?*PyObject,
    PyUnicode_AsUTF8AndSize: *const fn (*PyObject, *isize) callconv(.c) ?[*]const u8,
    PyErr_Clear: *const fn () callconv(.c) void,
    Py_DecRef: *const fn (?*PyObject) callconv(.c) void,
    PyExc_BufferError: **PyObject,
    PyExc_TypeError: **PyObject,
    _Py_NoneStruct: *PyObject,
    _Py_TrueStruct: *PyObject,
    _Py_FalseStruct: *PyObject,
    PyGILState_Ensure: *const fn () callconv(.c) c_int,
    PyEval_SaveThread: *const fn () callconv(.c) ?*anyopaque,
    PyGILState_Release: *const fn (c_int) callconv(.c) void,
    PyObject_Call: *const fn (*PyObject, *PyObject, ?*PyObject) callconv(.c) ?*PyObject,
    PyObject_SetAttrString: *const fn (*PyObject, [*:0]const u8, *PyObject) callconv(.c) c_int,
    PyTuple_New: *const fn (isize) callconv(.c) ?*PyObject,
    PyTuple_SetItem: *const fn (*PyObject, isize, *PyObject) callconv(.c) c_int,
    PyTuple_GetItem: *const fn (*PyObject, isize) callconv(.c) ?*PyObject,
    PyTuple_Size: *const fn (*PyObject) callconv(.c) isize,
    PyLong_FromLongLong: *const fn (c_longlong) callconv(.c) ?*PyObject,
    PyLong_FromUnsignedLongLong: *const fn (c_ulonglong) callconv(.c) ?*PyObject,
    PyLong_AsUnsignedLongLongMask: *const fn (*PyObject) callconv(.c) c_ulonglong,
    PyErr_Occurred: *const fn () callconv(.c) ?*PyObject,
    PyCFunction_NewEx: *const fn (*const MethodDef, ?*PyObject, ?*PyObject) callconv(.c) ?*PyObject,
    Py_IncRef: *const fn (?*PyObject) callconv(.c) void,
    PyObject_Type: *const fn (*PyObject) callconv(.c) ?*PyObject,
    PyObject_GetAttr: *const fn (*PyObject, *PyObject) callconv(.c) ?*PyObject,
    PyObject_SetAttr: *const fn (*PyObject, *PyObject, *PyObject) callconv(.c) c_int,
    PyObject_IsInstance: *const fn (*PyObject, *PyObject) callconv(.c) c_int,
    PyUnicode_InternFromString: *const fn ([*:0]const u8) callconv(.c) ?*PyObject,
    PyErr_ExceptionMatches: *const fn (*PyObject) callconv(.c) c_int,
    PyExc_ValueError: **PyObject,
    PyExc_MemoryError: **PyObject,
    PyType_Type: *PyObject,
};

pub var api: ?Api = null;
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
    const gil = Gil.take().?;
    defer gil.release();
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

pub fn appendUnicode(a: Api, out: []u8, text: *PyObject) usize {
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
    var own: ?exports.Own = null;
    const options: describe.Options = .{ .versioned = versioned, .strict_offset = strict_offset };
    const status = describe.describeAndRecognize(managed, options, out, &own);
    if (status != .ok) return @intFromEnum(status);
    // One of this library's exports goes to one import only, whichever way it arrives: a raw
    // import of the same struct must not take it a second time (the capsule keeps a refused one).
    if (own) |found| {
        if (found.state != .live or !exports.claim(managed)) {
            out.status = @intFromEnum(describe.Status.already_imported);
            out.detail_found = @bitCast(@as(u64, managed));
            out.detail_limit = @intFromBool(found.versioned);
            return out.status;
        }
    }
    const created = owner_mod.create(if (versioned) .versioned else .legacy, managed, 0) orelse {
        if (own != null) exports.unclaim(managed);
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

/// The name of the capsule a `DLPackTensor` keeps its export template in. Python code only ever
/// sees the template through such a capsule: no raw address crosses into Python, a copy of the
/// object shares the capsule (one reference count, one release), and the natives below refuse
/// anything else.
pub const NAME_TEMPLATE: [*:0]const u8 = "dlpack_ts.export_template";
/// A template capsule whose `DLPackTensor` could not be made: the template went back to the
/// caller, so the capsule must neither release nor lend it.
const NAME_DISARMED: [*:0]const u8 = "dlpack_ts.disarmed_template";
/// The capsule context of a template over read-only data (NULL for writable data).
var readonly_marker: u8 = 0;
const CONTEXT_READONLY: *anyopaque = &readonly_marker;

/// Releases the template when the last reference to its capsule goes (a copied `DLPackTensor`
/// shares the capsule, so this runs once).
fn templateDestructor(capsule: *PyObject) callconv(.c) void {
    const a = api orelse return;
    if (a.PyCapsule_IsValid(capsule, NAME_TEMPLATE) == 0) return;
    const template = @intFromPtr(a.PyCapsule_GetPointer(capsule, NAME_TEMPLATE));
    if (dlpack.isManagedAddress(template) and exports.isOwnExport(template, true)) dlpack.deleteManaged(template, true);
}

/// Whether a template capsule holds read-only data (its context says so).
pub fn isReadOnlyHolder(a: Api, holder: *PyObject) bool {
    return a.PyCapsule_GetContext(holder) == CONTEXT_READONLY;
}

/// The template in a template capsule, or null with a TypeError set for any other object.
pub fn templateOf(a: Api, object: *PyObject) ?usize {
    if (a.PyCapsule_IsValid(object, NAME_TEMPLATE) == 0) {
        a.PyErr_SetString(a.PyExc_TypeError.*, "dlpack-ts: expected the export template of a DLPackTensor");
        return null;
    }
    const template = @intFromPtr(a.PyCapsule_GetPointer(object, NAME_TEMPLATE));
    // Only wrapTemplate makes these capsules; one forged through ctypes is still not trusted.
    if (!dlpack.isManagedAddress(template) or !exports.isOwnExport(template, true)) {
        a.PyErr_SetString(a.PyExc_TypeError.*, "dlpack-ts: this template capsule does not hold an export of dlpack-ts");
        return null;
    }
    return template;
}

/// A new capsule over a fresh export cloned from the template in `holder` (a template capsule).
/// Returns a new reference, or 0 with a Python exception set (BufferError for what cannot be
/// exported, TypeError for a holder that is not a template capsule).
pub fn makeCapsule(holder: *PyObject, flags: u32) usize {
    const a = api orelse return 0;
    const template = templateOf(a, holder) orelse return 0;
    const versioned = flags & CAPSULE_VERSIONED != 0;
    const copy = flags & CAPSULE_COPY != 0;
    if (!versioned and !copy and a.PyCapsule_GetContext(holder) == CONTEXT_READONLY) {
        a.PyErr_SetString(
            a.PyExc_BufferError.*,
            "dlpack-ts: read-only data cannot be exported through the legacy DLPack struct (ask for max_version >= (1, 0))",
        );
        return 0;
    }
    const managed = (if (copy) copyExport(template, versioned) else exports.clone(template, versioned)) orelse {
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

// ---------------------------------------------------------------------------------------------
// Fast paths for the bridge's hot calls. Each takes the GIL itself (PyGILState is reentrant), and
// handles cross as f64, so a JS call is one fast FFI call instead of a dozen C API calls.

/// The helper module's objects the fast paths call (new references, kept for the process).
var capsule_of: ?*PyObject = null;
/// `dlpack_ts._make_tensor`: the only maker of `DLPackTensor` objects.
var make_tensor: ?*PyObject = null;

/// Whether this OS thread holds a lasting Python thread state. A thread the interpreter did not
/// start on (a second JS isolate, a Worker) would otherwise get a fresh thread state from every
/// PyGILState_Ensure and lose it (with any pending exception) at the matching Release.
threadlocal var attached: bool = false;

/// Gives the calling thread a lasting thread state. Call it while the thread does NOT hold the
/// GIL (the bridge does so right after initializing or finding the interpreter). Idempotent.
pub fn attachThread() i32 {
    const a = api orelse return STATUS_NOT_LOADED;
    if (attached) return 0;
    _ = a.PyGILState_Ensure(); // never released: keeps this thread's state alive
    _ = a.PyEval_SaveThread(); // but lets go of the GIL
    attached = true;
    return 0;
}

pub const Gil = struct {
    state: c_int,
    pub fn take() ?Gil {
        const a = api orelse return null;
        return .{ .state = a.PyGILState_Ensure() };
    }
    pub fn release(self: Gil) void {
        api.?.PyGILState_Release(self.state);
    }
};

fn objectAt(address: usize) *PyObject {
    std.debug.assert(address != 0);
    return @ptrFromInt(address);
}

fn newTuple(a: Api, items: []const ?*PyObject) ?*PyObject {
    // Steals every item, also on failure.
    const tuple = a.PyTuple_New(@intCast(items.len)) orelse {
        for (items) |item| a.Py_DecRef(item);
        return null;
    };
    var failed = false;
    for (items, 0..) |item, i| {
        if (item) |it| {
            _ = a.PyTuple_SetItem(tuple, @intCast(i), it);
        } else failed = true;
    }
    if (failed) {
        a.Py_DecRef(tuple);
        return null;
    }
    return tuple;
}

fn none(a: Api) *PyObject {
    a.Py_IncRef(a._Py_NoneStruct);
    return a._Py_NoneStruct;
}

fn boolean(a: Api, value: bool) *PyObject {
    const o = if (value) a._Py_TrueStruct else a._Py_FalseStruct;
    a.Py_IncRef(o);
    return o;
}

/// Keeps the helper module's `_capsule_of` and `_make_tensor` for the fast paths, and installs the
/// native functions `_native_capsule(holder, flags)` and `_native_fence(holder, stream)` on the
/// module (`holder` is a DLPackTensor's template capsule; no raw address is taken from Python).
pub fn install(module: usize, capsule_of_fn: usize, make_tensor_fn: usize) i32 {
    const a = api orelse return STATUS_NOT_LOADED;
    const gil = Gil.take().?;
    defer gil.release();
    a.Py_IncRef(objectAt(capsule_of_fn));
    a.Py_IncRef(objectAt(make_tensor_fn));
    capsule_of = objectAt(capsule_of_fn);
    make_tensor = objectAt(make_tensor_fn);
    for (&methods) |*def| {
        const function = a.PyCFunction_NewEx(def, null, null) orelse return -1;
        defer a.Py_DecRef(function);
        if (a.PyObject_SetAttrString(objectAt(module), def.name, function) != 0) return -1;
    }
    // DLPackTensor gets its `__dlpack_c_exchange_api__` (exchange.zig).
    const cls = a.PyObject_GetAttrString(objectAt(module), "DLPackTensor") orelse return -1;
    defer a.Py_DecRef(cls);
    return exchange.install(a, cls);
}

var methods = [_]MethodDef{
    .{ .name = "_native_capsule", .method = nativeCapsule, .flags = METH_VARARGS, .doc = "capsule over a clone of an export template" },
    .{ .name = "_native_fence", .method = nativeFence, .flags = METH_VARARGS, .doc = "order a consumer stream after the producer" },
    .{ .name = "_native_exchange_counts", .method = nativeExchangeCounts, .flags = METH_VARARGS, .doc = "calls of the DLPack C exchange API, per path" },
};

fn nativeExchangeCounts(_: ?*PyObject, _: ?*PyObject) callconv(.c) ?*PyObject {
    return exchange.countsTuple(api.?);
}

/// `(holder, word)` arguments: the holder object (borrowed) and an int as an unsigned word.
const HolderArgs = struct { holder: *PyObject, word: u64 };

fn holderArgs(args: ?*PyObject) ?HolderArgs {
    const a = api.?;
    const tuple = args orelse return null;
    if (a.PyTuple_Size(tuple) != 2) {
        a.PyErr_SetString(a.PyExc_TypeError.*, "dlpack-ts: expected (template, int)");
        return null;
    }
    const holder = a.PyTuple_GetItem(tuple, 0).?;
    const word = a.PyLong_AsUnsignedLongLongMask(a.PyTuple_GetItem(tuple, 1).?);
    if (a.PyErr_Occurred() != null) return null;
    return .{ .holder = holder, .word = word };
}

fn nativeCapsule(_: ?*PyObject, args: ?*PyObject) callconv(.c) ?*PyObject {
    const parsed = holderArgs(args) orelse return null;
    const made = makeCapsule(parsed.holder, @truncate(parsed.word));
    return if (made == 0) null else @ptrFromInt(made);
}

/// Returns the fence status as an int (0 ok, -2 stream 0, other negatives: failures).
fn nativeFence(_: ?*PyObject, args: ?*PyObject) callconv(.c) ?*PyObject {
    const a = api.?;
    const parsed = holderArgs(args) orelse return null;
    const template = templateOf(a, parsed.holder) orelse return null;
    const status = fence_hook(template, @intCast(parsed.word));
    return a.PyLong_FromLongLong(status);
}

/// Set by root.zig: the CUDA fence (kept out of this module so it needs no CUDA import).
pub var fence_hook: *const fn (usize, usize) i32 = noFence;

fn noFence(_: usize, _: usize) i32 {
    return -1;
}

pub fn decref(handle: usize) void {
    const a = api orelse return;
    const gil = Gil.take().?;
    defer gil.release();
    a.Py_DecRef(objectAt(handle));
}

/// `callable(arg)`: a new reference, or 0 with the exception pending.
pub fn call1(callable: usize, arg: usize) usize {
    const a = api orelse return 0;
    const gil = Gil.take().?;
    defer gil.release();
    a.Py_IncRef(objectAt(arg));
    const args = newTuple(a, &.{objectAt(arg)}) orelse return 0;
    defer a.Py_DecRef(args);
    return @intFromPtr(a.PyObject_Call(objectAt(callable), args, null));
}

/// A `DLPackTensor` over `template` (a versioned export of ours), which it keeps in a template
/// capsule: a new reference, or 0 with the exception pending (the template is then still the
/// caller's: the capsule is disarmed before its last reference goes).
pub fn wrapTemplate(template: usize, readonly: bool) usize {
    const a = api orelse return 0;
    const make = make_tensor orelse return 0;
    std.debug.assert(dlpack.isManagedAddress(template));
    const gil = Gil.take().?;
    defer gil.release();
    const holder = a.PyCapsule_New(@ptrFromInt(template), NAME_TEMPLATE, templateDestructor) orelse return 0;
    // Our own reference, so the capsule outlives a failed call and can be disarmed first.
    defer a.Py_DecRef(holder);
    const managed: *const dlpack.ManagedTensorVersioned = @ptrFromInt(template);
    const read_only = readonly or managed.flags & dlpack.FLAG_READ_ONLY != 0;
    if (read_only and a.PyCapsule_SetContext(holder, CONTEXT_READONLY) != 0) return disarm(a, holder);
    a.Py_IncRef(holder);
    const args = tensorArgs(a, holder, template, read_only) orelse return disarm(a, holder);
    defer a.Py_DecRef(args);
    const made = a.PyObject_Call(make, args, null) orelse return disarm(a, holder);
    return @intFromPtr(made);
}

/// The template goes back to the caller: the capsule must not release it. Returns 0.
fn disarm(a: Api, holder: *PyObject) usize {
    const renamed = a.PyCapsule_SetName(holder, NAME_DISARMED);
    std.debug.assert(renamed == 0);
    return 0;
}

/// `(holder, device_type, device_id, readonly, shape, code, bits)`; steals `holder`.
fn tensorArgs(a: Api, holder: *PyObject, template: usize, readonly: bool) ?*PyObject {
    const m: *const dlpack.ManagedTensorVersioned = @ptrFromInt(template);
    const t = &m.dl_tensor;
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
    return newTuple(a, &.{
        holder,
        a.PyLong_FromLongLong(t.device.device_type),
        a.PyLong_FromLongLong(t.device.device_id),
        boolean(a, readonly),
        shape,
        a.PyLong_FromLongLong(t.dtype.code),
        a.PyLong_FromLongLong(t.dtype.bits),
    });
}

/// Returned by `from` when the object has no `__dlpack__` but an `__array_interface__`: the caller
/// takes the general path.
pub const STATUS_INTERFACE: i32 = 20;
/// The call into Python raised: the exception is pending.
pub const STATUS_RAISED: i32 = 21;

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
    return options.max_major >= 1 and options.copy != 1 and options.device_type < 0 and options.stream == null;
}

/// `fromPython`'s fast path: the producer type's C exchange table when it has one (exchange.zig),
/// else the numpy-style negotiation in `_capsule_of`, then `consume`. Writes
/// the producer's name (UTF-8, NUL-terminated, truncated) into `name`.
pub fn from(obj: usize, options: FromOptions, out: *describe.Description, name: []u8) i32 {
    const a = api orelse return STATUS_NOT_LOADED;
    const negotiate = capsule_of orelse return STATUS_NOT_LOADED;
    const gil = Gil.take().?;
    defer gil.release();
    if (exchangeApplies(options)) {
        if (exchange.importFrom(a, objectAt(obj), options.strict_offset, out, name)) |status| return status;
    }
    a.Py_IncRef(objectAt(obj));
    const max_version = if (options.max_major < 0) none(a) else newTuple(a, &.{
        a.PyLong_FromLongLong(options.max_major),
        a.PyLong_FromLongLong(options.max_minor),
    });
    const copy: ?*PyObject = if (options.copy < 0) none(a) else boolean(a, options.copy != 0);
    const device = if (options.device_type < 0) none(a) else newTuple(a, &.{
        a.PyLong_FromLongLong(options.device_type),
        a.PyLong_FromLongLong(options.device_id),
    });
    const stream = if (options.stream) |value| a.PyLong_FromLongLong(value) else none(a);
    const args = newTuple(a, &.{ objectAt(obj), max_version, copy, device, stream }) orelse return STATUS_RAISED;
    defer a.Py_DecRef(args);
    const result = a.PyObject_Call(negotiate, args, null) orelse return STATUS_RAISED;
    defer a.Py_DecRef(result);
    std.debug.assert(name.len > 0);
    const written = if (a.PyTuple_GetItem(result, 1)) |producer| appendUnicode(a, name, producer) else 0;
    name[written] = 0;
    const capsule = a.PyTuple_GetItem(result, 0) orelse return STATUS_RAISED;
    if (capsule == a._Py_NoneStruct) return STATUS_INTERFACE;
    return consume(@intFromPtr(capsule), options.strict_offset, out);
}

// ---------------------------------------------------------------------------------------------
// Handles that did not come from this bridge (`{ handle }` objects): checked before the first
// dereference, against the same table of mappings the imports use.

/// Results of `checkObject`: dereferenceable, or which part is not.
pub const OBJECT_OK: i32 = 0;
pub const OBJECT_HEADER: i32 = 1;
pub const OBJECT_TYPE: i32 = 2;
pub const OBJECT_METATYPE: i32 = 3;

/// Bytes of a type object that must be readable: `PyTypeObject` up to `tp_vectorcall` is 400 to
/// 416 bytes from CPython 3.9 on (the slots Python reads when it calls or releases an object).
const TYPE_BYTES: usize = 400;
/// Metatypes followed before giving up (`type(type(x))`...; real chains end at `type` within 3).
const MAX_META_DEPTH: usize = 8;

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
    if (address % word != 0 or !mappings.readable(address, offset + word)) return OBJECT_HEADER;
    var kind = wordAt(address + offset);
    var depth: usize = 0;
    while (depth < MAX_META_DEPTH) : (depth += 1) {
        if (kind == 0 or kind % word != 0 or !mappings.readable(kind, TYPE_BYTES)) {
            return if (depth == 0) OBJECT_TYPE else OBJECT_METATYPE;
        }
        if (kind == type_type) return OBJECT_OK;
        kind = wordAt(kind + offset);
    }
    return OBJECT_METATYPE;
}

/// `checkHeader` for the loaded libpython; STATUS_NOT_LOADED before `load`. Without a table of
/// mappings (the listing failed) or with an unknown object layout, nothing can be checked: 0.
pub fn checkObject(address: usize) i32 {
    const a = api orelse return STATUS_NOT_LOADED;
    if (address == 0) return OBJECT_HEADER;
    if (!mappings.available()) return OBJECT_OK;
    const type_type = @intFromPtr(a.PyType_Type);
    const offset = typeOffset(type_type);
    if (offset == 0) return OBJECT_OK;
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
    try std.testing.expectEqual(OBJECT_OK, checkHeader(@intFromPtr(&words[128]), 8, type_type));
    try std.testing.expectEqual(OBJECT_OK, checkHeader(type_type, 8, type_type));
    try std.testing.expectEqual(OBJECT_HEADER, checkHeader(4096, 8, type_type));
    try std.testing.expectEqual(OBJECT_HEADER, checkHeader(@intFromPtr(&words[128]) + 1, 8, type_type));
    // The type's last 400 bytes run past the page: not a readable type object.
    words[128 + 1] = @intFromPtr(region.ptr) + region.len - 64;
    try std.testing.expectEqual(OBJECT_TYPE, checkHeader(@intFromPtr(&words[128]), 8, type_type));
    words[128 + 1] = 4096;
    try std.testing.expectEqual(OBJECT_TYPE, checkHeader(@intFromPtr(&words[128]), 8, type_type));
    // A readable type whose own type is unmapped, and a chain that never reaches `type`.
    words[128 + 1] = @intFromPtr(&words[64]);
    words[64 + 1] = 8192;
    try std.testing.expectEqual(OBJECT_METATYPE, checkHeader(@intFromPtr(&words[128]), 8, type_type));
    words[64 + 1] = @intFromPtr(&words[64]);
    try std.testing.expectEqual(OBJECT_METATYPE, checkHeader(@intFromPtr(&words[128]), 8, type_type));
}
