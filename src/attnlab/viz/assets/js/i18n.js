// attnlab view: the interface's words in the page's language, "en" (default) or "zh" (the JSON's `lang`,
// set by main.js before anything is drawn). Each module writes its words in English through t(key, ...args):
// the key is the English text, {0}, {1}, … its arguments, and ZH below holds each key's Simplified Chinese
// (tests/viz/js/i18n.test.js checks that every key the modules and page.html use has one). page.html's own
// text carries data-i18n (its text is the key) or data-i18n-title (its title is), translated once at start.
// Numbers, tokens and the maths are arguments, never translated; everything is written as text.
(function (AL) {
  "use strict";
  const ZH = {
    // page.html
    "layer": "层",
    "head": "头",
    "scale": "缩放系数",
    "any scale, 0 included": "任意缩放系数，包括 0",
    "colour relative to this head's largest weight": "颜色相对于这个头的最大权重",
    "arrows by": "连线粗细按",
    "(Kobayashi et al. 2020)": "（Kobayashi 等，2020）",
    "export PNG": "导出 PNG",
    "export SVG": "导出 SVG",
    "model view:": "模型视图：",
    "every layer (rows) and head (columns) at the model's scale; click one (or Tab to it and press Enter) to open it below":
      "每一层（行）的每个头（列），用模型自己的缩放系数；点击一个（或用 Tab 移到它上面再按 Enter），在下面打开它",
    "image:": "图像：",
    "the patches are the tokens; the overlay is the query's attention (this head) over them":
      "图块就是词元；叠加的颜色是查询在它们上面的注意力（这个头的）",
    "attention weights": "注意力权重",
    "head view:": "头视图：",
    "hover or click a token": "把指针移到一个词元上，或点击它",
    "step by step for query": "逐步计算：查询",
    "output": "输出",
    "the query's strongest key in this head": "这个头里，查询权重最大的键",
    // a model's notes (notes.js)
    "{0}, dequantized to {1}": "{0}，反量化为 {1}",
    "{0}, dequantized by transformers": "{0}，由 transformers 反量化",
    "cut to its first {0} of {1} tokens (the model's positions)": "截取了 {1} 个词元中的前 {0} 个（模型的位置数）",
    "cut to its first {0} of {1} tokens (the tokenizer's model_max_length)":
      "截取了 {1} 个词元中的前 {0} 个（分词器的 model_max_length）",
    "the text as a user's message in the model's chat template": "文本作为用户的一条消息，放进模型的聊天模板",
    "the text as a user's message in the model's chat template; the template changes the text, so its own tokens are not marked":
      "文本作为用户的一条消息，放进模型的聊天模板；模板改动了文本，所以它自己的词元没有标出",
    "+ {0} more layers": "还有 {0} 层（展开）",
    "fold to {0} layers": "收起，只显示 {0} 层",
    // the words between the parts of a line, and the names of the page's data
    ", ": "，",
    "; ": "；",
    "{0}: ": "{0}：",
    ": {0}": "：{0}",
    "{0} ({1})": "{0}（{1}）",
    "layer {0}": "第 {0} 层",
    "head {0}": "头 {0}",
    "{0}, head {1}": "{0}，头 {1}",
    "layer {0}, head {1}": "第 {0} 层，头 {1}",
    "token": "词元",
    "query": "查询",
    "key": "键",
    "tokens": "词元",
    "queries": "查询",
    "keys": "键",
    "encoder": "编码器",
    "decoder": "解码器",
    "self-attention": "自注意力",
    "cross-attention": "交叉注意力",
    // core
    "special token": "特殊词元",
    "put there by the chat template, not the user's words": "由聊天模板加入，不是用户写的",
    "holds bytes of {0}, split over several tokens": "含有 {0} 的一部分字节（它被拆成了几个词元）",
    "{0}‹piece of {1}›": "{0}‹{1} 的一部分›",
    // controls
    "; q, k, v rounded to 17 significant bits to fit the page": "；为装进页面，q、k、v 舍入到 17 位有效二进制位",
    "; q, k, v rounded to fit the page: {0} bits a number, each vector in steps of its largest |x| / {1}":
      "；为装进页面，q、k、v 做了舍入：每个数 {0} 位，每个向量以它最大的 |x| / {1} 为步长",
    "{0} tokens": "{0} 个词元",
    "{0} queries ({1}) × {2} keys ({3})": "{0} 个查询（{1}）× {2} 个键（{3}）",
    " sharing {0} key/value heads": "（共享 {0} 个键/值头）",
    " sharing {0} key/value head": "（共享 {0} 个键/值头）",
    "{0} attention modules": "{0} 个注意力模块",
    "{0} layers": "{0} 层",
    "{0} heads": "{0} 个头",
    "{0} head": "{0} 个头",
    "random weights (seed {0}), not trained: what a head shows here is chance, not something learned":
      "随机权重（种子 {0}），未经训练：这里的头显示的是偶然，不是学到的东西",
    "blue tokens: the chat template's, not the user's": "蓝色词元：来自聊天模板，不是用户写的",
    "Grey cells": "灰色格子",
    "Grey, struck-through cells": "划了斜线的灰色格子",
    "attention rules: {0}. {1} are masked keys.": "注意力规则：{0}。{1}是被屏蔽的键。",
    // heatmap
    "every {0} {1} labelled ({2} of {3}: tokens 0, {4}, {5}, …)": "每 {4} 个{1}标注一个（{3} 个中的 {2} 个：词元 0、{4}、{5}、…）",
    "axes: {0}; hover a cell for its query and key": "坐标轴：{0}；把指针移到格子上可看它的查询和键",
    "colour: 0 (dark) → {0} (bright), the largest weight of this head": "颜色：0（暗）→ {0}（亮），即这个头的最大权重",
    "colour: the weight itself, 0 (dark) → 1 (bright); uniform attention over L keys is 1/L":
      "颜色：权重本身，0（暗）→ 1（亮）；均匀分布在 L 个键上的注意力是 1/L",
    "; red: {0} weights that are not numbers (NaN: scores that overflowed)": "；红色：{0} 个不是数的权重（NaN：分数溢出了）",
    "rows: queries, columns: keys": "行：查询，列：键",
    "rows: {0} queries, {1} tokens; columns: {2} keys, {3} tokens": "行：{0} 个查询，{1}的词元；列：{2} 个键，{3}的词元",
    "masked ({0} cells): a rule (causal, the window, a mask) leaves this key out for this query, so its score is −∞ and its weight is exactly 0 (not a small weight: the key takes no part in the softmax)":
      "被屏蔽（{0} 个格子）：某条规则（因果、窗口、掩码）不让这个查询看这个键，所以它的分数是 −∞，权重恰好是 0" +
      "（不是一个很小的权重：这个键根本不参与 softmax）",
    " (masked: the key is ruled out)": "（被屏蔽：这个键被规则排除）",
    "head {0}, scale {1}: query {2} ({3}) → key {4} ({5}): {6}{7}": "头 {0}，缩放系数 {1}：查询 {2}（{3}）→ 键 {4}（{5}）：{6}{7}",
    // steps
    "② scaled": "② 缩放后",
    "masked": "被屏蔽",
    "scale·q·k_j": "缩放系数·q·k_j",
    " + bias_j (the float mask, ALiBi)": " + bias_j（浮点掩码、ALiBi）",
    "② here z_j = {0}": "② 这里 z_j = {0}",
    "③ adds the sink (logit {0}) to the softmax's sum, so the α_j sum to less than 1":
      "③ 把 sink（logit {0}）加进 softmax 的分母，所以各 α_j 之和小于 1",
    "; masked keys take no part in ③": "；被屏蔽的键不参与 ③",
    "the {0} keys of the largest α_j of {1} are listed (in order); ⑤ sums over all {1}":
      "列出了 {1} 个键中 α_j 最大的 {0} 个（按原来的顺序）；⑤ 对全部 {1} 个键求和",
    "⑤ output = Σ α_j·v_j = ": "⑤ 输出 = Σ α_j·v_j = ",
    // image
    "patch {0}: row {1}, column {2} (token {3})": "图块 {0}：第 {1} 行，第 {2} 列（词元 {3}）",
    "token {0}: not a patch": "词元 {0}：不是图块",
    "{0} patches ({1} × {2}), each a token: click one to make it the query":
      "{0} 个图块（{1} × {2}），每个都是一个词元：点击一个，让它成为查询",
    "{0} patches ({1} × {2}); this layer's queries are the {3} tokens": "{0} 个图块（{1} × {2}）；这一层的查询是{3}的词元",
    "this layer's keys are the {0} tokens, not the image's patches": "这一层的键是{0}的词元，不是图像的图块",
    "query {0} ({1}), head {2}: its weight on each patch, 0 (dark) → {3} (bright, the largest); the patches take {4} of it, the tokens apart {5}":
      "查询 {0}（{1}），头 {2}：它放在每个图块上的权重，0（暗）→ {3}（亮，最大值）；图块一共得到 {4}，" +
      "图块以外的词元得到 {5}",
    // model view
    "encoder self-attention: encoder tokens × encoder tokens": "编码器自注意力：编码器词元 × 编码器词元",
    "decoder self-attention: decoder tokens × decoder tokens": "解码器自注意力：解码器词元 × 解码器词元",
    "cross-attention: decoder tokens (rows, queries) × encoder tokens (columns, keys)":
      "交叉注意力：解码器词元（行，查询）× 编码器词元（列，键）",
    "open {0}, head {1}": "打开 {0}，头 {1}",
    // exports
    "scale {0}": "缩放系数 {0}",
    "random weights (seed {0})": "随机权重（种子 {0}）",
    // views/ablation
    "zero": "置零",
    "mean": "均值",
    "patch": "修补",
    " of \"{0}\"": "“{0}”的 ",
    "head ablation:": "头消融：",
    "each cell: {0}{1} when that head's output is replaced (mode {2}); {3}; grey: not ablated. Click a cell to open that head":
      "每个格子：把那个头的输出替换掉（模式：{2}）后，{1}{0}；{3}；灰色：没有消融。点击一个格子，打开那个头",
    "darker red: the output changes more": "红色越深：输出变化越大",
    "blue: the target loses probability, red: it gains": "蓝色：目标的概率下降，红色：上升",
    "{0} layers × {1} heads; colour −{2} (blue) → {2} (red), the largest |effect|; outlined: the head on show (layer {3}, head {4})":
      "{0} 层 × {1} 个头；颜色 −{2}（蓝）→ {2}（红），即最大的 |效应|；描边的：当前显示的头（第 {3} 层，头 {4}）",
    "{0} layers × {1} heads; colour 0 (white) → {2} (red), the largest KL; outlined: the head on show (layer {3}, head {4})":
      "{0} 层 × {1} 个头；颜色 0（白）→ {2}（红），即最大的 KL；描边的：当前显示的头（第 {3} 层，头 {4}）",
    "layer {0} is not traced on this page": "第 {0} 层没有在这个页面里追踪",
    "layer {0}, head {1}: {2}{3} = {4}": "第 {0} 层，头 {1}：{3}{2} = {4}",
    // views/flows
    "rollout": "展开",
    "flow": "流",
    "rollout and flow:": "注意力展开（rollout）与注意力流（flow）：",
    "Abnar & Zuidema 2020: row i of layer l is how much of each input token reaches position i after layer l (the residual as 0.5·I + 0.5·A, heads averaged); the matrix is the rollout, coloured from 0 to its largest entry; click a row to make it the query":
      "Abnar 与 Zuidema（2020）：第 l 层的第 i 行，是每个输入词元在第 l 层之后到达位置 i 的份额（残差记作 " +
      "0.5·I + 0.5·A，各头取平均）；矩阵是展开（rollout），颜色从 0 到它的最大元素；点击一行，让它成为查询",
    "after layer {0}": "第 {0} 层之后",
    "{0} after layer {1}, query {2} ({3})": "第 {1} 层之后的{0}，查询 {2}（{3}）",
    "{0} after layer {1}: position {2} ({3}) ← token {4} ({5}): {6}": "第 {1} 层之后的{0}：位置 {2}（{3}）← 词元 {4}（{5}）：{6}",
    // views/generation
    "generated tokens:": "生成的词元：",
    "rows: the {0} generated tokens; columns: the {1} prompt tokens, then the generated ones (after the red line). Row n is the weights of the decode step that chose the token, as the KV cache computed it: one query, the token before it, over every key before the new token (grey: keys it did not have yet)":
      "行：{0} 个生成的词元；列：{1} 个提示词元，然后是生成的词元（红线之后）。第 n 行是选出这个词元的那一步解码的" +
      "权重，按 KV 缓存算出：一个查询（它前面的那个词元），覆盖新词元之前的每个键（灰色：那时还没有的键）",
    " (the page's layer was not recorded)": "（页面上的这一层没有记录）",
    "; colour 0 (dark) → {0} (bright), this head's largest": "；颜色 0（暗）→ {0}（亮），即这个头的最大值",
    "generated token {0} ({1}), chosen by the query {2} ({3}) → key {4} ({5}): {6}":
      "生成的词元 {0}（{1}），由查询 {2}（{3}）选出 → 键 {4}（{5}）：{6}",
    "not yet a key": "那时还不是键",
    // views/head_types
    "previous": "前一个词元",
    "induction": "归纳",
    "sink": "汇聚点",
    "self": "自己",
    "cls": "[CLS]",
    "sep": "[SEP]",
    "punctuation": "标点",
    "head types:": "头的类型：",
    "each head of the model view is outlined and labelled by its dominant kind, the share of its attention on that kind of key ({0} or more; unlabelled: none reaches it)":
      "模型视图里的每个头都按它的主要类型描边、标注：它的注意力落在那一类键上的份额（{0} 或以上；没有标注：" +
      "没有哪一类达到）",
    "; induction on {0} random tokens repeated": "；归纳在重复两遍的 {0} 个随机词元上测量",
    // views/pair (and viz._views.ALIGNMENT_RULE, the page's data)
    "two texts:": "两段文本：",
    "each at the model's own scale (1/√d_k); B − A over the tokens that align ({0}); blue: A attends more, red: B attends more":
      "各自用模型自己的缩放系数（1/√d_k）；B − A 只在对齐的词元上（{0}）；蓝色：A 的注意力更多，红色：B 的更多",
    "tokens align by a longest common subsequence of the two texts' tokens; between two aligned tokens, gaps of equal length pair position by position (a substituted token, shown as A|B); other tokens are left out":
      "词元按两段文本词元的最长公共子序列对齐；两个对齐的词元之间，长度相同的空当按位置逐个配对（被替换的词元显示为 " +
      "A|B）；其余的词元不计",
    "text A": "文本 A",
    "text B": "文本 B",
    "B − A, aligned tokens": "B − A，对齐的词元",
    "this layer or head is not in both traces": "这一层或这个头不同时在两条轨迹里",
    "B − A: query {0} → key {1}: {2} − {3} = {4}": "B − A：查询 {0} → 键 {1}：{2} − {3} = {4}",
    "{0}: query {1} ({2}) → key {3} ({4}): {5}": "{0}：查询 {1}（{2}）→ 键 {3}（{4}）：{5}",
    // inpage_main (attnlab view --in-browser: the page that runs its model)
    "the model runs in this page": "模型就在这个页面里运行",
    "text": "文本",
    "scale of every layer's scores, in the forward": "每一层分数的缩放系数（在前向计算里）",
    "click a head to ablate it (its output zero); click again to restore it:": "点击一个头把它消融（输出置零）；再点击一次恢复：",
    "{0}: {1} layers × {2} heads, hidden {3}, weights in {4} — tokenized and run here, no server":
      "{0}：{1} 层 × {2} 个头，隐藏维度 {3}，权重为 {4}——分词和前向计算都在这里完成，不需要服务器",
    "layer {0}, head {1}: click to ablate it": "第 {0} 层，头 {1}：点击把它消融",
    "the text was cut to the model's {0} positions": "文本被截断到模型的 {0} 个位置",
    "{0} → {1}: ": "{0} → {1}：",
    "(layer {0}, head {1})": "（第 {0} 层，头 {1}）",
    "recomputed in this page in {0} ms (tokens and forward {1} ms)": "在这个页面里重新计算用了 {0} 毫秒（分词和前向计算 {1} 毫秒）",
    // the statistics page (length_*.js)
    "every head's weight by distance behind the query (log-spaced bins: 0, 1, 2–3, 4–7, …); click one to open it":
      "每个头的权重按与查询的距离分布（对数分箱：0、1、2–3、4–7……）；点击一个打开它",
    "the attention each token receives (Σ over the queries, log scale); wheel: zoom, drag: pan, click: go to the token":
      "每个词元收到的注意力（对所有查询求和，对数刻度）；滚轮：缩放，拖动：平移，点击：跳到该词元",
    "entropy of each query's weights (nats)": "每个查询的权重的熵（奈特）",
    "each query's weight on the first keys (sink share)": "每个查询落在最前面几个键上的权重（汇聚份额）",
    "the clicked query's top keys": "所点击查询的最大权重的键",
    "the text (click a token)": "文本（点击一个词元）",
    "positions": "位置",
    "whole text": "整段文本",
    "{0}: {1} tokens, {2} layers × {3} heads, statistics from the tiles": "{0}：{1} 个词元，{2} 层 × {3} 个头，由分块计算的统计量",
    "roles: a head is a sink head when at least half its weight is on the {0} keys it gives the most; else local when at least half is within 15 keys behind the query; else long-range when a query's top keys 256 or more behind it (those {0} aside) take a fifth of its weight or more, on average; else mixed":
      "角色：一个头至少一半的权重落在它给得最多的 {0} 个键上，是汇聚头；否则至少一半落在查询之前 15 个键以内，是局部头；" +
      "否则查询在 256 个或更远之前的最大权重的键（那 {0} 个除外）平均占它权重的五分之一或更多，是远程头；否则是混合头",
    "shown as carried: received attention in float16, entropy and shares in steps of 1/255, the top {0} keys of each query":
      "按所携带的精度显示：收到的注意力为 float16，熵与份额以 1/255 为步长，每个查询最大权重的前 {0} 个键",
    "local": "局部",
    "long-range": "远程",
    "mixed": "混合",
    "layer {0}, head {1}: {2} (sink {3}, local {4}, long-range {5})": "第 {0} 层，头 {1}：{2}（汇聚 {3}，局部 {4}，远程 {5}）",
    "{0} tokens: past the {1}-token page of weights, this page shows statistics computed exactly from the tiles":
      "{0} 个词元：超过了权重页面的 {1} 个词元上限，本页显示的是由分块精确计算的统计量",
    "the keys it gives the most: {0}": "它给得最多的键：{0}",
    "query {0} «{1}»: its top keys {2}": "查询 {0}「{1}」：最大权重的键 {2}",
  };
  const DICTIONARIES = { en: {}, zh: ZH };
  let words = DICTIONARIES.en; // the language's dictionary: set once, by useLanguage, before the page is drawn
  // the page's language: "en", "zh" (anything else: English)
  function useLanguage(lang) {
    words = DICTIONARIES[lang] ?? DICTIONARIES.en;
  }
  // `key`'s text in the page's language, each {n} the n-th argument as text (one pass: an argument that
  // reads "{1}" stays as it is)
  function t(key, ...args) {
    const text = Object.hasOwn(words, key) ? words[key] : key;
    return text.replace(/\{(\d+)\}/g, (whole, n) => (Number(n) < args.length ? String(args[n]) : whole));
  }
  // page.html's own text, once: each [data-i18n] element's text and each [data-i18n-title] element's title
  function translatePage(lang) {
    document.documentElement.lang = lang === "zh" ? "zh-CN" : "en";
    for (const e of document.querySelectorAll("[data-i18n]")) e.textContent = t(e.textContent);
    for (const e of document.querySelectorAll("[data-i18n-title]")) e.title = t(e.title);
  }
  // the names in the page's data: a layer's ("layer 3"; a module path stays as it is), a sequence's, a kind's
  const layerName = (name) => {
    const number = /^layer (\d+)$/.exec(name);
    return number ? t("layer {0}", number[1]) : name;
  };
  const sequenceName = (name) => ({
    tokens: t("tokens"), queries: t("queries"), keys: t("keys"), encoder: t("encoder"), decoder: t("decoder"),
  })[name] ?? name;
  const kindName = (kind) => ({
    self: t("self-attention"), encoder: t("encoder"), decoder: t("decoder"), cross: t("cross-attention"),
  })[kind] ?? kind;
  Object.assign(AL, { ZH, useLanguage, t, translatePage, layerName, sequenceName, kindName });
})(globalThis.attnlab ??= {});
