//! The DLPack C exchange API (DLPack 1.3's `DLPackExchangeAPI`), both sides of the bridge.
//!
//! Producer: `dlpack_ts.DLPackTensor.__dlpack_c_exchange_api__` is a PyCapsule named
//! "dlpack_exchange_api" over `table` below, so C consumers (tvm-ffi, ...) take JS memory without
//! calling any Python code. Consumer: `fromPython` asks a producer type's table first (torch.Tensor
//! has one), and `toPython(x, py, { as })` hands an export to a type's
//! `managed_tensor_to_py_object_no_sync`.
//!
//! Every function of the table is a C boundary a Python caller can reach through ctypes: pointers
//! arrive as words and are checked before use, nothing panics, failures set a Python exception
//! and return -1. None of them synchronizes streams (the 1.3 header's rule): a consumer orders its
//! work after the producer's `current_work_stream`.

const std = @import("std");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const admit = @import("admit.zig");
const cpython = @import("cpython.zig");
const dlpack = @import("dlpack.zig");
const exports = @import("exports.zig");
const guards = @import("guards.zig");
const mappings = @import("mappings.zig");
const memory = @import("memory.zig");
const owner_mod = @import("owner.zig");
const stats = @import("stats.zig");
const dlpack_tensor = @import("tensor.zig");

const PyObject = cpython.PyObject;
const PyApi = cpython.Api;
const Description = abi.Description;

// The 1.3 layout (dlpack.zig), and this library's table.

pub const SetError = dlpack.SetError;
pub const ManagedTensorToPyObject = dlpack.ManagedTensorToPyObject;
pub const Header = dlpack.ExchangeHeader;
pub const ExchangeApi = dlpack.ExchangeApi;
pub const capsule_name = dlpack.exchange_capsule_name;
pub const attribute = dlpack.exchange_attribute;

/// The table `DLPackTensor` exposes: static, immutable, alive for the whole process.
pub const table = ExchangeApi{
    .header = .{
        .version = .{ .major = dlpack.version_major, .minor = dlpack.version_minor },
        .prev_api = null,
    },
    .managed_tensor_allocator = allocate,
    .managed_tensor_from_py_object_no_sync = managedFromObject,
    .managed_tensor_to_py_object_no_sync = managedToObject,
    .dltensor_from_py_object_no_sync = tensorFromObject,
    .current_work_stream = currentWorkStream,
};

// ---------------------------------------------------------------------------------------------
// Counters: how often each path ran, so tests can tell the exchange path from the `__dlpack__`
// fallback (`dlpack_ts._native_exchange_counts()` returns them in this order).

pub const Counter = enum(u8) {
    /// Calls into this library's table, by function.
    allocator,
    from_py_object,
    to_py_object,
    dltensor_from_py_object,
    current_work_stream,
    /// `fromPython` imports made through a producer's table.
    consumer_imports,
    /// A producer's table declined with BufferError, so `fromPython` took `__dlpack__`.
    consumer_fallbacks,
    /// `toPython(x, py, { as })` objects made by a type's `managed_tensor_to_py_object_no_sync`.
    consumer_to_py_object,
    /// Calls of `DLPackTensor.__dlpack__` (the capsule path, which the table saves consumers).
    dunder_dlpack,
};
pub const counter_count = @typeInfo(Counter).@"enum".fields.len;
var counters = [_]std.atomic.Value(u64){std.atomic.Value(u64).init(0)} ** counter_count;

pub fn count(counter: Counter) void {
    _ = counters[@intFromEnum(counter)].fetchAdd(1, .monotonic);
}

// ---------------------------------------------------------------------------------------------
// State set by `install` (GIL held): interned attribute names.

var attribute_name: ?*PyObject = null;
var module_name: ?*PyObject = null;
var qualname_name: ?*PyObject = null;

/// Sets `cls`'s (DLPackTensor's) `__dlpack_c_exchange_api__`. GIL held.
pub fn install(a: PyApi, cls: *PyObject) error{Raised}!void {
    attribute_name = try interned(a, attribute_name, attribute);
    module_name = try interned(a, module_name, "__module__");
    qualname_name = try interned(a, qualname_name, "__qualname__");
    if (installed_on == cls) return; // the type is made once per process, and so is its table
    const capsule = a.PyCapsule_New(@ptrCast(@constCast(&table)), capsule_name, null) orelse
        return error.Raised;
    defer a.Py_DecRef(capsule);
    // The type is immutable, so `type.__setattr__` refuses; the generic setter writes the type's
    // own dict, as a C extension sets a class attribute of the type it has just made.
    if (a.PyObject_GenericSetAttr(cls, attribute_name.?, capsule) != 0) return error.Raised;
    a.PyType_Modified(cls);
    installed_on = cls;
}

var installed_on: ?*PyObject = null;

fn interned(a: PyApi, kept: ?*PyObject, text: [*:0]const u8) error{Raised}!*PyObject {
    return kept orelse a.PyUnicode_InternFromString(text) orelse error.Raised;
}

// ---------------------------------------------------------------------------------------------
// Errors

