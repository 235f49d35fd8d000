//! What some producers' tensors hold that no DLPack struct can say, checked before `fromPython`
//! imports them, so that it never returns values the producer does not hold:
//! - torch's conjugate and negative bits (lazy views: the memory holds the values before the
//!   conjugation or negation). torch's `__dlpack__` refuses conjugated tensors but exports negated
//!   ones as they are, and its C exchange table takes both as they are: the values are resolved (a
//!   copy made by torch) when the caller allows a copy, else refused with BufferError;
//! - tensors that require gradients (torch's `requires_grad`, PaddlePaddle's `stop_gradient`
//!   False): their `__dlpack__` refuses them with BufferError, their tables export them writable;
//!   `fromPython` takes `__dlpack__` for them, so the framework's own refusal is what the caller
//!   sees.
//! The framework of a type is found once, when its entry is made (exchange.zig). GIL held.

const std = @import("std");
const assert = std.debug.assert;
const cpython = @import("cpython.zig");

const PyObject = cpython.PyObject;
const Api = cpython.Api;

pub const Framework = enum(u8) {
    other,
    /// An instance of torch.Tensor itself (its C methods answer without Python code).
    torch,
    /// An instance of a subclass of torch.Tensor: its `__torch_function__` may run Python code on
    /// every method (torch.Tensor's does), or refuse them (ReadOnlyTensorWrapper's does), so the
    /// checks run with subclass torch functions disabled, as torch's own `__dlpack__` runs them.
    torch_subclass,
    /// A paddle.Tensor (or a subclass).
    paddle,
};

/// Types followed along `tp_base` before giving up (real chains end within a few).
const chain_max = 64;

/// Interned attribute names (the checks run on every import of such a tensor).
const Names = struct {
    requires_grad: *PyObject,
    stop_gradient: *PyObject,
    is_conj: *PyObject,
    is_neg: *PyObject,
    resolve_conj: *PyObject,
    resolve_neg: *PyObject,
};
var names: ?Names = null;

/// Interns the names (once). GIL held.
pub fn install(a: Api) error{Raised}!void {
    if (names != null) return;
    const intern = a.PyUnicode_InternFromString;
    names = .{
        .requires_grad = intern("requires_grad") orelse return error.Raised,
        .stop_gradient = intern("stop_gradient") orelse return error.Raised,
        .is_conj = intern("is_conj") orelse return error.Raised,
        .is_neg = intern("is_neg") orelse return error.Raised,
        .resolve_conj = intern("resolve_conj") orelse return error.Raised,
        .resolve_neg = intern("resolve_neg") orelse return error.Raised,
    };
}

/// The framework of `kind`: torch when a static type `torch._C.TensorBase` is on its `tp_base`
/// chain (a static type's name cannot be set from Python), PaddlePaddle when a type named
/// `paddle.Tensor` is (a name another class may copy: it then only gets checks it does not need).
/// May run Python code (a metaclass' attributes); never raises.
pub fn frameworkOf(a: Api, kind: *PyObject) Framework {
    var current: ?*PyObject = kind;
    var depth: usize = 0;
    while (current) |t| : (depth += 1) {
        if (depth == chain_max) break;
        const static = a.PyType_GetFlags(t) & cpython.tpflags_heap == 0;
        if (static and named(a, t, "torch._C", "TensorBase")) {
            return if (depth == 1) .torch else .torch_subclass;
        }
        if (named(a, t, "paddle", "Tensor")) return .paddle;
        current = @ptrCast(a.PyType_GetSlot(t, cpython.slot.tp_base));
    }
    return .other;
}

/// Whether the type's `__module__` and `__qualname__` are these. Clears what it raised.
fn named(a: Api, kind: *PyObject, module: []const u8, qualname: []const u8) bool {
    defer a.PyErr_Clear();
    return attributeIs(a, kind, "__qualname__", qualname) and
        attributeIs(a, kind, "__module__", module);
}

fn attributeIs(a: Api, object: *PyObject, name: [*:0]const u8, expected: []const u8) bool {
    const value = a.PyObject_GetAttrString(object, name) orelse return false;
    defer a.Py_DecRef(value);
    var len: isize = 0;
    const bytes = a.PyUnicode_AsUTF8AndSize(value, &len) orelse return false;
    return std.mem.eql(u8, bytes[0..@intCast(len)], expected);
}

/// What `fromPython` does with a producer's tensor.
pub const Verdict = enum {
    /// Nothing DLPack cannot say: import it as it is.
    plain,
    /// It requires gradients: only through `__dlpack__`, whose refusal the caller sees.
    dunder_only,
    /// Conjugate or negative bit set: import the resolved copy `resolveLazy` makes, or refuse.
    lazy,
};

