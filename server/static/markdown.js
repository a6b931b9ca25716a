// A tiny Markdown renderer that builds DOM nodes. It never parses HTML: every piece of text
// becomes a text node, so model or tool output cannot inject markup or script. Links are
// kept only for http(s) and mailto URLs. Supported: paragraphs (newline = line break),
// headings, fenced code, block quotes, lists (nested by indenting), tables, rules, `code`,
// **bold**, *italic*, ~~strike~~, [links](https://…), <https://…>, bare https:// URLs, and
// images, which are shown as links (a page never loads what a model points it to).

const el = (tag, text) => {
  const node = document.createElement(tag);
  if (text != null) node.textContent = text;
  return node;
};

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+.#-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

/** Render Markdown `source` into a DocumentFragment of safe DOM nodes. */
export function renderMarkdown(source) {
  const lines = String(source ?? "").replace(/\r\n?/g, "\n").split("\n");
  const out = document.createDocumentFragment();
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) {
      i++;
    } else if ((m = line.match(FENCE))) {
      const body = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(m[1]); i++) body.push(lines[i]);
      i++;
      const code = el("code", body.join("\n"));
      if (m[2]) code.dataset.lang = m[2];
      out.append(wrap("pre", code));
    } else if ((m = line.match(HEADING))) {
      // Demoted two levels: an answer's "#" must not outrank the page's own headings.
      out.append(inline(el(`h${Math.min(m[1].length + 2, 6)}`), m[2]));
      i++;
    } else if (RULE.test(line)) {
      out.append(el("hr"));
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      for (; i < lines.length && QUOTE.test(lines[i]); i++) body.push(lines[i].replace(QUOTE, ""));
      out.append(wrap("blockquote", renderMarkdown(body.join("\n"))));
    } else if (ITEM.test(line)) {
      i = list(lines, i, out);
    } else if (line.includes("|") && TABLE_SEP.test(lines[i + 1] ?? "") && lines[i + 1].includes("-")) {
      i = table(lines, i, out);
    } else {
      const body = [];
      for (; i < lines.length && lines[i].trim() && !startsBlock(lines[i]); i++) body.push(lines[i]);
      out.append(inline(el("p"), body.join("\n")));
    }
  }
  return out;
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
    ITEM.test(line);
}

function wrap(tag, child) {
  const node = el(tag);
  node.append(child);
  return node;
}

function list(lines, i, out) {
  const first = lines[i].match(ITEM);
  const ordered = /\d/.test(first[2]);
  const indent = first[1].length;
  const items = [];
  for (; i < lines.length; i++) {
    const line = lines[i];
    const m = line.match(ITEM);
    const depth = line.length - line.trimStart().length;
    if (m && depth <= indent && /\d/.test(m[2]) === ordered) items.push([m[3]]);
    else if (line.trim() && depth > indent) {
      items.at(-1).push(line.slice(Math.min(depth, indent + 2))); // its text, or a sub-list
    } else if (!line.trim() && /^\s*([-*+]|\d{1,9}[.)])\s/.test(lines[i + 1] ?? "")) continue;
    else break;
  }
  const node = el(ordered ? "ol" : "ul");
  const start = parseInt(first[2], 10);
  if (ordered && start !== 1) node.start = start;
  for (const [text, ...rest] of items) {
    const nested = rest.findIndex((line) => ITEM.test(line));
    const li = inline(el("li"), [text, ...rest.slice(0, nested < 0 ? undefined : nested)]
      .map((line) => line.trim()).join("\n"));
    if (nested >= 0) li.append(renderMarkdown(rest.slice(nested).join("\n"))); // a sub-list
    node.append(li);
  }
  out.append(node);
  return i;
}

