// validate.mjs — checks Kubernetes manifests against the Kubernetes API's schemas, offline.
//
//   node deploy/k8s/check/validate.mjs [--json] FILE.yaml...
//
// Every YAML document of every FILE must be an object of a known apiVersion and kind, and must
// pass two checks:
//   schema   the JSON schema of its kind from the Kubernetes OpenAPI document, as npm
//            kubernetes-models@5.1.0 compiles it (types, required fields, enums, formats such as
//            int32 and int-or-string), through the model's validate();
//   strict   no field that the kind does not define, at any depth: those schemas leave
//            additionalProperties open, and a misspelt field (readinesProbe) would otherwise
//            pass and be dropped by the API server. The defined fields are read from the
//            models' type declarations (the .d.ts beside each model), following each field's
//            type into nested objects, arrays and maps.
// Errors name the file, the document's kind and name, and the field's path. Exit status: 0
// when everything passes, 1 otherwise, 2 for bad usage. With --json, the documents are printed
// as one JSON array (for tests that check the manifests against mesh.toml with jq).
//
// deploy/setup.sh installs the pinned packages (npm ci in deploy/k8s/check).
import { readFileSync, existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const models = join(here, "node_modules", "kubernetes-models");
const machinery = join(here, "node_modules", "@kubernetes-models", "apimachinery");

// ---------------------------------------------------------------- the type declarations

// Splits an interface body into its properties: name -> type text. Types may span lines and
// nest braces ({ [key: string]: string; }), so this reads at brace/angle depth 0 only.
function properties(body) {
  const props = new Map();
  const re = /"([^"]+)"\??:\s*/y;
  let i = 0;
  while (i < body.length) {
    if (/\s/.test(body[i])) {
      i++;
      continue;
    }
    if (body.startsWith("/**", i)) {
      i = body.indexOf("*/", i) + 2;
      continue;
    }
    re.lastIndex = i;
    const m = re.exec(body);
    if (!m) throw new Error(`cannot read the declaration at: ${body.slice(i, i + 60)}`);
    let j = re.lastIndex;
    let depth = 0;
    for (; j < body.length; j++) {
      const c = body[j];
      if (c === "{" || c === "<" || c === "(") depth++;
      else if (c === "}" || c === ">" || c === ")") depth--;
      else if (c === ";" && depth === 0) break;
    }
    props.set(m[1], body.slice(re.lastIndex, j).trim());
    i = j + 1;
  }
  return props;
}

const declCache = new Map();

// The declaration file's interface: { props, imports } (props null for a type alias such as
// IntOrString or Quantity: a leaf).
function declaration(file) {
  if (declCache.has(file)) return declCache.get(file);
  const text = readFileSync(file, "utf8");
  const imports = new Map();
  for (const m of text.matchAll(/import \{ (\w+) \} from "([^"]+)";/g)) {
    imports.set(m[1], m[2]);
  }
  let props = null;
  const head = /export interface I\w+(?: extends [\w, ]+)? \{/.exec(text);
  if (head) {
    let depth = 1;
    let j = head.index + head[0].length;
    const start = j;
    for (; depth > 0; j++) {
      if (text[j] === "{") depth++;
      else if (text[j] === "}") depth--;
    }
    props = properties(text.slice(start, j - 1));
  }
  const d = { file, props, imports };
  declCache.set(file, d);
  return d;
}

function importedFile(from, spec) {
  if (spec.startsWith("@kubernetes-models/apimachinery/")) {
    return join(machinery, spec.slice("@kubernetes-models/apimachinery/".length) + ".d.ts");
  }
  if (spec.startsWith(".")) return resolve(dirname(from), spec.replace(/\.js$/, ".d.ts"));
  return null;
}

