// The page's words: every key the modules (t("…")) and page.html (data-i18n, data-i18n-title) use has its
// Chinese, no Chinese is left over, each keeps its key's arguments, and t fills them in.
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { attnlab, JS, cases } = require("./load.js");

// every module of the page's script, by its path under assets/js
const modules = () => [
  ...fs.readdirSync(JS).filter((name) => name.endsWith(".js")),
  ...fs.readdirSync(path.join(JS, "views")).filter((name) => name.endsWith(".js")).map((name) => `views/${name}`),
].map((name) => [name, fs.readFileSync(path.join(JS, name), "utf-8")]);
const LITERAL = String.raw`"(?:[^"\\]|\\.)*"`;
// the keys of the modules' t(...) calls: a string literal, or literals joined by +
function scriptKeys() {
  const keys = new Set(), others = [];
  for (const [name, text] of modules()) {
    if (name === "i18n.js") continue; // t's own definition and the data's names (below)
    const calls = new RegExp(String.raw`(?<![.\w])t\((\s*${LITERAL}(?:\s*\+\s*${LITERAL})*)?`, "g");
    for (const [, literal] of text.matchAll(calls)) {
      if (literal === undefined) others.push(name);
      else keys.add(literal.trim().split(/\s*\+\s*(?=")/).map((part) => JSON.parse(part)).join(""));
    }
  }
  return { keys, others };
}
// page.html's own text: the keys of its data-i18n elements and data-i18n-title titles
function pageKeys() {
  const html = fs.readFileSync(path.join(JS, "..", "page.html"), "utf-8");
  const texts = [...html.matchAll(/<\w+(?:\s[^>]*)?\sdata-i18n(?:\s[^>]*)?>([^<]*)</g)].map((m) => m[1]);
  const titles = [...html.matchAll(/\stitle="([^"]*)"\s+data-i18n-title/g)].map((m) => m[1]);
  assert.equal(texts.length, html.match(/\sdata-i18n(?=[\s>])/g).length); // each holds text only
  assert.equal(titles.length, html.match(/\sdata-i18n-title/g).length);
  return [...texts, ...titles];
}
const i18nKeys = () => {
  const text = fs.readFileSync(path.join(JS, "i18n.js"), "utf-8").split("const DICTIONARIES")[1];
  return [...text.matchAll(new RegExp(String.raw`\bt\((${LITERAL})`, "g"))].map((m) => JSON.parse(m[1]));
};
const argumentsOf = (text) => new Set([...text.matchAll(/\{(\d+)\}/g)].map((m) => m[1]));

test("every key the page uses has its Chinese, and every Chinese a key that is used", () => {
  const { keys, others } = scriptKeys();
  assert.deepEqual(others, ["views/pair.js"]); // t(pair.rule): the data's one sentence, viz._views.ALIGNMENT_RULE
  const used = new Set([...keys, ...pageKeys(), ...i18nKeys(), cases().i18n.alignment_rule]);
  assert.ok(used.size > 100);
  const missing = [...used].filter((key) => !Object.hasOwn(attnlab.ZH, key));
  assert.deepEqual(missing, []);
  assert.deepEqual(Object.keys(attnlab.ZH).filter((key) => !used.has(key)), []);
  for (const [key, zh] of Object.entries(attnlab.ZH)) {
    assert.ok([...argumentsOf(zh)].every((n) => argumentsOf(key).has(n)), `${key}: ${zh}`);
    assert.match(zh, /[\u4e00-\u9fff“”（），：；]|^\[(CLS|SEP)\]$/, `${key}: no Chinese`);
  }
});

test("t fills in its arguments, in the page's language, and English is the key itself", () => {
  const { t, useLanguage, layerName, sequenceName } = attnlab;
  useLanguage("en");
  assert.equal(t("head {0}, scale {1}: query {2} ({3}) → key {4} ({5}): {6}{7}", 1, "0.5000", 2, "{1}", 0, "猫", "0.2500", ""),
    "head 1, scale 0.5000: query 2 ({1}) → key 0 (猫): 0.2500");
  assert.equal(t("a key without words of its own {0}", 3), "a key without words of its own 3");
  assert.equal(layerName("layer 3"), "layer 3");
  useLanguage("zh");
  try {
    assert.equal(t("head {0}", 3), "头 3");
    assert.equal(t("layer {0} is not traced on this page", 5), "第 5 层没有在这个页面里追踪");
    assert.equal(t("{0} after layer {1}, query {2} ({3})", t("rollout"), 2, 4, "it"), "第 2 层之后的展开，查询 4（it）");
    assert.equal(t("every {0} {1} labelled ({2} of {3}: tokens 0, {4}, {5}, …)", "13th", t("token"), 47, 600, 13, 26),
      "每 13 个词元标注一个（600 个中的 47 个：词元 0、13、26、…）");
    assert.equal(t("{0} ({1})", 3), "3（{1}）"); // an argument not given stays as it is
    assert.equal([layerName("layer 1"), layerName("bert.encoder.layer.1"), sequenceName("decoder")].join(" "),
      "第 1 层 bert.encoder.layer.1 解码器");
  } finally {
    useLanguage("en");
  }
  useLanguage("fr"); // not a language of the page's: English
  assert.equal(t("head {0}", 3), "head 3");
});
