//! `dlpack_ts.DLPackTensor`: the Python type `toPython` returns, written with the C API. Each
//! object holds one versioned export of this library (its template) in a field Python code cannot
//! reach, and releases it exactly once, when the object goes. `__dlpack__` negotiates in C and
//! hands out capsules over clones (or copies) of the template (templates.zig). The type is
//! immutable (no attribute of it can be set or deleted from Python, `__new__` included) and cannot
//! be instantiated, re-initialized or subclassed from Python, pickled or deep-copied; `copy.copy`
//! returns the object itself. Every method still refuses an object without an export with a
//! TypeError (none can be made without C code; the check costs one load). GIL held throughout.

const std = @import("std");
const assert = std.debug.assert;
const cpython = @import("cpython.zig");
const dlpack = @import("dlpack.zig");
const exports = @import("exports.zig");
const templates = @import("templates.zig");

const PyObject = cpython.PyObject;
const Api = cpython.Api;

/// The fields after the object header (whose size depends on the CPython build).
const Fields = extern struct {
    /// The versioned export of this library the object holds; released in `dealloc`.
    template: usize,
    /// CPython's list of weak references (`__weakref__`).
    weaklist: ?*PyObject,
    /// 1 for read-only data (the export's READ_ONLY flag or `toPython`'s option).
    readonly: u32,
    reserved: u32,
};

comptime {
    assert(@sizeOf(Fields) == 24);
    assert(@offsetOf(Fields, "template") == 0);
    assert(@offsetOf(Fields, "weaklist") == 8);
}

/// The type, made once per process by `install`; `header_bytes` is the object header's size.
var tensor_type: ?*PyObject = null;
var header_bytes: usize = 0;

/// Interned keyword names of `__dlpack__` and the int 1 `max_version[0]` is compared with.
const Keywords = struct {
    stream: *PyObject,
    max_version: *PyObject,
    dl_device: *PyObject,
    copy: *PyObject,
};
var keywords: ?Keywords = null;

pub const InstallError = error{ Raised, UnknownLayout };

/// Makes the type (once) and sets it as `module.DLPackTensor`. GIL held.
pub fn install(a: Api, module: *PyObject) InstallError!*PyObject {
    if (tensor_type == null) {
        header_bytes = cpython.headerBytes(a) orelse return error.UnknownLayout;
        keywords = try internKeywords(a);
        members[0].offset = @intCast(header_bytes + @offsetOf(Fields, "weaklist"));
        const spec = cpython.TypeSpec{
            .name = "dlpack_ts.DLPackTensor",
            .basicsize = @intCast(header_bytes + @sizeOf(Fields)),
            .itemsize = 0,
            // Immutable: Python code can neither replace `__new__` (which made objects without an
            // export) nor any other attribute; the exchange table is set in C (exchange.zig).
            .flags = cpython.tpflags_default | @as(c_uint, @intCast(cpython.tpflags_immutable)),
            .slots = &slots,
        };
        tensor_type = a.PyType_FromSpec(&spec) orelse return error.Raised;
    }
    const kind = tensor_type.?;
    if (a.PyObject_SetAttrString(module, "DLPackTensor", kind) != 0) return error.Raised;
    return kind;
}

fn internKeywords(a: Api) error{Raised}!Keywords {
    return .{
        .stream = a.PyUnicode_InternFromString("stream") orelse return error.Raised,
        .max_version = a.PyUnicode_InternFromString("max_version") orelse return error.Raised,
        .dl_device = a.PyUnicode_InternFromString("dl_device") orelse return error.Raised,
        .copy = a.PyUnicode_InternFromString("copy") orelse return error.Raised,
    };
}

/// A new `DLPackTensor` holding `template` (a versioned export of ours): a new reference, or 0
/// with the exception pending (the template is then still the caller's). Takes the GIL.
pub fn make(template: usize, readonly: bool) usize {
    const a = cpython.api orelse return 0;
    const kind = tensor_type orelse return 0;
    assert(dlpack.isManagedAddress(template));
    assert(exports.isOwnExport(template, true));
    const gil = cpython.Gil.take(a);
    defer gil.release();
    const object = a.PyType_GenericAlloc(kind, 0) orelse return 0;
    const managed: *const dlpack.ManagedTensorVersioned = @ptrFromInt(template);
    const f = fieldsOf(object);
    f.template = template;
    f.readonly = @intFromBool(readonly or managed.flags & dlpack.flag.read_only != 0);
    return @intFromPtr(object);
}

