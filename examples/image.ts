// A numpy user's first program: an image-like uint8 H x W x 3 array from numpy, cropped, one
// channel taken, the axes permuted to channels-first, per-channel means, normalised to float32,
// and back to numpy, which checks the result against its own arithmetic. Every step but the
// arithmetic is zero-copy, a cast (astype) or one of the library's constructors.
import { asarray, stack } from "../mod.ts";
import { fromPython, openPython, toPython } from "../python.ts";

const py = openPython();
py.exec(`
import numpy as np
rng = np.random.default_rng(7)
image = rng.integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
`);
using image = fromPython(py.get("image"), { require: { dtype: "uint8", ndim: 3 } }); // zero-copy
console.log(`${image}`); // the header console.log prints: dtype, shape, strides, device, access

using crop = image.slice("8:40", "16:48"); // 32 x 32 x 3, a view
using red = crop.slice(null, null, 0); // 32 x 32, one channel
using chw = crop.permute(2, 0, 1); // 3 x 32 x 32, channels first, still the same memory (numpy: transpose(2, 0, 1))

// Per-channel means and standard deviations, then each channel normalised in a float32 copy.
const channels = [];
for (let c = 0; c < 3; c++) {
  using plane = chw.at(c);
  const out = plane.astype("float32"); // numpy: plane.astype(np.float32), a new allocation
  const values = out.array(); // a Float32Array over it: the literal dtype typed it
  let sum = 0;
  for (const v of values) sum += v;
  const mean = sum / values.length;
  let squares = 0;
  for (const v of values) squares += (v - mean) ** 2;
  const std = Math.sqrt(squares / values.length);
  for (let k = 0; k < values.length; k++) values[k] = (values[k]! - mean) / std;
  channels.push(out);
  console.log(`channel ${c}: mean ${mean.toFixed(3)}, std ${std.toFixed(3)}`);
}
using normalised = stack(channels); // 3 x 32 x 32 float32, a new allocation
for (const c of channels) c.dispose();
const sums: number[] = [];
for (let c = 0; c < 3; c++) {
  using plane = normalised.at(c);
  sums.push((plane.toArray() as Float32Array).reduce((a, v) => a + v, 0) / plane.size);
}
using means = asarray(sums, "float32"); // nested JS arrays (here one level) copied into a view

// Back to numpy, zero-copy, and checked there.
py.set("red", toPython(red, py));
py.set("normalised", toPython(normalised, py));
py.exec(`
red = np.from_dlpack(red)
normalised = np.from_dlpack(normalised)
crop = image[8:40, 16:48].astype(np.float64)
expected = ((crop - crop.mean(axis=(0, 1))) / crop.std(axis=(0, 1))).transpose(2, 0, 1).astype(np.float32)
ok = bool(np.array_equal(red, image[8:40, 16:48, 0])) and bool(np.allclose(normalised, expected, atol=1e-5))
`);
console.log(`normalised: ${normalised}`);
console.log("means after normalising:", Array.from(means.toArray() as Float32Array, (m) => Math.abs(m) < 1e-5 ? 0 : m));
if (py.eval("ok").toJS() !== true) throw new Error("numpy disagrees");
py.exec("del red, normalised");
console.log("image ok");
