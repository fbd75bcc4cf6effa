// The page's pure modules, loaded into the one namespace object as the page inlines them (in order),
// and the cases tests/viz/test_page_js.py computed with NumPy (the JSON named by ATTNLAB_JS_CASES).
const path = require("node:path");
const fs = require("node:fs");

const JS = path.join(__dirname, "..", "..", "..", "src", "attnlab", "viz", "assets", "js");
for (const name of ["core", "i18n", "decoding", "maths", "colours", "state", "answer", "fold", "notes"]) require(path.join(JS, `${name}.js`));

function cases() {
  const file = process.env.ATTNLAB_JS_CASES;
  if (!file) throw new Error("ATTNLAB_JS_CASES: the cases' JSON, written by tests/viz/test_page_js.py");
  return JSON.parse(fs.readFileSync(file, "utf-8"));
}
// x and y equal, NaN to NaN, ±∞ to itself, else within `tolerance` relative (0: exactly)
function close(x, y, tolerance = 0) {
  if (Number.isNaN(y)) return Number.isNaN(x);
  if (!Number.isFinite(y)) return x === y;
  return Math.abs(x - y) <= tolerance * Math.max(1, Math.abs(y));
}
// the JSON's numbers: null for NaN, "inf"/"-inf" for ±∞
const number = (x) => (x === null ? NaN : x === "inf" ? Infinity : x === "-inf" ? -Infinity : x);

module.exports = { attnlab: globalThis.attnlab, JS, cases, close, number };