fn fieldsOf(object: *PyObject) *Fields {
    assert(header_bytes != 0);
    return @ptrFromInt(@intFromPtr(object) + header_bytes);
}

fn typeOf(object: *PyObject) usize {
    return @as(*const usize, @ptrFromInt(@intFromPtr(object) + header_bytes - 8)).*;
}

/// What a `DLPackTensor` lends: its template and whether the data is read-only.
pub const Lent = struct { template: usize, readonly: bool };

/// The template of `object` when it is a `DLPackTensor`, else null with a TypeError set.
pub fn lentBy(a: Api, object: *PyObject) ?Lent {
    const kind = tensor_type orelse {
        _ = cpython.raise(a, a.PyExc_TypeError.*, "dlpack-ts: the bridge is not installed", .{});
        return null;
    };
    if (typeOf(object) != @intFromPtr(kind)) {
        const message = "dlpack-ts: expected a dlpack_ts.DLPackTensor";
        _ = cpython.raise(a, a.PyExc_TypeError.*, message, .{});
        return null;
    }
    const f = fieldsOf(object);
    if (f.template == 0) {
        _ = noExport(a);
        return null;
    }
    return .{ .template = f.template, .readonly = f.readonly != 0 };
}

/// The TypeError of a method called on a `DLPackTensor` that holds no export. Only `make` fills
/// these objects and the type refuses every other way Python code has to make one, but an object
/// made by C code (ctypes, another extension) must still end in an exception, not an abort.
fn noExport(a: Api) ?*PyObject {
    return cpython.raise(a, a.PyExc_TypeError.*, "dlpack-ts: this dlpack_ts.DLPackTensor holds " ++
        "no export (only toPython in JavaScript makes usable ones)", .{});
}

// ---------------------------------------------------------------------------------------------
// The type's slots.

const doc =
    \\Memory owned by JavaScript (a TypedArray or a dlpack-ts view), shared without a copy.
    \\
    \\Speaks the DLPack protocol: numpy.from_dlpack, torch.from_dlpack and jax.dlpack.from_dlpack
    \\accept it. Its type also has the DLPack C exchange API (__dlpack_c_exchange_api__), which
    \\C consumers such as tvm-ffi use without calling Python; read-only data goes through
    \\__dlpack__ only. The JS memory stays pinned until this object and every array made from it
    \\are gone.
    \\Only dlpack-ts makes these (toPython in JavaScript); they cannot be subclassed, pickled or
    \\deep-copied, and copy.copy returns the object itself (it is immutable).
;

const slots = [_]cpython.TypeSlot{
    .{ .slot = cpython.slot.tp_dealloc, .pfunc = @ptrCast(&dealloc) },
    .{ .slot = cpython.slot.tp_new, .pfunc = @ptrCast(&refuseNew) },
    .{ .slot = cpython.slot.tp_init, .pfunc = @ptrCast(&refuseInit) },
    .{ .slot = cpython.slot.tp_repr, .pfunc = @ptrCast(&repr) },
    .{ .slot = cpython.slot.tp_doc, .pfunc = doc },
    .{ .slot = cpython.slot.tp_methods, .pfunc = @ptrCast(&methods) },
    .{ .slot = cpython.slot.tp_getset, .pfunc = @ptrCast(&getset) },
    .{ .slot = cpython.slot.tp_members, .pfunc = @ptrCast(&members) },
    .{ .slot = 0, .pfunc = null },
};

/// `__weaklistoffset__` (its offset is set by `install`, once the header's size is known).
var members = [_]cpython.MemberDef{
    .{
        .name = "__weaklistoffset__",
        .kind = cpython.member_ssize,
        .offset = 0,
        .flags = cpython.member_readonly,
        .doc = null,
    },
    .{ .name = null, .kind = 0, .offset = 0, .flags = 0, .doc = null },
};

const getset = [_]cpython.GetSetDef{
    .{
        .name = "shape",
        .get = shape,
        .set = null,
        .doc = "The extents, a tuple of ints.",
        .closure = null,
    },
    .{
        .name = "dtype",
        .get = dtype,
        .set = null,
        .doc = "The dtype's name (\"float32\", \"bfloat16\", ...).",
        .closure = null,
    },
    .{ .name = null, .get = null, .set = null, .doc = null, .closure = null },
};

