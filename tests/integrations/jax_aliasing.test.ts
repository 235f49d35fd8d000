// What docs/python.md says about JAX over JS memory: a 64-byte-aligned allocation is aliased, so a
// later JS write changes the JAX array; from_dlpack(copy=True) still aliases in the pinned JAX, and
// jnp.array(..., copy=True) gives JAX values of its own.
import assert from "node:assert/strict";
import { zeros } from "../../mod.ts";
import { toPython } from "../../python.ts";
import { missing, python } from "../support/python.ts";
import { test } from "../support/harness.ts";

test("JAX aliases 64-byte-aligned JS memory; jnp.array(copy=True) is the copy that stays put", () => {
  const py = python();
  py.exec("import jax, jax.numpy as jnp");
  using v = zeros([4], "float32");
  const a = v.array() as Float32Array;
  a.set([1, 2, 3, 4]);
  using t1 = toPython(v, py);
  using t2 = toPython(v, py);
  using t3 = toPython(v, py);
  py.set("t1", t1);
  py.set("t2", t2);
  py.set("t3", t3);
  py.exec(
    "aliased = jax.dlpack.from_dlpack(t1)\n" +
      "asked = jax.dlpack.from_dlpack(t2, copy=True)\n" +
      "own = jnp.array(jax.dlpack.from_dlpack(t3), copy=True)",
  );
  assert.equal(py.eval("aliased.unsafe_buffer_pointer()").toJS(), Number(v.address));
  a[0] = 100;
  a[1] = 200;
  assert.equal(py.eval("float(aliased[0])").toJS(), 100, "the JS write shows through the JAX array");
  assert.equal(py.eval("float(asked[1])").toJS(), 200, "copy=True still aliases in the pinned JAX");
  assert.deepEqual(py.eval("own.tolist()").toJS(), [1, 2, 3, 4], "jnp.array(copy=True) kept its own values");
  py.exec("del aliased, asked, own, t1, t2, t3");
}, { skip: missing("jax") });
