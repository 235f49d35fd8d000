/**
 * Writes `y_mul_add.onnx`, the tiny model the ONNX Runtime example runs: `Y = A * B + A` on float32
 * tensors of shape [N, 3], encoded here as the protobuf bytes of an ONNX ModelProto (IR version 8,
 * opset 13) so that making it needs neither the `onnx` Python package nor a download.
 *
 * ```sh
 * deno run --allow-write examples/integrations/onnx_model.ts   # or: bun run examples/integrations/onnx_model.ts
 * ```
 * @module
 */
import { writeFileSync } from "node:fs";

const encoder = new TextEncoder();

function varint(n: number): number[] {
  const out: number[] = [];
  let rest = n;
  while (rest >= 0x80) {
    out.push((rest & 0x7f) | 0x80);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
  return out;
}
/** A varint field (wire type 0). */
function int(field: number, value: number): number[] {
  return [...varint(field << 3), ...varint(value)];
}
/** A length-delimited field (wire type 2): a string or an embedded message. */
function bytes(field: number, value: string | number[]): number[] {
  const body = typeof value === "string" ? [...encoder.encode(value)] : value;
  return [...varint((field << 3) | 2), ...varint(body.length), ...body];
}

const FLOAT = 1; // TensorProto.DataType.FLOAT

/** ValueInfoProto of a float32 tensor of shape [N, 3]. */
function floatNBy3(name: string): number[] {
  const dims = [...bytes(1, bytes(2, "N")), ...bytes(1, int(1, 3))]; // TensorShapeProto.dim
  const tensorType = [...int(1, FLOAT), ...bytes(2, dims)];
  return [...bytes(1, name), ...bytes(2, bytes(1, tensorType))];
}

/** NodeProto: inputs, outputs, op_type. */
function node(op: string, inputs: string[], output: string): number[] {
  return [...inputs.flatMap((i) => bytes(1, i)), ...bytes(2, output), ...bytes(3, `${op}_${output}`), ...bytes(4, op)];
}

/** The ModelProto bytes of `Y = A * B + A`. */
export function mulAddModel(): Uint8Array {
  const graph = [
    ...bytes(1, node("Mul", ["A", "B"], "P")),
    ...bytes(1, node("Add", ["P", "A"], "Y")),
    ...bytes(2, "y_mul_add"),
    ...bytes(11, floatNBy3("A")),
    ...bytes(11, floatNBy3("B")),
    ...bytes(12, floatNBy3("Y")),
  ];
  return new Uint8Array([
    ...int(1, 8), // ir_version
    ...bytes(2, "dlpack-ts examples"), // producer_name
    ...bytes(7, graph),
    ...bytes(8, [...bytes(1, ""), ...int(2, 13)]), // opset_import: default domain, opset 13
  ]);
}

/** Where the committed model lives. */
export const MODEL_PATH: string = decodeURIComponent(new URL("./y_mul_add.onnx", import.meta.url).pathname);

if (import.meta.main) {
  writeFileSync(MODEL_PATH, mulAddModel());
  console.log(`wrote ${MODEL_PATH} (${mulAddModel().length} bytes)`);
}