const methods = [_]cpython.MethodDef{
    .{
        .name = "__dlpack__",
        .method = @ptrCast(&dlpackMethod),
        .flags = cpython.meth.fastcall | cpython.meth.keywords,
        .doc = "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)",
    },
    method("__dlpack_device__", &deviceMethod, cpython.meth.noargs),
    method("__copy__", &copyMethod, cpython.meth.noargs),
    method("__deepcopy__", &deepcopyMethod, cpython.meth.o),
    method("__reduce__", &reduceMethod, cpython.meth.noargs),
    method("__reduce_ex__", &reduceExMethod, cpython.meth.o),
    method("__getstate__", &getstateMethod, cpython.meth.noargs),
    method("__setstate__", &setstateMethod, cpython.meth.o),
    .{ .name = null, .method = null, .flags = 0, .doc = null },
};

/// A method without a docstring (the protocol's names say what they do).
fn method(name: [*:0]const u8, function: *const anyopaque, flags: c_int) cpython.MethodDef {
    return .{ .name = name, .method = function, .flags = flags, .doc = null };
}

fn dealloc(self: *PyObject) callconv(.c) void {
    const a = cpython.api.?;
    const f = fieldsOf(self);
    if (f.weaklist != null) a.PyObject_ClearWeakRefs(self);
    const template = f.template;
    f.template = 0;
    if (template != 0) dlpack.deleteManaged(template, true);
    const kind: *PyObject = @ptrFromInt(typeOf(self));
    a.PyObject_Free(self);
    a.Py_DecRef(kind); // instances of heap types hold a reference to their type
}

const made_by = "dlpack_ts.DLPackTensor objects are made by dlpack-ts (toPython in JavaScript)";

fn refuseNew(_: *PyObject, _: ?*PyObject, _: ?*PyObject) callconv(.c) ?*PyObject {
    const a = cpython.api.?;
    return cpython.raise(a, a.PyExc_TypeError.*, made_by, .{});
}

fn refuseInit(_: *PyObject, _: ?*PyObject, _: ?*PyObject) callconv(.c) c_int {
    const a = cpython.api.?;
    _ = cpython.raise(a, a.PyExc_TypeError.*, made_by, .{});
    return -1;
}

fn copyMethod(self: *PyObject, _: ?*PyObject) callconv(.c) ?*PyObject {
    cpython.api.?.Py_IncRef(self);
    return self;
}

fn deepcopyMethod(_: *PyObject, _: ?*PyObject) callconv(.c) ?*PyObject {
    const a = cpython.api.?;
    return cpython.raise(a, a.PyExc_TypeError.*, "dlpack_ts.DLPackTensor cannot be deep-copied: " ++
        "it shares JavaScript memory; copy the data with numpy.from_dlpack(t, copy=True)", .{});
}

const not_pickled = "dlpack_ts.DLPackTensor cannot be pickled: it shares JavaScript memory of " ++
    "this process";

fn reduceMethod(_: *PyObject, _: ?*PyObject) callconv(.c) ?*PyObject {
    const a = cpython.api.?;
    return cpython.raise(a, a.PyExc_TypeError.*, not_pickled, .{});
}

fn reduceExMethod(_: *PyObject, _: ?*PyObject) callconv(.c) ?*PyObject {
    const a = cpython.api.?;
    return cpython.raise(a, a.PyExc_TypeError.*, not_pickled, .{});
}

fn getstateMethod(_: *PyObject, _: ?*PyObject) callconv(.c) ?*PyObject {
    const a = cpython.api.?;
    return cpython.raise(a, a.PyExc_TypeError.*, "dlpack_ts.DLPackTensor has no state to save: " ++
        "it shares JavaScript memory of this process", .{});
}

fn setstateMethod(_: *PyObject, _: ?*PyObject) callconv(.c) ?*PyObject {
    const a = cpython.api.?;
    return cpython.raise(a, a.PyExc_TypeError.*, made_by, .{});
}

/// The export's tensor, or null for an object without one.
fn tensorOf(self: *PyObject) ?*const dlpack.Tensor {
    const template = fieldsOf(self).template;
    if (template == 0) return null;
    return &@as(*const dlpack.ManagedTensorVersioned, @ptrFromInt(template)).dl_tensor;
}

