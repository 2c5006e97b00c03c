// Rules of this suite, checked on its own files: a helper is defined once (helpers.mjs,
// servers.mjs), and no test lets a fixed time pass other than through waitOutTtl (a ttl, a
// timeout or a stall that has to run its length); the others wait for the event (eventually,
// deadline, a promise). The one kind of pause allowed in a test is work under a lock, marked
// "(not a wait)" on its line.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

const DIR = import.meta.dirname;
/** Where the waits themselves, and the fakes that stall on purpose, live. */
const INFRASTRUCTURE = new Set(["helpers.mjs", "servers.mjs"]);
const files = readdirSync(DIR).filter((f) => f.endsWith(".mjs"));

/** The top-level functions and arrow functions `source` defines. */
function definitions(source) {
  const names = [];
  for (const m of source.matchAll(/^(?:export )?(?:async )?function\*? ?(\w+)|^(?:export )?const (\w+) = (?:async )?\(?[\w, ]*\)? =>/gm)) names.push(m[1] ?? m[2]);
  return names;
}

/** The lines (1-based) of `source` that wait a fixed time: sleep(ms) or setTimeout(fn, ms), unless marked "(not a wait)". */
export function sleeps(source) {
  const found = [];
  source.split("\n").forEach((line, i) => {
    const code = line.replace(/\/\/.*$/, "");
    if (/\b(sleep|setTimeout)\(/.test(code) && !line.includes("(not a wait)")) found.push(i + 1);
  });
  return found;
}

test("no helper is defined in two files", () => {
  const where = new Map();
  for (const f of files) for (const name of definitions(readFileSync(join(DIR, f), "utf8"))) where.set(name, [...(where.get(name) ?? []), f]);
  const twice = [...where].filter(([, fs]) => fs.length > 1);
  assert.deepEqual(twice, [], "defined in more than one file (define it once, in helpers.mjs)");
});

test("no fixed sleep outside waitOutTtl", () => {
  const found = files.filter((f) => !INFRASTRUCTURE.has(f) && f !== "suite-rules.test.mjs").map((f) => [f, sleeps(readFileSync(join(DIR, f), "utf8"))]);
  assert.deepEqual(found.filter(([, lines]) => lines.length), [], "fixed sleeps (use waitOutTtl, or wait for the event: eventually, deadline)");
});

test("the rules find what they look for", () => {
  assert.deepEqual(sleeps("await sleep(500);\n  setTimeout(() => void h.release(), 300);\n// sleep(1) in a comment\n"), [1, 2]);
  assert.deepEqual(sleeps("await sleep(1); // work under the lock (not a wait)\n"), []);
  assert.deepEqual(definitions("function a() {}\nexport async function b(x) {}\nconst c = async (r, key) => 1;\nconst d = 5;\n"), ["a", "b", "c"]);
});
