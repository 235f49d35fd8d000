//! The C ABI of libdlpack: the only symbols the TS side binds (ffi/symbols.ts lists the same ones).
//! Every function returns a status code or writes into caller-owned memory; nothing here may panic
//! or unwind into the host. This is where arguments are checked and where the error unions of the
//! modules below become the ABI's statuses (abi.zig).
//!
//! The modules import only downward, in layers (tools/tidy.zig checks there is no import cycle):
//! - facts: dlpack.zig (the DLPack header), abi.zig (this library's ABI), stats.zig;
//! - plumbing: mappings.zig, memory.zig, cuda.zig, cpython.zig;
//! - records: owner.zig, exports.zig;
//! - imports: describe.zig (validate), verify.zig (device claims), admit.zig (the sequence);
//! - Python: templates.zig, tensor.zig, guards.zig, exchange.zig, python.zig;
//! - this file, the entry.

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const abi = @import("abi.zig");
const admit = @import("admit.zig");
const cpython = @import("cpython.zig");
const cuda = @import("cuda.zig");
const describe = @import("describe.zig");
const exchange = @import("exchange.zig");
const exports = @import("exports.zig");
const journal = @import("journal.zig");
const mappings = @import("mappings.zig");
const memory = @import("memory.zig");
const owner = @import("owner.zig");
const python = @import("python.zig");
const stats = @import("stats.zig");
const templates = @import("templates.zig");
const tensor = @import("tensor.zig");
const verify = @import("verify.zig");

/// The facts module of the DLPack header (the fuzzer's model reads its dtype table).
pub const dlpack = @import("dlpack.zig");

const Description = abi.Description;
const Status = abi.Status;
const import_option = abi.import_option;
const export_option = abi.export_option;

export fn dlpk_abi_version() u32 {
    return abi.version;
}

/// Makes this library impossible to unload. Foreign code keeps pointers into it for as long as it
/// likes (deleters of exports, capsule destructors, Python builtins), while a runtime may dlclose
/// its handle when the isolate that opened it goes away (Deno does, between test files). Called
/// by the loader right after the ABI check; returns 0, or -1 when the platform offers no way.
export fn dlpk_retain_library() i32 {
    if (builtin.os.tag == .windows) return -1;
    var info: mappings.DlInfo = undefined;
    if (mappings.dladdr(@ptrCast(&dlpk_retain_library), &info) == 0) return -1;
    const path = info.fname orelse return -1;
    // RTLD_NODELETE on an already-loaded object: one more reference, and no unloading ever.
    _ = std.c.dlopen(path, .{ .NOW = true, .NODELETE = true, .NOLOAD = true }) orelse return -1;
    return 0;
}

export fn dlpk_description_size() u32 {
    return @sizeOf(Description);
}

fn descriptionAt(address: f64) ?*Description {
    const out = abi.addressFromF64(address) orelse return null;
    if (out == 0 or out % @alignOf(Description) != 0) return null;
    return @ptrFromInt(out);
}

const invalid = @intFromEnum(Status.invalid_argument);

fn code(status: Status) i32 {
    return @intFromEnum(status);
}

/// Whether an address could be a managed tensor (aligned, outside the first page, in user space).
fn isStruct(address: usize) bool {
    return abi.plausible(dlpack.ManagedTensorVersioned, address);
}

/// Validates a managed tensor and, when it is accepted, makes an owner holding it: validate ->
/// check the device claim -> take this library's own export -> record the owner (admit.zig). A
/// refused tensor goes back to its producer (deleter called once) before this returns, unless
/// the caller asked to keep it, or its deleter cannot be called safely (`admit.releaseRefused`).
export fn dlpk_import(managed_address: f64, options: u32, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    const managed = abi.addressFromF64(managed_address) orelse return refuseInexact(out);
    return importAt(managed, options, out);
}

/// The refusal of an address no f64 carries exactly (negative, fractional, 2^53 and up): it cannot
/// be a struct, and nothing is read or released.
fn refuseInexact(out: *Description) i32 {
    return code(out.refuse(.bad_address, abi.detail_dim.none, 0, 0));
}

fn importAt(managed: usize, options: u32, out: *Description) i32 {
    const versioned = options & import_option.versioned != 0;
    const keep = options & import_option.keep_on_refusal != 0;
    var own: ?exports.Own = null;
    // Inlined, like `record` below: separate frames cost the keyed imports 3-4 ns.
    var status = @call(.always_inline, admit.inspect, .{ managed, admit.Options{
        .versioned = versioned,
        .strict_offset = options & import_option.strict_offset != 0,
    }, out, &own });
    var claimed = false;
    if (status == .ok) {
        if (own) |found| {
            status = admit.take(managed, found, out);
            claimed = status == .ok;
        }
    }
    if (status == .ok) {
        _ = @call(.always_inline, admit.record, .{ managed, versioned, out }) catch {
            status = .out_of_memory;
        };
        if (status == .ok) return 0;
    }
    if (keep) {
        // The caller keeps what was refused: an export of this library it took goes back to live.
        if (claimed) exports.unclaim(managed);
        return code(status);
    }
    return code(admit.releaseRefused(managed, versioned, status, out, claimed));
}

/// Describes a managed tensor without taking it: no owner, no deleter call, ever.
export fn dlpk_describe(managed_address: f64, options: u32, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    const managed = abi.addressFromF64(managed_address) orelse return invalid;
    var own: ?exports.Own = null;
    return code(admit.inspect(managed, .{
        .versioned = options & import_option.versioned != 0,
        .strict_offset = options & import_option.strict_offset != 0,
    }, out, &own));
}

/// The shape and strides of the description at `spec` as integers (`dlpk_copy`): extents not
/// negative, every value exact; a refusal status otherwise.
const Layout = struct {
    ndim: usize,
    shape: [dlpack.rank_max]i64,
    strides: [dlpack.rank_max]i64,
};

fn layoutOf(spec: *const Description, layout: *Layout) ?Status {
    if (spec.ndim < 0 or spec.ndim > dlpack.rank_max) return .rank;
    layout.ndim = @intCast(spec.ndim);
    return dimsOf(spec, layout.shape[0..layout.ndim], layout.strides[0..layout.ndim]);
}

/// Decodes the description's first `shape.len` extents and strides into `shape` and `strides`.
fn dimsOf(spec: *const Description, shape: []i64, strides: []i64) ?Status {
    assert(shape.len == strides.len and shape.len <= dlpack.rank_max);
    for (shape, strides, 0..) |*extent_out, *stride_out, d| {
        const extent = abi.integerFromF64(spec.shape[d]) orelse return .shape;
        if (extent < 0) return .shape;
        extent_out.* = extent;
        stride_out.* = abi.integerFromF64(spec.strides[d]) orelse return .strides;
    }
    return null;
}

