/**
 * The interop matrix as data: one table of Python peers (how each makes, exports, imports and
 * reads back a tensor, which dtypes, layouts and DLPack generations it offers and accepts, and what
 * it is known to refuse), and one generic runner that turns every combination into a case. Each
 * case checks the address (zero-copy), dtype, shape and every value. tests/python/matrix.test.ts
 * registers the cases; a peer that cannot share a process with the others runs its cases in a child
 * process (tests/support/peer_child.ts) whose PYTHONPATH names only the base site and its own.
 * @module
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import {
  type AnyTypedArray,
  type BufferView,
  DLPackError,
  type DType,
  DTYPES,
  empty,
  type Exportable,
  exportDLPack,
  type ExportOptions,
  importDLPack,
  stats,
  zeros,
} from "../../mod.ts";
import { fromPython, type FromPythonOptions, type Python, toPython } from "../../python.ts";
import { runtime } from "../../ffi/mod.ts";
import { encodeMiniFloat, isMiniFloat } from "../../src/facts/scalars.ts";
import { dtypeInfo } from "../../src/facts/dtypes.ts";
import { repoRoot } from "./harness.ts";

/** A DLPack struct generation. */
export type Generation = "versioned" | "legacy";

/** What one case found. */
export type Outcome =
  /** Same address on both sides, every value checked. */
  | "zero-copy"
  /** The consumer copied (values checked); allowed only where the table says so. */
  | "copy"
  /** A documented refusal, checked as the expected clear error. */
  | "refused"
  /** A documented peer deviation from the protocol (another dtype, another generation), checked. */
  | "deviates"
  | "failed";

/** One exercised cell. */
export interface Result {
  pair: string;
  dtype: DType;
  generation: Generation;
  /** The layout, or for a protocol case the row (one request of the protocol). */
  layout: string;
  outcome: Outcome;
  detail: string;
  /** A case of the protocol tables (a `__dlpack__` argument, a tensor state), not of a layout. */
  protocol?: boolean;
}

/** A behaviour of a peer the table documents, checked by every case it covers. */
export interface Known {
  readonly kind: "refuses" | "deviates";
  readonly dtypes?: readonly DType[];
  readonly layouts?: readonly string[];
  readonly generations?: readonly Generation[];
  /** "refuses": what the peer raises. "deviates": the peer takes or gives the tensor, but a check
   * (dtype, shape, values, generation) fails the way this matches. */
  readonly match: RegExp;
  /** Why, in a few words (shown in docs/python.md). */
  readonly detail: string;
}

/** A layout a peer produces: a Python expression for the peer's tensor (using `make(a)`, which
 * turns a C-contiguous numpy array of `base` values into the peer's tensor), and the numpy
 * expression with the values it must hold. */
export interface PeerLayout {
  readonly peer: string;
  readonly expect: string;
}

/** Peer → JS. */
export interface PeerExport {
  readonly generations: readonly Generation[];
  readonly layouts: Readonly<Record<string, PeerLayout>>;
  /** What `fromPython` is handed (default: the tensor `src` itself). */
  readonly handOver?: string;
  /** Python expression for the address of `src`'s element 0. */
  readonly address: string;
  /** The dtypes it exports (default: the peer's dtypes). */
  readonly dtypes?: readonly DType[];
  readonly known?: readonly Known[];
}

/** JS → peer. */
export interface PeerImport {
  readonly generations: readonly Generation[];
  /** Names from {@link IMPORT_LAYOUTS}. */
  readonly layouts: readonly string[];
  /** Python expression importing `producer` ("Spy(t)" or "LegacyOnly(t)"). */
  readonly consume: (producer: string, generation: Generation) => string;
  /** Python expression for the address of `y`'s element 0. */
  readonly address: string;
  /** Python expression naming `y`'s dtype the way DType does ("float8_e4m3fn"), or "dlpack":
   * the dtype `y` exports back (for peers that only carry DLPack's dtype along). */
  readonly dtypeName: string;
  /** Python expression giving `y` as a numpy array for the value check, or "dlpack": read back
   * into JS through the peer's own export (for peers without a host array type). */
  readonly readback: string;
  /** TypedArrays are copied into a 64-byte-aligned library allocation first (the peer misbehaves
   * on less-aligned memory); the reason. */
  readonly alignedOnly?: string;
  /** Layouts where the peer may copy instead of aliasing, and why. */
  readonly mayCopy?: { readonly layouts: readonly string[]; readonly detail: string };
  /** Extra Python assertion on `y` (may use `is_versioned` and `is_readonly`). */
  readonly check?: string;
  /** The dtypes it imports (default: the peer's dtypes). */
  readonly dtypes?: readonly DType[];
  readonly known?: readonly Known[];
}

/** The protocol's arguments and tensor states, per peer (docs/python.md's protocol tables). */
export interface PeerProtocol {
  /** Peer → JS: tensors in a state DLPack cannot say, by row of {@link STATE_ROWS}, with the numpy
   * values they stand for (`make(a)` as in the layouts; `base` holds float64 values, or complex128
   * ones for the conjugate bit). */
  readonly states?: Readonly<Partial<Record<StateRow, PeerLayout>>>;
  /** JS → peer: the peer's import of `producer` with each argument; "as is" without one (its
   * `__dlpack__` call shows the stream and max_version the peer passes). Rows left out: the peer's
   * import has no such argument. */
  readonly consume?: Readonly<Partial<Record<"as is" | ImportArgumentRow, (producer: string) => string>>>;
  /** What the peer does with each request, by row (in `layouts`): peer → JS ... */
  readonly exportKnown?: readonly Known[];
  /** ... and JS → peer. */
  readonly importKnown?: readonly Known[];
}

/** Peer → JS: `fromPython` options, one request each, passed on to the peer's `__dlpack__`. */
export const EXPORT_REQUESTS: Readonly<Record<string, FromPythonOptions>> = {
  "stream=-1": { stream: -1 },
  "max_version=(2, 0)": { maxVersion: [2, 0] },
  "dl_device=(1, 0)": { device: { type: "cpu" } },
  "copy=True": { copy: true },
  "copy=False": { copy: false },
};

/** Peer → JS: tensor states that no DLPack struct carries. */
export const STATE_ROWS = ["conjugate bit", "negative bit", "requires grad"] as const;
type StateRow = (typeof STATE_ROWS)[number];

/** JS → peer: the rows, each an import by the peer of a DLPackTensor over 64-byte-aligned memory. */
export const IMPORT_ROWS = [
  "stream (as passed)",
  "max_version (as asked)",
  "dl_device=(1, 0)",
  "copy=True",
  "copy=False",
] as const;
type ImportArgumentRow = "dl_device=(1, 0)" | "copy=True" | "copy=False";

/** One Python framework in the matrix. */
export interface Peer {
  /** Column name in the matrix. */
  readonly name: string;
  /** The module whose presence decides whether the peer runs. */
  readonly module: string;
  /** tools/python-peers/<site>.txt, installed by tools/python.sh into .tools/python/peers/<site>;
   * "base" for tools/python-requirements.txt. */
  readonly site: string;
  /** "child": its cases run in a process of their own, and why. */
  readonly isolate?: string;
  /** Python run once before the first case: imports, `make(a)`, helpers. */
  readonly setup: string;
  readonly dtypes: readonly DType[];
  readonly exports?: PeerExport;
  readonly imports?: PeerImport;
  readonly protocol?: PeerProtocol;
}