/// Sets `kind` with a formatted message (truncated to fit). Returns -1 for the caller to return.
pub fn raise(a: PyApi, kind: *PyObject, comptime format: []const u8, args: anytype) c_int {
    var buffer: [320]u8 = undefined;
    const text = std.fmt.bufPrintZ(&buffer, "dlpack-ts: " ++ format, args) catch blk: {
        buffer[buffer.len - 1] = 0;
        break :blk buffer[0 .. buffer.len - 1 :0];
    };
    a.PyErr_SetString(kind, text.ptr);
    return -1;
}

/// Whether `address` may be dereferenced as a `T` (an out pointer or struct from a caller).
fn usable(comptime T: type, address: usize) bool {
    return abi.plausible(T, address);
}

// ---------------------------------------------------------------------------------------------
// Producer side: the functions of `table`. Each takes the GIL itself (PyGILState is reentrant), so
// a caller that released it (ctypes.CFUNCTYPE) cannot make us touch objects without it.

/// The export template of `object`, which must be a `dlpack_ts.DLPackTensor` without a producer
/// stream, over writable data unless `readonly_ok`; null with an exception set (BufferError for
/// what `__dlpack__` can still export, so consumers that fall back to it do).
fn lendable(a: PyApi, object: usize, readonly_ok: bool) ?dlpack_tensor.Lent {
    if (!usable(usize, object)) {
        _ = raise(
            a,
            a.PyExc_TypeError.*,
            "expected a dlpack_ts.DLPackTensor, got address 0x{x}",
            .{object},
        );
        return null;
    }
    var lent = dlpack_tensor.lentBy(a, @ptrFromInt(object)) orelse return null;
    const template = lent.template;
    const flags = @as(*const dlpack.ManagedTensorVersioned, @ptrFromInt(template)).flags;
    lent.readonly = lent.readonly or flags & dlpack.flag.read_only != 0;
    if (lent.readonly and !readonly_ok) {
        // A DLTensor has no flags: it cannot say read-only, as the legacy struct cannot.
        _ = raise(a, a.PyExc_BufferError.*, "read-only data is not lent as a bare DLTensor (it " ++
            "cannot say read-only); use managed_tensor_from_py_object_no_sync, whose versioned " ++
            "struct carries READ_ONLY", .{});
        return null;
    }
    if (exports.hasProducerStream(template)) {
        // Its data becomes ready on a stream of its own: only `__dlpack__(stream=...)` can order a
        // consumer after it (this API never synchronizes, and our current stream is the default).
        _ = raise(
            a,
            a.PyExc_BufferError.*,
            "this CUDA export has a producer stream; use __dlpack__(stream=...)",
            .{},
        );
        return null;
    }
    return lent;
}

/// `managed_tensor_from_py_object_no_sync`: a new versioned export over the object's memory,
/// READ_ONLY set for read-only data (as `__dlpack__(max_version=(1, 0))` sets it).
fn managedFromObject(object: usize, out: usize) callconv(.c) c_int {
    count(.from_py_object);
    const a = cpython.api orelse return -1;
    const gil = cpython.Gil.take(a);
    defer gil.release();
    if (!usable(usize, out)) {
        return raise(a, a.PyExc_TypeError.*, "out must point to a DLManagedTensorVersioned*", .{});
    }
    const slot: *usize = @ptrFromInt(out);
    slot.* = 0;
    const lent = lendable(a, object, true) orelse return -1;
    const made = exports.clone(lent.template, true) catch
        return raise(a, a.PyExc_MemoryError.*, "out of memory making an export", .{});
    const m: *dlpack.ManagedTensorVersioned = @ptrFromInt(made);
    if (lent.readonly) m.flags |= dlpack.flag.read_only;
    slot.* = made;
    return 0;
}

/// `dltensor_from_py_object_no_sync`: the object's DLTensor, valid while the object lives.
fn tensorFromObject(object: usize, out: usize) callconv(.c) c_int {
    count(.dltensor_from_py_object);
    const a = cpython.api orelse return -1;
    const gil = cpython.Gil.take(a);
    defer gil.release();
    if (!usable(dlpack.Tensor, out)) {
        return raise(a, a.PyExc_TypeError.*, "out must point to a DLTensor", .{});
    }
    const template = (lendable(a, object, false) orelse return -1).template;
    const m: *const dlpack.ManagedTensorVersioned = @ptrFromInt(template);
    const target: *dlpack.Tensor = @ptrFromInt(out);
    target.* = m.dl_tensor;
    return 0;
}

/// `current_work_stream`: this library has no stream of its own, so every device's current stream
/// is NULL (for CUDA the legacy default stream, on which `__dlpack__(stream=None)` also orders).
fn currentWorkStream(device_type: i32, device_id: i32, out: usize) callconv(.c) c_int {
    count(.current_work_stream);
    _ = device_type;
    _ = device_id;
    if (!usable(usize, out)) {
        const a = cpython.api orelse return -1;
        const gil = cpython.Gil.take(a);
        defer gil.release();
        return raise(a, a.PyExc_TypeError.*, "out_current_stream must point to a void*", .{});
    }
    const slot: *usize = @ptrFromInt(out);
    slot.* = 0;
    return 0;
}