/// Builds an export from the description at `spec_address`: data address (address_lo/hi), owner,
/// device, dtype, flags, ndim, shape and strides. On success writes the managed struct's address
/// into address_lo/hi. The TS side has checked the layout against the memory it points into.
export fn dlpk_export(options: u32, spec_address: f64) i32 {
    const spec = descriptionAt(spec_address) orelse return invalid;
    return code(exportDescribed(spec, options));
}

fn exportDescribed(spec: *Description, options: u32) Status {
    if (spec.ndim < 0 or spec.ndim > dlpack.rank_max) return .rank;
    // The shape and strides are decoded straight into the export's record (a stack copy of the
    // largest rank would cost more than the export).
    const started = exports.draft(@intCast(spec.ndim)) catch return .out_of_memory;
    const refused = dimsOf(spec, started.shape(), started.strides()) orelse checkDtype(spec);
    if (refused) |status| {
        exports.abandon(started);
        return status;
    }
    const owner_address = @as(usize, spec.owner_hi) << 32 | spec.owner_lo;
    const managed = exports.finish(started, .{
        .data = spec.address(),
        .device = .{ .device_type = spec.device_type, .device_id = spec.device_id },
        .dtype = .{
            .code = @intCast(spec.dtype_code),
            .bits = @intCast(spec.dtype_bits),
            .lanes = 1,
        },
        .shape = started.shape(),
        .strides = started.strides(),
        .flags = spec.flags,
        .versioned = options & export_option.versioned != 0,
        .adopt_owner = options & export_option.adopt_owner != 0,
        .owner = if (owner_address == 0) null else @ptrFromInt(owner_address),
    });
    spec.setAddress(managed);
    return .ok;
}

fn checkDtype(spec: *const Description) ?Status {
    if (spec.dtype_code > std.math.maxInt(u8) or spec.dtype_bits > std.math.maxInt(u8)) {
        return .dtype;
    }
    return null;
}

/// Exports JS memory in one call: `buffer` is the TypedArray's data (passed by the runtime's FFI,
/// so JS never computes the address), pinned as `pin_id` (`pin_bytes` bytes) for as long as the
/// export lives. The spec's address fields hold the byte offset of element 0 within the buffer;
/// on success they are overwritten with the managed struct's address.
export fn dlpk_export_buffer(
    buffer: ?[*]u8,
    realm_address: f64,
    pin_id: f64,
    pin_bytes: f64,
    options: u32,
    spec_address: f64,
) i32 {
    const spec = descriptionAt(spec_address) orelse return invalid;
    const base = buffer orelse return invalid;
    const realm = realmAt(realm_address) orelse return invalid;
    const id = countFromF64(pin_id) orelse return invalid;
    const bytes = countFromF64(pin_bytes) orelse return invalid;
    const offset = spec.address();
    const pin = owner.createIn(realm, .pin, id, bytes) catch return code(.out_of_memory);
    spec.setAddress(@intFromPtr(base) + offset);
    spec.setOwner(@intFromPtr(pin));
    const status = code(exportDescribed(spec, options | export_option.adopt_owner));
    // A failed export leaves the pin's only reference with us: releasing it queues the id, which
    // JS never recorded, so the sweep drops nothing.
    if (status != 0) owner.release(pin);
    return status;
}

/// The common export of a whole TypedArray in one call, its facts arguments (no description to
/// write or decode): 1-D, contiguous, the elements of `dtype` that fill `pin_bytes` bytes from
/// `buffer`'s first byte (the TypedArray's extent), on the CPU, pinned as `pin_id` of `realm` for
/// as long as the export lives. `word` carries the dtype, the flags and the options
/// (`abi.array_word`). Returns the managed struct's address, or minus a status code.
export fn dlpk_export_array(
    buffer: ?[*]u8,
    realm_address: f64,
    pin_id: f64,
    pin_bytes: f64,
    word: u32,
) f64 {
    const refused: f64 = -@as(f64, @floatFromInt(invalid));
    const base = buffer orelse return refused;
    const realm = realmAt(realm_address) orelse return refused;
    const id = countFromF64(pin_id) orelse return refused;
    const bytes = countFromF64(pin_bytes) orelse return refused;
    const bits: usize = word >> abi.array_word.bits_shift & 0xff;
    const flags: u32 = word >> abi.array_word.flags_shift & 0xff;
    const options: u32 = word >> abi.array_word.options_shift;
    // Whole elements of a byte-sized type, known flags: the TS side read both from the array.
    if (bits == 0 or bits % 8 != 0 or bytes % (bits / 8) != 0 or flags & ~dlpack.flags_known != 0) {
        return refused;
    }
    const count = bytes / (bits / 8);
    const managed = exportArray(base, realm, id, bytes, @intCast(count), .{
        .code = @truncate(word),
        .bits = @intCast(bits),
        .lanes = 1,
    }, flags, options) catch return -@as(f64, @floatFromInt(code(.out_of_memory)));
    return @floatFromInt(managed);
}

fn exportArray(
    base: [*]u8,
    realm: *owner.Realm,
    id: usize,
    bytes: usize,
    extent: i64,
    dtype: dlpack.DataType,
    flags: u32,
    options: u32,
) error{OutOfMemory}!usize {
    assert(extent >= 0);
    // Inlined, as `finish` below: in a shared library each function that touches thread-local
    // state (spare records, counters, the export pool) looks its block up once, in a call.
    const pin = try @call(.always_inline, owner.createIn, .{ realm, .pin, id, bytes });
    // Not exported: releasing the pin's only reference queues the id, which JS never recorded.
    errdefer owner.release(pin);
    const started = try exports.draft(1);
    started.shape()[0] = extent;
    started.strides()[0] = 1;
    const managed = @call(.always_inline, exports.finish, .{ started, exports.Spec{
        .data = @intFromPtr(base),
        .device = .{ .device_type = @intFromEnum(dlpack.DeviceType.cpu), .device_id = 0 },
        .dtype = dtype,
        .shape = started.shape(),
        .strides = started.strides(),
        .flags = flags,
        .versioned = options & export_option.versioned != 0,
        .adopt_owner = true,
        .owner = pin,
    } });
    assert(managed != 0);
    return managed;
}

/// A count (an id, a number of bytes) the TS side passed: an integer in [0, 2^53), truncated.
fn countFromF64(value: f64) ?usize {
    if (!(value >= 0 and value < abi.exact_max_float)) return null;
    return @intFromFloat(value);
}

/// Calls a managed tensor's deleter (a capsule disposed before anyone took it), with the checks of
/// an import: nothing happens for a struct that is not readable, a deleter that is not code, or an
/// export of this library that an import took or that was released already.
export fn dlpk_managed_delete(managed_address: f64, versioned: u32) void {
    const managed = abi.addressFromF64(managed_address) orelse return;
    _ = deleteChecked(managed, versioned != 0);
}

