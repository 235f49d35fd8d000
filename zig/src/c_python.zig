//! The C boundary of the embedded-Python bridge (src/python/): every one of these runs with the
//! GIL held by the caller, unless it says it takes it. Error unions become the statuses of
//! abi.zig's `PythonStatus` here.

const std = @import("std");
const abi = @import("abi.zig");
const c_core = @import("c_core.zig");
const c_cuda = @import("c_cuda.zig");
const cpython = @import("cpython.zig");
const describe = @import("describe.zig");
const dlpack = @import("dlpack.zig");
const lend = @import("lend.zig");
const exports = @import("exports.zig");
const python = @import("python.zig");
const tensor = @import("tensor.zig");

const Description = abi.Description;
const import_option = abi.import_option;
const invalid = c_core.invalid;
const isStruct = c_core.isStruct;

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
    return c_cuda.cudaResult(exports.fenceForConsumer(template, true, stream));
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

/// `toPython` of a whole TypedArray in one call: the export `dlpk_export_array` makes from the
/// same arguments (`word` must ask for a versioned struct), held by a new `DLPackTensor`. Returns
/// the new reference; 0 with the exception pending when the object could not be made (the export
/// is then deleted, which queues its pin's release as any deleter does); or minus a status code
/// when nothing was made.
export fn dlpk_py_wrap_array(
    buffer: ?[*]u8,
    realm_address: f64,
    pin_id: f64,
    pin_bytes: f64,
    word: u32,
) f64 {
    if (word >> abi.array_word.options_shift & abi.export_option.versioned == 0) {
        return -@as(f64, @floatFromInt(invalid));
    }
    const made = c_core.exportArray(buffer, realm_address, pin_id, pin_bytes, word);
    if (made <= 0) return made;
    const template: usize = @intFromFloat(made);
    const object = tensor.make(template, false);
    if (object == 0) dlpack.deleteManaged(template, true);
    return @floatFromInt(object);
}

/// `toPython(x, py, { as })`: the object `kind`'s DLPack C exchange table makes from a versioned
/// export template (see lend.wrapAs): a new reference, or 0 with the exception pending (the
/// template then stays the caller's).
export fn dlpk_py_wrap_as(template: f64, kind: f64) f64 {
    const t = abi.addressFromF64(template) orelse return 0;
    const k = abi.addressFromF64(kind) orelse return 0;
    if (!isStruct(t) or k == 0) return 0;
    return @floatFromInt(lend.wrapAs(t, k));
}

/// Whether a `PyObject*` that did not come from the bridge can be dereferenced (see
/// python.checkObject): 0; 1 its header, 2 its type, 3 a metatype is not readable; 16 before
/// `dlpk_py_load`. Reads memory only: no GIL needed.
export fn dlpk_py_check_object(handle: f64) i32 {
    const h = abi.addressFromF64(handle) orelse return invalid;
    if (h == 0) return invalid;
    return python.checkObject(h);
}

/// `fromPython`'s fast path (see python.from), into this thread's scratch as the imports write it.
/// `stream` NaN means None. The producer's name goes to `name_address` (UTF-8, NUL-terminated, at
/// most `name_capacity` bytes).
export fn dlpk_py_from(
    obj: f64,
    max_major: i32,
    max_minor: i32,
    copy: i32,
    device_type: i32,
    device_id: i32,
    stream: f64,
    options: u32,
    name_address: f64,
    name_capacity: u32,
) i32 {
    const out = &c_core.thread_scratch.description;
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
    // Keyed as the imports are: the JS side reuses the facts it built for the generation.
    describe.keyFacts(&c_core.thread_scratch);
    c_core.owed(c_core.thread_scratch.owner);
    return 0;
}
