// Code blocks: syntax colours from the vendored highlight.js, and copy buttons.
// highlight.js returns HTML; it is parsed in an inert <template> and rebuilt keeping only
// text and <span class="hljs-…">, so model text still never becomes markup of its own.

import hljs from "./vendor/highlight.min.js";

const AUTO_MAX_CHARS = 5000; // guessing the language of a long block costs too much
const AUTO_MIN_RELEVANCE = 5; // below this, prose would be coloured as code
const TOKEN_CLASS = /^(?:hljs|language)-[\w-]+(?: [\w-]+)*$/;

/** Copy `text` to the clipboard; resolve true when it worked. */
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // no clipboard API (plain http on another host): the old way
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.append(area);
    area.select();
    const done = document.execCommand("copy");
    area.remove();
    return done;
  }
}

/** A small "Copy" button that copies what `getText()` returns and says so. */
export function copyButton(getText, label = "Copy") {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "copy";
  button.textContent = label;
  button.addEventListener("click", async () => {
    const done = await copyText(getText());
    button.textContent = done ? "Copied" : "Copy failed";
    button.dataset.copied = String(done);
    setTimeout(() => {
      button.textContent = label;
      delete button.dataset.copied;
    }, 1500);
  });
  return button;
}

/** Colour and add a copy button to every `pre > code` inside `root` (idempotent). */
export function decorateCode(root) {
  for (const code of root.querySelectorAll("pre > code")) {
    const pre = code.parentElement;
    if (pre.dataset.decorated) continue;
    pre.dataset.decorated = "1";
    const source = code.textContent;
    highlight(code, source);
    const bar = document.createElement("div");
    bar.className = "code-bar";
    const lang = document.createElement("span");
    lang.className = "code-lang";
    lang.textContent = code.dataset.lang || code.dataset.guessed || "";
    bar.append(lang, copyButton(() => source));
    pre.before(bar);
    const box = document.createElement("div");
    box.className = "code-block";
    bar.before(box);
    box.append(bar, pre);
  }
}

function highlight(code, source) {
  const lang = code.dataset.lang;
  let result = null;
  try {
    if (lang && hljs.getLanguage(lang)) {
      result = hljs.highlight(source, { language: lang, ignoreIllegals: true });
    } else if (!lang && source.length <= AUTO_MAX_CHARS) {
      const guess = hljs.highlightAuto(source);
      if (guess.relevance >= AUTO_MIN_RELEVANCE) {
        result = guess;
        code.dataset.guessed = guess.language;
      }
    }
  } catch {
    result = null; // a grammar failing must not break the answer: it stays plain
  }
  if (!result) return;
  const template = document.createElement("template");
  template.innerHTML = result.value;
  code.replaceChildren(...rebuild(template.content));
  code.classList.add("hljs");
}

function* rebuild(parent) {
  for (const node of parent.childNodes) {
    if (node.nodeType === Node.TEXT_NODE) {
      yield document.createTextNode(node.data);
    } else if (node.nodeName === "SPAN" && TOKEN_CLASS.test(node.className)) {
      const span = document.createElement("span");
      span.className = node.className;
      span.append(...rebuild(node));
      yield span;
    } else {
      yield document.createTextNode(node.textContent);
    }
  }
}