/// Whether the deleter ran.
fn deleteChecked(managed: usize, versioned: bool) bool {
    if (!isStruct(managed)) return false;
    if (!mappings.readable(managed, dlpack.managedSize(versioned))) return false;
    if (exports.recognize(managed)) |own| {
        if (own.state != .live or !exports.claim(managed)) return false;
        dlpack.deleteManaged(managed, own.versioned);
        return true;
    }
    const deleter = @as(*const usize, @ptrFromInt(managed + dlpack.deleterOffset(versioned))).*;
    if (deleter != 0 and (exports.isExportDeleter(deleter) or !mappings.executable(deleter))) {
        return false;
    }
    dlpack.deleteManaged(managed, versioned);
    return true;
}

/// Disposes an export of this library that its JS side made and never handed out (a capsule
/// disposed from JS): the struct is released as its deleter would, and a pin it held the last
/// reference to is freed at once. Returns that pin's id (JS then drops the pinned object itself)
/// or 0; does nothing for anything but a live export of this library. `entry` is
/// `-(address * 2 + versioned)`, which JS journaled as the top entry (ended here first).
export fn dlpk_export_dispose(entry: f64) f64 {
    journal.end(journal.local(), entry);
    const managed = (structOfEntry(entry) orelse return 0).address;
    if (!isStruct(managed)) return 0;
    // A live export is a whole record: anything shorter is refused by this one check.
    if (!mappings.readable(managed, exports.record_bytes)) return 0;
    return @floatFromInt(exports.disposeHeld(managed));
}

/// Whether `managed` was made by `dlpk_export` (1) or not (0).
export fn dlpk_is_own_export(managed_address: f64, versioned: u32) u32 {
    const managed = abi.addressFromF64(managed_address) orelse return 0;
    if (!isStruct(managed) or !mappings.readable(managed, @sizeOf(dlpack.ManagedTensor))) return 0;
    const own = exports.recognize(managed) orelse return 0;
    return @intFromBool(own.versioned == (versioned != 0) and own.state != .released);
}

/// Allocates library memory; writes its address and owner into the description at `out_address`.
export fn dlpk_alloc(bytes: f64, alignment: f64, zero: u32, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    const size = abi.integerFromF64(bytes) orelse return code(.overflow);
    const align_bytes = abi.integerFromF64(alignment) orelse return invalid;
    if (size < 0) return code(.overflow);
    if (align_bytes <= 0 or align_bytes > memory.alignment_max_bytes) return invalid;
    if (!std.math.isPowerOfTwo(align_bytes)) return invalid;
    const created = owner.createNative(@intCast(size), @intCast(align_bytes), zero != 0) catch
        return code(.out_of_memory);
    out.setAddress(created.payload);
    out.setOwner(@intFromPtr(created));
    return 0;
}

/// Copies the strided tensor the description at `spec_address` describes (address, ndim, shape,
/// strides) into `dst` in C order, `itemsize` bytes per element.
export fn dlpk_copy(spec_address: f64, dst_address: f64, itemsize: u32) i32 {
    const spec = descriptionAt(spec_address) orelse return invalid;
    const dst = abi.addressFromF64(dst_address) orelse return invalid;
    if (spec.ndim < 0 or spec.ndim > dlpack.rank_max or itemsize == 0 or dst == 0) return invalid;
    var layout: Layout = undefined;
    if (layoutOf(spec, &layout)) |refused| return code(refused);
    // The copy engine assumes at most 2^53 elements (what any view can hold).
    var elements: u64 = 1;
    for (layout.shape[0..layout.ndim]) |extent| {
        elements = std.math.mul(u64, elements, @intCast(extent)) catch return code(.overflow);
    }
    if (elements > abi.exact_max) return code(.overflow);
    const src = spec.address();
    const shape = layout.shape[0..layout.ndim];
    const strides = layout.strides[0..layout.ndim];
    memory.copyStrided(@ptrFromInt(dst), @ptrFromInt(src), itemsize, shape, strides);
    return 0;
}

fn ownerAt(value: f64) ?*owner.Owner {
    const address = abi.addressFromF64(value) orelse return null;
    if (address == 0 or address % @alignOf(owner.Owner) != 0) return null;
    return @ptrFromInt(address);
}

export fn dlpk_owner_retain(address: f64) void {
    owner.retain(ownerAt(address) orelse return);
}

export fn dlpk_owner_release(address: f64) void {
    owner.release(ownerAt(address) orelse return);
}

/// The address of this thread's journal of releases (see journal.zig), which JS views.
export fn dlpk_journal() f64 {
    return @floatFromInt(@intFromPtr(journal.local()));
}

/// Releases what JS journaled as the top entry, `value`: an owner record (> 0) or a managed
/// struct (`-(address * 2 + versioned)`). The entry ends before anything else (journal.zig).
export fn dlpk_journal_release(value: f64) void {
    journal.end(journal.local(), value);
    releaseEntry(value);
}

/// Ends the top entry of this thread's journal and releases what it holds (the deferred replay);
/// nothing when the journal holds no stored entry.
export fn dlpk_journal_replay() void {
    releaseEntry(journal.pop(journal.local()) orelse return);
}

fn releaseEntry(value: f64) void {
    if (value > 0) {
        // Inlined, for the same thread-local lookup as `admit.record`'s (0.4 ns).
        @call(.always_inline, owner.release, .{ownerAt(value) orelse return});
        return;
    }
    const managed = structOfEntry(value) orelse return;
    _ = deleteChecked(managed.address, managed.versioned);
}

/// The managed struct a journal entry `-(address * 2 + versioned)` stands for (address 0 for
/// -0 or -1, which no caller treats as a struct); null for an owner record or a fraction.
fn structOfEntry(value: f64) ?struct { address: usize, versioned: bool } {
    const encoded = abi.addressFromF64(-value) orelse return null;
    return .{ .address = encoded / 2, .versioned = encoded % 2 == 1 };
}

/// 1 while this thread runs a producer's deleter (which may be a JS callback calling back into
/// the library), else 0: JS then leaves its journal of releases under way alone.
export fn dlpk_inside_deleter() u32 {
    return @intFromBool(dlpack.insideDeleter());
}

fn realmAt(value: f64) ?*owner.Realm {
    const address = abi.addressFromF64(value) orelse return null;
    if (address == 0 or address % @alignOf(owner.Realm) != 0) return null;
    return @ptrFromInt(address);
}

/// A new realm record for one JS realm (the main program, each Worker, each isolate): its address,
/// or 0 when out of memory. Never freed (a realm cannot announce its end); see owner.Realm.
export fn dlpk_realm_new() f64 {
    const realm = owner.createRealm() catch return 0;
    return @floatFromInt(@intFromPtr(realm));
}

