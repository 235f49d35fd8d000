// `deno run -A bench/micro.ts --rounds=N`: the per-tensor hot paths against numpy in thread CPU time.
// Each round runs bench/micro_cases.ts under Deno, bench/micro_peers.py, then the cases under Bun;
// every figure is divided by numpy's in the same round, and the median ratio across rounds printed.
// `--base=<dir>`: another checkout (built, with this file's micro_cases.ts and cpu_time.ts in its bench/)
// runs in the same rounds too, for before/after figures measured side by side.
const root = new URL("../", import.meta.url).pathname;
const ROUNDS = Number(Deno.args.find((a) => a.startsWith("--rounds="))?.split("=")[1] ?? 5);
const BATCHES = Deno.args.find((a) => a.startsWith("--batches="))?.split("=")[1] ?? "15";
const tools = `${root}.tools/bin`;
const BASE = Deno.args.find((a) => a.startsWith("--base="))?.split("=")[1];
const env = { ...Deno.env.toObject(), PYTHONPATH: `${root}.tools/python/site` };

function run(cmd: string, args: string[], cwd = root): Record<string, number | string> {
  const out = new Deno.Command(cmd, { args, cwd, env, stdout: "piped", stderr: "piped" }).outputSync();
  if (out.code !== 0) throw new Error(`${cmd} ${args.join(" ")}: ${new TextDecoder().decode(out.stderr).slice(-2000)}`);
  return JSON.parse(new TextDecoder().decode(out.stdout).trim().split("\n").pop()!);
}

const refs: Record<string, string> = {
  import_number: "numpy_import",
  import_bigint: "numpy_import",
  import_native: "numpy_import",
  import_array: "numpy_import",
  export_dispose: "numpy_export",
  export_foreign: "numpy_export",
};
const ns: Record<string, number[]> = {};
const ratios: Record<string, number[]> = {};
const push = (m: Record<string, number[]>, k: string, v: number) => (m[k] ??= []).push(v);
for (let r = 0; r < ROUNDS; r++) {
  const deno = run(`${tools}/deno`, ["run", "-A", "bench/micro_cases.ts", BATCHES]);
  const py = run("python3", ["bench/micro_peers.py", BATCHES]);
  const bun = run(`${tools}/bun`, ["run", "bench/micro_cases.ts", BATCHES]);
  const sides: [string, Record<string, number | string>][] = [["deno", deno], ["bun", bun]];
  if (BASE !== undefined) {
    sides.push(["base deno", run(`${tools}/deno`, ["run", "-A", "bench/micro_cases.ts", BATCHES], BASE)]);
    sides.push(["base bun", run(`${tools}/bun`, ["run", "bench/micro_cases.ts", BATCHES], BASE)]);
  }
  for (const k of ["numpy_import", "numpy_export"]) push(ns, k, py[k] as number);
  for (const [side, res] of sides) {
    for (const [k, ref] of Object.entries(refs)) {
      push(ns, `${side}.${k}`, res[k] as number);
      push(ratios, `${side}.${k}`, (res[k] as number) / (py[ref] as number));
    }
  }
  console.error(`round ${r + 1}/${ROUNDS}`);
}
/** The median of the series `key` of `series` (every round pushed one value to each). */
const median = (series: Record<string, number[]>, key: string): number => {
  const v = series[key];
  if (v === undefined || v.length === 0) throw new Error(`no values for ${key}`);
  return [...v].sort((a, b) => a - b)[v.length >> 1]!;
};
console.log(
  `numpy import ${median(ns, "numpy_import").toFixed(0)} ns, __dlpack__ ${median(ns, "numpy_export").toFixed(0)} ns`,
);
for (const prefix of BASE === undefined ? [""] : ["", "base "]) {
  console.log(
    `${prefix === "" ? "this checkout" : `base (${BASE})`}\ncase               Deno ns  ratio   Bun ns  ratio`,
  );
  for (const k of Object.keys(refs)) {
    const d = `${prefix}deno.${k}`, b = `${prefix}bun.${k}`;
    console.log(
      `${k.padEnd(18)} ${median(ns, d).toFixed(0).padStart(7)} ${median(ratios, d).toFixed(2).padStart(6)} ` +
        `${median(ns, b).toFixed(0).padStart(7)} ${median(ratios, b).toFixed(2).padStart(6)}`,
    );
  }
}
