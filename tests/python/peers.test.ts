// What the interop matrix (tests/python/matrix.test.ts) rests on: the peer installs of
// tools/python.sh (one pinned version per package, each peer in its own directory, reused, a failed
// install kept as the reason to skip), the child-process split, and the peer behaviours the matrix
// works around or documents, each shown here on its own.
import assert from "node:assert/strict";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { DLPackError, stats } from "../../mod.ts";
import { fromPython, toPython } from "../../python.ts";
import { missing, noPython, python } from "../support/python.ts";
import { repoRoot, runIsolated, spawn, test } from "../support/harness.ts";
import { childEnv, notInstalled, type Peer, PEERS } from "../support/peers.ts";

const peer = (name: string): Peer => PEERS.find((p) => p.name === name)!;

/** `name==version` lines of a requirements file. */
function pins(path: string): Array<{ name: string; version: string; line: string }> {
  return readFileSync(path, "utf8").split("\n").filter((l) => l.trim() !== "" && !l.startsWith("#")).map((line) => {
    const match = /^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)$/.exec(line.trim());
    assert.ok(match, `${path}: "${line}" is not name==version`);
    return { name: match[1]!.toLowerCase().replace(/[-_.]+/g, "-"), version: match[2]!, line };
  });
}

test("peers: every requirement file pins name==version, one version per package across files", () => {
  const files = [
    `${repoRoot}/tools/python-requirements.txt`,
    ...readdirSync(`${repoRoot}/tools/python-peers`).filter((f) => f.endsWith(".txt")).map((f) =>
      `${repoRoot}/tools/python-peers/${f}`
    ),
  ];
  const seen = new Map<string, { version: string; file: string }>();
  for (const file of files) {
    for (const pin of pins(file)) {
      const before = seen.get(pin.name);
      if (before !== undefined) {
        assert.equal(pin.version, before.version, `${pin.name}: ${before.file} and ${file} pin different versions`);
      }
      seen.set(pin.name, { version: pin.version, file });
    }
  }
  // Each peer of the table that is not in the base set has its file, and the file pins the peer.
  for (const p of PEERS.filter((p) => p.site !== "base")) {
    const file = `${repoRoot}/tools/python-peers/${p.site}.txt`;
    assert.ok(existsSync(file), `${p.name}: ${file}`);
    assert.ok(pins(file).length > 0, `${p.name}: ${file} pins nothing`);
  }
});

test("peers: a child process sees the base site and its own peer directory only", () => {
  const path = [
    "/r/.tools/python/site",
    "/r/.tools/python/peers/array-api-strict",
    "/r/.tools/python/peers/paddle",
    "/r/.tools/python/peers/tensorflow",
    "/r/.tools/python/peers/torch",
    "/elsewhere/site-packages",
  ];
  assert.equal(
    childEnv(peer("TensorFlow"), path).PYTHONPATH,
    "/r/.tools/python/site:/r/.tools/python/peers/tensorflow:/elsewhere/site-packages",
  );
  assert.equal(
    childEnv(peer("PaddlePaddle"), path).PYTHONPATH,
    "/r/.tools/python/site:/r/.tools/python/peers/paddle:/elsewhere/site-packages",
  );
});

// ---------------------------------------------------------------------------------------------
// tools/python.sh, offline: a local wheel stands in for a peer, and PIP_NO_INDEX keeps pip off the
// network.

const pipMissing = await (async (): Promise<string | false> => {
  const out = await spawn("python3", ["-m", "pip", "--version"]).catch(() => undefined);
  return out?.code === 0 ? false : "python3 with pip is not on PATH";
})();

const WHEEL = `
import base64, hashlib, sys, zipfile
name, version, out = sys.argv[1:4]
dist = f"{name}-{version}.dist-info"
files = {
    f"{name}/__init__.py": f"VERSION = '{version}'\\n",
    f"{dist}/METADATA": f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n",
    f"{dist}/WHEEL": "Wheel-Version: 1.0\\nGenerator: dlpack-ts tests\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
}
record = []
for path, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(text.encode())}")
record.append(f"{dist}/RECORD,,")
files[f"{dist}/RECORD"] = "\\n".join(record) + "\\n"
with zipfile.ZipFile(f"{out}/{name}-{version}-py3-none-any.whl", "w") as z:
    for path, text in files.items():
        z.writestr(path, text)
`;