/// A pin owner of `realm` for the JS object `id`: its release is queued for that realm alone. The
/// JS side keeps the object reachable until the id comes back from `dlpk_pins_drain`.
export fn dlpk_pin_new(realm_address: f64, id: f64, bytes: f64, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    const realm = realmAt(realm_address) orelse return invalid;
    const pin_id = countFromF64(id) orelse return invalid;
    const pin_bytes = countFromF64(bytes) orelse return invalid;
    const created = owner.createIn(
        realm,
        .pin,
        pin_id,
        pin_bytes,
    ) catch return code(.out_of_memory);
    out.setOwner(@intFromPtr(created));
    return 0;
}

/// Makes the pin owner at `pin_address` attachable from another realm (an export of a
/// SharedArrayBuffer made on a Worker); returns its token, or 0 when that is not possible.
export fn dlpk_pin_share(pin_address: f64) f64 {
    const pin = ownerAt(pin_address) orelse return 0;
    if (pin.kind != .pin or pin.shared_token != 0) return 0;
    const token = owner.share(pin) catch return 0;
    return @floatFromInt(token);
}

/// Pins JS object `id` of `realm` for as long as the shared pin `token` lives. 0: kept; 1: that
/// pin is gone already (nothing to keep; the id is queued and swept like any release).
export fn dlpk_pin_keep(token: f64, realm_address: f64, id: f64, bytes: f64) i32 {
    const realm = realmAt(realm_address) orelse return invalid;
    if (!(token >= 1 and token < abi.exact_max_float)) return invalid;
    const pin_id = countFromF64(id) orelse return invalid;
    const pin_bytes = countFromF64(bytes) orelse return invalid;
    const keeper = owner.createIn(realm, .pin, pin_id, pin_bytes) catch return code(.out_of_memory);
    if (owner.keep(@intFromFloat(token), keeper)) return 0;
    owner.release(keeper);
    return 1;
}

/// Whether the shared pin `token` has a keeper (1), still waits for one (0), or is gone (-1).
export fn dlpk_pin_kept(token: f64) i32 {
    if (!(token >= 1 and token < abi.exact_max_float)) return -1;
    return switch (owner.keptState(@intFromFloat(token))) {
        .kept => 1,
        .waiting => 0,
        .gone => -1,
    };
}

/// How many JS realms using this library have not ended.
export fn dlpk_realms_live() u32 {
    return owner.liveRealms();
}

export fn dlpk_pins_drain(realm_address: f64, out_address: f64, capacity: u32) u32 {
    const realm = realmAt(realm_address) orelse return 0;
    const address = abi.addressFromF64(out_address) orelse return 0;
    if (address == 0 or address % 8 != 0) return 0;
    const out: [*]f64 = @ptrFromInt(address);
    return @intCast(owner.drainRealm(realm, out[0..capacity]));
}

export fn dlpk_stats(out_address: f64) u32 {
    const address = abi.addressFromF64(out_address) orelse return 0;
    if (address == 0 or address % 8 != 0) return 0;
    stats.snapshot(@ptrFromInt(address));
    return stats.counter_count;
}

// ---------------------------------------------------------------------------------------------
// The embedded-Python bridge (src/python/): all of these run with the GIL held by the caller.

fn pythonStatus(status: abi.PythonStatus) i32 {
    return @intFromEnum(status);
}

/// The ABI status of a failed Python import; the capsule refusals are also written into `out`.
fn importFailure(err: python.ImportError, out: *Description) i32 {
    const status: abi.PythonStatus = switch (err) {
        error.Refused => return out.status,
        error.NotLoaded => .not_loaded,
        error.Raised => .raised,
        error.ArrayInterface => .array_interface,
        error.Consumed => .consumed,
        error.CapsuleName => .capsule_name,
    };
    if (err == error.Consumed or err == error.CapsuleName) out.status = pythonStatus(status);
    return pythonStatus(status);
}

/// Loads libpython (NUL-terminated path) with RTLD_GLOBAL; 0, or -1 with `dlpk_py_load_error`.
export fn dlpk_py_load(path: [*:0]const u8) i32 {
    cpython.load(path) catch return -1;
    return 0;
}

/// Copies the last load error (NUL-terminated) into `out`; returns its length.
export fn dlpk_py_load_error(out: [*]u8, capacity: u32) u32 {
    if (capacity == 0) return 0;
    const message = std.mem.span(cpython.loadError());
    const n = @min(message.len, capacity - 1);
    @memcpy(out[0..n], message[0..n]);
    out[n] = 0;
    return @intCast(n);
}

/// The address of `Py_None` (0 before `dlpk_py_load`).
export fn dlpk_py_none() usize {
    return cpython.noneObject();
}

/// Formats and clears the pending Python exception ("Type: message", NUL-terminated); returns
/// its length, or -1 when none is pending.
export fn dlpk_py_take_error(out: [*]u8, capacity: u32) i32 {
    if (capacity == 0) return -1;
    const written = cpython.takeError(out[0..capacity]) orelse return -1;
    return @intCast(written);
}

/// Consumes a producer's PyCapsule into an owner and a description (see python.consume).
export fn dlpk_py_consume(capsule_address: f64, options: u32, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    const capsule = abi.addressFromF64(capsule_address) orelse return invalid;
    out.status = 0;
    if (capsule == 0) return code(.null_managed);
    const strict = options & import_option.strict_offset != 0;
    python.consume(capsule, strict, out) catch |err| return importFailure(err, out);
    return 0;
}

/// Makes `DLPackTensor` (a C type) on the helper module `module`, adds the natives the Python side
/// calls and keeps the helper functions the negotiation falls back on. Takes the GIL.
export fn dlpk_py_install(module: f64) i32 {
    const m = abi.addressFromF64(module) orelse return invalid;
    if (m == 0) return invalid;
    tensor.fence_hook = pythonFence;
    python.install(m) catch |err| return switch (err) {
        error.NotLoaded => pythonStatus(.not_loaded),
        error.Raised => -1,
    };
    return 0;
}

/// The Python side's fence: 0, -2 for the disallowed stream 0, else the CUDA status.
fn pythonFence(template: usize, stream: usize) i32 {
    if (stream == 0) return -2;
    if (!isStruct(template)) return invalid;
    return cudaResult(exports.fenceForConsumer(template, true, stream));
}

/// Gives the calling thread a lasting Python thread state (call without holding the GIL).
export fn dlpk_py_attach_thread() i32 {
    cpython.attachThread() catch return pythonStatus(.not_loaded);
    return 0;
}

/// Opens a GIL burst on this thread (see cpython.beginBurst): 1 when the GIL was taken now (end it
/// with `dlpk_py_burst_end`), 0 when a burst is open already, 16 before `dlpk_py_load`.
export fn dlpk_py_burst() i32 {
    const began = cpython.beginBurst() catch return pythonStatus(.not_loaded);
    return @intFromBool(began);
}

/// Ends this thread's GIL burst.
export fn dlpk_py_burst_end() void {
    cpython.endBurst();
}