// ---------------------------------------------------------------------------------------------
// Dtypes and layouts shared by the table.

/** The dtypes numpy has natively. */
export const NUMPY_DTYPES: readonly DType[] = [
  "bool",
  "int8",
  "int16",
  "int32",
  "int64",
  "uint8",
  "uint16",
  "uint32",
  "uint64",
  "float16",
  "float32",
  "float64",
  "complex64",
  "complex128",
];

/** The dtypes ml_dtypes adds to numpy. */
export const ML_DTYPES: readonly DType[] = [
  "bfloat16",
  "float8_e3m4",
  "float8_e4m3",
  "float8_e4m3b11fnuz",
  "float8_e4m3fn",
  "float8_e4m3fnuz",
  "float8_e5m2",
  "float8_e5m2fnuz",
  "float8_e8m0fnu",
  "float4_e2m1fn",
];

const TORCH_FLOAT8: readonly DType[] = [
  "float8_e4m3fn",
  "float8_e5m2",
  "float8_e4m3fnuz",
  "float8_e5m2fnuz",
  "float8_e8m0fnu",
];

/** Peer layouts in numpy terms (`make` turns the numpy array into the peer's tensor). */
const STD = {
  "C": { peer: "make(base.reshape(2, 3))", expect: "base.reshape(2, 3)" },
  "F": { peer: "make(base.reshape(3, 2)).T", expect: "base.reshape(3, 2).T" },
  "sliced with offset": {
    peer: "make(np.concatenate([base, base]).reshape(3, 4))[1:, 1:3]",
    expect: "np.concatenate([base, base]).reshape(3, 4)[1:, 1:3]",
  },
  "0-d": { peer: "make(base[3:4].reshape(()))", expect: "base[3:4].reshape(())" },
  "size 0": { peer: "make(base[:0].reshape(0, 3))", expect: "base[:0].reshape(0, 3)" },
} as const satisfies Readonly<Record<string, PeerLayout>>;

/** Layouts numpy itself makes (numpy arrays as they are, and the peers that wrap them). */
const NUMPY_MADE: Readonly<Record<string, PeerLayout>> = {
  "C": STD.C,
  "F": { peer: "make(np.asfortranarray(base.reshape(2, 3)))", expect: "base.reshape(2, 3)" },
  "negative strides": { peer: "make(base.reshape(2, 3)[:, ::-1])", expect: "base.reshape(2, 3)[:, ::-1]" },
  "sliced with offset": {
    peer: "make(np.concatenate([base, base]).reshape(3, 4)[1:, 1:3])",
    expect: "np.concatenate([base, base]).reshape(3, 4)[1:, 1:3]",
  },
  "0-d": STD["0-d"],
  "size 0": STD["size 0"],
  "read-only": { peer: "make(readonly(base.reshape(2, 3)))", expect: "base.reshape(2, 3)" },
};

/** A JS source layout: export options over 6 (or 12) elements, or a library allocation. */
export interface ImportLayout {
  readonly opts: ExportOptions;
  /** Elements from the array start to element 0 (for the expected address). */
  readonly offset: number;
  /** Export an `empty()` (filled with the values) or `zeros()` allocation instead of a TypedArray. */
  readonly memory?: "empty" | "zeros";
}

/** JS sources: TypedArrays with export options describing each layout, and library allocations. */
export const IMPORT_LAYOUTS: Readonly<Record<string, ImportLayout>> = {
  "C": { opts: { shape: [2, 3] }, offset: 0 },
  "F": { opts: { shape: [2, 3], strides: [1, 2] }, offset: 0 },
  "negative strides": { opts: { shape: [2, 3], strides: [3, -1], offset: 2 }, offset: 2 },
  "sliced with offset": { opts: { shape: [2], strides: [2], offset: 1 }, offset: 1 },
  "0-d": { opts: { shape: [], offset: 4 }, offset: 4 },
  "size 0": { opts: { shape: [0, 3] }, offset: 0 },
  "read-only": { opts: { shape: [2, 3], readonly: true }, offset: 0 },
  "C, empty()": { opts: { shape: [2, 3] }, offset: 0, memory: "empty" },
  "C, zeros()": { opts: { shape: [2, 3] }, offset: 0, memory: "zeros" },
};

const ALL_JS_LAYOUTS = Object.keys(IMPORT_LAYOUTS);

// ---------------------------------------------------------------------------------------------
// The table.

/** Python every case can use: value flattening, producers that force or record a generation. */
const PRELUDE = `
import numpy as np, ml_dtypes
def flat(a):
    a = np.asarray(a)
    if a.dtype.kind == 'c':
        return [[float(v.real), float(v.imag)] for v in a.reshape(-1)]
    if a.dtype.kind == 'V' or a.dtype.type.__module__.startswith('ml_dtypes'):
        return [float(v) for v in a.reshape(-1)]
    return a.reshape(-1).tolist()
def readonly(a):
    a = a.copy(); a.flags.writeable = False; return a
class LegacyOnly:
    '''A producer that only speaks the pre-1.0 protocol (no max_version).'''
    def __init__(self, inner): self.inner = inner
    def __dlpack__(self, stream=None): return self.inner.__dlpack__()
    def __dlpack_device__(self): return self.inner.__dlpack_device__()
class Spy:
    '''Passes every keyword on, and records them (and the max_version) the consumer asked for.'''
    asked = None
    kw = None
    def __init__(self, inner): self.inner = inner
    def __dlpack__(self, **kw):
        Spy.asked = kw.get('max_version'); Spy.kw = dict(kw); return self.inner.__dlpack__(**kw)
    def __dlpack_device__(self): return self.inner.__dlpack_device__()
`;

/** numpy's refusal of a stream for host data. */
const STREAM_REFUSED_BY_NUMPY: Known = {
  kind: "refuses",
  layouts: ["stream=-1"],
  match: /RuntimeError: NumPy only supports stream=None/,
  detail: "numpy takes only stream=None",
};

/** The peers. numpy, JAX and pyarrow come from tools/python-requirements.txt; the others from
 * tools/python-peers/. */