/// `managed_tensor_to_py_object_no_sync`: a DLPackTensor over a producer's tensor, which it takes
/// over (validated and claimed like every import: one of this library's exports is taken once,
/// whichever way it comes back; a refused one is released at once, as ownership passed).
fn managedToObject(tensor: usize, out: usize) callconv(.c) c_int {
    count(.to_py_object);
    const a = cpython.api orelse return -1;
    const gil = cpython.Gil.take(a);
    defer gil.release();
    if (!usable(usize, out)) {
        return raise(a, a.PyExc_TypeError.*, "out_py_object must point to a PyObject*", .{});
    }
    const slot: *usize = @ptrFromInt(out);
    slot.* = 0;
    if (!usable(dlpack.ManagedTensorVersioned, tensor)) {
        return raise(
            a,
            a.PyExc_TypeError.*,
            "tensor must point to a DLManagedTensorVersioned, got 0x{x}",
            .{tensor},
        );
    }
    var d: Description = undefined;
    const created = takeOver(tensor, false, &d) orelse {
        const reported = std.enums.fromInt(abi.Status, d.status) orelse .invalid_argument;
        if (reported == .out_of_memory) {
            return raise(a, a.PyExc_MemoryError.*, "out of memory importing the tensor", .{});
        }
        const reason = std.enums.tagName(abi.Status, reported) orelse "invalid";
        return raise(a, a.PyExc_BufferError.*, "the tensor was refused ({s})", .{reason});
    };
    const template = reexport(&d, created) catch {
        owner_mod.release(created); // calls the producer's deleter
        return raise(a, a.PyExc_MemoryError.*, "out of memory exporting the tensor", .{});
    };
    const made = dlpack_tensor.make(template, d.flags & dlpack.flag.read_only != 0);
    if (made == 0) {
        dlpack.deleteManaged(template, true); // the exception stays set
        return -1;
    }
    slot.* = made;
    return 0;
}

/// A versioned export of ours over what `d` describes, adopting `owner` (when out of memory the
/// owner is still the caller's). Extents and strides come from the description, read once from
/// the producer, never from its arrays again.
fn reexport(d: *const Description, owner: *owner_mod.Owner) error{OutOfMemory}!usize {
    assert(d.status == @intFromEnum(abi.Status.ok));
    assert(d.ndim >= 0 and d.ndim <= dlpack.rank_max);
    const ndim: usize = @intCast(d.ndim);
    var shape: [dlpack.rank_max]i64 = undefined;
    var strides: [dlpack.rank_max]i64 = undefined;
    for (0..ndim) |i| {
        shape[i] = @intFromFloat(d.shape[i]);
        strides[i] = @intFromFloat(d.strides[i]);
    }
    const address = @as(usize, d.address_lo) | (@as(usize, d.address_hi) << 32);
    return exports.create(.{
        .data = address,
        .device = .{ .device_type = d.device_type, .device_id = d.device_id },
        .dtype = .{
            .code = @intCast(d.dtype_code),
            .bits = @intCast(d.dtype_bits),
            .lanes = @intCast(d.dtype_lanes),
        },
        .shape = shape[0..ndim],
        .strides = strides[0..ndim],
        // Each clone of the template is consumed separately: not a sole-owner copy any more.
        .flags = d.flags & (dlpack.flag.read_only | dlpack.flag.is_subbyte_type_padded),
        .versioned = true,
        .adopt_owner = true,
        .owner = owner,
    });
}

// ---------------------------------------------------------------------------------------------
// The allocator: zeroed host memory (never stale heap bytes that would reach JS) in a versioned
// export, C-contiguous. Errors go through SetError when given, else as a Python exception.

/// Why the allocator refused: the exception type (its name goes to SetError, the same type is
/// raised without one) and the message.
const Refusal = struct {
    kind: Kind = .value_error,
    message: [*:0]const u8 = "",

    const Kind = enum {
        value_error,
        buffer_error,
        memory_error,

        fn name(kind: Kind) [*:0]const u8 {
            return switch (kind) {
                .value_error => "ValueError",
                .buffer_error => "BufferError",
                .memory_error => "MemoryError",
            };
        }

        fn exception(kind: Kind, a: PyApi) *PyObject {
            return switch (kind) {
                .value_error => a.PyExc_ValueError.*,
                .buffer_error => a.PyExc_BufferError.*,
                .memory_error => a.PyExc_MemoryError.*,
            };
        }
    };

    fn set(self: *Refusal, kind: Kind, message: [*:0]const u8) error{Refused} {
        self.* = .{ .kind = kind, .message = message };
        return error.Refused;
    }
};

fn allocate(
    prototype: usize,
    out: usize,
    error_ctx: usize,
    set_error: ?SetError,
) callconv(.c) c_int {
    count(.allocator);
    var refusal: Refusal = .{};
    const made = allocateChecked(prototype, out, &refusal) catch {
        if (set_error) |report| {
            report(error_ctx, refusal.kind.name(), refusal.message);
            return -1;
        }
        const a = cpython.api orelse return -1;
        const gil = cpython.Gil.take(a);
        defer gil.release();
        a.PyErr_SetString(refusal.kind.exception(a), refusal.message);
        return -1;
    };
    const slot: *usize = @ptrFromInt(out);
    slot.* = made;
    return 0;
}

