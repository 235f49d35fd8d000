// What a notebook shows: the Jupyter display bundle of a view (console.log's text as text/plain,
// the same header over an HTML table of the values, summarised as console.log summarises, all of it
// HTML-escaped), toString() as console.log's header, and views nested in objects printed aligned.
import assert from "node:assert/strict";
import { arange, type BufferView, exportDLPack, importDLPack, zeros } from "../../mod.ts";
import { escapeHtml } from "../../src/engines/inspect.ts";
import { runtimeName, test } from "../support/harness.ts";

const JUPYTER = Symbol.for("Jupyter.display");

function inspected(value: unknown): string {
  const g = globalThis as unknown as { Deno?: { inspect(v: unknown): string }; Bun?: { inspect(v: unknown): string } };
  return runtimeName === "deno" ? g.Deno!.inspect(value) : g.Bun!.inspect(value);
}

function bundle(view: BufferView): { "text/plain": string; "text/html": string } {
  return (view as unknown as Record<symbol, () => { "text/plain": string; "text/html": string }>)[JUPYTER]!();
}

/** The text of every <td> of an HTML fragment, in order. */
function cells(html: string): string[] {
  return [...html.matchAll(/<td[^>]*>([^<]*)<\/td>/g)].map((m) => m[1]!);
}

test("the Jupyter bundle: console.log's text, and the header above a table of the values", () => {
  using m = arange(6, "float32").reshape([2, 3]);
  const b = bundle(m);
  assert.deepEqual(Object.keys(b).sort(), ["text/html", "text/plain"]);
  assert.equal(b["text/plain"], inspected(m), "text/plain is what console.log prints");
  assert.match(
    b["text/html"],
    /^<div class="dlpack-view"><pre[^>]*>BufferView&lt;float32&gt; shape \[2, 3\], strides \[3, 1\], cpu:0, readwrite<\/pre><table>/,
  );
  assert.equal((b["text/html"].match(/<tr>/g) ?? []).length, 2, "one row per row of the matrix");
  assert.deepEqual(cells(b["text/html"]), ["0", "1", "2", "3", "4", "5"]);
  using c = importDLPack(exportDLPack(new Float64Array([1, -2, 0.5, 3]), { dtype: "complex128" }));
  assert.deepEqual(cells(bundle(c)["text/html"]), ["1-2j", "0.5+3j"]);
  using flags = zeros([2], "bool");
  assert.deepEqual(cells(bundle(flags)["text/html"]), ["false", "false"]);
  using scalar = (m as BufferView).at(1, 2);
  assert.deepEqual(cells(bundle(scalar)["text/html"]), ["5"], "a 0-d view: one cell");
  using none = m.slice("0:0");
  assert.match(bundle(none)["text/html"], /no elements/);
});

test("the Jupyter bundle summarises as console.log does: first and last 3 of each axis, … between", () => {
  using big = arange(0, 40 * 50, "float64").reshape([40, 50]);
  const html = bundle(big)["text/html"];
  assert.equal((html.match(/<tr>/g) ?? []).length, 7, "3 rows, a … row, 3 rows");
  const shown = cells(html);
  assert.equal(shown.length, 7 * 7);
  assert.deepEqual(shown.slice(0, 7), ["0", "1", "2", "…", "47", "48", "49"]);
  assert.deepEqual(shown.slice(21, 28), ["…", "…", "…", "…", "…", "…", "…"]);
  assert.deepEqual(shown.slice(-3), ["1997", "1998", "1999"]);
  assert.match(bundle(big)["text/plain"], /\.\.\./, "text/plain summarises too");
  // Above two dimensions: one captioned table per index of the leading axes.
  using cube = arange(0, 2 * 3 * 4, "int16").reshape([2, 3, 4]);
  const cubeHtml = bundle(cube)["text/html"];
  assert.equal((cubeHtml.match(/<table>/g) ?? []).length, 2);
  assert.match(cubeHtml, /\[0, :, :\].*\[1, :, :\]/s);
  assert.deepEqual(cells(cubeHtml).slice(12, 14), ["12", "13"]);
});

test("the Jupyter bundle of a disposed view, and of something that only pretends to be a view, never throws", () => {
  const gone = zeros([2], "int8");
  gone.dispose();
  const b = bundle(gone);
  assert.match(b["text/plain"], /disposed/);
  assert.match(b["text/html"], /<p>\(disposed\)<\/p>/);
  assert.equal(cells(b["text/html"]).length, 0, "no values read");
  const impostor = Object.create(zeros([1], "int8")) as BufferView;
  assert.match(bundle(impostor)["text/plain"], /pretends to be a BufferView/);
});

test("HTML escaping covers every character HTML gives a meaning", () => {
  assert.equal(escapeHtml(`<a href="x">'&'</a>`), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  using v = zeros([1], "float32");
  assert.doesNotMatch(bundle(v)["text/html"].replace(/<\/?(div|pre|table|tr|td|p)[^>]*>/g, ""), /[<>]/);
});

test("toString() is console.log's header line", () => {
  using m = arange(6, "uint8").reshape([2, 3]);
  using t = m.transpose();
  for (const v of [m, t]) {
    assert.equal(String(v), inspected(v).split("\n")[0]);
    assert.equal(`${v}`, v.toString());
  }
  assert.equal(String(t), "BufferView<uint8> shape [3, 2], strides [1, 3], cpu:0, readwrite");
  const gone = zeros([2], "int8");
  gone.dispose();
  assert.equal(String(gone), "BufferView<int8> shape [2], strides [1], cpu:0, readwrite, disposed");
});

test("views nested in objects and arrays print with their values lined up under their header", () => {
  using m = arange(4, "int32").reshape([2, 2]);
  const text = inspected({ outer: { inner: m }, list: [m] });
  const lines = text.split("\n");
  const header = lines.findIndex((l) => l.includes("inner: BufferView<int32>"));
  assert.ok(header > 0, text);
  const indent = lines[header]!.indexOf("inner");
  assert.equal(lines[header + 1], `${" ".repeat(indent)}[[0, 1],`, text);
  assert.equal(lines[header + 2], `${" ".repeat(indent)} [2, 3]]${lines[header + 2]!.endsWith(",") ? "," : ""}`, text);
  const listed = lines.findIndex((l) => l.trimStart().startsWith("BufferView<int32>") && !l.includes("inner"));
  const listIndent = lines[listed]!.indexOf("BufferView");
  assert.equal(lines[listed + 1], `${" ".repeat(listIndent)}[[0, 1],`, text);
  assert.equal(inspected(m), "BufferView<int32> shape [2, 2], strides [2, 1], cpu:0, readwrite\n[[0, 1],\n [2, 3]]");
});