export const PEERS: readonly Peer[] = [
  {
    name: "numpy",
    module: "numpy",
    site: "base",
    setup: "def make(a): return a",
    dtypes: NUMPY_DTYPES,
    exports: {
      generations: ["versioned", "legacy"],
      layouts: NUMPY_MADE,
      address: "src.ctypes.data",
      known: [{
        kind: "refuses",
        generations: ["legacy"],
        layouts: ["read-only"],
        match: /BufferError/,
        detail: "numpy raises BufferError for a legacy export of read-only data",
      }],
    },
    imports: {
      generations: ["versioned", "legacy"],
      layouts: ALL_JS_LAYOUTS,
      consume: (producer) => `np.from_dlpack(${producer})`,
      address: "y.ctypes.data",
      dtypeName: "y.dtype.name",
      readback: "y",
      // numpy marks legacy imports read-only; versioned ones follow READ_ONLY.
      check: "assert y.flags.writeable == (is_versioned and not is_readonly), y.flags.writeable",
    },
    protocol: {
      consume: {
        "as is": (producer) => `np.from_dlpack(${producer})`,
        "dl_device=(1, 0)": (producer) => `np.from_dlpack(${producer}, device="cpu")`,
        "copy=True": (producer) => `np.from_dlpack(${producer}, copy=True)`,
        "copy=False": (producer) => `np.from_dlpack(${producer}, copy=False)`,
      },
      exportKnown: [STREAM_REFUSED_BY_NUMPY],
    },
  },
  {
    name: "JAX",
    module: "jax",
    site: "base",
    setup: [
      "import jax, jax.numpy as jnp",
      "jax.config.update('jax_enable_x64', True)",
      "def make(a): return jnp.asarray(a)",
    ].join("\n"),
    dtypes: [...NUMPY_DTYPES, ...ML_DTYPES],
    exports: {
      // JAX answers every request with the legacy struct.
      generations: ["legacy"],
      layouts: { "C": STD.C, "0-d": STD["0-d"], "size 0": STD["size 0"] },
      address: "src.unsafe_buffer_pointer()",
    },
    imports: {
      // jax.dlpack.from_dlpack calls __dlpack__(stream=None): it asks for the legacy struct.
      generations: ["legacy"],
      layouts: ALL_JS_LAYOUTS,
      consume: (producer) => `jax.dlpack.from_dlpack(${producer})`,
      address: "y.unsafe_buffer_pointer()",
      dtypeName: "y.dtype.name",
      readback: "np.asarray(y)",
      mayCopy: {
        layouts: ["C", "0-d", "F"],
        detail: "JAX copied: XLA's CPU client aliases only 64-byte-aligned buffers",
      },
      known: [
        {
          kind: "refuses",
          layouts: ["negative strides", "sliced with offset"],
          match: /UNIMPLEMENTED: Only DLPack tensors with trivial \(compact\) striding/,
          detail: "JAX refuses non-compact strides (negative, or with gaps)",
        },
        {
          kind: "refuses",
          dtypes: ["float4_e2m1fn"],
          match: /UNIMPLEMENTED: PjRt CPU buffers only support default layout/,
          detail: "JAX cannot import packed fp4",
        },
      ],
    },
    protocol: {
      consume: {
        "as is": (producer) => `jax.dlpack.from_dlpack(${producer})`,
        "dl_device=(1, 0)": (producer) => `jax.dlpack.from_dlpack(${producer}, device=jax.devices("cpu")[0])`,
        "copy=True": (producer) => `jax.dlpack.from_dlpack(${producer}, copy=True)`,
        "copy=False": (producer) => `jax.dlpack.from_dlpack(${producer}, copy=False)`,
      },
      exportKnown: [{
        kind: "refuses",
        layouts: ["stream=-1"],
        match: /UNIMPLEMENTED: WaitUntilBufferReadyOnStream is only implemented for GPU/,
        detail: "JAX takes a stream only for GPU data",
      }],
      importKnown: [{
        kind: "deviates",
        layouts: ["copy=True"],
        match: /copy=True gave JS memory/,
        detail: "jax.dlpack.from_dlpack(t, copy=True) still aliases the memory in JAX 0.10.2",
      }],
    },
  },
  {
    name: "pyarrow",
    module: "pyarrow",
    site: "base",
    setup: "import pyarrow as pa",
    dtypes: [
      "bool",
      "int8",
      "int16",
      "int32",
      "int64",
      "uint8",
      "uint16",
      "uint32",
      "uint64",
      "float16",
      "float32",
      "float64",
    ],
    exports: {
      // pyarrow exports primitive arrays without nulls, legacy struct only.
      generations: ["legacy"],
      layouts: {
        "C": { peer: "pa.array(base)", expect: "base" },
        "sliced with offset": { peer: "pa.array(base).slice(2, 3)", expect: "base[2:5]" },
        "size 0": { peer: "pa.array(base[:0])", expect: "base[:0]" },
      },
      address: "src.buffers()[1].address + src.offset * src.type.byte_width",
      known: [{
        kind: "refuses",
        dtypes: ["bool"],
        match: /ArrowTypeError: Bit-packed boolean data type not supported by DLPack/,
        detail: "pyarrow does not export bit-packed booleans",
      }],
    },
    protocol: {
      exportKnown: [{
        kind: "refuses",
        layouts: ["stream=-1"],
        match: /NotImplementedError: Only stream=None is supported/,
        detail: "pyarrow takes only stream=None",
      }],
    },
  },
  {
    name: "PyTorch",
    module: "torch",
    site: "torch",
    setup: `
import torch
ML_TORCH = ('bfloat16', 'float8_e4m3fn', 'float8_e5m2', 'float8_e4m3fnuz', 'float8_e5m2fnuz', 'float8_e8m0fnu')
def make(a):
    '''numpy (ml_dtypes) array -> torch tensor of dtype dt, bit for bit.'''
    a = np.array(a, order='C')
    if dt in ML_TORCH:
        return torch.from_numpy(a.view(np.uint16 if a.itemsize == 2 else np.uint8).copy()).view(getattr(torch, dt))
    if dt == 'complex32':
        return torch.from_numpy(a.astype(np.complex64)).to(torch.complex32)
    return torch.from_numpy(a)
from torch.utils.dlpack import ReadOnlyTensorWrapper
def readonly_torch(x):
    '''torch's read-only export (the wrapper allows nothing but DLPack: keep the tensor for its address).'''
    global plain; plain = x
    return ReadOnlyTensorWrapper(x)
def torch_addr(x): return (plain if isinstance(x, ReadOnlyTensorWrapper) else x).data_ptr()
def torch_np(y):
    '''torch tensor -> numpy array (ml_dtypes for the types numpy lacks), sharing nothing.'''
    y = y.detach()
    name = str(y.dtype)[6:]
    if name in ML_TORCH:
        return y.view(torch.uint16 if y.element_size() == 2 else torch.uint8).numpy().view(getattr(ml_dtypes, name))
    if name == 'complex32':
        return y.to(torch.complex64).numpy()
    return y.numpy()
`,
    dtypes: [...NUMPY_DTYPES, "bfloat16", "complex32", ...TORCH_FLOAT8],
    exports: {
      generations: ["versioned", "legacy"],
      layouts: {
        ...STD,
        "read-only": { peer: "readonly_torch(make(base.reshape(2, 3)))", expect: "base.reshape(2, 3)" },
      },
      address: "torch_addr(src)",
      known: [{
        kind: "deviates",
        generations: ["legacy"],
        layouts: ["read-only"],
        match: /the generation the peer answered with/,
        detail: "torch answers a legacy request for read-only data with a versioned capsule",
      }],
    },
    imports: {
      generations: ["versioned", "legacy"],
      layouts: ALL_JS_LAYOUTS,
      consume: (producer) => `torch.from_dlpack(${producer})`,
      address: "y.data_ptr()",
      dtypeName: "str(y.dtype)[6:]",
      readback: "torch_np(y)",
      known: [{
        kind: "refuses",
        layouts: ["negative strides"],
        match: /RuntimeError: .*(negative|overflow)/i,
        detail: "torch has no negative strides",
      }],
    },
    protocol: {
      states: {
        "conjugate bit": { peer: "torch.conj(make(base.reshape(2, 3)))", expect: "np.conj(base.reshape(2, 3))" },
        "negative bit": { peer: "torch._neg_view(make(base.reshape(2, 3)))", expect: "-base.reshape(2, 3)" },
        "requires grad": { peer: "make(base.reshape(2, 3)).requires_grad_()", expect: "base.reshape(2, 3)" },
      },
      consume: {
        "as is": (producer) => `torch.from_dlpack(${producer})`,
        "dl_device=(1, 0)": (producer) => `torch.from_dlpack(${producer}, device="cpu")`,
        "copy=True": (producer) => `torch.from_dlpack(${producer}, copy=True)`,
        "copy=False": (producer) => `torch.from_dlpack(${producer}, copy=False)`,
      },
      exportKnown: [{
        kind: "refuses",
        layouts: ["requires grad"],
        match: /BufferError: Can't export tensors that require gradient/,
        detail: "torch refuses tensors that require gradients (fromPython takes its `__dlpack__` for them)",
      }],
    },
  },
  {
    name: "TensorFlow",
    module: "tensorflow",
    site: "tensorflow",
    isolate: "TensorFlow and PaddlePaddle crash when both are loaded into one process (paddle after tensorflow)",
    setup: `
import tensorflow as tf
from tensorflow.experimental import dlpack as tfdl
def make(a): return tf.constant(a)
`,
    dtypes: [
      ...NUMPY_DTYPES,
      "bfloat16",
      "float8_e4m3fn",
      "float8_e5m2",
      "float8_e4m3fnuz",
      "float8_e5m2fnuz",
      "float8_e4m3b11fnuz",
    ],
    exports: {
      // tf.experimental.dlpack.to_dlpack makes a legacy capsule; there is no way to ask for more.
      generations: ["legacy"],
      layouts: { "C": STD.C, "0-d": STD["0-d"], "size 0": STD["size 0"] },
      handOver: "tfdl.to_dlpack(src)",
      // A reshape shares the buffer, and numpy wraps a 1-d tensor of any dtype.
      address: "np.asarray(tf.reshape(src, [-1])).ctypes.data",
      known: [{
        kind: "refuses",
        dtypes: ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz"],
        match: /InvalidArgumentError: DT_FLOAT8_\w+ is not supported by dlpack/,
        detail: "TensorFlow's DLPack has no FP8 types",
      }],
    },
    imports: {
      generations: ["versioned", "legacy"],
      layouts: ALL_JS_LAYOUTS,
      // from_dlpack takes a capsule, not an object.
      consume: (producer, generation) =>
        `tfdl.from_dlpack(${producer}.__dlpack__(${generation === "versioned" ? "max_version=(1, 3)" : ""}))`,
      address: "np.asarray(tf.reshape(y, [-1])).ctypes.data",
      dtypeName: "y.dtype.name",
      readback: "np.asarray(tf.reshape(y, [-1]))",
      alignedOnly: "TensorFlow takes less-aligned memory without a copy, then aborts the process in its first " +
        "kernel over it (tests/python/peers.test.ts shows it)",
      known: [
        {
          kind: "refuses",
          generations: ["versioned"],
          match: /InvalidArgumentError: DLPack tensor must be a capsule with name "dltensor"/,
          detail: "TensorFlow imports only legacy capsules",
        },
        {
          kind: "refuses",
          dtypes: ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz"],
          match: /InvalidArgumentError: Unsupported Type Codes: \d+/,
          detail: "TensorFlow's DLPack has no FP8 types",
        },
        {
          kind: "refuses",
          layouts: ["F", "negative strides", "sliced with offset"],
          match: /InvalidArgumentError: Invalid strides array from DLPack/,
          detail: "TensorFlow imports only compact C-order strides",
        },
      ],
    },
    protocol: {
      exportKnown: [{
        kind: "refuses",
        layouts: ["stream=-1", "dl_device=(1, 0)", "copy=True"],
        match:
          /RuntimeError: tf\.Tensor does not support DLPack export with a (non-None stream|non-None dl_device|copy=True)/,
        detail: "TensorFlow's `__dlpack__` takes no stream, dl_device or copy=True",
      }],
    },
  },
  {
    name: "PaddlePaddle",
    module: "paddle",
    site: "paddle",
    isolate: "TensorFlow and PaddlePaddle crash when both are loaded into one process (paddle after tensorflow)",
    setup: `
import paddle
def make(a):
    a = np.array(a, order='C')
    if dt in ('bfloat16', 'float8_e4m3fn', 'float8_e5m2'):
        return paddle.to_tensor(a.astype(np.float32)).astype(dt)
    if dt in ('uint32', 'uint64'):
        return paddle.from_dlpack(a)
    return paddle.to_tensor(a)
def paddle_np(y):
    name = str(y.dtype)[7:]
    if name in ('bfloat16', 'float8_e4m3fn', 'float8_e5m2'):
        return y.astype('float32').numpy().astype(getattr(ml_dtypes, name))
    return y.numpy()
`,
    dtypes: [
      ...NUMPY_DTYPES,
      "bfloat16",
      "float8_e4m3fn",
      "float8_e5m2",
    ],
    exports: {
      generations: ["versioned", "legacy"],
      layouts: STD,
      address: "src.data_ptr()",
      known: [{
        kind: "refuses",
        dtypes: ["uint32", "uint64"],
        layouts: ["sliced with offset"],
        match: /The kernel with key .* of kernel `slice` is not registered/,
        detail: "PaddlePaddle cannot slice uint32/uint64 tensors (no kernel)",
      }],
      // Paddle's uint16 is its bfloat16 storage type: it has no unsigned 16-bit integers to export.
      dtypes: [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "bfloat16",
        "float8_e4m3fn",
        "float8_e5m2",
      ],
    },
    imports: {
      generations: ["versioned", "legacy"],
      layouts: ALL_JS_LAYOUTS,
      consume: (producer) => `paddle.from_dlpack(${producer})`,
      address: "y.data_ptr()",
      dtypeName: "str(y.dtype)[7:]",
      // contiguous() first: Tensor.numpy() reads negative strides from the wrong addresses.
      readback: "paddle_np(y.contiguous())",
      known: [
        {
          kind: "deviates",
          dtypes: ["uint16"],
          match: /the peer says bfloat16/,
          detail: "PaddlePaddle reads DLPack uint16 as bfloat16",
        },
      ],
    },
    protocol: {
      states: {
        "requires grad": {
          peer: "paddle.to_tensor(base.reshape(2, 3), stop_gradient=False)",
          expect: "base.reshape(2, 3)",
        },
      },
      consume: {
        "as is": (producer) => `paddle.from_dlpack(${producer})`,
        "dl_device=(1, 0)": (producer) => `paddle.from_dlpack(${producer}, device="cpu")`,
        "copy=True": (producer) => `paddle.from_dlpack(${producer}, copy=True)`,
        "copy=False": (producer) => `paddle.from_dlpack(${producer}, copy=False)`,
      },
      exportKnown: [
        {
          kind: "refuses",
          layouts: ["stream=-1"],
          match: /AssertionError: CPU tensor stream must be None/,
          detail: "PaddlePaddle takes only stream=None for CPU tensors",
        },
        {
          kind: "refuses",
          layouts: ["requires grad"],
          match: /BufferError: Can't get __dlpack__ from Tensor that requires gradients/,
          detail: "PaddlePaddle refuses tensors that require gradients (fromPython takes its `__dlpack__` for them)",
        },
      ],
    },
  },
  {
    name: "TVM FFI",
    module: "tvm_ffi",
    site: "tvm-ffi",
    setup: `
import tvm_ffi
def make(a): return tvm_ffi.from_dlpack(a)
`,
    dtypes: DTYPES,
    exports: {
      generations: ["versioned", "legacy"],
      // tvm_ffi has no array constructors: its tensors wrap numpy arrays of each layout.
      layouts: NUMPY_MADE,
      address: "src.data_ptr()",
      dtypes: NUMPY_DTYPES,
      known: [{
        kind: "refuses",
        layouts: ["read-only"],
        match: /BufferError: Cannot export readonly array/,
        detail: "tvm_ffi.from_dlpack asks numpy for a legacy capsule, which numpy refuses for read-only data",
      }],
    },
    imports: {
      generations: ["versioned", "legacy"],
      layouts: ALL_JS_LAYOUTS,
      // from_dlpack asks __dlpack__() for the legacy struct (or takes the C exchange API); a
      // versioned capsule handed over directly is imported as such.
      consume: (producer, generation) =>
        generation === "versioned"
          ? `tvm_ffi.from_dlpack(${producer}.__dlpack__(max_version=(1, 3)))`
          : `tvm_ffi.from_dlpack(${producer})`,
      address: "y.data_ptr()",
      // Tensor.dtype raises for complex types (tvm_ffi's dtype names have none): the dtype is
      // checked on what tvm_ffi exports back.
      dtypeName: "dlpack",
      readback: "dlpack",
    },
    protocol: {
      // tvm_ffi.from_dlpack has no device or copy argument.
      consume: { "as is": (producer) => `tvm_ffi.from_dlpack(${producer})` },
      exportKnown: [{
        kind: "refuses",
        layouts: ["copy=True"],
        match: /BufferError: copy not yet supported/,
        detail: "TVM FFI's `__dlpack__` cannot copy",
      }],
    },
  },
  {
    name: "array-api-strict",
    module: "array_api_strict",
    site: "array-api-strict",
    setup: `
import array_api_strict as xp
def make(a): return xp.asarray(a)
`,
    dtypes: NUMPY_DTYPES.filter((d) => d !== "float16"),
    exports: {
      generations: ["versioned", "legacy"],
      layouts: NUMPY_MADE,
      address: "src._array.ctypes.data",
      known: [{
        kind: "refuses",
        generations: ["legacy"],
        layouts: ["read-only"],
        match: /BufferError: Cannot export readonly array/,
        detail: "array-api-strict (numpy underneath) raises BufferError for a legacy export of read-only data",
      }],
    },
    imports: {
      generations: ["versioned", "legacy"],
      layouts: ALL_JS_LAYOUTS,
      consume: (producer) => `xp.from_dlpack(${producer})`,
      address: "y._array.ctypes.data",
      dtypeName: "str(y.dtype).split('.')[-1]",
      readback: "y._array",
    },
    protocol: {
      consume: {
        "as is": (producer) => `xp.from_dlpack(${producer})`,
        "dl_device=(1, 0)": (producer) => `xp.from_dlpack(${producer}, device=xp.Device("CPU_DEVICE"))`,
        "copy=True": (producer) => `xp.from_dlpack(${producer}, copy=True)`,
        "copy=False": (producer) => `xp.from_dlpack(${producer}, copy=False)`,
      },
      exportKnown: [{
        ...STREAM_REFUSED_BY_NUMPY,
        detail: "array-api-strict (numpy underneath) takes only stream=None",
      }],
    },
  },
];