fn allocateChecked(prototype: usize, out: usize, refusal: *Refusal) error{Refused}!usize {
    if (!usable(usize, out)) {
        return refusal.set(
            .value_error,
            "dlpack-ts: out must point to a DLManagedTensorVersioned*",
        );
    }
    @as(*usize, @ptrFromInt(out)).* = 0;
    if (!usable(dlpack.Tensor, prototype)) {
        return refusal.set(.value_error, "dlpack-ts: prototype must point to a DLTensor");
    }
    const p: *const dlpack.Tensor = @ptrFromInt(prototype);
    if (p.device.device_type != @intFromEnum(dlpack.DeviceType.cpu)) {
        return refusal.set(
            .buffer_error,
            "dlpack-ts: the allocator makes host (kDLCPU) memory only",
        );
    }
    const ndim_raw = p.ndim;
    if (ndim_raw < 0 or ndim_raw > dlpack.rank_max) {
        return refusal.set(.value_error, "dlpack-ts: ndim must be in 0..64");
    }
    const dtype = p.dtype;
    if (!dtype.isSupported() or dtype.bits % 8 != 0) {
        return refusal.set(
            .value_error,
            "dlpack-ts: unsupported dtype (byte-sized DLPack 1.3 types, lanes 1)",
        );
    }
    const ndim: usize = @intCast(ndim_raw);
    if (ndim > 0 and (p.shape == null or !usable(i64, @intFromPtr(p.shape.?)))) {
        return refusal.set(.value_error, "dlpack-ts: prototype.shape must point to ndim extents");
    }
    return allocateShaped(p, ndim, refusal);
}

/// The allocator's export, once `prototype`'s device, rank, dtype and shape pointer passed.
fn allocateShaped(p: *const dlpack.Tensor, ndim: usize, refusal: *Refusal) error{Refused}!usize {
    assert(ndim <= dlpack.rank_max);
    const dtype = p.dtype;
    var shape: [dlpack.rank_max]i64 = undefined;
    var strides: [dlpack.rank_max]i64 = undefined;
    var elements: u64 = 1;
    for (0..ndim) |d| {
        const extent = p.shape.?[d]; // read once
        if (extent < 0 or extent > abi.exact_max) {
            return refusal.set(.value_error, "dlpack-ts: extents must be in 0..2^53");
        }
        shape[d] = extent;
        elements = std.math.mul(u64, elements, @intCast(extent)) catch
            return refusal.set(.value_error, "dlpack-ts: the tensor is too large");
    }
    const bytes = std.math.mul(u64, elements, dtype.bits / 8) catch abi.exact_max + 1;
    if (bytes > abi.exact_max) {
        return refusal.set(.value_error, "dlpack-ts: the tensor is too large");
    }
    var step: i64 = 1;
    var d = ndim;
    while (d > 0) {
        d -= 1;
        strides[d] = step;
        step *|= @max(shape[d], 1);
    }
    const created = owner_mod.createNative(@intCast(bytes), 64, true) catch
        return refusal.set(.memory_error, "dlpack-ts: out of memory");
    return exports.create(.{
        .data = created.payload,
        .device = .{ .device_type = @intFromEnum(dlpack.DeviceType.cpu), .device_id = 0 },
        .dtype = dtype,
        .shape = shape[0..ndim],
        .strides = strides[0..ndim],
        .flags = 0,
        .versioned = true,
        .adopt_owner = true,
        .owner = created,
    }) catch {
        owner_mod.release(created);
        return refusal.set(.memory_error, "dlpack-ts: out of memory");
    };
}

// ---------------------------------------------------------------------------------------------
// Consumer side: the tables of producer types, cached per type.

const name_bytes_max = 128;
const cache_entries_max = 32;

/// A producer type, its table (null: none, one this library cannot use, or one that does not
/// certainly belong to the type), what its framework may hold that DLPack cannot say
/// (guards.zig), and its name.
pub const Entry = struct {
    kind: usize,
    api: ?*const ExchangeApi,
    framework: guards.Framework,
    name: [name_bytes_max]u8,
    name_len: usize,
};

/// Types seen so far. Each holds a reference to its type, so no other type can be allocated at a
/// cached address. Beyond `cache_entries_max` types, tables are looked up on every call. An entry
/// keeps the table it found: replacing the type's attribute later changes nothing.
var entries: [cache_entries_max]Entry = undefined;
var entry_count: usize = 0;

/// The entry of `kind` (a type), from the cache or looked up into `spare`. GIL held.
pub fn entryFor(a: PyApi, kind: *PyObject, spare: *Entry) *const Entry {
    const address = @intFromPtr(kind);
    for (entries[0..entry_count]) |*e| if (e.kind == address) return e;
    // Naming may run Python code (a metaclass' __getattr__), which may let another thread in:
    // fill a local entry first, and append only after no more Python code runs.
    spare.* = .{
        .kind = address,
        .api = discover(a, kind),
        .framework = guards.frameworkOf(a, kind),
        .name = undefined,
        .name_len = 0,
    };
    spare.name_len = typeName(a, kind, &spare.name);
    for (entries[0..entry_count]) |*e| if (e.kind == address) return e;
    if (entry_count == cache_entries_max) return spare;
    a.Py_IncRef(kind);
    entries[entry_count] = spare.*;
    entry_count += 1;
    return &entries[entry_count - 1];
}

