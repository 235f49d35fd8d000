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

# _native_capsule(template, flags), _native_release(template) and _native_fence(template, stream)
# are builtins libdlpack adds to this module right after it runs (dlpk_py_install).

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
    accept it. The JS memory stays pinned until this object and every array made from it are gone.
    """

    __slots__ = ("_template", "_device", "_readonly", "shape", "_code", "_bits", "__weakref__")

    def __init__(self, template, device_type, device_id, readonly, shape, code, bits):
        self._template = template
        self._device = (device_type, device_id)
        self._readonly = readonly
        self.shape = shape
        self._code = code
        self._bits = bits

    @property
    def dtype(self):
        """The dtype's name ("float32", "bfloat16", ...)."""
        return _DTYPES.get((self._code, self._bits), "code %d bits %d" % (self._code, self._bits))

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        template = self._template
        if not template:
            raise BufferError("dlpack-ts: this tensor was released")
        if dl_device is not None and tuple(dl_device) != self._device:
            raise BufferError(
                "dlpack-ts: cannot export data on device %r to device %r%s"
                % (self._device, tuple(dl_device), " without a copy" if copy is False else "")
            )
        if self._device[0] in _CUDA:
            # None means the legacy default stream (1); -1 (all ones) asks for no synchronisation.
            status = _native_fence(template, (1 if stream is None else stream) & 0xFFFFFFFFFFFFFFFF)
            if status == -2:
                raise BufferError("dlpack-ts: stream 0 is not allowed (use 1 for the legacy default stream)")
            if status != 0:
                raise BufferError("dlpack-ts: could not order the consumer stream after the producer (status %d)" % status)
        elif stream is not None:
            raise BufferError("dlpack-ts: stream must be None for host data, got %r" % (stream,))
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        if not versioned and self._readonly and not copy:
            raise BufferError(
                "dlpack-ts: read-only data cannot be exported through the legacy DLPack struct"
                " (ask for max_version >= (1, 0))"
            )
        return _native_capsule(template, (1 if versioned else 0) | (2 if copy else 0))

    def __dlpack_device__(self):
        return self._device

    def __repr__(self):
        return "DLPackTensor(shape=%r, dtype=%r, device=%r%s)" % (
            self.shape, self.dtype, self._device, ", readonly" if self._readonly else "")

    def _release(self):
        template = self._template
        if template:
            self._template = 0
            _native_release(template)

    def __del__(self):
        try:
            self._release()
        except Exception:  # interpreter shutdown: the module may already be torn down
            pass


def _producer_name(obj):
    kind = type(obj)
    module = getattr(kind, "__module__", "builtins")
    return kind.__qualname__ if module == "builtins" else module + "." + kind.__qualname__


def _capsule_of(obj, max_version, copy, dl_device, stream):
    """The consumer side of the protocol, as numpy does it. Returns (capsule, producer, iface)."""
    producer = _producer_name(obj)
    if type(obj).__name__ == "PyCapsule":
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
        return capsule, producer, None
    iface = getattr(obj, "__array_interface__", None)
    if iface is not None:
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
        return None, producer, _json.dumps(fields)
    raise TypeError(producer + " supports neither __dlpack__ nor __array_interface__")


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