/// Drops one reference (takes the GIL).
export fn dlpk_py_decref(handle: f64) void {
    const h = abi.addressFromF64(handle) orelse return;
    if (h != 0) cpython.decref(h);
}

/// `callable(arg)` under the GIL: a new reference, or 0 with the exception pending.
export fn dlpk_py_call1(callable: f64, arg: f64) f64 {
    const c = abi.addressFromF64(callable) orelse return 0;
    const a = abi.addressFromF64(arg) orelse return 0;
    if (c == 0 or a == 0) return 0;
    return @floatFromInt(cpython.call1(c, a));
}

/// A `DLPackTensor` over a versioned export template: a new reference, or 0 with the exception
/// pending (the template then stays the caller's).
export fn dlpk_py_wrap(template: f64, readonly: u32) f64 {
    const t = abi.addressFromF64(template) orelse return 0;
    if (!isStruct(t)) return 0;
    return @floatFromInt(tensor.make(t, readonly != 0));
}

/// `toPython(x, py, { as })`: the object `kind`'s DLPack C exchange table makes from a versioned
/// export template (see exchange.wrapAs): a new reference, or 0 with the exception pending (the
/// template then stays the caller's).
export fn dlpk_py_wrap_as(template: f64, kind: f64) f64 {
    const t = abi.addressFromF64(template) orelse return 0;
    const k = abi.addressFromF64(kind) orelse return 0;
    if (!isStruct(t) or k == 0) return 0;
    return @floatFromInt(exchange.wrapAs(t, k));
}

/// Whether a `PyObject*` that did not come from the bridge can be dereferenced (see
/// python.checkObject): 0; 1 its header, 2 its type, 3 a metatype is not readable; 16 before
/// `dlpk_py_load`. Reads memory only: no GIL needed.
export fn dlpk_py_check_object(handle: f64) i32 {
    const h = abi.addressFromF64(handle) orelse return invalid;
    if (h == 0) return invalid;
    return python.checkObject(h);
}

/// `fromPython`'s fast path (see python.from). `stream` NaN means None. The producer's name goes to
/// `name_address` (UTF-8, NUL-terminated, at most `name_capacity` bytes).
export fn dlpk_py_from(
    obj: f64,
    max_major: i32,
    max_minor: i32,
    copy: i32,
    device_type: i32,
    device_id: i32,
    stream: f64,
    options: u32,
    out_address: f64,
    name_address: f64,
    name_capacity: u32,
) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    const o = abi.addressFromF64(obj) orelse return invalid;
    const n = abi.addressFromF64(name_address) orelse return invalid;
    if (o == 0 or n == 0 or name_capacity == 0) return invalid;
    const stream_value: ?i64 = if (std.math.isNan(stream))
        null
    else
        abi.integerFromF64(stream) orelse return invalid;
    out.status = 0;
    const name: [*]u8 = @ptrFromInt(n);
    python.from(o, .{
        .max_major = max_major,
        .max_minor = max_minor,
        .copy = copy,
        .device_type = device_type,
        .device_id = device_id,
        .stream = stream_value,
        .strict_offset = options & import_option.strict_offset != 0,
    }, out, name[0..name_capacity]) catch |err| return importFailure(err, out);
    return 0;
}

// =============================================================================================
// CUDA (zig/src/cuda.zig). The driver is opened with dlopen at first use (`DLPACK_CUDA_LIB`, else
// libcuda.so.1); nothing here needs CUDA to load. Statuses: 0 ok, a positive CUresult for a driver
// failure (details from `dlpk_cuda_last_error` on the same thread), or a negative
// `abi.CudaStatus`. Handles (streams, events) travel as unsigned words; 1 and 2 are the legacy
// and per-thread default streams.

fn cudaStatus(status: abi.CudaStatus) i32 {
    return @intFromEnum(status);
}

/// The ABI status of an error: the failing call's CUresult, or a negative library status.
fn cudaStatusOf(err: cuda.Error) i32 {
    return switch (err) {
        error.Driver => cuda.lastResult(),
        error.Unavailable => cudaStatus(.unavailable),
        error.InvalidArgument => cudaStatus(.invalid_argument),
        error.InvalidDevice => cudaStatus(.invalid_device),
        error.OutOfMemory => cudaStatus(.out_of_memory),
    };
}

fn cudaResult(result: cuda.Error!void) i32 {
    result catch |err| return cudaStatusOf(err);
    return 0;
}

/// Opens the driver if needed: 0 when it is usable, -1 when not.
export fn dlpk_cuda_status() i32 {
    return if (cuda.ensure()) 0 else cudaStatus(.unavailable);
}

/// Copies why the driver is unavailable into `out` (UTF-8, not terminated); returns the length.
export fn dlpk_cuda_reason(out: [*]u8, capacity: u32) u32 {
    const text = cuda.reason();
    const n = @min(text.len, capacity);
    @memcpy(out[0..n], text[0..n]);
    return @intCast(n);
}

/// This thread's last driver failure as "<call>\n<error name>\n<error string>" (NUL-terminated
/// when it fits); returns its CUresult.
export fn dlpk_cuda_last_error(out: [*]u8, capacity: u32) i32 {
    return cuda.lastError(out[0..capacity]);
}

export fn dlpk_cuda_driver_version() i32 {
    return cuda.driverVersion();
}

/// The number of devices, or -1 without a driver.
export fn dlpk_cuda_device_count() i32 {
    return if (cuda.ensure()) cuda.deviceCount() else cudaStatus(.unavailable);
}

/// Writes total memory, compute capability major and minor, and multiprocessor count into
/// `out[0..4]`, and "<name>\n<pci bus id>" into `text`.
export fn dlpk_cuda_device_info(ordinal: i32, out: *[4]f64, text: [*]u8, capacity: u32) i32 {
    const info = cuda.deviceInfo(ordinal, text[0..capacity]) catch |err| return cudaStatusOf(err);
    out.* = .{
        @floatFromInt(info.total_memory),
        @floatFromInt(info.cc_major),
        @floatFromInt(info.cc_minor),
        @floatFromInt(info.multiprocessors),
    };
    return 0;
}

/// Writes memory type (0 unregistered, 1 host, 2 device, 3 array, 4 unified), device ordinal,
/// managed (0/1), range start and range size (0 when unknown) into `out[0..5]`.
export fn dlpk_cuda_pointer_info(address: f64, out: *[5]f64) i32 {
    const where = abi.addressFromF64(address) orelse return cudaStatus(.invalid_argument);
    const a = cuda.pointerAttributes(where, true) catch |err| return cudaStatusOf(err);
    out.* = .{
        @floatFromInt(a.memory_type),
        @floatFromInt(a.ordinal),
        @floatFromInt(@intFromBool(a.managed)),
        @floatFromInt(a.range_start),
        @floatFromInt(a.range_size),
    };
    return 0;
}