/// Steps followed through a type's bases and `prev_api` chains before giving up (real chains end
/// within a few).
const chain_max = 64;

/// `kind.__dlpack_c_exchange_api__` as a table of major version 1 (walking `prev_api` from a
/// newer major) when it certainly belongs to `kind` (`belongs`), or null. The attribute is found
/// along the real MRO (`_PyType_Lookup`), so no metaclass or descriptor answers for the type and
/// no Python code runs. Only the 1.3 PyCapsule form is trusted: the 1.2 integer form could be set
/// to any number by plain Python code.
fn discover(a: PyApi, kind: *PyObject) ?*const ExchangeApi {
    const lookup = cpython.type_lookup orelse return null;
    const capsule = lookup(kind, attribute_name.?) orelse return null; // borrowed
    if (a.PyCapsule_IsValid(capsule, capsule_name) == 0) return null;
    var address = @intFromPtr(a.PyCapsule_GetPointer(capsule, capsule_name));
    const found = for (0..8) |_| {
        if (!usable(Header, address)) return null;
        const header: *const Header = @ptrFromInt(address);
        if (header.version.major == dlpack.version_major) {
            if (!usable(ExchangeApi, address)) return null;
            break @as(*const ExchangeApi, @ptrFromInt(address));
        }
        address = @intFromPtr(header.prev_api);
    } else return null;
    const carrier = carrierOf(a, kind, capsule) orelse return null;
    return if (belongs(a, carrier, found)) found else null;
}

/// The class of `kind`'s MRO whose own dict holds `capsule`: while a base of the current class
/// still finds the same object, the attribute is not the current class's own (C3 keeps every
/// base's MRO in order within the class's, so some base finds it), and so step to that base.
fn carrierOf(a: PyApi, kind: *PyObject, capsule: *PyObject) ?*PyObject {
    const lookup = cpython.type_lookup.?;
    var current = kind;
    for (0..chain_max) |_| {
        const raw = a.PyType_GetSlot(current, cpython.slot.tp_bases) orelse return current;
        const bases: *PyObject = @ptrCast(raw);
        const count_bases = a.PyTuple_Size(bases);
        var next: ?*PyObject = null;
        for (0..@intCast(@max(count_bases, 0))) |i| {
            const base = a.PyTuple_GetItem(bases, @intCast(i)) orelse break;
            if (lookup(base, attribute_name.?) == capsule) {
                next = base;
                break;
            }
        }
        current = next orelse return current;
    }
    return null;
}

/// Whether a table is certain to belong to instances of `carrier`, the class holding it. A table's
/// functions take the object as it is (tvm-ffi's cast it unchecked), so another type's genuine
/// capsule copied onto a class would run them on the wrong layout:
/// - an immutable carrier (a static type, or one made in C with Py_TPFLAGS_IMMUTABLETYPE) got its
///   attribute from C code: Python code cannot set it;
/// - a mutable carrier got it from Python (torch.Tensor's class body, paddle's patches, a copy):
///   trusted only when every function of the table lives in the binary that implements the
///   carrier's native layout, the tp_dealloc of the carrier or of a type on its tp_base chain
///   (torch.Tensor's torch._C.TensorBase, paddle.Tensor itself). A plain class (its layout is
///   `object`'s, code of libpython) or a subclass of another framework's type never passes.
fn belongs(a: PyApi, carrier: *PyObject, found: *const ExchangeApi) bool {
    const flags = a.PyType_GetFlags(carrier);
    if (flags & cpython.tpflags_heap == 0 or flags & cpython.tpflags_immutable != 0) return true;
    const binary = tableBinary(found) orelse return false;
    var current: ?*PyObject = carrier;
    for (0..chain_max) |_| {
        const kind = current orelse return false;
        if (a.PyType_GetSlot(kind, cpython.slot.tp_dealloc)) |dealloc| {
            if (mappings.binaryOf(@intFromPtr(dealloc)) == binary) return true;
        }
        current = @ptrCast(a.PyType_GetSlot(kind, cpython.slot.tp_base));
    }
    return false;
}

/// The load address of the one binary holding every function of `t`; null when they are spread
/// over several, or one lies in none (code made at run time, as ctypes callbacks are).
fn tableBinary(t: *const ExchangeApi) ?usize {
    const functions = [_]?*const anyopaque{
        @ptrCast(t.managed_tensor_allocator),
        @ptrCast(t.managed_tensor_from_py_object_no_sync),
        @ptrCast(t.managed_tensor_to_py_object_no_sync),
        @ptrCast(t.dltensor_from_py_object_no_sync),
        @ptrCast(t.current_work_stream),
    };
    var binary: ?usize = null;
    for (functions) |function| {
        const found = mappings.binaryOf(@intFromPtr(function orelse continue)) orelse return null;
        if (binary) |b| if (b != found) return null;
        binary = found;
    }
    return binary;
}