// ---------------------------------------------------------------------------------------------
// Values: every case fills 6 (or 12) elements with small values each dtype represents exactly.

/** Python expression for 6 exact values of a dtype (numpy or ml_dtypes). */
export function pyValues(dtype: DType): string {
  if (dtype === "bool") return "np.array([True, False, True, True, False, True])";
  if (dtype === "complex32") return "(np.arange(6) - 2 + 1j * np.arange(6)).astype(np.complex64)";
  if (dtype.startsWith("complex")) return `(np.arange(6) - 2 + 1j * np.arange(6)).astype(np.${dtype})`;
  if (dtype.startsWith("uint")) return `np.arange(6).astype(np.${dtype})`;
  if (dtype === "float8_e8m0fnu") return "np.array([1, 2, 4, 8, 0.5, 0.25]).astype(ml_dtypes.float8_e8m0fnu)";
  if (dtype === "float4_e2m1fn") return "np.array([0, 0.5, -1, 1.5, 2, -3]).astype(ml_dtypes.float4_e2m1fn)";
  if (ML_DTYPES.includes(dtype)) return `(np.arange(6) - 2).astype(ml_dtypes.${dtype})`;
  return `(np.arange(6) - 2).astype(np.${dtype})`;
}

/** A TypedArray of 6 elements of `dtype` (reinterpreted where JS has no array type), and the
 * export dtype option it needs. */