/// Allocates `bytes` of device (kind 0), page-locked host (1) or managed memory (2) in the primary
/// context of `ordinal`, zeroed on request; writes address and owner into the description.
export fn dlpk_cuda_alloc(kind: u32, ordinal: i32, bytes: f64, zero: u32, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return cudaStatus(.invalid_argument);
    const size = abi.integerFromF64(bytes) orelse return cudaStatus(.invalid_argument);
    if (size < 0 or kind > 2) return cudaStatus(.invalid_argument);
    const created = owner.createCuda(
        @enumFromInt(kind),
        ordinal,
        @intCast(size),
        zero != 0,
    ) catch |err|
        return cudaStatusOf(err);
    out.setAddress(created.payload);
    out.setOwner(@intFromPtr(created));
    return 0;
}

/// Copies `bytes`: direction 0 host->device, 1 device->host, 2 device->device, 3 device->device
/// across devices (`ordinal` the destination's, `src_ordinal` the source's). `stream` 0 uses the
/// synchronous calls; otherwise the copy is queued on `stream` and, with `wait`, awaited.
export fn dlpk_cuda_copy(
    direction: u32,
    dst_address: f64,
    src_address: f64,
    bytes: f64,
    ordinal: i32,
    src_ordinal: i32,
    stream: usize,
    wait: u32,
) i32 {
    const size = abi.integerFromF64(bytes) orelse return cudaStatus(.invalid_argument);
    const dst = abi.addressFromF64(dst_address) orelse return cudaStatus(.invalid_argument);
    const src = abi.addressFromF64(src_address) orelse return cudaStatus(.invalid_argument);
    if (size < 0 or direction > 3) return cudaStatus(.invalid_argument);
    return cudaResult(cuda.copy(.{
        .direction = @enumFromInt(direction),
        .dst = dst,
        .src = src,
        .bytes = @intCast(size),
        .ordinal = ordinal,
        .src_ordinal = src_ordinal,
    }, stream, wait != 0));
}

export fn dlpk_cuda_stream_create(ordinal: i32, out: *u64) i32 {
    out.* = cuda.streamCreate(ordinal) catch |err| return cudaStatusOf(err);
    return 0;
}

export fn dlpk_cuda_stream_destroy(ordinal: i32, stream: usize) i32 {
    return cudaResult(cuda.streamDestroy(ordinal, stream));
}

export fn dlpk_cuda_stream_synchronize(ordinal: i32, stream: usize) i32 {
    return cudaResult(cuda.streamSynchronize(ordinal, stream));
}

export fn dlpk_cuda_event_create(ordinal: i32, out: *u64) i32 {
    out.* = cuda.eventCreate(ordinal) catch |err| return cudaStatusOf(err);
    return 0;
}

export fn dlpk_cuda_event_record(ordinal: i32, event: usize, stream: usize) i32 {
    return cudaResult(cuda.eventRecord(ordinal, event, stream));
}

export fn dlpk_cuda_event_destroy(ordinal: i32, event: usize) i32 {
    return cudaResult(cuda.eventDestroy(ordinal, event));
}

export fn dlpk_cuda_stream_wait_event(ordinal: i32, stream: usize, event: usize) i32 {
    return cudaResult(cuda.streamWaitEvent(ordinal, stream, event));
}

/// Makes stream `consumer` wait for the work queued so far on stream `producer` (both handles of
/// device `ordinal`'s context; nothing to do when they are the same stream).
export fn dlpk_cuda_fence(ordinal: i32, producer: usize, consumer: usize) i32 {
    return cudaResult(cuda.fence(ordinal, producer, consumer));
}

/// Attaches a producer stream to one of this library's exports of CUDA-family data: an event is
/// recorded on it now and released with the export.
export fn dlpk_cuda_export_attach_stream(
    managed_address: f64,
    versioned: u32,
    ordinal: i32,
    stream: usize,
) i32 {
    const managed = abi.addressFromF64(managed_address) orelse return cudaStatus(.invalid_argument);
    return cudaResult(exports.attachStream(managed, versioned != 0, ordinal, stream));
}

/// `__dlpack__(stream=...)` for one of this library's exports, callable from any thread: `stream`
/// is the protocol value as an unsigned word (all ones for -1: no synchronization; 0: refused with
/// -2; 1 legacy default, 2 per-thread default, else a handle). Python's None is 1. Takes plain
/// words (not f64 addresses) because Python calls it through ctypes, like `dlpk_py_capsule`.
export fn dlpk_cuda_export_fence(managed: usize, versioned: u32, stream: usize) i32 {
    return cudaResult(exports.fenceForConsumer(managed, versioned != 0, stream));
}

/// Live CUDA allocations and bytes (device, host, managed), live events, and failed frees.
export fn dlpk_cuda_stats(out: *[cuda.counter_count]f64) u32 {
    return @intCast(cuda.snapshot(out));
}

test "CUDA errors map to ABI statuses" {
    const testing = std.testing;
    try testing.expectEqual(cudaStatus(.unavailable), cudaStatusOf(error.Unavailable));
    try testing.expectEqual(cudaStatus(.invalid_device), cudaStatusOf(error.InvalidDevice));
    try testing.expectEqual(@as(i32, -1), cudaStatusOf(error.Unavailable));
    try testing.expectEqual(cuda.lastResult(), cudaStatusOf(error.Driver));
}

// ---------------------------------------------------------------------------------------------
// Keyed imports: `dlpk_import` into a `KeyedDescription`, whose generation tells the caller with
// one word whether the facts it built for the last import still apply.

/// `dlpk_import` into a `KeyedDescription` (every check the same); on success the generation
/// changes unless the facts equal the last keyed import's into the same record.
export fn dlpk_import_keyed(managed_address: f64, options: u32, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    const managed = abi.addressFromF64(managed_address) orelse return refuseInexact(out);
    return importKeyed(managed, options, out);
}

/// This thread's keyed description, which JS uses as its scratch for every native call: the
/// one-argument imports below write into it without being told where it is (each FFI argument
/// costs Bun's calls about a nanosecond). Per thread, like the journal, so that copies of the JS
/// module in one realm share it, and workers each have their own.
threadlocal var thread_scratch: abi.KeyedDescription = std.mem.zeroes(abi.KeyedDescription);

/// The address of this thread's scratch (see `thread_scratch`), which JS views.
export fn dlpk_scratch() f64 {
    return @floatFromInt(@intFromPtr(&thread_scratch));
}

/// `dlpk_import_keyed` of a versioned struct into this thread's scratch: the import users make
/// most, with one argument.
export fn dlpk_import_versioned(managed_address: f64) i32 {
    const out = &thread_scratch.description;
    const managed = abi.addressFromF64(managed_address) orelse return refuseInexact(out);
    return importKeyed(managed, import_option.versioned, out);
}