// A field's type: { ref: file } for an object, { array: type }, { map: type }, or { leaf }.
function fieldType(decl, text) {
  let m;
  if ((m = /^(IIoK8s\w+)$/.exec(text))) {
    const spec = decl.imports.get(m[1]);
    const file = spec && importedFile(decl.file, spec);
    return file && existsSync(file) ? { ref: file } : { leaf: true };
  }
  if ((m = /^Array<(.*)>$/s.exec(text))) return { array: fieldType(decl, m[1].trim()) };
  if ((m = /^\{\s*\[key: string\]:\s*(.*?);?\s*\}$/s.exec(text))) {
    return { map: fieldType(decl, m[1].trim()) };
  }
  return { leaf: true };
}

const field = (path, key) => (path ? `${path}.${key}` : key);

// Reports every field of value that the declaration at file does not define.
function strict(value, file, path, errors) {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return;
  const decl = declaration(file);
  if (decl.props === null) return;
  for (const [key, v] of Object.entries(value)) {
    const text = decl.props.get(key);
    if (text === undefined) {
      const known = [...decl.props.keys()].join(", ");
      errors.push(`${field(path, key)}: unknown field (${path || "the object"} takes: ${known})`);
      continue;
    }
    walk(v, fieldType(decl, text), field(path, key), errors);
  }
}

function walk(value, type, path, errors) {
  if (type.ref) strict(value, type.ref, path, errors);
  else if (type.array && Array.isArray(value)) {
    value.forEach((v, i) => walk(v, type.array, `${path}[${i}]`, errors));
  } else if (type.map && value && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) walk(v, type.map, field(path, k), errors);
  }
}

// ---------------------------------------------------------------- the documents

async function modelOf(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" || !/^\w+$/.test(kind)) {
    return null;
  }
  const dir = join(models, ...apiVersion.split("/"));
  const file = join(dir, `${kind}.js`);
  if (!/^[a-z0-9.]+(\/v\w+)?$/.test(apiVersion) || !existsSync(file)) return null;
  const mod = await import(file);
  return { Model: mod[kind], decl: join(dir, `${kind}.d.ts`) };
}

async function check(file, errors, docs) {
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    errors.push(`${file}: ${e.message}`);
    return;
  }
  const parsed = parseAllDocuments(text, { prettyErrors: true, uniqueKeys: true });
  for (const doc of Array.isArray(parsed) ? parsed : [parsed]) {
    if (doc.errors.length > 0) {
      for (const e of doc.errors) errors.push(`${file}: ${e.message}`);
      continue;
    }
    const obj = doc.toJS();
    if (obj === null) continue;
    const line = doc.contents?.range ? text.slice(0, doc.contents.range[0]).split("\n").length : 1;
    const where = `${file}:${line}: ${obj.kind ?? "?"}/${obj.metadata?.name ?? "?"}`;
    const model = await modelOf(obj.apiVersion, obj.kind);
    if (model === null) {
      errors.push(`${where}: unknown apiVersion/kind ${obj.apiVersion}/${obj.kind}`);
      continue;
    }
    if (!obj.metadata?.name) errors.push(`${where}: metadata.name is required`);
    try {
      new model.Model(obj).validate();
    } catch (e) {
      for (const m of e.message.split(", ")) {
        errors.push(`${where}: ${m.replace(/^data\//, "").replaceAll("/", ".")}`);
      }
    }
    const strictErrors = [];
    strict(obj, model.decl, "", strictErrors);
    for (const m of strictErrors) errors.push(`${where}: ${m}`);
    docs.push(obj);
  }
}

const args = process.argv.slice(2);
const json = args[0] === "--json";
const files = json ? args.slice(1) : args;
if (files.length === 0) {
  process.stderr.write("usage: node validate.mjs [--json] FILE.yaml...\n");
  process.exit(2);
}
if (!existsSync(models)) {
  process.stderr.write(`validate: ${models} is missing: run npm ci in ${here}\n`);
  process.exit(2);
}
const errors = [];
const docs = [];
for (const f of files) await check(f, errors, docs);
if (errors.length > 0) {
  for (const e of errors) process.stderr.write(`${e}\n`);
  process.exit(1);
}
if (json) process.stdout.write(`${JSON.stringify(docs, null, 1)}\n`);
else process.stderr.write(`validate: ${docs.length} objects in ${files.length} files: valid\n`);