export function jsSource(dtype: DType): { array: AnyTypedArray; dtype?: DType } {
  const ints = [0, 1, 2, 3, 4, 5];
  switch (dtype) {
    case "bool":
      return { array: new Uint8Array([1, 0, 1, 1, 0, 1]), dtype };
    case "int8":
      return { array: Int8Array.from(ints, (v) => v - 2) };
    case "int16":
      return { array: Int16Array.from(ints, (v) => v - 2) };
    case "int32":
      return { array: Int32Array.from(ints, (v) => v - 2) };
    case "int64":
      return { array: BigInt64Array.from(ints, (v) => BigInt(v - 2)) };
    case "uint8":
      return { array: Uint8Array.from(ints) };
    case "uint16":
      return { array: Uint16Array.from(ints) };
    case "uint32":
      return { array: Uint32Array.from(ints) };
    case "uint64":
      return { array: BigUint64Array.from(ints, BigInt) };
    case "float16":
      return { array: Float16Array.from(ints, (v) => v - 2.5) };
    case "float32":
      return { array: Float32Array.from(ints, (v) => v - 2.5) };
    case "float64":
      return { array: Float64Array.from(ints, (v) => v / 4 - 1) };
    case "complex64":
      return { array: Float32Array.from({ length: 12 }, (_, i) => i - 3), dtype };
    case "complex128":
      return { array: Float64Array.from({ length: 12 }, (_, i) => i - 3), dtype };
    case "bfloat16":
      return { array: new Uint16Array([0x3f80, 0xc000, 0x4040, 0, 0x3f00, 0xbf80]), dtype };
    case "complex32":
      return { array: Float16Array.from({ length: 12 }, (_, i) => i - 3), dtype };
  }
  if (isMiniFloat(dtype)) {
    const values = dtype === "float8_e8m0fnu"
      ? [1, 2, 4, 8, 0.5, 0.25]
      : dtype === "float4_e2m1fn"
      ? [0, 0.5, -1, 1.5, 2, -3]
      : [-2, -1, 0, 1, 2, 3];
    const codes = values.map((v) => encodeMiniFloat(dtype, v));
    const bits = subByteBits(dtype);
    if (bits === 8) return { array: Uint8Array.from(codes), dtype };
    // Packed, low bits first (DLPack's sub-byte layout).
    const bytes = new Uint8Array(Math.ceil((codes.length * bits) / 8) + 1);
    codes.forEach((code, k) => {
      const bit = k * bits;
      const word = code << (bit & 7);
      bytes[bit >>> 3]! |= word & 0xff;
      bytes[(bit >>> 3) + 1]! |= word >>> 8;
    });
    return { array: bytes, dtype };
  }
  throw new Error(`no JS source for ${dtype}`);
}

