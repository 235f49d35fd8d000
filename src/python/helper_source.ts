/**
 * The Python half of the bridge, run once per interpreter as the module `dlpack_ts`. Capsules,
 * releases and CUDA fences go through builtins libdlpack installs on it (plain C functions, no
 * ctypes), so deleters stay native and nothing ever calls back into JavaScript.
 * @module
 */

/** Python source of the `dlpack_ts` module. */
export const HELPER_SOURCE = `
import json as _json
import sys as _sys

# _native_capsule(holder, flags) and _native_fence(holder, stream) are builtins libdlpack adds to
# this module right after it runs (dlpk_py_install). \`holder\` is the capsule in which a
# DLPackTensor keeps its export template; the template is released when the last reference to
# that capsule goes, so no Python code ever handles a raw address. dlpk_py_install also sets
# DLPackTensor.__dlpack_c_exchange_api__ (the DLPack 1.3 C exchange table, native code in
# zig/src/exchange.zig) and adds _native_exchange_counts(), how often each path of that API ran.

_CapsuleType = type(__import__("datetime").datetime_CAPI)
_new = object.__new__
_HOST = (1, 11)  # CPU, ROCMHost: only stream=None
_CUDA = (2, 3, 13)  # CUDA, CUDAHost, CUDAManaged: the consumer's stream waits for the producer's
_DTYPES = {
    (6, 8): "bool", (0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
    (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
    (2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16",
    (5, 32): "complex32", (5, 64): "complex64", (5, 128): "complex128",
    (7, 8): "float8_e3m4", (8, 8): "float8_e4m3", (9, 8): "float8_e4m3b11fnuz", (10, 8): "float8_e4m3fn",
    (11, 8): "float8_e4m3fnuz", (12, 8): "float8_e5m2", (13, 8): "float8_e5m2fnuz", (14, 8): "float8_e8m0fnu",
    (15, 6): "float6_e2m3fn", (16, 6): "float6_e3m2fn", (17, 4): "float4_e2m1fn",
}


class DLPackTensor:
    """Memory owned by JavaScript (a TypedArray or a dlpack-ts view), shared without a copy.

    Speaks the DLPack protocol: numpy.from_dlpack, torch.from_dlpack and jax.dlpack.from_dlpack
    accept it. Its type also has the DLPack C exchange API (__dlpack_c_exchange_api__), which
    C consumers such as tvm-ffi use without calling Python; read-only data goes through
    __dlpack__ only. The JS memory stays pinned until this object and every array made from it
    are gone.
    Only dlpack-ts makes these (toPython in JavaScript); they cannot be subclassed, pickled or
    deep-copied, and copy.copy returns the object itself (it is immutable).
    """

    __slots__ = ("_template", "_device", "_readonly", "_shape", "_code", "_bits", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError("dlpack_ts.DLPackTensor objects are made by dlpack-ts (toPython in JavaScript)")

    def __init_subclass__(cls, **kwargs):
        raise TypeError("dlpack_ts.DLPackTensor cannot be subclassed")

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        raise TypeError(
            "dlpack_ts.DLPackTensor cannot be deep-copied: it shares JavaScript memory;"
            " copy the data with numpy.from_dlpack(t, copy=True)"
        )

    def __reduce_ex__(self, protocol):
        raise TypeError("dlpack_ts.DLPackTensor cannot be pickled: it shares JavaScript memory of this process")

    def __reduce__(self):
        raise TypeError("dlpack_ts.DLPackTensor cannot be pickled: it shares JavaScript memory of this process")

    def __getstate__(self):
        raise TypeError("dlpack_ts.DLPackTensor has no state to save: it shares JavaScript memory of this process")

    def __setstate__(self, state):
        raise TypeError("dlpack_ts.DLPackTensor objects are made by dlpack-ts (toPython in JavaScript)")

    @property
    def shape(self):
        """The extents, a tuple of ints."""
        return self._shape

    @property
    def dtype(self):
        """The dtype's name ("float32", "bfloat16", ...)."""
        return _DTYPES.get((self._code, self._bits), "code %d bits %d" % (self._code, self._bits))

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        holder = self._template
        if dl_device is not None and tuple(dl_device) != self._device:
            raise BufferError(
                "dlpack-ts: cannot export data on device %r to device %r%s"
                % (self._device, tuple(dl_device), " without a copy" if copy is False else "")
            )
        if self._device[0] in _CUDA:
            # None means the legacy default stream (1); -1 (all ones) asks for no synchronisation.
            status = _native_fence(holder, (1 if stream is None else stream) & 0xFFFFFFFFFFFFFFFF)
            if status == -2:
                raise BufferError("dlpack-ts: stream 0 is not allowed (use 1 for the legacy default stream)")
            if status != 0:
                raise BufferError("dlpack-ts: could not order the consumer stream after the producer (status %d)" % status)
        elif stream is not None:
            raise BufferError("dlpack-ts: stream must be None for host data, got %r" % (stream,))
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        # Read-only data and the legacy struct: _native_capsule refuses with a BufferError.
        return _native_capsule(holder, (1 if versioned else 0) | (2 if copy else 0))

    def __dlpack_device__(self):
        return self._device

    def __repr__(self):
        return "DLPackTensor(shape=%r, dtype=%r, device=%r%s)" % (
            self._shape, self.dtype, self._device, ", readonly" if self._readonly else "")


def _make_tensor(holder, device_type, device_id, readonly, shape, code, bits):
    # The one maker of DLPackTensor objects (called by libdlpack's toPython fast path).
    self = _new(DLPackTensor)
    self._template = holder
    self._device = (device_type, device_id)
    self._readonly = readonly
    self._shape = shape
    self._code = code
    self._bits = bits
    return self


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