/// "module.qualname" of a type ("qualname" for builtins), as `view.producer` shows it.
fn typeName(a: PyApi, kind: *PyObject, out: *[name_bytes_max]u8) usize {
    var written: usize = 0;
    if (a.PyObject_GetAttr(kind, module_name.?)) |module| {
        defer a.Py_DecRef(module);
        var len: isize = 0;
        if (a.PyUnicode_AsUTF8AndSize(module, &len)) |bytes| {
            const text = bytes[0..@intCast(len)];
            if (!std.mem.eql(u8, text, "builtins")) {
                written += copyText(out[written..], text);
                written += copyText(out[written..], ".");
            }
        }
    }
    if (a.PyObject_GetAttr(kind, qualname_name.?)) |qualname| {
        defer a.Py_DecRef(qualname);
        var len: isize = 0;
        if (a.PyUnicode_AsUTF8AndSize(qualname, &len)) |bytes| written += copyText(
            out[written..],
            bytes[0..@intCast(len)],
        );
    }
    a.PyErr_Clear(); // a name that is not a str is left out, not reported
    return written;
}

fn copyText(out: []u8, text: []const u8) usize {
    const n = @min(out.len, text.len);
    @memcpy(out[0..n], text[0..n]);
    return n;
}

/// Writes the entry's type name into `name` (NUL-terminated, truncated).
pub fn writeName(entry: *const Entry, name: []u8) void {
    assert(name.len > 0);
    const n = @min(entry.name_len, name.len - 1);
    @memcpy(name[0..n], entry.name[0..n]);
    name[n] = 0;
}

pub const ImportError = error{
    /// A call into Python raised (or the producer failed): the exception is pending.
    Raised,
    /// The tensor was refused and released: `out.status` says why.
    Refused,
};

/// The cache entry of `object`'s type (its table, its name). GIL held.
pub fn entryOf(a: PyApi, object: *PyObject, spare: *Entry) *const Entry {
    const kind = a.PyObject_Type(object).?;
    a.Py_DecRef(kind); // the object holds its type
    return entryFor(a, kind, spare);
}

/// `fromPython` through the producer type's table (`entry`, from `entryOf`). False when the type
/// has none or the producer declined with BufferError (the caller then takes `__dlpack__`). GIL
/// held.
pub fn importFrom(
    a: PyApi,
    entry: *const Entry,
    object: *PyObject,
    strict_offset: bool,
    out: *Description,
) ImportError!bool {
    const api_table = entry.api orelse return false;
    const take = api_table.managed_tensor_from_py_object_no_sync orelse return false;
    var managed: usize = 0;
    if (take(@intFromPtr(object), @intFromPtr(&managed)) != 0) {
        if (a.PyErr_Occurred() != null and a.PyErr_ExceptionMatches(a.PyExc_BufferError.*) != 0) {
            a.PyErr_Clear();
            count(.consumer_fallbacks);
            return false;
        }
        return error.Raised;
    }
    try adopt(a, api_table, managed, strict_offset, out);
    return true;
}

/// Validates and owns what a producer's table returned, exactly as `dlpk_import` does: a refused
/// tensor is released at once (there is no capsule whose destructor would).
fn adopt(
    a: PyApi,
    api_table: *const ExchangeApi,
    managed: usize,
    strict_offset: bool,
    out: *Description,
) ImportError!void {
    if (managed == 0) {
        const message = "the producer's managed_tensor_from_py_object_no_sync returned no tensor";
        _ = raise(a, a.PyExc_BufferError.*, message, .{});
        return error.Raised;
    }
    const created = takeOver(managed, strict_offset, out) orelse return error.Refused;
    count(.consumer_imports);
    return recordStream(api_table, created, out);
}

/// The steps of admit.zig for a versioned struct whose ownership passed to this library: the
/// owner that will call its deleter, or null with `out` saying why it was refused (then released
/// once, where that is safe; never one of this library's exports that another import took).
fn takeOver(managed: usize, strict_offset: bool, out: *Description) ?*owner_mod.Owner {
    const options: admit.Options = .{ .versioned = true, .strict_offset = strict_offset };
    if (admit.sequence(managed, options, out, .release) != .ok) return null;
    const created = @as(usize, out.owner_hi) << 32 | out.owner_lo;
    return @ptrFromInt(created);
}

/// For CUDA-family data, the producer's current work stream (the data is ready in its order);
/// the JS side records it as the view's producer stream.
fn recordStream(
    api_table: *const ExchangeApi,
    created: *owner_mod.Owner,
    out: *Description,
) ImportError!void {
    out.detail_limit = abi.exchange_mark;
    out.detail_found = 0;
    if (!dlpack.DeviceType.isCudaFamily(out.device_type)) return;
    const query = api_table.current_work_stream orelse return;
    var stream: usize = 0;
    if (query(out.device_type, out.device_id, @intFromPtr(&stream)) != 0) {
        owner_mod.release(created);
        return error.Raised;
    }
    out.detail_found = @bitCast(@as(u64, stream));
}