fn deviceMethod(self: *PyObject, _: ?*PyObject) callconv(.c) ?*PyObject {
    const a = cpython.api.?;
    const device = (tensorOf(self) orelse return noExport(a)).device;
    return cpython.newTuple(a, &.{
        a.PyLong_FromLongLong(device.device_type),
        a.PyLong_FromLongLong(device.device_id),
    });
}

fn shape(self: *PyObject, _: ?*anyopaque) callconv(.c) ?*PyObject {
    const a = cpython.api.?;
    const t = tensorOf(self) orelse return noExport(a);
    assert(t.ndim >= 0 and t.ndim <= dlpack.rank_max);
    const ndim: usize = @intCast(t.ndim);
    const tuple = a.PyTuple_New(@intCast(ndim)) orelse return null;
    for (0..ndim) |d| {
        const extent = a.PyLong_FromLongLong(t.shape.?[d]) orelse {
            a.Py_DecRef(tuple);
            return null;
        };
        _ = a.PyTuple_SetItem(tuple, @intCast(d), extent);
    }
    return tuple;
}

/// The dtype's name from the library's dtype table, or "code C bits B" for another one.
fn dtypeName(t: *const dlpack.Tensor, out: []u8) []const u8 {
    for (dlpack.dtypes) |known| {
        const same_code = @intFromEnum(known.code) == t.dtype.code;
        if (same_code and known.bits == t.dtype.bits) return known.name;
    }
    return std.fmt.bufPrint(out, "code {d} bits {d}", .{ t.dtype.code, t.dtype.bits }) catch "?";
}

fn dtype(self: *PyObject, _: ?*anyopaque) callconv(.c) ?*PyObject {
    const a = cpython.api.?;
    var buffer: [40]u8 = undefined;
    const name = dtypeName(tensorOf(self) orelse return noExport(a), &buffer);
    return a.PyUnicode_FromStringAndSize(name.ptr, @intCast(name.len));
}

fn repr(self: *PyObject) callconv(.c) ?*PyObject {
    const a = cpython.api.?;
    const t = tensorOf(self) orelse return noExport(a);
    const extents = shape(self, null) orelse return null;
    defer a.Py_DecRef(extents);
    var shape_text: [2048]u8 = undefined;
    var name: [40]u8 = undefined;
    var out: [2200]u8 = undefined;
    const format = "DLPackTensor(shape={s}, dtype='{s}', device=({d}, {d}){s})";
    const text = std.fmt.bufPrint(&out, format, .{
        cpython.reprInto(a, extents, &shape_text),
        dtypeName(t, &name),
        t.device.device_type,
        t.device.device_id,
        if (fieldsOf(self).readonly != 0) ", readonly" else "",
    }) catch return cpython.raise(a, a.PyExc_ValueError.*, "dlpack-ts: repr too long", .{});
    return a.PyUnicode_FromStringAndSize(text.ptr, @intCast(text.len));
}

// ---------------------------------------------------------------------------------------------
// `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)`.

/// Calls of `__dlpack__`, the capsule path (exchange.zig's counters report it with theirs).
pub var dunder_calls = std.atomic.Value(u64).init(0);

/// The keywords as passed (null: not passed, the same as None).
const Request = struct {
    stream: ?*PyObject = null,
    max_version: ?*PyObject = null,
    dl_device: ?*PyObject = null,
    copy: ?*PyObject = null,
};

/// Set by c_cuda.zig: orders a consumer's CUDA stream after the producer (0 ok, -2 for the
/// disallowed stream 0, else a failure status; statuses are mapped at the C boundary).
pub var fence_hook: *const fn (usize, usize) i32 = noFence;

fn noFence(_: usize, _: usize) i32 {
    return -1;
}

fn dlpackMethod(
    self: *PyObject,
    args: [*]const *PyObject,
    nargs: isize,
    kwnames: ?*PyObject,
) callconv(.c) ?*PyObject {
    const a = cpython.api.?;
    _ = dunder_calls.fetchAdd(1, .monotonic);
    var request: Request = .{};
    if (!parseRequest(a, args, nargs, kwnames, &request)) return null;
    const f = fieldsOf(self);
    const template = f.template;
    const device = (tensorOf(self) orelse return noExport(a)).device;
    // numpy's order: dl_device, copy, stream, max_version (the first wrong one is reported).
    if (!checkDevice(a, device, request)) return null;
    var flags: u32 = 0;
    if (request.copy) |copy| {
        const truth = copyTruth(a, copy) orelse return null;
        if (truth) flags |= templates.capsule_flag.copy;
    }
    if (!checkStream(a, template, device, request.stream)) return null;
    const versioned = wantsVersioned(a, request.max_version) orelse return null;
    if (versioned) flags |= templates.capsule_flag.versioned;
    const made = templates.makeCapsule(a, template, f.readonly != 0, flags);
    return if (made == 0) null else @ptrFromInt(made);
}

