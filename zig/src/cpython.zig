//! CPython's C API as this library uses it: libpython loaded globally (extension modules such as
//! numpy need its symbols in the global namespace), the functions resolved from it, the GIL,
//! exception text, and small object helpers. Everything here runs with the GIL held, or takes it.

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;

pub const PyObject = opaque {};
pub const Destructor = *const fn (*PyObject) callconv(.c) void;
pub const CFunction = *const fn (?*PyObject, ?*PyObject) callconv(.c) ?*PyObject;

/// CPython's `PyMethodDef` (stable ABI). `method`'s signature depends on `flags`.
pub const MethodDef = extern struct {
    name: ?[*:0]const u8,
    method: ?*const anyopaque,
    flags: c_int,
    doc: ?[*:0]const u8,
};
/// `PyMethodDef.flags` (CPython's METH_* names).
pub const meth = struct {
    pub const varargs: c_int = 0x1;
    pub const keywords: c_int = 0x2;
    pub const noargs: c_int = 0x4;
    pub const o: c_int = 0x8;
    pub const fastcall: c_int = 0x80;
};
/// `(self, args, nargs, kwnames)`: a METH_FASTCALL | METH_KEYWORDS method.
pub const FastMethod = *const fn (
    *PyObject,
    [*]const *PyObject,
    isize,
    ?*PyObject,
) callconv(.c) ?*PyObject;

/// CPython's `PyMemberDef` (stable ABI).
pub const MemberDef = extern struct {
    name: ?[*:0]const u8,
    kind: c_int,
    offset: isize,
    flags: c_int,
    doc: ?[*:0]const u8,
};
/// `PyMemberDef.kind` of a `Py_ssize_t` (T_PYSSIZET) and the READONLY flag.
pub const member_ssize: c_int = 19;
pub const member_readonly: c_int = 1;

/// CPython's `PyGetSetDef` (stable ABI).
pub const GetSetDef = extern struct {
    name: ?[*:0]const u8,
    get: ?*const fn (*PyObject, ?*anyopaque) callconv(.c) ?*PyObject,
    set: ?*const anyopaque,
    doc: ?[*:0]const u8,
    closure: ?*anyopaque,
};

/// CPython's `PyType_Slot` and `PyType_Spec` (stable ABI).
pub const TypeSlot = extern struct { slot: c_int, pfunc: ?*const anyopaque };
pub const TypeSpec = extern struct {
    name: [*:0]const u8,
    basicsize: c_int,
    itemsize: c_int,
    flags: c_uint,
    slots: [*]const TypeSlot,
};
/// The `Py_tp_*` slot numbers of typeslots.h (stable across versions).
pub const slot = struct {
    pub const tp_base: c_int = 48;
    pub const tp_bases: c_int = 49;
    pub const tp_dealloc: c_int = 52;
    pub const tp_doc: c_int = 56;
    pub const tp_init: c_int = 60;
    pub const tp_methods: c_int = 64;
    pub const tp_new: c_int = 65;
    pub const tp_repr: c_int = 66;
    pub const tp_members: c_int = 72;
    pub const tp_getset: c_int = 73;
};
/// Py_TPFLAGS_HAVE_VERSION_TAG: part of Py_TPFLAGS_DEFAULT up to 3.11, ignored later.
pub const tpflags_default: c_uint = 1 << 18;
/// `tp_flags` bits: Py_TPFLAGS_IMMUTABLETYPE (3.10+: no attribute can be set or deleted, by any
/// Python code), Py_TPFLAGS_HEAPTYPE (allocated at run time: every `class` statement, and types
/// made by PyType_FromSpec), Py_TPFLAGS_TUPLE_SUBCLASS and Py_TPFLAGS_UNICODE_SUBCLASS (tuple, str
/// and their subclasses: what PyTuple_Check and PyUnicode_Check test).
pub const tpflags_immutable: c_ulong = 1 << 8;
pub const tpflags_heap: c_ulong = 1 << 9;
pub const tpflags_tuple: c_ulong = 1 << 26;
pub const tpflags_unicode: c_ulong = 1 << 28;
/// `Py_EQ` and `Py_GE` of PyObject_RichCompareBool.
pub const compare_eq: c_int = 2;
pub const compare_ge: c_int = 5;

