// Apache Arrow JS (apache-arrow, pinned in tools/integrations/) with numpy and pyarrow over one
// buffer: examples/integrations/arrow.ts.
import assert from "node:assert/strict";
import { loadPackage } from "../../examples/integrations/packages.ts";
import { type Arrow, arrowRoundTrip, columnView } from "../../examples/integrations/arrow.ts";
import { DLPackError } from "../../mod.ts";
import { fromPython } from "../../python.ts";
import { missing, python } from "../support/python.ts";
import { settledLive } from "../support/assertions.ts";
import { test } from "../support/harness.ts";

const loaded = loadPackage<Arrow>("apache-arrow");
const noArrow = "missing" in loaded ? loaded.missing : false;

test("an Arrow JS column is a view over the column's own buffer", () => {
  const arrow = (loaded as { module: Arrow }).module;
  const column = arrow.makeVector(Float64Array.from([1, 2, 3]));
  using view = columnView(column);
  assert.equal(view.dtype, "float64");
  assert.deepEqual(view.shape, [3]);
  view.set(7, 2);
  assert.equal(column.get(2), 7, "a write through the view is seen by Arrow");
}, { skip: noArrow });

test("Arrow JS -> numpy -> pyarrow and pyarrow -> Arrow JS, without copies", async () => {
  const before = await settledLive();
  const result = arrowRoundTrip((loaded as { module: Arrow }).module, python());
  assert.deepEqual(result, {
    numpyZeroCopy: true,
    pyarrowZeroCopy: true,
    sharedWrite: true,
    backZeroCopy: true,
    back: [0.25, 0.5, 0.75],
  });
  assert.deepEqual(await settledLive(), before, "every view, export and pin released");
}, { skip: noArrow || missing("pyarrow") });

test("a pyarrow column with nulls is refused (DLPack has no validity bitmap)", () => {
  const py = python();
  py.exec("import pyarrow as pa\nwith_nulls = pa.array([1.0, None, 3.0])");
  assert.throws(() => fromPython(py.eval("with_nulls")), (e: unknown) => e instanceof DLPackError);
  py.exec("del with_nulls");
}, { skip: missing("pyarrow") });
