/**
 * The Python half of the bridge, run once per interpreter as the module `dlpack_ts`: the slow and
 * rare paths only (objects without `__dlpack__`, error messages, JSON). `DLPackTensor` and the
 * negotiation are native (libdlpack adds the type to this module), so deleters stay native,
 * nothing ever calls back into JavaScript, and no ABI fact is written here.
 * @module
 */

/** Python source of the `dlpack_ts` module. */
export const HELPER_SOURCE = `
import json as _json
import sys as _sys

# dlpk_py_install adds DLPackTensor to this module right after it runs: a type written in C
# (zig/src/tensor.zig) whose __dlpack__ negotiates natively and whose export is held where no
# Python code reaches it; its type also has __dlpack_c_exchange_api__ (zig/src/exchange.zig).
# _native_exchange_counts() says how often each path of that API ran. fromPython negotiates in C
# too (zig/src/python.zig) and calls back here only for objects without __dlpack__ (_capsule_of)
# and to word its errors (_not_capsule).

_CapsuleType = type(__import__("datetime").datetime_CAPI)


def _producer_name(obj):
    kind = type(obj)
    module = getattr(kind, "__module__", "builtins")
    return kind.__qualname__ if module == "builtins" else module + "." + kind.__qualname__


def _capsule_of(obj, max_version, copy, dl_device, stream):
    """The consumer side of the protocol, as numpy does it. Returns (capsule, producer, iface)."""
    producer = _producer_name(obj)
    if type(obj) is _CapsuleType:
        return obj, "PyCapsule", None
    method = getattr(obj, "__dlpack__", None)
    if method is not None:
        kwargs = {"stream": stream, "max_version": max_version}
        if dl_device is not None:
            kwargs["dl_device"] = dl_device
        if copy is not None:
            kwargs["copy"] = copy
        try:
            capsule = method(**kwargs)
        except TypeError:
            # A producer from before the 2023 keywords: only \`stream\` is understood.
            if dl_device is not None or copy is not None:
                raise BufferError(producer + ".__dlpack__ does not accept dl_device or copy")
            capsule = method(stream=stream) if stream is not None else method()
        if type(capsule) is not _CapsuleType:
            raise TypeError("%s.__dlpack__ returned %s, not a PyCapsule" % (producer, _shown(capsule)))
        return capsule, producer, None
    iface = _interface_of(obj, producer)
    if iface is None:
        raise TypeError(producer + " supports neither __dlpack__ nor __array_interface__")
    return None, producer, iface


def _not_capsule(obj, value):
    raise TypeError("%s.__dlpack__ returned %s, not a PyCapsule" % (_producer_name(obj), _shown(value)))


def _shown(value):
    text = repr(value) if value is None or isinstance(value, (bool, int, float, str)) else "a " + _producer_name(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _interface_of(obj, producer):
    """The fields of obj.__array_interface__ as JSON, or None when it has none."""
    iface = getattr(obj, "__array_interface__", None)
    if iface is None:
        return None
    if not isinstance(iface, dict):
        raise TypeError("%s.__array_interface__ is %s, not a dict" % (producer, _shown(iface)))
    data = iface.get("data")
    if not isinstance(data, tuple):
        raise BufferError(producer + ".__array_interface__ exposes its data as a buffer, not a pointer")
    strides = iface.get("strides")
    fields = {
        "data": [int(data[0]), bool(data[1])],
        "shape": [int(e) for e in iface["shape"]],
        "strides": None if strides is None else [int(s) for s in strides],
        "typestr": iface["typestr"],
        "version": int(iface.get("version", 3)),
        "masked": iface.get("mask") is not None,
    }
    return _json.dumps(fields)


def _interface_json(obj):
    """The JSON fields of obj.__array_interface__ (the second step of an import through it)."""
    producer = _producer_name(obj)
    iface = _interface_of(obj, producer)
    if iface is None:
        raise TypeError(producer + " no longer has an __array_interface__")
    return iface


def _plain(value):
    # JSON has no NaN or infinities: mark them so the JS side can restore them.
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return {"$float": repr(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _to_json(obj):
    def convert(value):
        if hasattr(value, "tolist"):
            return _plain(value.tolist())
        if isinstance(value, (tuple, set, frozenset)):
            return _plain(list(value))
        if isinstance(value, complex):
            return _plain([value.real, value.imag])
        if isinstance(value, bytes):
            return list(value)
        raise TypeError("%s cannot be converted to JSON" % _producer_name(value))

    return _json.dumps(_plain(obj), default=convert, allow_nan=False)


def _extend_path(paths, executable):
    for p in paths:
        if p not in _sys.path:
            _sys.path.append(p)
    if executable:
        _sys.executable = executable
    if not getattr(_sys, "argv", None):
        _sys.argv = [""]  # absl (JAX) and argparse users expect it
`;
