// attnlab view: a model's notes (the JSON's `notes`, English as attnlab writes them: "Q4_1, dequantized to
// float32", "cut to its first 512 of 600 tokens (the model's positions)", "the text as a user's message in
// the model's chat template") in the page's language: each known form read back into its words and
// arguments (numbers, names, quantizations: never translated); a note of another form stays as it is.
(function (AL) {
  "use strict";
  const { t } = AL;
  const CHAT = "the text as a user's message in the model's chat template";
  const FORMS = [
    [/^(\S+), dequantized to (\w+)$/, (how, dtype) => t("{0}, dequantized to {1}", how, dtype)],
    [/^(\S+), dequantized by transformers$/, (how) => t("{0}, dequantized by transformers", how)],
    [/^cut to its first (\d+) of (\d+) tokens \(the model's positions\)$/,
      (n, of) => t("cut to its first {0} of {1} tokens (the model's positions)", n, of)],
    [/^cut to its first (\d+) of (\d+) tokens \(the tokenizer's model_max_length\)$/,
      (n, of) => t("cut to its first {0} of {1} tokens (the tokenizer's model_max_length)", n, of)],
    [new RegExp(`^${CHAT}$`), () => t("the text as a user's message in the model's chat template")],
    [new RegExp(`^${CHAT}; the template changes the text, so its own tokens are not marked$`),
      () => t("the text as a user's message in the model's chat template; the template changes the text, so its " +
        "own tokens are not marked")],
  ];
  function noteText(note) {
    for (const [form, words] of FORMS) {
      const match = form.exec(note);
      if (match) return words(...match.slice(1));
    }
    return note;
  }
  Object.assign(AL, { noteText });
})(globalThis.attnlab ??= {});