/// `dlpk_import_versioned` for an address the runtime's FFI hands out as a pointer object.
export fn dlpk_import_pointer_versioned(managed: ?*anyopaque) i32 {
    return importKeyed(@intFromPtr(managed), import_option.versioned, &thread_scratch.description);
}

/// `dlpk_import_keyed` for an address the runtime's FFI hands out as a pointer object (Deno's
/// `PointerObject`): the runtime passes the pointer itself, so JS never converts it to a number.
/// Every check of `dlpk_import` applies: the pointer is only an address.
export fn dlpk_import_pointer_keyed(managed: ?*anyopaque, options: u32, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    return importKeyed(@intFromPtr(managed), options, out);
}

/// `dlpk_import_keyed` for an address the caller holds as a 64-bit word (a JS bigint, which the
/// runtime passes without converting it to a number). An address at or above 2^53 is refused
/// before anything is read, as `dlpk_import` refuses what no f64 holds exactly.
export fn dlpk_import_word_keyed(managed: usize, options: u32, out_address: f64) i32 {
    const out = descriptionAt(out_address) orelse return invalid;
    if (managed >= abi.exact_max) return refuseInexact(out);
    return importKeyed(managed, options, out);
}

/// The keyed entries' common path, inlined into each with the validator and the owner record:
/// every JS import takes it, and their call frames measured 3-4 ns of it.
inline fn importKeyed(managed: usize, options: u32, out: *Description) i32 {
    const status = @call(.always_inline, importAt, .{ managed, options, out });
    // A keyed record starts with its description (abi.zig); the caller passed a whole record.
    comptime assert(@offsetOf(abi.KeyedDescription, "description") == 0);
    if (status == 0) keyFacts(@ptrCast(out));
    return status;
}

/// Writes the addresses as f64 words; moves the generation on, and remembers the facts, unless
/// they equal the remembered ones.
fn keyFacts(keyed: *abi.KeyedDescription) void {
    const now = &keyed.description;
    const owner_record: u64 = @as(u64, now.owner_hi) << 32 | now.owner_lo;
    keyed.owner = @floatFromInt(owner_record);
    const element = now.address();
    keyed.address = if (element < abi.exact_max) @floatFromInt(element) else -1;
    assert(now.ndim >= 0 and now.ndim <= dlpack.rank_max);
    if (sameFacts(now, &keyed.last)) return;
    const rank: usize = @intCast(now.ndim);
    const now_bytes = std.mem.asBytes(now);
    const last_bytes = std.mem.asBytes(&keyed.last);
    const words_at, const words_end = abi.facts_words;
    const numbers_at, const numbers_end = abi.facts_numbers;
    @memcpy(last_bytes[words_at..words_end], now_bytes[words_at..words_end]);
    @memcpy(last_bytes[numbers_at..numbers_end], now_bytes[numbers_at..numbers_end]);
    @memcpy(keyed.last.shape[0..rank], now.shape[0..rank]);
    @memcpy(keyed.last.strides[0..rank], now.strides[0..rank]);
    keyed.generation += 1;
}

/// Whether two descriptions agree on every fact a view is built from (compared as bytes: -0 and 0
/// differ, which only costs a rebuild).
fn sameFacts(a: *const Description, b: *const Description) bool {
    if (a.ndim != b.ndim) return false;
    const rank: usize = @intCast(a.ndim);
    const a_bytes = std.mem.asBytes(a);
    const b_bytes = std.mem.asBytes(b);
    const words_at, const words_end = abi.facts_words;
    const numbers_at, const numbers_end = abi.facts_numbers;
    return std.mem.eql(u8, a_bytes[words_at..words_end], b_bytes[words_at..words_end]) and
        std.mem.eql(u8, a_bytes[numbers_at..numbers_end], b_bytes[numbers_at..numbers_end]) and
        std.mem.eql(f64, a.shape[0..rank], b.shape[0..rank]) and
        std.mem.eql(f64, a.strides[0..rank], b.strides[0..rank]);
}

test "word imports refuse an address no f64 holds exactly before reading anything" {
    var keyed = std.mem.zeroes(abi.KeyedDescription);
    const at: f64 = @floatFromInt(@intFromPtr(&keyed));
    const refused = code(.bad_address);
    try std.testing.expectEqual(refused, dlpk_import_word_keyed(abi.exact_max, 1, at));
    try std.testing.expectEqual(refused, dlpk_import_word_keyed(std.math.maxInt(usize), 1, at));
    try std.testing.expectEqual(@as(f64, 0), keyed.generation);
}

var one_argument_deletes: u32 = 0;

fn countDelete(_: *dlpack.ManagedTensorVersioned) callconv(.c) void {
    one_argument_deletes += 1;
}

test "one-argument imports write this thread's scratch" {
    const testing = std.testing;
    try testing.expectEqual(@as(f64, @floatFromInt(@intFromPtr(&thread_scratch))), dlpk_scratch());
    var data = [_]f32{ 1, 2, 3 };
    var shape = [_]i64{3};
    var strides = [_]i64{1};
    var managed = std.mem.zeroes(dlpack.ManagedTensorVersioned);
    managed.version = .{ .major = dlpack.version_major, .minor = 0 };
    managed.deleter = countDelete;
    managed.dl_tensor = .{
        .data = &data,
        .device = .{ .device_type = 1, .device_id = 0 },
        .ndim = 1,
        .dtype = .{ .code = 2, .bits = 32, .lanes = 1 },
        .shape = &shape,
        .strides = &strides,
        .byte_offset = 4,
    };
    const at: f64 = @floatFromInt(@intFromPtr(&managed));
    const before = one_argument_deletes;
    for (0..2) |round| {
        const status = if (round == 0)
            dlpk_import_versioned(at)
        else
            dlpk_import_pointer_versioned(&managed);
        try testing.expectEqual(@as(i32, 0), status);
        const element: f64 = @floatFromInt(@intFromPtr(&data) + 4);
        try testing.expectEqual(element, thread_scratch.address);
        try testing.expectEqual(@as(f64, 3), thread_scratch.description.shape[0]);
        try testing.expect(thread_scratch.owner > 0);
        dlpk_journal_release(thread_scratch.owner);
        try testing.expectEqual(before + round + 1, one_argument_deletes);
    }
    // Refusals are reported there too: no address an f64 holds exactly, then NULL.
    try testing.expectEqual(code(.bad_address), dlpk_import_versioned(abi.exact_max_float));
    try testing.expectEqual(code(.bad_address), thread_scratch.description.status);
    try testing.expectEqual(code(.null_managed), dlpk_import_pointer_versioned(null));
    try testing.expectEqual(code(.null_managed), thread_scratch.description.status);
    try testing.expectEqual(before + 2, one_argument_deletes);
}