// ---------------------------------------------------------------------------------------------
// `dlpack_ts._native_exchange_counts()`: the counters as a tuple of ints, in `Counter` order.

pub fn countsTuple(a: PyApi) ?*PyObject {
    const tuple = a.PyTuple_New(counter_count) orelse return null;
    for (0..counter_count) |i| {
        const counted = if (i == @intFromEnum(Counter.dunder_dlpack))
            dlpack_tensor.dunder_calls.load(.monotonic)
        else
            counters[i].load(.monotonic);
        const value = a.PyLong_FromUnsignedLongLong(counted) orelse {
            a.Py_DecRef(tuple);
            return null;
        };
        _ = a.PyTuple_SetItem(tuple, @intCast(i), value);
    }
    return tuple;
}

// ---------------------------------------------------------------------------------------------
// Tests

const testing = std.testing;

test "the table follows the 1.3 header, field by field" {
    try testing.expectEqual(@as(u32, 1), table.header.version.major);
    try testing.expectEqual(@as(u32, 3), table.header.version.minor);
    try testing.expect(table.header.prev_api == null);
    try testing.expect(table.managed_tensor_allocator.? == &allocate);
    try testing.expect(table.managed_tensor_from_py_object_no_sync.? == &managedFromObject);
    try testing.expect(table.managed_tensor_to_py_object_no_sync.? == &managedToObject);
    try testing.expect(table.dltensor_from_py_object_no_sync.? == &tensorFromObject);
    try testing.expect(table.current_work_stream.? == &currentWorkStream);
    // Read back as the raw words a C consumer sees.
    const words: *const [7]usize = @ptrCast(&table);
    try testing.expectEqual(@as(usize, 1) | (@as(usize, 3) << 32), words[0]);
    try testing.expectEqual(@as(usize, 0), words[1]);
    try testing.expectEqual(@intFromPtr(&allocate), words[2]);
    try testing.expectEqual(@intFromPtr(&managedFromObject), words[3]);
    try testing.expectEqual(@intFromPtr(&managedToObject), words[4]);
    try testing.expectEqual(@intFromPtr(&tensorFromObject), words[5]);
    try testing.expectEqual(@intFromPtr(&currentWorkStream), words[6]);
}

const TestError = struct {
    var calls: usize = 0;
    var kind: [32]u8 = undefined;
    fn set(ctx: usize, k: ?[*:0]const u8, message: ?[*:0]const u8) callconv(.c) void {
        assert(ctx == 0xC0FFEE);
        assert(message != null);
        calls += 1;
        const text = std.mem.span(k.?);
        @memcpy(kind[0..text.len], text);
        kind[text.len] = 0;
    }
    fn expectKind(expected: []const u8) !void {
        try testing.expectEqualStrings(expected, std.mem.sliceTo(&kind, 0));
    }
};

test "the allocator makes zeroed C-contiguous host exports that release their memory" {
    const allocations = stats.get(.allocations);
    const exported = stats.get(.exports);
    const shape = [_]i64{ 2, 3, 4 };
    var prototype = dlpack.Tensor{
        .data = null,
        .device = .{ .device_type = 1, .device_id = 0 },
        .ndim = 3,
        .dtype = .{ .code = 2, .bits = 32, .lanes = 1 },
        .shape = &shape,
        .strides = null,
        .byte_offset = 0,
    };
    var out: usize = 0;
    try testing.expectEqual(
        @as(c_int, 0),
        allocate(@intFromPtr(&prototype), @intFromPtr(&out), 0xC0FFEE, TestError.set),
    );
    const m: *dlpack.ManagedTensorVersioned = @ptrFromInt(out);
    try testing.expectEqual(@as(u32, 1), m.version.major);
    try testing.expectEqual(@as(u64, 0), m.flags);
    try testing.expectEqual(@as(i32, 3), m.dl_tensor.ndim);
    try testing.expectEqual(@as(i64, 12), m.dl_tensor.strides.?[0]);
    try testing.expectEqual(@as(i64, 4), m.dl_tensor.strides.?[1]);
    try testing.expectEqual(@as(i64, 1), m.dl_tensor.strides.?[2]);
    const data: [*]const f32 = @ptrCast(@alignCast(m.dl_tensor.data.?));
    for (0..24) |i| try testing.expectEqual(@as(f32, 0), data[i]);
    try testing.expectEqual(allocations + 1, stats.get(.allocations));
    m.deleter.?(m);
    try testing.expectEqual(allocations, stats.get(.allocations));
    try testing.expectEqual(exported, stats.get(.exports));
}