function table(lines, i, out) {
  const cells = (row) => row.trim().replace(/^\|/, "").replace(/\|$/, "").split("|");
  const node = el("table");
  const head = el("tr");
  for (const cell of cells(lines[i])) head.append(inline(el("th"), cell.trim()));
  node.append(wrap("thead", head));
  const body = el("tbody");
  for (i += 2; i < lines.length && lines[i].includes("|") && lines[i].trim(); i++) {
    const row = el("tr");
    for (const cell of cells(lines[i])) row.append(inline(el("td"), cell.trim()));
    body.append(row);
  }
  node.append(body);
  const scroller = wrap("div", node);
  scroller.className = "table-wrap";
  out.append(scroller);
  return i;
}

// One alternation, tried left to right at the earliest position: code, link, bold, italic,
// strike, bare URL. `_` and `__` only work at word edges (snake_case stays as it is). Each
// group's text is rendered recursively, never as markup.
const INLINE = new RegExp([
  /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/.source,                               // 1, 2: code
  /\[([^\]\n]+)\]\(\s*<?([^\s<>()]*(?:\([^\s()]*\)[^\s<>()]*)*)>?(?:\s+"[^"\n]*")?\s*\)/.source, // 3, 4
  /\*\*(?=\S)([\s\S]*?\S)\*\*/.source,                                        // 5: bold
  /(?<!\w)__(?=\S)([\s\S]*?\S)__(?!\w)/.source,                                // 6: bold
  /(?<!\*)\*(?=[^\s*])([\s\S]*?[^\s\\*])\*(?!\*)/.source,                      // 7: italic
  /(?<!\w)_(?=[^\s_])([\s\S]*?[^\s\\_])_(?!\w)/.source,                         // 8: italic
  /~~(?=\S)([\s\S]*?\S)~~/.source,                                            // 9: strike
  /(https?:\/\/[^\s<>"'`]*[^\s<>"'`.,;:!?)\]])/.source,                       // 10: bare URL
  /<((?:https?:\/\/|mailto:)[^\s<>]+)>/.source,                                // 11: <URL>
  /!\[([^\]\n]*)\]\(\s*<?([^\s<>()]*(?:\([^\s()]*\)[^\s<>()]*)*)>?(?:\s+"[^"\n]*")?\s*\)/
    .source,                                                                 // 12, 13: image
].join("|"));

/** Append `text` to `parent` with inline formatting; return `parent`. */
export function inline(parent, text) {
  let rest = text;
  while (rest) {
    const m = INLINE.exec(rest);
    if (!m) break;
    appendText(parent, rest.slice(0, m.index));
    if (m[1]) {
      parent.append(el("code", m[2].replace(/^ (.*) $/, "$1")));
    } else if (m[3]) {
      parent.append(link(m[4], m[3]));
    } else if (m[5] || m[6]) {
      parent.append(inline(el("strong"), m[5] ?? m[6]));
    } else if (m[7] || m[8]) {
      parent.append(inline(el("em"), m[7] ?? m[8]));
    } else if (m[9]) {
      parent.append(inline(el("del"), m[9]));
    } else if (m[10] || m[11]) {
      parent.append(link(m[10] ?? m[11], null));
    } else {
      parent.append(link(m[13], `Image: ${m[12] || m[13]}`));
    }
    rest = rest.slice(m.index + m[0].length);
  }
  appendText(parent, rest);
  return parent;
}

function appendText(parent, text) {
  const parts = text.split("\n");
  parts.forEach((part, index) => {
    if (index) parent.append(el("br"));
    if (part) parent.append(document.createTextNode(part));
  });
}

/** A link only for http(s) and mailto; anything else (javascript:, data:…) stays text. */
function link(url, label) {
  let parsed = null;
  try {
    parsed = new URL(url);
  } catch {
    parsed = null;
  }
  if (!parsed || !["http:", "https:", "mailto:"].includes(parsed.protocol)) {
    return document.createTextNode(label == null ? url : `${label} (${url})`);
  }
  const a = el("a");
  a.href = parsed.href;
  a.rel = "noopener noreferrer nofollow";
  a.target = "_blank";
  if (label == null) a.textContent = url;
  else inline(a, label);
  return a;
}