/// The C API functions this module calls, resolved from the loaded libpython.
pub const Api = struct {
    PyCapsule_New: *const fn (?*anyopaque, [*:0]const u8, ?Destructor) callconv(.c) ?*PyObject,
    PyCapsule_IsValid: *const fn (*PyObject, [*:0]const u8) callconv(.c) c_int,
    PyCapsule_GetPointer: *const fn (*PyObject, [*:0]const u8) callconv(.c) ?*anyopaque,
    PyCapsule_SetName: *const fn (*PyObject, [*:0]const u8) callconv(.c) c_int,
    PyCapsule_GetName: *const fn (*PyObject) callconv(.c) ?[*:0]const u8,
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
    PyCapsule_Type: *PyObject,
    PyTuple_Type: *PyObject,
    PyLong_Type: *PyObject,
    PyGILState_GetThisThreadState: *const fn () callconv(.c) ?*anyopaque,
    PyEval_ReleaseThread: *const fn (*anyopaque) callconv(.c) void,
    PyLong_AsLongLong: *const fn (*PyObject) callconv(.c) c_longlong,
    PyExc_AttributeError: **PyObject,
    PyExc_IndexError: **PyObject,
    PyType_FromSpec: *const fn (*const TypeSpec) callconv(.c) ?*PyObject,
    PyType_GenericAlloc: *const fn (*PyObject, isize) callconv(.c) ?*PyObject,
    PyObject_Free: *const fn (*anyopaque) callconv(.c) void,
    PyObject_ClearWeakRefs: *const fn (*PyObject) callconv(.c) void,
    PyObject_VectorcallMethod: *const fn (
        *PyObject,
        [*]const ?*PyObject,
        usize,
        ?*PyObject,
    ) callconv(.c) ?*PyObject,
    PyObject_VectorcallDict: *const fn (
        *PyObject,
        [*]const ?*PyObject,
        usize,
        ?*PyObject,
    ) callconv(.c) ?*PyObject,
    PyObject_IsTrue: *const fn (*PyObject) callconv(.c) c_int,
    PyObject_RichCompareBool: *const fn (*PyObject, *PyObject, c_int) callconv(.c) c_int,
    PySequence_Tuple: *const fn (*PyObject) callconv(.c) ?*PyObject,
    PyObject_Repr: *const fn (*PyObject) callconv(.c) ?*PyObject,
    PyUnicode_FromStringAndSize: *const fn ([*]const u8, isize) callconv(.c) ?*PyObject,
    PyErr_Restore: *const fn (?*PyObject, ?*PyObject, ?*PyObject) callconv(.c) void,
    PyType_GetSlot: *const fn (*PyObject, c_int) callconv(.c) ?*anyopaque,
    PyType_GetFlags: *const fn (*PyObject) callconv(.c) c_ulong,
    PyType_Modified: *const fn (*PyObject) callconv(.c) void,
    PyObject_GenericSetAttr: *const fn (*PyObject, *PyObject, ?*PyObject) callconv(.c) c_int,
    PyLong_AsLong: *const fn (*PyObject) callconv(.c) c_long,
    PyExc_OverflowError: **PyObject,
    PyExc_RuntimeError: **PyObject,
    PyImport_ImportModule: *const fn ([*:0]const u8) callconv(.c) ?*PyObject,
};

/// `_PyType_Lookup(type, name)`: the attribute found along the type's real MRO, a borrowed
/// reference or null, without raising and without running Python code (no descriptor, no
/// metaclass). Not in the limited API, so resolved on its own: without it no producer's DLPack C
/// exchange table is trusted (`fromPython` takes `__dlpack__`).
pub var type_lookup: ?*const fn (*PyObject, *PyObject) callconv(.c) ?*PyObject = null;

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
    // Named PyThreadState_GetUnchecked from 3.13, _PyThreadState_UncheckedGet before; without
    // either every bridge call takes the GIL through PyGILState.
    const unchecked = std.c.dlsym(handle, "PyThreadState_GetUnchecked") orelse
        std.c.dlsym(handle, "_PyThreadState_UncheckedGet");
    if (unchecked) |symbol| current_thread_state = @ptrCast(@alignCast(symbol));
    if (std.c.dlsym(handle, "_PyType_Lookup")) |symbol| type_lookup = @ptrCast(@alignCast(symbol));
    api = resolved;
}

