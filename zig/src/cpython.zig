//! CPython's C API as this library uses it: libpython loaded globally (extension modules such as
//! numpy need its symbols in the global namespace), the functions resolved from it, the GIL,
//! exception text, and small object helpers. Everything here runs with the GIL held, or takes it.

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;

pub const PyObject = opaque {};
pub const Destructor = *const fn (*PyObject) callconv(.c) void;
pub const CFunction = *const fn (?*PyObject, ?*PyObject) callconv(.c) ?*PyObject;

/// CPython's `PyMethodDef` (stable ABI).
pub const MethodDef = extern struct {
    name: [*:0]const u8,
    method: CFunction,
    flags: c_int,
    doc: ?[*:0]const u8,
};
pub const METH_VARARGS: c_int = 1;

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

pub const LoadError = error{LoadFailed};

/// Loads libpython with RTLD_NOW | RTLD_GLOBAL and resolves the API above; on failure
/// `loadError` says why. Loading again is a no-op.
pub fn load(path: [*:0]const u8) LoadError!void {
    if (api != null) return;
    if (builtin.os.tag == .windows) {
        return fail("the embedded-Python bridge is not available on Windows");
    }
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
}

fn fail(message: []const u8) LoadError {
    const n = @min(message.len, load_error.len - 1);
    @memcpy(load_error[0..n], message[0..n]);
    load_error[n] = 0;
    return error.LoadFailed;
}

pub fn loadError() [*:0]const u8 {
    return @ptrCast(&load_error);
}

pub fn noneObject() usize {
    const a = api orelse return 0;
    return @intFromPtr(a._Py_NoneStruct);
}

/// Formats the pending exception as "Type: message" into `out` (NUL-terminated, truncated) and
/// clears it. Returns the length, or null when no exception is pending (or Python is not loaded).
pub fn takeError(out: []u8) ?usize {
    const a = api orelse return null;
    assert(out.len > 0);
    const gil = Gil.take(a);
    defer gil.release();
    var kind: ?*PyObject = null;
    var value: ?*PyObject = null;
    var traceback: ?*PyObject = null;
    a.PyErr_Fetch(&kind, &value, &traceback);
    if (kind == null) return null;
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
    assert(written < out.len);
    return written;
}

/// Copies as much of `text` as fits into `out` while leaving room for a terminator.
fn appendLiteral(out: []u8, text: []const u8) usize {
    if (out.len <= 1) return 0;
    const n = @min(text.len, out.len - 1);
    @memcpy(out[0..n], text[0..n]);
    assert(n < out.len);
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

/// Whether this OS thread holds a lasting Python thread state. A thread the interpreter did not
/// start on (a second JS isolate, a Worker) would otherwise get a fresh thread state from every
/// PyGILState_Ensure and lose it (with any pending exception) at the matching Release.
threadlocal var attached: bool = false;

/// Gives the calling thread a lasting thread state. Call it while the thread does NOT hold the
/// GIL (the bridge does so right after initializing or finding the interpreter). Idempotent.
pub fn attachThread() error{NotLoaded}!void {
    const a = api orelse return error.NotLoaded;
    if (attached) return;
    _ = a.PyGILState_Ensure(); // never released: keeps this thread's state alive
    _ = a.PyEval_SaveThread(); // but lets go of the GIL
    attached = true;
}

/// The GIL, taken for the current thread (PyGILState is reentrant). Pair `take` with `release`.
pub const Gil = struct {
    state: c_int,
    release_state: *const fn (c_int) callconv(.c) void,

    pub fn take(a: Api) Gil {
        return .{ .state = a.PyGILState_Ensure(), .release_state = a.PyGILState_Release };
    }

    pub fn release(self: Gil) void {
        self.release_state(self.state);
    }
};

pub fn objectAt(address: usize) *PyObject {
    assert(address != 0);
    return @ptrFromInt(address);
}

pub fn newTuple(a: Api, items: []const ?*PyObject) ?*PyObject {
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

pub fn none(a: Api) *PyObject {
    a.Py_IncRef(a._Py_NoneStruct);
    return a._Py_NoneStruct;
}

pub fn boolean(a: Api, value: bool) *PyObject {
    const o = if (value) a._Py_TrueStruct else a._Py_FalseStruct;
    a.Py_IncRef(o);
    return o;
}

pub fn decref(handle: usize) void {
    const a = api orelse return;
    const gil = Gil.take(a);
    defer gil.release();
    a.Py_DecRef(objectAt(handle));
}

/// `callable(arg)`: a new reference, or 0 with the exception pending.
pub fn call1(callable: usize, arg: usize) usize {
    const a = api orelse return 0;
    const gil = Gil.take(a);
    defer gil.release();
    a.Py_IncRef(objectAt(arg));
    const args = newTuple(a, &.{objectAt(arg)}) orelse return 0;
    defer a.Py_DecRef(args);
    return @intFromPtr(a.PyObject_Call(objectAt(callable), args, null));
}