/// Reads the keyword-only arguments; false with a TypeError set for anything else.
fn parseRequest(
    a: Api,
    args: [*]const *PyObject,
    nargs: isize,
    kwnames: ?*PyObject,
    request: *Request,
) bool {
    if (nargs != 0) {
        const message = "__dlpack__() takes no positional arguments";
        _ = cpython.raise(a, a.PyExc_TypeError.*, message, .{});
        return false;
    }
    const names = kwnames orelse return true;
    const count: usize = @intCast(a.PyTuple_Size(names));
    for (0..count) |i| {
        const name = a.PyTuple_GetItem(names, @intCast(i)).?;
        const slot = keywordSlot(a, name, request) orelse {
            var text: [128]u8 = undefined;
            _ = cpython.raise(a, a.PyExc_TypeError.*, "__dlpack__() got an unexpected keyword " ++
                "argument {s}", .{cpython.reprInto(a, name, &text)});
            return false;
        };
        const value = args[i];
        slot.* = if (value == a._Py_NoneStruct) null else value;
    }
    return true;
}

/// Where the keyword `name` goes. Callers pass interned names nearly always (numpy, torch and
/// Python code do): they match by identity; equal strings that are not interned still match.
fn keywordSlot(a: Api, name: *PyObject, request: *Request) ?*?*PyObject {
    const k = keywords.?;
    const names = [_]*PyObject{ k.stream, k.max_version, k.dl_device, k.copy };
    const targets = [_]*?*PyObject{
        &request.stream,
        &request.max_version,
        &request.dl_device,
        &request.copy,
    };
    for (names, targets) |known, slot| if (name == known) return slot;
    for (names, targets) |known, slot| {
        const equal = a.PyObject_RichCompareBool(name, known, cpython.compare_eq);
        if (equal < 0) a.PyErr_Clear();
        if (equal > 0) return slot;
    }
    return null;
}

/// `copy` as numpy reads it: any truth value, except a string (ValueError, as numpy raises it:
/// "no" would be true). Null with the exception set.
fn copyTruth(a: Api, copy: *PyObject) ?bool {
    if (cpython.hasTypeFlag(a, copy, cpython.tpflags_unicode)) {
        const message = "dlpack-ts: copy must be True, False or None, not a string";
        _ = cpython.raise(a, a.PyExc_ValueError.*, message, .{});
        return null;
    }
    const truth = a.PyObject_IsTrue(copy);
    if (truth < 0) return null;
    return truth > 0;
}

/// The two ints of a `(first, second)` tuple argument, or null with the exception numpy raises
/// set: TypeError for anything but a tuple of two ints, OverflowError past `c_long`.
fn intPair(a: Api, value: *PyObject, comptime what: []const u8) ?[2]c_long {
    const is_tuple = cpython.hasTypeFlag(a, value, cpython.tpflags_tuple);
    if (!is_tuple or a.PyTuple_Size(value) != 2) {
        var text: [128]u8 = undefined;
        _ = cpython.raise(a, a.PyExc_TypeError.*, "dlpack-ts: " ++ what ++ " must be None or a " ++
            "tuple of two ints, got {s}", .{cpython.reprInto(a, value, &text)});
        return null;
    }
    var pair: [2]c_long = undefined;
    for (&pair, 0..) |*item, i| {
        item.* = a.PyLong_AsLong(a.PyTuple_GetItem(value, @intCast(i)).?);
        if (item.* == -1 and a.PyErr_Occurred() != null) return null;
    }
    return pair;
}