test "the allocator refuses what it cannot make through SetError, writing NULL" {
    const calls = TestError.calls;
    var shape = [_]i64{ 4, 4 };
    var prototype = dlpack.Tensor{
        .data = null,
        .device = .{ .device_type = 2, .device_id = 0 },
        .ndim = 2,
        .dtype = .{ .code = 2, .bits = 32, .lanes = 1 },
        .shape = &shape,
        .strides = null,
        .byte_offset = 0,
    };
    var out: usize = 0xdead;
    try testing.expectEqual(
        @as(c_int, -1),
        allocate(@intFromPtr(&prototype), @intFromPtr(&out), 0xC0FFEE, TestError.set),
    );
    try TestError.expectKind("BufferError"); // CUDA
    try testing.expectEqual(@as(usize, 0), out);
    prototype.device.device_type = 1;
    prototype.dtype = .{ .code = 17, .bits = 4, .lanes = 1 }; // sub-byte
    try testing.expectEqual(
        @as(c_int, -1),
        allocate(@intFromPtr(&prototype), @intFromPtr(&out), 0xC0FFEE, TestError.set),
    );
    try TestError.expectKind("ValueError");
    prototype.dtype = .{ .code = 2, .bits = 32, .lanes = 1 };
    shape[1] = -1;
    try testing.expectEqual(
        @as(c_int, -1),
        allocate(@intFromPtr(&prototype), @intFromPtr(&out), 0xC0FFEE, TestError.set),
    );
    shape = .{ 1 << 40, 1 << 40 };
    try testing.expectEqual(
        @as(c_int, -1),
        allocate(@intFromPtr(&prototype), @intFromPtr(&out), 0xC0FFEE, TestError.set),
    );
    prototype.ndim = 65;
    try testing.expectEqual(
        @as(c_int, -1),
        allocate(@intFromPtr(&prototype), @intFromPtr(&out), 0xC0FFEE, TestError.set),
    );
    prototype.ndim = 2;
    prototype.shape = null;
    try testing.expectEqual(
        @as(c_int, -1),
        allocate(@intFromPtr(&prototype), @intFromPtr(&out), 0xC0FFEE, TestError.set),
    );
    try testing.expectEqual(
        @as(c_int, -1),
        allocate(0, @intFromPtr(&out), 0xC0FFEE, TestError.set),
    );
    try testing.expectEqual(
        @as(c_int, -1),
        allocate(@intFromPtr(&prototype), 0, 0xC0FFEE, TestError.set),
    );
    try testing.expectEqual(
        @as(c_int, -1),
        allocate(@intFromPtr(&prototype), 8, 0xC0FFEE, TestError.set),
    );
    try testing.expectEqual(calls + 9, TestError.calls);
}

test "current_work_stream is NULL for every device" {
    var stream: usize = 0xdead;
    try testing.expectEqual(@as(c_int, 0), currentWorkStream(2, 0, @intFromPtr(&stream)));
    try testing.expectEqual(@as(usize, 0), stream);
    stream = 0xdead;
    try testing.expectEqual(@as(c_int, 0), currentWorkStream(1, 0, @intFromPtr(&stream)));
    try testing.expectEqual(@as(usize, 0), stream);
}

/// An export of 16 bytes of malloc'ed memory behind a native owner.
pub fn testExport() !usize {
    const o = try owner_mod.createNative(16, 16, false);
    const bytes = o.payload;
    const shape = [_]i64{4};
    const strides = [_]i64{1};
    return exports.create(.{
        .data = bytes,
        .device = .{ .device_type = 1, .device_id = 0 },
        .dtype = .{ .code = 2, .bits = 32, .lanes = 1 },
        .shape = &shape,
        .strides = &strides,
        .flags = 0,
        .versioned = true,
        .adopt_owner = true,
        .owner = o,
    });
}

test "one of this library's exports is taken over once: a second hand-over is refused, not freed" {
    const exported = stats.get(.exports);
    const template = try testExport();
    var d: Description = undefined;
    const created = takeOver(template, false, &d) orelse return error.TestUnexpectedResult;
    var again: Description = undefined;
    try testing.expect(takeOver(template, false, &again) == null);
    try testing.expectEqual(@as(i32, @intFromEnum(abi.Status.already_imported)), again.status);
    try testing.expectEqual(exported + 1, stats.get(.exports)); // still held by the first owner
    owner_mod.release(created);
    try testing.expectEqual(exported, stats.get(.exports));
}

test "a table belongs to one binary only when every function lies in it" {
    const ours = tableBinary(&table) orelse return error.SkipZigTest; // no dladdr here
    try testing.expectEqual(ours, mappings.binaryOf(@intFromPtr(&allocate)).?);
    // A function made at run time (as ctypes callbacks are) lies in no binary.
    const heap = try std.testing.allocator.create(usize);
    defer std.testing.allocator.destroy(heap);
    var made = table;
    made.current_work_stream = @ptrCast(heap);
    try testing.expect(tableBinary(&made) == null);
    // A table of NULLs but one function is that function's binary.
    const lone = ExchangeApi{
        .header = table.header,
        .managed_tensor_allocator = null,
        .managed_tensor_from_py_object_no_sync = managedFromObject,
        .managed_tensor_to_py_object_no_sync = null,
        .dltensor_from_py_object_no_sync = null,
        .current_work_stream = null,
    };
    try testing.expectEqual(ours, tableBinary(&lone).?);
}

test "the allocator's refusals name the exception they raise without SetError" {
    try testing.expectEqualStrings("ValueError", std.mem.span(Refusal.Kind.value_error.name()));
    try testing.expectEqualStrings("BufferError", std.mem.span(Refusal.Kind.buffer_error.name()));
    try testing.expectEqualStrings("MemoryError", std.mem.span(Refusal.Kind.memory_error.name()));
}