/// The thread state current on this thread (null when it holds no GIL), read without a check.
var current_thread_state: ?*const fn () callconv(.c) ?*anyopaque = null;

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
    /// null: taken inside this thread's burst, which holds the GIL already.
    release_state: ?*const fn (c_int) callconv(.c) void,

    pub fn take(a: Api) Gil {
        // In this thread's burst the GIL is held (Python code that lets it go takes it back before
        // it returns), so the PyGILState pair would only count up and down. The burst's own thread
        // state being the current one says the GIL is still held: a call that let it go
        // (PyEval_SaveThread) left no current thread state. PyGILState_Check cannot say this: it
        // answers yes for every thread once any subinterpreter has been made.
        if (burst_thread_state) |mine| {
            if (current_thread_state) |current| {
                if (current() == mine) return .{ .state = 0, .release_state = null };
            }
        }
        return .{ .state = a.PyGILState_Ensure(), .release_state = a.PyGILState_Release };
    }

    pub fn release(self: Gil) void {
        if (self.release_state) |release_state| release_state(self.state);
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

/// Whether `object`'s type has the `tp_flags` bit `flag` (PyTuple_Check and friends are macros).
pub fn hasTypeFlag(a: Api, object: *PyObject, flag: c_ulong) bool {
    const kind = a.PyObject_Type(object).?;
    defer a.Py_DecRef(kind); // the object holds its type
    return a.PyType_GetFlags(kind) & flag != 0;
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
    // Through vectorcall (CPython 3.9+): numpy's from_dlpack and most callables take the argument
    // where it is, with no tuple made and freed per call. The caller's reference keeps it alive.
    const args = [1]?*PyObject{objectAt(arg)};
    return @intFromPtr(a.PyObject_VectorcallDict(objectAt(callable), &args, 1, null));
}

/// Bytes of the `PyObject` header (`ob_type` is its last word): 16 in default builds, 32 in
/// free-threaded ones. `type` is its own type, so the word holding its own address is `ob_type`;
/// null for a layout this library does not know.
pub fn headerBytes(a: Api) ?usize {
    const type_type = @intFromPtr(a.PyType_Type);
    assert(type_type != 0 and type_type % @alignOf(usize) == 0);
    for ([_]usize{ 8, 24 }) |offset| {
        if (@as(*const usize, @ptrFromInt(type_type + offset)).* == type_type) return offset + 8;
    }
    return null;
}

/// Sets a `kind` exception with a formatted message (truncated to fit). Returns null, for
/// functions that return an object.
pub fn raise(a: Api, kind: *PyObject, comptime format: []const u8, args: anytype) ?*PyObject {
    var buffer: [512]u8 = undefined;
    const text = std.fmt.bufPrintZ(&buffer, format, args) catch blk: {
        buffer[buffer.len - 1] = 0;
        break :blk buffer[0 .. buffer.len - 1 :0];
    };
    a.PyErr_SetString(kind, text.ptr);
    return null;
}

/// `repr(object)` as UTF-8 in `out` (truncated); "?" when repr raised (the exception is cleared).
pub fn reprInto(a: Api, object: *PyObject, out: []u8) []const u8 {
    assert(out.len > 1);
    const text = a.PyObject_Repr(object) orelse {
        a.PyErr_Clear();
        return "?";
    };
    defer a.Py_DecRef(text);
    return out[0..appendUnicode(a, out, text)];
}

// ---------------------------------------------------------------------------------------------
// Bursts: a JS thread keeps the GIL from its first bridge call of a synchronous run of JS to the
// end of that run (the JS side ends it in a microtask), so the calls in between nest cheaply in
// PyGILState instead of taking and dropping the GIL each. A thread that exits in a burst (a
// terminated Worker) lets go of the GIL in a thread-exit destructor, so Python is not left locked.

const burst_exit_hook = builtin.os.tag != .windows and builtin.link_libc;
var burst_key: if (burst_exit_hook) std.c.pthread_key_t else void = undefined;
var burst_key_once = std.once(makeBurstKey);
var burst_key_ready: bool = false;
/// The PyGILState of this thread's burst, or null outside one.
threadlocal var burst_state: ?c_int = null;
/// The thread state that holds the GIL in this thread's burst, or null outside one.
threadlocal var burst_thread_state: ?*anyopaque = null;

fn makeBurstKey() void {
    if (!burst_exit_hook) return;
    burst_key_ready = std.c.pthread_key_create(&burst_key, burstThreadExited) == .SUCCESS;
}

/// The key's value is the thread state that holds the GIL in the burst. Python's own thread-local
/// keys may already be cleared when this runs (glibc clears keys in creation order), so the GIL is
/// released from the thread state itself, not through PyGILState.
fn burstThreadExited(value: *anyopaque) callconv(.c) void {
    const a = api orelse return;
    a.PyEval_ReleaseThread(value);
}

/// Opens a burst on this thread: true when it took the GIL now (the caller ends it later with
/// `endBurst`), false when one is open already.
pub fn beginBurst() error{NotLoaded}!bool {
    const a = api orelse return error.NotLoaded;
    if (burst_state != null) return false;
    const state = a.PyGILState_Ensure();
    burst_state = state;
    // Never null while the GIL is held through PyGILState.
    const thread_state = a.PyGILState_GetThisThreadState().?;
    burst_thread_state = thread_state;
    if (burst_exit_hook) {
        burst_key_once.call();
        if (burst_key_ready) _ = std.c.pthread_setspecific(burst_key, thread_state);
    }
    return true;
}

/// Ends this thread's burst (nothing when none is open).
pub fn endBurst() void {
    const a = api orelse return;
    const state = burst_state orelse return;
    burst_state = null;
    burst_thread_state = null;
    if (burst_exit_hook and burst_key_ready) _ = std.c.pthread_setspecific(burst_key, null);
    a.PyGILState_Release(state);
}
