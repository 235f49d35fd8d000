/**
 * Python (ctypes) helpers for the DLPack C exchange API tests: the 1.3 layout read at its byte
 * offsets, the five functions called through ctypes at those offsets, and a fake producer type
 * whose table is made of ctypes callbacks, made immutable through ctypes as a type defined in C
 * is (fromPython trusts a table on a mutable class only when its code comes with the class's
 * native layout). Run once per interpreter as module `xt`.
 * @module
 */

/** Python source of the `xt` helper module. */
export const EXCHANGE_CTYPES = `
import ctypes
from ctypes import POINTER, byref, c_int, c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p, c_char_p

P = ctypes.pythonapi
P.PyCapsule_GetPointer.restype = c_void_p
P.PyCapsule_GetPointer.argtypes = [ctypes.py_object, c_char_p]
P.PyCapsule_New.restype = ctypes.py_object
P.PyCapsule_New.argtypes = [c_void_p, c_char_p, c_void_p]
P.Py_DecRef.argtypes = [c_void_p]
P.Py_DecRef.restype = None


class DLTensor(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("device_type", c_int32), ("device_id", c_int32), ("ndim", c_int32),
                ("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class Managed(ctypes.Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32), ("manager_ctx", c_void_p), ("deleter", c_void_p),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


assert ctypes.sizeof(DLTensor) == 48 and ctypes.sizeof(Managed) == 80

# The DLPackExchangeAPI fields of the 1.3 header and their byte offsets (64-bit).
LAYOUT = (("major", 0, c_uint32), ("minor", 4, c_uint32), ("prev_api", 8, c_void_p),
          ("managed_tensor_allocator", 16, c_void_p), ("managed_tensor_from_py_object_no_sync", 24, c_void_p),
          ("managed_tensor_to_py_object_no_sync", 32, c_void_p), ("dltensor_from_py_object_no_sync", 40, c_void_p),
          ("current_work_stream", 48, c_void_p))

# PYFUNCTYPE: called with the GIL held, and a -1 with an exception set raises it.
ALLOC = ctypes.PYFUNCTYPE(c_int, c_void_p, POINTER(c_void_p), c_void_p, c_void_p)
FROM = ctypes.PYFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))
TO = ctypes.PYFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))
DLT = ctypes.PYFUNCTYPE(c_int, c_void_p, POINTER(DLTensor))
STREAM = ctypes.PYFUNCTYPE(c_int, c_int32, c_int32, POINTER(c_void_p))
# The same signatures through CFUNCTYPE: ctypes releases the GIL around the call.
FROM_NOGIL = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))
DELETER = ctypes.CFUNCTYPE(None, c_void_p)
SET_ERROR = ctypes.CFUNCTYPE(None, c_void_p, c_char_p, c_char_p)


def table_of(cls):
    """The table behind cls.__dlpack_c_exchange_api__ (a PyCapsule named dlpack_exchange_api)."""
    capsule = cls.__dlpack_c_exchange_api__
    assert type(capsule).__name__ == "PyCapsule", type(capsule)
    return P.PyCapsule_GetPointer(capsule, b"dlpack_exchange_api")


def fields(address):
    return {name: kind.from_address(address + offset).value or 0 for name, offset, kind in LAYOUT}


class Functions:
    def __init__(self, address):
        f = fields(address)
        self.fields = f
        self.allocate = ALLOC(f["managed_tensor_allocator"])
        self.from_object = FROM(f["managed_tensor_from_py_object_no_sync"])
        self.to_object = TO(f["managed_tensor_to_py_object_no_sync"])
        self.dltensor = DLT(f["dltensor_from_py_object_no_sync"])
        self.stream = STREAM(f["current_work_stream"])
        self.from_object_nogil = FROM_NOGIL(f["managed_tensor_from_py_object_no_sync"])


def take_object(address):
    """The object behind a new reference a table returned (the reference is handed over)."""
    obj = ctypes.cast(address, ctypes.py_object).value
    P.Py_DecRef(address)
    return obj


def release(managed_address):
    m = Managed.from_address(managed_address)
    DELETER(m.deleter)(managed_address)


def freeze(cls):
    """Sets Py_TPFLAGS_IMMUTABLETYPE on a class, as C code defining a type does: its attributes,
    __dlpack_c_exchange_api__ included, can no longer be set from Python."""
    offset = next(o for o in range(128, 256, 8) if ctypes.c_ulong.from_address(id(cls) + o).value == cls.__flags__)
    ctypes.c_ulong.from_address(id(cls) + offset).value |= 1 << 8
    P.PyType_Modified(ctypes.py_object(cls))
    assert cls.__flags__ & (1 << 8)
    return cls


def shape_of(m):
    t = m.dl_tensor
    return [t.shape[i] for i in range(t.ndim)], [t.strides[i] for i in range(t.ndim)] if t.strides else None


# ---------------------------------------------------------------------------------------------
# A fake producer type whose table is made of ctypes callbacks. \`behaviour\` says what its
# managed_tensor_from_py_object_no_sync does; \`deleted\` counts its deleter's calls.

class Fake:
    behaviour = "ok"
    device_type = 1
    code = 2
    stream = 0x5000
    deleted = 0
    made = 0
    streams_asked = []
    keep = []


_fake_buffer = (ctypes.c_float * 4)(1, 2, 3, 4)


@DELETER
def _fake_deleter(address):
    Fake.deleted += 1


def _fake_tensor():
    shape = (c_int64 * 1)(0 if Fake.device_type != 1 else 4)
    strides = (c_int64 * 1)(1)
    m = Managed(1, 3, None, ctypes.cast(_fake_deleter, c_void_p).value, 0,
                DLTensor(ctypes.addressof(_fake_buffer), Fake.device_type, 0, 1, Fake.code, 32, 1, shape, strides, 0))
    Fake.keep.append((m, shape, strides))
    return m


@ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_void_p))
def _fake_from(obj, out):
    if Fake.behaviour == "fail":
        return -1
    if Fake.behaviour == "null":
        out[0] = None
        return 0
    Fake.made += 1
    out[0] = ctypes.addressof(_fake_tensor())
    return 0


@ctypes.CFUNCTYPE(c_int, c_int32, c_int32, POINTER(c_void_p))
def _fake_stream(device_type, device_id, out):
    Fake.streams_asked.append((device_type, device_id))
    out[0] = Fake.stream
    return 0


class _Table(ctypes.Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32), ("prev_api", c_void_p), ("allocator", c_void_p),
                ("from_object", c_void_p), ("to_object", c_void_p), ("dltensor", c_void_p), ("stream", c_void_p)]


_v1 = _Table(1, 3, None, None, ctypes.cast(_fake_from, c_void_p).value, None, None,
             ctypes.cast(_fake_stream, c_void_p).value)
# A table of a future major whose prev_api leads to the 1.x one.
_v2 = _Table(2, 0, ctypes.addressof(_v1), None, None, None, None, None)
# A future major with no older table: unusable.
_v2_alone = _Table(2, 0, None, None, None, None, None, None)


def _capsule(table):
    return P.PyCapsule_New(ctypes.addressof(table), b"dlpack_exchange_api", None)


class FakeTensor:
    """Produces through its table only: __dlpack__ raises, so an import proves the table was used."""
    __dlpack_c_exchange_api__ = _capsule(_v1)

    def __dlpack__(self, **kwargs):
        raise RuntimeError("FakeTensor.__dlpack__ must not be called")


class FakeNewerTensor(FakeTensor):
    __dlpack_c_exchange_api__ = _capsule(_v2)


class FakeUnusableTensor(FakeTensor):
    __dlpack_c_exchange_api__ = _capsule(_v2_alone)


class LooseTensor:
    """The same table on a class left mutable: its code is not the class's (ctypes made it at run
    time), so it might as well be another type's copied here; fromPython takes __dlpack__."""
    __dlpack_c_exchange_api__ = _capsule(_v1)

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)


for _cls in (FakeTensor, FakeNewerTensor, FakeUnusableTensor):
    freeze(_cls)


class IntTableTensor:
    """The 1.2 form (an int address): never dereferenced, __dlpack__ is used instead."""
    __dlpack_c_exchange_api__ = 16

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()
`;

/** Counter names in the order `dlpack_ts._native_exchange_counts()` returns them. */
export const COUNTER_NAMES = [
  "allocator",
  "fromPyObject",
  "toPyObject",
  "dltensorFromPyObject",
  "currentWorkStream",
  "consumerImports",
  "consumerFallbacks",
  "consumerToPyObject",
  "dunderDlpack",
] as const;

/** Python statements that make module `xt` from {@link EXCHANGE_CTYPES} (once per interpreter). */
export const INSTALL_XT = [
  "import sys as _sys, types as _types",
  "if 'xt' not in _sys.modules:",
  "    _m = _types.ModuleType('xt')",
  `    exec(${JSON.stringify(EXCHANGE_CTYPES)}, _m.__dict__)`,
  "    _sys.modules['xt'] = _m",
  "import xt",
].join("\n");