/** A checkout with tools/python.sh, the base requirements, and the given peer files. */
function scratchCheckout(peers: Record<string, string>): string {
  const root = mkdtempSync(`${tmpdir()}/dlpack-python-sh-`);
  mkdirSync(`${root}/tools/python-peers`, { recursive: true });
  copyFileSync(`${repoRoot}/tools/python.sh`, `${root}/tools/python.sh`);
  copyFileSync(`${repoRoot}/tools/python-requirements.txt`, `${root}/tools/python-requirements.txt`);
  for (const [name, text] of Object.entries(peers)) writeFileSync(`${root}/tools/python-peers/${name}.txt`, text);
  mkdirSync(`${root}/wheels`);
  return root;
}

function pythonSh(root: string, args: string[]) {
  return spawn("sh", [`${root}/tools/python.sh`, ...args], {
    env: {
      HOME: root,
      PIP_NO_INDEX: "1",
      PIP_FIND_LINKS: `${root}/wheels`,
      PIP_NO_CACHE_DIR: "1",
      PIP_DISABLE_PIP_VERSION_CHECK: "1",
    },
    timeoutMs: 120_000,
  });
}

test(
  "python.sh: a peer goes whole into its own directory, is reused, and is replaced when its pins change",
  async () => {
    const root = scratchCheckout({ probe: "# a stand-in peer\ndlpack_probe==1.0\n" });
    try {
      for (const version of ["1.0", "1.1"]) {
        const made = await spawn("python3", ["-c", WHEEL, "dlpack_probe", version, `${root}/wheels`]);
        assert.equal(made.code, 0, made.stderr);
      }
      const first = await pythonSh(root, ["probe"]);
      assert.equal(first.code, 0, first.stderr);
      const dir = `${root}/.tools/python/peers/probe`;
      assert.equal(first.stdout.trim(), `${root}/.tools/python/site:${dir}`);
      assert.match(first.stderr, /installing peer probe \(1 packages\)/);
      assert.equal(readFileSync(`${dir}/dlpack_probe/__init__.py`, "utf8"), "VERSION = '1.0'\n");

      const again = await pythonSh(root, ["probe"]);
      assert.equal(again.code, 0, again.stderr);
      assert.equal(again.stdout, first.stdout);
      assert.doesNotMatch(again.stderr, /installing/, "reused, not reinstalled");

      writeFileSync(`${root}/tools/python-peers/probe.txt`, "dlpack_probe==1.1\n");
      const bumped = await pythonSh(root, ["probe"]);
      assert.equal(bumped.code, 0, bumped.stderr);
      assert.match(bumped.stderr, /installing peer probe/);
      assert.equal(readFileSync(`${dir}/dlpack_probe/__init__.py`, "utf8"), "VERSION = '1.1'\n");
      assert.deepEqual(readdirSync(`${root}/.tools/python/peers`), ["probe"], "no temporary directory left behind");
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  },
  { skip: pipMissing, timeout: 300_000 },
);

test("python.sh: a peer that fails to install leaves its reason, and the tests skip with it", async () => {
  const root = scratchCheckout({ broken: "no-such-package-dlpack-ts==0.0.1\n" });
  try {
    const out = await pythonSh(root, ["broken"]);
    assert.equal(out.code, 0, "a failed peer does not fail the script");
    assert.equal(out.stdout.trim(), `${root}/.tools/python/site`, "the failed peer is not on the path");
    assert.match(out.stderr, /peer broken could not be installed/);
    const reason = readFileSync(`${root}/.tools/python/peers/broken.failed`, "utf8");
    assert.match(reason, /pip install of tools\/python-peers\/broken.txt failed/);
    assert.match(reason, /no-such-package-dlpack-ts/);
    const skip = notInstalled({ ...peer("PyTorch"), name: "Broken", site: "broken" }, root);
    assert.match(skip, /^Broken: pip install of tools\/python-peers\/broken.txt failed/);
    assert.ok(!existsSync(`${root}/.tools/python/peers/broken`));
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}, { skip: pipMissing, timeout: 300_000 });

test("peers: a peer that is not installed skips saying how to install it", () => {
  const root = mkdtempSync(`${tmpdir()}/dlpack-peers-`);
  try {
    assert.match(
      notInstalled(peer("TensorFlow"), root),
      /tools\/python.sh, which installs tools\/python-peers\/tensorflow.txt/,
    );
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

// ---------------------------------------------------------------------------------------------
// Peer behaviours the matrix works around or documents.

/** Why a peer that runs in a child process cannot be tried here, or false. */
function childPeerSkip(p: Peer): string | false {
  if (noPython) return noPython;
  using found = python().eval(`__import__('importlib.util').util.find_spec('${p.module}') is not None`);
  return found.toJS() === true ? false : notInstalled(p);
}

const TF_CHILD = (aligned: boolean) => `
import { openPython, toPython } from "${repoRoot}/python.ts";
import { empty } from "${repoRoot}/mod.ts";
import { runtime } from "${repoRoot}/ffi/mod.ts";
const py = openPython();
py.exec("import tensorflow as tf\\nfrom tensorflow.experimental import dlpack as tfdl");
const x = ${aligned ? 'empty([6], "float64").array() as Float64Array' : "new Float64Array(16).subarray(1, 7)"};
x.set([1, 2, 3, 4, 5, 6]);
console.log("address mod 64:", runtime().addressOf(x) % 64);
const t = toPython(x, py);
py.set("t", t);
py.exec("y = tfdl.from_dlpack(t.__dlpack__())\\nz = tf.add(y, y)");
console.log("sum:", py.eval("str(z.numpy().tolist())").toJS());
`;

test("TensorFlow takes less-aligned memory zero-copy, then aborts the process in its first kernel over it", () => {
  const env = childEnv(peer("TensorFlow"));
  const aligned = runIsolated(TF_CHILD(true), { env, allowAll: true });
  assert.equal(aligned.code, 0, aligned.stderr.slice(-2000));
  assert.match(aligned.stdout, /address mod 64: 0\n/);
  assert.match(aligned.stdout, /sum: \[2\.0, 4\.0, 6\.0, 8\.0, 10\.0, 12\.0\]/);
  // Why the matrix hands TensorFlow 64-byte-aligned allocations only.
  const unaligned = runIsolated(TF_CHILD(false), { env, allowAll: true });
  assert.match(unaligned.stdout, /address mod 64: [1-9]\d*\n/);
  assert.notEqual(unaligned.code, 0, "TensorFlow aborts");
  assert.match(unaligned.stderr, /Check failed: IsAligned\(\)/);
}, { skip: childPeerSkip(peer("TensorFlow")), timeout: 300_000 });

test("TensorFlow and PaddlePaddle cannot share a process (paddle loaded after tensorflow crashes)", () => {
  const tf = childEnv(peer("TensorFlow")).PYTHONPATH;
  const paddle = childEnv(peer("PaddlePaddle")).PYTHONPATH;
  const source = `
import { openPython } from "${repoRoot}/python.ts";
const py = openPython();
py.exec("import tensorflow");
console.log("tensorflow loaded");
py.exec("import paddle");
console.log("paddle loaded");
`;
  const out = runIsolated(source, {
    env: { PYTHONPATH: `${tf}:${paddle}`, TF_CPP_MIN_LOG_LEVEL: "3" },
    allowAll: true,
  });
  assert.match(out.stdout, /tensorflow loaded/);
  assert.doesNotMatch(out.stdout, /paddle loaded/, "if this now works, the two may share the matrix process");
  assert.notEqual(out.code, 0);
}, {
  skip: childPeerSkip(peer("TensorFlow")) || childPeerSkip(peer("PaddlePaddle")),
  timeout: 300_000,
});

const noTorch = noPython || (missing("torch") && notInstalled(peer("PyTorch")));

test("torch imports read-only data as a writable tensor (it ignores READ_ONLY) and writes through it", () => {
  const py = python();
  py.exec("import torch");
  const x = new Float32Array([1, 2, 3]);
  {
    using t = toPython(x, py, { readonly: true });
    py.set("t", t);
  }
  py.exec("y = torch.from_dlpack(t)\ny[0] = 7\ndel y, t");
  assert.equal(x[0], 7);
}, { skip: noTorch });

test("torch's float4_e2m1fn_x2 (DLPack lanes 2) is refused with a clear error, and the tensor stays whole", () => {
  const py = python();
  py.exec("import torch\nfp4 = torch.tensor([[0x21, 0x43, 0x65]], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)");
  const before = stats();
  using obj = py.eval("fp4");
  for (const maxVersion of [[1, 3] as const, null]) {
    assert.throws(
      () => fromPython(obj, { maxVersion }),
      (e: unknown) =>
        e instanceof DLPackError && /vector dtypes are not supported \(code 17, bits 4, lanes 2/.test(e.message),
    );
  }
  using bytes = py.eval("fp4.view(torch.uint8).tolist()");
  assert.deepEqual(bytes.toJS(), [[0x21, 0x43, 0x65]]);
  assert.equal(stats().imports, before.imports);
  py.exec("del fp4");
}, { skip: noTorch });