/// `dl_device`, when given, must be a tuple of two ints (TypeError, OverflowError past int32, as
/// numpy raises them) naming where the data is (else BufferError: it cannot be exported there).
fn checkDevice(a: Api, device: dlpack.Device, request: Request) bool {
    const wanted = request.dl_device orelse return true;
    const pair = intPair(a, wanted, "dl_device") orelse return false;
    const limit = std.math.maxInt(i32);
    if (pair[0] > limit or pair[0] < -limit - 1 or pair[1] > limit or pair[1] < -limit - 1) {
        _ = cpython.raise(a, a.PyExc_OverflowError.*, "dlpack-ts: dl_device values must fit " ++
            "int32", .{});
        return false;
    }
    if (pair[0] == device.device_type and pair[1] == device.device_id) return true;
    const no_copy = request.copy != null and request.copy.? == a._Py_FalseStruct;
    _ = cpython.raise(a, a.PyExc_BufferError.*, "dlpack-ts: cannot export data on device " ++
        "({d}, {d}) to device ({d}, {d}){s}", .{
        device.device_type,
        device.device_id,
        pair[0],
        pair[1],
        if (no_copy) " without a copy" else "",
    });
    return false;
}

/// CUDA-family data: the consumer's stream waits for the producer (None means the legacy default
/// stream, 1; -1 asks for no synchronization). Host data takes only stream=None: anything else is
/// a RuntimeError, as numpy raises it (an argument error, not data that cannot be exported).
fn checkStream(a: Api, template: usize, device: dlpack.Device, stream: ?*PyObject) bool {
    if (!dlpack.DeviceType.isCudaFamily(device.device_type)) {
        const given = stream orelse return true;
        var text: [128]u8 = undefined;
        _ = cpython.raise(a, a.PyExc_RuntimeError.*, "dlpack-ts: stream must be None for host " ++
            "data, got {s}", .{cpython.reprInto(a, given, &text)});
        return false;
    }
    var word: u64 = 1;
    if (stream) |given| {
        word = a.PyLong_AsUnsignedLongLongMask(given);
        if (a.PyErr_Occurred() != null) return false;
    }
    const status = fence_hook(template, @intCast(word));
    if (status == 0) return true;
    if (status == -2) {
        _ = cpython.raise(a, a.PyExc_BufferError.*, "dlpack-ts: stream 0 is not allowed (use 1 " ++
            "for the legacy default stream)", .{});
    } else {
        _ = cpython.raise(a, a.PyExc_BufferError.*, "dlpack-ts: could not order the consumer " ++
            "stream after the producer (status {d})", .{status});
    }
    return false;
}

/// Whether `max_version`, a tuple of two ints (TypeError otherwise, as numpy raises it; numpy
/// reads only the major, the minor is checked too here), asks for the versioned struct: major >= 1.
/// Null with the exception set.
fn wantsVersioned(a: Api, max_version: ?*PyObject) ?bool {
    const given = max_version orelse return false;
    // numpy passes the same tuple on every call: the last tuple of two ints read is kept (a
    // reference held here, so no other object can take its address) with its answer. A tuple's
    // items cannot change, and ints are immutable: the same object means the same answer.
    if (given == last_version.tuple) return last_version.versioned;
    const pair = intPair(a, given, "max_version") orelse return null;
    const versioned = pair[0] >= 1;
    if (!isExactly(a, given, a.PyTuple_Type)) return versioned;
    // Items that are not ints may answer __index__ differently each time.
    for (0..2) |i| if (!isExactly(a, a.PyTuple_GetItem(given, @intCast(i)).?, a.PyLong_Type)) {
        return versioned;
    };
    a.Py_IncRef(given);
    const old = last_version.tuple;
    last_version = .{ .tuple = given, .versioned = versioned };
    // After the swap: the old tuple's release runs no Python code, but comes last all the same.
    if (old) |o| a.Py_DecRef(o);
    return versioned;
}

fn isExactly(a: Api, object: *PyObject, kind: *PyObject) bool {
    const found = a.PyObject_Type(object).?;
    a.Py_DecRef(found); // the object holds its type
    return found == kind;
}

/// The last exact-tuple `max_version` `__dlpack__` read (a reference held) and its answer.
var last_version: struct { tuple: ?*PyObject = null, versioned: bool = false } = .{};

test "dtypeName: every dtype of the table by its name, others as code and bits" {
    var buffer: [40]u8 = undefined;
    var t = std.mem.zeroes(dlpack.Tensor);
    for (dlpack.dtypes) |known| {
        t.dtype = .{ .code = @intFromEnum(known.code), .bits = known.bits, .lanes = 1 };
        try std.testing.expectEqualStrings(known.name, dtypeName(&t, &buffer));
    }
    t.dtype = .{ .code = 99, .bits = 32, .lanes = 1 };
    try std.testing.expectEqualStrings("code 99 bits 32", dtypeName(&t, &buffer));
}