test "keyed facts: the generation moves only when a fact changes" {
    const testing = std.testing;
    var keyed = std.mem.zeroes(abi.KeyedDescription);
    keyed.description.ndim = 2;
    keyed.description.device_type = 1;
    keyed.description.shape[0] = 3;
    keyed.description.shape[1] = 4;
    keyed.description.strides[0] = 4;
    keyed.description.strides[1] = 1;
    keyed.description.size = 12;
    keyed.description.setOwner(0x1234_5678_9abc);
    keyed.description.setAddress(abi.exact_max);
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 1), keyed.generation);
    try testing.expectEqual(@as(f64, 0x1234_5678_9abc), keyed.owner);
    try testing.expectEqual(@as(f64, -1), keyed.address);
    // Addresses, the owner and the details are not facts of the layout.
    keyed.description.setAddress(64);
    keyed.description.owner_lo = 128;
    keyed.description.byte_offset = 8;
    keyed.description.detail_found = 5;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 1), keyed.generation);
    try testing.expectEqual(@as(f64, 64), keyed.address);
    // Each fact, in either range or the extents, moves it.
    keyed.description.dtype_bits = 64;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 2), keyed.generation);
    keyed.description.max_offset = 11;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 3), keyed.generation);
    keyed.description.strides[1] = -0.0;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 4), keyed.generation);
    keyed.description.shape[1] = 5;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 5), keyed.generation);
    // Entries past ndim are not compared.
    keyed.description.shape[2] = 9;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 5), keyed.generation);
    keyed.description.ndim = 1;
    keyFacts(&keyed);
    try testing.expectEqual(@as(f64, 6), keyed.generation);
}

test "a whole array exported in one call: its struct, its pin, and the refusals" {
    const testing = std.testing;
    var realm: owner.Realm = .{};
    var values = [_]f32{ 1, 2, 3, 4 };
    const base: [*]u8 = @ptrCast(&values);
    const realm_f: f64 = @floatFromInt(@intFromPtr(&realm));
    const float32: u32 = 2 | 32 << abi.array_word.bits_shift;
    const versioned = export_option.versioned << abi.array_word.options_shift;
    const read_only = dlpack.flag.read_only << abi.array_word.flags_shift;
    const pins_before = stats.get(.pins);
    const bad = -@as(f64, @floatFromInt(invalid));
    // Bytes that are no whole number of elements, sub-byte or no bits, an unknown flag, a NULL
    // buffer, an id that is no count.
    try testing.expectEqual(bad, dlpk_export_array(base, realm_f, 5, 15, float32 | versioned));
    try testing.expectEqual(bad, dlpk_export_array(base, realm_f, 5, 16, 2 | 4 << 8 | versioned));
    try testing.expectEqual(bad, dlpk_export_array(base, realm_f, 5, 16, 2 | versioned));
    const unknown = 0x80 << abi.array_word.flags_shift;
    try testing.expectEqual(bad, dlpk_export_array(base, realm_f, 5, 16, float32 | unknown));
    try testing.expectEqual(bad, dlpk_export_array(null, realm_f, 5, 16, float32 | versioned));
    try testing.expectEqual(bad, dlpk_export_array(base, realm_f, -1, 16, float32 | versioned));
    try testing.expectEqual(pins_before, stats.get(.pins));
    const made = dlpk_export_array(base, realm_f, 5, 16, float32 | read_only | versioned);
    try testing.expect(made > 0);
    const managed: usize = @intFromFloat(made);
    const m: *const dlpack.ManagedTensorVersioned = @ptrFromInt(managed);
    try testing.expectEqual(@as(?*anyopaque, @ptrCast(&values)), m.dl_tensor.data);
    try testing.expectEqual(@as(i32, 1), m.dl_tensor.ndim);
    try testing.expectEqual(@as(i64, 4), m.dl_tensor.shape.?[0]);
    try testing.expectEqual(@as(i64, 1), m.dl_tensor.strides.?[0]);
    try testing.expectEqual(@as(u8, 2), m.dl_tensor.dtype.code);
    try testing.expectEqual(@as(u8, 32), m.dl_tensor.dtype.bits);
    try testing.expectEqual(dlpack.flag.read_only, m.flags);
    try testing.expectEqual(pins_before + 1, stats.get(.pins));
    // Released by a consumer: the pin's id is queued for the realm, once.
    dlpack.deleteManaged(managed, true);
    var out: [4]f64 = undefined;
    try testing.expectEqual(@as(usize, 1), owner.drainRealm(&realm, &out));
    try testing.expectEqual(@as(f64, 5), out[0]);
    try testing.expectEqual(pins_before, stats.get(.pins));
    // A legacy one, disposed by its JS holder: the pin is freed at once.
    const legacy: usize = @intFromFloat(dlpk_export_array(base, realm_f, 6, 8, float32));
    try testing.expect(exports.isOwnExport(legacy, false));
    // Journaled as the top entry, which ends first.
    const entry = -@as(f64, @floatFromInt(legacy * 2));
    const j = journal.local();
    j.entries[0] = entry;
    j.count = 1;
    try testing.expectEqual(@as(f64, 6), dlpk_export_dispose(entry));
    try testing.expectEqual(@as(i32, 0), j.count);
    try testing.expectEqual(@as(usize, 0), owner.drainRealm(&realm, &out));
}

test "journaled releases end their entry, whatever it holds" {
    const testing = std.testing;
    const j = journal.local();
    defer j.count = 0;
    j.entries[0] = 12345; // not an owner record: nothing released
    j.count = 1;
    dlpk_journal_release(12345);
    try testing.expectEqual(@as(i32, 0), j.count);
    j.entries[0] = -2 * 4096 - 1; // a struct in the first page: not readable, nothing deleted
    j.count = 1;
    dlpk_journal_replay();
    try testing.expectEqual(@as(i32, 0), j.count);
    j.entries[0] = -16;
    j.count = 1;
    try testing.expectEqual(@as(f64, 0), dlpk_export_dispose(-16));
    try testing.expectEqual(@as(i32, 0), j.count);
    // Nothing journaled, or a value that is no address: nothing happens.
    dlpk_journal_replay();
    dlpk_journal_release(0.5);
    dlpk_journal_release(-0.5);
    try testing.expectEqual(@as(f64, 0), dlpk_export_dispose(0));
    try testing.expectEqual(@as(i32, 0), j.count);
    try testing.expectEqual(@intFromPtr(j), @as(usize, @intFromFloat(dlpk_journal())));
}

test {
    std.testing.refAllDecls(@This());
    _ = abi;
    _ = admit;
    _ = cpython;
    _ = cuda;
    _ = describe;
    _ = dlpack;
    _ = exchange;
    _ = exports;
    _ = journal;
    _ = mappings;
    _ = memory;
    _ = owner;
    _ = python;
    _ = stats;
    _ = templates;
    _ = tensor;
    _ = verify;
}