function subByteBits(dtype: DType): number {
  return dtype.startsWith("float4") ? 4 : dtype.startsWith("float6") ? 6 : 8;
}

/** The JS source layout of that name (the tables name only layouts that exist). */
function importLayout(name: string): ImportLayout {
  const layout = IMPORT_LAYOUTS[name];
  if (layout === undefined) throw new Error(`no JS source layout named ${name}`);
  return layout;
}

/** Whether element 0 of a layout starts on a byte boundary for packed sub-byte dtypes. */
export function layoutFits(dtype: DType, layout: ImportLayout): boolean {
  return (layout.offset * subByteBits(dtype)) % 8 === 0;
}

/** Flattened values of a view in C order, in the form Python's `flat()` gives them. */
export function jsValues(view: BufferView): unknown[] {
  const out: unknown[] = [];
  const shape = view.shape;
  const index = new Array<number>(shape.length).fill(0);
  for (let k = 0; k < view.size; k++) {
    const v = view.get(...index);
    out.push(typeof v === "bigint" ? Number(v) : v);
    for (let d = shape.length - 1; d >= 0; d--) {
      if (++index[d]! < shape[d]!) break;
      index[d] = 0;
    }
  }
  return out;
}

/** Asserts two flattened value lists are equal element by element. */
export function sameValues(js: unknown[], py: unknown[], what: string): void {
  assert.equal(js.length, py.length, `${what}: element count`);
  for (let i = 0; i < js.length; i++) {
    const a = js[i];
    const b = py[i];
    const equal = Array.isArray(a) ? JSON.stringify(a) === JSON.stringify(b) : Object.is(a, b) || a === b;
    assert.ok(equal, `${what}[${i}]: JS ${JSON.stringify(a)} vs Python ${JSON.stringify(b)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// The runner.

/** One case of the matrix. */
export interface Case {
  readonly peer: Peer;
  readonly pair: string;
  readonly dtype: DType;
  readonly generation: Generation;
  readonly layout: string;
  /** A case of the protocol tables (its `layout` is the row). */
  readonly protocol?: boolean;
  /** Runs the case in this process; returns what it found (throws on a failure). */
  run(py: Python): { outcome: Outcome; detail: string };
}

/** The key a case's result is filed under. */
export function caseKey(c: { pair: string; dtype: string; generation: string; layout: string }): string {
  return `${c.pair} ${c.dtype} ${c.generation} ${c.layout}`;
}

function covers(k: Known, dtype: DType, generation: Generation, layout: string): boolean {
  return (k.dtypes === undefined || k.dtypes.includes(dtype)) &&
    (k.generations === undefined || k.generations.includes(generation)) &&
    (k.layouts === undefined || k.layouts.includes(layout));
}

/** Every case of a peer, in a fixed order (the child process regenerates the same list). */
export function peerCases(peer: Peer): Case[] {
  const cases: Case[] = [];
  const exp = peer.exports;
  if (exp !== undefined) {
    const pair = `${peer.name} → JS`;
    for (const dtype of exp.dtypes ?? peer.dtypes) {
      for (const generation of exp.generations) {
        for (const layout of Object.keys(exp.layouts)) {
          const known = exp.known?.find((k) => covers(k, dtype, generation, layout));
          cases.push({
            peer,
            pair,
            dtype,
            generation,
            layout,
            run: (py) => exportCase(py, peer, exp, dtype, generation, layout, known),
          });
        }
      }
    }
  }
  const imp = peer.imports;
  if (imp !== undefined) {
    const pair = `JS → ${peer.name}`;
    for (const dtype of imp.dtypes ?? peer.dtypes) {
      for (const generation of imp.generations) {
        for (const layout of imp.layouts) {
          if (!layoutFits(dtype, importLayout(layout))) continue;
          const known = imp.known?.find((k) => covers(k, dtype, generation, layout));
          cases.push({
            peer,
            pair,
            dtype,
            generation,
            layout,
            run: (py) => importCase(py, peer, imp, dtype, generation, layout, known),
          });
        }
      }
    }
  }
  return [...cases, ...protocolCases(peer)];
}

/** The protocol cases of a peer: each request of {@link EXPORT_REQUESTS} and state of
 * {@link STATE_ROWS} it has (peer → JS), and each of its imports of {@link IMPORT_ROWS} (JS → peer). */
function protocolCases(peer: Peer): Case[] {
  const cases: Case[] = [];
  const protocol = peer.protocol;
  const add = (pair: string, dtype: DType, row: string, run: Case["run"]) =>
    cases.push({ peer, pair, dtype, generation: "versioned", layout: row, protocol: true, run });
  if (peer.exports !== undefined) {
    const pair = `${peer.name} → JS`;
    for (const row of Object.keys(EXPORT_REQUESTS)) add(pair, "float64", row, (py) => exportRequestCase(py, peer, row));
    for (const row of STATE_ROWS) {
      const state = protocol?.states?.[row];
      if (state === undefined) continue;
      const dtype = row === "conjugate bit" ? "complex128" : "float64";
      add(pair, dtype, row, (py) => stateCase(py, peer, dtype, row, state));
    }
  }
  const consume = protocol?.consume;
  if (peer.imports !== undefined && consume !== undefined) {
    const pair = `JS → ${peer.name}`;
    for (const row of IMPORT_ROWS) {
      const call = row.includes("(as ") ? consume["as is"] : consume[row as ImportArgumentRow];
      if (call !== undefined) add(pair, "float64", row, (py) => importRequestCase(py, peer, row, call));
    }
  }
  return cases;
}

const prepared = new WeakMap<Python, Set<string>>();

/** Runs the prelude and the peer's setup once per interpreter. */
function prepare(py: Python, peer: Peer): void {
  let done = prepared.get(py);
  if (done === undefined) prepared.set(py, done = new Set());
  if (done.size === 0) py.exec(PRELUDE);
  if (done.has(peer.name)) return;
  py.exec(peer.setup);
  done.add(peer.name);
}

function pyFlat(py: Python, expr: string): unknown[] {
  using values = py.eval(`flat(${expr})`);
  return values.toJS() as unknown[];
}

function evalNumber(py: Python, expr: string): number {
  using value = py.eval(expr);
  return value.toJS() as number;
}

/** The refusal, checked: a DLPackError from the bridge naming the Python error the table expects. */
function expectRefusal(error: unknown, known: Known, what: string): { outcome: Outcome; detail: string } {
  if (!(error instanceof DLPackError) || !known.match.test(error.message)) throw error;
  assert.equal(error.code, "python", `${what}: the refusal arrives as a DLPackError with code "python"`);
  const first = error.message.split("\n")[0]!.replace(/^exec: /, "");
  return { outcome: "refused", detail: `${known.detail}: ${first.slice(0, 160)}` };
}

function exportCase(
  py: Python,
  peer: Peer,
  exp: PeerExport,
  dtype: DType,
  generation: Generation,
  layoutName: string,
  known: Known | undefined,
): { outcome: Outcome; detail: string } {
  prepare(py, peer);
  const layout = exp.layouts[layoutName];
  if (layout === undefined) throw new Error(`${peer.name} exports no layout named ${layoutName}`);
  const what = `${peer.name} → JS ${dtype} ${generation} ${layoutName}`;
  py.exec(`dt = '${dtype}'\nbase = ${pyValues(dtype)}\nexpect = ${layout.expect}`);
  let view: BufferView;
  try {
    py.exec(`src = ${layout.peer}`);
    using handed = py.eval(exp.handOver ?? "src");
    view = fromPython(handed, { maxVersion: generation === "versioned" ? [1, 3] : null });
  } catch (error) {
    if (known?.kind !== "refuses") throw error;
    py.exec("src = None");
    return expectRefusal(error, known, what);
  }
  using v = view;
  try {
    assert.ok(known?.kind !== "refuses", `${what}: the table says "${known?.detail}", but it worked`);
    return deviation(known, what, () => {
      assert.equal(v.dtype, dtype, `${what}: dtype`);
      using shape = py.eval("list(expect.shape)");
      assert.deepEqual(v.shape, shape.toJS(), `${what}: shape`);
      if (v.size > 0) assert.equal(v.address, BigInt(evalNumber(py, exp.address)), `${what}: zero-copy`);
      sameValues(jsValues(v), pyFlat(py, "expect"), what);
      if (layoutName === "read-only") assert.equal(v.access, "readonly", `${what}: read-only`);
      assert.equal(v.version === null, generation === "legacy", `${what}: the generation the peer answered with`);
      return { outcome: "zero-copy", detail: "" };
    });
  } finally {
    py.exec("src = None");
  }
}

/** Peer → JS: one `fromPython` request (a row of {@link EXPORT_REQUESTS}) of the peer's C-order
 * tensor (the tensor itself, not a capsule: the request reaches its `__dlpack__`). */
function exportRequestCase(py: Python, peer: Peer, row: string): { outcome: Outcome; detail: string } {
  prepare(py, peer);
  const exp = peer.exports!;
  const layout = exp.layouts.C;
  if (layout === undefined) throw new Error(`${peer.name} exports no C layout`);
  py.exec(`dt = 'float64'\nbase = ${pyValues("float64")}\nexpect = ${layout.expect}`);
  const known = peer.protocol?.exportKnown?.find((k) => k.layouts?.includes(row));
  const what = `${peer.name} → JS ${row}`;
  return requestCase(py, layout.peer, EXPORT_REQUESTS[row], known, what, (v) => {
    const same = v.address === BigInt(evalNumber(py, exp.address));
    if (row !== "copy=True") {
      assert.ok(same, `${what}: zero-copy`);
      return { outcome: "zero-copy", detail: "" };
    }
    assert.ok(!same, `${what}: copy=True gave the peer's own memory`);
    return { outcome: "copy", detail: "the producer copied, as asked" };
  });
}

