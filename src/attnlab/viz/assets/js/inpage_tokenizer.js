// attnlab view --in-browser: BERT's tokenizer in the page, as the tokenizers library runs a tokenizer.json
// of a BertNormalizer, a BertPreTokenizer and a WordPiece model (attnlab.viz._inpage writes its settings).
// The special tokens ([CLS], [MASK]) are found in the raw text first; each stretch between them is
// cleaned (NUL, U+FFFD and other-category characters dropped, whitespace made a space), CJK characters
// set apart by spaces, accents stripped (NFD, nonspacing marks dropped) and lowercased one character at a
// time where the settings say; split on whitespace and punctuation (each mark a word); each word cut into
// the longest vocabulary pieces from its start (the rest prefixed ##), or [UNK] where one piece is not
// in the vocabulary or the word is longer than max_chars characters. Pure: tested by
// tests/viz/js/inpage.test.js against the tokenizer attnlab runs in Python.
(function (AL) {
  "use strict";
  const WHITESPACE = /^[\t\n\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u000b\u000c]$/u;
  const OTHER = /^\p{C}$/u; // Cc, Cf, Cs, Co, Cn: what clean_text drops (but tab, newline and return)
  const PUNCTUATION = /^(?:[!-/:-@[-`{-~]|\p{P})$/u;
  const NONSPACING = /\p{Mn}/gu;
  const CJK = [[0x4e00, 0x9fff], [0x3400, 0x4dbf], [0x20000, 0x2a6df], [0x2a700, 0x2b73f], [0x2b740, 0x2b81f],
    [0x2b820, 0x2ceaf], [0xf900, 0xfaff], [0x2f800, 0x2fa1f]];
  const isCJK = (c) => { const o = c.codePointAt(0); return CJK.some(([lo, hi]) => lo <= o && o <= hi); };
  const isSpace = (c) => WHITESPACE.test(c);

  // a tokenizer over `spec`: {vocab: [token by id], unk, prefix, max_chars, lowercase, strip_accents,
  // chinese, clean, cls, sep (ids), specials: [[text, id], …], max_length}
  function createTokenizer(spec) {
    const index = new Map(spec.vocab.map((token, id) => [token, id]));
    const specials = [...spec.specials].sort((a, b) => b[0].length - a[0].length); // the longest match first
    const specialIds = new Set(spec.specials.map(([, id]) => id));
    function normalized(text) {
      let out = "";
      for (const c of text) {
        const o = c.codePointAt(0);
        if (spec.clean && (o === 0 || o === 0xfffd || (OTHER.test(c) && c !== "\t" && c !== "\n" && c !== "\r"))) continue;
        const d = spec.clean && isSpace(c) ? " " : c;
        out += spec.chinese && isCJK(d) ? ` ${d} ` : d;
      }
      if (spec.strip_accents) out = out.normalize("NFD").replace(NONSPACING, "");
      if (spec.lowercase) out = Array.from(out, (c) => c.toLowerCase()).join(""); // one character at a time, as Rust's
      return out;
    }
    function words(text) {
      const found = [];
      let word = "";
      for (const c of normalized(text)) {
        if (isSpace(c) || PUNCTUATION.test(c)) {
          if (word) found.push(word);
          if (!isSpace(c)) found.push(c);
          word = "";
        } else word += c;
      }
      if (word) found.push(word);
      return found;
    }
    function pieces(word) {
      const chars = Array.from(word);
      if (chars.length > spec.max_chars) return [spec.unk];
      const ids = [];
      for (let start = 0; start < chars.length;) {
        let end = chars.length, id = null;
        for (; end > start; end--) {
          const piece = (start > 0 ? spec.prefix : "") + chars.slice(start, end).join("");
          if (index.has(piece)) { id = index.get(piece); break; }
        }
        if (id === null) return [spec.unk];
        ids.push(id);
        start = end;
      }
      return ids;
    }
    // the ids of `text`, [CLS] … [SEP] around them (each special token's text in it its own id)
    function encode(text) {
      const ids = [];
      let rest = text;
      while (rest) {
        let at = -1, match = null;
        for (const [content, id] of specials) {
          const n = rest.indexOf(content);
          if (n >= 0 && (at < 0 || n < at)) { at = n; match = [content, id]; }
        }
        const stretch = at < 0 ? rest : rest.slice(0, at);
        for (const word of words(stretch)) ids.push(...pieces(word));
        if (match === null) break;
        ids.push(match[1]);
        rest = rest.slice(at + match[0].length);
      }
      return [spec.cls, ...ids, spec.sep];
    }
    // a token as the page shows it: a piece without its ##, a special token by its name
    const shown = (id) => {
      const token = spec.vocab[id];
      return !specialIds.has(id) && token.startsWith(spec.prefix) && token.length > spec.prefix.length
        ? token.slice(spec.prefix.length) : token;
    };
    return { encode, shown, isSpecial: (id) => specialIds.has(id), words, normalized };
  }
  Object.assign(AL, { createTokenizer });
})(globalThis.attnlab ??= {});