/// The verdict on `object` of a type of `framework`; null with the exception set when asking
/// raised.
pub fn verdictOn(a: Api, framework: Framework, object: *PyObject) ?Verdict {
    const n = names.?; // installed with the helper module, before any entry exists
    return switch (framework) {
        .other => .plain,
        .paddle => {
            const stopped = truthOf(a, object, n.stop_gradient) orelse return null;
            return if (stopped) .plain else .dunder_only;
        },
        .torch => torchVerdict(a, object),
        .torch_subclass => {
            const disabled = enterTorchDisabled(a) orelse return null;
            defer exitTorchDisabled(a, disabled);
            return torchVerdict(a, object);
        },
    };
}

fn torchVerdict(a: Api, object: *PyObject) ?Verdict {
    const n = names.?;
    if (truthOf(a, object, n.requires_grad) orelse return null) return .dunder_only;
    if (callTruth(a, object, n.is_conj) orelse return null) return .lazy;
    if (callTruth(a, object, n.is_neg) orelse return null) return .lazy;
    return .plain;
}

/// `resolve_neg(resolve_conj(object))`: a new tensor holding the values `object` stands for (a new
/// reference), or null with the exception set.
pub fn resolveLazy(a: Api, framework: Framework, object: *PyObject) ?*PyObject {
    assert(framework == .torch or framework == .torch_subclass);
    var disabled: ?*PyObject = null;
    if (framework == .torch_subclass) disabled = enterTorchDisabled(a) orelse return null;
    defer if (disabled) |d| exitTorchDisabled(a, d);
    const conj = callMethod(a, object, names.?.resolve_conj) orelse return null;
    defer a.Py_DecRef(conj);
    return callMethod(a, conj, names.?.resolve_neg);
}

fn truthOf(a: Api, object: *PyObject, name: *PyObject) ?bool {
    const value = a.PyObject_GetAttr(object, name) orelse return null;
    defer a.Py_DecRef(value);
    const truth = a.PyObject_IsTrue(value);
    if (truth < 0) return null;
    return truth > 0;
}

fn callTruth(a: Api, object: *PyObject, name: *PyObject) ?bool {
    const value = callMethod(a, object, name) orelse return null;
    defer a.Py_DecRef(value);
    const truth = a.PyObject_IsTrue(value);
    if (truth < 0) return null;
    return truth > 0;
}

/// `object.name()` (through vectorcall: no bound method made): a new reference, or null with the
/// exception set.
fn callMethod(a: Api, object: *PyObject, name: *PyObject) ?*PyObject {
    const args = [1]?*PyObject{object};
    return a.PyObject_VectorcallMethod(name, &args, 1, null);
}

/// `object.name()` for a name used once in a while.
fn callNamed(a: Api, object: *PyObject, name: [*:0]const u8) ?*PyObject {
    const method = a.PyObject_GetAttrString(object, name) orelse return null;
    defer a.Py_DecRef(method);
    const args = a.PyTuple_New(0) orelse return null;
    defer a.Py_DecRef(args);
    return a.PyObject_Call(method, args, null);
}

/// `torch._C.DisableTorchFunctionSubclass()` entered: the guard to exit, or null with the
/// exception set.
fn enterTorchDisabled(a: Api) ?*PyObject {
    const module = a.PyImport_ImportModule("torch._C") orelse return null;
    defer a.Py_DecRef(module);
    const guard = callNamed(a, module, "DisableTorchFunctionSubclass") orelse return null;
    const entered = callNamed(a, guard, "__enter__") orelse {
        a.Py_DecRef(guard);
        return null;
    };
    a.Py_DecRef(entered);
    return guard;
}

/// Leaves the guard (keeping a pending exception) and drops it.
fn exitTorchDisabled(a: Api, guard: *PyObject) void {
    defer a.Py_DecRef(guard);
    var kind: ?*PyObject = null;
    var value: ?*PyObject = null;
    var traceback: ?*PyObject = null;
    a.PyErr_Fetch(&kind, &value, &traceback);
    const method = a.PyObject_GetAttrString(guard, "__exit__");
    if (method) |m| {
        defer a.Py_DecRef(m);
        const none = a._Py_NoneStruct;
        a.Py_IncRef(none);
        a.Py_IncRef(none);
        a.Py_IncRef(none);
        if (cpython.newTuple(a, &.{ none, none, none })) |args| {
            defer a.Py_DecRef(args);
            if (a.PyObject_Call(m, args, null)) |r| a.Py_DecRef(r);
        }
    }
    a.PyErr_Clear();
    a.PyErr_Restore(kind, value, traceback);
}