/** Peer → JS: a tensor in a state DLPack cannot say; `fromPython` must give the values it stands
 * for (a copy the peer made) or the peer's refusal. */
function stateCase(
  py: Python,
  peer: Peer,
  dtype: DType,
  row: string,
  state: PeerLayout,
): { outcome: Outcome; detail: string } {
  prepare(py, peer);
  py.exec(`dt = '${dtype}'\nbase = ${pyValues(dtype)}\nexpect = ${state.expect}`);
  const known = peer.protocol?.exportKnown?.find((k) => k.layouts?.includes(row));
  return requestCase(
    py,
    state.peer,
    undefined,
    known,
    `${peer.name} → JS ${row}`,
    (v) =>
      v.flags.isCopied
        ? { outcome: "copy", detail: "resolved: the peer copied the values the tensor stands for" }
        : { outcome: "zero-copy", detail: "" },
  );
}

/** `fromPython(src, opts)` of the Python expression `peer`: the refusal `known` names, or a view
 * whose shape and values are `expect`'s, then judged by `judge`. */
function requestCase(
  py: Python,
  peer: string,
  opts: FromPythonOptions | undefined,
  known: Known | undefined,
  what: string,
  judge: (v: BufferView) => { outcome: Outcome; detail: string },
): { outcome: Outcome; detail: string } {
  let view: BufferView;
  try {
    py.exec(`src = ${peer}`);
    using handed = py.eval("src");
    view = fromPython(handed, opts);
  } catch (error) {
    py.exec("src = None");
    if (known?.kind !== "refuses") throw error;
    return expectRefusal(error, known, what);
  }
  using v = view;
  try {
    assert.ok(known?.kind !== "refuses", `${what}: the table says "${known?.detail}", but it worked`);
    return deviation(known, what, () => {
      using shape = py.eval("list(expect.shape)");
      assert.deepEqual(v.shape, shape.toJS(), `${what}: shape`);
      sameValues(jsValues(v), pyFlat(py, "expect"), what);
      return judge(v);
    });
  } finally {
    py.exec("src = None");
  }
}

/** JS → peer: the peer's import (`consume`) of a DLPackTensor over a 64-byte-aligned allocation
 * (no peer copies for want of alignment), through the spy that records its `__dlpack__` keywords. */
function importRequestCase(
  py: Python,
  peer: Peer,
  row: string,
  consume: (producer: string) => string,
): { outcome: Outcome; detail: string } {
  prepare(py, peer);
  const imp = peer.imports!;
  const what = `JS → ${peer.name} ${row}`;
  const known = peer.protocol?.importKnown?.find((k) => k.layouts?.includes(row));
  using memory = empty([2, 3], "float64");
  (memory.array() as Float64Array).set(jsSource("float64").array as Float64Array);
  {
    using t = toPython(memory, py);
    py.set("t", t);
  }
  try {
    py.exec(`Spy.kw = None\ny = ${consume("Spy(t)")}`);
  } catch (error) {
    py.exec("y = None\nt = None");
    if (known?.kind !== "refuses") throw error;
    return expectRefusal(error, known, what);
  }
  try {
    assert.ok(known?.kind !== "refuses", `${what}: the table says "${known?.detail}", but it worked`);
    using passed = py.eval("Spy.kw");
    const kw = (passed.toJS() ?? {}) as Record<string, unknown>;
    using back = imp.readback === "dlpack" ? fromPython(py.eval("y")) : undefined;
    return deviation(known, what, () => {
      sameValues(jsValues(memory), back !== undefined ? jsValues(back) : pyFlat(py, imp.readback), what);
      const address = back !== undefined ? Number(back.address) : evalNumber(py, imp.address);
      const same = address === Number(memory.address);
      if (row === "copy=True") {
        assert.ok(!same, `${what}: copy=True gave JS memory`);
        return { outcome: "copy", detail: `the ${kw.copy === true ? "producer" : "consumer"} copied` };
      }
      assert.ok(same, `${what}: zero-copy`);
      if (row.startsWith("stream")) {
        assert.ok(kw.stream === undefined || kw.stream === null, `${what}: a CPU consumer passes no stream`);
      }
      const asked = row.startsWith("max_version") ? `asked ${JSON.stringify(kw.max_version ?? null)}` : "";
      return { outcome: "zero-copy", detail: asked };
    });
  } finally {
    py.exec("y = None\nt = None");
  }
}

/** Runs the checks of a case that worked. A documented deviation must make them fail the way
 * the table says (and is then the outcome); anything else must pass them. */
function deviation(
  known: Known | undefined,
  what: string,
  checks: () => { outcome: Outcome; detail: string },
): { outcome: Outcome; detail: string } {
  if (known?.kind !== "deviates") return checks();
  try {
    checks();
  } catch (error) {
    if (!(error instanceof assert.AssertionError) || !known.match.test(error.message)) throw error;
    const found = error.message.replace(what, "").replace(/^[: ]+/, "").split("\n")[0]!.slice(0, 100);
    return { outcome: "deviates", detail: `${known.detail} (${found})` };
  }
  assert.fail(`${what}: the table says "${known.detail}", but every check passed`);
}

/** The JS memory of an import case: what is exported, with which options, and where element 0 is. */
function importSource(
  dtype: DType,
  layout: ImportLayout,
  aligned: boolean,
): { exportable: Exportable; opts: ExportOptions | undefined; address: number; keep?: BufferView } {
  const source = jsSource(dtype);
  const itemBytes = dtypeInfo(dtype).bits / 8;
  if (layout.memory !== undefined) {
    const memory = layout.memory === "empty" ? empty([2, 3], dtype) : zeros([2, 3], dtype);
    if (layout.memory === "empty") {
      const bytes = memory.array();
      new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength).set(
        new Uint8Array(source.array.buffer, source.array.byteOffset, bytes.byteLength),
      );
    }
    return { exportable: memory, opts: undefined, address: Number(memory.address), keep: memory };
  }
  const opts: ExportOptions = { ...layout.opts, ...(source.dtype ? { dtype: source.dtype } : {}) };
  if (!aligned) {
    return { exportable: source.array, opts, address: runtime().addressOf(source.array) + layout.offset * itemBytes };
  }
  // The same bytes in a 64-byte-aligned library allocation, described by the same options.
  const bytes = new Uint8Array(source.array.buffer, source.array.byteOffset, source.array.byteLength);
  const memory = empty([bytes.length], "uint8");
  (memory.array() as Uint8Array).set(bytes);
  return {
    exportable: memory,
    opts: { ...opts, dtype },
    address: Number(memory.address) + layout.offset * itemBytes,
    keep: memory,
  };
}

function importCase(
  py: Python,
  peer: Peer,
  imp: PeerImport,
  dtype: DType,
  generation: Generation,
  layoutName: string,
  known: Known | undefined,
): { outcome: Outcome; detail: string } {
  prepare(py, peer);
  const layout = importLayout(layoutName);
  const what = `JS → ${peer.name} ${dtype} ${generation} ${layoutName}`;
  const source = importSource(dtype, layout, imp.alignedOnly !== undefined);
  using _keep = source.keep;
  const before = stats().exports;
  const readonly = layout.opts.readonly === true;
  {
    using t = toPython(source.exportable, py, source.opts);
    py.set("t", t);
  }
  const producer = generation === "versioned" ? "Spy(t)" : "LegacyOnly(t)";
  try {
    // A peer that imports a dtype it cannot name does not support it either.
    const name = imp.dtypeName === "dlpack" ? "None" : imp.dtypeName;
    py.exec(`Spy.asked = None\ny = ${imp.consume(producer, generation)}\ny_dtype = ${name}`);
  } catch (error) {
    py.exec("y = None\nt = None");
    // At most as many as before: an earlier case's export may be released meanwhile (JAX frees late).
    const left = stats().exports;
    assert.ok(left <= before, `${what}: a refused import releases the export (${before} before, ${left} after)`);
    if (generation === "legacy" && readonly) {
      // Ours, for every peer: the legacy struct has no READ_ONLY flag to carry.
      return expectRefusal(error, {
        kind: "refuses",
        match: /BufferError: .*read-only/,
        detail: "read-only data cannot travel as legacy DLPack (our DLPackTensor raises BufferError)",
      }, what);
    }
    if (known?.kind !== "refuses") throw error;
    return expectRefusal(error, known, what);
  }
  try {
    assert.ok(known?.kind !== "refuses", `${what}: the table says "${known?.detail}", but it worked`);
    if (generation === "versioned") {
      using asked = py.eval("Spy.asked is not None and tuple(Spy.asked) >= (1, 0)");
      assert.equal(asked.toJS(), true, `${what}: the consumer asks for the versioned struct`);
    }
    return deviation(known, what, () => verifyImport(py, imp, dtype, generation, layoutName, source, what));
  } finally {
    py.exec("y = None\nt = None");
  }
}

/** Checks an imported `y` against the JS source: dtype, shape, address (or an allowed copy),
 * values, and the peer's own check. */
function verifyImport(
  py: Python,
  imp: PeerImport,
  dtype: DType,
  generation: Generation,
  layoutName: string,
  source: { exportable: Exportable; opts: ExportOptions | undefined; address: number },
  what: string,
): { outcome: Outcome; detail: string } {
  using back = imp.readback === "dlpack" ? fromPython(py.eval("y")) : undefined;
  using name = py.eval("y_dtype");
  const actual = imp.dtypeName === "dlpack" ? back?.dtype : name.toJS();
  assert.equal(actual, dtype, `${what}: dtype (the peer says ${actual})`);
  using mirror = importDLPack(exportDLPack(source.exportable, source.opts));
  using shape = py.eval("list(y.shape)");
  assert.deepEqual(shape.toJS(), mirror.shape, `${what}: shape`);
  let outcome: Outcome = "zero-copy";
  let detail = "";
  if (mirror.size > 0 && evalNumber(py, imp.address) !== source.address) {
    assert.ok(imp.mayCopy?.layouts.includes(layoutName), `${what}: zero-copy`);
    outcome = "copy";
    detail = imp.mayCopy!.detail;
  }
  if (back !== undefined) {
    if (back.size > 0) assert.equal(Number(back.address), source.address, `${what}: read back at the same address`);
    sameValues(jsValues(mirror), jsValues(back), what);
  } else {
    sameValues(jsValues(mirror), pyFlat(py, imp.readback), what);
  }
  if (imp.check !== undefined) {
    const readonly = importLayout(layoutName).opts.readonly === true;
    py.exec(
      `is_versioned = ${generation === "versioned" ? "True" : "False"}\nis_readonly = ${readonly ? "True" : "False"}`,
    );
    py.exec(imp.check);
  }
  return { outcome, detail };
}

// ---------------------------------------------------------------------------------------------
// Where the peers come from.

/** The PYTHONPATH entries of this process. */
function pythonPath(): string[] {
  return (runtime().env("PYTHONPATH") ?? "").split(":").filter((p) => p !== "");
}

/** Why a peer whose module is missing cannot run: its install failed (with pip's words), or it is
 * not installed. */
export function notInstalled(peer: Peer, root: string = repoRoot): string {
  const failed = `${root}/.tools/python/peers/${peer.site}.failed`;
  if (peer.site !== "base" && existsSync(failed)) {
    return `${peer.name}: ${readFileSync(failed, "utf8").trim().split("\n").slice(0, 3).join(" ").slice(0, 300)}`;
  }
  const where = peer.site === "base" ? "tools/python-requirements.txt" : `tools/python-peers/${peer.site}.txt`;
  return `${peer.name} (${peer.module}) is not on PYTHONPATH: run tools/python.sh, which installs ${where}`;
}

/** The environment of a peer's child process: PYTHONPATH without the other peers' directories. */
export function childEnv(peer: Peer, path: readonly string[] = pythonPath()): Record<string, string> {
  const own = `/python/peers/${peer.site}`;
  const kept = path.filter((p) => !p.includes("/python/peers/") || p.replace(/\/$/, "").endsWith(own));
  return { PYTHONPATH: kept.join(":"), TF_CPP_MIN_LOG_LEVEL: "3" };
}
